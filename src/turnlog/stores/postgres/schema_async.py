"""Applying the PostgreSQL schema (the SQL is in `ddl`): check it, migrate it, register keys.

Migrations run in one transaction under an advisory lock keyed on the schema name, so any
number of processes may migrate at once: one does the work, the others wait and find it done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

import psycopg
from psycopg import errors as pgerrors

from turnlog.durations import Duration, to_seconds
from turnlog.errors import CorruptData, InvalidInput, StoreError
from turnlog.stores.postgres.ddl import (
    MAX_INDEXED_BYTES,
    MIGRATIONS,
    SCHEMA_VERSION,
    check_partitions,
    check_schema_name,
    check_text_search,
    check_version,
    compose,
)
from turnlog.stores.postgres.ddl_history import HISTORY_CONFIG
from turnlog.stores.postgres.rows import events_of, history_columns

Progress = Callable[[str], None]
"""Told what a migration does, a line at a time (`print` will do)."""
FILL_BATCH: Final = 2000
"""How many message events the migration to version 4 indexes at a time."""

__all__ = ["SchemaState", "ensure_schema", "migrate_async", "partition_count"]


class SchemaState(NamedTuple):
    """What `ensure_schema` found (or made): every indexed key of the schema, how many
    partitions its events table has (None when it is one table), and the text-search
    configuration of its history."""

    keys: list[str]
    partitions: int | None
    config: str
    history: bool = True
    """Whether the schema has the history index (version 4): False only for a schema a test
    keeps at an older version (by patching `SCHEMA_VERSION`)."""


async def _schema_version(conn: psycopg.AsyncConnection[Any], schema: str) -> int:
    """The version recorded in the schema's schema_version table.

    Raises:
        CorruptData: the table holds no version.
    """
    found = await (
        await conn.execute(compose("SELECT max(version) FROM {s}.schema_version", schema))
    ).fetchone()
    if found is None or not isinstance(found[0], int):
        raise CorruptData(f"PostgreSQL schema {schema!r}: the turnlog schema version is missing")
    return found[0]


async def _installed_version(conn: psycopg.AsyncConnection[Any], schema: str) -> int | None:
    """The applied schema version; None when the schema has no turnlog tables.

    Raises:
        CorruptData: the schema holds tables of something else.
    """
    # The usual case first, in one indexed catalogue lookup: a schema turnlog made keeps its
    # schema_version table, so once it is seen the version can be read on its own. (Listing
    # the schema's tables scans pg_class: 5-10 ms on a new connection.)
    known = await (
        await conn.execute(
            "SELECT to_regclass(format('%%I.schema_version', %s::text)) IS NOT NULL", (schema,)
        )
    ).fetchone()
    if known is not None and known[0]:
        return await _schema_version(conn, schema)
    # One statement, so one snapshot: reading "is there a schema_version table" and "which
    # tables are there" apart would let another process's migration commit in between and
    # make a half-seen turnlog schema look like someone else's tables.
    tables = [
        r[0]
        async for r in await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (schema,)
        )
    ]
    if "schema_version" in tables:
        return await _schema_version(conn, schema)
    if tables:
        raise CorruptData(
            f"PostgreSQL schema {schema!r} holds tables of something else "
            f"({', '.join(tables[:5])}): give turnlog a schema of its own (schema=...)"
        )
    return None


async def partition_count(conn: psycopg.AsyncConnection[Any], schema: str) -> int | None:
    """The number of partitions of the schema's events table; None when it has none."""
    row = await (
        await conn.execute(
            "SELECT p.partrelid IS NOT NULL, (SELECT count(*) FROM pg_inherits i "
            "WHERE i.inhparent = c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_partitioned_table p ON p.partrelid = c.oid "
            "WHERE n.nspname = %s AND c.relname = 'events'",
            (schema,),
        )
    ).fetchone()
    if row is None or not row[0]:
        return None
    return int(row[1])


