"""The `turnlog` command, run in-process on real SQLite files, and once as the console script."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from turnlog import CompactionBoundary, EventType, SessionService, SqliteStore
from turnlog.cli import main
from turnlog.cli_demo import DEMO_FILES
from turnlog.testing import FakeClock

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [
    "demo", "import", "sessions", "show", "search", "export", "compact", "chat", "serve", "delete",
    "expire", "migrate",
]  # fmt: skip
DEMO_SESSIONS = ["demo-last-events", "demo-last-turns", "demo-token-budget", "demo-summary"]
ALL_DEMO_SESSIONS = [*DEMO_SESSIONS, "demo-files"]  # the four copies, and the follow-up


def run(capsys, *argv):
    """Run `turnlog argv...` in-process; returns (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(err, code, expected_code):
    assert code == expected_code, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("turnlog: error: ")


def service(db):
    return SessionService(SqliteStore(db))


def write_json(path, value):
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


@pytest.fixture
def db(tmp_path):
    return tmp_path / "t.db"


@pytest.fixture
def demo_db(db, capsys):
    code, _, _ = run(capsys, "--db", db, "demo")
    assert code == 0
    return db


# -- the demo ----------------------------------------------------------------------------------


def test_demo_prints_log_boundaries_view_and_tokens_saved(db, capsys):
    code, out, err = run(capsys, "--db", db, "demo")
    assert code == 0, err
    for session_id in DEMO_SESSIONS:
        assert f"=== {session_id}:" in out
        assert f"log of {session_id}" in out
        assert f"view of {session_id}" in out
    assert out.count("BOUNDARY") == 5
    assert out.count("tokens saved") == 10  # on each BOUNDARY line, and after each pass
    assert out.count("the boundary estimates") == 5
    assert "covered" in out and "preserved" in out and "pinned" in out
    assert "summary    assistant" in out  # the summary turn is in the log and the view
    # the demo names the file it used, and its "try next" commands repeat the --db it was given
    assert f"The five sessions are in {db}. Try next:" in out
    assert f"turnlog --db {db} sessions" in out
    assert f"turnlog --db {db} show demo-summary --log" in out
    # the numbers printed are the boundary's
    with service(db) as svc:
        for session_id in ALL_DEMO_SESSIONS:
            log = svc.events(session_id)
            boundary = CompactionBoundary.newest(log)
            assert boundary is not None
            assert f"~{boundary.tokens_estimated_saved:,} tokens saved" in out
    # before -> after lines: the view shrank every time
    pairs = re.findall(r"sent: ([\d,]+) before -> ([\d,]+) after", out)
    assert len(pairs) == 5
    assert all(int(b.replace(",", "")) > int(a.replace(",", "")) for b, a in pairs)


def test_demo_compacts_each_window_once_and_the_tool_calls_stay_paired(demo_db):
    with service(demo_db) as svc:
        assert sorted(s.id for s in svc.sessions()) == sorted(ALL_DEMO_SESSIONS)
        strategies = set()
        for session_id in DEMO_SESSIONS:
            log = svc.events(session_id)
            boundaries = [e for e in log if e.type == EventType.COMPACTION]
            assert len(boundaries) == 1
            strategies.add(boundaries[0].payload["strategy"])
            view = svc.view(session_id)
            assert view[0].role == "system"
            assert len(view) < len(log)
            called = {c.id for e in view if e.message for c in e.message.tool_calls}
            answered = {r.call_id for e in view if e.message for r in e.message.tool_results}
            assert answered <= called
        # what the demo's text says about last_events(8): the cut moved forward to turn 9
        preserved = CompactionBoundary.newest(svc.events("demo-last-events")).preserved_event_ids
        assert [e.seq for e in svc.view("demo-last-events")][1:] == list(range(32, 38))
        assert len(preserved) == 6
        tools = [e.message for e in svc.events("demo-last-events") if e.role == "tool"]
        assert sum(1 for m in tools if len(m.tool_results) == 2) == 2  # parallel calls
        summary = [e for e in svc.events("demo-summary") if e.synthetic]
    assert [e.role for e in summary] == ["user", "assistant"]
    assert strategies == {
        "window:last_events(8)",
        "window:last_turns(3)",
        "window:token_budget(600)",
        "window:last_turns(2)+summary",
    }


def test_the_demo_follow_up_summary_lists_the_files_read_and_modified(db, capsys):
    code, out, err = run(capsys, "--db", db, "demo")
    assert code == 0, err
    part = out.split("=== demo-files: window:last_turns(1)+summary ===", 1)[1]
    # the runner ran the scripted model's calls with the real tools, on real files
    assert "turn 1: ran read_file ok, read_file ok, edit_file ok; no compaction yet" in part
    assert "turn 2: no tool calls; then the runner compacted" in part
    assert "deploy/checkout-api.yaml in the temporary folder now says 'max_size: 100'" in part
    # the printed summary turn ends with its files section
    printed = part.split("the summary turn the ExtractiveSummarizer wrote, in full:\n", 1)[1]
    printed = printed.split("\n\n", 1)[0]
    assert printed.startswith("  User: Remind me what we have covered")
    assert printed.endswith(
        "    Files modified:\n"
        "    - deploy/checkout-api.yaml\n"
        "    Files read:\n"
        "    - runbooks/payment-pool.md"
    )
    files = {"read": ["runbooks/payment-pool.md"], "modified": ["deploy/checkout-api.yaml"]}
    assert json.dumps({"turnlog.files": files}) in part
    # docs/cli.md quotes the end of that summary turn as the demo prints it
    docs = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    quoted = docs.split("## `turnlog demo`", 1)[1].split("```\n", 2)[1]
    assert printed.endswith(quoted.rstrip("\n"))
    with service(db) as svc:
        log = svc.events("demo-files")
        view = svc.view("demo-files")
    # stored: the summary message's metadata holds the files, and its text lists them
    summary = [e.message for e in log if e.synthetic]
    assert [m.role for m in summary] == ["user", "assistant"]
    assert summary[1].metadata["turnlog.files"] == files
    assert summary[1].text.endswith(
        "Files modified:\n- deploy/checkout-api.yaml\nFiles read:\n- runbooks/payment-pool.md"
    )
    # the tool results the runner stored are what the tools returned from the files
    results = [r for e in log if e.message for r in e.message.tool_results]
    assert [(r.name, r.is_error) for r in results] == [
        ("read_file", False), ("read_file", False), ("edit_file", False)
    ]  # fmt: skip
    assert results[1].content == DEMO_FILES["deploy/checkout-api.yaml"]
    assert "    max_size: 10\n" in results[1].content
    # turn 1 (six events) left the view; the summary turn and turn 2 are sent
    assert CompactionBoundary.newest(log).covered_event_count == 6
    assert [e.seq for e in view] == [1, 11, 12, 8, 9]


def test_demo_is_rerunnable(demo_db, capsys):
    code, out, _ = run(capsys, "--db", demo_db, "demo")
    assert code == 0
    assert out.count("BOUNDARY") == 5
    with service(demo_db) as svc:
        assert len(svc.sessions()) == 5
        assert all(svc.version(s) in (38, 40) for s in DEMO_SESSIONS)
        assert svc.version("demo-files") == 12


def test_turnlog_db_environment_variable_is_the_default(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TURNLOG_DB", str(tmp_path / "env.db"))
    code, _, _ = run(capsys, "demo")
    assert code == 0
    assert (tmp_path / "env.db").exists()


def test_the_default_database_is_turnlog_db_in_the_working_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TURNLOG_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "demo")[0] == 0
    assert (tmp_path / "turnlog.db").exists()


def test_db_option_may_follow_the_command(demo_db, capsys):
    code, out, _ = run(capsys, "sessions", "--db", demo_db)
    assert code == 0 and "demo-summary" in out
    code, out, _ = run(capsys, "show", "demo-summary", "--db", demo_db, "--log")
    assert code == 0 and "BOUNDARY" in out


def test_an_unexpected_exception_is_still_one_line(demo_db, capsys, monkeypatch):
    def broken(self, **kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(SessionService, "sessions", broken)
    code, _, err = run(capsys, "--db", demo_db, "sessions")
    assert_one_error_line(err, code, 1)
    assert "unexpected RuntimeError: boom" in err and "TURNLOG_DEBUG" in err


def test_console_script(tmp_path):
    script = shutil.which("turnlog", path=str(Path(sys.executable).parent)) or shutil.which(
        "turnlog"
    )
    assert script, "the turnlog console script is not installed: pip install -e '.[dev]'"
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    env.pop("TURNLOG_DB", None)
    helped = subprocess.run([script, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert helped.returncode == 0, helped.stderr
    for command in COMMANDS:
        assert command in helped.stdout
    db = tmp_path / "script.db"
    demo = subprocess.run(
        [script, "--db", str(db), "demo"], capture_output=True, text=True, env=env, timeout=120
    )
    assert demo.returncode == 0, demo.stderr
    assert demo.stdout.count("BOUNDARY") == 5
    assert db.exists()
    bad = subprocess.run(
        [script, "--db", str(db), "show", "nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert_one_error_line(bad.stderr, bad.returncode, 1)


# -- import ------------------------------------------------------------------------------------

OPENAI = [
    {"role": "system", "content": "You plan trips."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Rome"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "18C, cloudy"},
    {"role": "tool", "tool_call_id": "c2", "name": "weather", "content": "24C, sunny"},
    {"role": "assistant", "content": "Paris: 18C and cloudy. Rome: 24C and sunny."},
    {"role": "user", "content": "Book Rome then."},
    {"role": "assistant", "content": "Done."},
]


def check_openai_session(db, session_id):
    with service(db) as svc:
        messages = svc.view_messages(session_id)
    assert [m.role for m in messages] == [
        "system", "user", "assistant", "tool", "assistant", "user", "assistant"
    ]  # fmt: skip
    assert messages[1].text == "Weather in Paris and Rome?"
    calls = messages[2].tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("c1", "weather", '{"city": "Paris"}'),
        ("c2", "weather", '{"city": "Rome"}'),
    ]
    # the two parallel answers became one tool message with two results
    results = messages[3].tool_results
    assert [(r.call_id, r.name, r.content) for r in results] == [
        ("c1", "weather", "18C, cloudy"),
        ("c2", "weather", "24C, sunny"),
    ]


def test_import_openai_json_with_parallel_tool_calls(db, tmp_path, capsys):
    path = write_json(tmp_path / "trip.json", OPENAI)
    code, out, err = run(capsys, "--db", db, "import", path)
    assert code == 0, err
    assert "imported 7 events into session trip" in out
    check_openai_session(db, "trip")
    code, out, _ = run(capsys, "--db", db, "show", "trip")
    assert code == 0
    assert "Tool [responses: weather → 18C, cloudy, weather → 24C, sunny]" in out


def test_import_openai_messages_object_and_session_option(db, tmp_path, capsys):
    path = write_json(tmp_path / "req.json", {"model": "gpt-4o", "messages": OPENAI})
    assert run(capsys, "--db", db, "import", path, "--session", "chosen")[0] == 0
    check_openai_session(db, "chosen")


def test_import_jsonl(db, tmp_path, capsys):
    path = tmp_path / "trip.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in OPENAI) + "\n\n", encoding="utf-8")
    code, out, err = run(capsys, "--db", db, "import", path, "--session", "lines")
    assert code == 0, err
    assert "imported 7 events into session lines" in out
    check_openai_session(db, "lines")


SHAREGPT = {
    "system": "You are a helpful assistant.",
    "conversations": [
        {"from": "human", "value": "What is 6 times 7, and the weather in Oslo?"},
        {
            "from": "function_call",
            "value": json.dumps(
                [
                    {"name": "calc", "arguments": {"expr": "6*7"}},
                    {"name": "weather", "arguments": {"city": "Oslo"}},
                ]
            ),
        },
        {"from": "observation", "value": "42"},
        {"from": "observation", "value": "-3C, snow"},
        {"from": "gpt", "value": "42, and Oslo has -3C with snow."},
        {"from": "human", "value": "Thanks"},
        {"from": "gpt", "value": "You're welcome."},
    ],
}


def test_import_sharegpt_record(db, tmp_path, capsys):
    path = write_json(tmp_path / "sg.json", SHAREGPT)
    code, out, err = run(capsys, "--db", db, "import", path)
    assert code == 0, err
    assert "imported 7 events into session sg (sharegpt)" in out
    with service(db) as svc:
        messages = svc.view_messages("sg")
    assert [m.role for m in messages] == [
        "system", "user", "assistant", "tool", "assistant", "user", "assistant"
    ]  # fmt: skip
    calls = messages[2].tool_calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("calc", {"expr": "6*7"}),
        ("weather", {"city": "Oslo"}),
    ]
    results = messages[3].tool_results
    assert [(r.call_id, r.name, r.content) for r in results] == [
        (calls[0].id, "calc", "42"),
        (calls[1].id, "weather", "-3C, snow"),
    ]
    code, out, _ = run(capsys, "--db", db, "show", "sg", "--log")
    assert code == 0 and "calc → 42" in out


def test_import_sharegpt_records_become_one_session_each(db, tmp_path, capsys):
    second = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    path = write_json(tmp_path / "set.json", [SHAREGPT, second])
    code, out, err = run(capsys, "--db", db, "import", path, "--session", "ds")
    assert code == 0, err
    assert "session ds-1" in out and "session ds-2" in out
    with service(db) as svc:
        assert svc.version("ds-1") == 7
        assert [m.text for m in svc.view_messages("ds-2")] == ["hi", "yo"]
    lines = tmp_path / "set.jsonl"
    lines.write_text(json.dumps(SHAREGPT) + "\n" + json.dumps(second) + "\n", encoding="utf-8")
    assert run(capsys, "--db", db, "import", lines)[0] == 0
    with service(db) as svc:
        assert svc.version("set-2") == 2


BAD_IMPORTS = {
    "not json": ("{not json", "is not JSON"),
    "empty": ("  \n", "is empty"),
    "scalar": ("42", "expected a list"),
    "no messages": ("[]", "holds no messages"),
    "unknown role": ('[{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]',
                     "entry 2: unknown role 'robot'"),
    "orphan tool result": ('[{"role": "tool", "tool_call_id": "x", "content": "a"}]',
                           "entry 1: tool_call_id 'x'"),
    "image part without url": (
        '[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]',
        "entry 1: content part 1 (image_url) is malformed",
    ),
    "image part with bad base64": (
        '[{"role": "user", "content": [{"type": "image_url", '
        '"image_url": {"url": "data:image/png;base64,***"}}]}]',
        "entry 1: content part 1 (image_url) is malformed",
    ),
    "image part of another type": (
        '[{"role": "user", "content": [{"type": "image_url", '
        '"image_url": {"url": "data:text/html;base64,PGI+"}}]}]',
        "entry 1: content part 1 (image_url) is malformed: an image",
    ),
    "an image in a system message": (
        '[{"role": "system", "content": [{"type": "image_url", '
        '"image_url": {"url": "https://a/b.png"}}]}]',
        "entry 1: only a user message's content may hold images",
    ),
    "unknown part type": ('[{"role": "user", "content": [{"type": "video", "video": {}}]}]',
                          "entry 1: content part 1 is of type 'video'"),
    "tool call without name": (
        '[{"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]}]',
        "entry 1: tool call 1",
    ),
    "user without content": ('[{"role": "user"}]', "entry 1: a user message needs content"),
    "bad jsonl line": ('{"role": "user", "content": "a"}\n{"role": "user",\n', "line 2: not JSON"),
    "bad jsonl role": ('{"role": "user", "content": "a"}\n\n{"role": "x", "content": "b"}\n',
                       "line 3: unknown role"),
    "sharegpt turn without role": ('[{"from": "human", "value": "hi"}]', "ShareGPT turn"),
    "sharegpt unknown from": ('{"conversations": [{"from": "alien", "value": "hi"}]}',
                              "turn 1: unknown 'from' 'alien'"),
    "sharegpt orphan observation": ('{"conversations": [{"from": "observation", "value": "1"}]}',
                                    "turn 1: an observation"),
    "sharegpt second record bad": (
        '[{"conversations": [{"from": "human", "value": "hi"}]}, {"conversations": 3}]',
        "entry 2: expected a ShareGPT record",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_IMPORTS))
def test_bad_import_is_one_line_exit_2_and_writes_nothing(case, tmp_path, capsys):
    text, expected = BAD_IMPORTS[case]
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    fresh = tmp_path / "fresh.db"
    code, out, err = run(capsys, "--db", fresh, "import", path)
    assert out == ""
    assert_one_error_line(err, code, 2)
    assert expected in err
    assert "bad.json" in err
    assert not fresh.exists()  # not even the database file
    # and on an existing database: no session written
    existing = tmp_path / "existing.db"
    with service(existing):
        pass
    code, _, err = run(capsys, "--db", existing, "import", path)
    assert_one_error_line(err, code, 2)
    with service(existing) as svc:
        assert svc.sessions() == []


def test_import_missing_or_non_utf8_file(db, tmp_path, capsys):
    code, _, err = run(capsys, "--db", db, "import", tmp_path / "nope.json")
    assert_one_error_line(err, code, 2)
    assert "no such file" in err
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'[{"role": "user", "content": "caf\xe9"}]')
    code, _, err = run(capsys, "--db", db, "import", latin)
    assert_one_error_line(err, code, 2)
    assert "not UTF-8" in err


def test_import_into_a_taken_session_id_writes_nothing(db, tmp_path, capsys):
    path = write_json(tmp_path / "trip.json", OPENAI)
    assert run(capsys, "--db", db, "import", path)[0] == 0
    code, _, err = run(capsys, "--db", db, "import", path)
    assert_one_error_line(err, code, 1)
    assert "'trip' already exists" in err and "--session" in err
    # several records, the second id taken: the first is not written either
    second = {"conversations": [{"from": "human", "value": "hi"}]}
    records = write_json(tmp_path / "r.json", [second, second])
    with service(db) as svc:
        svc.create("r-2")
    code, _, err = run(capsys, "--db", db, "import", records)
    assert_one_error_line(err, code, 1)
    with service(db) as svc:
        assert svc.find("r-1") is None


# -- sessions, show, compact, delete, expire ---------------------------------------------------


def test_sessions_lists_ids_and_sizes(demo_db, capsys):
    code, out, _ = run(capsys, "--db", demo_db, "sessions")
    assert code == 0
    header, *rows = out.strip().splitlines()
    assert header.split()[:2] == ["session", "created"]
    assert sorted(r.split()[0] for r in rows) == sorted(ALL_DEMO_SESSIONS)
    assert "tokens" not in header  # counted only with --tokens
    code, out, _ = run(capsys, "--db", demo_db, "sessions", "--json")
    listed = {s["id"]: s for s in json.loads(out)}
    assert listed["demo-summary"]["version"] == 40
    assert listed["demo-summary"]["view_messages"] == 9
    assert "view_tokens" not in listed["demo-summary"]
    code, out, _ = run(capsys, "--db", demo_db, "sessions", "--tokens", "--json")
    assert {s["id"]: s for s in json.loads(out)}["demo-summary"]["view_tokens"] > 0
    code, out, _ = run(capsys, "--db", demo_db, "sessions", "--tokens")
    header, *rows = out.strip().splitlines()
    assert header.split()[-1] == "tokens"
    assert all(r.split()[-1].isdigit() for r in rows)


def test_sessions_on_an_empty_database(db, capsys):
    with service(db):
        pass
    code, out, _ = run(capsys, "--db", db, "sessions")
    assert code == 0 and "no sessions" in out


def test_show_view_log_and_json(demo_db, capsys):
    code, out, _ = run(capsys, "--db", demo_db, "show", "demo-summary")
    assert code == 0
    assert "summary" in out and "  covered  " not in out
    code, log_out, _ = run(capsys, "--db", demo_db, "show", "demo-summary", "--log")
    assert code == 0
    assert log_out.count("  covered  ") == 30 and "BOUNDARY" in log_out
    code, view_out, _ = run(capsys, "--db", demo_db, "show", "demo-summary", "--view")
    assert view_out == out
    code, out, _ = run(capsys, "--db", demo_db, "show", "demo-summary", "--log", "--json")
    shown = json.loads(out)
    statuses = [e["status"] for e in shown["log"]]
    assert statuses.count("covered") == 30
    assert statuses.count("summary") == 2
    boundary = next(e for e in shown["log"] if e["type"] == "COMPACTION")
    assert boundary["payload"]["covered_event_count"] == 30
    code, out, _ = run(capsys, "--db", demo_db, "show", "demo-summary", "--json")
    view = json.loads(out)["view"]
    assert [e["status"] for e in view[:3]] == ["pinned", "summary", "summary"]
    assert view[3]["message"]["role"] == "user"


def test_show_marks_custom_events_and_superseded_system_messages(db, capsys):
    from turnlog import Message, SessionEvent

    with service(db) as svc:
        svc.create("s")
        svc.append_message("s", Message.system("v1"))
        svc.append_message("s", Message.user("hi"))
        svc.append_event(SessionEvent.for_payload("s", EventType.of("ACME.AUDIT"), {"ok": True}))
        svc.append_message("s", Message.system("v2"))
    code, out, _ = run(capsys, "--db", db, "show", "s", "--log")
    assert code == 0
    assert re.search(r"superseded\s+system\s+System: v1", out)
    assert re.search(r"view\s+system\s+System: v2", out)
    assert 'ACME.AUDIT  {"ok": true}' in out


@pytest.mark.parametrize(
    ("option", "size", "strategy"),
    [
        ("--last-events", 8, "window:last_events(8)"),
        ("--last-turns", 2, "window:last_turns(2)"),
        ("--token-budget", 300, "window:token_budget(300)"),
    ],
)
def test_compact_with_each_window(option, size, strategy, db, tmp_path, capsys):
    long = [OPENAI[0]] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}: " + "la " * 20}
        for i in range(40)
    ]
    assert run(capsys, "--db", db, "import", write_json(tmp_path / "long.json", long))[0] == 0
    code, out, err = run(capsys, "--db", db, "compact", "long", option, size)
    assert code == 0, err
    assert f"long: compacted with {strategy}" in out
    assert "covered" in out and "the boundary estimates" in out
    with service(db) as svc:
        boundary = CompactionBoundary.newest(svc.events("long"))
        assert boundary is not None and boundary.strategy == strategy
        assert svc.view("long")[0].role == "system"
    code, out, _ = run(capsys, "--db", db, "compact", "long", option, size)
    assert code == 0 and "unchanged" in out


def test_compact_triggers(demo_db, capsys):
    # demo-last-turns holds 3 turns: --if-turns 5 does not fire, --if-turns 2 does
    code, out, _ = run(capsys, "--db", demo_db, "compact", "demo-last-turns", "--last-turns", "1",
                       "--if-turns", "5")  # fmt: skip
    assert code == 0 and "unchanged (the trigger did not fire)" in out
    code, out, _ = run(capsys, "--db", demo_db, "compact", "demo-last-turns", "--last-turns", "1",
                       "--if-turns", "5", "--if-tokens", "10")  # fmt: skip
    assert code == 0 and "compacted" in out  # any_of: the token trigger fired
    with service(demo_db) as svc:
        assert (
            len([e for e in svc.events("demo-last-turns") if e.type == EventType.COMPACTION]) == 2
        )


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "nope"],
        ["show", "nope", "--log"],
        ["compact", "nope", "--last-turns", "2"],
        ["delete", "nope"],
    ],
)
def test_unknown_session_is_one_clear_line(argv, demo_db, capsys):
    code, out, err = run(capsys, "--db", demo_db, *argv)
    assert_one_error_line(err, code, 1)
    assert "session 'nope' does not exist" in err
    assert out == ""


