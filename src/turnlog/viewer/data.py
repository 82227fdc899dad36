"""What the viewer's pages show, read from a `SessionService` one page at a time.

Nothing here renders HTML: each function returns plain JSON-ready values that the JSON
endpoints return as they are and the templates lay out.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import msgspec

from turnlog.compaction import sent_events
from turnlog.compaction.files import FILES_METADATA_KEY
from turnlog.events import EventType, Session, SessionEvent
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
)
from turnlog.payloads import CompactionBoundary
from turnlog.reasoning import DEFAULT_REASONING, strip_reasoning
from turnlog.service import SessionService
from turnlog.stores.base import EventFilter
from turnlog.text import event_text, part_note
from turnlog.tokens import event_tokens

__all__ = [
    "INLINE_IMAGE_TYPES",
    "MAX_PAGE",
    "TEXT_SHOWN_UP_TO",
    "TOKENS_IN_LIST_UP_TO",
    "boundaries",
    "diff",
    "event_at",
    "event_json",
    "folded",
    "log_at",
    "log_page",
    "page_starts",
    "pair_tools",
    "part_bytes",
    "part_filename",
    "parts_json",
    "read_log",
    "reasoning_not_sent",
    "session_json",
    "sessions_page",
    "view_at",
]

MAX_PAGE = 500
"""The most events or sessions one page holds."""

TOKENS_IN_LIST_UP_TO = 2_000
"""The sessions list counts a session's view tokens only when its log holds at most this many
events (counting reads the whole view); open a longer session to see its count."""

TEXT_SHOWN_UP_TO = 20_000
"""The pages show a message's text, a tool call's arguments or a tool result up to this many
characters, then a note of the full size and a link to the event's whole text
(`/sessions/{id}/events/{seq}/text`); the JSON endpoints return them whole."""


INLINE_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"})
"""The image media types the pages show as images. Any other (SVG above all, which can carry
script and links) is shown as a note with a download link, its bytes served as an attachment."""

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _media_json(part: ImagePart | FilePart | AudioPart, href: str | None) -> dict[str, Any]:
    web = part.url is not None and part.url.lower().startswith(("https://", "http://"))
    return {
        "media_type": part.media_type,
        "size": part.size,
        "note": part_note(part),
        "url": part.url,
        "web_url": web,
        "ref": part.ref,
        "href": href if part.data is not None or part.ref is not None else None,
    }


def _part_json(part: Part, href: str | None) -> dict[str, Any]:
    """A part as plain values, its bytes left out: `href` is where the page fetches them."""
    if type(part) is TextPart:
        return {"type": "text", "text": part.text}
    if type(part) is ImagePart:
        out = _media_json(part, href)
        out.update(
            type="image",
            inline=(part.data is not None or part.ref is not None)
            and part.media_type.lower() in INLINE_IMAGE_TYPES,
            width=part.width,
            height=part.height,
            filename=part.filename,
            detail=part.detail,
        )
        return out
    if type(part) is FilePart:
        out = _media_json(part, href)
        out.update(type="file", name=part.name, pages=part.pages)
        return out
    if type(part) is AudioPart:
        out = _media_json(part, href)
        out.update(type="audio", seconds=part.seconds)
        return out
    if type(part) is ReasoningPart:
        return {
            "type": "reasoning",
            "provider": part.provider,
            "text": None if part.redacted else part.text,
            "redacted": part.redacted,
            "signed": part.signature is not None,
            "encrypted": part.encrypted is not None,
        }
    assert type(part) is ProviderPart
    return {"type": "provider", "provider": part.provider, "kind": part.kind, "data": part.data}


def parts_json(e: SessionEvent, parts: Sequence[Part], result: int | None = None) -> list[Any]:
    """The parts of an event's message (`result` None) or of its tool result number `result`,
    as plain values (see `_part_json`); the bytes of an inline image, file or clip are at
    `href`: `/sessions/{id}/events/{seq}/parts/{i}`, or `.../results/{r}/parts/{i}`."""
    if e.seq is None:
        base = None
    else:
        base = f"/sessions/{quote(e.session_id, safe='')}/events/{e.seq}/"
        if result is not None:
            base += f"results/{result}/"
    return [
        _part_json(p, None if base is None else f"{base}parts/{i}") for i, p in enumerate(parts)
    ]


def part_bytes(
    svc: SessionService, session_id: str, seq: int, index: int, result: int | None = None
) -> ImagePart | FilePart | AudioPart | None:
    """The part at `index` of the message at `seq` (or of its tool result `result`) with its
    bytes: inline, or read from the store when they are an attachment (checked against their
    reference); None when there is no such event, result or part, or no bytes (a URL).

    Raises:
        SessionNotFound: no session has this id.
        CorruptData: the attachment's bytes are damaged.
    """
    found = event_at(svc, session_id, seq)
    if found is None or found.message is None:
        return None
    parts: tuple[Part, ...]
    if result is None:
        parts = found.message.parts
    elif 0 <= result < len(found.message.tool_results):
        parts = found.message.tool_results[result].parts
    else:
        return None
    if not 0 <= index < len(parts):
        return None
    part = parts[index]
    if not isinstance(part, (ImagePart, FilePart, AudioPart)):
        return None
    if part.ref is not None:  # stored apart: read (and checked) from the store
        return msgspec.structs.replace(part, data=svc.attachment(session_id, part.ref), ref=None)
    return part if part.data is not None else None


def part_filename(part: ImagePart | FilePart | AudioPart, fallback: str) -> str:
    """A file name for a download of `part`: its own name with anything but letters, digits
    and `._-` replaced by `_`, else `fallback` and the media subtype."""
    given = part.filename if isinstance(part, ImagePart) else getattr(part, "name", None)
    if given:
        name = _SAFE_NAME.sub("_", given).strip("._") or fallback
        return name[:120]
    subtype = _SAFE_NAME.sub("_", part.media_type.split("/", 1)[1].split("+", 1)[0])
    return f"{fallback}.{subtype[:20]}"


def session_json(session: Session, version: int, tokens: int | None) -> dict[str, Any]:
    """A session's row: id, created, expires, metadata, version, view tokens (or None)."""
    return {
        "id": session.id,
        "created_at": session.created_at.isoformat(),
        "expires_at": None if session.expires_at is None else session.expires_at.isoformat(),
        "metadata": dict(session.metadata),
        "version": version,
        "view_tokens": tokens,
    }