async def ensure_schema(
    conn: psycopg.AsyncConnection[Any],
    schema: str,
    *,
    partitions: int | None = None,
    migrate: bool = True,
    indexed_keys: Sequence[str] = (),
    text_search: str | None = None,
    progress: Progress | None = None,
) -> SchemaState:
    """Check the schema, migrate it when asked, and register `indexed_keys`.

    `conn` must be in autocommit mode. A schema turnlog made, current and with the keys
    registered already (a store opening as usual), costs one round trip. `text_search` is
    the text-search configuration of the history when the migration makes it (None:
    `simple`), else it must be the schema's (None: whatever it is). `progress` is told the
    steps of a migration.

    Raises:
        InvalidInput: a bad schema name or partition count; a text-search configuration the
            server does not have.
        StoreError: the schema is missing or old and `migrate` is False; it is newer than this
            turnlog; its partitioning differs from `partitions`; its history's text-search
            configuration differs from `text_search`.
        CorruptData: the schema holds tables of something else.
    """
    schema = check_schema_name(schema)
    partitions = check_partitions(partitions)
    text_search = check_text_search(text_search)
    current = await _current(conn, schema)
    found = current[0] if current is not None else await _installed_version(conn, schema)
    state = None if current is None else current[1]
    check_version(found, schema, migrating=migrate)
    if found != SCHEMA_VERSION:
        state = None
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('turnlog.migrate:' || %s, 0))",
                (schema,),
            )
            await conn.execute(compose("CREATE SCHEMA IF NOT EXISTS {s}", schema))
            found = await _installed_version(conn, schema)
            check_version(found, schema, migrating=True)
            if found is None:
                await conn.execute(
                    compose(
                        "CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
                        "applied_at timestamptz NOT NULL DEFAULT now())",
                        schema,
                    )
                )
            config = text_search or HISTORY_CONFIG
            if (found or 0) < 4:
                await _check_config(conn, config)
            layout = partitions if found is None else await partition_count(conn, schema)
            for version in range((found or 0) + 1, SCHEMA_VERSION + 1):
                if progress is not None:
                    progress(f"PostgreSQL schema {schema!r}: migrating to version {version}")
                for statement in MIGRATIONS[version](schema, layout, config):
                    await conn.execute(compose(statement, schema))
                if version == 4:
                    await _fill_history(conn, schema, config, progress)
                await conn.execute(
                    compose("INSERT INTO {s}.schema_version (version) VALUES (%s)", schema),
                    (version,),
                )
            found = SCHEMA_VERSION
    config = state.config if state is not None else await _history_config(conn, schema)
    if text_search is not None and config != text_search:
        raise StoreError(
            f"PostgreSQL schema {schema!r} indexes its history with the text-search "
            f"configuration {config!r}, not {text_search!r}: it is fixed when the history is "
            "made; pass text_search=None to use it as it is, or pick a new schema"
        )
    actual = state.partitions if state is not None else await partition_count(conn, schema)
    if partitions is not None and actual != partitions:
        made = "without partitions" if actual is None else f"with {actual} partitions"
        raise StoreError(
            f"PostgreSQL schema {schema!r} was made {made}, not {partitions}: partitioning "
            "is fixed when a schema is made; pass partitions=None to use it as it is, or "
            "pick a new schema"
        )
    if state is not None and set(indexed_keys) <= set(state.keys):
        return state
    keys = await _register_keys(conn, schema, indexed_keys)
    return SchemaState(keys, actual, config, history=(found or 0) >= 4)


async def _check_config(conn: psycopg.AsyncConnection[Any], config: str) -> None:
    """Raise `InvalidInput` unless the server has the text-search configuration `config`."""
    names = [
        r[0]
        async for r in await conn.execute(
            "SELECT cfgname FROM pg_ts_config WHERE pg_ts_config_is_visible(oid) ORDER BY 1"
        )
    ]
    if config not in names:
        raise InvalidInput(
            f"PostgreSQL has no text-search configuration {config!r}: use one of "
            f"{', '.join(names)} (or create it first)"
        )


