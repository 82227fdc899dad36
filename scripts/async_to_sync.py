"""Generate turnlog's sync modules from their async sources.

The async code is the source; each sync twin is produced from it by this script and must not be
edited by hand. The transform works on the concrete syntax tree (libcst), so comments and layout
survive:

- `async def`, `async with`, `async for` lose `async`; `await x` becomes `x`.
- Names are renamed through one explicit map, `RENAMES` (`AsyncSessionService` ->
  `SessionService`, `service_async` -> `service`, `__aenter__` -> `__enter__`, ...), plus the dotted
  module paths of `MODULES` (`redis.asyncio` -> `redis`). A name that looks async (`AsyncFoo`,
  `foo_async`) and is not in the map stops the script: add it, so no name is renamed by guess.
- The same map applies inside strings and comments, so docstrings read right in both twins, and
  the article before a renamed name follows it ("an AsyncSessionService" -> "a SessionService").
- A block written `if True:  # ASYNC` keeps its body in the async source and its `else:` body in
  the sync twin, for the few lines that differ in more than names. The `else:` body is copied
  as written, never renamed: it is sync code already, so a message there may name an async class
  (e.g. "an asyncio model goes with AsyncSessionChat").

The output is then passed through `ruff check --fix` (import and `__all__` order, unused
imports) and `ruff format`.

Usage:
    python scripts/async_to_sync.py           # regenerate every sync twin
    python scripts/async_to_sync.py --check   # exit 1 when a twin differs from its source
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import libcst as cst

ROOT = Path(__file__).resolve().parent.parent

# (async source, generated sync twin), relative to the repository root.
PAIRS: tuple[tuple[str, str], ...] = (
    ("src/turnlog/stores/protocol_async.py", "src/turnlog/stores/protocol.py"),
    ("src/turnlog/service_async.py", "src/turnlog/service.py"),
    ("src/turnlog/stores/opening_async.py", "src/turnlog/stores/opening.py"),
    ("src/turnlog/toolsearch/search_async.py", "src/turnlog/toolsearch/search.py"),
    (
        "src/turnlog/stores/postgres/connections_async.py",
        "src/turnlog/stores/postgres/connections.py",
    ),
    ("src/turnlog/stores/postgres/schema_async.py", "src/turnlog/stores/postgres/schema.py"),
    ("src/turnlog/stores/postgres/store_async.py", "src/turnlog/stores/postgres/store.py"),
    ("src/turnlog/stores/redis/core_async.py", "src/turnlog/stores/redis/core.py"),
    ("src/turnlog/stores/redis/store_async.py", "src/turnlog/stores/redis/store.py"),
    ("src/turnlog/stores/redis/cluster_async.py", "src/turnlog/stores/redis/cluster.py"),
    ("src/turnlog/models/calls_async.py", "src/turnlog/models/calls.py"),
    ("src/turnlog/models/openai_async.py", "src/turnlog/models/openai.py"),
    ("src/turnlog/models/anthropic_async.py", "src/turnlog/models/anthropic.py"),
    ("src/turnlog/models/openai_responses_async.py", "src/turnlog/models/openai_responses.py"),
    ("src/turnlog/models/gemini_async.py", "src/turnlog/models/gemini.py"),
    ("src/turnlog/chat_async.py", "src/turnlog/chat.py"),
)

# Every name the async sources use that the sync twins spell differently, in code, strings and
# comments alike. Third-party names are here too (psycopg's, redis-py's, the SDKs').
RENAMES = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "aclose": "close",
    "StopAsyncIteration": "StopIteration",
    "asynccontextmanager": "contextmanager",
    "AsyncAnthropic": "Anthropic",
    "AsyncAnthropicChatModel": "AnthropicChatModel",
    "AsyncChatModelAdapter": "ChatModelAdapter",
    "AsyncClient": "Client",
    "AsyncConn": "Conn",
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncConnections": "Connections",
    "AsyncGeminiChatModel": "GeminiChatModel",
    "AsyncIterator": "Iterator",
    "AsyncMemoryStore": "MemoryStore",
    "AsyncOpenAI": "OpenAI",
    "AsyncOpenAIChatModel": "OpenAIChatModel",
    "AsyncOpenAIResponsesModel": "OpenAIResponsesModel",
    "AsyncPool": "Pool",
    "AsyncPostgresStore": "PostgresStore",
    "AsyncRedisClusterStore": "RedisClusterStore",
    "AsyncRedisCore": "RedisCore",
    "AsyncRedisStore": "RedisStore",
    "AsyncSessionChat": "SessionChat",
    "AsyncSessionService": "SessionService",
    "AsyncSessionStore": "SessionStore",
    "AsyncSqliteStore": "SqliteStore",
    "AsyncStoreContract": "StoreContract",
    "AsyncToolSearch": "ToolSearch",
    "calls_async": "calls",
    "catch_up_async": "catch_up",
    "chat_async": "chat",
    "cluster_async": "cluster",
    "connections_async": "connections",
    "core_async": "core",
    "fires_async": "fires",
    "gemini_async": "gemini",
    "memory_async": "memory",
    "openai_async": "openai",
    "migrate_async": "migrate",
    "open_store_async": "open_store",
    "openai_responses_async": "openai_responses",
    "opening_async": "opening",
    "protocol_async": "protocol",
    "run_pass_async": "run_pass",
    "run_tool_async": "run_tool",
    "schema_async": "schema",
    "search_async": "search",
    "service_async": "service",
    "sqlite_async": "sqlite",
    "store_async": "store",
}
# dotted module paths, longest first
MODULES = (
    ("redis.asyncio.cluster", "redis.cluster"),
    ("redis.asyncio.client", "redis.client"),
    ("redis.asyncio", "redis"),
)

# What looks like an async name; each must be in RENAMES.
_LOOKS_ASYNC = re.compile(r"\b(?:Async[A-Z]\w*|\w+_async|__a(?:enter|exit|iter|next)__)\b")
_NAMES = "|".join(map(re.escape, sorted(RENAMES, key=len, reverse=True)))
# a renamed name in text, with the article before it (a word, or a word and a backtick)
_IN_TEXT = re.compile(r"(?:\b(a|an|A|An)( `?))?\b(" + _NAMES + r")\b")
_KEYWORDS = re.compile(r"\b(?:await|async) (?=with\b|for\b|def\b|\w)")


def _unknown(name: str) -> SystemExit:
    return SystemExit(
        f"{name!r} looks like an async name but scripts/async_to_sync.py has no sync name for "
        "it: add it to RENAMES (or rename it so it does not end in _async / start with Async)"
    )


def rename(name: str) -> str:
    """The sync name for an identifier of the async source.

    Raises:
        SystemExit: a name that looks async and is not in `RENAMES`.
    """
    if name in RENAMES:
        return RENAMES[name]
    if _LOOKS_ASYNC.fullmatch(name):
        raise _unknown(name)
    return name


def _article(article: str, name: str) -> str:
    wanted = "an" if name[:1].lower() in "aeiou" else "a"
    return wanted.capitalize() if article[0].isupper() else wanted


def _rename_in_text(match: re.Match[str]) -> str:
    article, gap, name = match.groups()
    new = RENAMES[name]
    return new if article is None else _article(article, new) + gap + new


def rename_text(text: str) -> str:
    """Strings and comments: renamed names (and their articles), `await`/`async` dropped from
    code examples.

    Raises:
        SystemExit: a name that looks async and is not in `RENAMES`.
    """
    for old, new in MODULES:
        text = text.replace(old, new)
    text = _IN_TEXT.sub(_rename_in_text, text)
    left = _LOOKS_ASYNC.search(text)
    if left is not None:
        raise _unknown(left.group())
    text = _KEYWORDS.sub("", text)
    return text.replace("async/await", "blocking")


def _dotted(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def _from_dotted(path: str) -> cst.Attribute | cst.Name:
    parts = path.split(".")
    node: cst.Attribute | cst.Name = cst.Name(parts[0])
    for part in parts[1:]:
        node = cst.Attribute(value=node, attr=cst.Name(part))
    return node


def _is_async_block(node: cst.If) -> bool:
    if not (isinstance(node.test, cst.Name) and node.test.value == "True"):
        return False
    comment = node.body.header.comment if isinstance(node.body, cst.IndentedBlock) else None
    return comment is not None and comment.value.strip() == "# ASYNC"


_ATOMIC = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


class AsyncToSync(cst.CSTTransformer):
    """The transform itself; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self._written: set[int] = set()  # the `else:` blocks of `if True:  # ASYNC`

    def visit_If(self, node: cst.If) -> bool:
        if _is_async_block(node) and node.orelse is not None:
            self._written.add(id(node.orelse))
        return True

    def visit_Else(self, node: cst.Else) -> bool:
        return id(node) not in self._written  # hand-written sync code: not visited, not renamed

    def leave_Await(self, original: cst.Await, updated: cst.Await) -> cst.BaseExpression:
        inner = updated.expression
        if updated.lpar and isinstance(inner, _ATOMIC):
            return inner  # `(await x()).y` -> `x().y`
        return inner.with_changes(lpar=updated.lpar, rpar=updated.rpar)

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef:
        return updated.with_changes(asynchronous=None)

    def leave_With(self, original: cst.With, updated: cst.With) -> cst.With:
        return updated.with_changes(asynchronous=None)

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        return updated.with_changes(asynchronous=None)

    def leave_CompFor(self, original: cst.CompFor, updated: cst.CompFor) -> cst.CompFor:
        return updated.with_changes(asynchronous=None)

    def leave_If(
        self, original: cst.If, updated: cst.If
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        if not _is_async_block(original):
            return updated
        orelse = updated.orelse
        if orelse is None:
            return cst.RemoveFromParent()
        if not isinstance(orelse, cst.Else) or not isinstance(orelse.body, cst.IndentedBlock):
            raise SystemExit("an `if True:  # ASYNC` block may only have a plain `else:` block")
        # the original `else:` body: hand-written sync code, copied as written (not renamed)
        written = original.orelse
        assert isinstance(written, cst.Else) and isinstance(written.body, cst.IndentedBlock)
        body = list(written.body.body)
        if body:
            body[0] = body[0].with_changes(leading_lines=updated.leading_lines)
        return cst.FlattenSentinel(body)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=rename(updated.value))

    def leave_Attribute(
        self, original: cst.Attribute, updated: cst.Attribute
    ) -> cst.BaseExpression:
        path = _dotted(updated)
        if path is not None:
            for old, new in MODULES:
                if path == old or path.startswith(old + "."):
                    return _from_dotted(new + path[len(old) :])
        return updated

    def leave_SimpleString(
        self, original: cst.SimpleString, updated: cst.SimpleString
    ) -> cst.SimpleString:
        return updated.with_changes(value=rename_text(updated.value))

    def leave_FormattedStringText(
        self, original: cst.FormattedStringText, updated: cst.FormattedStringText
    ) -> cst.FormattedStringText:
        return updated.with_changes(value=rename_text(updated.value))

    def leave_Comment(self, original: cst.Comment, updated: cst.Comment) -> cst.Comment:
        return updated.with_changes(value=rename_text(updated.value))


