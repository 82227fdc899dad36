"""`SqliteStore`: the embedded default, one SQLite file.

WAL journal, a busy timeout, and `BEGIN IMMEDIATE` for every write, so writers in several threads
or processes queue for the lock instead of failing with "database is locked". The primary key
`(session_id, seq)` guards versions; the unique index on `id` keeps ids unique across sessions.
The session row points at its newest boundary, so reading the view reads the boundary, the
events it names and what came after: never the covered history.

The history index (schema 4) is a contentless FTS5 table beside a plain table of the indexed
rows, filled by the searches (an append never touches it) and emptied of a session in its
delete's transaction: see `_HISTORY`.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

from turnlog.codec import (
    decode_rows,
    decode_session,
    dump_json,
    encode_body,
    events_from_rows,
    from_micros,
    gc_paused,
    lazy_events_from_rows,
    message_ids,
    to_micros,
)
from turnlog.durations import Duration, to_seconds
from turnlog.errors import (
    AttachmentNotFound,
    CorruptData,
    InvalidInput,
    SessionAlreadyExists,
    SessionNotFound,
    StoreError,
    VersionConflict,
)
from turnlog.events import EventType, Session, SessionEvent, TokenCount, check_id
from turnlog.history import (
    SAID_AT,
    HistoryHit,
    HistoryQuery,
    bm25_score,
    fts5_expression,
    indexed_text,
    said_at,
    snippet,
    tool_names,
)
from turnlog.lazy import LazyEvents
from turnlog.payloads import CompactionBoundary
from turnlog.rules import (
    EMPTY_TAIL,
    STARTED,
    Tail,
    check_append,
    check_one,
    needs_tail,
    tail_of,
)
from turnlog.stores.attachments import (
    DEFAULT_LIMITS,
    AttachmentLimits,
    Split,
    check_read_range,
    check_ref,
    check_refs_known,
    has_media,
    split_attachments,
)
from turnlog.stores.base import (
    Clock,
    EventFilter,
    TailMemory,
    apply_filter,
    check_batch,
    check_boundaries,
    check_cutoff,
    check_event,
    check_event_ids,
    check_limit,
    check_metadata_query,
    check_range,
    check_session,
    check_token_counts,
    metadata_matches,
    session_matches,
    stamped,
    utc_now,
)

__all__ = ["SCHEMA_VERSION", "SqliteStore"]

SCHEMA_VERSION: Final = 4

_SCHEMA: Final = """
CREATE TABLE turnlog_schema (version INTEGER NOT NULL);
CREATE TABLE turnlog_sessions (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    metadata TEXT NOT NULL,
    boundary_seq INTEGER
) WITHOUT ROWID;
CREATE INDEX turnlog_sessions_expiry ON turnlog_sessions (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE turnlog_events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    timestamp INTEGER NOT NULL,
    role TEXT,
    synthetic INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX turnlog_events_id ON turnlog_events (id);
"""
# Version 2: the bytes of large parts, once per store (`turnlog.stores.attachments`), and which
# sessions hold them. The bytes table keeps its rowid, for SQLite's incremental blob reads.
_ATTACHMENTS: Final = """
CREATE TABLE turnlog_attachments (
    ref TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE turnlog_session_attachments (
    session_id TEXT NOT NULL,
    ref TEXT NOT NULL,
    PRIMARY KEY (session_id, ref)
) WITHOUT ROWID;
CREATE INDEX turnlog_session_attachments_ref ON turnlog_session_attachments (ref);
"""

# Version 3: the history index (recall). `turnlog_history_text` is a contentless FTS5 table
# (it keeps the index, not the text) over `index_text(indexed_text(event))`, with the tool
# search's tokenizer (CJK and Thai by their character pairs); `turnlog_history` holds what a
# search filters on and returns, under the same rowid: (the session's history key << 40) + seq,
# so one session's rows are one rowid range. The event id, timestamp and body stay in
# `turnlog_events` (read for the hits only), so a row costs its rowid, said_at, role and tools.
# A session's key comes from `turnlog_history_keys` (never given twice while it lasts), so a
# session created again under a deleted one's id never meets the old rows.
#
# Version 4: the index is written by the searches, not the appends (FTS5 writes a segment at
# every commit: indexing in the append's transaction tripled its cost). The session row records
# how far its log is indexed: `history_seq`, the version indexed (every event up to it that
# `indexed_text` keeps has its rows), and `history_id`, the id of the event at that seq, which
# tells a log that is no longer the one indexed. `search_history` and `search_sessions` first
# catch the sessions they search up (`_catch_up`, in `BEGIN IMMEDIATE` transactions of at most
# 5,000 seqs each, each reading the record, so two catch-ups never index an event twice and an
# append of another process never waits for a whole backlog); when none is behind, they take
# no write lock. The key is given at a session's first catch-up. Version 3 wrote the index in
# every append: its sessions are indexed up to their newest row (`_FROM_V3`). The version
# number keeps a turnlog of version 3, which would index at append behind the record's back
# (and so twice), from opening a version-4 file.
#
# Deleting from a contentless table (SQLite 3.40: no contentless_delete) is FTS5's 'delete'
# command with the very text that was indexed; it is computed again from the stored body, which
# is exact: the indexed text is a pure function of the message's text, tool calls and tool
# results, the body is what was encoded from the very event indexed (after the attachment
# split, which leaves text alone), and the one rewrite of a body (`record_tokens`) changes only
# its token counts. A turnlog that changes `indexed_text` or `index_text` must raise the schema
# version and rebuild the index.
_HISTORY: Final = """
CREATE TABLE turnlog_history_keys (next INTEGER NOT NULL);
INSERT INTO turnlog_history_keys (next) VALUES (1);
ALTER TABLE turnlog_sessions ADD COLUMN history_key INTEGER;
CREATE UNIQUE INDEX turnlog_sessions_history_key ON turnlog_sessions (history_key);
ALTER TABLE turnlog_sessions ADD COLUMN history_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE turnlog_sessions ADD COLUMN history_id TEXT;
CREATE TABLE turnlog_history (
    rowid INTEGER PRIMARY KEY,
    said_at INTEGER NOT NULL,
    role TEXT NOT NULL,
    tools TEXT
);
CREATE VIRTUAL TABLE turnlog_history_text USING fts5(
    text, content = '',
    tokenize = "porter unicode61 remove_diacritics 2 categories 'L* N* Co M*'"
)
"""
# A version-3 file (the index written at append) gains the record, each session indexed up to
# its newest row: the rows table holds every indexed event, so what follows was not indexed.
_FROM_V3: Final = """
ALTER TABLE turnlog_sessions ADD COLUMN history_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE turnlog_sessions ADD COLUMN history_id TEXT;
UPDATE turnlog_sessions SET history_seq = coalesce((SELECT max(h.rowid) FROM turnlog_history h
    WHERE h.rowid >= history_key * 1099511627776 AND h.rowid < (history_key + 1) * 1099511627776)
    - history_key * 1099511627776, 0) WHERE history_key IS NOT NULL;
UPDATE turnlog_sessions SET history_id = (SELECT e.id FROM turnlog_events e
    WHERE e.session_id = turnlog_sessions.id AND e.seq = turnlog_sessions.history_seq)
    WHERE history_seq > 0
"""
# How far a session is indexed and how far its log goes: key, indexed seq, the id recorded at
# it, the log's version, the id of the log's event at the indexed seq (NULL: none).
_STATE: Final = (
    "s.history_key, s.history_seq, s.history_id, "
    "(SELECT max(e.seq) FROM turnlog_events e WHERE e.session_id = s.id), "
    "(SELECT e.id FROM turnlog_events e WHERE e.session_id = s.id AND e.seq = s.history_seq)"
)
_SEQ_BITS: Final = 40
_SEQ_SPAN: Final = 1 << _SEQ_BITS
_MAX_KEY: Final = (1 << (63 - _SEQ_BITS)) - 1
_TOOLS_SEP: Final = "\x1f"
_PAGE: Final = 1000  # events a catch-up or a delete reads at a time

# NULL for a message event's type: one str fewer to build per row (codec.events_from_rows
# reads a None type as MESSAGE).
_COLUMNS: Final = "seq, id, NULLIF(type, 'MESSAGE'), timestamp, synthetic, body"
_CHUNK: Final = 500
_MAX_BUSY: Final = 2_000_000  # seconds; SQLite keeps the busy timeout as int milliseconds
_NEGLIGIBLE_WAIT: Final = 0.001  # seconds of waiting for the in-process lock left uncounted
_VERSION: Final = (
    "SELECT (SELECT max(seq) FROM turnlog_events WHERE session_id = ?1), "
    "EXISTS (SELECT 1 FROM turnlog_sessions WHERE id = ?1)"
)
_LAST_ID: Final = (  # the version and the newest event's id
    "SELECT seq, id FROM turnlog_events WHERE session_id = ? ORDER BY seq DESC LIMIT 1"
)
_NEWEST: Final = (  # the newest event: its seq is the version (to check the view rules)
    "SELECT seq, type, role, synthetic, body FROM turnlog_events WHERE session_id = ? "
    "ORDER BY seq DESC LIMIT 1"
)
_BEFORE: Final = (  # the messages before a seq, newest first, as far as the rules read them
    "SELECT type, role, synthetic, body FROM turnlog_events WHERE session_id = ? AND seq < ? "
    "ORDER BY seq DESC"
)
_INSERT: Final = (
    "INSERT INTO turnlog_events (session_id, seq, id, type, timestamp, role, synthetic, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
# One event as one statement (autocommit): the first of an existing session's log, or the one
# after the row at seq ?9 (whose id is ?10 unless that is NULL). When there is no such session
# or row, the seq is NULL and the NOT NULL constraint refuses the row; the primary key refuses a
# seq taken. (A subquery in VALUES, not INSERT ... SELECT, which would read through a temp table.)
_INSERT_FIRST: Final = (
    "INSERT INTO turnlog_events (session_id, seq, id, type, timestamp, role, synthetic, body) "
    "VALUES (?1, (SELECT 1 FROM turnlog_sessions WHERE id = ?1), ?3, ?4, ?5, ?6, ?7, ?8)"
)
_INSERT_AFTER: Final = (
    "INSERT INTO turnlog_events (session_id, seq, id, type, timestamp, role, synthetic, body) "
    "VALUES (?1, (SELECT seq + 1 FROM turnlog_events WHERE session_id = ?1 AND seq = ?9 "
    "AND (?10 IS NULL OR id = ?10)), ?3, ?4, ?5, ?6, ?7, ?8)"
)

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


def check_options(
    path: str | Path, busy_timeout: Duration, synchronous: Synchronous
) -> tuple[Path, float]:
    """The path and the busy timeout in seconds, checked as `SqliteStore` documents."""
    if str(path) == ":memory:":
        raise InvalidInput("SqliteStore needs a file; use MemoryStore for an in-memory store")
    if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise InvalidInput(f"synchronous must be OFF, NORMAL, FULL or EXTRA: {synchronous!r}")
    return Path(path), to_seconds(busy_timeout, "busy_timeout", zero=True, most=_MAX_BUSY)


class SqliteStore:
    """Sessions in one SQLite file; safe across threads and processes.

    Args:
        path: the database file (created with its schema when missing); ":memory:" is refused,
            use `MemoryStore`.
        busy_timeout: how long a writer waits for the lock before giving up with `StoreError`,
            in all: waiting for other threads of this store counts against it, as waiting for
            other processes does. Seconds, or a `timedelta`; 0 gives up at once.
        synchronous: SQLite's `synchronous` setting. "NORMAL" (the default, with WAL) survives
            an application crash; a power loss may lose the last commits. "FULL" survives both.
        clock: stamps events appended without a timestamp.
        attachments: which bytes of parts are stored apart, and the size limits.

    Raises:
        InvalidInput: ":memory:"; a bad `synchronous`; a `busy_timeout` that is not a duration
            (negative, NaN, infinite, over 2,000,000 seconds, a string, ...).
        CorruptData: the file is not a SQLite database, or a database of something else.
        StoreError: it was made by a newer turnlog, or cannot be opened.
    """

    def __init__(
        self,
        path: str | Path = "turnlog.db",
        *,
        busy_timeout: Duration = 30.0,
        synchronous: Synchronous = "NORMAL",
        clock: Clock = utc_now,
        attachments: AttachmentLimits = DEFAULT_LIMITS,
    ) -> None:
        self.path, self._busy_timeout = check_options(path, busy_timeout, synchronous)
        self._limits = self.attachment_limits = attachments
        self._busy_ms = int(self._busy_timeout * 1000)
        self._synchronous = synchronous
        self._clock = clock
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._write_lock = threading.Lock()
        # session -> (version, newest event id, Tail) after this handle's last one-event append;
        # used (under the write lock) only while that event is still the newest of the log
        self._tails = TailMemory()
        self._closed = False
        self._ensure_schema()

    # -- connections ------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise StoreError(f"the store on {self.path} is closed")
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,
                cached_statements=64,
                check_same_thread=False,  # used by its own thread only; closed by close()
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
        except sqlite3.DatabaseError as exc:
            raise _translate(exc, self.path) from exc
        self._local.conn = conn
        with self._all_lock:
            self._all.append(conn)
        return conn

    def close(self) -> None:
        """Close every connection this store opened (in any thread)."""
        self._closed = True
        with self._all_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _immediate(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection in a `BEGIN IMMEDIATE` transaction, under the write lock.

        Threads of this process queue on a lock; other processes queue in SQLite's busy
        handler, which polls with sleeps and would make threads wait far longer than needed.
        Both waits together last at most `busy_timeout`: the time spent waiting for the lock is
        taken off SQLite's busy timeout for this `BEGIN`. The caller commits or rolls back; the
        lock is released on leaving.

        Raises:
            StoreError: the lock stayed taken past `busy_timeout`, or the file cannot be written.
        """
        conn = self._conn()
        started = time.monotonic()
        if not self._write_lock.acquire(timeout=self._busy_timeout):
            raise _translate(
                sqlite3.OperationalError("database is locked by another thread of this store"),
                self.path,
            )
        try:
            waited = time.monotonic() - started
            try:
                if waited < _NEGLIGIBLE_WAIT:
                    conn.execute("BEGIN IMMEDIATE")
                else:
                    left = max(0, int((self._busy_timeout - waited) * 1000))
                    conn.execute(f"PRAGMA busy_timeout = {left}")
                    try:
                        conn.execute("BEGIN IMMEDIATE")
                    finally:
                        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            except sqlite3.DatabaseError as exc:
                raise _translate(exc, self.path) from exc
            yield conn
        finally:
            self._write_lock.release()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._immediate() as conn:
            yield from self._write_locked(conn)

    def _write_locked(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        try:
            yield conn
        except sqlite3.DatabaseError as exc:
            _rollback(conn)
            raise _translate(exc, self.path) from exc
        except BaseException:
            _rollback(conn)
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            _rollback(conn)  # a failed COMMIT (a full disk) may have ended the transaction
            raise _translate(exc, self.path) from exc

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise _translate(exc, self.path) from exc

    def _ensure_schema(self) -> None:
        with self._read() as conn:
            if self._schema_state(conn) == SCHEMA_VERSION:
                return
        with self._write() as conn:
            found = self._schema_state(conn)
            if found == 0:
                _run_script(conn, _SCHEMA)
            if found < 2:  # a version 1 file gains the attachment tables
                _run_script(conn, _ATTACHMENTS)
            if not _has_table(conn, "turnlog_history"):
                # a version 2 file gains the history index, empty: each session is indexed by
                # its first search
                _run_script(conn, _HISTORY)
            elif not _has_column(conn, "turnlog_sessions", "history_seq"):
                _run_script(conn, _FROM_V3)  # a version 3 file: indexed at append
            if found < SCHEMA_VERSION:
                conn.execute("INSERT INTO turnlog_schema (version) VALUES (?)", (SCHEMA_VERSION,))

    def _schema_state(self, conn: sqlite3.Connection) -> int:
        """The file's schema version; 0 for an empty file."""
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        if "turnlog_schema" not in tables:
            if tables:
                raise CorruptData(
                    f"{self.path} is a SQLite database of something else (it holds the "
                    f"tables {', '.join(sorted(tables)[:5])}): point turnlog at its own file"
                )
            return 0
        row = conn.execute("SELECT max(version) FROM turnlog_schema").fetchone()
        found = row[0] if row else None
        if found is None or not isinstance(found, int):
            raise CorruptData(f"{self.path}: the turnlog schema version is missing or damaged")
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {found}, made by a newer turnlog than this "
                f"one (which knows up to {SCHEMA_VERSION}): upgrade turnlog"
            )
        return found

    # -- sessions ---------------------------------------------------------------------------

    def create_session(self, session: Session) -> None:
        check_session(session)
        with self._write() as conn:
            try:
                conn.execute(
                    "INSERT INTO turnlog_sessions (id, created_at, expires_at, metadata) "
                    "VALUES (?, ?, ?, ?)",
                    _session_row(session),
                )
            except sqlite3.IntegrityError:
                raise SessionAlreadyExists(session.id) from None

    def save_session(self, session: Session) -> None:
        check_session(session)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO turnlog_sessions (id, created_at, expires_at, metadata) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                "expires_at = excluded.expires_at, metadata = excluded.metadata",
                _session_row(session),
            )

    def find_session(self, session_id: str) -> Session | None:
        check_id(session_id, "session id")
        with self._read() as conn:
            row = conn.execute(
                "SELECT id, created_at, expires_at, metadata FROM turnlog_sessions WHERE id = ?",
                (session_id,),
            ).fetchone()
        return None if row is None else _session(row)

    def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        limit = check_limit(limit)
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, created_at, expires_at, metadata FROM turnlog_sessions "
                "ORDER BY created_at DESC, id DESC LIMIT ?",
                (-1 if limit is None else limit,),
            ).fetchall()
        return [_session(r) for r in rows]

    def delete_session(self, session_id: str) -> bool:
        check_id(session_id, "session id")
        with self._write() as conn:
            self._tails.forget(session_id)
            self._drop_attachments(conn, "id = ?", (session_id,))
            _drop_history(conn, "id = ?", (session_id,))
            conn.execute("DELETE FROM turnlog_events WHERE session_id = ?", (session_id,))
            cur = conn.execute("DELETE FROM turnlog_sessions WHERE id = ?", (session_id,))
            return cur.rowcount > 0

    def delete_expired(self, before: datetime) -> int:
        cutoff = max(min(to_micros(check_cutoff(before)), 2**63 - 1), -(2**63))
        with self._write() as conn:
            self._drop_attachments(conn, "expires_at IS NOT NULL AND expires_at <= ?", (cutoff,))
            _drop_history(conn, "expires_at IS NOT NULL AND expires_at <= ?", (cutoff,))
            conn.execute(
                "DELETE FROM turnlog_events WHERE session_id IN (SELECT id FROM turnlog_sessions "
                "WHERE expires_at IS NOT NULL AND expires_at <= ?)",
                (cutoff,),
            )
            cur = conn.execute(
                "DELETE FROM turnlog_sessions WHERE expires_at IS NOT NULL AND expires_at <= ?",
                (cutoff,),
            )
            return cur.rowcount

    def find_by_metadata(self, name: str, value: str | int | bool) -> list[Session]:
        """Any metadata key can be searched; the lookup scans the sessions table."""
        if not check_metadata_query(name, value):
            return []
        wanted: str | int | None
        if isinstance(value, bool):
            type_name, wanted = ("true" if value else "false"), None
        elif isinstance(value, int):
            # SQLite's JSON functions read an integer beyond 64 bits as a float: match the
            # type here, the value in Python below
            type_name, wanted = "integer", (value if -(2**63) <= value < 2**63 else None)
        else:
            type_name, wanted = "text", value
        with self._read() as conn:
            rows = conn.execute(
                "SELECT s.id, s.created_at, s.expires_at, s.metadata FROM turnlog_sessions s "
                "WHERE EXISTS (SELECT 1 FROM json_each(s.metadata) j WHERE j.key = ? "
                "AND j.type = ? AND (? IS NULL OR j.value = ?)) ORDER BY s.created_at, s.id",
                (name, type_name, wanted, wanted),
            ).fetchall()
        found = [_session(r) for r in rows]
        return [s for s in found if metadata_matches(s.metadata, name, value)]

    # -- events -----------------------------------------------------------------------------

    def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        expected_version: int,
        *,
        check_rules: bool = True,
    ) -> int:
        if isinstance(events, (list, tuple)) and len(events) == 1:
            one = events[0]
            if (
                isinstance(one, SessionEvent)
                and one.session_id == session_id  # validated when the event was built
                and one.type is not EventType.COMPACTION
                and type(expected_version) is int
                and expected_version >= 0
            ):
                version = self._append_one(session_id, one, expected_version, check_rules)
                if version is not None:
                    return version
        batch = check_batch(session_id, events, expected_version)
        return self._append(
            session_id, batch, expected_version, want_copies=False, check_rules=check_rules
        )[0]

    def _append_one(
        self, session_id: str, event: SessionEvent, expected: int, check_rules: bool
    ) -> int | None:
        """The commonest append, one message at its expected version, with nothing around it.

        When the tail is known without reading the log (this handle's own last append to the
        session, or no tail needed), it is one statement in autocommit mode: an insert
        conditioned on the row at seq `expected` (and on its id, the fence of the handle's
        memory); the primary key refuses it when the log is past `expected`. Otherwise the
        newest row is read first, in one `BEGIN IMMEDIATE` transaction with the insert.

        Returns the new version, or None when it wrote nothing because the general path has to
        decide (another version, an unknown session, an id already stored).
        """
        m = event.message
        synthetic = event.synthetic
        if check_rules and synthetic:
            return None  # the general path refuses it (or skips it when it is stored)
        if m is not None and (m.parts or m.tool_results) and has_media(m):
            return None  # the general path stores its bytes
        role = None if m is None else m.role
        tail_needed = check_rules and role is not None and role != "system"
        tail: Tail | None = None
        fence: str | None = None
        if tail_needed:
            # the tail without reading: an empty log's, or this handle's memory of the log
            known = (expected, None, EMPTY_TAIL) if expected == 0 else self._tails.get(session_id)
            if known is not None and known[0] == expected:
                try:
                    tail = check_one(known[2], event)
                except InvalidInput:
                    return None  # the general path tells a retry from a broken rule
                fence = known[1]
        timestamp = event.timestamp
        if timestamp is not None:
            micros = to_micros(timestamp)
        elif self._clock is utc_now:
            micros = time.time_ns() // 1000  # utc_now()'s clock, without building a datetime
        else:
            micros = to_micros(self._clock())
        seq = expected + 1
        row = (session_id, seq, event.id, event.type.name, micros, role, 1 if synthetic else 0,
               encode_body(event))  # fmt: skip
        if tail_needed and tail is None:
            return self._append_read(session_id, event, expected, row)
        after = None if tail is None else (session_id, seq, event.id, tail)
        if expected == 0:
            written = self._write_one(_INSERT_FIRST, row, after)
        else:
            written = self._write_one(_INSERT_AFTER, (*row, expected, fence), after)
        if written:
            return seq
        if fence is None:
            return None  # not at `expected`, no such session, or an id already stored
        self._tails.forget(session_id)  # perhaps another handle wrote: read the log's end
        return self._append_read(session_id, event, expected, row)

    def _write_one(
        self, sql: str, params: tuple[Any, ...], tail: tuple[str, int, str, Tail] | None
    ) -> bool:
        """Run one insert in autocommit mode, under the write lock: whether it wrote its row
        (False: a constraint refused it). When it did, `tail` (session, version, newest id,
        `Tail`), if given, is remembered before the lock is released. As in `_immediate`, the
        time spent waiting for the lock is taken off SQLite's busy timeout."""
        conn = self._conn()
        lock = self._write_lock
        left = None
        if not lock.acquire(blocking=False):  # taken: wait, and count the wait
            started = time.monotonic()
            if not lock.acquire(timeout=self._busy_timeout):
                raise _translate(
                    sqlite3.OperationalError("database is locked by another thread of this store"),
                    self.path,
                )
            waited = time.monotonic() - started
            if waited >= _NEGLIGIBLE_WAIT:
                left = max(0, int((self._busy_timeout - waited) * 1000))
        try:
            if left is not None:
                conn.execute(f"PRAGMA busy_timeout = {left}")
            try:
                conn.execute(sql, params)
            except sqlite3.IntegrityError:
                return False
            finally:
                if left is not None:
                    conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            if tail is not None:
                self._tails.remember(*tail)
            return True
        except sqlite3.DatabaseError as exc:
            _rollback(conn)  # nothing to end in autocommit mode, unless SQLite left it open
            raise _translate(exc, self.path) from exc
        finally:
            lock.release()

    def _append_read(
        self, session_id: str, event: SessionEvent, expected: int, row: tuple[Any, ...]
    ) -> int | None:
        """`_append_one` when the tail has to be read: the newest row, then the insert."""
        with self._immediate() as conn:
            done = False
            try:
                last = conn.execute(_LAST_ID, (session_id,)).fetchone()
                if last is None or last[0] != expected:
                    return None
                try:
                    tail = check_one(self._tail_at(conn, session_id, last), event)
                except InvalidInput:
                    return None  # the general path tells a retry from a broken rule
                try:
                    conn.execute(_INSERT, row)
                except sqlite3.IntegrityError:
                    return None
                conn.execute("COMMIT")
                done = True
                self._tails.remember(session_id, expected + 1, event.id, tail)
                return expected + 1
            except sqlite3.DatabaseError as exc:
                raise _translate(exc, self.path) from exc
            finally:
                if not done:
                    _rollback(conn)

    def append_event(self, event: SessionEvent, *, check_rules: bool = True) -> SessionEvent:
        check_batch(check_event(event).session_id, [event], 0)
        known = self._tails.get(event.session_id)
        if known is not None and event.type is not EventType.COMPACTION:
            # This handle appended to the session last: try the one-statement append at the
            # version it remembers (the insert is conditioned on it, so a log that moved on, or
            # an id stored already, writes nothing and takes the general path below).
            timed = event if event.timestamp is not None else stamped(event, 0, self._clock())
            seq = self._append_one(event.session_id, timed, known[0], check_rules)
            if seq is not None:
                return stamped(timed, seq, timed.timestamp or self._clock())
        stored = self._append(
            event.session_id, [event], None, want_copies=True, check_rules=check_rules
        )[1]
        if stored:
            return stored[0]
        found = self._event_by_id(event.session_id, event.id)  # it was stored before
        if found is None:  # pragma: no cover - the write lock makes this impossible
            raise StoreError(f"event {event.id!r} vanished while it was being appended")
        return found

    def _append(
        self,
        session_id: str,
        batch: list[SessionEvent],
        expected: int | None,
        *,
        want_copies: bool,
        check_rules: bool,
    ) -> tuple[int, list[SessionEvent]]:
        """Append under the write lock; `expected=None` appends at the end.

        The fast path is one version read and the inserts. Ids already stored are looked up
        only when the version does not match or an insert hits the unique id index.
        """
        split = None
        for e in batch:  # the split only when an event has media: a text batch pays one test
            m = e.message
            if m is not None and (m.parts or m.tool_results) and has_media(m):
                split = split_attachments(batch, self._limits)
                batch = split.events
                break
        bodies = [encode_body(e) for e in batch]
        now = self._clock()
        with self._write() as conn:
            version = self._locked_version(conn, session_id)
            if not batch:
                return version, []
            if expected is not None and version != expected:
                batch, bodies = self._drop_stored(conn, session_id, batch, bodies)
                if not batch:
                    return version, []
                raise VersionConflict(session_id, expected, version)
            if any(e.type == EventType.COMPACTION for e in batch):
                check_boundaries(batch, lambda ids: self._message_ids(conn, session_id, ids))
            after: Tail | None = None  # the tail after the batch, when the rules read it
            if check_rules:
                try:
                    after = self._check_rules(conn, session_id, batch)
                except InvalidInput:  # a retry: the rules apply to the part not stored yet
                    fresh, fresh_bodies = self._drop_stored(conn, session_id, batch, bodies)
                    if len(fresh) == len(batch):
                        raise
                    if not fresh:
                        return version, []
                    batch, bodies = fresh, fresh_bodies
                    after = self._check_rules(conn, session_id, batch)
            timestamps = [now if e.timestamp is None else e.timestamp for e in batch]
            if not self._insert(conn, session_id, version, batch, timestamps, bodies):
                after = None
                batch, bodies = self._drop_stored(conn, session_id, batch, bodies)
                if not batch:
                    return version, []
                if check_rules:  # the retried part alone must keep the rules
                    self._check_rules(conn, session_id, batch)
                timestamps = [now if e.timestamp is None else e.timestamp for e in batch]
                if not self._insert(conn, session_id, version, batch, timestamps, bodies):
                    # pragma: no cover - impossible under the write lock
                    raise VersionConflict(
                        session_id, version, self._locked_version(conn, session_id)
                    )
            if split is not None:
                self._store_attachments(conn, session_id, split)
            boundaries = [
                seq
                for seq, e in enumerate(batch, start=version + 1)
                if e.type == EventType.COMPACTION
            ]
            if boundaries:
                conn.execute(
                    "UPDATE turnlog_sessions SET boundary_seq = ? WHERE id = ?",
                    (boundaries[-1], session_id),
                )
            if after is not None and not boundaries:
                # what this handle's next one-event append checks against; only a guess, fenced
                # by the newest id (a write that did not commit leaves no such row: it misses)
                self._tails.remember(session_id, version + len(batch), batch[-1].id, after)
            if not want_copies:
                return version + len(batch), []
            return version + len(batch), [
                stamped(e, seq, ts)
                for seq, (e, ts) in enumerate(
                    zip(batch, timestamps, strict=True), start=version + 1
                )
            ]

    def _store_attachments(self, conn: sqlite3.Connection, session_id: str, split: Split) -> None:
        """Store the bytes of `split` and link its references to the session, in the append's
        transaction; refuse references the session does not hold."""
        if split.named:
            held = dict(
                _in_chunks(
                    conn,
                    "SELECT a.ref, a.size FROM turnlog_session_attachments s JOIN "
                    "turnlog_attachments a ON a.ref = s.ref WHERE s.session_id = ? AND s.ref IN",
                    (session_id,),
                    list(split.named),
                )
            )
            held.update((ref, len(data)) for ref, data in split.blobs.items())
            check_refs_known(session_id, split.named, held)
        for ref, data in split.blobs.items():
            conn.execute(
                "INSERT INTO turnlog_attachments (ref, size, data) VALUES (?, ?, ?) "
                "ON CONFLICT (ref) DO NOTHING",
                (ref, len(data), data),
            )
        conn.executemany(
            "INSERT INTO turnlog_session_attachments (session_id, ref) VALUES (?, ?) "
            "ON CONFLICT DO NOTHING",
            [(session_id, ref) for ref in split.blobs],
        )

    def _drop_attachments(
        self, conn: sqlite3.Connection, where: str, args: tuple[Any, ...]
    ) -> None:
        """Unlink the attachments of the sessions `where` picks (an SQL condition on the
        sessions table's `id`), and delete the bytes no other session holds."""
        refs = [
            r[0]
            for r in conn.execute(
                "DELETE FROM turnlog_session_attachments WHERE session_id IN "
                f"(SELECT id FROM turnlog_sessions WHERE {where}) RETURNING ref",
                args,
            )
        ]
        for i in range(0, len(refs), _CHUNK):
            chunk = sorted(set(refs[i : i + _CHUNK]))
            conn.execute(
                f"DELETE FROM turnlog_attachments WHERE ref IN ({','.join('?' * len(chunk))}) "
                "AND NOT EXISTS (SELECT 1 FROM turnlog_session_attachments s "
                "WHERE s.ref = turnlog_attachments.ref)",
                chunk,
            )

    def read_attachment(
        self, session_id: str, ref: str, offset: int = 0, length: int | None = None
    ) -> bytes:
        check_id(session_id, "session id")
        check_ref(ref)
        offset, length = check_read_range(offset, length)
        with self._read() as conn:
            row = conn.execute(
                "SELECT a.rowid, a.size FROM turnlog_session_attachments s JOIN "
                "turnlog_attachments a ON a.ref = s.ref WHERE s.session_id = ? AND s.ref = ?",
                (session_id, ref),
            ).fetchone()
            if row is None:
                self._check_session(conn, session_id)
                raise AttachmentNotFound(session_id, ref)
            rowid, size = row
            if offset >= size or length == 0:
                return b""
            if offset == 0 and (length is None or length >= size):
                (data,) = conn.execute(
                    "SELECT data FROM turnlog_attachments WHERE rowid = ?", (rowid,)
                ).fetchone()
                return bytes(data)
            with conn.blobopen("turnlog_attachments", "data", rowid, readonly=True) as blob:
                blob.seek(offset)
                return blob.read(-1 if length is None else length)

    def _insert(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        version: int,
        batch: list[SessionEvent],
        timestamps: list[datetime],
        bodies: list[bytes],
    ) -> bool:
        """Insert the rows from seq version+1; False (nothing inserted) when an id is taken."""
        rows = [
            (
                session_id,
                seq,
                e.id,
                e.type.name,
                to_micros(ts),
                e.role,
                int(e.synthetic),
                body,
            )
            for seq, (e, ts, body) in enumerate(
                zip(batch, timestamps, bodies, strict=True), start=version + 1
            )
        ]
        if len(rows) == 1:
            try:
                conn.execute(_INSERT, rows[0])
            except sqlite3.IntegrityError:
                return False
            return True
        conn.execute("SAVEPOINT turnlog_batch")
        try:
            conn.executemany(_INSERT, rows)
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK TO turnlog_batch")
            conn.execute("RELEASE turnlog_batch")
            return False
        conn.execute("RELEASE turnlog_batch")
        return True

    def _drop_stored(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        batch: list[SessionEvent],
        bodies: list[bytes],
    ) -> tuple[list[SessionEvent], list[bytes]]:
        """The events of `batch` not stored yet (a retry skips what landed).

        Raises:
            InvalidInput: an id belongs to another session.
        """
        taken = self._owners(conn, [e.id for e in batch])
        foreign = [i for i, owner in taken.items() if owner != session_id]
        if foreign:
            raise InvalidInput(
                f"event id {foreign[0]!r} belongs to another session; ids are unique across "
                "sessions"
            )
        keep = [i for i, e in enumerate(batch) if e.id not in taken]
        return [batch[i] for i in keep], [bodies[i] for i in keep]

    def events(self, session_id: str, flt: EventFilter | None = None) -> list[SessionEvent]:
        check_id(session_id, "session id")
        flt = EventFilter.all() if flt is None else flt
        if flt.active_view:
            return apply_filter(self.view(session_id), flt)
        with self._read() as conn:
            self._check_session(conn, session_id)
            if flt.event_types is not None and flt.last_n is None:
                names = sorted(t.name for t in flt.event_types)
                rows = conn.execute(
                    f"SELECT {_COLUMNS} FROM turnlog_events WHERE session_id = ? AND type IN "
                    f"({','.join('?' * len(names))}) ORDER BY seq",
                    (session_id, *names),
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT {_COLUMNS} FROM turnlog_events WHERE session_id = ? ORDER BY seq",
                    (session_id,),
                ).fetchall()
        return apply_filter(decode_rows(session_id, rows), flt)

    def record_tokens(self, session_id: str, counts: Mapping[str, TokenCount]) -> int:
        check_id(session_id, "session id")
        counts = check_token_counts(counts)
        written = 0
        with self._write() as conn:
            self._check_session(conn, session_id)
            rows = self._by_ids(conn, session_id, list(counts))
            for row in rows:
                event = _event(session_id, row)
                if event.message is None:
                    continue
                body = encode_body(event.with_tokens(counts[event.id]))
                conn.execute(
                    "UPDATE turnlog_events SET body = ? WHERE session_id = ? AND seq = ?",
                    (body, session_id, event.seq),
                )
                written += 1
        return written

    def events_by_id(self, session_id: str, ids: Sequence[str]) -> list[SessionEvent]:
        wanted = check_event_ids(ids)
        check_id(session_id, "session id")
        with self._read() as conn:
            self._check_session(conn, session_id)
            rows = self._by_ids(conn, session_id, wanted)
        return sorted(decode_rows(session_id, rows), key=lambda e: e.seq or 0)

    def search_history(self, session_id: str, query: HistoryQuery) -> list[HistoryHit]:
        """The best `query.k` message events of the session for `query`, by the history index:
        one FTS5 match on the session's rowid range, filtered in SQL, bodies read for the hits
        only. The session's events not indexed yet are indexed first (`_catch_up`, write
        transactions of at most 5,000 seqs); when there are none, the search takes no write
        lock.

        Raises:
            SessionNotFound: no such session.
            StoreError: the catch-up waited for the write lock past `busy_timeout`.
        """
        check_id(session_id, "session id")
        expression = fts5_expression(query.terms)
        with self._read() as conn:
            state = conn.execute(
                f"SELECT {_STATE} FROM turnlog_sessions s WHERE s.id = ?", (session_id,)
            ).fetchone()
            if state is None:
                raise SessionNotFound(session_id)
            if not expression:
                return []
            if not _behind(state):
                return self._search_one(conn, expression, query, state[0])
        more = True
        while more:
            with self._write() as conn:
                more = _catch_up(conn, session_id)
        with self._read() as conn:
            row = conn.execute(
                "SELECT history_key FROM turnlog_sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:  # deleted since
                raise SessionNotFound(session_id)
            return self._search_one(conn, expression, query, row[0])

    def _search_one(
        self, conn: sqlite3.Connection, expression: str, query: HistoryQuery, key: int | None
    ) -> list[HistoryHit]:
        if key is None:  # never indexed: nothing to find (None would mean every session)
            return []
        return _hits(conn, _matches(conn, expression, query, key, None), query)

    def search_sessions(
        self,
        query: HistoryQuery,
        *,
        sessions: Sequence[str] | None = None,
        metadata: Mapping[str, str | int | bool] | None = None,
    ) -> list[HistoryHit]:
        """The best `query.k` message events of the chosen sessions (all, or those of
        `sessions` that exist; either kept to those whose metadata matches `metadata`): one
        match over the whole index, or one per named session. The chosen sessions that are
        behind (one query finds them) are caught up first (write transactions of at most
        5,000 seqs); when none is, no write lock is taken."""
        expression = fts5_expression(query.terms)
        if not expression:
            return []
        named = (
            None
            if sessions is None
            else [check_id(sid, "session id") for sid in dict.fromkeys(sessions)]
        )
        behind = (
            "SELECT s.id, s.created_at, s.expires_at, s.metadata FROM turnlog_sessions s WHERE "
            "(coalesce((SELECT max(e.seq) FROM turnlog_events e WHERE e.session_id = s.id), 0) "
            "> s.history_seq OR (s.history_seq > 0 AND (SELECT e.id FROM turnlog_events e "
            "WHERE e.session_id = s.id AND e.seq = s.history_seq) IS NOT s.history_id))"
        )
        with self._read() as conn:
            if named is None:
                late = conn.execute(behind).fetchall()
            else:
                late = _in_chunks(conn, behind + " AND s.id IN", (), named)
        late = [r[0] for r in late if session_matches(_session(r), metadata)]
        for sid in late:
            more = True
            while more:
                with self._write() as conn:
                    more = _catch_up(conn, sid)
        with self._read() as conn:
            if named is None:
                return _hits(conn, _matches(conn, expression, query, None, metadata), query)
            found: list[_Match] = []
            for sid, key, created, expires, meta in _in_chunks(
                conn,
                "SELECT id, history_key, created_at, expires_at, metadata FROM turnlog_sessions "
                "WHERE history_key IS NOT NULL AND id IN",
                (),
                named,
            ):
                if session_matches(_session((sid, created, expires, meta)), metadata):
                    found += _matches(conn, expression, query, key, None)
            found.sort(key=lambda m: (-m[0], m[1] & (_SEQ_SPAN - 1), m[1]))
            return _hits(conn, found[: query.k], query)

    def events_after(self, session_id: str, after: int, limit: int) -> list[SessionEvent]:
        check_id(session_id, "session id")
        after, limit = check_range(after, limit)
        with self._read() as conn:
            self._check_session(conn, session_id)
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM turnlog_events WHERE session_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (session_id, after, limit),
            ).fetchall()
        return decode_rows(session_id, rows)

    def version(self, session_id: str) -> int:
        check_id(session_id, "session id")
        with self._read() as conn:
            return self._locked_version(conn, session_id)

    def view_lazy(self, session_id: str) -> LazyEvents:
        check_id(session_id, "session id")
        with gc_paused(), self._read() as conn:  # a long view makes many objects: see _events
            boundary_seq, rows = self._view_rows(conn, session_id)
            if boundary_seq is None:
                return lazy_events_from_rows(session_id, rows)
            # a compacted view is short: read whole, in the same read
            return LazyEvents.of(self._bounded_view(conn, session_id, boundary_seq))

    def view(self, session_id: str) -> list[SessionEvent]:
        check_id(session_id, "session id")
        with self._read() as conn:
            boundary_seq, rows = self._view_rows(conn, session_id)
            if boundary_seq is None:
                return decode_rows(session_id, rows)
            return self._bounded_view(conn, session_id, boundary_seq)

    # -- helpers ----------------------------------------------------------------------------

    def _bounded_view(
        self, conn: sqlite3.Connection, session_id: str, boundary_seq: int
    ) -> list[SessionEvent]:
        """The view of a session whose newest boundary is at `boundary_seq`, read on `conn`.

        Raises:
            CorruptData: the boundary is missing or damaged.
        """
        brow = conn.execute(
            f"SELECT {_COLUMNS} FROM turnlog_events WHERE session_id = ? AND seq = ?",
            (session_id, boundary_seq),
        ).fetchone()
        if brow is None:
            raise CorruptData(
                f"session {session_id!r} points at boundary seq {boundary_seq}, which is "
                "missing: the database is damaged"
            )
        boundary_event = _event(session_id, brow)
        boundary = CompactionBoundary.from_event(boundary_event)
        named = self._by_ids(conn, session_id, list(boundary.pinned_event_ids))
        named += self._by_ids(conn, session_id, list(boundary.preserved_event_ids))
        after = conn.execute(
            f"SELECT {_COLUMNS} FROM turnlog_events WHERE session_id = ? AND seq > ? "
            "AND type = 'MESSAGE' ORDER BY seq",
            (session_id, boundary_seq),
        ).fetchall()
        before = sorted(
            {
                e.id: e
                for e in (_event(session_id, r) for r in named)
                if (e.seq or 0) < boundary_seq
            }.values(),
            key=lambda e: e.seq or 0,
        )
        return CompactionBoundary.project(
            [*before, boundary_event, *decode_rows(session_id, after)]
        )

    def _view_rows(self, conn: sqlite3.Connection, session_id: str) -> tuple[int | None, list[Any]]:
        """(the session's boundary seq, and the rows of its view when it has none: its
        messages; no rows are read when it has one).

        Raises:
            SessionNotFound: no such session.
        """
        row = conn.execute(
            "SELECT boundary_seq FROM turnlog_sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        if row[0] is not None:
            return row[0], []
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM turnlog_events WHERE session_id = ? "
            "AND type = 'MESSAGE' ORDER BY seq",
            (session_id,),
        ).fetchall()
        return None, rows

    def _locked_version(self, conn: sqlite3.Connection, session_id: str) -> int:
        row = conn.execute(
            _VERSION,
            (session_id,),
        ).fetchone()
        if not row[1]:
            raise SessionNotFound(session_id)
        return int(row[0] or 0)

    def _check_rules(
        self, conn: sqlite3.Connection, session_id: str, batch: list[SessionEvent]
    ) -> Tail | None:
        """Raise `InvalidInput` unless appending `batch` keeps the view rules.

        Returns:
            The log's tail after the batch, when it was read (None when the batch needed no
            tail: system messages, compactions and events of your own types).
        """
        if not needs_tail(batch):
            check_append(EMPTY_TAIL, batch)
            return None
        tail = self._tail(conn, session_id, conn.execute(_NEWEST, (session_id,)).fetchone())
        return check_append(tail, batch)

    def _tail_at(self, conn: sqlite3.Connection, session_id: str, last: Any) -> Tail:
        """The log's `Tail`, from `last` (a `_LAST_ID` row: the newest seq and event id; None
        for an empty log): the one this handle remembers from its own last append when that
        event is still the newest, else read from the log."""
        if last is None:
            return EMPTY_TAIL
        known = self._tails.get(session_id)
        if known is not None and known[0] == last[0] and known[1] == last[1]:
            return known[2]
        return self._tail(conn, session_id, conn.execute(_NEWEST, (session_id,)).fetchone())

    def _tail(self, conn: sqlite3.Connection, session_id: str, last: Any) -> Tail:
        """The log's `Tail`, from its newest row `last` (a `_NEWEST` row, None for an empty
        log) back as far as needed."""
        if last is None:
            return EMPTY_TAIL
        if last[1] == "MESSAGE" and not last[3]:  # the commonest cases: no walk back
            if last[2] == "user":
                return STARTED
            if last[2] == "assistant":
                return Tail(tuple(message_ids(last[4])), True)

        def rows() -> Generator[tuple[str, list[str]]]:
            if last[1] == "MESSAGE" and not last[3] and last[2] != "system":
                yield last[2], message_ids(last[4])
            cur = conn.execute(_BEFORE, (session_id, last[0]))
            try:
                for kind, role, synthetic, body in cur:
                    if kind == "MESSAGE" and not synthetic and role != "system":
                        yield role, ([] if role == "user" else message_ids(body))
            finally:
                cur.close()

        walk = rows()
        try:
            return tail_of(walk)
        finally:
            walk.close()

    def _check_session(self, conn: sqlite3.Connection, session_id: str) -> None:
        if conn.execute("SELECT 1 FROM turnlog_sessions WHERE id = ?", (session_id,)).fetchone():
            return
        raise SessionNotFound(session_id)

    def _owners(self, conn: sqlite3.Connection, ids: list[str]) -> dict[str, str]:
        owners: dict[str, str] = {}
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i : i + _CHUNK]
            owners.update(
                conn.execute(
                    "SELECT id, session_id FROM turnlog_events WHERE id IN "
                    f"({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            )
        return owners

    def _by_ids(self, conn: sqlite3.Connection, session_id: str, ids: list[str]) -> list[Any]:
        rows: list[Any] = []
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i : i + _CHUNK]
            rows += conn.execute(
                f"SELECT {_COLUMNS} FROM turnlog_events WHERE id IN "
                f"({','.join('?' * len(chunk))}) AND +session_id = ?",  # + : use the id index
                (*chunk, session_id),
            ).fetchall()
        return rows

    def _message_ids(self, conn: sqlite3.Connection, session_id: str, ids: list[str]) -> set[str]:
        return {r[1] for r in self._by_ids(conn, session_id, ids) if r[2] is None}  # a MESSAGE

    def _event_by_id(self, session_id: str, event_id: str) -> SessionEvent | None:
        with self._read() as conn:
            rows = self._by_ids(conn, session_id, [event_id])
        return _event(session_id, rows[0]) if rows else None


_Match = tuple[float, int]  # score, rowid
_words: Any = None  # turnlog.toolsearch.words.index_text, loaded on the first use


def _index_text(text: str) -> str:
    global _words
    if _words is None:  # here: `import turnlog` loads none of the tool search
        from turnlog.toolsearch.words import index_text

        _words = index_text
    result: str = _words(text)
    return result


def _index_row(event: SessionEvent, micros: int) -> tuple[int, str, str | None, str] | None:
    """The history row of `event`, stored with the timestamp `micros`: (said_at micros, role,
    tool names or None, the text to index); None for an event the index leaves out."""
    text = indexed_text(event)
    message = event.message
    if text is None or message is None:
        return None
    said = micros
    if SAID_AT in message.metadata or SAID_AT in event.metadata:
        try:
            said = to_micros(said_at(event))
        except InvalidInput:  # no timestamp yet, no date to read: said when stored
            said = micros
    tools = tool_names(event)
    return said, message.role, _TOOLS_SEP.join(tools) if tools else None, _index_text(text)


def _add_keyed(
    conn: sqlite3.Connection, key: int, rows: list[tuple[int, tuple[int, str, str | None, str]]]
) -> None:
    low = key * _SEQ_SPAN
    conn.executemany(
        "INSERT INTO turnlog_history (rowid, said_at, role, tools) VALUES (?, ?, ?, ?)",
        [(low + seq, said, role, tools) for seq, (said, role, tools, _) in rows],
    )
    conn.executemany(
        "INSERT INTO turnlog_history_text (rowid, text) VALUES (?, ?)",
        [(low + seq, text) for seq, (_, _, _, text) in rows],
    )


def _next_key(conn: sqlite3.Connection) -> int:
    """A history key no session holds, for a session being created: the next of the counter
    (never given before), or once the counter is spent (8 million sessions), the lowest free."""
    (key,) = conn.execute(
        "UPDATE turnlog_history_keys SET next = next + 1 RETURNING next - 1"
    ).fetchone()
    if key <= _MAX_KEY:
        return int(key)
    row = conn.execute(
        "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM turnlog_sessions WHERE history_key = 1) "
        "THEN 1 ELSE (SELECT min(s.history_key) + 1 FROM turnlog_sessions s WHERE NOT EXISTS "
        "(SELECT 1 FROM turnlog_sessions t WHERE t.history_key = s.history_key + 1)) END"
    ).fetchone()
    if row[0] is None or row[0] > _MAX_KEY:  # pragma: no cover - 8 million sessions at once
        raise StoreError("the history index holds as many sessions as it can: delete some")
    return int(row[0])


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is not None


def _has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    return any(r[1] == column for r in conn.execute(f"PRAGMA table_info({table})"))


def _behind(state: Any) -> bool:
    """Whether a session whose `_STATE` columns are `state` has events its index lacks (or a
    log that is no longer the one indexed)."""
    _key, seq, last_id, top, at = state
    return bool((top or 0) > seq or (seq > 0 and at != last_id))


_CATCH_UP_SPAN: Final = 5000
"""How many seqs of a session one catch-up transaction indexes, at most."""


def _catch_up(conn: sqlite3.Connection, session_id: str) -> bool:
    """Index the session's next events after its indexed version (at most `_CATCH_UP_SPAN`
    seqs of them), and advance its record, in the caller's write transaction (whose `BEGIN
    IMMEDIATE` makes the record read here the latest: no event is indexed twice). Only the
    bodies of message events not synthetic are read. Returns whether more are left: a long
    backlog is indexed in several transactions, so that no append of another process waits
    for the whole of it (about 0.4 s a transaction here)."""
    state = conn.execute(
        f"SELECT {_STATE} FROM turnlog_sessions s WHERE s.id = ?", (session_id,)
    ).fetchone()
    if state is None or not _behind(state):
        return False  # deleted, or caught up by another search meanwhile
    key, seq, last_id, top, at = state
    seq, top = int(seq), int(top or 0)
    if seq > 0 and at != last_id:
        # the log is not the one indexed (the store never does this: a file changed beneath
        # it). The old text cannot be told from the new bodies, so FTS5 cannot delete it row by
        # row: the index starts again, every session caught up by its next search
        conn.execute(
            "INSERT INTO turnlog_history_text (turnlog_history_text) VALUES ('delete-all')"
        )
        conn.execute("DELETE FROM turnlog_history")
        conn.execute("UPDATE turnlog_sessions SET history_seq = 0, history_id = NULL")
        seq = 0
    top = top or 0
    if top <= seq:
        return False
    end = min(top, seq + _CATCH_UP_SPAN)
    if key is None:
        key = _next_key(conn)
        conn.execute("UPDATE turnlog_sessions SET history_key = ? WHERE id = ?", (key, session_id))
    after = seq
    while True:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM turnlog_events WHERE session_id = ? AND seq > ? "
            "AND seq <= ? AND type = 'MESSAGE' AND synthetic = 0 ORDER BY seq LIMIT ?",
            (session_id, after, end, _PAGE),
        ).fetchall()
        if not rows:
            break
        indexed = [
            (e.seq or 0, _index_row(e, r[3]))
            for e, r in zip(decode_rows(session_id, rows), rows, strict=True)
        ]
        _add_keyed(conn, key, [(n, f) for n, f in indexed if f is not None])
        after = rows[-1][0]
    conn.execute(
        "UPDATE turnlog_sessions SET history_seq = ?1, history_id = (SELECT id FROM "
        "turnlog_events WHERE session_id = ?2 AND seq = ?1) WHERE id = ?2",
        (end, session_id),
    )
    return end < top


