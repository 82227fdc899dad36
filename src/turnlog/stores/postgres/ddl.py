"""The PostgreSQL schema of the PostgreSQL stores, and its versioned migrations: the SQL only.

This module does no I/O; `schema` (generated from `schema_async`) applies what is here.

Everything lives in one PostgreSQL schema (`turnlog` by default), so several independent stores
(or test runs) can share a database. The tables:

- `schema_version`: one row per applied migration.
- `sessions`: one row per session, with the pointer to its newest compaction boundary
  (`boundary_seq`, and `boundary_ids`: the ids the boundary names), so reading a view never
  reads the covered history.
- `events`: the logs. `(session_id, seq)` is the primary key and the concurrency guard; a
  session's version is its `max(seq)`. The body is the codec's JSON bytes (`bytea`), decoded on
  the client. Optionally hash-partitioned by `session_id`.
- Event ids are unique across sessions: by a unique index on `events (id)` in one table; a
  partitioned table cannot have that (a unique index must include the partition key), so there
  `(session_id, id)` is unique and the small table `event_ids (id primary key, session_id)`
  keeps ids unique across sessions.
- `indexed_keys` and `session_index`: the metadata keys the store indexes, and one row per
  (key, JSON value, session), maintained by the server on every session write.
- `attachments` (version 2): the large bytes of parts, once per store, by reference (sha256),
  with `refs`, the number of sessions holding each; `session_attachments`: which sessions hold
  which (one row per session and reference). See `_V2_TABLES`. Since version 3 the bytes are in
  `attachment_chunks`, rows of 8,120 bytes, one to a heap page (see `_V3_TABLES`).
- `history` (version 4): the history index, one row per indexed message event with its
  `tsvector`, partitioned like `events`; `history_settings` holds its text-search
  configuration. See `ddl_history`.

Server-side functions do each write in one round trip (`append_one`, `append_events`,
`append_attached`, `put_session`, `delete_session`, `delete_expired`; `append_check` explains a
declined append).

Migrations run in one transaction under an advisory lock keyed on the schema name, so any
number of processes may migrate at once: one does the work, the others wait and find it done
(see `schema.ensure_schema`).
"""

from __future__ import annotations

import re
import zlib
from typing import Final

from psycopg import sql

from turnlog.errors import InvalidInput, StoreError
from turnlog.stores.postgres.ddl_history import migration_4

__all__ = [
    "CHUNK_BYTES",
    "MAX_INDEXED_BYTES",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "check_partitions",
    "check_schema_name",
    "check_text_search",
    "check_version",
    "compose",
    "lock_class",
]

SCHEMA_VERSION: Final = 4
"""The newest schema version this turnlog knows."""

MAX_INDEXED_BYTES: Final = 1024
"""Longer metadata values (as JSON text) are not put in `session_index`; lookups of them fall
back to a containment query on `sessions.metadata`."""

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_schema_name(schema: object) -> str:
    """Return `schema` if it is a plain SQL identifier, else raise `InvalidInput`."""
    if not isinstance(schema, str) or not _IDENTIFIER.fullmatch(schema):
        raise InvalidInput(
            f"invalid PostgreSQL schema name {schema!r}: use 1-63 letters, digits and '_', "
            "starting with a letter or '_'"
        )
    return schema


def check_partitions(partitions: object) -> int | None:
    """Return `partitions` if it is None or an integer from 1 to 1024, else raise `InvalidInput`."""
    if partitions is None:
        return None
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise InvalidInput(f"partitions must be None or an integer >= 1, got {partitions!r}")
    if partitions > 1024:
        raise InvalidInput(f"partitions must be at most 1024, got {partitions}")
    return partitions


def check_text_search(config: object) -> str | None:
    """Return `config` (a text-search configuration's name) if it is None or a plain SQL
    identifier, else raise `InvalidInput`; whether the server has it is checked when the
    history is made (`schema.ensure_schema`)."""
    if config is None:
        return None
    if not isinstance(config, str) or not _IDENTIFIER.fullmatch(config):
        raise InvalidInput(
            f"invalid text-search configuration {config!r}: give the name of one the server "
            "has (SELECT cfgname FROM pg_ts_config), such as 'simple' or 'english'"
        )
    return config


# -- migration 1 ----------------------------------------------------------------------------
#
# Placeholders: {s} is the schema (an Identifier); @LOCK@ the schema's advisory-lock class (an
# integer literal); @...@ pieces differ between one events table and a partitioned one.

