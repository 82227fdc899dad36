"""`turnlog export` in every format, the JSONL round trip through `turnlog import`, the HTML page
with hostile content, `--version`, `--format json`, and the progress line. Real SQLite files."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from turnlog import Message, SessionService, SqliteStore, ToolCall, ToolResult, __version__
from turnlog.cli import main
from turnlog.cli_export import Progress
from turnlog.models.anthropic_format import to_anthropic_messages
from turnlog.models.openai_format import to_openai_messages

ROOT = Path(__file__).resolve().parent.parent

DEMO = ["demo-last-events", "demo-last-turns", "demo-token-budget", "demo-summary", "demo-files"]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("demo") / "demo.db"
    assert main(["--db", str(db), "demo"]) == 0
    return db


def stored(db, session_id):
    with SessionService(SqliteStore(db)) as svc:
        return svc.get(session_id), svc.events(session_id), svc.view(session_id)


@pytest.mark.parametrize("session_id", DEMO)
def test_jsonl_log_round_trips_through_import(session_id, demo_db, tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    code, _, err = run(capsys, "--db", demo_db, "export", session_id, "--log", "-o", out)
    assert code == 0, err
    other = tmp_path / "other.db"
    code, text, err = run(capsys, "--db", other, "import", out)
    assert code == 0, err
    assert "(turnlog log)" in text
    session, log, view = stored(demo_db, session_id)
    session2, log2, view2 = stored(other, session_id)
    assert session2 == session  # id, created_at, expires_at, metadata
    assert log2 == log  # ids, seqs, types, times, messages, payloads: boundaries included
    assert view2 == view
    assert any(e.type.name == "COMPACTION" for e in log2)
    # exporting the copy again gives the same bytes
    again = tmp_path / "again.jsonl"
    assert run(capsys, "--db", other, "export", session_id, "--log", "-o", again)[0] == 0
    assert again.read_bytes() == out.read_bytes()


def test_jsonl_import_under_another_id_and_into_the_same_store(demo_db, tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    assert run(capsys, "--db", demo_db, "export", "demo-summary", "--log", "-o", out)[0] == 0
    other = tmp_path / "other.db"
    code, _, err = run(capsys, "--db", other, "import", out, "--session", "copy")
    assert code == 0, err
    _, log, view = stored(demo_db, "demo-summary")
    _, log2, view2 = stored(other, "copy")
    assert [(e.id, e.seq, e.message, e.payload) for e in log2] == [
        (e.id, e.seq, e.message, e.payload) for e in log
    ]
    assert [e.id for e in view2] == [e.id for e in view]
    # the same ids again in the same store: refused in one line, nothing left behind
    code, _, err = run(capsys, "--db", other, "import", out, "--session", "copy2")
    assert code == 2 and err.startswith("turnlog: error: ") and len(err.splitlines()) == 1
    assert "delete the exported session first" in err
    with SessionService(SqliteStore(other)) as svc:
        assert svc.find("copy2") is None


def test_a_truncated_or_damaged_jsonl_file_writes_nothing(demo_db, tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    assert run(capsys, "--db", demo_db, "export", "demo-summary", "--log", "-o", out)[0] == 0
    lines = out.read_bytes().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:-1]))
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"".join([*lines[:3], b'{"seq": 3, "id": "x"}\n', *lines[4:]]))
    for path, words in ((cut, "truncated"), (bad, "line 4")):
        other = tmp_path / f"{path.stem}.db"
        code, _, err = run(capsys, "--db", other, "import", path)
        assert code == 2, err
        assert words in err and len(err.splitlines()) == 1
        assert not other.exists()  # a bad file does not even create the database


def _edit_boundary(lines, change):
    """`lines` of a JSONL log with the first boundary's payload changed by `change`."""
    out = []
    for raw in lines:
        item = json.loads(raw)
        if item.get("type") == "COMPACTION" and change is not None:
            change(item["body"]["payload"], [json.loads(x)["id"] for x in lines[1:]])
            change = None
            raw = json.dumps(item).encode() + b"\n"
        out.append(raw)
    return b"".join(out)


def _twice(payload, ids):
    payload["preserved_event_ids"].append(payload["preserved_event_ids"][0])


def _ahead(payload, ids):
    named = {i for key in ("pinned", "summary", "preserved") for i in payload[f"{key}_event_ids"]}
    payload["preserved_event_ids"].append(next(i for i in reversed(ids) if i not in named))


