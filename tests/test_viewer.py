"""The web viewer over a real SQLite store, through httpx against the ASGI app: pages, JSON
endpoints, time travel, hostile content, the token, paging."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from turnlog import CompactionBoundary, Message, SessionEvent, SessionService, SqliteStore
from turnlog.cli import main
from turnlog.errors import InvalidInput
from turnlog.events import ToolCall, ToolResult
from turnlog.viewer import create_app
from turnlog.viewer.app import CSP, TOKEN_COOKIE
from turnlog.viewer.data import log_at

HOSTILE_ID = 'x"><script>window.pwned=1</script>'
SCRIPT = "<script>window.pwned=1</script>"
IMG = "<img src=x onerror=window.pwned=1>"
LOCAL = "http://127.0.0.1:8765"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("viewer") / "viewer.db"
    assert main(["--db", str(path), "demo"]) == 0
    with SessionService(SqliteStore(path)) as svc:
        svc.create(HOSTILE_ID, metadata={SCRIPT: IMG, "owner": "</td><b>bold</b>"})
        svc.append_message(HOSTILE_ID, Message.system(f"system {IMG}"))
        svc.append_message(HOSTILE_ID, Message.user(f"hello {SCRIPT} and {IMG}"))
        call = ToolCall(id=f"call-{IMG}", name=f"tool{SCRIPT}", arguments='{"q": "' + IMG + '"}')
        svc.append_message(HOSTILE_ID, Message.assistant(tool_calls=[call]))
        result = ToolResult(call_id=call.id, name=call.name, content=f"{SCRIPT}{IMG}")
        svc.append_message(HOSTILE_ID, Message.tool(result))
        svc.append_message(HOSTILE_ID, Message.assistant(f"done {SCRIPT}"))
        for n in range(250):
            svc.create(f"bulk-{n:03d}", metadata={"team": "blue" if n % 2 else "red"})
    return path


@pytest.fixture(scope="module")
def client(db: Path):
    with TestClient(create_app(f"sqlite:///{db}"), base_url=LOCAL) as c:
        yield c


def ids(events: list[dict]) -> list[str]:
    return [e["id"] for e in events]


def test_sessions_page_lists_sessions_newest_first_with_paging(client: TestClient) -> None:
    page = client.get("/api/sessions", params={"limit": 100}).json()
    assert len(page["sessions"]) == 100
    assert page["next_offset"] == 100
    first = page["sessions"][0]
    assert set(first) == {"id", "created_at", "expires_at", "metadata", "version", "view_tokens"}
    created = [s["created_at"] for s in page["sessions"]]
    assert created == sorted(created, reverse=True)
    rest = client.get("/api/sessions", params={"offset": 100, "limit": 500}).json()
    everything = ids(page["sessions"]) + ids(rest["sessions"])
    assert rest["next_offset"] is None
    assert len(everything) == len(set(everything)) == 250 + 5 + 1
    html = client.get("/").text
    assert 'id="next"' in html and "demo-summary" not in html  # the newest 50 are bulk ones


def test_search_filters_on_id_and_metadata(client: TestClient) -> None:
    found = client.get("/api/sessions", params={"q": "DEMO-", "limit": 500}).json()["sessions"]
    assert sorted(ids(found)) == sorted(
        ["demo-files", "demo-summary", "demo-token-budget", "demo-last-turns", "demo-last-events"]
    )
    demo = {s["id"]: s for s in found}["demo-summary"]
    assert demo["version"] > 0 and demo["view_tokens"] > 0
    blue = client.get("/api/sessions", params={"q": "blue", "limit": 500}).json()["sessions"]
    assert len(blue) == 125
    html = client.get("/", params={"q": "demo-summary"}).text
    assert 'href="/sessions/demo-summary"' in html
    assert "No sessions" in client.get("/", params={"q": "nothing-like-this"}).text


def test_message_search_finds_covered_events_and_escapes_them(client: TestClient) -> None:
    found = client.get("/api/search", params={"q": "payment pool"}).json()
    assert found["hits"] and found["query"] == "payment pool"
    sessions = {h["session_id"] for h in found["hits"]}
    assert "demo-files" in sessions
    one = client.get("/api/search", params={"q": "payment pool", "session": "demo-summary"})
    assert {h["session_id"] for h in one.json()["hits"]} <= {"demo-summary"}
    html = client.get("/search", params={"q": "hello script"}).text
    assert SCRIPT not in html and "&lt;script&gt;" in html
    hit = client.get("/api/search", params={"q": "hello"}).json()["hits"]
    assert any(h["session_id"] == HOSTILE_ID and h["seq"] == 2 for h in hit)
    assert "Type words" in client.get("/search").text
    assert "No message matches" in client.get("/search", params={"q": "zeppelinxq"}).text
    assert 'action="/search"' in client.get("/").text


def test_timeline_shows_boundaries_folds_covered_events_and_pairs_tools(
    client: TestClient, db: Path
) -> None:
    with SessionService(SqliteStore(db)) as svc:
        log = svc.events("demo-summary")
        view = svc.view("demo-summary")
    page = client.get("/api/sessions/demo-summary/log", params={"limit": 500}).json()
    assert [e["seq"] for e in page["events"]] == [e.seq for e in log]
    in_view = {e.id for e in view}
    for e in page["events"]:
        if e["type"] == "MESSAGE":
            assert (e["id"] in in_view) == (e["status"] not in ("covered", "cleared")), e
    boundary = next(e for e in page["events"] if e["type"] == "COMPACTION")
    assert boundary["boundary"]["covered"] > 0 and boundary["boundary"]["strategy"]
    assert page["boundaries"][0]["seq"] == boundary["seq"]
    summary = [e for e in page["events"] if e.get("summary")]
    assert summary and all(e["status"] == "summary" for e in summary)
    calls = [c for e in page["events"] for c in e.get("tool_calls", ())]
    assert calls and all(c["result_seq"] is not None for c in calls)
    html = client.get("/sessions/demo-summary").text
    assert '<details class="fold">' in html and "covered events" in html
    assert 'class="card boundary"' in html and "tokens saved" in html
    assert 'id="current-view" href="/sessions/demo-summary/view"' in html
    assert "→ result #" in html and "← call #" in html


def test_a_summary_shows_its_files(client: TestClient) -> None:
    page = client.get("/api/sessions/demo-files/log", params={"limit": 500}).json()
    files = [e["files"] for e in page["events"] if e.get("files")]
    assert files and any(f.get("modified") for f in files)
    html = client.get("/sessions/demo-files").text
    assert 'class="files"' in html and "Files modified:" in html


def test_current_view_is_the_stores_view_with_its_token_total(client: TestClient, db: Path) -> None:
    for sid in ("demo-summary", "demo-last-turns", "demo-files"):
        with SessionService(SqliteStore(db)) as svc:
            view = svc.view(sid)
        got = client.get(f"/api/sessions/{sid}/view").json()
        assert ids(got["events"]) == [e.id for e in view]
        assert got["total_events"] == len(view) and got["view_tokens"] > 0
        assert got["at"] is None
        html = client.get(f"/sessions/{sid}/view").text
        assert "Current view" in html and f"{got['view_tokens']:,}" in html


def test_time_travel_projects_the_log_as_it_was_at_every_seq(client: TestClient, db: Path) -> None:
    with SessionService(SqliteStore(db)) as svc:
        log = svc.events("demo-summary")
    writes = set()  # the seqs the log ended at after each write (a compaction is one write)
    at = 0
    while at < len(log):
        at += 1
        if log[at - 1].type.name == "COMPACTION":
            at += len(CompactionBoundary.from_event(log[at - 1]).appended_event_ids)
        writes.add(at)
    for at in range(len(log) + 1):
        got = client.get("/api/sessions/demo-summary/view", params={"at": at, "limit": 500})
        end = min(w for w in writes | {0} if w >= at)
        assert got.json()["at"] == end
        expected = CompactionBoundary.project(log[:end])
        assert ids(got.json()["events"]) == [e.id for e in expected], at
    before = log.index(next(e for e in log if e.type.name == "COMPACTION"))
    html = client.get("/sessions/demo-summary/view", params={"at": before}).text
    assert f"The view after seq {before}" in html and "No compaction by seq" in html
    html = client.get("/sessions/demo-summary/view", params={"at": before + 1}).text
    assert "In force: compaction at seq" in html


def test_diff_between_two_boundaries(client: TestClient, db: Path) -> None:
    with SessionService(SqliteStore(db)) as svc:
        log = svc.events("demo-summary")
    seqs = [e.seq for e in log if e.type.name == "COMPACTION"]
    a, b = seqs[0] - 1, seqs[0]
    got = client.get("/api/sessions/demo-summary/diff", params={"a": a, "b": b}).json()
    first = {e.id for e in CompactionBoundary.project(log[:a])}
    assert got["b"] > b  # the boundary's summary events came in the same write
    second = {e.id for e in CompactionBoundary.project(log[: got["b"]])}
    assert set(ids(got["left"])) == first - second and got["left"]
    assert set(ids(got["entered"])) == second - first
    assert got["tokens_b"] < got["tokens_a"]
    calls = [c for e in got["left"] for c in e.get("tool_calls", ())]
    assert calls and all(c["result_seq"] is not None for c in calls)
    assert "→ result #<" not in client.get(f"/sessions/demo-summary/diff?a={a}&b={b}").text
    assert "Left the view" in client.get(f"/sessions/demo-summary/diff?a={a}&b={b}").text
    assert client.get("/api/sessions/demo-summary/diff?a=1").status_code == 400
    with SessionService(SqliteStore(db)) as svc:
        for at in range(len(log) + 1):  # the log is read once, up to the later seq
            got = client.get(
                "/api/sessions/demo-summary/diff", params={"a": at, "b": len(log)}
            ).json()
            assert got["a"] == log_at(svc, "demo-summary", at)[1] and got["b"] == len(log), at
            back = client.get(
                "/api/sessions/demo-summary/diff", params={"a": len(log), "b": at}
            ).json()
            assert (back["a"], back["b"]) == (len(log), got["a"])
            assert ids(back["left"]) == ids(got["entered"]), at


def test_hostile_content_is_escaped_everywhere(client: TestClient) -> None:
    from urllib.parse import quote

    sid = quote(HOSTILE_ID, safe="")
    pages = [
        client.get("/"),
        client.get("/", params={"q": "script"}),
        client.get(f"/sessions/{sid}"),
        client.get(f"/sessions/{sid}/view"),
        client.get(f"/sessions/{sid}/view", params={"at": 3}),
        client.get(f"/sessions/{sid}/diff", params={"a": 0, "b": 5}),
    ]
    for response in pages:
        assert response.status_code == 200, response.url
        html = response.text
        assert "<script" not in html.lower(), response.url
        assert "<img" not in html.lower(), response.url
        assert "<b>bold" not in html
        assert response.headers["content-security-policy"] == CSP
        assert "script-src" not in CSP and "default-src 'none'" in CSP
    timeline = pages[2].text
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in timeline
    assert "&lt;img src=x onerror=window.pwned=1&gt;" in timeline
    assert "tool&lt;script&gt;" in timeline
    assert re.search(r'href="/sessions/x%22%3E%3Cscript%3E', pages[1].text)
    api = client.get(f"/api/sessions/{sid}/log").json()
    assert api["session"]["id"] == HOSTILE_ID
    assert api["events"][1]["text"] == f"hello {SCRIPT} and {IMG}"


def test_no_write_endpoint(client: TestClient) -> None:
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        for url in ("/", "/api/sessions", "/api/sessions/demo-summary/log", "/sessions/x"):
            assert client.request(method, url).status_code == 405, (method, url)


def test_errors_are_one_clear_answer(client: TestClient) -> None:
    missing = client.get("/api/sessions/nope/log")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]
    assert client.get("/sessions/nope").status_code == 404
    assert "no session" in client.get("/sessions/nope/view").text
    for params in ({"after": "x"}, {"after": -1}, {"limit": 0}):
        bad = client.get("/api/sessions/demo-summary/log", params=params)
        assert bad.status_code == 400, params
    assert client.get("/sessions/demo-summary/view", params={"at": "soon"}).status_code == 400


def test_log_pages_chain_and_are_capped(client: TestClient) -> None:
    seen: list[int] = []
    after: int | None = 0
    while after is not None:
        page = client.get("/api/sessions/demo-summary/log", params={"after": after, "limit": 7})
        body = page.json()
        seen += [e["seq"] for e in body["events"]]
        after = body["next_after"]
    assert seen == list(range(1, body["version"] + 1))
    jumped = client.get("/api/sessions/demo-summary/log", params={"seq": 17, "limit": 5}).json()
    assert [e["seq"] for e in jumped["events"]] == [17, 18, 19, 20, 21]
    assert 'id="seq-17"' in client.get("/sessions/demo-summary", params={"seq": 17}).text
    assert client.get("/api/sessions/demo-summary/log", params={"seq": 0}).status_code == 400
    capped = client.get("/api/sessions/bulk-000/log", params={"limit": 10_000}).json()
    assert capped["limit"] == 500


TOKEN = "s3cret-0123456789abcdef"


def test_token_is_required_when_set(db: Path) -> None:
    with TestClient(create_app(f"sqlite:///{db}", token=TOKEN), follow_redirects=False) as c:
        assert c.get("/").status_code == 401
        assert c.get("/api/sessions").status_code == 401
        assert c.get("/", params={"token": "wrong"}).status_code == 401
        assert c.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/api/sessions", headers={"Authorization": "Bearer s3cret"}).status_code == 401
        assert c.get("/api/sessions", headers={"Authorization": f"Bearer {TOKEN}"}).is_success
        first = c.get(f"/sessions/demo%2Fx/view?at=3&token={TOKEN}&limit=5")
        assert first.status_code == 303  # the token leaves the address bar
        assert first.headers["location"] == "/sessions/demo%2Fx/view?at=3&limit=5"
        cookie = first.headers["set-cookie"]
        assert cookie.startswith(f"{TOKEN_COOKIE}={TOKEN};")
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        assert first.headers["content-security-policy"] == CSP
        assert c.get("/", params={"token": TOKEN}).headers["location"] == "/"
        assert c.get("/sessions/demo-summary").status_code == 200  # the cookie carries it
        c.cookies.clear()
        assert c.get("/sessions/demo-summary").status_code == 401
        c.cookies.set(TOKEN_COOKIE, "s3cret")
        assert c.get("/sessions/demo-summary").status_code == 401


def test_tokens_shorter_than_16_characters_are_refused(db: Path) -> None:
    for bad in ("", "t", "s3cret", "a" * 15, "a b" * 8, "x;y" * 8, "é" * 16):
        with pytest.raises(InvalidInput, match="at least 16"):
            create_app(f"sqlite:///{db}", token=bad)
    create_app(f"sqlite:///{db}", token="a" * 16)


class _Failing:
    """A real store whose session list fails with an error turnlog does not know."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def list_sessions(self, *, limit=None):
        raise RuntimeError("the disk fell off")

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_every_response_carries_the_security_headers(db: Path) -> None:
    from turnlog.viewer.app import SECURITY_HEADERS

    def secured(response) -> None:
        for name, value in SECURITY_HEADERS:
            assert response.headers.get(name) == value, (response.status_code, name)

    with TestClient(create_app(f"sqlite:///{db}", token=TOKEN), follow_redirects=False) as c:
        secured(c.get("/"))  # 401
        secured(c.get("/?token=" + TOKEN))  # 303
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for url, status in (
            ("/", 200),
            ("/api/sessions", 200),
            ("/nowhere", 404),
            ("/sessions/demo-summary/events/2/text", 200),
            ("/sessions/demo-summary/events/999/text", 404),
            ("/sessions/nope/events/1/text", 404),
            ("/sessions/demo-summary/events/2/parts/0", 404),
        ):
            got = c.get(url, headers=auth)
            assert got.status_code == status
            secured(got)
        secured(c.post("/", headers=auth))  # 405
    with TestClient(create_app(f"sqlite:///{db}"), base_url="http://evil.example") as c:
        got = c.get("/")
        assert got.status_code == 421
        secured(got)
    svc = SessionService(_Failing(SqliteStore(db)))  # type: ignore[arg-type]
    with TestClient(create_app(svc), base_url=LOCAL, raise_server_exceptions=False) as c:
        got = c.get("/")
        assert got.status_code == 500 and "the disk fell off" not in got.text
        secured(got)


