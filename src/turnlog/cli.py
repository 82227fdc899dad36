"""The `turnlog` command: a thin shell over `SessionService` and any store.

Every command opens the service, calls its public methods and prints the result. Library errors
become one line on stderr (`turnlog: error: ...`) and a non-zero exit: 2 for bad usage or bad
input, 1 for everything else. Run `turnlog --help` for the commands.

The store a command uses: `--store URL` or `--db PATH` when given (not both), else
`$TURNLOG_STORE`, else `$TURNLOG_DB`, else `turnlog.db` in the working directory.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from turnlog import __version__
from turnlog.cli_chat import (
    CHAT_DETAILS,
    CHAT_EXAMPLE,
    CHAT_SUMMARY,
    add_chat_arguments,
    chat_settings,
    cmd_chat,
    error_line,
)
from turnlog.cli_demo import cmd_demo
from turnlog.cli_export import (
    EXPORT_DETAILS,
    EXPORT_EXAMPLE,
    EXPORT_SUMMARY,
    Progress,
    add_export_arguments,
    cmd_export,
    import_dump,
    read_side_files,
)
from turnlog.cli_render import (
    dumps,
    event_json,
    newest_boundary,
    print_log,
    print_result,
    print_view,
    statuses,
    view_tokens,
    visible,
    when,
)
from turnlog.cli_search import (
    SEARCH_DETAILS,
    SEARCH_EXAMPLE,
    SEARCH_SUMMARY,
    add_search_arguments,
    cmd_search,
)
from turnlog.cli_serve import (
    SERVE_DETAILS,
    SERVE_EXAMPLE,
    SERVE_SUMMARY,
    add_serve_arguments,
    cmd_serve,
)
from turnlog.compaction import (
    CompactionRequest,
    CompactionTrigger,
    CompactionWindow,
    CompositeCompactionTrigger,
    TokenCountTrigger,
    TurnCountTrigger,
    WindowCompactionStrategy,
    sent_events,
)
from turnlog.errors import InvalidInput, SessionAlreadyExists, SessionNotFound, TurnlogError
from turnlog.events import SessionEvent, check_id
from turnlog.importers import is_session_dump, read_conversations, read_session_dump
from turnlog.payloads import CompactionBoundary
from turnlog.rules import check_messages
from turnlog.service import SessionService
from turnlog.stores.opening import open_store
from turnlog.stores.protocol import SessionStore
from turnlog.stores.sqlite import SqliteStore
from turnlog.stores.url import store_url

__all__ = ["main"]

Handler = Callable[[Any, argparse.Namespace], int]

CONNECT_TIMEOUT = 3.0
"""Seconds the command waits for a PostgreSQL or Redis server, unless the URL says
`?connect_timeout=`. The library's own default is longer."""

# -- the store a command uses ------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The store a command uses, its name in messages, and the options that pick it again."""

    name: str
    """What messages call it: the file, or the URL without its password."""
    again: tuple[str, ...]
    """The command-line options that select it (empty when it came from the environment)."""
    url: str | None = None
    """The store URL, or None for the SQLite file `path`."""
    path: Path | None = None
    """The SQLite file, for a SQLite store (from --db, $TURNLOG_DB, or a sqlite:/// URL)."""
    memory: bool = False
    """A `memory://` store: nothing outlives the command."""
    hidden_password: bool = False
    """`again` repeats the URL without its password."""

    def open(self) -> SessionStore:
        """Open the store; a server gets `CONNECT_TIMEOUT` unless its URL sets one.

        Raises:
            InvalidInput: a bad URL. ImportError: the store's extra is missing.
            StoreError: the store cannot be opened or reached.
        """
        if self.url is None:
            assert self.path is not None
            return SqliteStore(self.path)
        kind, _, options = store_url(self.url)
        if kind in ("postgresql", "redis", "redis+cluster") and "connect_timeout" not in options:
            return open_store(self.url, connect_timeout=CONNECT_TIMEOUT)
        return open_store(self.url)


def _without_password(url: str) -> tuple[str, bool]:
    parts = urlsplit(url)
    if not parts.password:
        return url, False
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl(), True