@pytest.mark.parametrize(("change", "words"), [(_twice, "more than once"), (_ahead, "after it")])
def test_an_imported_boundary_naming_an_event_twice_or_ahead_is_refused(
    change, words, demo_db, tmp_path, capsys
):
    out = tmp_path / "s.jsonl"
    assert run(capsys, "--db", demo_db, "export", "demo-summary", "--log", "-o", out)[0] == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(_edit_boundary(out.read_bytes().splitlines(keepends=True), change))
    fresh = tmp_path / "fresh.db"
    code, _, err = run(capsys, "--db", fresh, "import", bad)
    assert code == 2, err
    assert words in err and str(bad) in err and len(err.splitlines()) == 1
    assert not fresh.exists()  # the failed import leaves no database file behind
    kept = tmp_path / "kept.db"
    with SessionService(SqliteStore(kept)) as svc:
        svc.create("other")
    assert run(capsys, "--db", kept, "import", bad)[0] == 2
    with SessionService(SqliteStore(kept)) as svc:  # nothing written, the store still reads
        assert [s.id for s in svc.sessions()] == ["other"]
    assert run(capsys, "--db", kept, "sessions")[0] == 0


def test_a_boundary_at_a_batch_border_imports_with_its_summaries(
    demo_db, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "s.jsonl"
    assert run(capsys, "--db", demo_db, "export", "demo-summary", "--log", "-o", out)[0] == 0
    items = [json.loads(x) for x in out.read_bytes().splitlines()[1:]]
    at = next(i for i, x in enumerate(items) if x["type"] == "COMPACTION")
    monkeypatch.setattr("turnlog.cli_export.IMPORT_BATCH", at + 1)  # the boundary ends a batch
    other = tmp_path / "other.db"
    code, _, err = run(capsys, "--db", other, "import", out)
    assert code == 0, err
    assert stored(other, "demo-summary")[1:] == stored(demo_db, "demo-summary")[1:]


def test_a_jsonl_payload_nested_too_deeply_is_a_clear_error(tmp_path, capsys):
    header = {"turnlog": "session", "format": 1, "scope": "log", "id": "s1",
              "created_at_us": 1_700_000_000_000_000, "expires_at_us": None, "metadata": {},
              "events": 1}  # fmt: skip
    deep = "[" * 100_000 + "]" * 100_000
    line = (
        '{"seq": 1, "id": "e1", "type": "ACME.X", "at_us": 1700000000000000, '
        f'"synthetic": false, "body": {{"v": 1, "payload": {deep}}}}}'
    )
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(header) + "\n" + line + "\n")
    db = tmp_path / "deep.db"
    code, _, err = run(capsys, "--db", db, "import", path)
    assert code == 2, err
    assert "line 2: JSON nested too deeply" in err and len(err.splitlines()) == 1
    assert not db.exists()


def test_a_turnlog_jsonl_file_with_a_bom_imports(demo_db, tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    assert run(capsys, "--db", demo_db, "export", "demo-summary", "--log", "-o", out)[0] == 0
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + out.read_bytes())
    other = tmp_path / "other.db"
    code, _, err = run(capsys, "--db", other, "import", bom)
    assert code == 0, err
    assert stored(other, "demo-summary") == stored(demo_db, "demo-summary")


def test_jsonl_view_export_holds_the_view(demo_db, tmp_path, capsys):
    code, out, err = run(capsys, "--db", demo_db, "export", "demo-summary")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    _, _, view = stored(demo_db, "demo-summary")
    assert rows[0]["scope"] == "view" and rows[0]["events"] == len(view)
    assert [r["id"] for r in rows[1:]] == [e.id for e in view]


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_provider_formats_are_the_messages_a_model_is_sent(fmt, demo_db, capsys):
    code, out, err = run(capsys, "--db", demo_db, "export", "demo-files", "--format", fmt)
    assert code == 0, err
    with SessionService(SqliteStore(demo_db)) as svc:
        messages = svc.view_messages("demo-files")
        log = [e.message for e in svc.events("demo-files") if e.message is not None]
    if fmt == "openai":
        assert json.loads(out) == {"messages": to_openai_messages(messages)}
    else:
        system, turns = to_anthropic_messages(messages)
        assert json.loads(out) == {"system": system, "messages": turns}
    code, out, err = run(capsys, "--db", demo_db, "export", "demo-files", "--log", "--format", fmt)
    assert code == 0, err
    doc = json.loads(out)
    if fmt == "openai":
        assert doc == {"messages": to_openai_messages(log)}