def test_only_loopback_names_are_answered_without_a_token(db: Path) -> None:
    svc = SessionService(SqliteStore(db))
    app = create_app(svc)
    for base in ("http://127.0.0.1:8765", "http://localhost", "http://[::1]:9000"):
        with TestClient(app, base_url=base) as c:
            assert c.get("/api/sessions").status_code == 200, base
    for base in ("http://evil.example", "http://127.0.0.1.evil.example", "http://10.0.0.5:8765"):
        with TestClient(app, base_url=base) as c:
            refused = c.get("/api/sessions")
            assert refused.status_code == 421, base
            assert "token" in refused.json()["error"]
    with TestClient(create_app(f"sqlite:///{db}", token=TOKEN), base_url="http://viewer.lan") as c:
        got = c.get("/api/sessions", headers={"Authorization": f"Bearer {TOKEN}"})
        assert got.status_code == 200
    svc.close()


class _PagesOnly:
    """A real store that refuses whole-log reads, to prove a page reads only a page."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def events(self, session_id, flt=None):
        assert flt is not None and flt.event_types is not None, "a whole-log read"
        return self._store.events(session_id, flt)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_a_log_page_reads_only_that_page(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "long.db")
    with SessionService(store) as svc:
        svc.create("long")
        events = []
        for n in range(3000):
            events.append(SessionEvent.for_message("long", Message.user(f"q{n}")))
            events.append(SessionEvent.for_message("long", Message.assistant(f"a{n}")))
        svc.append_events("long", events, 0)
        app = create_app(SessionService(_PagesOnly(store)))  # type: ignore[arg-type]
        with TestClient(app, base_url=LOCAL) as c:
            page = c.get("/api/sessions/long/log", params={"after": 5000, "limit": 50}).json()
            assert [e["seq"] for e in page["events"]] == list(range(5001, 5051))
            assert page["next_after"] == 5050 and page["prev_after"] == 4950
            html = c.get("/sessions/long", params={"after": 5950}).text
            assert "#6000" in html and 'class="next"' not in html
            view = c.get("/api/sessions/long/view", params={"at": 10}).json()
            assert [e["seq"] for e in view["events"]] == list(range(1, 11))


def test_serve_help_and_refusals(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    assert "read-only" in out.lower() and "127.0.0.1" in out
    assert main(["--db", str(db), "serve", "--host", "0.0.0.0", "--token", "short"]) == 2
    assert "at least 16" in capsys.readouterr().err
    assert main(["--db", str(db), "serve", "--port", "0"]) == 2
    assert main(["--db", str(db), "serve", "--token", " "]) == 2
    assert main(["--db", str(db.parent / "missing.db"), "serve"]) == 1


def test_the_sessions_list_is_usable_with_100000_sessions() -> None:
    import time
    from datetime import UTC, datetime, timedelta

    from turnlog import MemoryStore, Session

    store = MemoryStore()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(100_000):
        created = t0 + timedelta(seconds=n)
        store.create_session(Session(f"s-{n:06d}", created, metadata={"user": f"u{n % 977}"}))
    with TestClient(create_app(SessionService(store)), base_url=LOCAL) as c:
        for params, first, count in (
            ({}, "s-099999", 50),
            ({"offset": 99_990}, "s-000009", 10),
            ({"q": "U976", "limit": 500}, "s-099653", 102),
            ({"q": "s-000123"}, "s-000123", 1),
        ):
            started = time.perf_counter()
            page = c.get("/api/sessions", params=params).json()
            assert time.perf_counter() - started < 3.0, params
            assert page["sessions"][0]["id"] == first, params
            assert len(page["sessions"]) == count, params
        assert 'id="next"' in c.get("/", params={"offset": 50}).text


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_numbers_past_64_bits_are_a_400_not_a_500(tmp_path: Path, store: str) -> None:
    from turnlog import MemoryStore

    svc = SessionService(MemoryStore() if store == "memory" else SqliteStore(tmp_path / "v.db"))
    svc.create("s")
    svc.append_message("s", Message.user("hi"))
    with TestClient(create_app(svc), base_url=LOCAL, raise_server_exceptions=False) as c:
        for url, name in (
            ("/api/sessions?offset=9223372036854775807", "offset"),
            ("/api/sessions?offset=9223372036854775806&limit=1", "offset"),
            ("/api/sessions?offset=99999999999999999999999", "offset"),
            ("/api/sessions?q=s&offset=9223372036854775808", "offset"),
            ("/api/sessions?limit=9223372036854775808", "limit"),
            ("/api/sessions/s/log?after=9223372036854775808", "after"),
            ("/api/sessions/s/log?seq=9223372036854775808", "seq"),
            ("/api/sessions/s/view?offset=9223372036854775808", "offset"),
            ("/api/sessions/s/view?at=9223372036854775808", "at"),
            ("/api/sessions/s/diff?a=0&b=9223372036854775808", "b"),
            ("/api/sessions/s/diff?a=0&b=1&offset=9223372036854775808", "offset"),
            ("/api/sessions/s/diff?a=0&b=1&limit=9223372036854775808", "limit"),
        ):
            got = c.get(url)
            assert got.status_code == 400, (url, got.text)
            assert got.json()["error"].startswith(name), (url, got.text)
            assert c.get(url.replace("/api", "")).status_code == 400, url
        for url in ("/api/sessions?offset=1000", "/api/sessions/s/log?after=9223372036854775807"):
            assert c.get(url).status_code == 200, url
    svc.close()


def _serve(db: Path, *args: str, env: dict[str, str] | None = None):
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    from server_procs import free_ports

    (port,) = free_ports(1)
    environ = {k: v for k, v in os.environ.items() if k != "TURNLOG_VIEWER_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnlog.cli", "--db", str(db), "serve", "--port", str(port), *args],
        env={**environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).close()
            break
        except urllib.error.HTTPError:
            break  # it answers (401)
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
    return proc, port


def _stop(proc) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    return err


def test_serve_takes_its_token_from_the_environment_or_generates_one(db: Path) -> None:
    import httpx

    secret = "from-the-env-0123456789"
    proc, port = _serve(db, env={"TURNLOG_VIEWER_TOKEN": secret})
    try:
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(base + "/api/sessions").status_code == 401
        auth = {"Authorization": f"Bearer {secret}"}
        assert httpx.get(base + "/api/sessions", headers=auth).status_code == 200
    finally:
        err = _stop(proc)
    assert secret not in err and "warning" not in err
    proc, port = _serve(db, "--host", "0.0.0.0")
    try:
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(base + "/api/sessions").status_code == 401
        import time

        time.sleep(0.2)
    finally:
        err = _stop(proc)
    found = re.search(r"\?token=([A-Za-z0-9_-]{16,})", err)
    assert found and err.count(found[1]) == 1, err  # printed once
    assert "generated" in err and "TURNLOG_VIEWER_TOKEN" in err
    flag = "from-the-flag-0123456789"
    proc, port = _serve(db, "--token", flag)
    try:
        auth = {"Authorization": f"Bearer {flag}"}
        assert httpx.get(f"http://127.0.0.1:{port}/api/sessions", headers=auth).is_success
    finally:
        err = _stop(proc)
    assert "warning: --token shows in `ps`" in err and flag not in err


def test_bidi_controls_show_as_marks_not_raw(tmp_path: Path) -> None:
    from turnlog.viewer.app import BIDI_CONTROLS

    sid = "bidi\u202euser"
    svc = SessionService(SqliteStore(tmp_path / "bidi.db"))
    svc.create(sid, metadata={"note\u2066": "x\u200fy"})
    svc.append_message(sid, Message.user("pay \u202e$1000\u202c now \u061c\u2067\u2069"))
    call = ToolCall(id="c1", name="t\u202d", arguments='{"a": "\u200e"}')
    svc.append_message(sid, Message.assistant(tool_calls=[call]))
    svc.append_message(sid, Message.tool(ToolResult(call_id="c1", name="t", content="\u202b!")))
    with TestClient(create_app(svc), base_url=LOCAL) as c:
        from urllib.parse import quote

        q = quote(sid, safe="")
        for url in ("/", f"/sessions/{q}", f"/sessions/{q}/view", f"/sessions/{q}/diff?a=0&b=3"):
            html = c.get(url).text
            assert not set(html) & set(BIDI_CONTROLS), url
            assert "bidi[U+202E]user" in html, url
        html = c.get(f"/sessions/{q}").text
        assert "pay [U+202E]$1000[U+202C] now [U+061C][U+2067][U+2069]" in html
        assert "t[U+202D]" in html and "[U+202B]!" in html and "[U+200E]" in html
        assert c.get(f"/api/sessions/{q}/log").json()["events"][0]["text"].startswith("pay \u202e")
    svc.close()


def _conversation(sid: str, turns: int) -> list[SessionEvent]:
    """`turns` turns of four events: a user, an assistant's tool call, its result, an answer."""
    events = []
    for n in range(turns):
        call = ToolCall(id=f"{sid}-call-{n}", name="lookup", arguments=f'{{"n": {n}}}')
        events += [
            SessionEvent.for_message(sid, Message.user(f"question {n}")),
            SessionEvent.for_message(sid, Message.assistant(tool_calls=[call])),
            SessionEvent.for_message(
                sid, Message.tool(ToolResult(call_id=call.id, name="lookup", content=f"r{n}"))
            ),
            SessionEvent.for_message(sid, Message.assistant(f"answer {n}")),
        ]
    return events


