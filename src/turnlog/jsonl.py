"""turnlog's own JSONL: one session and its log (or its view), one JSON object a line.

The first line describes the session; each following line is one event, in log order, its body
written by the same codec every store uses (`turnlog.codec.encode_body`), so that reading it back
rebuilds the very same events, boundaries included:

    {"turnlog": "session", "format": 1, "scope": "log", "id": "s1", "created_at_us": 17...,
     "expires_at_us": null, "metadata": {...}, "events": 42}
    {"seq": 1, "id": "e1", "type": "MESSAGE", "at_us": 17..., "synthetic": false,
     "body": {"v": 1, "message": {...}, "metadata": {...}}}

Times are integer microseconds since the epoch (UTC), as stored, so nothing is rounded. "scope" is
"log" for a whole log and "view" for the events of a view only (no boundaries).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from turnlog.codec import decode_session, encode_body, event_from_row, to_micros
from turnlog.errors import CorruptData, InvalidInput
from turnlog.events import Session, SessionEvent

__all__ = ["HEADER_KEY", "SessionDump", "dump_lines", "is_header", "read_dump"]

HEADER_KEY: Final = "turnlog"
"""The key that marks the first line of a turnlog JSONL file."""
JSONL_FORMAT: Final = 1

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder()


@dataclass(frozen=True)
class SessionDump:
    """A session read back from turnlog JSONL."""

    session: Session
    """The session as it was stored (id, times, metadata)."""
    events: list[SessionEvent]
    """Its events in log order, with their ids, seqs, timestamps and bodies."""
    scope: str
    """"log" (the whole log) or "view" (the events of a view)."""


def dump_lines(
    session: Session, events: Iterable[SessionEvent], *, count: int, scope: str
) -> Iterator[bytes]:
    """The lines of a turnlog JSONL file (each ending in a newline) for `session` and `events`.

    Args:
        session: the session.
        events: its stored events (each with a seq and a timestamp), in log order.
        count: how many events there are (written in the header, checked on reading).
        scope: "log" or "view".
    """
    header = {
        HEADER_KEY: "session",
        "format": JSONL_FORMAT,
        "scope": scope,
        "id": session.id,
        "created_at_us": to_micros(session.created_at),
        "expires_at_us": None if session.expires_at is None else to_micros(session.expires_at),
        "metadata": dict(session.metadata),
        "events": count,
    }
    yield _encoder.encode(header) + b"\n"
    for e in events:
        assert e.timestamp is not None, "a stored event has a timestamp"
        line = {
            "seq": e.seq,
            "id": e.id,
            "type": e.type.name,
            "at_us": to_micros(e.timestamp),
            "synthetic": e.synthetic,
            "body": msgspec.Raw(encode_body(e)),
        }
        yield _encoder.encode(line) + b"\n"


def is_header(value: object) -> bool:
    """True when `value` (a decoded first line) starts a turnlog JSONL file."""
    return isinstance(value, dict) and value.get(HEADER_KEY) == "session"


def read_dump(name: str, lines: Iterable[bytes], *, session_id: str | None = None) -> SessionDump:
    """Read turnlog JSONL back; `name` says where it came from in errors.

    Args:
        name: the file's name, for messages.
        lines: the file's lines.
        session_id: the id to give the session and its events (default: the file's).

    Raises:
        InvalidInput: not turnlog JSONL, a line that cannot be read, or a count that does not
            match the header; names the line.
    """
    it = iter(enumerate(lines, start=1))
    header = None
    for n, raw in it:
        if raw.strip():
            header = _line(name, n, raw.removeprefix(b"\xef\xbb\xbf") if n == 1 else raw)
            break
    if not is_header(header):
        raise InvalidInput(f"{name}: line 1 is not a turnlog JSONL header")
    assert isinstance(header, dict)
    if header.get("format") != JSONL_FORMAT:
        raise InvalidInput(
            f"{name}: turnlog JSONL format {header.get('format')!r} is not one this version "
            f"reads ({JSONL_FORMAT}): upgrade turnlog"
        )
    try:
        original = decode_session(
            str(header["id"]),
            int(header["created_at_us"]),
            None if header.get("expires_at_us") is None else int(header["expires_at_us"]),
            _encoder.encode(header.get("metadata") or {}),
        )
        sid = original.id if session_id is None else session_id
        session = Session(
            id=sid,
            created_at=original.created_at,
            expires_at=original.expires_at,
            metadata=original.metadata,
        )
    except (KeyError, TypeError, ValueError, CorruptData) as exc:
        raise InvalidInput(f"{name}, line 1: a bad session header ({exc})") from None
    events: list[SessionEvent] = []
    for n, raw in it:
        if not raw.strip():
            continue
        item = _line(name, n, raw)
        try:
            if not isinstance(item, dict):
                raise TypeError("not a JSON object")
            event = event_from_row(
                str(item["id"]),
                sid,
                int(item["seq"]),
                str(item["type"]),
                int(item["at_us"]),
                bool(item["synthetic"]),
                _encoder.encode(item["body"]),
            )
            # the fields' own checks, as when an application builds the event
            SessionEvent(
                id=event.id,
                session_id=event.session_id,
                type=event.type,
                message=event.message,
                payload=event.payload,
                metadata=event.metadata,
                synthetic=event.synthetic,
                timestamp=event.timestamp,
            )
        except RecursionError:
            raise InvalidInput(f"{name}, line {n}: JSON nested too deeply") from None
        except (KeyError, TypeError, ValueError, CorruptData) as exc:
            why = str(exc).split(". The row is damaged")[0]
            raise InvalidInput(f"{name}, line {n}: a bad event ({why})") from None
        events.append(event)
    if header.get("events") != len(events):
        raise InvalidInput(
            f"{name}: the header says {header.get('events')!r} events, the file holds "
            f"{len(events)}: the file is truncated or was edited"
        )
    return SessionDump(session, events, str(header.get("scope", "log")))


def _line(name: str, n: int, raw: bytes) -> Any:
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"{name}, line {n}: not JSON ({exc})") from None
    except RecursionError:  # e.g. a payload nested 100,000 deep
        raise InvalidInput(f"{name}, line {n}: JSON nested too deeply") from None