def test_an_openai_export_imports_back_as_the_same_messages(demo_db, tmp_path, capsys):
    out = tmp_path / "req.json"
    args = ("--db", demo_db, "export", "demo-files", "--format", "openai", "-o", out)
    assert run(capsys, *args)[0] == 0
    other = tmp_path / "o.db"
    code, _, err = run(capsys, "--db", other, "import", out, "--session", "x")
    assert code == 0, err
    with SessionService(SqliteStore(demo_db)) as a, SessionService(SqliteStore(other)) as b:
        assert to_openai_messages(b.view_messages("x")) == to_openai_messages(
            a.view_messages("demo-files")
        )


HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []
        self.attrs = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(attrs)


def test_html_is_one_escaped_self_contained_page(tmp_path, capsys):
    db = tmp_path / "h.db"
    sid = "bug<b>1</b>"
    with SessionService(SqliteStore(db)) as svc:
        svc.create(sid, metadata={"note": HOSTILE})
        svc.append_message(sid, Message.system("sys " + HOSTILE))
        svc.append_message(sid, Message.user(HOSTILE), metadata={"m": HOSTILE})
        call = ToolCall("c<1>", "run" + HOSTILE, json.dumps({"q": HOSTILE}))
        svc.append_message(sid, Message.assistant(tool_calls=[call]))
        svc.append_message(sid, Message.tool(ToolResult("c<1>", call.name, HOSTILE, True)))
        svc.append_message(sid, Message.assistant("done " + HOSTILE))
        svc.hide(sid, [e.id for e in svc.view(sid)[1:3]])
    out = tmp_path / "page.html"
    code, _, err = run(capsys, "--db", db, "export", sid, "--log", "--format", "html", "-o", out)
    assert code == 0, err
    page = out.read_text(encoding="utf-8")
    parser = Tags()
    parser.feed(page)
    assert "script" not in parser.tags and "img" not in parser.tags and "b" in parser.tags
    assert not any(name.startswith("on") or name == "src" for name, _ in parser.attrs)
    hrefs = [v for name, v in parser.attrs if name == "href"]
    assert hrefs and all(v.startswith("#") for v in hrefs)  # in-page links only
    assert "http://" not in page and "https://" not in page and "<link" not in page
    assert "Content-Security-Policy" in page
    assert page.count("&lt;script&gt;") >= 6  # shown as text everywhere
    assert "bug&lt;b&gt;1&lt;/b&gt;" in page
    assert "compaction #6: hide" in page  # the boundary card
    assert "covered" in page and "(failed)" in page


def test_export_errors_are_one_line(demo_db, tmp_path, capsys):
    code, _, err = run(capsys, "--db", demo_db, "export", "nope")
    assert code == 1 and "does not exist" in err and len(err.splitlines()) == 1
    code, _, err = run(capsys, "--db", demo_db, "export", "demo-files", "-o", tmp_path)
    assert code == 2 and "is a directory" in err
    code, _, err = run(capsys, "--db", demo_db, "export", "demo-files", "--format", "xml")
    assert code == 2
    assert not list(tmp_path.glob(".*.partial"))


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"turnlog {__version__}"


@pytest.mark.parametrize(
    "argv", [["sessions"], ["show", "demo-summary"], ["show", "demo-summary", "--log"]]
)
def test_format_json_is_the_json_option(argv, demo_db, capsys):
    code, a, _ = run(capsys, "--db", demo_db, *argv, "--format", "json")
    assert code == 0
    code, b, _ = run(capsys, "--db", demo_db, *argv, "--json")
    assert code == 0
    assert a == b and json.loads(a)
    code, text, _ = run(capsys, "--db", demo_db, *argv, "--format", "text")
    assert code == 0 and not text.startswith(("[", "{"))


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_shows_rate_and_eta_on_a_terminal_only():
    term = Terminal()
    with Progress("importing conversations", 2000, term) as p:
        for _ in range(2000):
            p.advance()
    shown = term.getvalue()
    assert re.search(r"importing conversations: 2,000/2,000 \(100%\), [\d,]+/s, ETA 0s", shown)
    assert shown.endswith("\r\x1b[K")
    assert Progress("x", 1000, Terminal()).line(10.0).endswith("0/1,000 (0%), 0/s, ETA 0s")
    half = Progress("x", 1000, Terminal())
    half.done = 500
    assert half.line(100.0) == "x: 500/1,000 (50%), 5/s, ETA 1m40s"
    pipe = io.StringIO()
    with Progress("x", 5000, pipe) as p:
        p.advance(5000)
    assert pipe.getvalue() == ""  # not a terminal
    small = Terminal()
    with Progress("x", 10, small) as p:
        p.advance(10)
    assert small.getvalue() == ""  # too short to be worth a line