async def _history_config(conn: psycopg.AsyncConnection[Any], schema: str) -> str:
    """The text-search configuration of the schema's history (`HISTORY_CONFIG` for a schema
    older than version 4, which has none: only a test makes one and uses it)."""
    known = await (
        await conn.execute(
            "SELECT to_regclass(format('%%I.history_settings', %s::text)) IS NOT NULL", (schema,)
        )
    ).fetchone()
    if known is None or not known[0]:
        return HISTORY_CONFIG
    row = await (
        await conn.execute(compose("SELECT config FROM {s}.history_settings", schema))
    ).fetchone()
    if row is None:
        raise CorruptData(
            f"PostgreSQL schema {schema!r}: the history's text-search configuration is missing"
        )
    return str(row[0])


_FILL_READ: Final = (
    'SELECT e.session_id, e.seq, e.id, e.type, e."timestamp", e.synthetic, e.body '
    "FROM {s}.events e WHERE e.type = 'MESSAGE' AND NOT e.synthetic "
    "AND (e.session_id, e.seq) > (%s::text, %s::bigint) ORDER BY e.session_id, e.seq LIMIT %s"
)
_FILL_WRITE: Final = (
    'INSERT INTO {s}.history (session_id, seq, role, said_at, "timestamp", tools, tsv) '
    "SELECT u.sid, u.seq, u.role, u.said, u.ts, string_to_array(u.tools, E'\\x1f'), "
    "to_tsvector(%s::regconfig, u.words) FROM unnest(%s::text[], %s::bigint[], %s::text[], "
    "%s::bigint[], %s::bigint[], %s::text[], %s::text[]) AS u(sid, seq, role, said, ts, tools, "
    "words)"
)


async def _fill_history(
    conn: psycopg.AsyncConnection[Any], schema: str, config: str, progress: Progress | None
) -> None:
    """Index the message events of the log (migration 4), `FILL_BATCH` at a time in log
    order, in the migration's transaction (the events are locked against writers)."""
    counted = await (
        await conn.execute(
            compose(
                "SELECT count(*) FROM {s}.events WHERE type = 'MESSAGE' AND NOT synthetic", schema
            )
        )
    ).fetchone()
    total = 0 if counted is None else int(counted[0])
    done, last = 0, ("", 0)
    read, write = compose(_FILL_READ, schema), compose(_FILL_WRITE, schema)
    while done < total:
        rows = await (await conn.execute(read, (*last, FILL_BATCH), binary=True)).fetchall()
        if not rows:
            break
        columns: list[list[Any]] = [[] for _ in range(7)]
        at = 0
        while at < len(rows):  # a run of one session's rows at a time
            sid = rows[at][0]
            end = at
            while end < len(rows) and rows[end][0] == sid:
                end += 1
            for row, event in zip(
                rows[at:end], events_of(sid, [r[1:] for r in rows[at:end]]), strict=True
            ):
                words, said, tools = history_columns(event, int(row[4]))
                if words is None or event.message is None:
                    continue
                for column, value in zip(
                    columns,
                    (sid, row[1], event.message.role, said, row[4], tools, words),
                    strict=True,
                ):
                    column.append(value)
            at = end
        if columns[0]:
            await conn.execute(write, (config, *columns))
        done += len(rows)
        last = (rows[-1][0], int(rows[-1][1]))
        if progress is not None:
            progress(f"PostgreSQL schema {schema!r}: {done:,} of {total:,} messages indexed")