def _drop_history(conn: sqlite3.Connection, where: str, args: tuple[Any, ...]) -> None:
    """Remove the history rows of the sessions `where` picks (an SQL condition on the sessions
    table), in the caller's transaction: FTS5's 'delete' with each row's indexed text, made
    again from its body (exact: see `_HISTORY`), then the rows. A row exists only for an event
    up to the session's indexed version, so only those bodies are read; a session never
    searched has no key and nothing to remove."""
    for sid, key in conn.execute(
        f"SELECT id, history_key FROM turnlog_sessions WHERE history_key IS NOT NULL AND ({where})",
        args,
    ).fetchall():
        low = key * _SEQ_SPAN
        after = low - 1
        while True:
            rows = conn.execute(
                f"SELECT h.rowid, {_COLUMNS} FROM turnlog_history h JOIN turnlog_events e "
                "ON e.session_id = ? AND e.seq = h.rowid - ? WHERE h.rowid > ? AND h.rowid < ? "
                "ORDER BY h.rowid LIMIT ?",
                (sid, low, after, low + _SEQ_SPAN, _PAGE),
            ).fetchall()
            if not rows:
                break
            gone = []
            for r, event in zip(rows, decode_rows(sid, [r[1:] for r in rows]), strict=True):
                text = indexed_text(event)
                if text is not None:
                    gone.append((r[0], _index_text(text)))
            conn.executemany(
                "INSERT INTO turnlog_history_text (turnlog_history_text, rowid, text) "
                "VALUES ('delete', ?, ?)",
                gone,
            )
            after = rows[-1][0]
        conn.execute(
            "DELETE FROM turnlog_history WHERE rowid >= ? AND rowid < ?", (low, low + _SEQ_SPAN)
        )


