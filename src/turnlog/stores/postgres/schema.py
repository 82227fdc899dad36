# Generated from src/turnlog/stores/postgres/schema_async.py by scripts/async_to_sync.py.
# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.
"""Applying the PostgreSQL schema (the SQL is in `ddl`): check it, migrate it, register keys.

Migrations run in one transaction under an advisory lock keyed on the schema name, so any
number of processes may migrate at once: one does the work, the others wait and find it done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import psycopg
from psycopg import errors as pgerrors

from turnlog.durations import Duration, to_seconds
from turnlog.errors import CorruptData, StoreError
from turnlog.stores.postgres.ddl import (
    MAX_INDEXED_BYTES,
    MIGRATIONS,
    SCHEMA_VERSION,
    check_partitions,
    check_schema_name,
    check_version,
    compose,
)

__all__ = ["SchemaState", "ensure_schema", "migrate", "partition_count"]


class SchemaState(NamedTuple):
    """What `ensure_schema` found (or made): every indexed key of the schema, and how many
    partitions its events table has (None when it is one table)."""

    keys: list[str]
    partitions: int | None


def _schema_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The version recorded in the schema's schema_version table.

    Raises:
        CorruptData: the table holds no version.
    """
    found = conn.execute(compose("SELECT max(version) FROM {s}.schema_version", schema)).fetchone()
    if found is None or not isinstance(found[0], int):
        raise CorruptData(f"PostgreSQL schema {schema!r}: the turnlog schema version is missing")
    return found[0]


def _installed_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The applied schema version; None when the schema has no turnlog tables.

    Raises:
        CorruptData: the schema holds tables of something else.
    """
    # The usual case first, in one indexed catalogue lookup: a schema turnlog made keeps its
    # schema_version table, so once it is seen the version can be read on its own. (Listing
    # the schema's tables scans pg_class: 5-10 ms on a new connection.)
    known = conn.execute(
        "SELECT to_regclass(format('%%I.schema_version', %s::text)) IS NOT NULL", (schema,)
    ).fetchone()
    if known is not None and known[0]:
        return _schema_version(conn, schema)
    # One statement, so one snapshot: reading "is there a schema_version table" and "which
    # tables are there" apart would let another process's migration commit in between and
    # make a half-seen turnlog schema look like someone else's tables.
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (schema,)
        )
    ]
    if "schema_version" in tables:
        return _schema_version(conn, schema)
    if tables:
        raise CorruptData(
            f"PostgreSQL schema {schema!r} holds tables of something else "
            f"({', '.join(tables[:5])}): give turnlog a schema of its own (schema=...)"
        )
    return None


def partition_count(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The number of partitions of the schema's events table; None when it has none."""
    row = conn.execute(
        "SELECT p.partrelid IS NOT NULL, (SELECT count(*) FROM pg_inherits i "
        "WHERE i.inhparent = c.oid) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_partitioned_table p ON p.partrelid = c.oid "
        "WHERE n.nspname = %s AND c.relname = 'events'",
        (schema,),
    ).fetchone()
    if row is None or not row[0]:
        return None
    return int(row[1])


def ensure_schema(
    conn: psycopg.Connection[Any],
    schema: str,
    *,
    partitions: int | None = None,
    migrate: bool = True,
    indexed_keys: Sequence[str] = (),
) -> SchemaState:
    """Check the schema, migrate it when asked, and register `indexed_keys`.

    `conn` must be in autocommit mode. A schema turnlog made, current and with the keys
    registered already (a store opening as usual), costs one round trip.

    Raises:
        InvalidInput: a bad schema name or partition count.
        StoreError: the schema is missing or old and `migrate` is False; it is newer than this
            turnlog; or its partitioning differs from `partitions`.
        CorruptData: the schema holds tables of something else.
    """
    schema = check_schema_name(schema)
    partitions = check_partitions(partitions)
    current = _current(conn, schema)
    found = current[0] if current is not None else _installed_version(conn, schema)
    state = None if current is None else current[1]
    check_version(found, schema, migrating=migrate)
    if found != SCHEMA_VERSION:
        state = None
        with conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('turnlog.migrate:' || %s, 0))",
                (schema,),
            )
            conn.execute(compose("CREATE SCHEMA IF NOT EXISTS {s}", schema))
            found = _installed_version(conn, schema)
            check_version(found, schema, migrating=True)
            if found is None:
                conn.execute(
                    compose(
                        "CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
                        "applied_at timestamptz NOT NULL DEFAULT now())",
                        schema,
                    )
                )
            for version in range((found or 0) + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version](schema, partitions):
                    conn.execute(compose(statement, schema))
                conn.execute(
                    compose("INSERT INTO {s}.schema_version (version) VALUES (%s)", schema),
                    (version,),
                )
    actual = state.partitions if state is not None else partition_count(conn, schema)
    if partitions is not None and actual != partitions:
        made = "without partitions" if actual is None else f"with {actual} partitions"
        raise StoreError(
            f"PostgreSQL schema {schema!r} was made {made}, not {partitions}: partitioning "
            "is fixed when a schema is made; pass partitions=None to use it as it is, or "
            "pick a new schema"
        )
    if state is not None and set(indexed_keys) <= set(state.keys):
        return state
    return SchemaState(_register_keys(conn, schema, indexed_keys), actual)