_V1_TABLES: Final = """
CREATE TABLE {s}.sessions (
    id text PRIMARY KEY,
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    metadata jsonb NOT NULL,
    boundary_seq bigint,
    boundary_ids text[] NOT NULL DEFAULT ARRAY[]::text[]
);
CREATE INDEX sessions_created ON {s}.sessions (created_at DESC, id DESC);
CREATE INDEX sessions_expiry ON {s}.sessions (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX sessions_metadata ON {s}.sessions USING gin (metadata jsonb_path_ops);

CREATE TABLE {s}.indexed_keys (name text PRIMARY KEY);
CREATE TABLE {s}.session_index (
    name text NOT NULL,
    value text NOT NULL,
    session_id text NOT NULL,
    PRIMARY KEY (name, value, session_id)
);
CREATE INDEX session_index_session ON {s}.session_index (session_id);
"""

_V1_EVENTS: Final = """
CREATE TABLE {s}.events (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    id text NOT NULL,
    type text NOT NULL,
    "timestamp" bigint NOT NULL,
    role text,
    synthetic boolean NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (session_id, seq)
)"""

# One table: a unique index on id keeps ids unique across sessions.
_V1_EVENT_IDS_PLAIN: Final = "CREATE UNIQUE INDEX events_id ON {s}.events (id)"

# Partitioned: a unique index must hold the partition key, so (session_id, id) is unique per
# session and the small event_ids table keeps ids unique across sessions.
_V1_EVENT_IDS_PARTITIONED: Final = """
CREATE UNIQUE INDEX events_session_event ON {s}.events (session_id, id);
CREATE TABLE {s}.event_ids (
    id text PRIMARY KEY,
    session_id text NOT NULL
);
CREATE INDEX event_ids_session ON {s}.event_ids (session_id);
"""

_V1_COMMENTS: Final = """
COMMENT ON COLUMN {s}.events."timestamp" IS 'microseconds since 1970-01-01 UTC';
COMMENT ON COLUMN {s}.events.body IS 'turnlog codec JSON (format in the "v" key), UTF-8';
COMMENT ON COLUMN {s}.session_index.value IS 'the metadata value as jsonb text: type-exact';
"""

# The append functions. The writer proposes seqs p_expected + 1, ...; the (session_id, seq)
# primary key rejects a slower writer (a unique violation, after the faster one commits). A
# session's version is max(seq): nothing but the events is written per append. They write
# nothing and return NULL when the log is not at p_expected or a boundary names events the log
# does not hold; the client then asks append_check what happened, as after a unique violation.
#
# "The log is at p_expected" is one index probe: seq p_expected exists (or, for 0, the session
# does). Seq p_expected + 1 is left to the primary key. A log with seq p_expected has a session:
# deleting a session takes an exclusive advisory lock on it, which waits for the appends in
# flight (they hold it shared), and then removes all its events, theirs too; an append that
# comes after the delete finds no seq p_expected and no session.
_V1_APPEND: Final = """
CREATE FUNCTION {s}.append_one(
    p_session text, p_expected bigint, p_id text, p_type text, p_ts bigint, p_role text,
    p_synthetic boolean, p_body bytea
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    v bigint := p_expected;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(@LOCK@, hashtext(p_session));
    IF v IS NULL THEN
        -- At the end, whatever the version: such appends queue (per session) for the tail.
        PERFORM pg_advisory_xact_lock(@TAIL@, hashtext(p_session));
        SELECT coalesce(max(e.seq), 0) INTO v FROM {s}.events e WHERE e.session_id = p_session;
    END IF;
    INSERT INTO {s}.events (session_id, seq, id, type, "timestamp", role, synthetic, body)
    SELECT p_session, v + 1, p_id, p_type, p_ts, p_role, p_synthetic, p_body
    WHERE CASE WHEN v = 0
        THEN EXISTS (SELECT 1 FROM {s}.sessions s WHERE s.id = p_session)
        ELSE EXISTS (SELECT 1 FROM {s}.events e WHERE e.session_id = p_session AND e.seq = v)
    END;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    @IDS_INSERT_ONE@
    RETURN v + 1;
END
$fn$;

CREATE FUNCTION {s}.append_events(
    p_session text, p_expected bigint, p_ids text[], p_types text[], p_ts bigint[],
    p_roles text[], p_synthetic boolean[], p_bodies bytea[], p_required text[],
    p_boundary_at bigint, p_boundary_ids text[]
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    v bigint := p_expected;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(@LOCK@, hashtext(p_session));
    IF v IS NULL THEN
        -- At the end, whatever the version: such appends queue (per session) for the tail.
        PERFORM pg_advisory_xact_lock(@TAIL@, hashtext(p_session));
        SELECT coalesce(max(e.seq), 0) INTO v FROM {s}.events e WHERE e.session_id = p_session;
    END IF;
    IF NOT (CASE WHEN v = 0
            THEN EXISTS (SELECT 1 FROM {s}.sessions s WHERE s.id = p_session)
            ELSE EXISTS (
                SELECT 1 FROM {s}.events e WHERE e.session_id = p_session AND e.seq = v)
        END)
        OR (cardinality(p_required) > 0 AND EXISTS (
            SELECT 1 FROM unnest(p_required) AS r(id) WHERE NOT EXISTS (
                SELECT 1 FROM {s}.events e
                WHERE e.session_id = p_session AND e.id = r.id AND e.type = 'MESSAGE')))
    THEN
        RETURN NULL;
    END IF;
    INSERT INTO {s}.events (session_id, seq, id, type, "timestamp", role, synthetic, body)
    SELECT p_session, v + u.o, u.id, u.type, u.ts, u.role, u.synthetic, u.body
    FROM unnest(p_ids, p_types, p_ts, p_roles, p_synthetic, p_bodies)
        WITH ORDINALITY AS u(id, type, ts, role, synthetic, body, o);
    @IDS_INSERT_MANY@
    IF p_boundary_at IS NOT NULL THEN
        UPDATE {s}.sessions
        SET boundary_seq = v + p_boundary_at, boundary_ids = p_boundary_ids
        WHERE id = p_session AND (boundary_seq IS NULL OR boundary_seq < v + p_boundary_at);
    END IF;
    RETURN v + cardinality(p_ids);
END
$fn$;
"""

