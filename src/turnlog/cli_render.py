"""How the `turnlog` command prints sessions, logs and views, safely for a terminal.

Every stored string goes through `visible` (or `dumps` for JSON) before it is printed, so a
message cannot move the cursor, retitle or clear the terminal, or reorder text with bidi
overrides: control characters show up as escapes such as `\\x1b` or `\\u202e`.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from turnlog.compaction import CompactionResult, sent_events
from turnlog.events import EventType, SessionEvent
from turnlog.payloads import CompactionBoundary
from turnlog.service import SessionService
from turnlog.stores.base import EventFilter
from turnlog.text import event_text
from turnlog.tokens import O200kCounter, default_counter, event_tokens

__all__ = [
    "boundary_text",
    "dumps",
    "event_json",
    "newest_boundary",
    "print_log",
    "print_result",
    "print_view",
    "replacements",
    "rows",
    "statuses",
    "unit",
    "view_tokens",
    "visible",
    "when",
    "width",
]

# Characters a terminal may act on: bidi embeddings, overrides and isolates, and the line and
# paragraph separators; and lone surrogates (a file name that is not UTF-8), which cannot be
# written as UTF-8 at all. Control characters (C0, DEL, C1) are added below.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_UNSAFE_BUT_LAYOUT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")  # keeps \t and \n
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f{_BIDI}]")  # json.dumps escapes C0 itself


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, layout: bool = False) -> str:
    """`text` with each character a terminal would act on written as an escape (`\\x1b`).

    Args:
        text: a stored string: a message, an id, a metadata value.
        layout: keep newlines and tabs (where they are part of what is printed).

    Returns:
        The text, safe to print: C0 controls (but newline and tab with `layout`), DEL, C1
        controls (U+0080-U+009F), bidi controls and line/paragraph separators are escaped.
    """
    return (_UNSAFE_BUT_LAYOUT if layout else _UNSAFE).sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def dumps(value: Any) -> str:
    """`value` as indented JSON, non-ASCII text kept readable, every control character escaped.

    Returns:
        JSON text: `json.dumps` escapes C0 controls; DEL, C1 controls and bidi controls, which
        it would print raw, become `\\u` escapes too (still the same JSON value).
    """
    return _UNSAFE_IN_JSON.sub(_json_escape, json.dumps(value, indent=2, ensure_ascii=False))


def width() -> int:
    """The terminal's width in columns (at least 60)."""
    return max(60, shutil.get_terminal_size((100, 24)).columns)


def _clip(text: str, room: int) -> str:
    flat = visible(" ".join(text.split()))
    return flat if len(flat) <= room else flat[: max(1, room - 1)] + "…"


def when(moment: datetime | None) -> str:
    """A time as `YYYY-MM-DD HH:MM:SS`, or `-`."""
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def view_tokens(view: Sequence[SessionEvent]) -> int:
    """The tokens of what a view sends to the model."""
    return event_tokens().total(sent_events(view))


def unit() -> str:
    """What `view_tokens` counts: exact o200k tokens, or an estimate."""
    return "o200k tokens" if isinstance(default_counter(), O200kCounter) else "tokens (est.)"


def statuses(
    events: Sequence[SessionEvent],
    view: Sequence[SessionEvent],
    boundary: CompactionBoundary | None,
) -> dict[str, str]:
    """Each message event's place: pinned, summary, preserved, new, view, superseded, covered;
    a stand-in in the view is "stand-in", the event it replaced "cleared"."""
    in_view = {e.id for e in view}
    sent = {e.id for e in sent_events(view)}
    parts: dict[str, str] = {}
    if boundary is not None:
        for name, ids in (
            ("pinned", boundary.pinned_event_ids),
            ("summary", boundary.summary_event_ids),
            ("preserved", boundary.preserved_event_ids),
        ):
            parts.update((i, name) for i in ids)
    replaced = replacements(events, boundary)
    cleared = {original for stand_in, original in replaced.items() if stand_in in in_view}
    out = {}
    for e in events:
        if e.message is None:
            continue
        if e.id not in in_view:
            out[e.id] = "cleared" if e.id in cleared else "covered"
        elif e.id in replaced:
            out[e.id] = "stand-in"
        elif e.id not in sent:
            out[e.id] = "superseded"
        else:
            out[e.id] = parts.get(e.id, "new" if boundary else "view")
    return out


def replacements(
    events: Sequence[SessionEvent], boundary: CompactionBoundary | None = None
) -> dict[str, str]:
    """Stand-in id -> the id of the event it replaced, from the boundaries among `events` and
    `boundary`."""
    out = dict(boundary.replaced) if boundary is not None else {}
    for e in events:
        if e.type == EventType.COMPACTION:
            out.update(CompactionBoundary.from_event(e).replaced)
    return out


