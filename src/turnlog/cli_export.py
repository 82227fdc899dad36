"""`turnlog export`: a session's view or log as OpenAI or Anthropic messages, turnlog JSONL, or
one self-contained HTML page; and the progress line long imports and exports show.

A thin shell: it reads the session through the service and writes what the wire-format modules
(`turnlog.models.openai_format`, `turnlog.models.anthropic_format`), the JSONL module
(`turnlog.jsonl`) and the HTML page below make of it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import html
import json
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Final, cast

from turnlog.cli_render import statuses, visible
from turnlog.compaction import sent_events
from turnlog.errors import InvalidInput, SessionAlreadyExists, TurnlogError
from turnlog.events import EventType, Message, SessionEvent, trusted_copy
from turnlog.jsonl import SessionDump, dump_lines
from turnlog.models.anthropic_format import to_anthropic_messages
from turnlog.models.openai_format import to_openai_messages
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
    data_url,
)
from turnlog.payloads import CompactionBoundary
from turnlog.reasoning import DEFAULT_REASONING, REASONING_POLICIES, strip_reasoning
from turnlog.service import SessionService
from turnlog.stores.attachments import has_media, inline_bytes, refs_in
from turnlog.text import event_text, part_note
from turnlog.tokens import event_tokens

__all__ = [
    "EXPORT_DETAILS",
    "EXPORT_EXAMPLE",
    "EXPORT_SUMMARY",
    "FORMATS",
    "Progress",
    "add_export_arguments",
    "cmd_export",
    "import_dump",
    "output",
    "page",
    "read_side_files",
]

FORMATS: Final = ("openai", "anthropic", "jsonl", "html")
EXPORT_SUMMARY: Final = (
    "write a session's view (or --log, its whole log) as OpenAI or Anthropic messages, "
    "turnlog JSONL or one HTML page"
)
EXPORT_EXAMPLE: Final = (
    "turnlog export support-42 --format openai -o request.json\n"
    "  turnlog export support-42 --log --format jsonl -o support-42.jsonl\n"
    "  turnlog export support-42 --log --format html -o bug-1234.html"
)
EXPORT_DETAILS: Final = (
    'openai: {"messages": [...]} as Chat Completions takes them (what `turnlog import` '
    'reads too); anthropic: {"system": ..., "messages": [...]} as the Messages API takes '
    "them. For those two the view is the messages a model is sent, repaired as "
    "view_messages() repairs them, the reasoning of finished turns left out as the turn runner "
    "leaves it out (--reasoning current_turn; --reasoning all keeps it); with --log, every "
    "message of the log in order (covered ones and summaries included, every reasoning part "
    "unless --reasoning says otherwise; boundaries have no place in these formats). Each "
    "provider's part shapes: OpenAI image_url (a data: URL or the URL, with its detail), "
    "input_audio, file; Anthropic image and document blocks, and thinking blocks for "
    "Anthropic's own reasoning only: another provider's reasoning and blocks are left out "
    "(Chat Completions takes no reasoning at all). jsonl: turnlog's "
    "own format, every event with its id, seq, time and body, boundaries included; `turnlog "
    "import FILE` reads it back as it was (use --log for a copy of the whole session). html: "
    "one file with no external assets and no script, the timeline with each compaction shown "
    "as a card, covered events folded (--log) and tool calls linked to their results; images "
    "held inline are embedded as data: URLs (never SVG), other files are named, reasoning is "
    "folded; all text is escaped. Output goes to stdout unless -o FILE."
)

PROGRESS_AFTER: Final = 1000
"""An import or export of at least this many items shows progress (on a terminal only)."""


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `turnlog export`'s arguments to its sub-parser."""
    parser.add_argument("session", help="the session id")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="jsonl",
        help="openai, anthropic, jsonl (default) or html",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--view", action="store_true", help="what the model is sent (default)")
    scope.add_argument("--log", action="store_true", help="the whole log, boundaries included")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE instead of stdout (replaced)"
    )
    parser.add_argument(
        "--tokens",
        action="store_true",
        help="html: show each message's tokens and the view's (loads the tokenizer)",
    )
    parser.add_argument(
        "--attachments",
        metavar="DIR",
        help="jsonl: write the bytes of each attachment once into DIR (a file named by its "
        "sha256) and keep the references in the JSONL; by default the bytes are embedded. "
        "`turnlog import FILE --attachments DIR` reads them back",
    )
    parser.add_argument(
        "--reasoning",
        choices=REASONING_POLICIES,
        default=None,
        help="openai and anthropic: which reasoning parts are written; current_turn (the "
        "default for the view, as the turn runner sends it), all (the default with --log) or "
        "none",
    )


