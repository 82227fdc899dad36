"""Stored text cannot drive the terminal: `turnlog show` and `sessions` print control
characters as visible escapes, and the JSON output escapes them too."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from turnlog import (
    EventType,
    Message,
    SessionEvent,
    SessionService,
    SqliteStore,
    ToolCall,
    ToolResult,
)
from turnlog.cli import main
from turnlog.cli_render import visible

ROOT = Path(__file__).resolve().parent.parent

TITLE = "\x1b]0;pwned\x07"  # OSC 0: set the window title
CLEAR = "\x1b[2J"  # erase the screen
CSI_C1 = "\x9b31m"  # CSI as one C1 character: red text
BIDI = "\u202eevil\u202c"  # right-to-left override
OTHERS = "\r\x08\x7f\x85\u2028\x00"
HOSTILE = f"hello {TITLE}{CLEAR}{CSI_C1}{BIDI}{OTHERS} bye"
NOTE = HOSTILE.replace("\x00", "")  # session metadata cannot hold U+0000 (docs/concepts.md)

# Everything a terminal would act on, other than the newline that ends a printed line.
RAW = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def test_visible_escapes_each_kind():
    shown = visible(HOSTILE)
    assert not RAW.search(shown)
    for escape in (r"\x1b]0;pwned\x07", r"\x1b[2J", r"\x9b31m", r"\u202eevil\u202c", r"\r",
                   r"\x08", r"\x7f", r"\x85", r"\u2028", r"\x00"):  # fmt: skip
        assert escape.replace(r"\r", r"\x0d") in shown, escape
    assert visible("a\tb\nc", layout=True) == "a\tb\nc"
    assert visible("a\tb\nc") == r"a\x09b\x0ac"
    assert visible("plain, naïve, 日本語, emoji 👍🏽 and a ZWJ 👩‍💻") == (
        "plain, naïve, 日本語, emoji 👍🏽 and a ZWJ 👩‍💻"
    )


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "hostile.db"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("s", metadata={"note": NOTE})
        svc.append_message("s", Message.system(f"system {TITLE}"))
        svc.append_message("s", Message.user(HOSTILE))
        call = ToolCall("c1", "lookup", json.dumps({"q": CLEAR}))
        svc.append_message("s", Message.assistant(tool_calls=[call]))
        svc.append_message("s", Message.tool(ToolResult("c1", "lookup", f"result {CSI_C1}")))
        svc.append_message("s", Message.assistant(f"answer {BIDI}"))
        svc.append_event(SessionEvent.for_payload("s", EventType.of("ACME.NOTE"), {"t": CSI_C1}))
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize("view", [["--view"], ["--log"]])
def test_show_prints_no_raw_control_characters(view, db, capsys):
    out = run(capsys, "--db", db, "show", "s", *view)
    assert not RAW.search(out), repr(RAW.search(out))
    assert r"\x1b]0;pwned\x07" in out
    assert r"\x9b31m" in out and r"\u202eevil\u202c" in out
    if view == ["--log"]:
        assert r'"t": "\x9b31m"' in out  # the custom event's payload


def test_sessions_prints_no_raw_control_characters(db, capsys):
    with SessionService(SqliteStore(db)) as svc:
        svc.create(f"id {BIDI}")  # ids refuse control characters, not bidi overrides
    out = run(capsys, "--db", db, "sessions")
    assert not RAW.search(out)
    assert r"id \u202eevil\u202c  " in out  # escaped, and the columns still line up


@pytest.mark.parametrize(
    "argv", [["show", "s", "--json"], ["show", "s", "--log", "--json"], ["sessions", "--json"]]
)
def test_json_output_escapes_them_and_keeps_the_text(argv, db, capsys):
    out = run(capsys, "--db", db, *argv)
    assert not RAW.search(out.replace("\n", "")), repr(RAW.search(out))
    assert r"\u009b" in out and r"\u202e" in out and r"\u001b" in out
    # still the same JSON value: the exact text comes back
    found = json.dumps(json.loads(out), ensure_ascii=False)
    text = NOTE if argv[0] == "sessions" else HOSTILE  # the session's note, or the message
    assert json.dumps(text, ensure_ascii=False)[1:-1] in found


def test_an_error_line_escapes_them_too(db, tmp_path, capsys):
    code = main(["--db", str(db), "show", f"x{BIDI}"])
    err = capsys.readouterr().err
    assert code == 1 and not RAW.search(err.rstrip("\n"))
    code = main(["--db", str(tmp_path / f"{CLEAR}{TITLE}.db"), "sessions"])
    err = capsys.readouterr().err
    assert code == 1 and not RAW.search(err.rstrip("\n"))
    assert r"\x1b[2J\x1b]0;pwned\x07.db" in err


def test_through_a_real_terminal_pipe(db):
    """The console script's bytes on stdout: no ESC, no C1 (as UTF-8: C2 80-9F), no bidi."""
    out = subprocess.run(
        [sys.executable, "-m", "turnlog.cli", "--db", str(db), "show", "s", "--log"],
        capture_output=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PYTHONIOENCODING": "utf-8"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert b"\x1b" not in out.stdout and b"\x07" not in out.stdout
    assert not re.search(rb"\xc2[\x80-\x9f]", out.stdout)
    assert "\u202e".encode() not in out.stdout


def _export_on_a_terminal(db, fmt):
    """`turnlog export` with a pseudo-terminal as stdout (as a user runs it), its bytes."""
    import os
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "turnlog.cli",
                "--db",
                str(db),
                "export",
                "s",
                "--log",
                "--format",
                fmt,
            ],
            stdout=follower,
            stderr=subprocess.PIPE,
            env={"PYTHONPATH": str(ROOT / "src"), "PYTHONIOENCODING": "utf-8"},
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    return b"".join(chunks)


@pytest.mark.parametrize("fmt", ["jsonl", "html", "openai", "anthropic"])
def test_export_to_a_terminal_neutralises_what_a_terminal_obeys(db, fmt):
    """Issue 24, item 5: on a terminal, every format comes out with no ESC, BEL, C1 or bidi
    control raw, as escapes of the format itself (the same document once parsed)."""
    out = _export_on_a_terminal(db, fmt)
    assert b"hello" in out
    assert b"\x1b" not in out and b"\x07" not in out
    assert not re.search(rb"\xc2[\x80-\x9f]", out)
    assert "\u202e".encode() not in out
    if fmt == "html":
        assert b"&#x1b;" in out
    else:
        assert b"\\u001b" in out or b"\\u009b" in out


def test_export_to_a_pipe_keeps_the_text_as_stored(db):
    """Not a terminal: the bytes are the document as it was (a file or a pipe gets it whole)."""
    out = subprocess.run(
        [sys.executable, "-m", "turnlog.cli", "--db", str(db), "export", "s", "--log"],
        capture_output=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PYTHONIOENCODING": "utf-8"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert all(json.loads(line) for line in out.stdout.decode().split("\n") if line)
    assert "\u202e".encode() in out.stdout and "\x9b".encode() in out.stdout  # as stored