_IDS_INSERT_ONE: Final = "INSERT INTO {s}.event_ids (id, session_id) VALUES (p_id, p_session);"
_IDS_INSERT_MANY: Final = (
    "INSERT INTO {s}.event_ids (id, session_id) "
    "SELECT u.id, p_session FROM unnest(p_ids) AS u(id) ORDER BY u.id;"
)

# The slow path, after the fast one declined or failed: what is the state of this batch?
_V1_CHECK: Final = """
CREATE FUNCTION {s}.append_check(
    p_session text, p_expected bigint, p_ids text[], p_required text[],
    OUT status text, OUT version bigint, OUT detail text[]
) LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    stored text[];
    foreign_id text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {s}.sessions s WHERE s.id = p_session) THEN
        status := 'not_found';
        RETURN;
    END IF;
    SELECT coalesce(max(e.seq), 0) INTO version FROM {s}.events e
    WHERE e.session_id = p_session;
    SELECT coalesce(array_agg(e.id) FILTER (WHERE e.session_id = p_session), ARRAY[]::text[]),
           min(e.id) FILTER (WHERE e.session_id <> p_session)
    INTO stored, foreign_id
    FROM {s}.@OWNERS@ e WHERE e.id = ANY(p_ids);
    IF foreign_id IS NOT NULL THEN
        status := 'foreign';
        detail := ARRAY[foreign_id];
    ELSIF cardinality(stored) = cardinality(p_ids) THEN
        status := 'stored';
    ELSIF cardinality(stored) > 0 THEN
        status := 'partial';
        detail := stored;
    ELSIF p_expected IS NOT NULL AND version <> p_expected THEN
        status := 'conflict';
    ELSE
        SELECT array_agg(r.id) INTO detail FROM unnest(p_required) AS r(id) WHERE NOT EXISTS (
            SELECT 1 FROM {s}.events e
            WHERE e.session_id = p_session AND e.id = r.id AND e.type = 'MESSAGE');
        status := CASE WHEN detail IS NULL THEN 'retry' ELSE 'missing' END;
    END IF;
END
$fn$;
"""