def test_a_large_sharegpt_import_prints_no_progress_when_not_on_a_terminal(tmp_path, capsys):
    records = [
        {"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "a"}]}
        for i in range(1200)
    ]
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    code, out, err = run(capsys, "--db", tmp_path / "b.db", "import", path)
    assert code == 0 and err == ""
    assert len(out.splitlines()) == 1200


def test_progress_reaches_a_real_terminal(tmp_path):
    # `turnlog import` of 1,200 ShareGPT conversations with stderr on a pseudo-terminal
    pty = pytest.importorskip("pty")
    records = [
        {"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "a"}]}
        for i in range(1200)
    ]
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-m", "turnlog.cli", "--db", str(tmp_path / "p.db"), "import", path]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=follower, env=env, timeout=120)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
        if shown.endswith(b"\r\x1b[K") and b"1,200/1,200" in shown:
            break
    os.close(leader)
    assert proc.returncode == 0
    assert re.search(rb"importing conversations: 1,200/1,200 \(100%\), [\d,]+/s, ETA 0s", shown)
    assert b"importing conversations" not in proc.stdout


def test_html_tokens_per_message_and_for_the_view(demo_db, tmp_path, capsys):
    from turnlog.cli_render import view_tokens
    from turnlog.tokens import event_tokens

    code, page, err = run(capsys, "--db", demo_db, "export", "demo-summary", "--format", "html")
    assert code == 0, err
    assert " tokens" not in page  # not counted unless asked
    argv = ("--db", demo_db, "export", "demo-summary", "--log", "--format", "html", "--tokens")
    code, page, err = run(capsys, *argv)
    assert code == 0, err
    _, log, view = stored(demo_db, "demo-summary")
    assert f"messages sent to the model, {view_tokens(view):,} tokens." in page
    first = next(e for e in log if e.message is not None)
    count = event_tokens().counts([first])[0]
    assert f'id="seq-{first.seq}"><div class="meta">' in page
    section = page.split(f'id="seq-{first.seq}">', 1)[1].split("</article>", 1)[0]
    assert f" · {count:,} tokens" in section


# -- -o FILE: a temporary file beside the target, its mode kept, devices written directly ----


def test_a_symlink_planted_at_the_old_partial_name_is_not_followed(demo_db, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / ".out.jsonl.partial").symlink_to(victim)
    out = tmp_path / "out.jsonl"
    code, _, err = run(capsys, "--db", demo_db, "export", "demo-summary", "-o", out)
    assert code == 0, err
    assert victim.read_text() == "keep me"
    assert out.is_file() and not out.is_symlink() and out.read_bytes().startswith(b'{"turnlog"')
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.jsonl.partial", "out.jsonl",
                                                          "victim.txt"]  # fmt: skip


def test_an_existing_files_mode_is_kept_and_a_new_one_gets_the_umasks(demo_db, tmp_path, capsys):
    private = tmp_path / "private.jsonl"
    private.write_text("old")
    private.chmod(0o600)
    assert run(capsys, "--db", demo_db, "export", "demo-summary", "-o", private)[0] == 0
    assert private.stat().st_mode & 0o777 == 0o600 and private.read_text() != "old"
    mask = os.umask(0o027)
    try:
        fresh = tmp_path / "fresh.jsonl"
        assert run(capsys, "--db", demo_db, "export", "demo-summary", "-o", fresh)[0] == 0
    finally:
        os.umask(mask)
    assert fresh.stat().st_mode & 0o777 == 0o640  # not mkstemp's 0600


def test_a_fifo_target_is_written_directly_and_kept(demo_db, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "turnlog.cli",
            "--db",
            str(demo_db),
            "export",
            "demo-summary",
            "-o",
            str(fifo),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        stderr=subprocess.PIPE,
    )
    with open(fifo, "rb") as reader:
        data = reader.read()
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    proc.stderr and proc.stderr.close()
    assert data.startswith(b'{"turnlog"') and data.endswith(b"\n")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_two_concurrent_exports_to_one_target_both_finish_a_whole_file(demo_db, tmp_path):
    out = tmp_path / "out.jsonl"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "turnlog.cli",
                "--db",
                str(demo_db),
                "export",
                session,
                "--log",
                "-o",
                str(out),
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            stderr=subprocess.PIPE,
        )
        for session in ("demo-summary", "demo-files")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    lines = out.read_bytes().splitlines()
    header = json.loads(lines[0])
    assert header["id"] in ("demo-summary", "demo-files") and header["events"] == len(lines) - 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]  # no temporary left