@pytest.mark.parametrize("argv", [["sessions"], ["show", "x"], ["expire"], ["delete", "x"]])
def test_a_missing_database_is_one_clear_line(argv, tmp_path, capsys):
    code, _, err = run(capsys, "--db", tmp_path / "missing.db", *argv)
    assert_one_error_line(err, code, 1)
    assert "no turnlog database" in err
    assert not (tmp_path / "missing.db").exists()


def test_a_file_that_is_not_a_database_is_one_clear_line(tmp_path, capsys):
    path = tmp_path / "notes.db"
    path.write_text("just some notes, not SQLite\n" * 100)
    for argv in (["sessions"], ["demo"]):
        code, _, err = run(capsys, "--db", path, *argv)
        assert_one_error_line(err, code, 1)
        assert "not a readable SQLite database" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["compact", "demo-summary", "--last-events", "0"],
        ["compact", "demo-summary", "--last-turns", "2", "--if-tokens", "-1"],
    ],
)
def test_bad_numbers_are_exit_2(argv, demo_db, capsys):
    code, _, err = run(capsys, "--db", demo_db, *argv)
    assert_one_error_line(err, code, 2)
    assert "positive" in err


def test_usage_errors_are_exit_2(demo_db, capsys):
    assert run(capsys, "--db", demo_db, "compact", "demo-summary")[0] == 2  # no window
    assert run(capsys, "--db", demo_db, "show", "demo-summary", "--log", "--view")[0] == 2
    assert run(capsys, "--db", demo_db, "frobnicate")[0] == 2
    code, _, err = run(capsys, "--db", demo_db, "compact", "x", "--last-turns", "two")
    assert code == 2 and "Traceback" not in err