# Session rows and their index rows, in one call. The server derives the index rows from the
# metadata and the keys in `indexed_keys`, so every writer indexes the same keys.
_V1_PUT_SESSION: Final = """
CREATE FUNCTION {s}.put_session(
    p_id text, p_created timestamptz, p_expires timestamptz, p_metadata jsonb, p_create boolean
) RETURNS boolean LANGUAGE plpgsql AS $fn$
BEGIN
    IF p_create THEN
        INSERT INTO {s}.sessions (id, created_at, expires_at, metadata)
        VALUES (p_id, p_created, p_expires, p_metadata) ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    ELSE
        INSERT INTO {s}.sessions AS s (id, created_at, expires_at, metadata)
        VALUES (p_id, p_created, p_expires, p_metadata)
        ON CONFLICT (id) DO UPDATE
        SET expires_at = excluded.expires_at, metadata = excluded.metadata;
        DELETE FROM {s}.session_index WHERE session_id = p_id;
    END IF;
    INSERT INTO {s}.session_index (name, value, session_id)
    SELECT k.name, (p_metadata -> k.name)::text, p_id
    FROM {s}.indexed_keys k
    WHERE jsonb_typeof(p_metadata -> k.name) IN ('string', 'number', 'boolean')
      AND octet_length((p_metadata -> k.name)::text) <= @MAX_INDEXED@;
    RETURN true;
END
$fn$;
"""

# Deleting: the session rows first (a sweep re-checks the expiry of a row whose TTL was
# extended meanwhile, and skips it), then the exclusive advisory lock of each deleted session,
# which waits for the appends in flight; then, with a fresh snapshot, everything of them.
# The stores take those advisory locks before they call these functions (see `queries`), so
# that a delete never holds a session row while it waits for an append that will update that
# row (a boundary): here they are then taken again, at no cost.
_V1_DELETE: Final = """
CREATE FUNCTION {s}.purge(p_gone text[]) RETURNS bigint LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(@LOCK@, k)
    FROM (SELECT DISTINCT hashtext(g) AS k FROM unnest(p_gone) AS g ORDER BY 1) AS keys;
    IF cardinality(p_gone) > 0 THEN
        DELETE FROM {s}.events WHERE session_id = ANY(p_gone);
        @IDS_DELETE@
        DELETE FROM {s}.session_index WHERE session_id = ANY(p_gone);
    END IF;
    RETURN cardinality(p_gone);
END
$fn$;

CREATE FUNCTION {s}.delete_session(p_id text) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    gone text[];
BEGIN
    WITH d AS (DELETE FROM {s}.sessions WHERE id = p_id RETURNING id)
    SELECT coalesce(array_agg(d.id), ARRAY[]::text[]) INTO gone FROM d;
    RETURN {s}.purge(gone);
END
$fn$;

CREATE FUNCTION {s}.delete_expired(p_before timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    gone text[];
BEGIN
    WITH d AS (
        DELETE FROM {s}.sessions WHERE expires_at IS NOT NULL AND expires_at <= p_before
        RETURNING id
    )
    SELECT coalesce(array_agg(d.id), ARRAY[]::text[]) INTO gone FROM d;
    RETURN {s}.purge(gone);
END
$fn$;
"""


def lock_class(schema: str, role: str = "session") -> int:
    """The first key of the schema's advisory locks (the second is `hashtext(session_id)`).

    `role` "session" orders appends (shared) and deletes (exclusive); "tail" queues the appends
    that go at the end of a log whatever its version (`append_event`).
    """
    value = zlib.crc32(f"turnlog:{schema}:{role}".encode())
    return value - (1 << 32) if value >= (1 << 31) else value


def _split(script: str) -> list[str]:
    """Statements of a DDL script; a function body ($fn$ ... $fn$) stays whole."""
    out: list[str] = []
    for chunk in re.split(r"(\$fn\$.*?\$fn\$)", script, flags=re.S):
        if chunk.startswith("$fn$"):
            out[-1] += chunk
            continue
        parts = chunk.split(";")
        if out:
            out[-1] += parts[0]
            parts = parts[1:]
        out.extend(parts)
    return [s.strip() for s in out if s.strip()]