def view_tokens(view: Sequence[SessionEvent]) -> int:
    """The tokens of what `view` sends to the model."""
    return event_tokens().total(sent_events(view))


def _matches(session: Session, query: str) -> bool:
    if query in session.id.lower():
        return True
    return any(
        query in str(key).lower() or query in str(value).lower()
        for key, value in session.metadata.items()
    )


def sessions_page(
    svc: SessionService, *, query: str = "", offset: int = 0, limit: int = 50
) -> dict[str, Any]:
    """One page of the sessions, newest first, optionally only those whose id or metadata
    holds `query` (case-insensitive).

    Returns:
        {"sessions": [...], "offset", "limit", "next_offset" (None on the last page),
        "query"}.
    """
    query = query.strip().lower()
    if query:
        found = [s for s in svc.sessions() if _matches(s, query)]
        chosen = found[offset : offset + limit + 1]
    else:
        chosen = svc.sessions(limit=offset + limit + 1)[offset:]
    more = len(chosen) > limit
    rows = []
    for session in chosen[:limit]:
        version = svc.version(session.id)
        tokens = None
        if version <= TOKENS_IN_LIST_UP_TO:
            tokens = view_tokens(svc.view(session.id))
        rows.append(session_json(session, version, tokens))
    return {
        "sessions": rows,
        "query": query,
        "offset": offset,
        "limit": limit,
        "next_offset": offset + limit if more else None,
    }


SEARCH_HITS = 20
"""How many hits the viewer's message search shows."""


def history_page(svc: SessionService, *, query: str = "", session: str = "") -> dict[str, Any]:
    """The events whose words match `query` (the store's history index: `service.search`),
    of every session or of `session`, best first; none for a blank query.

    Returns:
        {"hits": [...], "query", "session"}.
    """
    query, session = query.strip(), session.strip()
    hits = []
    if query:
        found = svc.search(query, sessions=[session] if session else None, k=SEARCH_HITS)
        hits = [
            {
                "session_id": h.session_id,
                "event_id": h.event_id,
                "seq": h.seq,
                "said_at": h.said_at.isoformat(),
                "role": h.role,
                "score": round(h.score, 6),
                "snippet": h.snippet,
            }
            for h in found
        ]
    return {"hits": hits, "query": query, "session": session}


