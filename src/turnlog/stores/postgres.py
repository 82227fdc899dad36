"""`PostgresStore`: sessions in PostgreSQL, for several application instances sharing sessions.

psycopg 3 with a `psycopg_pool.ConnectionPool`. Every write is one round trip: a server-side
function inserts the batch at the seqs the writer proposes, and the `(session_id, seq)` primary
key rejects a slower writer; the driver error becomes `VersionConflict`. Reads come back in one
query each and are decoded on the client by the codec (the body is `bytea`, never parsed by the
server). The session row points at its newest boundary, so reading the view never reads the
covered history. The schema lives in its own PostgreSQL schema: see `postgres_schema`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

try:
    import psycopg
    from psycopg import errors as pgerrors
    from psycopg import pq, sql
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'turnlog[postgres]'"
    ) from exc

from turnlog.codec import (
    decode_event,
    decode_session,
    dump_json,
    dump_jsonb,
    encode_body,
    message_ids,
    to_micros,
)
from turnlog.compaction.boundary import CompactionBoundary
from turnlog.durations import Duration, to_seconds
from turnlog.errors import (
    CorruptData,
    InvalidInput,
    SessionAlreadyExists,
    SessionNotFound,
    StoreError,
    VersionConflict,
)
from turnlog.events import EventType, Session, SessionEvent, check_id
from turnlog.rules import Tail, check_append
from turnlog.stores.base import (
    Clock,
    EventFilter,
    TailMemory,
    TailRows,
    apply_filter,
    check_batch,
    check_boundaries,
    check_cutoff,
    check_event,
    check_limit,
    check_metadata_query,
    check_rules_at,
    check_session,
    utc_now,
)
from turnlog.stores.postgres_queries import Queries
from turnlog.stores.postgres_schema import (
    MAX_INDEXED_BYTES,
    SCHEMA_VERSION,
    _partition_count,
    check_schema_name,
    ensure_schema,
    migrate,
)

__all__ = ["SCHEMA_VERSION", "PostgresStore", "migrate"]

DEFAULT_INDEXED_KEYS: Final = ("owner", "user_id", "principal")
_MAX_ATTEMPTS: Final = 1000
_PAGE: Final = 8  # rows of a log's end read at a time for the view rules
_END: Final = 2**62  # a seq beyond any log's end
_KEEP_IDLE_SECONDS: Final = 60.0
_MAX_CONNECT_WAIT: Final = 86_400.0  # seconds
_RETRYABLE: Final = frozenset({"23505", "40P01"})  # unique violation, deadlock

# The fast path of a version-checked one-event append on an unpartitioned schema: one statement
# that locks the session row (FOR KEY SHARE), checks the version and inserts at seq v+1 if the
# log is at v. No row back means the session is missing or not at v; a unique violation means
# another writer or an id already stored. Either way `append_check` says which.
#
# The row lock, not the advisory lock the append functions take, is what orders this statement
# against deletes. One statement has one snapshot, taken before it waits for any lock: had it
# waited for a delete's advisory lock, its checks would still see the session and the events
# that delete removed, and it would write into the deleted session. A row lock is different:
# it waits for a delete of the row to commit and then skips the row (READ COMMITTED), so the
# append finds no session; and a delete that comes second waits for the append to commit (its
# first statement deletes the session row), then removes the appended event with the rest.
# FOR KEY SHARE does not conflict with the updates of the row (TTL, metadata, boundary).
_DIRECT_ONE: Final = (
    'INSERT INTO {s}.events (session_id, seq, id, type, "timestamp", role, synthetic, body) '
    "SELECT %(sid)s::text, %(v)s::bigint + 1, %(id)s::text, %(type)s::text, %(ts)s::bigint, "
    "%(role)s::text, %(syn)s::boolean, %(body)s::bytea "
    "WHERE EXISTS (SELECT 1 FROM {s}.sessions s WHERE s.id = %(sid)s::text FOR KEY SHARE) "
    "AND (%(v)s::bigint = 0 OR EXISTS (SELECT 1 FROM {s}.events e "
    "WHERE e.session_id = %(sid)s::text AND e.seq = %(v)s::bigint)) "
    "RETURNING seq"
)

# The same, fenced for an append at a tail this handle remembers: the event at seq v must
# still be the one this handle wrote last (a version alone cannot tell a session deleted and
# created again). No row back, or a unique violation, means the memory is stale.
_FENCED_ONE: Final = (
    'INSERT INTO {s}.events (session_id, seq, id, type, "timestamp", role, synthetic, body) '
    "SELECT %(sid)s::text, %(v)s::bigint + 1, %(id)s::text, %(type)s::text, %(ts)s::bigint, "
    "%(role)s::text, %(syn)s::boolean, %(body)s::bytea "
    "WHERE EXISTS (SELECT 1 FROM {s}.sessions s WHERE s.id = %(sid)s::text FOR KEY SHARE) "
    "AND EXISTS (SELECT 1 FROM {s}.events e "
    "WHERE e.session_id = %(sid)s::text AND e.seq = %(v)s::bigint AND e.id = %(last)s::text) "
    "RETURNING seq"
)

Pool = ConnectionPool[psycopg.Connection[Any]]


class _Batch:
    """A batch as the column arrays the append function takes."""

    def __init__(self, events: list[SessionEvent], now_micros: int) -> None:
        self.events = events
        self.ids = [e.id for e in events]
        self.types = [e.type.name for e in events]
        self.timestamps = [
            now_micros if e.timestamp is None else to_micros(e.timestamp) for e in events
        ]
        self.roles = [e.role for e in events]
        self.synthetic = [e.synthetic for e in events]
        self.bodies = [encode_body(e) for e in events]
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
            self.boundary_at = at + 1
            self.boundary_ids = list(boundary.view_event_ids)

    def without(self, stored: set[str]) -> _Batch:
        """The batch less the events already stored."""
        keep = _Batch.__new__(_Batch)
        index = [i for i, e in enumerate(self.events) if e.id not in stored]
        keep.events = [self.events[i] for i in index]
        keep.ids = [self.ids[i] for i in index]
        keep.types = [self.types[i] for i in index]
        keep.timestamps = [self.timestamps[i] for i in index]
        keep.roles = [self.roles[i] for i in index]
        keep.synthetic = [self.synthetic[i] for i in index]
        keep.bodies = [self.bodies[i] for i in index]
        keep.required, keep.boundary_at, keep.boundary_ids = [], None, []
        if any(e.type == EventType.COMPACTION for e in keep.events):
            keep._boundaries()
        return keep

    def call(self, queries: Queries, session_id: str, expected: int | None) -> tuple[str, Any]:
        """The fast append statement for this batch, and its parameters."""
        if len(self.ids) == 1 and self.boundary_at is None:
            return queries.append_one, (
                session_id,
                expected,
                self.ids[0],
                self.types[0],
                self.timestamps[0],
                self.roles[0],
                self.synthetic[0],
                self.bodies[0],
            )
        return queries.append, (
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


class _Borrowed:
    """`with store._conn(what, subject) as conn:` borrows a pooled connection and gives it back.

    Lost connections and pool timeouts become `StoreError` naming what was being done.
    """

    __slots__ = ("conn", "store", "subject", "what")

    def __init__(self, store: PostgresStore, what: str, subject: str | None) -> None:
        self.store = store
        self.what = what
        self.subject = subject

    @property
    def doing(self) -> str:
        return self.what if self.subject is None else f"{self.what} {self.subject!r}"

    def __enter__(self) -> psycopg.Connection[Any]:
        store = self.store
        if store._closed:
            raise StoreError(f"the PostgresStore on schema {store.schema!r} is closed")
        try:
            self.conn = store._borrow()
        except PoolTimeout as exc:
            raise StoreError(
                f"no PostgreSQL connection free or possible within {store._timeout:g}s while "
                f"{self.doing}: check the server, or raise pool_max"
            ) from exc
        return self.conn

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self.store._give_back(self.conn)
        if isinstance(exc, psycopg.OperationalError):
            raise StoreError(
                f"PostgreSQL connection lost or refused while {self.doing}: {_first_line(exc)}. "
                "A write may or may not have been committed; retrying it with the same event "
                "ids is safe (appends skip ids already stored)"
            ) from exc
        if isinstance(exc, pgerrors.UntranslatableCharacter):
            raise InvalidInput(
                f"PostgreSQL cannot store this text while {self.doing} (jsonb refuses the "
                f"character U+0000): {_first_line(exc)}"
            ) from exc
        if isinstance(exc, psycopg.DataError):
            # input is checked before it is sent: a value that cannot be loaded is damage
            raise CorruptData(
                f"PostgreSQL returned a value turnlog cannot read while {self.doing}: "
                f"{_first_line(exc)}. The row is damaged (a time out of range?); other sessions "
                "are unaffected. Restore it from a backup, or delete the session."
            ) from exc


class PostgresStore:
    """Sessions in PostgreSQL; safe across threads, processes and machines.

    Args:
        dsn_or_pool: a libpq connection string or URL (the store then owns a pool and
            `close()` closes it), or a `psycopg_pool.ConnectionPool` of yours whose connections
            are in autocommit mode (`kwargs={"autocommit": True}`); you close that one.
        schema: the PostgreSQL schema that holds turnlog's tables.
        partitions: hash-partition the events by session id into this many partitions when the
            schema is made; None for one table (or to accept the schema as it is).
        migrate: create or upgrade the schema on first use (under an advisory lock); when
            False the schema must be there already (`turnlog migrate --store URL`).
        pool_min: connections the owned pool keeps open.
        pool_max: connections the owned pool opens at most.
        indexed_keys: metadata keys kept in an index table, for a fast `find_by_metadata`.
            Keys are added to the schema (and existing sessions indexed) when a store opens;
            they are never removed. Other keys are found by a jsonb containment query.
        connect_timeout: how long to wait for the server, and for a free pooled connection:
            seconds or a `timedelta`.
        clock: stamps events appended without a timestamp.

    Raises:
        InvalidInput: a bad schema name or partition count; a pool without autocommit; a
            `connect_timeout` that is not a positive, finite duration (at most a day).
        StoreError: the server cannot be reached; the schema needs `turnlog migrate`, is newer
            than this turnlog, or is partitioned differently.
        CorruptData: the schema holds tables of something else.
    """

    def __init__(
        self,
        dsn_or_pool: str | Pool,
        *,
        schema: str = "turnlog",
        partitions: int | None = None,
        migrate: bool = True,
        pool_min: int = 1,
        pool_max: int = 10,
        indexed_keys: Sequence[str] = DEFAULT_INDEXED_KEYS,
        connect_timeout: Duration = 10.0,
        clock: Clock = utc_now,
    ) -> None:
        self.schema = check_schema_name(schema)
        connect_timeout = to_seconds(connect_timeout, "connect_timeout", most=_MAX_CONNECT_WAIT)
        if isinstance(indexed_keys, str) or not all(isinstance(k, str) for k in indexed_keys):
            raise InvalidInput("indexed_keys must be a sequence of metadata key names")
        self._clock = clock
        self._timeout = connect_timeout
        self._closed = False
        self._tails = TailMemory()  # fenced by the newest event id
        self._owned = isinstance(dsn_or_pool, str)
        self._idle: list[psycopg.Connection[Any]] = []  # warm connections, newest last
        self._idle_lock = threading.Lock()
        self._keep_idle = max(1, pool_min)
        self._idle_until = time.monotonic() + _KEEP_IDLE_SECONDS
        if isinstance(dsn_or_pool, str):
            _reach(dsn_or_pool, connect_timeout)
            self._pool: Pool = ConnectionPool(
                dsn_or_pool,
                min_size=pool_min,
                max_size=pool_max,
                kwargs={"autocommit": True, "connect_timeout": max(2, round(connect_timeout))},
                open=False,
                timeout=connect_timeout,
                name=f"turnlog-{schema}",
            )
            try:
                self._pool.open(wait=True, timeout=connect_timeout)
            except PoolTimeout as exc:
                self._pool.close()
                raise StoreError(
                    f"cannot connect to PostgreSQL within {connect_timeout:g}s "
                    f"({_where(dsn_or_pool)}): is the server running, and the DSN right?"
                ) from exc
        else:
            self._pool = dsn_or_pool
        try:
            with self._conn("opening the store") as conn:
                if not conn.autocommit:
                    raise InvalidInput(
                        "PostgresStore needs a pool of autocommit connections: "
                        "ConnectionPool(..., kwargs={'autocommit': True})"
                    )
                keys = ensure_schema(
                    conn,
                    self.schema,
                    partitions=partitions,
                    migrate=migrate,
                    indexed_keys=list(indexed_keys),
                )
                self._q = Queries.render(self.schema, conn)
                # Unpartitioned, a version-checked single append needs no function: one plain
                # statement (no plpgsql, no SPI) does the lock, the check and the insert.
                self._direct_one: str | None = None
                self._fenced_one: str | None = None
                if _partition_count(conn, self.schema) is None:
                    name = sql.Identifier(self.schema)
                    self._direct_one = sql.SQL(_DIRECT_ONE).format(s=name).as_string(conn)
                    self._fenced_one = sql.SQL(_FENCED_ONE).format(s=name).as_string(conn)
        except BaseException:
            self.close()
            raise
        self.indexed_keys: frozenset[str] = frozenset(keys)

    # -- connections ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the pool, when the store made it. The store is unusable afterwards."""
        self._closed = True
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            self._pool.putconn(conn)
        if self._owned:
            self._pool.close()

    def _borrow(self) -> psycopg.Connection[Any]:
        # The most recently used connection first: its server process is warm. psycopg_pool
        # hands out connections in turn, which wakes a cold backend for every operation.
        if self._idle:
            with self._idle_lock:
                if self._idle:
                    return self._idle.pop()
        return self._pool.getconn(self._timeout)

    def _give_back(self, conn: psycopg.Connection[Any]) -> None:
        """Keep up to `pool_min` healthy connections warm; the pool gets the others back.

        Once a minute every kept connection goes back to the pool too, so that the pool's
        health checks, `max_idle` and `max_lifetime` still apply to them.
        """
        back = [conn]
        if (
            self._owned
            and not self._closed
            and conn.pgconn.status == pq.ConnStatus.OK
            and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
        ):
            with self._idle_lock:
                if time.monotonic() > self._idle_until:
                    back += self._idle
                    self._idle = []
                    self._idle_until = time.monotonic() + _KEEP_IDLE_SECONDS
                elif len(self._idle) < self._keep_idle:
                    self._idle.append(conn)
                    return
        for item in back:
            self._pool.putconn(item)  # the pool discards a broken connection

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _conn(self, what: str, subject: str | None = None) -> _Borrowed:
        """A pooled connection for one operation; errors become turnlog errors.

        `what` and `subject` (a session id) say what was being done, in error messages.
        """
        return _Borrowed(self, what, subject)

    # -- sessions ---------------------------------------------------------------------------

    def create_session(self, session: Session) -> None:
        check_session(session)
        with self._conn("creating session", session.id) as conn:
            row = conn.execute(self._q.put_session, (*_session_params(session), True)).fetchone()
        if row is None or not row[0]:
            raise SessionAlreadyExists(session.id)

    def save_session(self, session: Session) -> None:
        check_session(session)
        with self._conn("saving session", session.id) as conn:
            conn.execute(self._q.put_session, (*_session_params(session), False))

    def find_session(self, session_id: str) -> Session | None:
        check_id(session_id, "session id")
        with self._conn("reading session", session_id) as conn:
            row = conn.execute(self._q.find_session, (session_id,)).fetchone()
        return None if row is None else _session(row)

    def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        limit = check_limit(limit)
        with self._conn("listing sessions") as conn:
            rows = conn.execute(self._q.list_sessions, (limit,)).fetchall()
        return [_session(r) for r in rows]

    def delete_session(self, session_id: str) -> bool:
        check_id(session_id, "session id")
        self._tails.forget(session_id)
        with self._conn("deleting session", session_id) as conn:
            row = conn.execute(self._q.delete_session, {"id": session_id}).fetchone()
        return row is not None and row[0] > 0

    def delete_expired(self, before: datetime) -> int:
        check_cutoff(before)
        self._tails.clear()
        with self._conn("deleting expired sessions") as conn:
            row = conn.execute(self._q.delete_expired, {"before": before}).fetchone()
        return 0 if row is None else int(row[0])

    def find_by_metadata(self, name: str, value: str | int | bool) -> list[Session]:
        """The sessions whose metadata has `name` equal to `value`, of the same JSON type.

        An indexed key (see `indexed_keys`) is looked up in the index table; any other key by
        a jsonb containment query that the GIN index on `sessions.metadata` serves.
        """
        if not check_metadata_query(name, value):
            return []  # U+0000: no stored metadata holds it
        if isinstance(value, bool):
            type_name, text = "boolean", ("true" if value else "false")
        elif isinstance(value, int):
            type_name, text = "number", str(value)
        else:
            type_name, text = "string", value
        params = {
            "name": name,
            "value": dump_json(value),
            "contains": dump_json({name: value}),
            "type": type_name,
            "text": text,
            "limit": MAX_INDEXED_BYTES,
        }
        query = self._q.find_indexed if name in self.indexed_keys else self._q.find_contained
        with self._conn("finding sessions by metadata", name) as conn:
            rows = conn.execute(query, params).fetchall()
        return [_session(r) for r in rows]

    # -- events -----------------------------------------------------------------------------

    def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        expected_version: int,
        *,
        check_rules: bool = True,
    ) -> int:
        batch = check_batch(session_id, events, expected_version)
        if not check_rules:
            return self._append(session_id, batch, expected_version)[0]
        done = self._append_remembered(session_id, batch, expected_version)
        if done is not None:
            return done[0]
        at, after = self._check_rules(session_id, batch, expected_version)
        version = self._append(session_id, batch, expected_version)[0]
        self._note(session_id, batch, at, after, version)
        return version

    def append_event(self, event: SessionEvent, *, check_rules: bool = True) -> SessionEvent:
        check_batch(check_event(event).session_id, [event], 0)
        if check_rules:
            done: tuple[int, datetime | None] | None = self._append_remembered(
                event.session_id, [event], None
            )
            for _ in range(_MAX_ATTEMPTS):
                if done is not None:
                    break
                at, after = self._check_rules(event.session_id, [event], None)
                try:  # conditioned on the version the rules were checked at
                    done = self._append(event.session_id, [event], at)
                except VersionConflict:
                    continue  # another writer appended meanwhile: check again
                if done[1] is None:  # a retry: stored before
                    self._tails.forget(event.session_id)
                else:
                    self._note(event.session_id, [event], at, after, done[0])
            else:  # pragma: no cover - each lost attempt means another writer won
                raise StoreError(
                    f"could not append to session {event.session_id!r} after {_MAX_ATTEMPTS} "
                    "attempts: other writers keep winning; retry later"
                )
            version, written = done
        else:
            version, written = self._append(event.session_id, [event], None)
        if written is not None:
            return replace(event, seq=version, timestamp=event.timestamp or written)
        found = self._event_by_id(event.session_id, event.id)  # it was stored before
        if found is None:  # pragma: no cover - ids are never removed from a live session
            raise StoreError(f"event {event.id!r} vanished while it was being appended")
        return found

    def _append_remembered(
        self, session_id: str, batch: list[SessionEvent], expected: int | None
    ) -> tuple[int, datetime | None] | None:
        """Append one event without reading the log: check the rules against the tail this
        handle remembers and condition the insert on its version and newest event id.

        Returns the new version and the time stamped, or None when the memory cannot decide
        (nothing remembered, another version expected, a batch, the event refused at the
        remembered tail, or the log moved on): nothing was written and the caller reads.
        """
        known = self._tails.get(session_id)
        if (
            known is None
            or self._fenced_one is None
            or len(batch) != 1
            or batch[0].type == EventType.COMPACTION
            or (expected is not None and expected != known[0])
        ):
            return None
        version, last, tail = known
        one = batch[0]
        try:
            after = check_append(tail, batch)
        except InvalidInput:  # maybe a retry, maybe a broken rule: the log decides
            self._tails.forget(session_id)
            return None
        now = self._clock()
        params = {
            "sid": session_id,
            "v": version,
            "last": last,
            "id": one.id,
            "type": one.type.name,
            "ts": to_micros(now if one.timestamp is None else one.timestamp),
            "role": one.role,
            "syn": one.synthetic,
            "body": encode_body(one),
        }
        with self._conn("appending to session", session_id) as conn:
            try:
                row = conn.execute(self._fenced_one, params).fetchone()
            except psycopg.DatabaseError as exc:
                if exc.sqlstate not in _RETRYABLE:
                    raise
                row = None
        if row is None or row[0] is None:
            self._tails.forget(session_id)
            return None
        self._tails.remember(session_id, int(row[0]), one.id, after)
        return int(row[0]), now

    def _note(
        self,
        session_id: str,
        batch: list[SessionEvent],
        at: int | None,
        after: Tail | None,
        version: int,
    ) -> None:
        """Remember the tail after an append that wrote all of `batch` at version `at`."""
        if at is not None and after is not None and batch and version == at + len(batch):
            self._tails.remember(session_id, version, batch[-1].id, after)
        else:
            self._tails.forget(session_id)

    def _append(
        self, session_id: str, events: list[SessionEvent], expected: int | None
    ) -> tuple[int, datetime | None]:
        """Append `events` at `expected` (at the end when None).

        Returns the new version, and the time stamped on events without one (None when
        nothing was written: every event was stored already).

        The fast path is one call of an append function. When it declines or a unique key
        rejects it, `append_check` says why: another writer won (VersionConflict), ids already
        stored (skipped, as a retry must be), an id of another session, a boundary naming
        unknown events, or a race that is over (try again).
        """
        if not events:
            return self.version(session_id), None
        now = self._clock()
        micros = to_micros(now)
        one = events[0]
        batch: _Batch | None = None
        if (
            len(events) == 1
            and expected is not None
            and self._direct_one is not None
            and (one.type.name != "COMPACTION")
        ):
            fast: tuple[str, Any] = (
                self._direct_one,
                {
                    "sid": session_id,
                    "v": expected,
                    "id": one.id,
                    "type": one.type.name,
                    "ts": micros if one.timestamp is None else to_micros(one.timestamp),
                    "role": one.role,
                    "syn": one.synthetic,
                    "body": encode_body(one),
                },
            )
        elif len(events) == 1 and one.type.name != "COMPACTION":
            # The common case, without the column arrays: one event, scalar parameters.
            fast = (
                self._q.append_one,
                (
                    session_id,
                    expected,
                    one.id,
                    one.type.name,
                    micros if one.timestamp is None else to_micros(one.timestamp),
                    one.role,
                    one.synthetic,
                    encode_body(one),
                ),
            )
        else:
            batch = _Batch(events, micros)
            fast = batch.call(self._q, session_id, expected)
        with self._conn("appending to session", session_id) as conn:
            for _ in range(_MAX_ATTEMPTS):
                try:
                    row = conn.execute(*fast).fetchone()
                except psycopg.DatabaseError as exc:
                    if exc.sqlstate not in _RETRYABLE:
                        raise
                    row = None
                if row is not None and row[0] is not None:
                    return int(row[0]), now
                if batch is None:
                    batch = _Batch(events, micros)
                found = conn.execute(
                    self._q.check, (session_id, expected, batch.ids, batch.required)
                ).fetchone()
                if found is None:  # pragma: no cover - the function always returns a row
                    raise StoreError("append_check returned nothing")
                status, version, detail = found
                if status == "not_found":
                    raise SessionNotFound(session_id)
                if status == "foreign":
                    raise InvalidInput(
                        f"event id {detail[0]!r} belongs to another session; ids are unique "
                        "across sessions"
                    )
                if status == "stored":
                    return int(version), None
                if status == "partial":
                    batch = batch.without(set(detail))
                    fast = batch.call(self._q, session_id, expected)
                elif status == "conflict":
                    assert expected is not None
                    raise VersionConflict(session_id, expected, int(version))
                elif status == "missing":
                    _refuse_boundaries(batch.events, set(detail))
        raise StoreError(  # pragma: no cover - each lost attempt means another writer won
            f"could not append to session {session_id!r} after {_MAX_ATTEMPTS} attempts: "
            "other writers keep winning; retry later"
        )

    def events(self, session_id: str, flt: EventFilter | None = None) -> list[SessionEvent]:
        check_id(session_id, "session id")
        flt = EventFilter.all() if flt is None else flt
        if flt.active_view:
            return apply_filter(self.view(session_id), flt)
        if flt.event_types is not None and flt.last_n is None:
            query = self._q.events_of_types
            params: dict[str, Any] = {
                "sid": session_id,
                "types": sorted(t.name for t in flt.event_types),
            }
        else:
            query, params = self._q.events, {"sid": session_id}
        with self._conn("reading session", session_id) as conn:
            rows = conn.execute(query, params, binary=True).fetchall()
        if not rows:
            raise SessionNotFound(session_id)
        if rows[0][0] is None:
            return []
        events = [_event(session_id, r) for r in rows]
        if flt.roles is None and not flt.exclude_synthetic and flt.last_n is None:
            return events  # the types, if any, were filtered by the query
        return apply_filter(events, flt)

    def version(self, session_id: str) -> int:
        check_id(session_id, "session id")
        with self._conn("reading session", session_id) as conn:
            row = conn.execute(self._q.version, {"sid": session_id}).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        return int(row[0])

    def view(self, session_id: str) -> list[SessionEvent]:
        check_id(session_id, "session id")
        with self._conn("reading the view of session", session_id) as conn:
            rows = conn.execute(self._q.view, {"sid": session_id}, binary=True).fetchall()
        if not rows:
            raise SessionNotFound(session_id)
        boundary_seq = rows[0][0]
        events = [] if rows[0][1] is None else [_event(session_id, r[1:]) for r in rows]
        if boundary_seq is None:
            return events
        if not any(e.seq == boundary_seq for e in events):
            raise CorruptData(
                f"session {session_id!r} points at boundary seq {boundary_seq}, which is "
                "missing: the database is damaged"
            )
        return CompactionBoundary.project(events)

    def _check_rules(
        self, session_id: str, batch: list[SessionEvent], expected: int | None
    ) -> tuple[int | None, Tail | None]:
        """Check the view rules against the end of the log; returns the version to write at
        and the tail after the batch (see `check_rules_at`).

        The log is read before the write, so the write must be conditioned on the version
        returned (an append only ever extends the rows read).
        """

        def read_tail() -> tuple[int, TailRows]:
            with self._conn("reading session", session_id) as conn:
                rows = conn.execute(
                    self._q.tail, {"sid": session_id, "before": _END, "n": _PAGE}, binary=True
                ).fetchall()
            if not rows:
                raise SessionNotFound(session_id)
            version = 0 if rows[0][0] is None else int(rows[0][0])
            return version, self._tail_rows(session_id, [] if version == 0 else rows)

        def stored(ids: list[str]) -> set[str]:
            with self._conn("reading session", session_id) as conn:
                return {r[0] for r in conn.execute(self._q.stored_ids, (session_id, ids))}

        return check_rules_at(batch, expected, read_tail, stored)

    def _tail_rows(self, session_id: str, rows: list[Any]) -> TailRows:
        while rows:
            for _seq, kind, role, synthetic, body in rows:
                if kind == "MESSAGE" and not synthetic and role != "system":
                    yield role, ([] if role == "user" else message_ids(body))
            if len(rows) < _PAGE:
                return
            with self._conn("reading session", session_id) as conn:
                rows = conn.execute(
                    self._q.tail,
                    {"sid": session_id, "before": rows[-1][0], "n": _PAGE},
                    binary=True,
                ).fetchall()
            if rows and rows[0][0] is None:
                return

    def _event_by_id(self, session_id: str, event_id: str) -> SessionEvent | None:
        with self._conn("reading session", session_id) as conn:
            row = conn.execute(self._q.event_by_id, (session_id, event_id), binary=True).fetchone()
        return None if row is None else _event(session_id, row)