def _migration_1(schema: str, partitions: int | None, config: str) -> list[str]:
    statements = _split(_V1_TABLES)
    if partitions is None:
        statements += [_V1_EVENTS, _V1_EVENT_IDS_PLAIN]
        pieces = {"IDS_INSERT_ONE": "", "IDS_INSERT_MANY": "", "IDS_DELETE": "", "OWNERS": "events"}
    else:
        statements.append(_V1_EVENTS + " PARTITION BY HASH (session_id)")
        statements += [
            f"CREATE TABLE {{s}}.events_p{i} PARTITION OF {{s}}.events "
            f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
            for i in range(partitions)
        ]
        statements += _split(_V1_EVENT_IDS_PARTITIONED)
        pieces = {
            "IDS_INSERT_ONE": _IDS_INSERT_ONE,
            "IDS_INSERT_MANY": _IDS_INSERT_MANY,
            "IDS_DELETE": "DELETE FROM {s}.event_ids WHERE session_id = ANY(p_gone);",
            "OWNERS": "event_ids",
        }
    pieces["LOCK"] = str(lock_class(schema))
    pieces["TAIL"] = str(lock_class(schema, "tail"))
    pieces["MAX_INDEXED"] = str(MAX_INDEXED_BYTES)
    statements += _split(_V1_COMMENTS)
    for script in (_V1_APPEND, _V1_CHECK, _V1_PUT_SESSION, _V1_DELETE):
        for name, piece in pieces.items():
            script = script.replace(f"@{name}@", piece)
        statements += _split(script)
    return statements


# -- migration 2: attachments ------------------------------------------------------------------
#
# The bytes of large parts (`turnlog.stores.attachments`), once per store whatever the layout.
# `attachments` is never partitioned: a reference is shared across sessions, so no session
# column can be its key. `data` is stored EXTERNAL: out of line and not compressed (images, PDFs
# and audio are compressed already), so `substring` of a range fetches only the TOAST chunks it
# covers, and an update of `refs` keeps the same TOAST value (nothing of the bytes is copied).
# (Migration 3 moves the bytes to rows of a page each, `attachment_chunks`: see there.)
#
# `session_attachments` follows the sessions table, not the events: one table in both layouts.
# Its rows are small (one per session and distinct attachment), every lookup is a probe of its
# primary key by session (which a partition would not make cheaper), and so migration 2 needs
# no knowledge of how a schema made earlier partitioned its events.
#
# The reference count. `attachments.refs` is the number of sessions that hold the reference
# (its rows in `session_attachments`). It changes only under the row's lock: an append takes
# the lock with its upsert, a delete with SELECT ... FOR UPDATE, both in the order of the
# references, so two of them never deadlock. A delete that brings `refs` to 0 and an append
# that links the same bytes to another session therefore serialize: either the append comes
# first (the delete's decrement then leaves 1), or it waits for the delete to commit and,
# finding the conflicting row gone, inserts it again with its own bytes (an INSERT ... ON
# CONFLICT DO UPDATE inserts or updates, whatever commits meanwhile). No step decides from a
# NOT EXISTS over other sessions' rows, which READ COMMITTED would not re-check.
#
# A session's own rows in `session_attachments` change only by its appends (which add) and its
# delete (which removes all): the append function takes the session's advisory lock shared, a
# delete exclusively, so while an append runs, the references its session holds stay as read.

_V2_TABLES: Final = """
CREATE TABLE {s}.attachments (
    ref text PRIMARY KEY,
    size bigint NOT NULL,
    refs bigint NOT NULL,
    data bytea NOT NULL
);
ALTER TABLE {s}.attachments ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE TABLE {s}.session_attachments (
    session_id text NOT NULL,
    ref text NOT NULL,
    PRIMARY KEY (session_id, ref)
);
COMMENT ON COLUMN {s}.attachments.ref IS 'sha256:<hex> of data';
COMMENT ON COLUMN {s}.attachments.refs IS 'the sessions holding it: its session_attachments rows';
"""