@pytest.fixture(scope="module")
def long_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two sessions never compacted: `small` (600 events) and `large` (6,000)."""
    path = tmp_path_factory.mktemp("viewer-long") / "long.db"
    with SessionService(SqliteStore(path)) as svc:
        for sid, turns in (("small", 150), ("large", 1500)):
            svc.create(sid)
            svc.append_events(sid, _conversation(sid, turns), 0)
    return path


def _pages(c: TestClient, url: str, a: int, b: int, limit: int) -> list[dict]:
    """Every page of a diff, following `next_offset` from the first."""
    pages: list[dict] = []
    offset: int | None = 0
    while offset is not None:
        got = c.get(url, params={"a": a, "b": b, "offset": offset, "limit": limit})
        assert got.status_code == 200, got.text
        pages.append(got.json())
        offset = pages[-1]["next_offset"]
    return pages


def test_a_diff_page_is_bounded_by_its_limit_whatever_the_diffs_size(long_db: Path) -> None:
    with TestClient(create_app(f"sqlite:///{long_db}"), base_url=LOCAL) as c:
        sizes = {}
        for sid, events in (("small", 600), ("large", 6000)):
            api = c.get(f"/api/sessions/{sid}/diff", params={"a": 0, "b": events, "limit": 50})
            body = api.json()
            assert body["total_entered"] == events and body["events_b"] == events
            assert 0 < len(body["entered"]) <= 50 and body["next_offset"] == len(body["entered"])
            assert (body["tokens_b"] is None) == (events > 2000)  # TOKENS_IN_LIST_UP_TO
            html = c.get(f"/sessions/{sid}/diff", params={"a": 0, "b": events, "limit": 50})
            assert html.text.count('class="ev ') == len(body["entered"])
            assert 'class="next" href="?a=0&amp;b=' in html.text
            sizes[sid] = (len(api.content), len(html.content))
        for small, large in zip(sizes["small"], sizes["large"], strict=True):
            assert large < small * 1.05, sizes  # 10 times the events, the same page
        pages = _pages(c, "/api/sessions/small/diff", 0, 600, 50)
        seen = [e["seq"] for p in pages for e in p["entered"]]
        assert seen == list(range(1, 601))
        assert all(len(p["entered"]) <= 50 for p in pages)
        assert [p["prev_offset"] for p in pages[1:]] == [p["offset"] for p in pages[:-1]]
        last = c.get("/sessions/small/diff", params={"a": 0, "b": 600, "offset": 590}).text
        assert 'class="next"' not in last and 'class="prev"' in last


def test_a_diff_page_never_parts_a_tool_call_from_its_result(long_db: Path, db: Path) -> None:
    # 50 and 3 rows would cut between a call and its result (rows of four, the call second).
    for path, url, a, b, limit in (
        (long_db, "/api/sessions/small/diff", 0, 400, 50),
        (db, "/api/sessions/demo-summary/diff", 37, 40, 3),  # left, then entered
    ):
        with TestClient(create_app(f"sqlite:///{path}"), base_url=LOCAL) as c:
            pages = _pages(c, url, a, b, limit)
            whole = c.get(url, params={"a": a, "b": b, "limit": 500}).json()
        assert whole["next_offset"] is None
        for name in ("left", "entered"):
            paged = [e["id"] for p in pages for e in p[name]]
            assert paged == ids(whole[name])
        assert len(pages) > 3 and (whole["left"] == [] or sum(bool(p["left"]) for p in pages) > 3)
        calls = 0
        for p in pages:
            assert len(p["left"]) + len(p["entered"]) <= limit
            for e in p["left"] + p["entered"]:
                for call in e.get("tool_calls", ()):
                    calls += 1
                    assert call["result_seq"] is not None, (url, p["offset"], e["seq"])
                for result in e.get("tool_results", ()):
                    assert result["call_seq"] is not None, (url, p["offset"], e["seq"])
        assert calls > 0


def test_a_diff_pages_memory_is_flat_across_pages(long_db: Path) -> None:
    import tracemalloc

    from turnlog.viewer import data

    def peak(block) -> int:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        block()
        top = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        return top

    with SessionService(SqliteStore(long_db)) as svc:
        reading = peak(lambda: data.log_at(svc, "large", 6000))  # what every diff must read
        with TestClient(create_app(svc), base_url=LOCAL) as c:
            peaks = {}
            for offset in (0, 3000, 5900):
                url = f"/sessions/large/diff?a=0&b=6000&offset={offset}"
                assert c.get(url).status_code == 200  # tokens counted and cached
                peaks[offset] = peak(lambda url=url: c.get(url))
    assert max(peaks.values()) < min(peaks.values()) * 1.25, peaks
    # The page adds little to reading the log: the whole diff rendered was 3.6 times that.
    assert max(peaks.values()) < reading * 1.5 + 2**20, (peaks, reading)


def test_bad_diff_offsets_and_limits_are_a_400(client: TestClient) -> None:
    for params in ({"offset": -1}, {"offset": "x"}, {"limit": 0}, {"limit": "many"}):
        for prefix in ("/api", ""):
            url = f"{prefix}/sessions/demo-summary/diff"
            got = client.get(url, params={"a": 1, "b": 40, **params})
            assert got.status_code == 400, (url, params)
    past = client.get("/api/sessions/demo-summary/diff", params={"a": 1, "b": 40, "offset": 99})
    body = past.json()
    assert body["entered"] == [] and body["next_offset"] is None
    assert body["prev_offset"] == 0
    capped = client.get("/api/sessions/demo-summary/diff", params={"a": 1, "b": 40, "limit": 10**6})
    assert capped.json()["limit"] == 500


def test_a_long_message_is_truncated_with_a_link_to_its_whole_text(tmp_path: Path) -> None:
    from turnlog.viewer.data import TEXT_SHOWN_UP_TO

    text = "start " + "x" * 49_990 + " the-end"
    svc = SessionService(SqliteStore(tmp_path / "big.db"))
    svc.create("s")
    svc.append_message("s", Message.user(text))
    call = ToolCall(id="c1", name="t", arguments='{"q": "' + "y" * 30_000 + ' args-end"}')
    svc.append_message("s", Message.assistant(tool_calls=[call]))
    result = ToolResult(call_id="c1", name="t", content="z" * 30_000 + " result-end")
    svc.append_message("s", Message.tool(result))
    with TestClient(create_app(svc), base_url=LOCAL) as c:
        for url in ("/sessions/s", "/sessions/s/view", "/sessions/s/diff?a=0&b=3"):
            html = c.get(url).text
            assert "start xxx" in html and "the-end" not in html, url
            assert "args-end" not in html and "result-end" not in html, url
            assert f"the first {TEXT_SHOWN_UP_TO:,} of {len(text):,} characters" in html, url
            for seq in (1, 2, 3):
                assert f'href="/sessions/s/events/{seq}/text"' in html, url
            assert len(html) < 4 * TEXT_SHOWN_UP_TO + 20_000, url
        whole = c.get("/sessions/s/events/1/text")
        assert whole.status_code == 200 and whole.text == f"User: {text}"
        assert whole.headers["content-type"] == "text/plain; charset=utf-8"
        assert whole.headers["content-security-policy"] == CSP
        assert "result-end" in c.get("/sessions/s/events/3/text").text
        assert c.get("/api/sessions/s/log").json()["events"][0]["text"] == text  # JSON: whole
        for url in (
            "/sessions/s/events/4/text",
            "/sessions/s/events/0/text",
            "/sessions/t/events/1/text",
        ):
            assert c.get(url).status_code == 404, url
        assert c.get("/sessions/s/events/99999999999999999999999/text").status_code == 404
    svc.close()


# -- content parts -------------------------------------------------------------------------------

SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>window.pwned=1</script></svg>'
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def _png() -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (3, 2), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def parts_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from turnlog import FilePart, ImagePart, ReasoningPart

    path = tmp_path_factory.mktemp("parts") / "parts.db"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("parts")
        svc.append_message(
            "parts",
            Message.user(
                "Look:",
                ImagePart("image/png", data=_png(), width=3, height=2, filename="dot.png"),
                ImagePart("image/svg+xml", data=SVG, filename="evil.svg"),
                FilePart("application/pdf", data=PDF, name="report.pdf", pages=1),
                ImagePart("image/png", url="https://example.com/cat.png"),
            ),
        )
        call = ToolCall(id="c1", name="screenshot", arguments="{}")
        svc.append_message(
            "parts",
            Message.assistant(
                parts=[
                    ReasoningPart("anthropic", "secret musing", signature="sig"),
                    ReasoningPart("anthropic", encrypted="opaque", redacted=True),
                    "Taking one.",
                ],
                tool_calls=[call],
            ),
        )
        result = ToolResult("c1", "screenshot", "", parts=(ImagePart("image/png", data=_png()),))
        svc.append_message("parts", Message.tool(result))
        svc.append_message("parts", Message.assistant("A red block."))
    return path


def _details(page: str) -> list[str]:
    return re.findall(r"<details[^>]*>.*?</details>", page, re.DOTALL)


def test_a_messages_parts_are_shown_images_from_their_own_route(parts_db: Path) -> None:
    with TestClient(create_app(f"sqlite:///{parts_db}"), base_url=LOCAL) as c:
        for url in ("/sessions/parts", "/sessions/parts/view"):
            page = c.get(url).text
            assert re.search(r'<img src="/sessions/parts/events/1/parts/1"[^>]*>', page)
            assert re.search(r'<img src="/sessions/parts/events/3/results/0/parts/0"', page)
            assert len(re.findall(r"<img ", page)) == 2  # not the SVG, not the URL
            assert 'href="/sessions/parts/events/1/parts/2" download' in page  # the SVG
            assert 'href="/sessions/parts/events/1/parts/3" download' in page  # the PDF
            assert "[file: application/pdf, report.pdf, 1 page, " in page
            assert 'href="https://example.com/cat.png"' in page and "(not fetched)" in page
            assert "<script" not in page
            folded = _details(page)
            musing = [d for d in folded if "secret musing" in d]
            assert len(musing) == 1 and musing[0].startswith('<details class="part reasoning">')
            assert not any(re.match(r"<details[^>]*\bopen\b", d) for d in folded)
            assert page.count("secret musing") == 1  # only inside the closed <details>
            redacted = [d for d in folded if "opaque" in d or ": redacted</summary>" in d]
            assert len(redacted) == 1 and "redacted" in redacted[0] and "opaque" not in page
        log = c.get("/api/sessions/parts/log").json()["events"]
        image = log[0]["parts"][1]
        assert image["inline"] and image["href"] == "/sessions/parts/events/1/parts/1"
        assert "data" not in image  # the JSON carries no bytes
        assert log[1]["parts"][1] == {
            "type": "reasoning",
            "provider": "anthropic",
            "text": None,
            "redacted": True,
            "signed": False,
            "encrypted": True,
        }


def test_a_parts_route_answers_its_exact_bytes(parts_db: Path) -> None:
    from turnlog.viewer.app import SECURITY_HEADERS

    with TestClient(create_app(f"sqlite:///{parts_db}"), base_url=LOCAL) as c:
        got = c.get("/sessions/parts/events/1/parts/1")
        assert got.status_code == 200 and got.content == _png()
        assert got.headers["content-type"] == "image/png"
        assert got.headers["x-content-type-options"] == "nosniff"
        assert "content-disposition" not in got.headers
        for name, value in SECURITY_HEADERS:
            assert got.headers[name] == value
        shot = c.get("/sessions/parts/events/3/results/0/parts/0")
        assert shot.content == _png() and shot.headers["content-type"] == "image/png"
        svg = c.get("/sessions/parts/events/1/parts/2")
        assert svg.content == SVG and svg.headers["content-type"] == "image/svg+xml"
        assert svg.headers["content-disposition"] == 'attachment; filename="evil.svg"'
        pdf = c.get("/sessions/parts/events/1/parts/3")
        assert pdf.content == PDF and pdf.headers["content-type"] == "application/pdf"
        assert pdf.headers["content-disposition"] == 'attachment; filename="report.pdf"'
        for missing in (
            "/sessions/parts/events/1/parts/9",  # no such part
            "/sessions/parts/events/1/parts/0",  # a text part: no bytes
            "/sessions/parts/events/1/parts/4",  # an image by URL: never fetched
            "/sessions/parts/events/3/results/1/parts/0",  # no such result
            "/sessions/parts/events/99/parts/0",  # no such event
            "/sessions/nope/events/1/parts/0",  # no such session
        ):
            assert c.get(missing).status_code == 404, missing


def test_the_view_says_which_reasoning_was_not_sent(tmp_path: Path) -> None:
    """The default reasoning policy ("current_turn") leaves out the reasoning of finished
    turns: the view at a seq marks it, folded, and keeps the turn in progress's as sent."""
    from turnlog import ReasoningPart

    db = tmp_path / "r.db"
    with SessionService(SqliteStore(db)) as svc:
        svc.create("r")
        call = ToolCall(id="c1", name="look", arguments="{}")
        for m in [
            Message.user("First?"),  # seq 1
            Message.assistant(
                parts=[
                    ReasoningPart("anthropic", "early musing", signature="sig-1"),
                    ReasoningPart("anthropic", encrypted="opaque", redacted=True),
                    "Looking.",
                ],
                tool_calls=[call],
            ),  # seq 2
            Message.tool(ToolResult("c1", "look", "seen")),  # seq 3
            Message.assistant("Done."),  # seq 4
            Message.user("Second?"),  # seq 5
            Message.assistant(
                parts=[ReasoningPart("anthropic", "late musing", signature="sig-2"), "Yes."]
            ),  # seq 6
        ]:
            svc.append_message("r", m)

    def reasoning(view: dict) -> dict[int, list[bool]]:
        return {
            e["seq"]: [p["sent"] for p in e["parts"] if p["type"] == "reasoning"]
            for e in view["events"]
            if any(p["type"] == "reasoning" for p in e.get("parts", ()))
        }

    with TestClient(create_app(f"sqlite:///{db}"), base_url=LOCAL) as c:
        now = c.get("/api/sessions/r/view").json()
        assert reasoning(now) == {2: [False, False], 6: [True]}
        assert (now["reasoning_policy"], now["reasoning_not_sent"]) == ("current_turn", 2)
        then = c.get("/api/sessions/r/view", params={"at": 4}).json()  # turn 1 in progress
        assert reasoning(then) == {2: [True, True]}
        assert then["reasoning_not_sent"] == 0
        assert reasoning(c.get("/api/sessions/r/view", params={"at": 6}).json()) == reasoning(now)

        page = c.get("/sessions/r/view").text
        folded = _details(page)
        early = [d for d in folded if "early musing" in d]
        assert len(early) == 1 and early[0].startswith('<details class="part reasoning not-sent">')
        assert "reasoning (anthropic) · not sent (finished turn)</summary>" in early[0]
        redacted = [d for d in folded if ": redacted" in d]
        assert len(redacted) == 1 and "redacted · not sent (finished turn)</summary>" in redacted[0]
        late = [d for d in folded if "late musing" in d]
        assert len(late) == 1 and late[0].startswith('<details class="part reasoning">')
        assert "not sent" not in late[0]
        assert not any(re.match(r"<details[^>]*\bopen\b", d) for d in folded)
        assert page.count("early musing") == 1 and "opaque" not in page
        assert re.search(r'id="reasoning-not-sent"><b>2</b> reasoning parts of finished', page)
        before = c.get("/sessions/r/view", params={"at": 4}).text
        assert "not sent" not in before and 'id="reasoning-not-sent"' not in before
        log = c.get("/sessions/r").text  # the log page says nothing about what was sent
        assert "not sent" not in log
        assert "sent" not in c.get("/api/sessions/r/log").json()["events"][1]["parts"][0]