def _matches(
    conn: sqlite3.Connection,
    expression: str,
    query: HistoryQuery,
    key: int | None,
    metadata: Mapping[str, str | int | bool] | None,
) -> list[_Match]:
    """The best `query.k` rows for `expression`: of the session whose history key is `key`
    (its rowid range), or of every session whose metadata matches `metadata` (None: all).
    The time and role filters are SQL; the tool and metadata filters are applied to the
    ranked rows as they come, so up to k rows are still found. The rows table and the
    sessions are joined only when a filter reads them: a join costs two lookups per matching
    row, about twice the ranking itself (`_hits` reads them for the hits alone)."""
    rows = query.before is not None or query.after is not None or query.roles is not None
    rows = rows or query.tools is not None
    sql = (
        "SELECT bm25(turnlog_history_text) AS rank, t.rowid"
        + (", h.tools" if query.tools is not None else ", NULL")
        + (", s.id, s.created_at, s.expires_at, s.metadata" if metadata is not None else "")
        + " FROM turnlog_history_text t"
        + (" JOIN turnlog_history h ON h.rowid = t.rowid" if rows else "")
        + (
            " JOIN turnlog_sessions s ON s.history_key = (t.rowid >> 40)"
            if metadata is not None
            else ""
        )
        + " WHERE turnlog_history_text MATCH ?"
    )
    params: list[object] = [expression]
    if key is not None:
        sql += " AND t.rowid >= ? AND t.rowid < ?"
        params += [key * _SEQ_SPAN, (key + 1) * _SEQ_SPAN]
    if query.before is not None:
        sql += " AND h.said_at < ?"
        params.append(to_micros(query.before))
    if query.after is not None:
        sql += " AND h.said_at > ?"
        params.append(to_micros(query.after))
    if query.roles is not None:
        sql += f" AND h.role IN ({', '.join('?' * len(query.roles))})"
        params.extend(sorted(query.roles))
    if query.tools is not None:
        sql += " AND h.tools IS NOT NULL"
    sql += " ORDER BY rank, t.rowid"
    if query.tools is None and metadata is None:
        sql += " LIMIT ?"
        params.append(query.k)
    out: list[_Match] = []
    checked: dict[str, bool] = {}
    cur = conn.execute(sql, params)
    try:
        for row in cur:
            rank, rowid, tools = row[:3]
            if query.tools is not None and query.tools.isdisjoint(tools.split(_TOOLS_SEP)):
                continue
            if metadata is not None:
                ok = checked.get(row[3])
                if ok is None:
                    ok = checked[row[3]] = session_matches(_session(row[3:]), metadata)
                if not ok:
                    continue
            out.append((bm25_score(rank), rowid))
            if len(out) >= query.k:
                break
    finally:
        cur.close()
    return out