def test_delete_and_expire(demo_db, capsys):
    code, out, _ = run(capsys, "--db", demo_db, "delete", "demo-summary")
    assert code == 0 and "deleted session demo-summary" in out
    last_year = FakeClock(datetime.now(UTC) - timedelta(days=365))
    with SessionService(SqliteStore(demo_db), clock=last_year) as svc:
        assert svc.find("demo-summary") is None
        svc.create("old", ttl=timedelta(days=1))
    code, out, _ = run(capsys, "--db", demo_db, "expire")
    assert code == 0 and out.strip() == "deleted 1 expired session"
    code, out, _ = run(capsys, "--db", demo_db, "expire")
    assert out.strip() == "deleted 0 expired sessions"
    with service(demo_db) as svc:
        assert len(svc.sessions()) == 4


# -- help and docs -----------------------------------------------------------------------------


def test_top_level_help_lists_every_command(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\s", out, re.MULTILINE), command
    assert "Example" in out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command, capsys):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert "Example" in out
    assert f"turnlog {command}" in out.split("Example", 1)[1]


@pytest.mark.parametrize("command", COMMANDS)
def test_docs_cli_page_covers_every_command(command):
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert f"## `turnlog {command}" in text
    assert f"turnlog {command}" in text.split(f"## `turnlog {command}", 1)[1]