async def _current(
    conn: psycopg.AsyncConnection[Any], schema: str
) -> tuple[int, SchemaState] | None:
    """The schema's version, and its indexed keys, partition count (as `partition_count`)
    and history configuration, in one round trip: the usual case, a store opening on a schema
    turnlog made (every version since 4 has these tables). None when the statement cannot run
    (no such schema or table): `_installed_version` then finds out what is there.

    Raises:
        CorruptData: the version table holds no version.
    """
    try:
        cursor = await conn.execute(
            compose(
                "SELECT (SELECT max(version) FROM {s}.schema_version), "
                "ARRAY(SELECT name FROM {s}.indexed_keys), "
                "(SELECT CASE WHEN p.partrelid IS NULL THEN NULL ELSE (SELECT count(*) "
                "FROM pg_inherits i WHERE i.inhparent = c.oid) END FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "LEFT JOIN pg_partitioned_table p ON p.partrelid = c.oid "
                "WHERE n.nspname = %s AND c.relname = 'events'), "
                "(SELECT config FROM {s}.history_settings)",
                schema,
            ),
            (schema,),
        )
    except (pgerrors.UndefinedTable, pgerrors.InvalidSchemaName):
        return None
    row = await cursor.fetchone()
    if row is None or not isinstance(row[0], int):
        raise CorruptData(f"PostgreSQL schema {schema!r}: the turnlog schema version is missing")
    return row[0], SchemaState(sorted(row[1]), None if row[2] is None else int(row[2]), str(row[3]))


async def _indexed_keys(conn: psycopg.AsyncConnection[Any], schema: str) -> list[str]:
    return [
        r[0] async for r in await conn.execute(compose("SELECT name FROM {s}.indexed_keys", schema))
    ]


async def _register_keys(
    conn: psycopg.AsyncConnection[Any], schema: str, keys: Sequence[str]
) -> list[str]:
    """Add `keys` to the indexed keys, indexing the sessions that have them already."""
    known = await _indexed_keys(conn, schema)
    new = sorted(set(keys) - set(known))
    if new:
        async with conn.transaction():
            # Writers of sessions wait while the new keys are indexed, so none is missed.
            await conn.execute(compose("LOCK TABLE {s}.sessions IN SHARE MODE", schema))
            added = [
                r[0]
                async for r in await conn.execute(
                    compose(
                        "INSERT INTO {s}.indexed_keys (name) SELECT unnest(%s::text[]) "
                        "ON CONFLICT DO NOTHING RETURNING name",
                        schema,
                    ),
                    (new,),
                )
            ]
            await conn.execute(
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
        known = await _indexed_keys(conn, schema)
    return sorted(known)


async def migrate_async(
    dsn: str,
    *,
    schema: str = "turnlog",
    partitions: int | None = None,
    connect_timeout: Duration = 10.0,
    text_search: str | None = None,
    progress: Progress | None = None,
) -> int:
    """Create or upgrade the turnlog schema in the database at `dsn`; what `turnlog migrate` runs.

    Safe to run from several processes at once, and again and again.

    Args:
        dsn: a libpq connection string or URL (`postgresql://user@host:5432/dbname`).
        schema: the PostgreSQL schema that holds the tables.
        partitions: hash-partition the events by session id into this many partitions, when
            the schema is made; None for one table (or to accept what exists).
        connect_timeout: how long to wait for the server: seconds or a `timedelta`.
        text_search: the text-search configuration of the history index, when the migration
            makes it (None: `simple`); else it must be the schema's (None: whatever it is).
        progress: told each step (and how many messages the history index holds so far,
            when the migration to version 4 fills it); `print` will do.

    Returns:
        The schema version, now `SCHEMA_VERSION`.

    Raises:
        InvalidInput: a bad schema name, partition count, `connect_timeout` or text-search
            configuration (or one the server does not have).
        StoreError: the server cannot be reached; the schema is newer than this turnlog, or
            partitioned or configured differently.
        CorruptData: the schema holds tables of something else.
    """
    schema = check_schema_name(schema)
    connect_timeout = to_seconds(connect_timeout, "connect_timeout", most=86_400)
    try:
        async with await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=max(1, round(connect_timeout))
        ) as conn:
            await ensure_schema(
                conn,
                schema,
                partitions=partitions,
                migrate=True,
                text_search=text_search,
                progress=progress,
            )
    except psycopg.OperationalError as exc:
        raise StoreError(f"cannot migrate PostgreSQL schema {schema!r}: {exc}") from exc
    return SCHEMA_VERSION