def test_a_part_stored_as_an_attachment_is_served_from_its_route(tmp_path: Path) -> None:
    """An image over 16 KiB is stored apart: the page still shows it from the part's route,
    which answers the attachment's bytes; damaged bytes answer 500, never altered bytes."""
    import hashlib
    import sqlite3

    from turnlog import ImagePart

    big = _png() + bytes(40_000)  # a PNG header, then padding: over 16 KiB
    path = tmp_path / "big.db"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("big")
        svc.append_message("big", Message.user("Look:", ImagePart("image/png", data=big)))
        (event,) = svc.events("big")
        assert event.message is not None and event.message.parts[1].ref is not None
    with TestClient(create_app(f"sqlite:///{path}"), base_url=LOCAL) as c:
        page = c.get("/sessions/big").text
        assert re.search(r'<img src="/sessions/big/events/1/parts/1"', page)
        got = c.get("/sessions/big/events/1/parts/1")
        assert got.status_code == 200 and got.content == big
        assert got.headers["content-type"] == "image/png"
    ref = "sha256:" + hashlib.sha256(big).hexdigest()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE turnlog_attachments SET data = ? WHERE ref = ?", (big[:-1], ref))
    with TestClient(create_app(f"sqlite:///{path}"), base_url=LOCAL) as c:
        damaged = c.get("/sessions/big/events/1/parts/1")
        assert damaged.status_code == 500 and ref in damaged.text
