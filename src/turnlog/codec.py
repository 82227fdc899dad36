"""The one wire format every store uses: an event's body as versioned JSON bytes.

Columns that stores index (id, session, seq, type, timestamp, role, synthetic) live beside the
body; the body carries the message or payload and the metadata:

    {"v": 1, "message": {"role": ..., "text": ..., "tool_calls": [...], "tool_results": [...],
                         "metadata": {...}}, "metadata": {...}}
    {"v": 1, "payload": <json>, "metadata": {...}}

A tool call is `[id, name, arguments]`; a tool result `[call_id, name, content]`, or
`[call_id, name, content, true]` for a failed call (`ToolResult.is_error`, added within format 1:
bodies without it read as before, and a result that did not fail is still written without it).

A message that holds more than text carries `"parts"`: a list of tagged objects, one per part,
`{"type": "image", "media_type": ..., "data": <base64>, ...}` (see `turnlog.parts`; fields at
their default are left out), with `"text"` written beside them (their text, derived), so that a
reader that predates parts still finds the text. A tool result with parts is
`[call_id, name, content, is_error, [parts...]]`. Added within format 1: a message of text alone
is written as before, byte for byte. A part whose `"type"` this version does not know reads back
as `ProviderPart("unknown", <type>, <the object>)`: the typed decode fails on it, and the body is
read again by a slower path that rewrites such parts (`_decode_lenient`), so a newer writer's
parts never make a log unreadable.

A message event counted at append also carries `"tokens": [counter, count]` (`SessionEvent.tokens`,
added within format 1 like `is_error`: bodies without it read as before, with no count, and a
reader that predates it ignores it).

The payload of a COMPACTION event is a `CompactionBoundary`, and that of a
TURNLOG.TOOLS_DISCOVERED event a `ToolsDiscovered` (`turnlog.payloads`): the type column is the
tag that says which, and the reader types the payload into its record once, in C, with the
event (`SessionEvent.record`); a payload that is not such a record still reads, as JSON, with no
record (`CompactionBoundary.from_event` then says what is wrong with it). The bytes are the
record's fields as a JSON object, exactly what turnlog wrote before the records were typed, so
this is still format 1, read and written alike by older and newer versions
(`tests/fixtures/bodies_v1_payloads.json`).

Format 1 is the only one so far. Bodies written by every released format stay readable: their
fixtures live in `tests/fixtures/` and are decoded by the test suite forever.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec

from turnlog import events as _events
from turnlog.errors import CorruptData, InvalidInput
from turnlog.events import (
    EventType,
    Message,
    Session,
    SessionEvent,
    TokenCount,
    shared_token_count,
    trusted,
)
from turnlog.lazy import LazyEvents
from turnlog.parts import PART_KINDS, Part
from turnlog.payloads import record_of

__all__ = [
    "FORMAT_VERSION",
    "decode_event",
    "decode_rows",
    "decode_session",
    "dump_json",
    "dump_jsonb",
    "encode_body",
    "event_from_row",
    "events_from_rows",
    "from_micros",
    "gc_paused",
    "lazy_events_from_rows",
    "load_json",
    "message_ids",
    "message_role",
    "to_micros",
]

FORMAT_VERSION: Final = 1
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class _Call(msgspec.Struct, array_like=True):
    id: str
    name: str
    arguments: str


class _OutMessage(msgspec.Struct, omit_defaults=True):
    """`_Message` as written: a result that did not fail leaves out the trailing `false`."""

    role: str
    text: str | None = None
    parts: tuple[Part, ...] = ()
    tool_calls: list[_Call] = []
    tool_results: list[
        tuple[str, str, str] | tuple[str, str, str, bool] | tuple[str, str, str, bool, Any]
    ] = []
    metadata: dict[str, Any] = {}


class _Tokens(msgspec.Struct, array_like=True, gc=False):
    counter: Annotated[str, msgspec.Meta(min_length=1)]
    count: Annotated[int, msgspec.Meta(ge=0)]


class _Body(msgspec.Struct, omit_defaults=True):
    """A stored body, decoded straight into the public `Message` (and its calls and results):
    msgspec builds them in C and checks each field's type, the role included; their own checks
    are skipped (see `parts._Checked`). An unknown format version fails in C too."""

    v: Literal[1]  # FORMAT_VERSION
    message: Message | None = None
    payload: Any = None
    metadata: dict[str, Any] = {}
    tokens: _Tokens | None = None


class _OutBody(msgspec.Struct, omit_defaults=True):
    v: int
    message: _OutMessage | None = None
    payload: Any = None
    metadata: dict[str, Any] = {}
    tokens: _Tokens | None = None


class _Id(msgspec.Struct, array_like=True, gc=False):
    """A tool call's id, or the call id a tool result answers: the first item of either
    (the items after it are not read)."""

    id: str


class _IdsMessage(msgspec.Struct):
    tool_calls: list[_Id] = []
    tool_results: list[_Id] = []


class _IdsBody(msgspec.Struct):
    message: _IdsMessage | None = None


class _RoleMessage(msgspec.Struct, gc=False):
    role: str


class _RoleBody(msgspec.Struct):
    message: _RoleMessage | None = None


class _OutlineBody(msgspec.Struct, gc=False):
    """What a compaction plans from: the format version, the role and the stored count."""

    v: Literal[1]  # FORMAT_VERSION
    message: _RoleMessage | None = None
    tokens: _Tokens | None = None


_encoder: Final = msgspec.json.Encoder()
_ids_decoder: Final = msgspec.json.Decoder(_IdsBody)
_role_decoder: Final = msgspec.json.Decoder(_RoleBody)
_decoder: Final = msgspec.json.Decoder(_Body)
_outline_decoder: Final = msgspec.json.Decoder(_OutlineBody)
_any_decoder: Final = msgspec.json.Decoder()


def to_micros(moment: datetime) -> int:
    """A timezone-aware datetime as integer microseconds since the epoch."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    """The UTC datetime of integer microseconds since the epoch.

    Raises:
        OverflowError: outside what a datetime can hold; TypeError: not an integer.
    """
    if not isinstance(micros, int) or isinstance(micros, bool):
        raise TypeError(f"a timestamp is stored as integer microseconds, found {micros!r}")
    return _EPOCH + timedelta(microseconds=micros)


def encode_body(event: SessionEvent) -> bytes:
    """The stored body of `event` (format `FORMAT_VERSION`)."""
    m = event.message
    message = None
    if m is not None:
        message = _OutMessage(
            role=m.role,
            text=m.text,
            parts=m.parts,
            tool_calls=[_Call(c.id, c.name, c.arguments) for c in m.tool_calls],
            tool_results=[
                (r.call_id, r.name, r.content, r.is_error, r.parts)
                if r.parts
                else (r.call_id, r.name, r.content, True)
                if r.is_error
                else (r.call_id, r.name, r.content)
                for r in m.tool_results
            ],
            metadata=dict(m.metadata),
        )
    counted = event.tokens
    body = _OutBody(
        v=FORMAT_VERSION,
        message=message,
        payload=event.payload,
        metadata=dict(event.metadata),
        tokens=None if counted is None else _Tokens(counted.counter, counted.count),
    )
    return _encoder.encode(body)


def message_ids(body: bytes | str) -> list[str]:
    """The call ids a stored message body holds: an assistant message's calls, or the calls a
    tool message's results answer; empty for other messages. Reads only those fields.

    Raises:
        CorruptData: the body cannot be decoded.
    """
    raw = body.encode() if isinstance(body, str) else body
    if b'"tool_calls"' not in raw and b'"tool_results"' not in raw:
        return []
    try:
        message = _ids_decoder.decode(raw).message
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptData(f"a stored message cannot be read: {exc}") from exc
    if message is None:
        return []
    return [c.id for c in message.tool_calls] + [r.id for r in message.tool_results]


def message_role(body: bytes) -> str | None:
    """The role of the message a stored body holds; None for another event's body.

    Raises:
        CorruptData: the body cannot be decoded.
    """
    try:
        message = _role_decoder.decode(body).message
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptData(f"a stored message cannot be read: {exc}") from exc
    return None if message is None else message.role


def decode_event(
    *,
    event_id: str,
    session_id: str,
    seq: int,
    type_name: str,
    timestamp_micros: int,
    synthetic: bool,
    body: bytes | str,
) -> SessionEvent:
    """Rebuild a stored event from its columns and body.

    Raises:
        CorruptData: the body cannot be decoded, names the session and seq.
    """
    return event_from_row(event_id, session_id, seq, type_name, timestamp_micros, synthetic, body)


def event_from_row(
    event_id: str,
    session_id: str,
    seq: int,
    type_name: str,
    timestamp_micros: int,
    synthetic: bool | int,
    body: bytes | str,
) -> SessionEvent:
    """`decode_event` with positional arguments.

    Raises:
        CorruptData: the body cannot be decoded, names the session and seq.
    """
    return events_from_rows(
        session_id, ((seq, event_id, type_name, timestamp_micros, synthetic, body),)
    )[0]


def events_from_rows(session_id: str, rows: Iterable[Sequence[Any]]) -> list[SessionEvent]:
    """The events of one session's stored rows, each `(seq, id, type name, timestamp in
    microseconds, synthetic, body)`: the loop that reads a whole log. A type name of None
    reads as MESSAGE.

    msgspec decodes each body straight into the public records (`Message`, `ToolCall`,
    `ToolResult`), checking every field's type in C, and runs no Python for them (their own
    checks run when the application builds one); the event records are built here without
    repeating their checks either (`events.trusted`). The payload of an event type turnlog
    writes (a COMPACTION boundary, a tool discovery) is read into its typed record here, once,
    in C (`payloads.record_of`): the event carries it (`SessionEvent.record`).

    Raises:
        CorruptData: a row cannot be decoded; names the session and the row's seq.
    """
    out: list[SessionEvent] = []
    append = out.append
    seq: Any = None
    event_id: Any = None
    shared = _events._shared_counts  # one record per (counter, count): see shared_token_count
    last_counter: str | None = None
    by_count: dict[int, TokenCount] | None = None
    other_counter: str | None = None
    other_by: dict[int, TokenCount] | None = None
    try:
        rows = rows if isinstance(rows, list) else list(rows)
        for (seq, event_id, type_name, micros, synthetic, body), stamp in zip(
            rows, _stamps(rows), strict=True
        ):
            try:
                decoded = _decode_body(body)
            except msgspec.ValidationError as exc:
                decoded = _decode_lenient(body, exc)  # a part of a kind not known here?
            event_type = _TYPES.get(type_name) or _event_type(type_name)
            message = decoded.message
            record = None
            if message is None:
                if event_type is _MESSAGE:
                    raise ValueError("a MESSAGE row without a message")
                record = record_of(event_type, event_id, decoded.payload)
            elif event_type is not _MESSAGE:
                raise ValueError(f"a {event_type.name} row with a message")
            if type(micros) is not int:
                raise TypeError(f"a timestamp is stored as integer microseconds, found {micros!r}")
            if stamp is None or not 0 <= micros < _FLOAT_EXACT_BELOW:
                stamp = _EPOCH + _timedelta(0, 0, micros)
            counted = decoded.tokens
            tokens = None
            if counted is not None:
                if message is None:
                    raise ValueError("a token count on an event that is not a message")
                counter, count = counted.counter, counted.count
                # two counters at hand without moving them: a log of images takes turns
                # between two (text, and text with parts), and a turn then hashes no name
                if counter != last_counter:
                    if counter == other_counter:
                        if other_by is not None:
                            tokens = other_by.get(count)
                    else:
                        other_counter, other_by = last_counter, by_count
                        last_counter = counter
                        by_count = shared.get(counter)
                        if by_count is not None:
                            tokens = by_count.get(count)
                elif by_count is not None:
                    tokens = by_count.get(count)
                if tokens is None:
                    tokens = shared_token_count(counter, count)
                    if counter == last_counter:
                        by_count = shared.get(counter)
                    else:
                        other_by = shared.get(counter)
            append(
                _event(
                    _SessionEvent,
                    event_id,
                    session_id,
                    event_type,
                    message,
                    decoded.payload,
                    decoded.metadata or _EMPTY,  # one shared {} as for_message gives
                    bool(synthetic),
                    seq,
                    stamp,
                    tokens,
                    record,
                )
            )
    except (
        msgspec.DecodeError,
        msgspec.ValidationError,
        ValueError,
        TypeError,
        OverflowError,
    ) as exc:
        raise CorruptData(
            f"event seq {seq} ({event_id!r}) of session {session_id!r} cannot be read: {exc}. "
            "The row is damaged; other sessions are unaffected. Restore it from a backup, or "
            "inspect it with `turnlog show --log`."
        ) from exc
    return out


def _decode_lenient(body: bytes | str, first: msgspec.ValidationError) -> _Body:
    """`body`, whose typed decode failed with `first`, decoded with each part of a kind not
    known here (a newer writer's) turned into a `ProviderPart("unknown", <its type>, <the
    stored object>)`: the slow path, taken only after the typed decode has failed.

    Raises:
        msgspec.ValidationError: `first`, when no part of an unknown kind explains it; the
            typed decode's error again, when the body is damaged besides.
        msgspec.DecodeError: the body is not JSON.
    """
    raw = _any_decoder.decode(body)
    message = raw.get("message") if isinstance(raw, dict) else None
    if not isinstance(message, dict):
        raise first
    found = _unknown_parts(message.get("parts"))
    results = message.get("tool_results")
    if isinstance(results, list):
        for result in results:
            if isinstance(result, list) and len(result) > 4:
                found += _unknown_parts(result[4])
    if not found:
        raise first
    return _decode_body(_encoder.encode(raw))


def _unknown_parts(parts: Any) -> int:
    """Rewrite in place each part in the list `parts` whose type is not known here as a
    provider part holding it; the count rewritten."""
    if not isinstance(parts, list):
        return 0
    found = 0
    for i, part in enumerate(parts):
        if isinstance(part, dict):
            kind = part.get("type")
            if isinstance(kind, str) and kind not in PART_KINDS and kind.strip():
                parts[i] = {"type": "provider", "provider": "unknown", "kind": kind, "data": part}
                found += 1
    return found


def lazy_events_from_rows(session_id: str, rows: Sequence[Sequence[Any]]) -> LazyEvents:
    """The events of one session's stored rows (as `events_from_rows` takes them), decoded
    on first access: what is read now is each row's outline (id, role, synthetic flag, stored
    count), by msgspec from each body, building no message (a body is not copied: one
    decode per row touches less new memory than one over the bodies joined, which a fresh
    process pays for in page faults).

    The rows are kept; a row is decoded when its event is first read (`LazyEvents`), and a
    damaged one raises `CorruptData` then, naming the session and the row. A body that is not
    JSON of format 1, or whose role or count has the wrong type, is refused now.

    Raises:
        CorruptData: a row's outline cannot be read; names the session and the row's seq.
    """
    outline = _outline_decoder.decode
    try:
        outlines = [outline(r[5]) for r in rows]  # untracked by the collector (gc=False)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
        outlines = [_outline_of(session_id, row) for row in rows]  # names the damaged row
    roles: list[str | None] = [None if (m := o.message) is None else m.role for o in outlines]
    types = [r[2] for r in rows]
    if None in roles or types.count(None) + types.count("MESSAGE") != len(types):
        for row in rows:  # not only messages: check each row's type against its body
            _outline_of(session_id, row)
    tokens = [o.tokens for o in outlines]

    def decode(positions: list[int]) -> list[SessionEvent]:
        return decode_rows(session_id, [rows[p] for p in positions])

    return LazyEvents.of_rows(
        [r[1] for r in rows], roles, [bool(r[4]) for r in rows], tokens, decode
    )


def _outline_of(session_id: str, row: Sequence[Any]) -> _OutlineBody:
    """One row's outline, checked against its type column.

    Raises:
        CorruptData: the row is damaged; names the session and the row's seq.
    """
    seq, event_id, type_name, _micros, _synthetic, body = row
    try:
        outline = _outline_decoder.decode(body)
        if (outline.message is None) != (type_name is not None and type_name != "MESSAGE"):
            raise ValueError("the row's type and its message disagree")
        if outline.tokens is not None and outline.message is None:
            raise ValueError("a token count on an event that is not a message")
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
        raise CorruptData(
            f"event seq {seq} ({event_id!r}) of session {session_id!r} cannot be read: {exc}. "
            "The row is damaged; other sessions are unaffected. Restore it from a backup, or "
            "inspect it with `turnlog show --log`."
        ) from exc
    return outline


# Below this many microseconds since the epoch (the year 2096), a float of seconds holds the
# instant to well under half a microsecond, so the datetime made from it is exact.
_FLOAT_EXACT_BELOW: Final = 4_000_000_000_000_000


def _stamps(rows: list[Sequence[Any]]) -> list[datetime] | list[None]:
    """The rows' timestamps (column 3, integer microseconds) as UTC datetimes, all at once.

    msgspec turns a list of float seconds into datetimes in C, some ten times faster than a
    datetime made per row in Python. Exact below `_FLOAT_EXACT_BELOW`: the caller makes the
    others with integer arithmetic, and all of them when this gives None for every row (a
    column that is not all numbers, which the caller then reports row by row).
    """
    if len(rows) < 16:  # not worth a conversion call: the caller makes them one by one
        return [None] * len(rows)
    try:
        return _convert([r[3] / 1e6 for r in rows], _DATETIMES, strict=False)
    except (TypeError, OverflowError, msgspec.ValidationError):
        return [None] * len(rows)


PAUSE_AT: Final = 1_000
"""Rows from which `decode_rows` holds the collector off."""


def decode_rows(session_id: str, rows: list[Sequence[Any]]) -> list[SessionEvent]:
    """`events_from_rows`, with the garbage collector held off (`gc_paused`) for a read of at
    least `PAUSE_AT` rows: what every store's whole-log and view reads use.

    Raises:
        CorruptData: as `events_from_rows`.
    """
    if len(rows) < PAUSE_AT:
        return events_from_rows(session_id, rows)
    with gc_paused():
        return events_from_rows(session_id, rows)


_pause_lock: Final = threading.Lock()
_pause = {"depth": 0, "enabled": False}


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector while a whole log is decoded.

    Building 10,000 events allocates some 30,000 tracked objects, and the collector would
    traverse every live object of the process again and again meanwhile: in a process with a
    large heap that can cost more than the decoding itself. The records built hold no cycles,
    so nothing is lost by waiting; collection resumes as before when the outermost pause ends
    (threads pausing at once share one pause). A collector disabled by the application stays
    disabled.
    """
    with _pause_lock:
        if _pause["depth"] == 0:
            _pause["enabled"] = gc.isenabled()
            gc.disable()
        _pause["depth"] += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pause["depth"] -= 1
            if _pause["depth"] == 0 and _pause["enabled"]:
                gc.enable()


def decode_session(
    session_id: str,
    created_at: datetime | int,
    expires_at: datetime | int | None,
    metadata: str | bytes,
) -> Session:
    """Rebuild a stored session from its columns: times as datetimes or integer microseconds.

    Raises:
        CorruptData: a column is damaged (a time out of range or of the wrong type, metadata
            that is not a JSON object); names the session.
    """
    try:
        meta = _any_decoder.decode(metadata)
        if not isinstance(meta, dict):
            raise ValueError("its metadata is not a JSON object")
        return _trusted(
            Session,
            id=session_id,
            created_at=_utc(created_at),
            expires_at=None if expires_at is None else _utc(expires_at),
            metadata=meta,
        )
    except (msgspec.DecodeError, ValueError, TypeError, OverflowError) as exc:
        raise CorruptData(
            f"session {session_id!r} cannot be read: {exc}. The row is damaged; other sessions "
            "are unaffected. Restore it from a backup, or delete the session."
        ) from exc


def _utc(moment: datetime | int) -> datetime:
    if isinstance(moment, datetime):
        if moment.utcoffset() is None:
            raise TypeError(f"a stored time has no time zone: {moment!r}")
        return moment.astimezone(UTC)
    return from_micros(moment)


_T = TypeVar("_T")


def _trusted(cls: type[_T], **values: Any) -> _T:
    """An instance of a frozen record built from already-valid values, skipping validation."""
    obj = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


@functools.lru_cache(maxsize=256)
def _event_type(name: str) -> EventType:
    return EventType.MESSAGE if name == "MESSAGE" else EventType.of(name)


_timedelta: Final = timedelta
_convert: Final = msgspec.convert
_DATETIMES: Final = list[datetime]
_EMPTY: Final = _events._EMPTY
_decode_body: Final = _decoder.decode
_event: Final = trusted  # a SessionEvent of values typed in C, without its checks
_SessionEvent: Final = SessionEvent
_MESSAGE: Final = EventType.MESSAGE
_TYPES: Final = {
    "MESSAGE": EventType.MESSAGE,
    None: EventType.MESSAGE,  # a store that leaves out the most common type
    "COMPACTION": EventType.COMPACTION,
}


def dump_json(value: Any) -> str:
    """`value` as compact JSON text."""
    try:
        return _encoder.encode(value).decode("utf-8")
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidInput(f"not JSON: {exc}") from exc


def dump_jsonb(value: Any) -> str:
    """`value` as JSON text that PostgreSQL's jsonb reads back with the same types.

    jsonb keeps numbers as `numeric`, which writes `1e16` back as `10000000000000000`, an
    integer; a float with a whole value is written here as `10000000000000000.0`, which jsonb
    keeps (and gives back) with its decimal point.
    """
    return dump_json(_point_floats(value))


def _point_floats(value: Any) -> Any:
    if isinstance(value, float):
        if value.is_integer() and "e" in repr(value):
            return msgspec.Raw(f"{int(value)}.0".encode())
        return value
    if isinstance(value, (list, tuple)):
        return [_point_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _point_floats(v) for k, v in value.items()}
    return value


def load_json(text: str | bytes, what: str) -> Any:
    """Parse JSON text.

    Raises:
        CorruptData: it is not JSON; `what` names where it came from.
    """
    try:
        return _any_decoder.decode(text)
    except msgspec.DecodeError as exc:
        raise CorruptData(f"{what} is not valid JSON: {exc}") from exc