@dataclass(frozen=True)
class Boundary:
    """A boundary of the log, where it sits, and what it says."""

    seq: int
    boundary: CompactionBoundary

    def json(self) -> dict[str, Any]:
        """The boundary as plain values."""
        b = self.boundary
        return {
            "seq": self.seq,
            "id": b.id,
            "strategy": b.strategy,
            "pinned": len(b.pinned_event_ids),
            "summary": len(b.summary_event_ids),
            "preserved": len(b.preserved_event_ids),
            "covered": b.covered_event_count,
            "replaced": len(b.replaced),
            "tokens_saved": b.tokens_estimated_saved,
        }


def boundaries(svc: SessionService, session_id: str) -> list[Boundary]:
    """Every compaction of the session, oldest first (reads only the COMPACTION events)."""
    only = EventFilter(event_types=[EventType.COMPACTION])
    return [
        Boundary(e.seq or 0, CompactionBoundary.from_event(e)) for e in svc.events(session_id, only)
    ]


def read_log(svc: SessionService, session_id: str, after: int, limit: int) -> list[SessionEvent]:
    """The events with seq in (`after`, `after + limit`], oldest first."""
    return svc.events_after(session_id, after, limit) if limit > 0 else []


def _files(event: SessionEvent) -> dict[str, list[str]] | None:
    if event.message is None:
        return None
    files = event.message.metadata.get(FILES_METADATA_KEY)
    if not isinstance(files, Mapping):
        return None
    return {
        kind: [str(p) for p in paths]
        for kind in ("read", "modified")
        if isinstance(paths := files.get(kind), list)
    }


