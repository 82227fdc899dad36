"""Migration 4 of the PostgreSQL schema: the history index (recall), the SQL only.

`history` holds one row per indexed message event (`turnlog.history.indexed_text` is not None):
its `(session_id, seq)`, role, `said_at` and timestamp (microseconds), the names of the tools it
calls or answers, and `tsv`, the `tsvector` of its text in the schema's text-search
configuration (`simple` unless another was chosen when the schema got its history). The text
is not kept: a hit's snippet is made from the event's body, read for the hits only.

The client sends each event's text already cut into words the way the query is
(`rows.history_words`: lower-cased, accents of Latin, Greek and Cyrillic letters removed, runs
of the no-space scripts as character pairs, separated by spaces), so PostgreSQL's parser sees
only letters, digits and spaces, and a query term is found whatever the server's locale.

The index: GIN on `(session_id, tsv)` with the `btree_gin` extension, so a search of one session
in a store of many is one index scan intersecting the session's entry with the query's lexemes.
Where `btree_gin` cannot be installed (not shipped, or no privilege), GIN on `tsv` alone, and
the planner combines it with the primary key's `session_id` prefix (a BitmapAnd).

`history` is partitioned like `events` (hash on `session_id`, the same modulus), and written
by the append functions in their statement, from the column arrays the client sends; `purge`
removes a deleted session's rows in the delete's transaction. The migration locks `events`
against writers while the DDL runs and `schema.ensure_schema` fills the table from the log (in
the same transaction).
"""

from __future__ import annotations

from typing import Final

__all__ = ["HISTORY_CONFIG", "migration_4"]

HISTORY_CONFIG: Final = "simple"
"""The text-search configuration of a schema's history unless another is chosen."""

_TABLES: Final = """
LOCK TABLE {s}.events IN SHARE MODE;
CREATE TABLE {s}.history_settings (config text NOT NULL);
INSERT INTO {s}.history_settings (config) VALUES ('@CFGNAME@');
CREATE TABLE {s}.history (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    role text NOT NULL,
    said_at bigint NOT NULL,
    "timestamp" bigint NOT NULL,
    tools text[] NOT NULL,
    tsv tsvector NOT NULL,
    PRIMARY KEY (session_id, seq)
)@PARTITION@;
COMMENT ON TABLE {s}.history IS 'the history index: one row per indexed message event';
COMMENT ON COLUMN {s}.history.said_at IS 'microseconds since 1970-01-01 UTC';
"""

# btree_gin when it can be had (a subtransaction: a refused CREATE EXTENSION is undone), else
# GIN on the tsvector alone.
_INDEX: Final = """
DO $fn$
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS btree_gin;
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin') THEN
        EXECUTE 'CREATE INDEX history_search ON {s}.history USING gin (session_id, tsv)';
    ELSE
        EXECUTE 'CREATE INDEX history_search ON {s}.history USING gin (tsv)';
    END IF;
END
$fn$;
"""

# The OR of the terms, each through plainto_tsquery on its own: no character of a term is ever
# query syntax, and a term the configuration drops (a stop word) adds nothing.
_FUNCTIONS: Final = """
CREATE FUNCTION {s}.history_tsquery(p_terms text[]) RETURNS tsquery
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    q tsquery;
    t text;
BEGIN
    FOREACH t IN ARRAY coalesce(p_terms, ARRAY[]::text[]) LOOP
        IF q IS NULL THEN
            q := plainto_tsquery(@CFG@, t);
        ELSE
            q := q || plainto_tsquery(@CFG@, t);
        END IF;
    END LOOP;
    RETURN q;
END
$fn$;
"""

_DROP_OLD: Final = """
DROP FUNCTION {s}.append_attached(text, bigint, text[], text[], bigint[], text[], boolean[],
    bytea[], text[], bigint, text[], text[], bytea[], text[], bigint[]);
DROP FUNCTION {s}.append_events(text, bigint, text[], text[], bigint[], text[], boolean[],
    bytea[], text[], bigint, text[]);
DROP FUNCTION {s}.append_one(text, bigint, text, text, bigint, text, boolean, bytea);
"""