def test_readme_quick_start_is_exactly_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", quick, re.DOTALL)
    lines = [line for block in commands for line in block.strip().splitlines()]
    assert lines == [
        "pip install . && turnlog demo",
        "sh scripts/install-test-deps.sh && pip install -e '.[dev]' && python -m pytest",
    ]


def test_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert blocks, "README.md has no python example"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TURNLOG_STORE", raising=False)
    for block in blocks:
        if "localhost:11434" in block:
            continue  # the chat loop needs a model server: tests/test_chat_docs.py runs it
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    lines = capsys.readouterr().out.splitlines()
    # What the README says the example does: the first two turns (the tool-call turn's four
    # messages and the next two) are covered; the model is sent the system prompt, then the
    # last two turns; the log holds the 11 messages and the boundary.
    assert re.fullmatch(r"covered 6 events, ~\d+ tokens", lines[0]), lines[0]
    assert int(lines[0].split("~")[1].split()[0]) > 0
    assert lines[1:6] == [
        "   system: You are a concise travel assistant.",
        "     user: Where to eat it?",
        "assistant: Pastéis de Belém, near the monastery.",
        "     user: How do I get there?",
        "assistant: Tram 15E from Praça da Figueira, about 30 minutes.",
    ]
    assert lines[6] == "12 events in the log: the 11 messages and the boundary"
    # the asyncio example
    assert lines[7:9] == [
        "     user: What's the weather in Lisbon?",
        "assistant: Sunny and 22C.",
    ]
    # the scaling-out example, on the default store
    assert lines[9:] == ["SqliteStore 1"]