def test_html_shows_bidi_controls_as_visible_marks(tmp_path, capsys):
    db = tmp_path / "bidi.db"
    with SessionService(SqliteStore(db)) as svc:
        svc.create("s")
        svc.append_message("s", Message.user("pay \u202eusd 001\u202c now \u2066x\u2069 \u200f"))
    out = tmp_path / "s.html"
    code, _, err = run(capsys, "--db", db, "export", "s", "--format", "html", "-o", out)
    assert code == 0, err
    text = out.read_text(encoding="utf-8")
    assert not re.search("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]", text)
    assert '<span class="bidi">&lt;U+202E&gt;</span>usd 001' in text
    assert "&lt;U+2066&gt;" in text and "&lt;U+200F&gt;" in text


def test_html_embeds_images_as_data_urls_never_svg_and_folds_reasoning(tmp_path, capsys):
    import base64
    import io

    from PIL import Image

    from turnlog import FilePart, ImagePart, ProviderPart, ReasoningPart

    buf = io.BytesIO()
    Image.new("RGB", (3, 2), (200, 30, 30)).save(buf, format="PNG")
    png = buf.getvalue()
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>window.pwned=1</script></svg>'
    db = tmp_path / "p.db"
    with SessionService(SqliteStore(db)) as svc:
        svc.create("p")
        svc.append_message(
            "p",
            Message.user(
                "Look:",
                ImagePart("image/png", data=png, width=3, height=2),
                ImagePart("image/svg+xml", data=svg, filename="evil.svg"),
                FilePart("application/pdf", data=b"%PDF-1.4\n%%EOF\n", name="r.pdf", pages=1),
            ),
        )
        call = ToolCall("c1", "shot", "{}")
        svc.append_message(
            "p",
            Message.assistant(
                parts=[
                    ReasoningPart("anthropic", "secret musing", signature="sig"),
                    ReasoningPart("anthropic", encrypted="opaque", redacted=True),
                    ProviderPart("anthropic", "citation", {"cited": "<b>x</b>"}),
                    "Taking one.",
                ],
                tool_calls=[call],
            ),
        )
        result = ToolResult("c1", "shot", "", parts=(ImagePart("image/png", data=png),))
        svc.append_message("p", Message.tool(result))
    out = tmp_path / "p.html"
    code, _, err = run(capsys, "--db", db, "export", "p", "--log", "--format", "html", "-o", out)
    assert code == 0, err
    page = out.read_text(encoding="utf-8")
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert csp is not None
    assert "img-src data:" in csp.group(1) and "script" not in csp.group(1)
    assert "default-src 'none'" in csp.group(1)
    parser = Tags()
    parser.feed(page)
    assert "script" not in parser.tags
    srcs = [v for name, v in parser.attrs if name == "src"]
    assert srcs == [f"data:image/png;base64,{base64.b64encode(png).decode()}"] * 2
    assert base64.b64decode(srcs[0].split(",", 1)[1]) == png
    assert base64.b64encode(svg).decode() not in page and "pwned" not in page
    assert "[image: image/svg+xml, evil.svg, " in page and "not embedded" in page
    assert "[file: application/pdf, r.pdf, 1 page, " in page
    folded = re.findall(r"<details[^>]*>.*?</details>", page, re.DOTALL)
    assert any("secret musing" in d for d in folded) and page.count("secret musing") == 1
    assert folded and not any(re.match(r"<details[^>]*\bopen\b", d) for d in folded)
    assert any(": redacted</summary>" in d for d in folded) and "opaque" not in page
    assert any("&lt;b&gt;x&lt;/b&gt;" in d for d in folded)


