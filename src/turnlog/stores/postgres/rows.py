"""What the PostgreSQL stores send and read back: batches as column arrays, rows as records.

Plain code, shared by `AsyncPostgresStore` and the generated `PostgresStore`: no I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

import psycopg

from turnlog.codec import (
    decode_rows,
    decode_session,
    dump_jsonb,
    encode_body,
    events_from_rows,
    to_micros,
)
from turnlog.errors import InvalidInput
from turnlog.events import EventType, Session, SessionEvent, check_id
from turnlog.history import SAID_AT, indexed_text, said_at, tool_names
from turnlog.payloads import CompactionBoundary
from turnlog.stores.attachments import Split, refs_in
from turnlog.stores.base import check_boundaries
from turnlog.stores.postgres.ddl import CHUNK_BYTES
from turnlog.stores.postgres.queries import Queries

__all__ = [
    "Batch",
    "event_of",
    "events_of",
    "first_line",
    "history_columns",
    "history_terms",
    "history_words",
    "read_params",
    "refuse_boundaries",
    "session_of",
    "session_params",
    "where",
]


class Batch:
    """A batch as the column arrays the append function takes, with its attachments: the bytes
    it stores and the references it names (`turnlog.stores.attachments.Split`), if any."""

    def __init__(
        self, events: list[SessionEvent], now_micros: int, split: Split | None = None
    ) -> None:
        self.events = events
        self.blobs: dict[str, bytes] = {} if split is None else split.blobs
        self.named: dict[str, int | None] = {} if split is None else split.named
        self.ids = [e.id for e in events]
        self.types = [e.type.name for e in events]
        self.timestamps = [
            now_micros if e.timestamp is None else to_micros(e.timestamp) for e in events
        ]
        self.roles = [e.role for e in events]
        self.synthetic = [e.synthetic for e in events]
        self.bodies = [encode_body(e) for e in events]
        columns = [history_columns(e, t) for e, t in zip(events, self.timestamps, strict=True)]
        self.texts = [c[0] for c in columns]
        self.said = [c[1] for c in columns]
        self.tools = [c[2] for c in columns]
        self.required: list[str] = []
        self.boundary_at: int | None = None
        self.boundary_ids: list[str] = []
        if any(e.type == EventType.COMPACTION for e in events):
            self._boundaries()

    def _boundaries(self) -> None:
        # Raises InvalidInput for a malformed boundary, before anything is sent.
        check_boundaries(self.events, set)
        for at, event in enumerate(self.events):
            if event.type != EventType.COMPACTION:
                continue
            boundary = CompactionBoundary.from_event(event)
            near = {e.id for e in self.events if e.message is not None}
            self.required += [i for i in boundary.view_event_ids if i not in near]
            self.required += [i for i in boundary.replaced.values() if i not in near]
            self.boundary_at = at + 1
            self.boundary_ids = list(boundary.view_event_ids)

    def without(self, stored: set[str]) -> Batch:
        """The batch less the events already stored."""
        keep = Batch.__new__(Batch)
        index = [i for i, e in enumerate(self.events) if e.id not in stored]
        keep.events = [self.events[i] for i in index]
        keep.ids = [self.ids[i] for i in index]
        keep.types = [self.types[i] for i in index]
        keep.timestamps = [self.timestamps[i] for i in index]
        keep.roles = [self.roles[i] for i in index]
        keep.synthetic = [self.synthetic[i] for i in index]
        keep.bodies = [self.bodies[i] for i in index]
        keep.texts = [self.texts[i] for i in index]
        keep.said = [self.said[i] for i in index]
        keep.tools = [self.tools[i] for i in index]
        keep.required, keep.boundary_at, keep.boundary_ids = [], None, []
        left = refs_in(keep.events) if self.blobs or self.named else set()
        keep.blobs = {r: b for r, b in self.blobs.items() if r in left}
        keep.named = {r: n for r, n in self.named.items() if r in left}
        if any(e.type == EventType.COMPACTION for e in keep.events):
            keep._boundaries()
        return keep

    def call(self, queries: Queries, session_id: str, expected: int | None) -> tuple[str, Any]:
        """The fast append statement for this batch, and its parameters."""
        if self.blobs or self.named:
            refs = sorted(self.blobs)
            named = sorted(self.named)
            return queries.append_attached, (
                *self._columns(session_id, expected, queries.history),
                refs,
                [self.blobs[r] for r in refs],
                named,
                [self.named[r] for r in named],
            )
        if len(self.ids) == 1 and self.boundary_at is None:
            one: tuple[Any, ...] = (
                session_id,
                expected,
                self.ids[0],
                self.types[0],
                self.timestamps[0],
                self.roles[0],
                self.synthetic[0],
                self.bodies[0],
            )
            if queries.history:
                one += (self.texts[0], self.said[0], self.tools[0])
            return queries.append_one, one
        return queries.append, self._columns(session_id, expected, queries.history)

    def _columns(self, session_id: str, expected: int | None, history: bool) -> tuple[Any, ...]:
        """The parameters of `append_events` (without the history's, for a schema without)."""
        columns = (
            session_id,
            expected,
            self.ids,
            self.types,
            self.timestamps,
            self.roles,
            self.synthetic,
            self.bodies,
            self.required,
            self.boundary_at,
            self.boundary_ids,
        )
        return (*columns, self.texts, self.said, self.tools) if history else columns


def refuse_boundaries(batch: list[SessionEvent], missing: set[str]) -> None:
    """Raise the `InvalidInput` `check_boundaries` gives for boundaries naming `missing`."""
    check_boundaries(batch, lambda ids: set(ids) - missing)
    raise InvalidInput(
        "a compaction event names events that are not message events of this session: "
        f"{', '.join(sorted(missing)[:5])}"
    )


def session_params(session: Session) -> tuple[Any, ...]:
    """The parameters of `put_session` for `session`, less the last (create or replace).

    Raises:
        InvalidInput: a bad session id.
    """
    return (
        check_id(session.id, "session id"),
        session.created_at,
        session.expires_at,
        dump_jsonb(dict(session.metadata)),
    )


def session_of(row: Any) -> Session:
    """The session of a row of `Queries.find_session` (id, created, expires, metadata text).

    Raises:
        CorruptData: a row turnlog cannot read.
    """
    return decode_session(row[0], row[1], row[2], row[3])


def event_of(session_id: str, row: Any) -> SessionEvent:
    """The event of a row of the events columns (seq, id, type, timestamp, synthetic, body).

    Raises:
        CorruptData: a row turnlog cannot read.
    """
    return events_from_rows(session_id, (row,))[0]


def events_of(session_id: str, rows: Iterable[Any]) -> list[SessionEvent]:
    """The events of rows of the events columns, as `event_of` reads each.

    Raises:
        CorruptData: a row turnlog cannot read.
    """
    return decode_rows(session_id, rows if isinstance(rows, list) else list(rows))


def first_line(exc: BaseException) -> str:
    """The first line of `exc`'s message (its type's name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def where(dsn: str) -> str:
    """The host, port and database of `dsn`, without the password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparsable DSN"
    return (
        f"host {info.get('host', 'localhost')}, port {info.get('port', 5432)}, "
        f"database {info.get('dbname', '(default)')}"
    )


_MAX_SLICE: Final = 2**31 - 2  # substring's int arguments; a bytea holds at most 1 GB


def read_params(session_id: str, ref: str, offset: int, length: int | None) -> dict[str, Any]:
    """The parameters of `Queries.read_attachment` for `length` bytes (None: to the end) from
    `offset` (both checked already): the chunk rows of the range, and the slice of their
    bytes joined."""
    offset = min(offset, _MAX_SLICE)
    first = offset // CHUNK_BYTES
    if length is None:
        last, n = _MAX_SLICE, _MAX_SLICE
    else:
        n = min(length, _MAX_SLICE)
        last = first - 1 if n == 0 else (offset + n - 1) // CHUNK_BYTES
    return {
        "sid": session_id,
        "ref": ref,
        "first": first,
        "last": last,
        "from": offset - first * CHUNK_BYTES + 1,
        "n": n,
    }


# -- the history index's columns ------------------------------------------------------------

MAX_HISTORY_CHARS: Final = 100_000
"""The most characters of an event's words the history index holds (its first ones): a
`tsvector` is at most 1 MB, and an append must never fail for the length of its text."""
_TOOLS_SEP: Final = "\x1f"
# Not a letter or digit, and not a mark of the no-space scripts (their character pairs, which
# `index_text` made, keep their vowel and tone marks, as the query's do).
_NOT_WORD: Final = re.compile(r"[^\w\u0e01-\u0e4e\u0e80-\u0eff\u1000-\u109f\u1780-\u17ff]+|_+")
# ASCII text: lower-cased, every byte but a letter or digit made a space, in one bytes.translate
# (a quarter of what a regex substitution costs: the append pays it for every message)
_ASCII_WORDS: Final = bytes(
    c + 32 if 65 <= c <= 90 else c if 97 <= c <= 122 or 48 <= c <= 57 else 32 for c in range(256)
)


def history_words(text: str) -> str:
    """`text` as the history index's words, separated by spaces: lower-cased, without the
    accents of Latin, Greek and Cyrillic letters, runs of the no-space scripts as their
    character pairs (as `turnlog.history.query_terms` cuts a query), at most
    `MAX_HISTORY_CHARS`. PostgreSQL's parser then sees only words and spaces, whatever the
    server's locale."""
    # here: `import turnlog` loads none of the tool search (tests/test_cold_start.py)
    from turnlog.toolsearch.words import fold, index_text

    if text.isascii():
        words = text.encode("ascii").translate(_ASCII_WORDS).decode("ascii")
    else:
        words = _NOT_WORD.sub(" ", fold(index_text(text)))
    return words[:MAX_HISTORY_CHARS].strip()


def history_terms(terms: Sequence[str]) -> list[str]:
    """A query's terms as the index holds words (`history_words`)."""
    if all(t.isascii() for t in terms):
        return list(terms)
    from turnlog.toolsearch.words import fold

    return [fold(t) for t in terms]


def history_columns(event: SessionEvent, stamp: int) -> tuple[str | None, int | None, str]:
    """The history columns of `event`, stored with timestamp `stamp` (microseconds): its words
    (None when it is not indexed), when it was said (microseconds) and its tool names."""
    text = indexed_text(event)
    if text is None:
        return None, None, ""
    words = history_words(text)
    if not words:
        return None, None, ""
    message = event.message
    assert message is not None  # indexed_text gives None for other events
    if event.timestamp is not None:
        said = to_micros(said_at(event))
    elif SAID_AT in message.metadata or SAID_AT in event.metadata:
        try:  # said_at falls back on the timestamp, which the store stamps: `stamp`
            said = to_micros(said_at(event))
        except InvalidInput:
            said = stamp
    else:
        said = stamp
    names = tool_names(event)
    return words, said, _TOOLS_SEP.join(names).replace("\x00", "") if names else ""