def target(args: argparse.Namespace) -> Target:
    """The store the command uses: an explicit option, else the environment, else the default.

    Raises:
        InvalidInput: both --db and --store, an empty value, or a bad URL.
    """
    if args.db is not None and args.store is not None:
        raise InvalidInput("pass --db PATH or --store URL, not both")
    for option, value in (("--db", args.db), ("--store", args.store)):
        if value is not None and not value.strip():
            raise InvalidInput(f"{option} needs a value, not an empty string")
    if args.db is not None:
        return Target(name=args.db, again=("--db", args.db), path=Path(args.db))
    url = args.store or os.environ.get("TURNLOG_STORE") or None
    if url is None:
        db = os.environ.get("TURNLOG_DB") or "turnlog.db"
        return Target(name=db, again=(), path=Path(db))
    kind, _, _ = store_url(url)
    name, hidden = _without_password(url)
    path = None
    if kind == "path":
        path = Path(url)
    elif kind == "sqlite":
        path = Path(unquote(urlsplit(url).path)[1:] or ".")
    explicit = args.store is not None
    return Target(
        name=name,
        again=("--store", name) if explicit else (),
        url=url,
        path=path,
        memory=kind == "memory",
        hidden_password=hidden and explicit,
    )


# -- commands ----------------------------------------------------------------------------------


def _import_ids(args: argparse.Namespace, count: int) -> list[str]:
    """The ids of the sessions an import makes: --session or the file's name, numbered when
    the file holds several conversations; checked before the store is opened.

    Raises:
        InvalidInput: an empty or unusable id, or a file name that is not UTF-8.
    """
    base = Path(args.file).stem if args.session is None else args.session
    _utf8(base, "the session id" if args.session is not None else "the file's name")
    ids = [base] if count == 1 else [f"{base}-{i}" for i in range(1, count + 1)]
    return [check_id(i, "the session id") for i in ids]


def _read_import(args: argparse.Namespace) -> None:
    """Read the file `turnlog import` was given, before any database is opened: a turnlog dump
    into `args.dump`, else conversations into `args.conversations`.

    A pipe, a FIFO or `/dev/stdin` can be read only once, and telling the formats apart reads
    its start: such a file is first copied to a temporary file, read from there, and named as
    given in every error.
    """
    given = Path(args.file)
    if not given.exists() or given.is_file():
        _read_import_from(args, given)
        return
    with tempfile.TemporaryDirectory(prefix="turnlog-import-") as folder:
        copy = Path(folder) / "input"
        try:
            with given.open("rb") as source, copy.open("wb") as target:
                shutil.copyfileobj(source, target)
        except OSError as exc:
            raise InvalidInput(f"{given}: cannot read it ({exc.strerror or exc})") from None
        try:
            _read_import_from(args, copy)
        except InvalidInput as exc:
            raise InvalidInput(str(exc).replace(str(copy), str(given))) from None


def _read_import_from(args: argparse.Namespace, path: Path) -> None:
    args.dump = None
    if is_session_dump(path):
        if args.session is not None:
            check_id(args.session, "the session id")
        args.dump = read_side_files(
            read_session_dump(path, args.session), args.attachments, str(path)
        )
    elif args.attachments is not None:
        raise InvalidInput(
            f"{path}: --attachments reads the side files of turnlog JSONL (`turnlog export "
            "--attachments DIR`); other formats carry their bytes inline"
        )
    else:
        args.conversations = read_conversations(path)
        _import_ids(args, len(args.conversations[1]))


def _cmd_import(svc: SessionService, args: argparse.Namespace) -> int:
    path = Path(args.file)
    if args.dump is not None:
        return import_dump(svc, args.dump, str(path))
    kind, conversations = args.conversations  # read before the database was opened
    ids = _import_ids(args, len(conversations))
    check = not args.allow_broken
    for session_id, messages in zip(ids, conversations, strict=True):
        if check:  # the view rules, before anything is written
            try:
                check_messages(messages, "message")
            except InvalidInput as exc:
                raise InvalidInput(
                    f"{path}, conversation {session_id}: {exc}".replace(
                        "append with check_rules=False", "import with --allow-broken"
                    )
                ) from None
    for session_id in ids:  # check every id before writing anything
        if svc.find(session_id) is not None:
            raise SessionAlreadyExists(session_id)
    batches = [
        [SessionEvent.for_message(session_id, m) for m in messages]
        for session_id, messages in zip(ids, conversations, strict=True)
    ]
    created: list[str] = []
    try:
        with Progress("importing conversations", len(ids)) as progress:
            for session_id, batch in zip(ids, batches, strict=True):
                svc.create(session_id, metadata={"imported_from": path.name, "format": kind})
                created.append(session_id)
                svc.append_events(session_id, batch, 0, check_rules=check)
                progress.advance()
    except BaseException:
        for session_id in created:  # all or nothing
            svc.delete(session_id)
        raise
    for session_id, batch in zip(ids, batches, strict=True):
        print(f"imported {len(batch)} events into session {visible(session_id)} ({kind})")
    return 0