# -- progress ----------------------------------------------------------------------------------


class Progress:
    """A one-line progress report on stderr, with a rate and an ETA; silent unless stderr is a
    terminal and there are at least `PROGRESS_AFTER` items.

    Args:
        what: the verb and noun, e.g. "importing conversations".
        total: how many items there are.
        stream: where to write (default stderr).
    """

    def __init__(self, what: str, total: int, stream: IO[str] | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.what = what
        self.total = total
        self.done = 0
        self.shown = bool(total >= PROGRESS_AFTER and _isatty(self.stream))
        self._start = time.monotonic()
        self._last = 0.0

    def advance(self, count: int = 1) -> None:
        """Count `count` more items done; redraw at most ten times a second."""
        self.done += count
        if not self.shown:
            return
        now = time.monotonic()
        if now - self._last >= 0.1 or self.done >= self.total:
            self._last = now
            self.stream.write("\r" + self.line(now - self._start) + "\x1b[K")
            self.stream.flush()

    def line(self, elapsed: float) -> str:
        """The progress line after `elapsed` seconds."""
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        pct = 100 * self.done / self.total if self.total else 100.0
        return (
            f"{self.what}: {self.done:,}/{self.total:,} ({pct:.0f}%), {rate:,.0f}/s, "
            f"ETA {_duration(left)}"
        )

    def close(self) -> None:
        """End the line (if one was drawn)."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# What a terminal would act on, raw in JSON strings or HTML text: C0 controls (JSON escapes them
# itself; HTML does not), DEL, C1 controls, bidi controls and line/paragraph separators.
_TERMINAL_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)


class _TerminalSafe:
    """stdout on a terminal, for `export`: each character a terminal would act on is written
    as an escape of the format (`\\u001b` in JSON, `&#x1b;` in HTML), so the output is the same
    document and the terminal shows it instead of obeying it (issue 24, item 5)."""

    def __init__(self, raw: IO[bytes], *, html: bool) -> None:
        self._raw = raw
        self._html = html

    def write(self, data: bytes) -> int:
        text = data.decode("utf-8")
        if self._html:
            safe = _TERMINAL_UNSAFE.sub(lambda m: f"&#x{ord(m.group()):x};", text)
        else:
            safe = _TERMINAL_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
        self._raw.write(safe.encode("utf-8"))
        return len(data)

    def writelines(self, lines: Iterable[bytes]) -> None:
        for line in lines:
            self.write(line)


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _counted(items: Iterable[SessionEvent], progress: Progress) -> Iterator[SessionEvent]:
    for item in items:
        yield item
        progress.advance()


# -- export ------------------------------------------------------------------------------------


def cmd_export(svc: SessionService, args: argparse.Namespace) -> int:
    """`turnlog export SESSION [--log] [--format F] [-o FILE]`."""
    session = svc.get(args.session)
    log = svc.events(args.session)
    view = svc.view(args.session)
    shown = log if args.log else view
    scope = "log" if args.log else "view"
    if args.reasoning is not None and args.format not in ("openai", "anthropic"):
        raise InvalidInput(
            f"--reasoning applies to --format openai and anthropic; {args.format} holds every "
            "part of the events it writes"
        )
    folder = getattr(args, "attachments", None)
    if folder is not None and args.format != "jsonl":
        raise InvalidInput(
            f"--attachments applies to --format jsonl; {args.format} embeds the bytes"
        )
    progress = Progress(f"exporting {scope} events", len(shown))
    with output(args.output, html=args.format == "html") as out, progress:
        if args.format == "jsonl":
            if folder is None:
                events: Iterable[SessionEvent] = _embedded(svc, args.session, shown)
            else:
                events = _with_side_files(svc, args.session, shown, Path(folder))
            lines = dump_lines(session, _counted(events, progress), count=len(shown), scope=scope)
            out.writelines(lines)
        elif args.format == "html":
            counts = _token_counts(log) if args.tokens else None
            log, view = _both_with_bytes(svc, args.session, log, view)
            text = page(args.session, log, view, log_scope=args.log, tokens=counts)
            out.write(text.encode("utf-8"))
        else:
            if args.log:
                messages = [e.message for e in log if e.message is not None]
            else:
                messages = svc.view_messages(args.session)
            policy = args.reasoning or ("all" if args.log else DEFAULT_REASONING)
            messages = svc.with_bytes(args.session, strip_reasoning(messages, policy))
            out.write(_wire(args.format, messages).encode("utf-8"))
    if args.output is not None:
        print(
            f"wrote the {scope} of {visible(args.session)} ({len(shown)} events) as "
            f"{args.format} to {visible(args.output)}",
            file=sys.stderr,
        )
    return 0


def _embedded(
    svc: SessionService, session_id: str, events: Iterable[SessionEvent]
) -> Iterator[SessionEvent]:
    """`events` with the bytes of their attachments back in their parts, read event by event
    (an export holds one event's bytes at a time)."""
    for event in events:
        message = event.message
        if message is None or not has_media(message):
            yield event
            continue
        blobs = {r: svc.attachment(session_id, r) for r in sorted(refs_in([event]))}
        yield trusted_copy(event, message=inline_bytes(message, blobs)) if blobs else event


def _with_side_files(
    svc: SessionService, session_id: str, events: Iterable[SessionEvent], folder: Path
) -> Iterator[SessionEvent]:
    """`events` as they are, each attachment they name written once into `folder`."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"--attachments {folder}: cannot make it ({exc.strerror})") from None
    written: set[str] = set()
    for event in events:
        for ref in sorted(refs_in([event]) - written):
            target = folder / attachment_file(ref)
            if not (target.is_file() and _holds(target, ref)):
                partial = target.with_name(target.name + ".partial")
                with partial.open("wb") as out:
                    for chunk in svc.iter_attachment(session_id, ref):
                        out.write(chunk)
                partial.replace(target)
            written.add(ref)
        yield event


def attachment_file(ref: str) -> str:
    """The name of the side file of attachment `ref` (`sha256-<hex>`)."""
    return ref.replace(":", "-", 1)


def _holds(path: Path, ref: str) -> bool:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest() == ref


def _both_with_bytes(
    svc: SessionService, session_id: str, log: list[SessionEvent], view: list[SessionEvent]
) -> tuple[list[SessionEvent], list[SessionEvent]]:
    """The log and the view with the bytes back in their parts (the HTML page embeds them)."""
    refs = sorted(refs_in(log) | refs_in(view))
    if not refs:
        return log, view
    blobs = {r: svc.attachment(session_id, r) for r in refs}

    def back(events: list[SessionEvent]) -> list[SessionEvent]:
        return [
            trusted_copy(e, message=inline_bytes(e.message, blobs))
            if e.message is not None and has_media(e.message)
            else e
            for e in events
        ]

    return back(log), back(view)


def read_side_files(dump: SessionDump, folder: str | None, source: str) -> SessionDump:
    """`dump` with the bytes of the attachments its parts name put back, read from `folder`
    (where `export --attachments` wrote them), each checked against its reference.

    Raises:
        InvalidInput: the dump names attachments and no folder is given, or a file is missing
            or holds other bytes.
    """
    refs = sorted(refs_in(dump.events))
    if not refs:
        return dump
    if folder is None:
        raise InvalidInput(
            f"{source}: its parts name {len(refs)} attachments by reference (it was exported "
            "with --attachments DIR): give that folder with --attachments DIR"
        )
    blobs: dict[str, bytes] = {}
    for ref in refs:
        path = Path(folder) / attachment_file(ref)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidInput(
                f"{source}: the attachment {ref} is not in {folder} ({exc.strerror}): give the "
                "folder `turnlog export --attachments` wrote"
            ) from None
        if "sha256:" + hashlib.sha256(data).hexdigest() != ref:
            raise InvalidInput(f"{path}: the file does not hold the bytes of {ref} (damaged?)")
        blobs[ref] = data
    events = [
        trusted_copy(e, message=inline_bytes(e.message, blobs))
        if e.message is not None and has_media(e.message)
        else e
        for e in dump.events
    ]
    return replace(dump, events=events)


def _token_counts(log: Sequence[SessionEvent]) -> dict[str, int]:
    """Each message event's tokens, by id (the default counter, as `show --tokens`)."""
    messages = [e for e in log if e.message is not None]
    return dict(zip((e.id for e in messages), event_tokens().counts(messages), strict=True))


def _wire(fmt: str, messages: Sequence[Message]) -> str:
    if fmt == "openai":
        doc: dict[str, object] = {"messages": to_openai_messages(messages)}
    else:
        system, turns = to_anthropic_messages(messages)
        doc = {"system": system, "messages": turns}
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


@contextmanager
def output(path: str | None, *, html: bool = False) -> Iterator[IO[bytes]]:
    """Where the CLI writes a file: stdout (`path` None), or `path` all or nothing.

    On a terminal, stdout gets what a terminal would act on as escapes of the format (`html`
    names the format: character references, else JSON's `\\u` escapes).

    A regular file (new, or reached through a symlink, which is kept) is written to a temporary
    file `tempfile.mkstemp` makes beside it (O_EXCL: no planted file or link is followed), then
    renamed over it; an existing file keeps its mode, a new one gets the umask's. A character
    device, pipe or socket (`/dev/stdout`, a FIFO) is written directly, never replaced. Two
    writers to one path each finish a whole file; the last rename wins. On an error the
    temporary file is removed and the target is untouched.

    Raises:
        InvalidInput: `path` is a directory.
    """
    if path is None:
        if _isatty(sys.stdout):
            yield cast(IO[bytes], _TerminalSafe(sys.stdout.buffer, html=html))
        else:
            yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    try:
        found: os.stat_result | None = os.stat(path)  # follows a link to what it names
    except FileNotFoundError:
        found = None
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise InvalidInput(f"-o {path} is a directory: name a file")
    if found is not None and not stat.S_ISREG(found.st_mode):
        with open(path, "wb") as direct:  # a device or a pipe: there is nothing to replace
            yield direct
        return
    real = os.path.realpath(path) if found is not None else os.path.abspath(path)
    folder, name = os.path.split(real)
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=folder)
    try:
        os.fchmod(fd, stat.S_IMODE(found.st_mode) if found is not None else 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, real)  # all or nothing
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


# -- import of turnlog JSONL -------------------------------------------------------------------

IMPORT_BATCH: Final = 1000


def import_dump(svc: SessionService, dump: SessionDump, source: str) -> int:
    """Store a session read from turnlog JSONL as it was: its times, metadata and events (ids,
    timestamps, boundaries). All or nothing: a failure deletes what was written.

    Raises:
        SessionAlreadyExists: the id is taken. InvalidInput: an event id the store already holds
            (import it into another store, or delete the original session first).
    """
    sid = dump.session.id
    if svc.find(sid) is not None:
        raise SessionAlreadyExists(sid)
    svc.store.create_session(dump.session)
    events = [_unstored(e) for e in dump.events]
    try:
        version = 0
        with Progress("importing events", len(events)) as progress:
            for batch in _batches(events):
                try:
                    version = svc.append_events(sid, batch, version, check_rules=False)
                except InvalidInput as exc:
                    if "belongs to another session" not in str(exc):
                        raise InvalidInput(f"{source}: {exc}") from None
                    raise InvalidInput(
                        f"{source}: {exc}. An import keeps the exported event ids: import into "
                        "another store, or delete the exported session first"
                    ) from None
                progress.advance(len(batch))
        if version != len(events):
            raise InvalidInput(
                f"{source}: {len(events) - version} event ids are already in this store (an "
                "event id is unique in a store): import into another store, or delete the "
                "exported session first"
            )
    except BaseException:
        svc.delete(sid)
        raise
    print(f"imported {len(events)} events into session {visible(sid)} (turnlog {dump.scope})")
    return 0


def _batches(events: Sequence[SessionEvent]) -> Iterator[list[SessionEvent]]:
    """`events` in batches of about `IMPORT_BATCH`, never cutting a boundary from the summary
    events and stand-ins appended after it (a store checks a boundary with its batch)."""
    at = 0
    while at < len(events):
        end = min(at + IMPORT_BATCH, len(events))
        owed = {i for e in events[at:end] if e.type == EventType.COMPACTION for i in _appended(e)}
        while end < len(events) and events[end].id in owed:
            end += 1
        yield list(events[at:end])
        at = end


def _appended(e: SessionEvent) -> frozenset[str]:
    try:
        return CompactionBoundary.from_event(e).appended_event_ids
    except TurnlogError:  # a damaged boundary: the store refuses it with its batch
        return frozenset()


def _unstored(e: SessionEvent) -> SessionEvent:
    """The event as an application appends it: no seq (the store gives one), its timestamp."""
    return SessionEvent(
        id=e.id,
        session_id=e.session_id,
        type=e.type,
        message=e.message,
        payload=e.payload,
        metadata=e.metadata,
        synthetic=e.synthetic,
        timestamp=e.timestamp,
    )


# -- the HTML page -----------------------------------------------------------------------------

_STYLE: Final = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:14px 24px}header h1{margin:0;font-size:18px}
header p{margin:4px 0 0;color:#c9d1e0}main{max-width:980px;margin:0 auto;padding:16px 24px}
.ev{background:#fff;border:1px solid #dde2ea;border-left:4px solid #8a94a6;border-radius:6px;
margin:8px 0;padding:8px 12px}.ev .meta{font-size:12px;color:#5b6475;margin-bottom:4px}
.ev .meta b{color:#1d2330}.text{white-space:pre-wrap;word-break:break-word;margin:0}
.r-user{border-left-color:#2f6fde}.r-assistant{border-left-color:#1f9d55}
.r-system{border-left-color:#b7791f}.r-tool{border-left-color:#805ad5}
.s-summary{background:#fffbea}.s-covered,.s-cleared,.s-superseded{opacity:.62}
.s-stand-in{background:#f3f0ff}.synthetic{font-size:11px;background:#fde68a;border-radius:3px;
padding:0 4px}.call,.result{border:1px dashed #cbd2dc;border-radius:4px;margin:6px 0;
padding:4px 8px;background:#fafbfc}.result.error{border-color:#e53e3e;background:#fff5f5}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0 0;font:12px/1.4 ui-monospace,monospace}
.boundary{background:#eef4ff;border:1px solid #90b4f0;border-radius:6px;margin:14px 0;
padding:8px 12px}.boundary h2{margin:0 0 4px;font-size:14px}.boundary ul{margin:0;padding-left:18px}
details.fold{margin:8px 0}details.fold>summary{cursor:pointer;color:#5b6475}
.part{margin:4px 0}.part img{max-width:100%;height:auto;border:1px solid #dde2ea}
details.part>summary{cursor:pointer;color:#5b6475}
a{color:#2f6fde}code{font:12px ui-monospace,monospace}
.bidi{color:#b91c1c;font:11px ui-monospace,monospace}
"""


_BIDI: Final = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _e(value: object) -> str:
    """Escaped HTML text; a bidi control shows as a marked `<U+202E>`, never reorders text."""
    return _BIDI.sub(
        lambda m: f'<span class="bidi">&lt;U+{ord(m.group()):04X}&gt;</span>',
        html.escape(str(value), quote=True),
    )


def page(
    session_id: str,
    log: Sequence[SessionEvent],
    view: Sequence[SessionEvent],
    *,
    log_scope: bool,
    tokens: dict[str, int] | None = None,
    now: datetime | None = None,
) -> str:
    """One self-contained HTML page of a session's view (or whole log, `log_scope`).

    No script, no external asset (a Content-Security-Policy forbids both); every piece of text
    from the log (ids, message text, tool arguments and results, metadata) is escaped. `tokens`
    (message event id -> tokens) adds each message's count and the view's total.
    """
    status = statuses(log, view, CompactionBoundary.newest(log))
    shown = log if log_scope else view
    anchors: dict[str, str] = {}
    for e in shown:
        for c in e.message.tool_calls if e.message else ():
            anchors.setdefault(c.id, f"call-{len(anchors) + 1}")
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    scope = "the whole log" if log_scope else "the view (what the model is sent)"
    head = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>turnlog: {_e(session_id)}</title><style>{_STYLE}</style></head><body>"
        f"<header><h1>session {_e(session_id)}</h1><p>{_e(scope)}: {len(shown)} events of "
        f"{len(log)} in the log; {len(sent_events(view))} messages sent to the model"
        + (
            ""
            if tokens is None
            else f", {sum(tokens.get(e.id, 0) for e in sent_events(view)):,} tokens"
        )
        + ". "
        f"Exported {stamp} by turnlog.</p></header><main>"
    )
    body = "".join(_timeline(shown, status, anchors, tokens or {}))
    return head + body + "</main></body></html>\n"


def _timeline(
    events: Sequence[SessionEvent],
    status: dict[str, str],
    anchors: dict[str, str],
    tokens: dict[str, int],
) -> Iterable[str]:
    at = 0
    while at < len(events):
        run = 0
        while at + run < len(events) and status.get(events[at + run].id) == "covered":
            run += 1
        if run >= 3:  # a run of covered events folds
            first, last = events[at].seq, events[at + run - 1].seq
            yield (
                f'<details class="fold"><summary>{run} covered events (seq {first}-{last}): '
                "left the view, still in the log</summary>"
            )
            yield from (_event(e, status, anchors, tokens) for e in events[at : at + run])
            yield "</details>"
            at += run
            continue
        yield _event(events[at], status, anchors, tokens)
        at += 1


def _event(
    e: SessionEvent, status: dict[str, str], anchors: dict[str, str], tokens: dict[str, int]
) -> str:
    when = "" if e.timestamp is None else e.timestamp.strftime("%Y-%m-%d %H:%M:%S")
    if e.type == EventType.COMPACTION:
        b = CompactionBoundary.from_event(e)
        items = [
            f"pinned {len(b.pinned_event_ids)}",
            f"summary {len(b.summary_event_ids)}",
            f"preserved {len(b.preserved_event_ids)}",
            f"covered {b.covered_event_count}",
            f"~{b.tokens_estimated_saved:,} tokens saved (estimate)",
        ]
        if b.replaced:
            items.append(f"{len(b.replaced)} tool outputs replaced by stand-ins")
        return (
            f'<section class="boundary" id="seq-{e.seq}"><h2>compaction #{e.seq}: '
            f'{_e(b.strategy)}</h2><div class="meta">{_e(when)}</div><ul>'
            + "".join(f"<li>{_e(i)}</li>" for i in items)
            + "</ul></section>"
        )
    meta = f"#{e.seq} · {_e(when)}"
    if e.message is None:
        return (
            f'<article class="ev" id="seq-{e.seq}"><div class="meta">{meta} · '
            f"<b>{_e(e.type.name)}</b></div><pre>"
            f"{_e(json.dumps(e.payload, ensure_ascii=False, indent=2))}</pre></article>"
        )
    m = e.message
    where = status.get(e.id, "")
    parts = [
        f'<article class="ev r-{_e(m.role)} s-{_e(where)}" id="seq-{e.seq}">'
        f'<div class="meta">{meta} · <b>{_e(m.role)}</b> · {_e(where)}'
        + (f" · {tokens[e.id]:,} tokens" if e.id in tokens else "")
        + (' <span class="synthetic">summary</span>' if e.synthetic else "")
        + "</div>"
    ]
    if m.parts:
        parts.extend(_part(p) for p in m.parts)
    elif m.text:
        parts.append(f'<div class="text">{_e(m.text)}</div>')
    elif m.role != "tool" and not m.tool_calls:
        parts.append(f'<div class="text">{_e(event_text(e))}</div>')
    for c in m.tool_calls:
        parts.append(
            f'<div class="call" id="{anchors[c.id]}">call <b>{_e(c.name)}</b> '
            f"<code>{_e(c.id)}</code><pre>{_e(_pretty(c.arguments))}</pre></div>"
        )
    for r in m.tool_results:
        link = anchors.get(r.call_id)
        answers = (
            f'<a href="#{link}">{_e(r.call_id)}</a>' if link else f"<code>{_e(r.call_id)}</code>"
        )
        parts.append(
            f'<div class="result{" error" if r.is_error else ""}">result of '
            f"<b>{_e(r.name)}</b> for {answers}{' (failed)' if r.is_error else ''}"
            + ("".join(_part(p) for p in r.parts) if r.parts else f"<pre>{_e(r.content)}</pre>")
            + "</div>"
        )
    if m.metadata or e.metadata:
        meta_json = json.dumps({**dict(e.metadata), **dict(m.metadata)}, ensure_ascii=False)
        parts.append(f'<div class="meta">metadata <code>{_e(meta_json)}</code></div>')
    return "".join(parts) + "</article>"


INLINE_IMAGE_TYPES: Final = frozenset(
    {"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"}
)
"""The image media types the page embeds (as `data:` URLs); any other, SVG above all, is named
in a note and not embedded."""


def _part(p: Part) -> str:
    """A part as HTML: text as text, a raster image held inline as an <img> of a data: URL, any
    other image, file or clip as a note (and its URL as a link, never fetched), reasoning and
    provider blocks folded in a closed <details>."""
    if type(p) is TextPart:
        return f'<div class="text">{_e(p.text)}</div>' if p.text else ""
    if isinstance(p, (ImagePart, FilePart, AudioPart)):
        note = _e(part_note(p))
        if type(p) is ImagePart and p.data is not None:
            if p.media_type.lower() in INLINE_IMAGE_TYPES:
                src = data_url(p.media_type, p.data)
                size = (
                    f' width="{p.width}" height="{p.height}"'
                    if p.width is not None and p.height is not None
                    else ""
                )
                return (
                    f'<figure class="part image"><img src="{_e(src)}" alt="{note}"{size}>'
                    f'<figcaption class="meta">{note}</figcaption></figure>'
                )
            return f'<div class="part image meta">{note} (not embedded: {_e(p.media_type)})</div>'
        where = ""
        if p.url is not None:
            if p.url.lower().startswith(("https://", "http://")):
                where = f' <a href="{_e(p.url)}" rel="noreferrer noopener">{_e(p.url)}</a>'
            else:
                where = f" <code>{_e(p.url)}</code>"
            where += " (not fetched)"
        elif p.ref is not None:
            where = f" stored as attachment <code>{_e(p.ref)}</code>"
        return f'<div class="part meta">{note}{where}</div>'
    if type(p) is ReasoningPart:
        if p.redacted:
            return (
                f'<details class="part reasoning"><summary>reasoning ({_e(p.provider)}): '
                'redacted</summary><div class="meta">redacted</div></details>'
            )
        inside = (
            f'<div class="text">{_e(p.text)}</div>' if p.text else '<div class="meta">no text</div>'
        )
        return (
            f'<details class="part reasoning"><summary>reasoning ({_e(p.provider)})</summary>'
            f"{inside}</details>"
        )
    assert type(p) is ProviderPart
    data = json.dumps(p.data, ensure_ascii=False, indent=2)
    return (
        f'<details class="part provider"><summary>{_e(p.provider)} · {_e(p.kind)}</summary>'
        f"<pre>{_e(data)}</pre></details>"
    )


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False, indent=2)
    except ValueError:
        return arguments