_HISTORY_ONE: Final = """
    IF p_text IS NOT NULL THEN
        INSERT INTO {s}.history (session_id, seq, role, said_at, "timestamp", tools, tsv)
        VALUES (p_session, v + 1, p_role, p_said, p_ts, string_to_array(p_tools, E'\\x1f'),
            to_tsvector(@CFG@, p_text));
    END IF;
"""

_HISTORY_MANY: Final = """
    INSERT INTO {s}.history (session_id, seq, role, said_at, "timestamp", tools, tsv)
    SELECT p_session, v + u.o, u.role, u.said, u.ts, string_to_array(u.tools, E'\\x1f'),
        to_tsvector(@CFG@, u.text)
    FROM unnest(p_texts, p_said, p_tools, p_roles, p_ts)
        WITH ORDINALITY AS u(text, said, tools, role, ts, o)
    WHERE u.text IS NOT NULL;
"""

# The append functions of migration 1 (and `append_attached` of 3) with the history columns:
# the same checks, then the events, their ids, their history rows, the boundary. (A call of
# `append_one` without them, as a schema-3 turnlog made, still appends: unindexed.)
_APPEND: Final = """
CREATE FUNCTION {s}.append_one(
    p_session text, p_expected bigint, p_id text, p_type text, p_ts bigint, p_role text,
    p_synthetic boolean, p_body bytea, p_text text DEFAULT NULL, p_said bigint DEFAULT NULL,
    p_tools text DEFAULT ''
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    v bigint := p_expected;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(@LOCK@, hashtext(p_session));
    IF v IS NULL THEN
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
    @HISTORY_ONE@
    RETURN v + 1;
END
$fn$;

CREATE FUNCTION {s}.append_events(
    p_session text, p_expected bigint, p_ids text[], p_types text[], p_ts bigint[],
    p_roles text[], p_synthetic boolean[], p_bodies bytea[], p_required text[],
    p_boundary_at bigint, p_boundary_ids text[], p_texts text[], p_said bigint[],
    p_tools text[]
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    v bigint := p_expected;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(@LOCK@, hashtext(p_session));
    IF v IS NULL THEN
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
    @HISTORY_MANY@
    IF p_boundary_at IS NOT NULL THEN
        UPDATE {s}.sessions
        SET boundary_seq = v + p_boundary_at, boundary_ids = p_boundary_ids
        WHERE id = p_session AND (boundary_seq IS NULL OR boundary_seq < v + p_boundary_at);
    END IF;
    RETURN v + cardinality(p_ids);
END
$fn$;
"""

_APPEND_ATTACHED: Final = """
CREATE FUNCTION {s}.append_attached(
    p_session text, p_expected bigint, p_ids text[], p_types text[], p_ts bigint[],
    p_roles text[], p_synthetic boolean[], p_bodies bytea[], p_required text[],
    p_boundary_at bigint, p_boundary_ids text[], p_texts text[], p_said bigint[],
    p_tools text[], p_refs text[], p_data bytea[], p_named text[], p_named_sizes bigint[]
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
        p_bodies, p_required, p_boundary_at, p_boundary_ids, p_texts, p_said, p_tools);
    IF v IS NULL OR cardinality(p_refs) = 0 THEN
        RETURN v;
    END IF;
    WITH linked AS (
        INSERT INTO {s}.session_attachments (session_id, ref)
        SELECT p_session, b.ref FROM unnest(p_refs) AS b(ref) ORDER BY b.ref
        ON CONFLICT DO NOTHING
        RETURNING ref
    ), counted AS (
        INSERT INTO {s}.attachments AS a (ref, size, refs)
        SELECT b.ref, octet_length(b.data), 1
        FROM unnest(p_refs, p_data) AS b(ref, data) JOIN linked USING (ref)
        ORDER BY b.ref
        ON CONFLICT (ref) DO UPDATE SET refs = a.refs + 1
        RETURNING a.ref, a.id, a.refs
    )
    INSERT INTO {s}.attachment_chunks (id, n, data)
    SELECT c.id, g.n, substring(b.data FROM g.n * @CHUNK@ + 1 FOR @CHUNK@)
    FROM counted c JOIN unnest(p_refs, p_data) AS b(ref, data) USING (ref),
         generate_series(0, greatest(octet_length(b.data) - 1, 0) / @CHUNK@) AS g(n)
    WHERE c.refs = 1;
    RETURN v;
END
$fn$;
"""