def _header(source: str) -> str:
    return (
        f"# Generated from {source} by scripts/async_to_sync.py.\n"
        "# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.\n"
    )


def _ruff(args: Sequence[str], code: str, target: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(target), "-"],
        input=code,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode not in (0, 1) or not done.stdout:
        raise SystemExit(f"ruff {' '.join(args)} failed on {target}:\n{done.stderr}")
    return done.stdout


def generate(source: str, target: str) -> str:
    """The sync twin of `source`, as text."""
    tree = cst.parse_module((ROOT / source).read_text())
    code = tree.visit(AsyncToSync()).code
    code = _header(source) + code
    path = ROOT / target
    # I and RUF022: renames can unsort imports and __all__; F401: imports only the source needs.
    code = _ruff(
        ["check", "--fix", "--unsafe-fixes", "--select", "I,F401,RUF022", "--quiet"], code, path
    )
    return _ruff(["format", "--quiet"], code, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a twin is stale")
    args = parser.parse_args(argv)
    stale = []
    for source, target in PAIRS:
        code = generate(source, target)
        path = ROOT / target
        current = path.read_text() if path.exists() else ""
        if code == current:
            continue
        if args.check:
            stale.append(target)
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    code.splitlines(keepends=True),
                    target,
                    source,
                )
            )
        else:
            path.write_text(code)
            print(f"wrote {target}")
    if stale:
        print(
            f"\n{len(stale)} generated file(s) differ from their async source: "
            + ", ".join(stale)
            + ". Run `python scripts/async_to_sync.py` and commit the result.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