def test_images_audio_and_files_survive_an_openai_export_and_import(tmp_path, capsys):
    """`export --format openai` writes each part in the Chat Completions shape and `import`
    reads it back into the same parts (the oracle: the messages stored first)."""
    from turnlog import AudioPart, FilePart, ImagePart

    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    wav = b"RIFF" + bytes(100)
    pdf = b"%PDF-1.4 a tiny document"
    sent = [
        Message.user(
            "Compare these:",
            ImagePart("image/png", data=png, detail="high"),
            ImagePart("image/jpeg", url="https://example.com/cat.jpg"),
            AudioPart("audio/wav", data=wav),
            FilePart("application/pdf", data=pdf, name="r.pdf"),
        ),
        Message.assistant("They differ."),
    ]
    db = tmp_path / "a.db"
    with SessionService(SqliteStore(db)) as svc:
        svc.create("s")
        for m in sent:
            svc.append_message("s", m)
    out = tmp_path / "s.json"
    assert run(capsys, "--db", db, "export", "s", "--format", "openai", "-o", out)[0] == 0
    body = json.loads(out.read_text("utf-8"))
    kinds = [p["type"] for p in body["messages"][0]["content"]]
    assert kinds == ["text", "image_url", "image_url", "input_audio", "file"]
    other = tmp_path / "b.db"
    assert run(capsys, "--db", other, "import", out)[0] == 0
    with SessionService(SqliteStore(other)) as svc:
        [session] = svc.sessions()
        back = [e.message for e in svc.events(session.id)]
    assert back == sent


# -- each provider's part shapes ------------------------------------------------------------------

WAV = b"RIFF" + bytes(100)
OGG = b"OggS" + bytes(20)
PDF_BYTES = b"%PDF-1.4 a tiny document"
SEARCH_RESULT = {
    "type": "search_result",
    "source": "https://example.com/kb",
    "title": "KB",
    "content": [{"type": "text", "text": "the answer"}],
}
SERVER_USE = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}


def _tiny_png():
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (3, 2), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def shapes_db(tmp_path_factory):
    """Two turns holding every kind of part, reasoning of two providers and provider blocks of
    two providers; the first turn is finished, the second is in progress."""
    from turnlog import AudioPart, FilePart, ImagePart, ProviderPart, ReasoningPart, TextPart

    png = _tiny_png()
    db = tmp_path_factory.mktemp("shapes") / "shapes.db"
    with SessionService(SqliteStore(db)) as svc:
        svc.create("s")
        for m in [
            Message.system("Be brief."),
            Message.user(
                "Compare:",
                ImagePart("image/png", data=png, detail="high"),
                ImagePart("image/jpeg", url="https://example.com/cat.jpg", detail="low"),
                AudioPart("audio/wav", data=WAV),
                AudioPart("audio/ogg", data=OGG),
                FilePart("application/pdf", data=PDF_BYTES, name="r.pdf"),
                ProviderPart("openai", "file", {"type": "file", "file": {"file_id": "file-1"}}),
                ProviderPart("anthropic", "search_result", SEARCH_RESULT),
            ),
            Message.assistant(
                parts=[
                    ReasoningPart("anthropic", "first thought", signature="sig-1"),
                    ReasoningPart("openai", "an OpenAI summary", encrypted="enc-openai"),
                    ReasoningPart("anthropic", "unsigned"),  # the API refuses it: never sent
                    ProviderPart("anthropic", "server_tool_use", SERVER_USE),
                    ProviderPart("openai", "annotation", {"type": "url_citation"}),
                    "Looking.",
                ],
                tool_calls=[ToolCall("c1", "zoom", '{"x": 1}')],
            ),
            Message.tool(
                ToolResult(
                    "c1", "zoom", "", parts=(TextPart("zoomed"), ImagePart("image/png", data=png))
                )
            ),
            Message.assistant("It matches."),
            Message.user("And now?"),
            Message.assistant(
                parts=[ReasoningPart("anthropic", "second thought", signature="sig-2"), "Fine."]
            ),
        ]:
            svc.append_message("s", m)
    return db, png


def _b64(data):
    import base64

    return base64.b64encode(data).decode("ascii")


