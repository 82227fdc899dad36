"""The viewer in a real browser: Debian's headless Chromium, driven by Playwright, against
`turnlog serve` (uvicorn) on 127.0.0.1, over a real SQLite file."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from server_procs import die_with_parent, free_ports
from turnlog import ImagePart, Message, ReasoningPart, SessionEvent, SessionService, SqliteStore
from turnlog.cli import main

CHROMIUM = (
    os.environ.get("TURNLOG_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
)
HOSTILE_ID = 'evil"><img src=x onerror=window.pwned=1>'
SCRIPT = "<script>window.pwned=1</script>"
BIG_EVENTS = 100_000
FIRST_SCREEN_BUDGET = 1.0  # seconds, the budget for the 100,000-event session


SVG = b'<svg xmlns="http://www.w3.org/2000/svg" onload="window.pwned=4"><rect width="9"/></svg>'


def _png() -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (3, 2), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def _build(path: Path) -> None:
    assert main(["--db", str(path), "demo"]) == 0
    with SessionService(SqliteStore(path)) as svc:
        svc.create(HOSTILE_ID, metadata={"note": f"{SCRIPT}<img src=x onerror=window.pwned=2>"})
        svc.append_message(HOSTILE_ID, Message.user(f"hi {SCRIPT}"))
        svc.append_message(HOSTILE_ID, Message.assistant("<img src=x onerror=window.pwned=3>"))
        svc.create("parts")
        svc.append_message(
            "parts",
            Message.user(
                "Look:",
                ImagePart("image/png", data=_png(), width=3, height=2, filename="dot.png"),
                ImagePart("image/svg+xml", data=SVG, filename="evil.svg"),
                ImagePart("image/png", url="https://example.com/cat.png"),
            ),
        )
        svc.append_message(
            "parts",
            Message.assistant(parts=[ReasoningPart("anthropic", "secret musing"), "A dot."]),
        )
        svc.create("big")
        events = []
        for n in range(BIG_EVENTS // 2):
            events.append(SessionEvent.for_message("big", Message.user(f"question {n}")))
            events.append(SessionEvent.for_message("big", Message.assistant(f"answer {n}")))
        for at in range(0, len(events), 10_000):
            svc.append_events("big", events[at : at + 10_000], at)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    db = tmp_path_factory.mktemp("browser") / "viewer.db"
    _build(db)
    (port,) = free_ports(1)
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnlog.cli", "--db", str(db), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent(signal.SIGTERM),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(base + "/api/sessions?limit=1", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    output = proc.communicate()
                    raise AssertionError(f"turnlog serve did not start: {output}") from None
                time.sleep(0.1)
        yield base, proc.pid
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert "127.0.0.1" in err and "read-only" in err


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    problems: list[str] = []

    def console(msg: ConsoleMessage) -> None:
        if msg.type in ("error", "warning"):
            problems.append(f"console {msg.type}: {msg.text}")

    pg.on("console", console)
    pg.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    pg.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    pg.problems = problems  # type: ignore[attr-defined]
    yield pg
    context.close()
    assert problems == []


def test_pages_load_with_no_console_error(server: tuple[str, int], page: Page) -> None:
    base, _ = server
    for path in (
        "/",
        "/?q=demo",
        "/sessions/demo-summary",
        "/sessions/demo-summary/view",
        "/sessions/demo-summary/view?at=5",
        "/sessions/demo-summary/diff?a=1&b=40",
        "/sessions/demo-files",
    ):
        response = page.goto(base + path)
        assert response is not None and response.status == 200, path
        assert page.title().endswith("turnlog viewer")


def test_navigation_and_time_travel(server: tuple[str, int], page: Page) -> None:
    base, _ = server
    page.goto(base + "/")
    page.fill("#q", "demo-summary")
    page.click("button[type=submit]")
    page.click("a[href='/sessions/demo-summary']")
    assert page.locator("h1").inner_text() == "demo-summary"
    assert page.locator(".card.boundary").count() >= 1
    fold = page.locator("details.fold").first
    assert not fold.locator(".ev").first.is_visible()
    fold.locator("summary").click()
    assert fold.locator(".ev").first.is_visible()
    page.click("#current-view")
    assert page.locator("h1").inner_text().startswith("Current view")
    current = page.locator("#view .ev").count()
    page.fill("#at", "6")
    page.click("#go")
    assert page.locator("h1").inner_text().startswith("The view after seq 6")
    assert "No compaction by seq 6" in page.content()
    early = page.locator("#view .ev").count()
    assert 0 < early <= 6
    page.click("#step-fwd")
    assert page.locator("h1").inner_text().startswith("The view after seq 7")
    page.click("#step-back")
    assert page.locator("h1").inner_text().startswith("The view after seq 6")
    assert current != early or current > 0
    page.goto(base + "/sessions/demo-summary")
    page.locator("a.diff-before").first.click()
    assert page.locator("h1").inner_text().startswith("The view after seq")
    assert page.locator("#left .ev").count() > 0


def test_hostile_content_runs_no_script(server: tuple[str, int], page: Page) -> None:
    base, _ = server
    sid = quote(HOSTILE_ID, safe="")
    for path in (f"/sessions/{sid}", f"/sessions/{sid}/view", "/?q=evil"):
        page.goto(base + path)
        assert page.evaluate("typeof window.pwned") == "undefined", path
        assert page.locator("img").count() == 0, path
    page.goto(base + f"/sessions/{sid}")
    assert SCRIPT in page.locator("#timeline").inner_text()
    assert page.locator("h1").inner_text() == HOSTILE_ID


def test_an_image_part_renders_under_the_policy(server: tuple[str, int], page: Page) -> None:
    base, _ = server
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => "
        "(window.violations = window.violations || [])"
        ".push(e.violatedDirective + ' ' + e.blockedURI))"
    )
    for path in ("/sessions/parts", "/sessions/parts/view"):
        page.goto(base + path, wait_until="load")
        images = page.locator("img")
        assert images.count() == 1, path  # the PNG; not the SVG, not the URL
        assert images.first.get_attribute("src") == "/sessions/parts/events/1/parts/1"
        assert images.first.evaluate("img => img.complete && img.naturalWidth") == 3
        assert page.evaluate("window.violations || []") == [], path
        assert page.evaluate("typeof window.pwned") == "undefined", path
        reasoning = page.locator("details.reasoning")
        assert reasoning.count() == 1 and not reasoning.first.evaluate("d => d.open")
        assert not page.get_by_text("secret musing").is_visible()
        reasoning.locator("summary").click()
        assert page.get_by_text("secret musing").is_visible()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_the_100000_event_session_opens_in_under_a_second(
    server: tuple[str, int], page: Page
) -> None:
    base, pid = server
    page.goto(base + "/sessions/demo-summary")  # a warm browser, as a person has one
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        page.goto(base + "/sessions/big", wait_until="load")
        page.locator("#seq-1").wait_for()
        timings.append(time.perf_counter() - started)
    nav = page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
    runs = ", ".join(f"{t:.3f}" for t in timings)
    print(
        f"\n100,000-event session, first screen: {min(timings):.3f} s "
        f"(runs {runs}; load at {nav:.0f} ms)"
    )
    assert f"of {BIG_EVENTS:,}" in page.content()
    assert max(timings) < FIRST_SCREEN_BUDGET, timings
    # Deep pages cost the same, and reading them does not grow the server.
    before = _rss_kb(pid)
    for after in range(0, BIG_EVENTS, BIG_EVENTS // 20):
        started = time.perf_counter()
        page.goto(base + f"/sessions/big?after={after}")
        assert time.perf_counter() - started < FIRST_SCREEN_BUDGET
        assert page.locator(f"#seq-{after + 1}").count() == 1
    page.goto(base + f"/sessions/big?after={BIG_EVENTS - 100}")
    assert page.locator(".pager .next").count() == 0
    grown = _rss_kb(pid) - before
    print(f"server RSS grew {grown} KiB over 21 pages spread across the log")
    assert grown < 30_000