# An append that stores bytes, or names references its session must hold already: the
# references it names are checked first (NULL, writing nothing, when one is not held or its
# size differs: the client then says which), then `append_events` writes the events (NULL when
# it declines), then the references the session did not hold yet are linked and each counted
# once more (or stored, for a new one). All in the statement's one transaction.
_V2_APPEND: Final = """
CREATE FUNCTION {s}.append_attached(
    p_session text, p_expected bigint, p_ids text[], p_types text[], p_ts bigint[],
    p_roles text[], p_synthetic boolean[], p_bodies bytea[], p_required text[],
    p_boundary_at bigint, p_boundary_ids text[],
    p_refs text[], p_data bytea[], p_named text[], p_named_sizes bigint[]
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    v bigint;
BEGIN
    IF cardinality(p_named) > 0 THEN
        -- Held to the commit (append_events takes it again): no delete of the session can
        -- run meanwhile, so the references read here stay held.
        PERFORM pg_advisory_xact_lock_shared(@LOCK@, hashtext(p_session));
        IF EXISTS (
            SELECT 1 FROM unnest(p_named, p_named_sizes) AS n(ref, size)
            WHERE NOT EXISTS (
                SELECT 1 FROM {s}.session_attachments l JOIN {s}.attachments a ON a.ref = l.ref
                WHERE l.session_id = p_session AND l.ref = n.ref
                  AND (n.size IS NULL OR a.size = n.size))
            AND NOT EXISTS (
                SELECT 1 FROM unnest(p_refs, p_data) AS b(ref, data)
                WHERE b.ref = n.ref AND (n.size IS NULL OR octet_length(b.data) = n.size)))
        THEN
            RETURN NULL;
        END IF;
    END IF;
    v := {s}.append_events(p_session, p_expected, p_ids, p_types, p_ts, p_roles, p_synthetic,
        p_bodies, p_required, p_boundary_at, p_boundary_ids);
    IF v IS NULL OR cardinality(p_refs) = 0 THEN
        RETURN v;
    END IF;
    WITH linked AS (
        INSERT INTO {s}.session_attachments (session_id, ref)
        SELECT p_session, b.ref FROM unnest(p_refs) AS b(ref) ORDER BY b.ref
        ON CONFLICT DO NOTHING
        RETURNING ref
    )
    INSERT INTO {s}.attachments AS a (ref, size, refs, data)
    SELECT b.ref, octet_length(b.data), 1, b.data
    FROM unnest(p_refs, p_data) AS b(ref, data) JOIN linked USING (ref)
    ORDER BY b.ref
    ON CONFLICT (ref) DO UPDATE SET refs = a.refs + 1;
    RETURN v;
END
$fn$;
"""

# Deleting now also unlinks the deleted sessions' attachments, after `purge` took their
# advisory locks (no append to them is in flight, and none begins), in the same transaction:
# each reference is counted down by the number of those sessions holding it, under its row's
# lock (taken in the order of the references), and its row deleted at 0.
_V2_DELETE: Final = """
CREATE FUNCTION {s}.unlink_attachments(p_gone text[]) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    v_refs text[];
    v_counts bigint[];
BEGIN
    WITH gone AS (
        DELETE FROM {s}.session_attachments WHERE session_id = ANY(p_gone) RETURNING ref
    )
    SELECT array_agg(g.ref ORDER BY g.ref), array_agg(g.n ORDER BY g.ref)
    INTO v_refs, v_counts
    FROM (SELECT gone.ref, count(*) AS n FROM gone GROUP BY gone.ref) AS g;
    IF v_refs IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM {s}.attachments a WHERE a.ref = ANY(v_refs) ORDER BY a.ref FOR UPDATE;
    UPDATE {s}.attachments a SET refs = a.refs - g.n
    FROM unnest(v_refs, v_counts) AS g(ref, n) WHERE a.ref = g.ref;
    DELETE FROM {s}.attachments a WHERE a.ref = ANY(v_refs) AND a.refs <= 0;
END
$fn$;

CREATE OR REPLACE FUNCTION {s}.delete_session(p_id text) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    gone text[];
    n bigint;
BEGIN
    WITH d AS (DELETE FROM {s}.sessions WHERE id = p_id RETURNING id)
    SELECT coalesce(array_agg(d.id), ARRAY[]::text[]) INTO gone FROM d;
    n := {s}.purge(gone);
    PERFORM {s}.unlink_attachments(gone);
    RETURN n;
END
$fn$;

CREATE OR REPLACE FUNCTION {s}.delete_expired(p_before timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    gone text[];
    n bigint;
BEGIN
    WITH d AS (
        DELETE FROM {s}.sessions WHERE expires_at IS NOT NULL AND expires_at <= p_before
        RETURNING id
    )
    SELECT coalesce(array_agg(d.id), ARRAY[]::text[]) INTO gone FROM d;
    n := {s}.purge(gone);
    PERFORM {s}.unlink_attachments(gone);
    RETURN n;
END
$fn$;
"""


def _migration_2(schema: str, partitions: int | None, config: str) -> list[str]:
    """The attachment tables and functions; the same in both layouts (see `_V2_TABLES`)."""
    statements = _split(_V2_TABLES)
    lock = str(lock_class(schema))
    for script in (_V2_APPEND, _V2_DELETE):
        statements += _split(script.replace("@LOCK@", lock))
    return statements


