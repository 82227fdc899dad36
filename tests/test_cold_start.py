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


# A database with one session (a tool-calling turn), appended through the service; then the CLI
# commands that count nothing, each in the same process, checking the tokenizer after each.
COMMANDS = """
import sys
from turnlog import Message, SessionService, SqliteStore, ToolCall, ToolResult
from turnlog.cli import main


def tokenizer_loaded():
    return "toktok" in sys.modules or "tiktoken" in sys.modules


with SessionService(SqliteStore("t.db")) as svc:
    svc.create("s1")
    svc.append_message("s1", Message.user("what is the weather in Oslo?"))
    svc.append_message("s1", Message.assistant(tool_calls=[ToolCall("c1", "weather", "{}")]))
    svc.append_message("s1", Message.tool(ToolResult("c1", "weather", "3 C, light rain")))
    svc.append_message("s1", Message.assistant("It is 3 C with light rain in Oslo."))
    svc.view("s1")
    svc.events("s1")
print("appends", tokenizer_loaded())
for argv in COMMANDS:
    assert main(["--db", "t.db", *argv]) == 0
    print(" ".join(argv), tokenizer_loaded(), file=sys.stderr)
print("commands", tokenizer_loaded())
"""


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
    out = run_fresh(f"COMMANDS = {commands!r}\n" + COMMANDS, tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert (lines[0], lines[-1]) == ("appends False", "commands False"), out.stderr


def test_asking_for_tokens_loads_it(tmp_path):
    # The check above can fail: a command that counts does load the tokenizer.
    for argv in (["sessions", "--tokens"], ["show", "s1", "--tokens", "--json"]):
        (tmp_path / argv[0]).mkdir()
        out = run_fresh(f"COMMANDS = {[argv]!r}\n" + COMMANDS, tmp_path / argv[0])
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert (lines[0], lines[-1]) == ("appends False", "commands True"), out.stderr