def boundary_text(b: CompactionBoundary) -> str:
    """One line about a boundary: strategy, counts, tokens saved."""
    cleared = f", replaced {len(b.replaced)}" if b.replaced else ""
    return (
        f"{visible(b.strategy)}: pinned {len(b.pinned_event_ids)}, "
        f"summary {len(b.summary_event_ids)}, preserved {len(b.preserved_event_ids)}, "
        f"covered {b.covered_event_count}{cleared}; ~{b.tokens_estimated_saved:,} tokens saved"
    )


def rows(
    events: Sequence[SessionEvent], status: dict[str, str], *, fold: bool = False
) -> list[str]:
    """One line per event: seq, status, role (or type), text. A boundary wraps onto two lines;
    with `fold`, a run of covered events is one line."""
    room = width() - 2
    lines = [f"{'seq':>5}  {'status':<10} {'role':<9}  text"]
    seqs = {e.id: e.seq for e in events}
    replaced = replacements(events)
    at = 0
    while at < len(events):
        e = events[at]
        seq = f"{e.seq if e.seq is not None else '-':>5}"
        run = 1
        while fold and at + run < len(events) and status.get(events[at + run].id) == "covered":
            run += 1
        if fold and run > 2 and status.get(e.id) == "covered":
            span = f"{e.seq}-{events[at + run - 1].seq}"
            lines.append(f"{span:>5}  {'covered':<10} {'':<9}  {run} events, still in the log")
            at += run
            continue
        if e.type == EventType.COMPACTION:
            head = f"{seq}  {'BOUNDARY':<10} {'':<9}  "
            text = boundary_text(CompactionBoundary.from_event(e))
            wrapped = textwrap.wrap(text, max(20, room - len(head)))
            lines += [(head if i == 0 else " " * len(head)) + w for i, w in enumerate(wrapped)]
        elif e.message is None:
            head = f"{seq}  {'-':<10} {visible(e.type.name):<9}  "
            lines.append(head + _clip(json.dumps(e.payload, ensure_ascii=False), room - len(head)))
        else:
            head = f"{seq}  {status.get(e.id, ''):<10} {visible(e.role or ''):<9}  "
            note = ""
            if e.id in replaced:
                note = f"(for seq {seqs.get(replaced[e.id], '?')}) "
            lines.append(head + note + _clip(event_text(e), room - len(head) - len(note)))
        at += 1
    return lines


def event_json(e: SessionEvent, status: str) -> dict[str, Any]:
    """An event as plain JSON values, for `--json` (print it with `dumps`)."""
    out: dict[str, Any] = {
        "seq": e.seq,
        "id": e.id,
        "type": e.type.name,
        "status": status,
        "timestamp": None if e.timestamp is None else e.timestamp.isoformat(),
        "synthetic": e.synthetic,
        "text": event_text(e),
    }
    if e.message is None:
        out["payload"] = e.payload
        return out
    m = e.message
    out["message"] = {
        "role": m.role,
        "text": m.text,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls
        ],
        "tool_results": [
            {"call_id": r.call_id, "name": r.name, "content": r.content, "is_error": r.is_error}
            for r in m.tool_results
        ],
        "metadata": dict(m.metadata),
    }
    return out


def newest_boundary(svc: SessionService, session_id: str) -> CompactionBoundary | None:
    """The boundary in force, reading only the session's COMPACTION events."""
    only = EventFilter(event_types=[EventType.COMPACTION])
    return CompactionBoundary.newest(svc.events(session_id, only))


def print_log(svc: SessionService, session_id: str, *, fold: bool = False) -> None:
    """Print every event of a session's log, covered ones marked."""
    log = svc.events(session_id)
    status = statuses(log, svc.view(session_id), CompactionBoundary.newest(log))
    print(
        f"log of {visible(session_id)}: {len(log)} events; covered and cleared ones left the "
        "view, not the log"
    )
    print("\n".join("  " + line for line in rows(log, status, fold=fold)))


def print_view(svc: SessionService, session_id: str, *, tokens: bool = True) -> None:
    """Print what the model is sent for a session, each event labelled; with its tokens unless
    `tokens` is False (counting loads the tokenizer)."""
    view = svc.view(session_id)
    status = statuses(view, view, newest_boundary(svc, session_id))
    sent = len(sent_events(view))
    counted = f", {view_tokens(view):,} {unit()}" if tokens else ""
    print(f"view of {visible(session_id)}: {sent} messages sent to the model{counted}")
    print("\n".join("  " + line for line in rows(view, status)))


def print_result(result: CompactionResult, before: int, after: int) -> None:
    """Print what a compaction covered and kept, and the tokens sent before and after."""
    if result.unchanged:
        return
    print(
        f"covered {len(result.covered_events)} events; pinned {len(result.pinned_events)}, "
        f"summary {len(result.summary_events)}, preserved {len(result.preserved_events)}"
        + (f", stand-ins {len(result.stand_in_events)}" if result.stand_in_events else "")
    )
    print(
        f"{unit()} sent: {before:,} before -> {after:,} after ({before - after:,} fewer)\n"
        f"the boundary estimates {result.tokens_estimated_saved:,} tokens saved"
    )