def _cmd_sessions(svc: SessionService, args: argparse.Namespace) -> int:
    rows = []
    for s in svc.sessions():
        view = svc.view(s.id)
        tokens = view_tokens(view) if args.tokens else None
        rows.append((s, svc.version(s.id), len(sent_events(view)), tokens))
    if args.format == "json":
        out = []
        for s, version, size, tokens in rows:
            entry: dict[str, object] = {
                "id": s.id,
                "created_at": s.created_at.isoformat(),
                "expires_at": None if s.expires_at is None else s.expires_at.isoformat(),
                "version": version,
                "view_messages": size,
            }
            if tokens is not None:
                entry["view_tokens"] = tokens
            entry["metadata"] = dict(s.metadata)
            out.append(entry)
        print(dumps(out))
        return 0
    if not rows:
        where = visible(args.target.name)
        print(f"no sessions in {where}: try `turnlog demo` or `turnlog import FILE`")
        return 0
    ids = [visible(r[0].id) for r in rows]
    wide = max(len("session"), *(len(i) for i in ids))
    print(
        f"{'session':<{wide}}  {'created (UTC)':<19}  {'expires (UTC)':<19}  events  view"
        + ("  tokens" if args.tokens else "")
    )
    for shown, (s, version, size, tokens) in zip(ids, rows, strict=True):
        print(
            f"{shown:<{wide}}  {when(s.created_at):<19}  {when(s.expires_at):<19}  "
            f"{version:>6}  {size:>4}" + ("" if tokens is None else f"  {tokens:>6}")
        )
    return 0


def _cmd_show(svc: SessionService, args: argparse.Namespace) -> int:
    svc.get(args.session)
    if args.format == "json":
        view = svc.view(args.session)
        if args.log:
            shown = svc.events(args.session)
            status = statuses(shown, view, CompactionBoundary.newest(shown))
        else:
            shown = view
            status = statuses(view, view, newest_boundary(svc, args.session))
        out: dict[str, object] = {"session": args.session, "version": svc.version(args.session)}
        if args.tokens:
            out["view_tokens"] = view_tokens(view)
        out["log" if args.log else "view"] = [event_json(e, status.get(e.id, "-")) for e in shown]
        print(dumps(out))
    elif args.log:
        print_log(svc, args.session)
    else:
        print_view(svc, args.session, tokens=args.tokens)
    return 0


def _always(request: CompactionRequest) -> bool:
    """The trigger of a `compact` given no --if-* option: compact now."""
    return True


def _cmd_compact(svc: SessionService, args: argparse.Namespace) -> int:
    if args.last_events is not None:
        window = CompactionWindow.last_events(args.last_events)
    elif args.last_turns is not None:
        window = CompactionWindow.last_turns(args.last_turns)
    else:
        window = CompactionWindow.token_budget(args.token_budget)
    strategy = WindowCompactionStrategy(window)
    triggers: list[CompactionTrigger] = []
    if args.if_turns is not None:
        triggers.append(TurnCountTrigger(args.if_turns))
    if args.if_tokens is not None:
        triggers.append(TokenCountTrigger(args.if_tokens))
    trigger = CompositeCompactionTrigger.any_of(*triggers) if triggers else _always
    session = visible(args.session)
    before = view_tokens(svc.view(args.session))
    result = svc.compact(args.session, trigger, strategy)
    if result.conflict:
        print(f"{session}: another writer appended meanwhile; nothing written, run it again")
        return 1
    if result.unchanged:
        print(f"{session}: unchanged ({visible(result.reason)}); nothing written")
        return 0
    print(f"{session}: compacted with {strategy.name}")
    print_result(result, before, view_tokens(svc.view(args.session)))
    if result.refires and triggers:  # with no --if-* option, every run compacts anyway
        print(
            "note: the trigger still fires on the compacted view, so the next compact cuts "
            "again; keep the window and the summary under the trigger"
        )
    return 0