def test_docs_link_to_each_other():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in ["concepts", "compaction", "stores", "errors", "cli", "benchmarks", "async"]:
        assert f"docs/{page}.md" in readme
    for page in ["concepts", "compaction", "stores", "errors", "cli", "async"]:
        assert (ROOT / "docs" / f"{page}.md").exists()


# -- import: the view rules ---------------------------------------------------------------------

BROKEN = [
    {"role": "assistant", "content": "Hi! I am the trip planner."},  # R3: the assistant first
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        ],
    },
    {"role": "user", "content": "Never mind."},  # R2: c1 is never answered
    {"role": "assistant", "content": ""},  # empty
    {"role": "tool", "tool_call_id": "c1", "content": "18C"},  # R1: after the next message
]


def test_import_refuses_a_transcript_that_breaks_the_view_rules(db, tmp_path, capsys):
    path = write_json(tmp_path / "broken.json", BROKEN)
    code, _out, err = run(capsys, "--db", db, "import", path)
    assert_one_error_line(err, code, 2)  # bad input, like a malformed file
    assert "message 1 (assistant)" in err and "R3" in err
    assert "--allow-broken" in err and "check_rules" not in err
    with service(db) as svc:
        assert svc.find("broken") is None  # nothing written


def test_import_allow_broken_stores_it_and_the_view_repairs_it(db, tmp_path, capsys):
    path = write_json(tmp_path / "broken.json", BROKEN)
    code, out, err = run(capsys, "--db", db, "import", path, "--allow-broken")
    assert code == 0, err
    assert "imported 6 events into session broken" in out
    with service(db) as svc:
        assert [e.message.text for e in svc.events("broken")][:2] == [
            BROKEN[0]["content"],
            "Weather in Paris?",
        ]  # stored as it is
        sent = svc.view_messages("broken")
    assert [(m.role, m.metadata.get("turnlog.repair")) for m in sent] == [
        ("user", "placeholder user message"),
        ("assistant", None),
        ("user", None),
        ("assistant", None),
        ("tool", "missing tool results"),
        ("user", None),
    ]