# -- migration 3: attachment bytes in chunk rows of a page each ---------------------------------
#
# TOAST stores an EXTERNAL value in chunks of 1,996 bytes, four to an 8 KiB page, plus an index
# entry per chunk: 1 MiB took 132 pages and 8-16 KiB of index (1.04x, and with the 100 event
# rows naming it over the 1.1 MB of issue 25). The bytes now go to `attachment_chunks`, one row
# of up to `CHUNK_BYTES` per heap page: a `bytea` column with STORAGE PLAIN is never compressed
# or moved out of line (the TOAST table made with the table, before the column was set PLAIN,
# stays empty), so a row of 8,120 bytes (the 40 bytes of tuple header and key beside it) fills
# the 8,160 bytes a heap tuple may take. 1 MiB
# is 130 pages and 130 index entries (about 3.6 KiB). Rows are keyed by the attachment's `id`
# (8 bytes, not the 71 of its reference) and the chunk's number; a range read fetches the rows
# of the range only.
#
# The refcount rule is unchanged: `attachments (ref, size, refs, id)` is still the row whose
# lock serializes appends and deletes of a reference. The append that inserts the row (its
# upsert returns refs = 1: an updated row has refs >= 2, since rows at 0 are deleted in the
# transaction that brings them there) writes its chunks; the delete that removes the row at 0
# deletes them, in its transaction.

CHUNK_BYTES: Final = 8_120
"""Bytes per row of `attachment_chunks`: 8,160 (the largest heap tuple of an 8 KiB page) less
the tuple header (24) and the row's id, number and length word (16)."""

_V3_TABLES: Final = f"""
ALTER TABLE {{s}}.attachments ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY;
CREATE TABLE {{s}}.attachment_chunks (
    id bigint NOT NULL,
    n integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (id, n)
);
ALTER TABLE {{s}}.attachment_chunks ALTER COLUMN data SET STORAGE PLAIN;
INSERT INTO {{s}}.attachment_chunks (id, n, data)
SELECT a.id, g.n, substring(a.data FROM g.n * {CHUNK_BYTES} + 1 FOR {CHUNK_BYTES})
FROM {{s}}.attachments a,
     generate_series(0, greatest(octet_length(a.data) - 1, 0) / {CHUNK_BYTES}) AS g(n);
ALTER TABLE {{s}}.attachments DROP COLUMN data;
COMMENT ON COLUMN {{s}}.attachments.id IS 'the key of its bytes in attachment_chunks';
COMMENT ON TABLE {{s}}.attachment_chunks IS
    'the bytes of each attachment in rows of {CHUNK_BYTES} bytes, one to a page';
"""

_V3_APPEND: Final = f"""
CREATE OR REPLACE FUNCTION {{s}}.append_attached(
    p_session text, p_expected bigint, p_ids text[], p_types text[], p_ts bigint[],
    p_roles text[], p_synthetic boolean[], p_bodies bytea[], p_required text[],
    p_boundary_at bigint, p_boundary_ids text[],
    p_refs text[], p_data bytea[], p_named text[], p_named_sizes bigint[]
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    v bigint;
BEGIN
    IF cardinality(p_named) > 0 THEN
        -- Held to the commit (append_events takes it again): no delete of the session can
        -- run meanwhile, so the references read here stay held.
        PERFORM pg_advisory_xact_lock_shared(@LOCK@, hashtext(p_session));
        IF EXISTS (
            SELECT 1 FROM unnest(p_named, p_named_sizes) AS n(ref, size)
            WHERE NOT EXISTS (
                SELECT 1 FROM {{s}}.session_attachments l JOIN {{s}}.attachments a ON a.ref = l.ref
                WHERE l.session_id = p_session AND l.ref = n.ref
                  AND (n.size IS NULL OR a.size = n.size))
            AND NOT EXISTS (
                SELECT 1 FROM unnest(p_refs, p_data) AS b(ref, data)
                WHERE b.ref = n.ref AND (n.size IS NULL OR octet_length(b.data) = n.size)))
        THEN
            RETURN NULL;
        END IF;
    END IF;
    v := {{s}}.append_events(p_session, p_expected, p_ids, p_types, p_ts, p_roles, p_synthetic,
        p_bodies, p_required, p_boundary_at, p_boundary_ids);
    IF v IS NULL OR cardinality(p_refs) = 0 THEN
        RETURN v;
    END IF;
    WITH linked AS (
        INSERT INTO {{s}}.session_attachments (session_id, ref)
        SELECT p_session, b.ref FROM unnest(p_refs) AS b(ref) ORDER BY b.ref
        ON CONFLICT DO NOTHING
        RETURNING ref
    ), counted AS (
        INSERT INTO {{s}}.attachments AS a (ref, size, refs)
        SELECT b.ref, octet_length(b.data), 1
        FROM unnest(p_refs, p_data) AS b(ref, data) JOIN linked USING (ref)
        ORDER BY b.ref
        ON CONFLICT (ref) DO UPDATE SET refs = a.refs + 1
        RETURNING a.ref, a.id, a.refs
    )
    INSERT INTO {{s}}.attachment_chunks (id, n, data)
    SELECT c.id, g.n, substring(b.data FROM g.n * {CHUNK_BYTES} + 1 FOR {CHUNK_BYTES})
    FROM counted c JOIN unnest(p_refs, p_data) AS b(ref, data) USING (ref),
         generate_series(0, greatest(octet_length(b.data) - 1, 0) / {CHUNK_BYTES}) AS g(n)
    WHERE c.refs = 1;
    RETURN v;
END
$fn$;
"""