def test_openai_export_writes_chat_completions_part_shapes(shapes_db, capsys):
    db, png = shapes_db
    png_url = f"data:image/png;base64,{_b64(png)}"
    zoom = {"name": "zoom", "arguments": '{"x": 1}'}
    expected = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare:"},
                    {
                        "type": "image_url",
                        "image_url": {"url": png_url, "detail": "high"},
                    },
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"},
                    },
                    {"type": "input_audio", "input_audio": {"data": _b64(WAV), "format": "wav"}},
                    {"type": "text", "text": "[audio: audio/ogg, 24 bytes]"},  # no ogg format
                    {
                        "type": "file",
                        "file": {
                            "file_data": f"data:application/pdf;base64,{_b64(PDF_BYTES)}",
                            "filename": "r.pdf",
                        },
                    },
                    {"type": "file", "file": {"file_id": "file-1"}},
                ],
            },
            {
                "role": "assistant",
                "content": "Looking.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": zoom}
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": "zoomed\n[attachment 1 of 1: in the next user message]",
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "[the attachments of the tool result for call c1: 1]"},
                    {"type": "image_url", "image_url": {"url": png_url}},
                ],
            },
            {"role": "assistant", "content": "It matches."},
            {"role": "user", "content": "And now?"},
            {"role": "assistant", "content": "Fine."},
        ]
    }  # fmt: skip
    for scope in ((), ("--log",), ("--reasoning", "all")):
        code, out, err = run(capsys, "--db", db, "export", "s", *scope, "--format", "openai")
        assert code == 0, err
        assert json.loads(out) == expected, scope  # no reasoning goes to Chat Completions


def _anthropic_expected(png, *, first_thought):
    thought = [{"type": "thinking", "thinking": "first thought", "signature": "sig-1"}]
    png_source = {"type": "base64", "media_type": "image/png", "data": _b64(png)}
    return {
        "system": "Be brief.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare:"},
                    {"type": "image", "source": png_source},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                    {"type": "text", "text": "[audio: audio/wav, 104 bytes]"},  # no audio input
                    {"type": "text", "text": "[audio: audio/ogg, 24 bytes]"},
                    {
                        "type": "document",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": _b64(PDF_BYTES),
                        },
                        "title": "r.pdf",
                    },
                    SEARCH_RESULT,  # the OpenAI file is left out
                ],
            },
            {
                "role": "assistant",
                "content": [
                    *(thought if first_thought else []),  # never OpenAI's, never unsigned
                    SERVER_USE,  # never OpenAI's annotation
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "c1", "name": "zoom", "input": {"x": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": [
                            {"type": "text", "text": "zoomed"},
                            {
                                "type": "image",
                                "source": png_source,
                            },
                        ],
                    }
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "It matches."}]},
            {"role": "user", "content": [{"type": "text", "text": "And now?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "second thought", "signature": "sig-2"},
                    {"type": "text", "text": "Fine."},
                ],
            },
        ],
    }  # fmt: skip


def test_anthropic_export_writes_messages_api_block_shapes(shapes_db, capsys):
    db, png = shapes_db
    code, out, err = run(capsys, "--db", db, "export", "s", "--log", "--format", "anthropic")
    assert code == 0, err
    assert json.loads(out) == _anthropic_expected(png, first_thought=True)


def test_a_view_export_leaves_out_the_reasoning_of_finished_turns(shapes_db, capsys):
    """As the turn runner sends it (reasoning="current_turn"); --reasoning changes it."""
    db, png = shapes_db
    code, out, err = run(capsys, "--db", db, "export", "s", "--format", "anthropic")
    assert code == 0, err
    assert json.loads(out) == _anthropic_expected(png, first_thought=False)
    args = ("--db", db, "export", "s", "--format", "anthropic", "--reasoning", "all")
    assert json.loads(run(capsys, *args)[1]) == _anthropic_expected(png, first_thought=True)
    args = ("--db", db, "export", "s", "--log", "--format", "anthropic", "--reasoning", "none")
    doc = json.loads(run(capsys, *args)[1])
    assert not [b for m in doc["messages"] for b in m["content"] if b["type"] == "thinking"]
    assert doc["messages"][-1]["content"] == [{"type": "text", "text": "Fine."}]


@pytest.mark.parametrize("fmt", ["jsonl", "html"])
def test_reasoning_is_refused_for_formats_that_write_every_part(fmt, shapes_db, capsys):
    db, _ = shapes_db
    code, out, err = run(capsys, "--db", db, "export", "s", "--format", fmt, "--reasoning", "none")
    assert (code, out) == (2, "")
    assert err.startswith("turnlog: error: --reasoning applies to --format openai and anthropic")