def _cmd_delete(svc: SessionService, args: argparse.Namespace) -> int:
    if not svc.delete(args.session):
        raise SessionNotFound(args.session)
    print(f"deleted session {visible(args.session)} and its log")
    return 0


def _cmd_expire(svc: SessionService, args: argparse.Namespace) -> int:
    count = svc.delete_expired()
    print(f"deleted {count} expired session{'' if count == 1 else 's'}")
    return 0


def _cmd_migrate(svc: SessionService | None, args: argparse.Namespace) -> int:
    where: Target = args.target
    kind, url, options = ("path", "", {}) if where.url is None else store_url(where.url)
    if kind == "postgresql":
        try:
            from turnlog.stores.postgres.schema import migrate
        except ImportError:
            return _fail("PostgreSQL needs an extra: pip install 'turnlog[postgres]'", 1)
        options.pop("pool_min", None)
        options.pop("pool_max", None)
        options.setdefault("connect_timeout", CONNECT_TIMEOUT)
        version = migrate(url, progress=print, **options)  # the history fill reports progress
        print(f"PostgreSQL schema is at version {version}")
    else:
        store = where.open()  # opening creates or checks the schema
        name = type(store).__name__
        store.close()
        print(f"{name}: schema is current" if kind not in ("redis", "redis+cluster", "memory")
              else f"{name}: keeps no schema, nothing to do")  # fmt: skip
    if args.tokens:
        with SessionService(where.open()) as tokens_svc:
            counted = sessions = 0
            for session in tokens_svc.sessions():
                counted += tokens_svc.record_tokens(session.id)
                sessions += 1
        print(f"token counts stored for {counted} event{'' if counted == 1 else 's'} "
              f"in {sessions} session{'' if sessions == 1 else 's'}")  # fmt: skip
    return 0


# -- arguments and errors ----------------------------------------------------------------------

_COMMANDS: list[tuple[str, Handler, str, str]] = [
    ("demo", cmd_demo, "build a conversation with tool calls, compact it four ways, print it; "
     "then a follow-up that edits a file, summarized with its files",
     "turnlog demo\n  turnlog --db /tmp/demo.db demo"),
    ("import", _cmd_import, "import a conversation: OpenAI or Anthropic messages (JSON or JSONL) "
     "or ShareGPT",
     "turnlog import chat.json --session support-42\n  turnlog import dataset.jsonl"),
    ("sessions", _cmd_sessions, "list the sessions: created, expires, events, view size",
     "turnlog sessions\n  turnlog sessions --tokens --format json"),
    ("show", _cmd_show, "print a session's view (default) or its whole log",
     "turnlog show demo-summary\n  turnlog show demo-summary --log --format json"),
    ("search", cmd_search, SEARCH_SUMMARY, SEARCH_EXAMPLE),
    ("export", cmd_export, EXPORT_SUMMARY, EXPORT_EXAMPLE),
    ("compact", _cmd_compact, "compact a session with a window, optionally only if a trigger fires",
     "turnlog compact support-42 --last-turns 10 --if-tokens 8000"),
    ("chat", cmd_chat, CHAT_SUMMARY, CHAT_EXAMPLE),
    ("serve", cmd_serve, SERVE_SUMMARY, SERVE_EXAMPLE),
    ("delete", _cmd_delete, "delete a session and its whole log",
     "turnlog delete support-42"),
    ("expire", _cmd_expire, "delete every session whose expiry has passed",
     "turnlog expire"),
    ("migrate", _cmd_migrate, "create or upgrade a store's schema (PostgreSQL, SQLite)",
     "turnlog migrate --store postgresql://app@db.internal:5432/chat\n"
     "  turnlog migrate --store sqlite:///var/lib/app/turnlog.db --tokens"),
]  # fmt: skip