def _hits(conn: sqlite3.Connection, found: list[_Match], query: HistoryQuery) -> list[HistoryHit]:
    """The hits of `found`, in order: their rows, sessions and events' bodies read (and the
    bodies decoded) for these alone, for the ids, times and snippets."""
    if not found:
        return []
    rowids = [rowid for _, rowid in found]
    marks = ",".join("?" * len(rowids))  # at most MAX_HITS
    rows = {
        r[0]: r[1:]
        for r in conn.execute(
            f"SELECT rowid, said_at, role FROM turnlog_history WHERE rowid IN ({marks})", rowids
        )
    }
    keys = sorted({rowid >> _SEQ_BITS for rowid in rowids})
    sids = dict(
        conn.execute(
            "SELECT history_key, id FROM turnlog_sessions WHERE history_key IN "
            f"({','.join('?' * len(keys))})",
            keys,
        ).fetchall()
    )
    by_session: dict[str, list[int]] = {}
    for rowid in rowids:
        by_session.setdefault(sids[rowid >> _SEQ_BITS], []).append(rowid & (_SEQ_SPAN - 1))
    events: dict[tuple[str, int], SessionEvent] = {}
    for sid, seqs in by_session.items():
        stored = conn.execute(
            f"SELECT {_COLUMNS} FROM turnlog_events WHERE session_id = ? AND seq IN "
            f"({','.join('?' * len(seqs))})",
            (sid, *seqs),
        ).fetchall()
        for decoded in decode_rows(sid, stored):
            events[sid, decoded.seq or 0] = decoded
    hits = []
    for score, rowid in found:
        sid, seq = sids[rowid >> _SEQ_BITS], rowid & (_SEQ_SPAN - 1)
        event = events.get((sid, seq))
        if event is None or event.timestamp is None:  # pragma: no cover - one transaction
            continue
        said, role = rows[rowid]
        hits.append(
            HistoryHit(
                session_id=sid,
                event_id=event.id,
                seq=seq,
                timestamp=event.timestamp,
                said_at=from_micros(said),
                role=role,
                snippet=snippet(indexed_text(event) or "", query.terms),
                score=score,
            )
        )
    return hits


