# Generated from src/turnlog/stores/postgres/store_async.py by scripts/async_to_sync.py.
# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.
"""`PostgresStore`: sessions in PostgreSQL, for application instances sharing sessions.

psycopg 3 with a `psycopg_pool.ConnectionPool`. Every write is one round trip: a server-side
function inserts the batch at the seqs the writer proposes, and the `(session_id, seq)` primary
key rejects a slower writer; the driver error becomes `VersionConflict`. Reads come back in one
query each and are decoded on the client by the codec (the body is `bytea`, never parsed by the
server). The session row points at its newest boundary, so reading the view never reads the
covered history. The large bytes of parts go to the attachment tables in the same statement as
their events (`append_attached`), and no view or log read touches them. The schema lives in
its own PostgreSQL schema: see `ddl` and `schema`; the pool and its warm connections are
in `connections`.

A write interrupted mid-way (a task cancelled, a KeyboardInterrupt) leaves the whole batch or
nothing: each attempt is one statement, and psycopg cancels it on the server (or lets it finish)
before the connection goes back to the pool.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import psycopg

from turnlog.codec import (
    dump_json,
    encode_body,
    from_micros,
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
from turnlog.history import HistoryHit, HistoryQuery, indexed_text, snippet
from turnlog.lazy import LazyEvents
from turnlog.payloads import CompactionBoundary
from turnlog.rules import Tail, check_append, needs_tail
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
    TailRows,
    apply_filter,
    check_batch,
    check_cutoff,
    check_event,
    check_event_ids,
    check_limit,
    check_metadata_query,
    check_range,
    check_rules_at,
    check_session,
    check_token_counts,
    stamped,
    utc_now,
)
from turnlog.stores.postgres.connections import Conn, Connections, Pool
from turnlog.stores.postgres.ddl import (
    MAX_INDEXED_BYTES,
    check_partitions,
    check_schema_name,
    check_text_search,
)
from turnlog.stores.postgres.queries import Queries
from turnlog.stores.postgres.rows import (
    Batch,
    event_of,
    events_of,
    history_columns,
    history_terms,
    read_params,
    refuse_boundaries,
    session_of,
    session_params,
)
from turnlog.stores.postgres.schema import ensure_schema

__all__ = ["DEFAULT_INDEXED_KEYS", "PostgresStore"]

DEFAULT_INDEXED_KEYS: Final = ("owner", "user_id", "principal")
_MAX_ATTEMPTS: Final = 1000
_PAGE: Final = 8  # rows of a log's end read at a time for the view rules
_END: Final = 2**62  # a seq beyond any log's end
_MAX_CONNECT_WAIT: Final = 86_400.0  # seconds
_RETRYABLE: Final = frozenset({"23505", "40P01"})  # unique violation, deadlock


class _StoredIds(Exception):
    """Raised by the `stored` callback of `check_rules_at` when the ids must be read first."""


class PostgresStore:
    """Sessions in PostgreSQL; safe to share between tasks, threads, processes and machines.

    Opening the store connects and checks (or makes, or upgrades) the schema: `open()` does it,
    so does `with store`, and so does the first call when neither was used. The blocking
    `PostgresStore` opens in its constructor.

    Args:
        dsn_or_pool: a libpq connection string or URL (the store then owns a pool and
            `close()` closes it), or a `psycopg_pool.ConnectionPool` of yours, open, whose
            connections are in autocommit mode (`kwargs={"autocommit": True}`); you close that
            one.
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
        attachments: which bytes of parts are stored apart, and the size limits.
        text_search: the PostgreSQL text-search configuration of the history index
            (`search_history`), such as "simple" (no stemming, every word kept: the default)
            or "english" (stemmed, English stop words dropped); fixed when the schema gets its
            history (made, or migrated to version 4). None: "simple" then, and whatever the
            schema has afterwards.

    Raises:
        InvalidInput: a bad schema name, partition count, `indexed_keys`, `text_search` or
            DSN; a text-search configuration the server does not have (when the store opens); a
            `connect_timeout` that is not a positive, finite duration (at most a day); and,
            when the store opens, a pool without autocommit.
        StoreError: when the store opens (in the constructor of `PostgresStore`): the server
            cannot be reached; the schema needs `turnlog migrate`, is newer than this turnlog,
            or is partitioned or has a history configured differently.
        CorruptData: when the store opens: the schema holds tables of something else.
    """

    indexed_keys: frozenset[str]
    """Every metadata key the schema indexes; known once the store is open."""
    _q: Queries  # the statements; set when the store opens: read only inside `self._conn`

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
        attachments: AttachmentLimits = DEFAULT_LIMITS,
        text_search: str | None = None,
    ) -> None:
        self.schema = check_schema_name(schema)
        self._text_search = check_text_search(text_search)
        self._partitions = check_partitions(partitions)
        connect_timeout = to_seconds(connect_timeout, "connect_timeout", most=_MAX_CONNECT_WAIT)
        if isinstance(indexed_keys, str) or not all(isinstance(k, str) for k in indexed_keys):
            raise InvalidInput("indexed_keys must be a sequence of metadata key names")
        self._migrate = migrate
        self._wanted_keys = list(indexed_keys)
        self._clock = clock
        self._limits = attachments
        self._tails = TailMemory()  # fenced by the newest event id
        self.indexed_keys = frozenset()
        self._conns = Connections(
            dsn_or_pool,
            schema=self.schema,
            pool_min=pool_min,
            pool_max=pool_max,
            timeout=connect_timeout,
            prepare=self._prepare,
        )
        self._conn = self._conns.borrow
        self.open()

    # -- opening and closing ----------------------------------------------------------------

    def open(self) -> PostgresStore:
        """Connect, and check (or make, or upgrade) the schema, once; returns the store.

        After a failed open the store is neither open nor closed: the next call tries again.

        Raises:
            InvalidInput: a pool without autocommit.
            StoreError: the server cannot be reached; the schema needs `turnlog migrate`, is
                newer than this turnlog, or is partitioned differently; the store is closed.
            CorruptData: the schema holds tables of something else.
        """
        self._conns.open()
        return self

    def _prepare(self, conn: Conn) -> None:
        found = ensure_schema(
            conn,
            self.schema,
            partitions=self._partitions,
            migrate=self._migrate,
            indexed_keys=self._wanted_keys,
            text_search=self._text_search,
        )
        self._q = Queries.render(
            self.schema,
            conn,
            partitioned=found.partitions is not None,
            config=found.config,
            history=found.history,
        )
        self.indexed_keys = frozenset(found.keys)

    def close(self) -> None:
        """Close the pool, when the store made it. The store is unusable afterwards."""
        self._conns.close()

    @property
    def _pool(self) -> Pool | None:
        """The pool: the user's, or the store's own once it is open."""
        return self._conns.pool

    def __enter__(self) -> PostgresStore:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ---------------------------------------------------------------------------

    def create_session(self, session: Session) -> None:
        check_session(session)
        with self._conn("creating session", session.id) as conn:
            row = conn.execute(self._q.put_session, (*session_params(session), True)).fetchone()
        if row is None or not row[0]:
            raise SessionAlreadyExists(session.id)

    def save_session(self, session: Session) -> None:
        check_session(session)
        with self._conn("saving session", session.id) as conn:
            conn.execute(self._q.put_session, (*session_params(session), False))

    def find_session(self, session_id: str) -> Session | None:
        check_id(session_id, "session id")
        with self._conn("reading session", session_id) as conn:
            row = conn.execute(self._q.find_session, (session_id,)).fetchone()
        return None if row is None else session_of(row)

    def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        limit = check_limit(limit)
        with self._conn("listing sessions") as conn:
            rows = conn.execute(self._q.list_sessions, (limit,)).fetchall()
        return [session_of(r) for r in rows]

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
        with self._conn("finding sessions by metadata", name) as conn:
            q = self._q
            query = q.find_indexed if name in self.indexed_keys else q.find_contained
            rows = conn.execute(query, params).fetchall()
        return [session_of(r) for r in rows]

    # -- events -----------------------------------------------------------------------------

    def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        expected_version: int,
        *,
        check_rules: bool = True,
    ) -> int:
        batch, split = self._split(check_batch(session_id, events, expected_version))
        if not check_rules:
            return self._append(session_id, batch, expected_version, split)[0]
        if split is None:
            done = self._append_remembered(session_id, batch, expected_version)
            if done is not None:
                return done[0]
        at, after = self._check_rules(session_id, batch, expected_version)
        version = self._append(session_id, batch, expected_version, split)[0]
        self._note(session_id, batch, at, after, version)
        return version

    def append_event(self, event: SessionEvent, *, check_rules: bool = True) -> SessionEvent:
        check_batch(check_event(event).session_id, [event], 0)
        (event,), split = self._split([event])
        if check_rules:
            done: tuple[int, datetime | None] | None = None
            if split is None:
                done = self._append_remembered(event.session_id, [event], None)
            for _ in range(_MAX_ATTEMPTS):
                if done is not None:
                    break
                at, after = self._check_rules(event.session_id, [event], None)
                try:  # conditioned on the version the rules were checked at
                    done = self._append(event.session_id, [event], at, split)
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
            version, written = self._append(event.session_id, [event], None, split)
        if written is not None:
            return stamped(event, version, event.timestamp or written)
        found = self._event_by_id(event.session_id, event.id)  # it was stored before
        if found is None:  # pragma: no cover - ids are never removed from a live session
            raise StoreError(f"event {event.id!r} vanished while it was being appended")
        return found

    def _split(self, batch: list[SessionEvent]) -> tuple[list[SessionEvent], Split | None]:
        """`batch` with the large bytes of its parts replaced by references, and what it stores
        or names (None when nothing: the one-statement appends then serve it).

        Raises:
            InvalidInput: a part or an event over the size limits; nothing is written.
        """
        if not _any_media(batch):
            return batch, None
        split = split_attachments(batch, self._limits)
        return split.events, (split if split.blobs or split.named else None)

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
            known is None  # and a tail is remembered only once the store is open
            or self._q.fenced_one is None
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
        stamp = to_micros(now if one.timestamp is None else one.timestamp)
        text, said, tools = history_columns(one, stamp)
        params = {
            "sid": session_id,
            "v": version,
            "last": last,
            "id": one.id,
            "type": one.type.name,
            "ts": stamp,
            "role": one.role,
            "syn": one.synthetic,
            "body": encode_body(one),
            "text": text,
            "said": said,
            "tools": tools,
        }
        with self._conn("appending to session", session_id) as conn:
            try:
                row = conn.execute(self._q.fenced_one, params).fetchone()
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
        self,
        session_id: str,
        events: list[SessionEvent],
        expected: int | None,
        split: Split | None = None,
    ) -> tuple[int, datetime | None]:
        """Append `events` at `expected` (at the end when None), and store or link the
        attachments of `split` (of `events`) in the same statement.

        Returns the new version, and the time stamped on events without one (None when
        nothing was written: every event was stored already).

        The fast path is one statement. When it declines or a unique key rejects it,
        `append_check` says why: another writer won (VersionConflict), ids already stored
        (skipped, as a retry must be), an id of another session, a boundary naming unknown
        events, or a race that is over (try again).
        """
        if not events:
            return self.version(session_id), None
        now = self._clock()
        micros = to_micros(now)
        one = events[0]
        single = len(events) == 1 and one.type.name != "COMPACTION" and split is None
        batch = None if single else Batch(events, micros, split)  # raises for a bad boundary
        with self._conn("appending to session", session_id) as conn:
            q = self._q
            fast: tuple[str, Any]
            if batch is not None:
                fast = batch.call(q, session_id, expected)
            else:
                stamp = micros if one.timestamp is None else to_micros(one.timestamp)
                text, said, tools = history_columns(one, stamp)
                if expected is not None and q.direct_one is not None:
                    fast = (
                        q.direct_one,
                        {
                            "sid": session_id,
                            "v": expected,
                            "id": one.id,
                            "type": one.type.name,
                            "ts": stamp,
                            "role": one.role,
                            "syn": one.synthetic,
                            "body": encode_body(one),
                            "text": text,
                            "said": said,
                            "tools": tools,
                        },
                    )
                else:
                    # The common case, without the column arrays: one event, scalar parameters.
                    params: tuple[Any, ...] = (
                        session_id,
                        expected,
                        one.id,
                        one.type.name,
                        stamp,
                        one.role,
                        one.synthetic,
                        encode_body(one),
                    )
                    if q.history:
                        params += (text, said, tools)
                    fast = (q.append_one, params)
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
                    batch = Batch(events, micros)
                found = conn.execute(
                    q.check, (session_id, expected, batch.ids, batch.required)
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
                    fast = batch.call(q, session_id, expected)
                elif status == "conflict":
                    assert expected is not None
                    raise VersionConflict(session_id, expected, int(version))
                elif status == "missing":
                    refuse_boundaries(batch.events, set(detail))
                elif status == "retry" and batch.named:  # maybe a reference not held
                    held = conn.execute(
                        q.held_attachments, (session_id, list(batch.named))
                    ).fetchall()
                    sizes = {r[0]: int(r[1]) for r in held}
                    sizes.update((ref, len(data)) for ref, data in batch.blobs.items())
                    check_refs_known(session_id, batch.named, sizes)
        raise StoreError(  # pragma: no cover - each lost attempt means another writer won
            f"could not append to session {session_id!r} after {_MAX_ATTEMPTS} attempts: "
            "other writers keep winning; retry later"
        )

    def read_attachment(
        self, session_id: str, ref: str, offset: int = 0, length: int | None = None
    ) -> bytes:
        check_id(session_id, "session id")
        check_ref(ref)
        offset, length = check_read_range(offset, length)
        params = read_params(session_id, ref, offset, length)
        with self._conn("reading an attachment of session", session_id) as conn:
            row = conn.execute(self._q.read_attachment, params, binary=True).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        held, data = row
        if not held:
            raise AttachmentNotFound(session_id, ref)
        if data is None:
            raise CorruptData(
                f"session {session_id!r} holds attachment {ref}, whose bytes are missing: the "
                "database is damaged"
            )
        return bytes(data)

    def events(self, session_id: str, flt: EventFilter | None = None) -> list[SessionEvent]:
        check_id(session_id, "session id")
        flt = EventFilter.all() if flt is None else flt
        if flt.active_view:
            return apply_filter(self.view(session_id), flt)
        params: dict[str, Any] = {"sid": session_id}
        of_types = flt.event_types is not None and flt.last_n is None
        if of_types and flt.event_types is not None:
            params["types"] = sorted(t.name for t in flt.event_types)
        with self._conn("reading session", session_id) as conn:
            query = self._q.events_of_types if of_types else self._q.events
            rows = conn.execute(query, params, binary=True).fetchall()
        if not rows:
            raise SessionNotFound(session_id)
        if rows[0][0] is None:
            return []
        events = events_of(session_id, rows)
        if flt.roles is None and not flt.exclude_synthetic and flt.last_n is None:
            return events  # the types, if any, were filtered by the query
        return apply_filter(events, flt)

    def events_by_id(self, session_id: str, ids: Sequence[str]) -> list[SessionEvent]:
        """The events of the session with these ids, in log order: only those rows, each
        looked up in the id index."""
        check_id(session_id, "session id")
        wanted = sorted(set(check_event_ids(ids)))
        params = {"sid": session_id, "ids": wanted}
        with self._conn("reading events of session", session_id) as conn:
            rows = conn.execute(self._q.events_by_id, params, binary=True).fetchall()
        if not rows:
            raise SessionNotFound(session_id)
        if rows[0][0] is None:
            return []
        return events_of(session_id, rows)

    def search_history(self, session_id: str, query: HistoryQuery) -> list[HistoryHit]:
        """The best `query.k` message events of the session for `query`, from the history
        index (GIN on the session and the `tsvector`), ranked by `ts_rank_cd` (normalized by
        the log of the event's length): one query, which reads only the hits' events."""
        check_id(session_id, "session id")
        params = _search_params(query)
        params["sid"] = session_id
        with self._conn("searching the history of session", session_id) as conn:
            rows = conn.execute(self._q.search_history, params, binary=True).fetchall()
        if not rows:
            raise SessionNotFound(session_id)
        if rows[0][0] is None:
            return []
        return [_hit(session_id, row, query) for row in rows]

    def search_sessions(
        self,
        query: HistoryQuery,
        *,
        sessions: Sequence[str] | None = None,
        metadata: Mapping[str, str | int | bool] | None = None,
    ) -> list[HistoryHit]:
        """The best `query.k` message events of the sessions named (all when None) whose
        metadata holds `metadata`, in one query (the filters in SQL); unknown ids are
        skipped."""
        params = _search_params(query)
        if sessions is not None:
            if isinstance(sessions, str):
                raise InvalidInput("sessions must be a list of session ids, not one string")
            params["sids"] = [check_id(s, "session id") for s in sessions]
        else:
            params["sids"] = None
        if metadata is not None:
            for name, value in metadata.items():
                if not check_metadata_query(name, value):
                    return []  # U+0000: no stored metadata holds it
            params["meta"] = dump_json(dict(metadata))
        else:
            params["meta"] = None
        with self._conn("searching the history of sessions") as conn:
            rows = conn.execute(self._q.search_sessions, params, binary=True).fetchall()
        return [_hit(row[0], row[1:], query) for row in rows]

    def events_after(self, session_id: str, after: int, limit: int) -> list[SessionEvent]:
        check_id(session_id, "session id")
        after, limit = check_range(after, limit)
        params = {"sid": session_id, "after": after, "last": min(after + limit, 2**63 - 1)}
        with self._conn("reading session", session_id) as conn:
            query = self._q.events_after
            rows = conn.execute(query, params, binary=True).fetchall()
        if not rows:
            raise SessionNotFound(session_id)
        if rows[0][0] is None:
            return []
        return events_of(session_id, rows)

    def record_tokens(self, session_id: str, counts: Mapping[str, TokenCount]) -> int:
        check_id(session_id, "session id")
        counts = check_token_counts(counts)
        what = "recording token counts of session"
        with self._conn(what, session_id) as conn, conn.transaction():
            found = conn.execute(self._q.version, {"sid": session_id}).fetchone()
            if found is None:
                raise SessionNotFound(session_id)
            rows = conn.execute(
                self._q.events_by_ids, (session_id, list(counts)), binary=True
            ).fetchall()
            updates = []
            for row in rows:
                event = event_of(session_id, row)
                body = encode_body(event.with_tokens(counts[event.id]))
                updates.append((body, session_id, event.seq, event.id))
            if updates:
                with conn.cursor() as cursor:
                    cursor.executemany(self._q.set_body, updates)
            written = len(updates)
        return written

    def version(self, session_id: str) -> int:
        check_id(session_id, "session id")
        with self._conn("reading session", session_id) as conn:
            row = conn.execute(self._q.version, {"sid": session_id}).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        return int(row[0])

    def view_lazy(self, session_id: str) -> LazyEvents:
        rows = self._view_rows(session_id)
        if rows[0][0] is not None or rows[0][1] is None:  # compacted (short), or empty
            return LazyEvents.of(self._view_of(session_id, rows))
        return lazy_events_from_rows(session_id, [r[1:] for r in rows])

    def view(self, session_id: str) -> list[SessionEvent]:
        return self._view_of(session_id, self._view_rows(session_id))

    def _view_rows(self, session_id: str) -> list[Any]:
        """The rows of the view query: (boundary seq, the events' columns...) each.

        Raises:
            SessionNotFound: no such session.
        """
        check_id(session_id, "session id")
        with self._conn("reading the view of session", session_id) as conn:
            rows = conn.execute(self._q.view, {"sid": session_id}, binary=True).fetchall()
        if not rows:
            raise SessionNotFound(session_id)
        return rows

    def _view_of(self, session_id: str, rows: list[Any]) -> list[SessionEvent]:
        boundary_seq = rows[0][0]
        events = [] if rows[0][1] is None else events_of(session_id, [r[1:] for r in rows])
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
        returned (an append only ever extends the rows read). The end of the log is read
        first, as far as the rules look; the ids of the batch already stored only when the
        rules refuse the batch (a retry skips them).
        """
        version, rows = self._read_tail(session_id) if needs_tail(batch) else (0, [])

        def read_tail() -> tuple[int, TailRows]:
            return version, _messages(rows)

        def unknown(ids: list[str]) -> set[str]:
            raise _StoredIds

        try:
            return check_rules_at(batch, expected, read_tail, unknown)
        except _StoredIds:
            pass
        with self._conn("reading session", session_id) as conn:
            stored = {
                r[0] for r in conn.execute(self._q.stored_ids, (session_id, [e.id for e in batch]))
            }
        return check_rules_at(batch, expected, read_tail, lambda ids: stored)

    def _read_tail(self, session_id: str) -> tuple[int, list[Any]]:
        """The log's version and its end, newest first, as far as `rules.tail_of` reads it: to
        the newest user or assistant message (or the start of the log).

        Raises:
            SessionNotFound: no such session.
        """
        found: list[Any] = []
        with self._conn("reading session", session_id) as conn:
            before = _END
            while True:
                rows = conn.execute(
                    self._q.tail, {"sid": session_id, "before": before, "n": _PAGE}, binary=True
                ).fetchall()
                if not rows and not found:
                    raise SessionNotFound(session_id)
                if not rows or rows[0][0] is None:
                    break
                found += rows
                if len(rows) < _PAGE or any(_ends_tail(r) for r in rows):
                    break
                before = rows[-1][0]
        return (int(found[0][0]) if found else 0), found

    def _event_by_id(self, session_id: str, event_id: str) -> SessionEvent | None:
        with self._conn("reading session", session_id) as conn:
            row = conn.execute(self._q.event_by_id, (session_id, event_id), binary=True).fetchone()
        return None if row is None else event_of(session_id, row)


def _search_params(query: HistoryQuery) -> dict[str, Any]:
    """The parameters a history search shares: the terms, the filters, k."""
    return {
        "terms": history_terms(query.terms),
        "before": None if query.before is None else to_micros(query.before),
        "after": None if query.after is None else to_micros(query.after),
        "roles": None if query.roles is None else sorted(query.roles),
        "tools": None if query.tools is None else sorted(query.tools),
        "k": query.k,
    }


def _hit(session_id: str, row: Any, query: HistoryQuery) -> HistoryHit:
    """The hit of a search row (seq, role, said_at, rank, then the event's columns)."""
    event = event_of(session_id, (row[0], *row[4:]))
    return HistoryHit(
        session_id=session_id,
        event_id=event.id,
        seq=int(row[0]),
        timestamp=from_micros(row[6]),
        said_at=from_micros(row[2]),
        role=row[1],
        snippet=snippet(indexed_text(event) or "", query.terms),
        score=float(row[3]),
    )


def _any_media(batch: list[SessionEvent]) -> bool:
    """Whether an event of `batch` holds an image, file or audio part: the test every append
    pays, so the text-only case reads two empty fields per event and calls nothing."""
    for event in batch:
        m = event.message
        if m is not None and (m.parts or m.tool_results) and has_media(m):
            return True
    return False


def _ends_tail(row: Any) -> bool:
    """A tail row (seq, type, role, synthetic, body) at which `rules.tail_of` stops."""
    return bool(row[1] == "MESSAGE" and not row[3] and row[2] in ("user", "assistant"))


def _messages(rows: list[Any]) -> Iterator[tuple[str, Sequence[str]]]:
    """The tail rows `rules.tail_of` reads: non-synthetic user, assistant and tool messages."""
    for _seq, kind, role, synthetic, body in rows:
        if kind == "MESSAGE" and not synthetic and role != "system":
            yield role, ([] if role == "user" else message_ids(body))
