"""A cold process pays only for what it uses: `import turnlog` stays small, and nothing that
counts no tokens loads the tokenizer (about 0.6 s of CPU for o200k_base).

Each test runs a fresh Python, since the test session itself has imported everything.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What `import turnlog` must not bring in: event loops, drivers, provider clients, the tokenizer,
# the embedding runtime, the agent frameworks, and the standard modules only some paths need.
NOT_ON_IMPORT = [
    "asyncio", "concurrent", "logging", "hashlib", "ssl", "socket", "http", "email",
    "toktok", "tiktoken", "psycopg", "psycopg_pool", "redis", "openai", "anthropic", "httpx",
    "numpy", "onnxruntime", "agents", "langchain_core", "pydantic_ai", "pydantic",
    "turnlog.chat", "turnlog.models", "turnlog.toolsearch", "turnlog.integrations", "turnlog.cli",
]  # fmt: skip


def run_fresh(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONWARNINGS": "error"}
    env.pop("TURNLOG_STORE", None)
    env.pop("TURNLOG_DB", None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


def test_import_turnlog_loads_none_of_the_heavy_modules(tmp_path):
    out = run_fresh(
        f"""
        import sys
        import turnlog
        from turnlog import *
        loaded = [m for m in {NOT_ON_IMPORT!r} if m in sys.modules]
        print(loaded)
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# A database with one session (a tool-calling turn), appended through the service, which counts
# each message's tokens at append (loading the tokenizer) and stores the counts with the events.
WRITE = """
from turnlog import Message, SessionService, SqliteStore, ToolCall, ToolResult

with SessionService(SqliteStore("t.db")) as svc:
    svc.create("s1")
    svc.append_message("s1", Message.user("what is the weather in Oslo?"))
    svc.append_message("s1", Message.assistant(tool_calls=[ToolCall("c1", "weather", "{}")]))
    svc.append_message("s1", Message.tool(ToolResult("c1", "weather", "3 C, light rain")))
    svc.append_message("s1", Message.assistant("It is 3 C with light rain in Oslo."))
"""

# Then, in a fresh process: reads, appends whose counts are known (the events read back, copied
# into another database, as an import of an export does), appends without counting, and the
# CLI commands that count nothing, checking the tokenizer after each.
COMMANDS = """
import sys
from turnlog import Message, SessionService, SqliteStore
from turnlog.cli import main


def tokenizer_loaded():
    # toktok builds its vocabulary on the first count and keeps it in _CACHE
    toktok = sys.modules.get("toktok")
    return "tiktoken" in sys.modules or bool(toktok is not None and toktok._CACHE)


with SessionService(SqliteStore("t.db")) as svc:
    svc.view("s1")
    stored = svc.events("s1")
    assert all(e.tokens is not None for e in stored), stored
with SessionService(SqliteStore("copy.db")) as svc:
    svc.create("s1")
    svc.append_events("s1", stored, 0)
with SessionService(SqliteStore("t.db"), record_tokens=False) as svc:
    svc.append_message("s1", Message.user("and tomorrow?"))
print("appends", tokenizer_loaded())
for argv in COMMANDS:
    assert main(["--db", "t.db", *argv]) == 0
    print(" ".join(argv), tokenizer_loaded(), file=sys.stderr)
print("commands", tokenizer_loaded())
"""


def written(tmp_path: Path) -> Path:
    out = run_fresh(WRITE, tmp_path)
    assert out.returncode == 0, out.stderr
    return tmp_path


def test_appends_and_commands_that_count_nothing_never_load_the_tokenizer(tmp_path):
    commands = [
        ["sessions"],
        ["sessions", "--json"],
        ["show", "s1"],
        ["show", "s1", "--log"],
        ["show", "s1", "--json"],
        ["show", "s1", "--log", "--json"],
        ["show", "s1", "--format", "json"],
        ["export", "s1"],
        ["export", "s1", "--log", "--format", "html"],
        ["export", "s1", "--format", "openai"],
        ["export", "s1", "--format", "anthropic"],
    ]
    out = run_fresh(f"COMMANDS = {commands!r}\n" + COMMANDS, written(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert (lines[0], lines[-1]) == ("appends False", "commands False"), out.stderr


def test_asking_for_tokens_loads_it(tmp_path):
    # The check above can fail: a command that counts does load the tokenizer.
    for argv in (["sessions", "--tokens"], ["show", "s1", "--tokens", "--json"]):
        (tmp_path / argv[0]).mkdir()
        out = run_fresh(f"COMMANDS = {[argv]!r}\n" + COMMANDS, written(tmp_path / argv[0]))
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert (lines[0], lines[-1]) == ("appends False", "commands True"), out.stderr


def test_an_append_that_counts_loads_it(tmp_path):
    # and so does an append of events with no count yet (the service counts them)
    check = "import sys\n" + WRITE + "print(bool(sys.modules['toktok']._CACHE))\n"
    out = run_fresh(check, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