_V3_UNLINK: Final = """
CREATE OR REPLACE FUNCTION {s}.unlink_attachments(p_gone text[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_refs text[];
    v_counts bigint[];
BEGIN
    WITH gone AS (
        DELETE FROM {s}.session_attachments WHERE session_id = ANY(p_gone) RETURNING ref
    )
    SELECT array_agg(g.ref ORDER BY g.ref), array_agg(g.n ORDER BY g.ref)
    INTO v_refs, v_counts
    FROM (SELECT gone.ref, count(*) AS n FROM gone GROUP BY gone.ref) AS g;
    IF v_refs IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM {s}.attachments a WHERE a.ref = ANY(v_refs) ORDER BY a.ref FOR UPDATE;
    UPDATE {s}.attachments a SET refs = a.refs - g.n
    FROM unnest(v_refs, v_counts) AS g(ref, n) WHERE a.ref = g.ref;
    WITH d AS (
        DELETE FROM {s}.attachments a WHERE a.ref = ANY(v_refs) AND a.refs <= 0 RETURNING a.id
    )
    DELETE FROM {s}.attachment_chunks c USING d WHERE c.id = d.id;
END
$fn$;
"""


def _migration_3(schema: str, partitions: int | None, config: str) -> list[str]:
    """Attachment bytes in chunk rows (see `_V3_TABLES`); the same in both layouts."""
    lock = str(lock_class(schema))
    return _split(_V3_TABLES) + _split(_V3_APPEND.replace("@LOCK@", lock)) + _split(_V3_UNLINK)


def _migration_4(schema: str, partitions: int | None, config: str) -> list[str]:
    """The history index (see `ddl_history`); `partitions` is the events table's."""
    statements: list[str] = []
    for script in migration_4(
        partitions,
        config,
        lock=lock_class(schema),
        tail=lock_class(schema, "tail"),
        chunk=CHUNK_BYTES,
    ):
        statements += _split(script)
    return statements


MIGRATIONS: Final = {1: _migration_1, 2: _migration_2, 3: _migration_3, 4: _migration_4}
"""Each version's statements, by (schema, the events' partitions, the history's text-search
configuration); `schema.ensure_schema` fills the history after those of 4."""


def compose(statement: str, schema: str) -> sql.Composed:
    """`statement` with its `{s}` placeholders replaced by the quoted `schema`."""
    # Only {s} is a placeholder; the DDL holds no other braces.
    return sql.SQL(statement).format(s=sql.Identifier(schema))


def check_version(found: int | None, schema: str, *, migrating: bool) -> None:
    """Refuse a schema version this turnlog cannot use (`found` is None for no schema).

    Raises:
        StoreError: `found` is newer than `SCHEMA_VERSION`; or it is older (or None) and
            `migrating` is False.
    """
    if found is not None and found > SCHEMA_VERSION:
        raise StoreError(
            f"PostgreSQL schema {schema!r} has turnlog schema version {found}, made by a newer "
            f"turnlog than this one (which knows up to {SCHEMA_VERSION}): upgrade turnlog"
        )
    if not migrating and (found is None or found < SCHEMA_VERSION):
        what = "has no turnlog tables" if found is None else f"is at schema version {found}"
        raise StoreError(
            f"PostgreSQL schema {schema!r} {what}; this turnlog needs version {SCHEMA_VERSION}: "
            "run `turnlog migrate --store postgresql://...` (or open the store with "
            "migrate=True)"
        )