def _current(conn: psycopg.Connection[Any], schema: str) -> tuple[int, SchemaState] | None:
    """The schema's version, and its indexed keys and partition count (as `partition_count`),
    in one round trip: the usual case, a store opening on a schema turnlog made (every version has
    both tables). None when the statement cannot run (no such schema or table):
    `_installed_version` then finds out what is there.

    Raises:
        CorruptData: the version table holds no version.
    """
    try:
        cursor = conn.execute(
            compose(
                "SELECT (SELECT max(version) FROM {s}.schema_version), "
                "ARRAY(SELECT name FROM {s}.indexed_keys), "
                "(SELECT CASE WHEN p.partrelid IS NULL THEN NULL ELSE (SELECT count(*) "
                "FROM pg_inherits i WHERE i.inhparent = c.oid) END FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "LEFT JOIN pg_partitioned_table p ON p.partrelid = c.oid "
                "WHERE n.nspname = %s AND c.relname = 'events')",
                schema,
            ),
            (schema,),
        )
    except (pgerrors.UndefinedTable, pgerrors.InvalidSchemaName):
        return None
    row = cursor.fetchone()
    if row is None or not isinstance(row[0], int):
        raise CorruptData(f"PostgreSQL schema {schema!r}: the turnlog schema version is missing")
    return row[0], SchemaState(sorted(row[1]), None if row[2] is None else int(row[2]))


def _indexed_keys(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    return [r[0] for r in conn.execute(compose("SELECT name FROM {s}.indexed_keys", schema))]


def _register_keys(conn: psycopg.Connection[Any], schema: str, keys: Sequence[str]) -> list[str]:
    """Add `keys` to the indexed keys, indexing the sessions that have them already."""
    known = _indexed_keys(conn, schema)
    new = sorted(set(keys) - set(known))
    if new:
        with conn.transaction():
            # Writers of sessions wait while the new keys are indexed, so none is missed.
            conn.execute(compose("LOCK TABLE {s}.sessions IN SHARE MODE", schema))
            added = [
                r[0]
                for r in conn.execute(
                    compose(
                        "INSERT INTO {s}.indexed_keys (name) SELECT unnest(%s::text[]) "
                        "ON CONFLICT DO NOTHING RETURNING name",
                        schema,
                    ),
                    (new,),
                )
            ]
            conn.execute(
                compose(
                    "INSERT INTO {s}.session_index (name, value, session_id) "
                    "SELECT k.name, (s.metadata -> k.name)::text, s.id "
                    "FROM {s}.sessions s, unnest(%s::text[]) AS k(name) "
                    "WHERE jsonb_typeof(s.metadata -> k.name) IN ('string', 'number', 'boolean') "
                    "AND octet_length((s.metadata -> k.name)::text) <= %s "
                    "ON CONFLICT DO NOTHING",
                    schema,
                ),
                (added, MAX_INDEXED_BYTES),
            )
        known = _indexed_keys(conn, schema)
    return sorted(known)


def migrate(
    dsn: str,
    *,
    schema: str = "turnlog",
    partitions: int | None = None,
    connect_timeout: Duration = 10.0,
) -> int:
    """Create or upgrade the turnlog schema in the database at `dsn`; what `turnlog migrate` runs.

    Safe to run from several processes at once, and again and again.

    Args:
        dsn: a libpq connection string or URL (`postgresql://user@host:5432/dbname`).
        schema: the PostgreSQL schema that holds the tables.
        partitions: hash-partition the events by session id into this many partitions, when
            the schema is made; None for one table (or to accept what exists).
        connect_timeout: how long to wait for the server: seconds or a `timedelta`.

    Returns:
        The schema version, now `SCHEMA_VERSION`.

    Raises:
        InvalidInput: a bad schema name, partition count or `connect_timeout`.
        StoreError: the server cannot be reached; the schema is newer than this turnlog, or
            partitioned differently.
        CorruptData: the schema holds tables of something else.
    """
    schema = check_schema_name(schema)
    connect_timeout = to_seconds(connect_timeout, "connect_timeout", most=86_400)
    try:
        with psycopg.Connection.connect(
            dsn, autocommit=True, connect_timeout=max(1, round(connect_timeout))
        ) as conn:
            ensure_schema(conn, schema, partitions=partitions, migrate=True)
    except psycopg.OperationalError as exc:
        raise StoreError(f"cannot migrate PostgreSQL schema {schema!r}: {exc}") from exc
    return SCHEMA_VERSION