def event_json(e: SessionEvent, status: str, tokens: int | None = None) -> dict[str, Any]:
    """An event as plain values: seq, id, type, status, role, text, tool calls and results,
    tokens; a boundary's counts; a summary's files."""
    out: dict[str, Any] = {
        "seq": e.seq,
        "id": e.id,
        "type": e.type.name,
        "status": status,
        "timestamp": None if e.timestamp is None else e.timestamp.isoformat(),
        "synthetic": e.synthetic,
        "tokens": tokens,
    }
    if e.type == EventType.COMPACTION:
        out["boundary"] = Boundary(e.seq or 0, CompactionBoundary.from_event(e)).json()
        return out
    if e.message is None:
        out["payload"] = e.payload
        return out
    m = e.message
    out["role"] = m.role
    out["text"] = m.text
    out["parts"] = parts_json(e, m.parts)
    out["tool_calls"] = [
        {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls
    ]
    out["tool_results"] = [
        {
            "call_id": r.call_id,
            "name": r.name,
            "content": r.content,
            "is_error": r.is_error,
            "parts": parts_json(e, r.parts, i),
        }
        for i, r in enumerate(m.tool_results)
    ]
    out["metadata"] = dict(m.metadata)
    out["files"] = _files(e)
    out["summary"] = e.synthetic
    return out


def _statuses(
    page: Sequence[SessionEvent], newest: Boundary | None, replaced: Mapping[str, str]
) -> dict[str, str]:
    """Each event's place in the current view, computed from the newest boundary alone."""
    out: dict[str, str] = {}
    view_ids = set(newest.boundary.view_event_ids) if newest else set()
    cleared = set(newest.boundary.replaced.values()) if newest else set()
    parts: dict[str, str] = {}
    if newest is not None:
        b = newest.boundary
        for name, ids in (
            ("pinned", b.pinned_event_ids),
            ("summary", b.summary_event_ids),
            ("preserved", b.preserved_event_ids),
        ):
            parts.update((i, name) for i in ids)
    for e in page:
        if e.type == EventType.COMPACTION:
            out[e.id] = "boundary"
        elif e.message is None:
            out[e.id] = "event"
        elif newest is None:
            out[e.id] = "view"
        elif e.id in view_ids:
            out[e.id] = "stand-in" if e.id in replaced else parts[e.id]
        elif (e.seq or 0) > newest.seq:
            out[e.id] = "new"
        else:
            out[e.id] = "cleared" if e.id in cleared else "covered"
    return out


def log_page(
    svc: SessionService, session_id: str, *, after: int = 0, limit: int = 100
) -> dict[str, Any]:
    """One page of the log: the events after seq `after`, each with its status in the current
    view and its tokens; runs of covered events folded (`fold` holds the run lengths).

    Returns:
        {"session", "version", "after", "limit", "next_after", "prev_after", "events",
        "boundaries"}.
    """
    session = svc.get(session_id)
    version = svc.version(session_id)
    bounds = boundaries(svc, session_id)
    newest = bounds[-1] if bounds else None
    replaced: dict[str, str] = {}
    for b in bounds:
        replaced.update(b.boundary.replaced)
    page = read_log(svc, session_id, after, limit)
    status = _statuses(page, newest, replaced)
    counts = event_tokens().counts(page)
    events = pair_tools([event_json(e, status[e.id], n) for e, n in zip(page, counts, strict=True)])
    last = after + len(page)
    return {
        "session": session_json(session, version, None),
        "version": version,
        "after": after,
        "limit": limit,
        "next_after": last if last < version else None,
        "prev_after": max(0, after - limit) if after > 0 else None,
        "events": events,
        "boundaries": [b.json() for b in bounds],
    }


def log_at(svc: SessionService, session_id: str, at: int) -> tuple[list[SessionEvent], int]:
    """The log as it was once the event at seq `at` was written: its first `at` events, or
    more when `at` falls inside a compaction (a boundary and the summary and stand-in events
    appended with it in one write: the log never ended between them).

    Returns:
        The events, and the seq they end at.
    """
    log = read_log(svc, session_id, 0, at)
    for back, e in enumerate(reversed(log)):
        if e.type == EventType.COMPACTION:
            missing = len(CompactionBoundary.from_event(e).appended_event_ids) - back
            if missing > 0:
                log += read_log(svc, session_id, len(log), missing)
            break
    return log, len(log)


def _reasoning_count(parts: Sequence[Part]) -> int:
    return sum(1 for p in parts if type(p) is ReasoningPart)


def reasoning_not_sent(sent: Sequence[SessionEvent]) -> set[str]:
    """The ids of the events among `sent` (what a model is sent of a view, in order) whose
    reasoning parts the default reasoning policy ("current_turn": see `turnlog.reasoning`)
    leaves out: the reasoning of finished turns. `strip_reasoning` itself decides, so the
    pages say what the turn runner sends."""
    events = [e for e in sent if e.message is not None]
    if not any(_reasoning_count(e.message.parts) for e in events if e.message is not None):
        return set()  # the common case: nothing to strip, no message rebuilt
    messages = [e.message for e in events if e.message is not None]
    kept = strip_reasoning(messages, DEFAULT_REASONING)
    return {
        e.id
        for e, before, after in zip(events, messages, kept, strict=True)
        if _reasoning_count(after.parts) < _reasoning_count(before.parts)
    }


def _mark_reasoning(event: dict[str, Any], left_out: bool) -> dict[str, Any]:
    """`event` (see `event_json`) with `"sent"` on each of its message's reasoning parts."""
    for part in event.get("parts", ()):
        if part["type"] == "reasoning":
            part["sent"] = not left_out
    return event


def _projected(
    svc: SessionService, session_id: str, at: int | None
) -> tuple[list[SessionEvent], int | None]:
    if at is None:
        return svc.view(session_id), None
    log, at = log_at(svc, session_id, at)
    return CompactionBoundary.project(log), at


def view_at(
    svc: SessionService,
    session_id: str,
    *,
    at: int | None = None,
    offset: int = 0,
    limit: int = 100,
) -> dict[str, Any]:
    """The view the model saw: the current one, or the one projected from the log as it was
    at seq `at` (every event up to and including `at`). Paged by `offset` and `limit`; the
    token total covers the whole view.

    Each reasoning part of the page's messages carries `"sent"`: False for the reasoning of a
    finished turn, which the default reasoning policy ("current_turn") leaves out of what the
    model is sent (see `reasoning_not_sent`); `"reasoning_not_sent"` counts those parts in the
    whole view.

    Returns:
        {"session", "version", "at", "events", "total_events", "view_tokens", "offset",
        "limit", "next_offset", "boundary" (the boundary in force, or None),
        "reasoning_policy", "reasoning_not_sent"}.
    """
    session = svc.get(session_id)
    version = svc.version(session_id)
    if at is not None:
        at = max(0, min(at, version))
    view, at = _projected(svc, session_id, at)
    bounds = [b for b in boundaries(svc, session_id) if at is None or b.seq <= at]
    newest = bounds[-1] if bounds else None
    replaced: dict[str, str] = {}
    for b in bounds:
        replaced.update(b.boundary.replaced)
    in_order = sent_events(view)
    sent = {e.id for e in in_order}
    left_out = reasoning_not_sent(in_order)
    page = view[offset : offset + limit]
    status = _statuses(page, newest, replaced)
    for e in page:
        if e.id not in sent:
            status[e.id] = "superseded"
    counts = event_tokens().counts(page)
    events = [
        _mark_reasoning(event_json(e, status[e.id], n), e.id in left_out)
        for e, n in zip(page, counts, strict=True)
    ]
    return {
        "session": session_json(session, version, None),
        "version": version,
        "at": at,
        "events": pair_tools(events),
        "reasoning_policy": DEFAULT_REASONING,
        "reasoning_not_sent": sum(
            _reasoning_count(e.message.parts)
            for e in in_order
            if e.id in left_out and e.message is not None
        ),
        "total_events": len(view),
        "view_tokens": view_tokens(view),
        "offset": offset,
        "limit": limit,
        "next_offset": offset + limit if offset + limit < len(view) else None,
        "boundary": None if newest is None else newest.json(),
    }


def _write_end(log: Sequence[SessionEvent], at: int) -> int:
    """Where the write holding event `at` ends in `log` (see `log_at`), `log` holding at least
    that much."""
    for back, e in enumerate(reversed(log[:at])):
        if e.type == EventType.COMPACTION:
            missing = len(CompactionBoundary.from_event(e).appended_event_ids) - back
            return min(len(log), at + max(0, missing))
    return at


def _cuts(rows: Sequence[SessionEvent], split: int) -> list[bool]:
    """Where a page of `rows` may start or end: `ok[p]` is False when a tool call and one of
    its results lie on both sides of the cut before row `p`. Calls pair with results within
    `rows[:split]` and within `rows[split:]` (the diff's two sections), as `pair_tools` pairs."""
    calls: dict[tuple[bool, str], int] = {}
    for i, e in enumerate(rows):
        if e.message is not None:
            for call in e.message.tool_calls:
                calls[(i >= split, call.id)] = i
    depth = [0] * (len(rows) + 2)
    for i, e in enumerate(rows):
        if e.message is None:
            continue
        for result in e.message.tool_results:
            j = calls.get((i >= split, result.call_id))
            if j is not None and j != i:
                depth[min(i, j) + 1] += 1
                depth[max(i, j) + 1] -= 1
    ok = []
    running = 0
    for p in range(len(rows) + 1):
        running += depth[p]
        ok.append(running == 0)
    return ok


def page_starts(ok: Sequence[bool], limit: int) -> list[int]:
    """Where each page of `len(ok) - 1` rows starts, cut only where `ok` allows: a page ends at
    the last allowed cut at most `limit` rows on; when there is none (a call and its results
    span more rows than `limit`), at the first one after, if that is at most `MAX_PAGE` rows
    on, else at `limit` rows (the one place a pair is split)."""
    n = len(ok) - 1
    starts = []
    start = 0
    while start < n:
        starts.append(start)
        end = min(start + limit, n)
        while end > start and not ok[end]:
            end -= 1
        if end == start:
            end = start + 1
            while not ok[end] and end - start < MAX_PAGE:
                end += 1
            if not ok[end]:
                end = start + limit
        start = end
    return starts


def diff(
    svc: SessionService, session_id: str, a: int, b: int, *, offset: int = 0, limit: int = 100
) -> dict[str, Any]:
    """What changed in the view between the log at seq `a` and at seq `b`: the events that
    left it, then the events that entered it, one page of those rows at a time.

    The rows are paged by `offset` and `limit` without ever parting a tool call from its
    result (see `page_starts`): the page is the one holding row `offset`, so `offset` may move
    back to its start, and it holds at most `limit` rows unless one call and its results span
    more. Only the page's events are counted for tokens; the token totals at each end are
    counted only for a view of at most `TOKENS_IN_LIST_UP_TO` events (else None). The log is
    read once, up to the later of the two seqs.

    Returns:
        {"session", "a", "b", "events_a", "events_b", "tokens_a", "tokens_b", "total_left",
        "total_entered", "left", "entered" (this page's rows of each), "offset", "limit",
        "next_offset", "prev_offset" (None at either end)}.
    """
    version = svc.version(session_id)
    a, b = (max(0, min(x, version)) for x in (a, b))
    later = max(a, b)
    log, end = log_at(svc, session_id, later)
    a, b = (end if x == later else _write_end(log, x) for x in (a, b))
    first = CompactionBoundary.project(log[:a])
    second = CompactionBoundary.project(log[:b])
    del log
    ids_first = {e.id for e in first}
    ids_second = {e.id for e in second}
    left = [e for e in first if e.id not in ids_second]
    entered = [e for e in second if e.id not in ids_first]
    rows = left + entered
    starts = page_starts(_cuts(rows, len(left)), limit)
    at = bisect.bisect_right(starts, offset) - 1
    if offset >= len(rows):
        start, stop, at = offset, offset, len(starts)
    else:
        start = starts[at]
        stop = starts[at + 1] if at + 1 < len(starts) else len(rows)
    page = rows[start:stop]
    counts = event_tokens().counts(page)
    shown = [
        event_json(e, "left" if i < len(left) else "entered", n)
        for i, (e, n) in enumerate(zip(page, counts, strict=True), start)
    ]
    cut = max(0, min(len(left) - start, len(shown)))

    def tokens(view: list[SessionEvent]) -> int | None:
        return view_tokens(view) if len(view) <= TOKENS_IN_LIST_UP_TO else None

    return {
        "session": session_json(svc.get(session_id), version, None),
        "a": a,
        "b": b,
        "tokens_a": tokens(first),
        "tokens_b": tokens(second),
        "events_a": len(first),
        "events_b": len(second),
        "total_left": len(left),
        "total_entered": len(entered),
        "left": pair_tools(shown[:cut]),
        "entered": pair_tools(shown[cut:]),
        "offset": start,
        "limit": limit,
        "next_offset": starts[at + 1] if at + 1 < len(starts) else None,
        "prev_offset": starts[at - 1] if 0 < at <= len(starts) else None,
    }


def pair_tools(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Link each tool call to the seq of the event holding its result (`result_seq`) and each
    result to its call's seq (`call_seq`), among `events`; None where the other half is not
    among them."""
    calls: dict[str, dict[str, Any]] = {}
    for e in events:
        for call in e.get("tool_calls", ()):
            call["result_seq"] = None
            calls[call["id"]] = {"call": call, "seq": e["seq"]}
    for e in events:
        for result in e.get("tool_results", ()):
            found = calls.get(result["call_id"])
            result["call_seq"] = None if found is None else found["seq"]
            if found is not None:
                found["call"]["result_seq"] = e["seq"]
    return events


def folded(events: list[dict[str, Any]], least: int = 3) -> list[dict[str, Any]]:
    """`events` with each run of at least `least` covered events put in one
    {"fold": [...]} item (the timeline shows it closed)."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []

    def flush() -> None:
        if len(run) >= least:
            out.append({"fold": list(run)})
        else:
            out.extend(run)
        run.clear()

    for e in events:
        if e["status"] in ("covered", "cleared"):
            run.append(e)
            continue
        flush()
        out.append(e)
    flush()
    return out


def event_at(svc: SessionService, session_id: str, seq: int) -> SessionEvent | None:
    """The event at `seq` in the session's log, or None when the log holds none there.

    Raises:
        SessionNotFound: no session has this id.
    """
    svc.get(session_id)
    if not 1 <= seq <= svc.version(session_id):
        return None
    found = read_log(svc, session_id, seq - 1, 1)
    return found[0] if found and found[0].seq == seq else None


def text_of(e: SessionEvent) -> str:
    """The event as the model reads it (for events without a message: its payload's text)."""
    return event_text(e)