_DETAILS = {
    "import": "turnlog JSONL (`turnlog export --format jsonl`) is read back as it was exported: "
    "the session's times and metadata, every event with its id, time and body, boundaries "
    "included (--session renames it; event ids stay, and are unique in a store). Otherwise: "
    'a JSON list of OpenAI chat-completions messages (or {"messages": [...]}), JSONL '
    'with one message per line, an Anthropic Messages transcript ({"system": ..., "messages": '
    "[...]}, or messages holding Anthropic content blocks: image, document, thinking, "
    'tool_use, tool_result, ...), or ShareGPT: a record {"conversations": [...]}, a list of '
    "records or JSONL of records. Content parts come back as turnlog parts. Consecutive tool "
    "messages become one turnlog tool message "
    "with several results. The session id is --session or the file's name without extension; "
    "several ShareGPT records become sessions ID-1, ID-2, ... Nothing is written if any entry "
    "is bad. A conversation that breaks the view rules (a tool result answering no open call, "
    "calls left unanswered, an empty assistant message, the assistant speaking first) is "
    "refused unless --allow-broken stores it as it is; the view sent to a model then repairs "
    "it, visibly.",
    "sessions": "Token counts are left out unless --tokens asks for them: counting loads the "
    "tokenizer.",
    "show": "--view (the default) lists what the model is sent. --log lists every event: "
    "covered ones left the view but stay in the log; BOUNDARY lines are compactions. --tokens "
    "adds the view's token count.",
    "search": SEARCH_DETAILS,
    "chat": CHAT_DETAILS,
    "serve": SERVE_DETAILS,
    "export": EXPORT_DETAILS,
    "migrate": "--tokens also stores the o200k token count of every message event that has "
    "none (a database written before counts were stored at append): compaction and triggers "
    "then read the counts instead of tokenizing the whole history in every new process. Only "
    "the counts are written; every event keeps its seq, time and content. Safe to run again "
    "and while the application runs.",
    "compact": "One window is required. Without --if-turns or --if-tokens it always runs; with "
    "both it runs when either fires. Nothing is written when the view already fits.",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnlog",
        description="Conversation memory for LLM applications: inspect and compact the "
        "session logs in a turnlog store (a SQLite file by default). The store: --db or "
        "--store when given, else $TURNLOG_STORE, else $TURNLOG_DB, else turnlog.db.",
        epilog="Example:\n  turnlog demo\n  turnlog show demo-summary --log\n"
        "  turnlog --store 'postgresql://app@db:5432/chat?schema=support' sessions",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"turnlog {__version__}")
    parser.add_argument(
        "--db",
        default=None,
        metavar="PATH",
        help="the SQLite file (default: $TURNLOG_DB, else turnlog.db; $TURNLOG_STORE comes first)",
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="a store URL instead of --db: sqlite:///path, postgresql://...?schema=NAME, "
        "redis://...?prefix=NAME, redis+cluster://host:port,..., memory://; "
        "?connect_timeout=SECONDS (default 3) (default: $TURNLOG_STORE)",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, metavar="PATH", help="the SQLite file")
    common.add_argument("--store", default=argparse.SUPPRESS, metavar="URL", help="a store URL")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands = {}
    for name, handler, summary, example in _COMMANDS:
        p = sub.add_parser(
            name,
            parents=[common],
            help=summary,
            description=summary[0].upper() + summary[1:] + ". " + _DETAILS.get(name, ""),
            epilog=f"Example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(handler=handler)
        commands[name] = p
    commands["import"].add_argument(
        "file",
        help="the OpenAI or Anthropic JSON or JSONL, or ShareGPT file, or turnlog JSONL from "
        "`turnlog export`",
    )
    commands["import"].add_argument("--session", help="the new session's id")
    commands["import"].add_argument(
        "--attachments",
        metavar="DIR",
        help="turnlog JSONL exported with --attachments DIR: the folder holding its attachments",
    )
    commands["import"].add_argument(
        "--allow-broken",
        action="store_true",
        help="store a conversation that breaks the view rules as it is (the view repairs it)",
    )
    for name in ("show", "compact", "delete"):
        commands[name].add_argument("session", help="the session id")
    commands["migrate"].add_argument(
        "--tokens",
        action="store_true",
        help="also store the token counts of events appended without one (a backfill)",
    )
    for name in ("sessions", "show"):
        commands[name].add_argument(
            "--format",
            choices=("text", "json"),
            default="text",
            help="text for people (default), json for scripts",
        )
        commands[name].add_argument(
            "--json",
            action="store_const",
            const="json",
            dest="format",
            help="the same as --format json",
        )
        commands[name].add_argument(
            "--tokens",
            action="store_true",
            help="also count the tokens of each view (loads the tokenizer: about 0.6 s)",
        )
    show = commands["show"].add_mutually_exclusive_group()
    show.add_argument("--view", action="store_true", help="what the model is sent (default)")
    show.add_argument("--log", action="store_true", help="every event, covered ones marked")
    add_chat_arguments(commands["chat"])
    add_serve_arguments(commands["serve"])
    add_export_arguments(commands["export"])
    add_search_arguments(commands["search"])
    compact = commands["compact"]
    window = compact.add_mutually_exclusive_group(required=True)
    window.add_argument("--last-events", type=int, metavar="N", help="keep the last N events")
    window.add_argument("--last-turns", type=int, metavar="N", help="keep the last N turns")
    window.add_argument("--token-budget", type=int, metavar="N", help="keep what fits N tokens")
    compact.add_argument("--if-turns", type=int, metavar="N", help="only if > N turns")
    compact.add_argument("--if-tokens", type=int, metavar="N", help="only if >= N tokens")
    return parser


def _fail(message: str, code: int) -> int:
    error_line(message)
    return code


def _utf8(value: str, what: str) -> str:
    """`value`, or InvalidInput if it holds bytes that are not UTF-8 (a surrogate escape)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        fix = "pass --session ID" if "file's name" in what else "check your terminal's encoding"
        raise InvalidInput(f"{what} is not valid UTF-8 text ({value!r}): {fix}") from None
    return value


def _remove_database(path: Path | None) -> None:
    """Delete a SQLite file the failed command created, and its journal files."""
    if path is None:
        return
    for name in (path, *(path.with_name(path.name + end) for end in ("-wal", "-shm", "-journal"))):
        with contextlib.suppress(OSError):
            name.unlink()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `turnlog` command with `argv` (default: `sys.argv[1:]`); returns the exit code."""
    for stream in (sys.stdout, sys.stderr):
        utf8 = stream.encoding.lower().replace("-", "") == "utf8"
        if isinstance(stream, io.TextIOWrapper) and not utf8:
            stream.reconfigure(errors="backslashreplace")
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else 2
    where = "the store"
    try:
        for option in ("session", "store"):
            if isinstance(getattr(args, option, None), str):
                _utf8(getattr(args, option), f"the {option} argument")
        args.target = target(args)
        where = args.target.name  # _fail makes it safe to print
        if args.command == "import":  # a bad file must not even create the database
            _read_import(args)
        if args.command == "chat":  # a bad option or a missing key opens nothing
            args.chat = chat_settings(args)
        if args.command == "migrate":
            return _cmd_migrate(None, args)
        path = args.target.path
        if (
            path is not None
            and args.command not in ("demo", "import", "chat")
            and not path.exists()
        ):
            return _fail(f"no turnlog database at {where}: run `turnlog demo` or pass --db PATH", 1)
        fresh = args.command == "import" and path is not None and not path.exists()
        try:
            with SessionService(args.target.open()) as svc:
                code: int = args.handler(svc, args)
                return code
        except BaseException:
            if fresh:  # a failed import leaves no empty database behind
                _remove_database(path)
            raise
    except SessionNotFound as exc:
        return _fail(
            f"session {exc.session_id!r} does not exist in {where} (see `turnlog sessions`)", 1
        )
    except SessionAlreadyExists as exc:
        return _fail(
            f"session {exc.session_id!r} already exists in {where}: pass --session NEW_ID, or "
            f"`turnlog delete {exc.session_id}` first",
            1,
        )
    except InvalidInput as exc:
        return _fail(str(exc), 2)
    except ImportError as exc:  # a store whose extra is not installed
        return _fail(str(exc), 1)
    except TurnlogError as exc:
        return _fail(str(exc), 1)
    except BrokenPipeError:  # e.g. `turnlog show x --log | head`
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        return _fail(f"{exc.filename or where}: {exc.strerror or exc}", 1)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as exc:
        if os.environ.get("TURNLOG_DEBUG"):
            raise
        return _fail(
            f"unexpected {type(exc).__name__}: {exc} (a bug in turnlog: please report it; "
            "TURNLOG_DEBUG=1 shows the traceback)",
            1,
        )


if __name__ == "__main__":
    sys.exit(main())