def _refuse_boundaries(batch: list[SessionEvent], missing: set[str]) -> None:
    """Raise the `InvalidInput` `check_boundaries` gives for boundaries naming `missing`."""
    check_boundaries(batch, lambda ids: set(ids) - missing)
    raise InvalidInput(
        "a compaction event names events that are not message events of this session: "
        f"{', '.join(sorted(missing)[:5])}"
    )


def _session_params(session: Session) -> tuple[Any, ...]:
    return (
        check_id(session.id, "session id"),
        session.created_at,
        session.expires_at,
        dump_jsonb(dict(session.metadata)),
    )


def _session(row: Any) -> Session:
    return decode_session(row[0], row[1], row[2], row[3])


def _event(session_id: str, row: Any) -> SessionEvent:
    return decode_event(
        event_id=row[1],
        session_id=session_id,
        seq=row[0],
        type_name=row[2],
        timestamp_micros=row[3],
        synthetic=row[4],
        body=row[5],
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _where(dsn: str) -> str:
    """The host, port and database of `dsn`, without the password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparsable DSN"
    return (
        f"host {info.get('host', 'localhost')}, port {info.get('port', 5432)}, "
        f"database {info.get('dbname', '(default)')}"
    )


def _reach(dsn: str, timeout: float) -> None:
    """Connect once, directly, before the pool opens: a wrong address, name or password fails
    at once with one line, instead of the pool retrying (and logging each try) until `timeout`.

    Raises:
        InvalidInput: `dsn` is not a libpq connection string or URL.
        StoreError: the server cannot be reached or refuses the connection.
    """
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise InvalidInput(
            f"not a PostgreSQL connection string or URL: {_first_line(exc)}"
        ) from exc
    try:
        psycopg.connect(dsn, autocommit=True, connect_timeout=max(2, round(timeout))).close()
    except psycopg.OperationalError as exc:
        raise StoreError(
            f"cannot connect to PostgreSQL ({_where(dsn)}): {_first_line(exc)}. Is the server "
            "running, and the address right?"
        ) from exc