def _session_row(session: Session) -> tuple[Any, ...]:
    return (
        check_id(session.id, "session id"),
        to_micros(session.created_at),
        None if session.expires_at is None else to_micros(session.expires_at),
        dump_json(dict(session.metadata)),
    )


def _session(row: Any) -> Session:
    return decode_session(row[0], row[1], row[2], row[3])


def _event(session_id: str, row: Any) -> SessionEvent:
    return events_from_rows(session_id, (row,))[0]


def _in_chunks(
    conn: sqlite3.Connection, sql: str, args: tuple[Any, ...], values: list[str]
) -> list[Any]:
    """The rows of `sql` (ending in "IN") for `values`, a chunk of them at a time."""
    rows: list[Any] = []
    for i in range(0, len(values), _CHUNK):
        chunk = values[i : i + _CHUNK]
        rows += conn.execute(f"{sql} ({','.join('?' * len(chunk))})", (*args, *chunk)).fetchall()
    return rows


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _rollback(conn: sqlite3.Connection) -> None:
    """End the open transaction, if SQLite has not ended it already (a failed COMMIT)."""
    if conn.in_transaction:
        with suppress(sqlite3.OperationalError):  # SQLite ended it meanwhile
            conn.execute("ROLLBACK")


def _translate(exc: sqlite3.DatabaseError, path: Path) -> StoreError:
    text = str(exc)
    if "full" in text:  # SQLITE_FULL: "database or disk is full"
        return StoreError(
            f"{path} cannot grow: the disk (or the database's max_page_count) is full ({text}). "
            "Nothing of this write was stored; free disk space and retry"
        )
    if "not a database" in text or "malformed" in text:
        return CorruptData(
            f"{path} is not a readable SQLite database ({text}): check the path, or restore the "
            "file from a backup"
        )
    if "locked" in text or "busy" in text:
        return StoreError(
            f"{path} stayed locked by another writer past the busy timeout ({text}): "
            "retry, or raise busy_timeout"
        )
    if "unable to open" in text and not path.parent.is_dir():
        return StoreError(
            f"cannot create {path}: the directory {path.parent} does not exist; create it first, "
            "or pick another path"
        )
    return StoreError(f"SQLite error on {path}: {text}")