def test_show_json_carries_a_failed_tool_results_flag(db, capsys):
    from turnlog import Message, ToolCall, ToolResult

    with service(db) as svc:
        svc.create("s")
        svc.append_message("s", Message.user("weather?"))
        svc.append_message("s", Message.assistant(None, [ToolCall("c1", "w"), ToolCall("c2", "w")]))
        svc.append_message(
            "s",
            Message.tool(
                [ToolResult("c1", "w", "no city", is_error=True), ToolResult("c2", "w", "3C")]
            ),
        )
    code, out, _ = run(capsys, "--db", db, "show", "s", "--json")
    assert code == 0
    results = json.loads(out)["view"][2]["message"]["tool_results"]
    assert [r["is_error"] for r in results] == [True, False]
    code, out, _ = run(capsys, "--db", db, "show", "s")
    assert "w → error: no city" in out


@pytest.mark.parametrize("kind", ["openai", "turnlog"])
def test_import_reads_a_fifo_that_can_be_read_only_once(tmp_path, capsys, kind):
    """`turnlog import <(...)`: telling the formats apart reads the start of the file, which a
    pipe gives only once; the import still reads it whole, and errors name the FIFO."""
    import os
    import threading

    from turnlog import Message

    if kind == "openai":
        text = json.dumps(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        )
    else:
        source = tmp_path / "src.db"
        with service(source) as svc:
            svc.create("s")
            svc.append_message("s", Message.user("hi"))
            svc.append_message("s", Message.assistant("yo"))
        dump = tmp_path / "s.jsonl"
        assert run(capsys, "--db", source, "export", "s", "-o", dump)[0] == 0
        text = dump.read_text("utf-8")

    def feed(fifo, body):
        with open(fifo, "w", encoding="utf-8") as f:  # blocks until the import opens it
            f.write(body)
        # an import that opened the FIFO a second time would block for ever: give it an empty
        # second reading instead, so a regression fails (as "is empty") rather than hangs
        threading.Thread(target=lambda: open(fifo, "w").close(), daemon=True).start()

    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=feed, args=(fifo, text), daemon=True)
    writer.start()
    code, _, err = run(capsys, "--db", tmp_path / "a.db", "import", fifo, "--session", "x")
    writer.join(10)
    assert code == 0, err
    with service(tmp_path / "a.db") as svc:
        assert [e.message.text for e in svc.events("x")] == ["hi", "yo"]

    bad = tmp_path / "bad.fifo"
    os.mkfifo(bad)
    writer = threading.Thread(target=feed, args=(bad, '[{"role": "robot"}]'), daemon=True)
    writer.start()
    code, _, err = run(capsys, "--db", tmp_path / "b.db", "import", bad)
    writer.join(10)
    assert code == 2 and f"{bad}, entry 1: unknown role 'robot'" in err
    for path in (fifo, bad):  # release the feeders' second writers, still waiting for a reader
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