# `purge` of migration 1 with the history rows.
_PURGE: Final = """
CREATE OR REPLACE FUNCTION {s}.purge(p_gone text[]) RETURNS bigint LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(@LOCK@, k)
    FROM (SELECT DISTINCT hashtext(g) AS k FROM unnest(p_gone) AS g ORDER BY 1) AS keys;
    IF cardinality(p_gone) > 0 THEN
        DELETE FROM {s}.events WHERE session_id = ANY(p_gone);
        @IDS_DELETE@
        DELETE FROM {s}.history WHERE session_id = ANY(p_gone);
        DELETE FROM {s}.session_index WHERE session_id = ANY(p_gone);
    END IF;
    RETURN cardinality(p_gone);
END
$fn$;
"""


def migration_4(
    partitions: int | None, config: str, *, lock: int, tail: int, chunk: int
) -> list[str]:
    """The scripts of migration 4 (for `ddl._split`) for a schema whose events have
    `partitions` partitions (None: one table), with `config` (a checked, existing text-search
    configuration); `lock` and `tail` are the schema's advisory-lock classes, `chunk` the
    attachment chunk size."""
    pieces = {
        "CFGNAME": config,
        "CFG": f"'{config}'::regconfig",
        "LOCK": str(lock),
        "TAIL": str(tail),
        "CHUNK": str(chunk),
        "HISTORY_ONE": _HISTORY_ONE.strip(),
        "HISTORY_MANY": _HISTORY_MANY.strip(),
    }
    if partitions is None:
        pieces |= {"PARTITION": "", "IDS_INSERT_ONE": "", "IDS_INSERT_MANY": "", "IDS_DELETE": ""}
    else:
        pieces |= {
            "PARTITION": " PARTITION BY HASH (session_id)",
            "IDS_INSERT_ONE": (
                "INSERT INTO {s}.event_ids (id, session_id) VALUES (p_id, p_session);"
            ),
            "IDS_INSERT_MANY": (
                "INSERT INTO {s}.event_ids (id, session_id) "
                "SELECT u.id, p_session FROM unnest(p_ids) AS u(id) ORDER BY u.id;"
            ),
            "IDS_DELETE": "DELETE FROM {s}.event_ids WHERE session_id = ANY(p_gone);",
        }
    scripts = [_fill(_TABLES, pieces)]
    if partitions is not None:
        scripts += [
            f"CREATE TABLE {{s}}.history_p{i} PARTITION OF {{s}}.history "
            f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
            for i in range(partitions)
        ]
    for script in (_INDEX, _FUNCTIONS, _DROP_OLD, _APPEND, _APPEND_ATTACHED, _PURGE):
        scripts.append(_fill(script, pieces))
    return scripts


def _fill(script: str, pieces: dict[str, str]) -> str:
    # the history pieces hold pieces of their own (@CFG@): fill them first
    for name in ("HISTORY_ONE", "HISTORY_MANY"):
        script = script.replace(f"@{name}@", pieces[name])
    for name, piece in pieces.items():
        script = script.replace(f"@{name}@", piece)
    return script
