"""The statements `PostgresStore` and `AsyncPostgresStore` run, rendered once per schema.

Session ids, metadata and everything else are bound parameters; the schema name is the only
thing put into the SQL text, quoted by `psycopg.sql.Identifier`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from psycopg import sql
from psycopg.abc import AdaptContext

from turnlog.stores.postgres.ddl import lock_class

__all__ = ["Queries"]

_EVENT_COLUMNS: Final = 'e.seq, e.id, e.type, e."timestamp", e.synthetic, e.body'

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
    "WITH e AS (INSERT INTO {s}.events "
    '(session_id, seq, id, type, "timestamp", role, synthetic, body) '
    "SELECT %(sid)s::text, %(v)s::bigint + 1, %(id)s::text, %(type)s::text, %(ts)s::bigint, "
    "%(role)s::text, %(syn)s::boolean, %(body)s::bytea "
    "WHERE EXISTS (SELECT 1 FROM {s}.sessions s WHERE s.id = %(sid)s::text FOR KEY SHARE) "
    "AND (%(v)s::bigint = 0 OR EXISTS (SELECT 1 FROM {s}.events e "
    "WHERE e.session_id = %(sid)s::text AND e.seq = %(v)s::bigint)) "
    "RETURNING seq)"
    "@HISTORY@"
)

# The same, fenced for an append at a tail this handle remembers: the event at seq v must
# still be the one this handle wrote last (a version alone cannot tell a session deleted and
# created again). No row back, or a unique violation, means the memory is stale.
_FENCED_ONE: Final = (
    "WITH e AS (INSERT INTO {s}.events "
    '(session_id, seq, id, type, "timestamp", role, synthetic, body) '
    "SELECT %(sid)s::text, %(v)s::bigint + 1, %(id)s::text, %(type)s::text, %(ts)s::bigint, "
    "%(role)s::text, %(syn)s::boolean, %(body)s::bytea "
    "WHERE EXISTS (SELECT 1 FROM {s}.sessions s WHERE s.id = %(sid)s::text FOR KEY SHARE) "
    "AND EXISTS (SELECT 1 FROM {s}.events e "
    "WHERE e.session_id = %(sid)s::text AND e.seq = %(v)s::bigint AND e.id = %(last)s::text) "
    "RETURNING seq)"
    "@HISTORY@"
)

# ... and, in the same statement, the event's history row (when it is indexed).
_HISTORY_ONE: Final = (
    ", h AS (INSERT INTO {s}.history "
    '(session_id, seq, role, said_at, "timestamp", tools, tsv) '
    "SELECT %(sid)s::text, e.seq, %(role)s::text, %(said)s::bigint, %(ts)s::bigint, "
    "string_to_array(%(tools)s::text, E'\\x1f'), to_tsvector(@CFG@, %(text)s::text) "
    "FROM e WHERE %(text)s::text IS NOT NULL) "
    "SELECT seq FROM e"
)

# A search of the history: the rows matching the query's terms (`history_tsquery`, evaluated
# once, as an InitPlan) among those passing the filters, ranked by ts_rank_cd (length
# normalized: 1 + log of the words), best first, then in log order; the best k joined to their
# events (for the snippet and id), by the events' primary key.
_QUERY: Final = "(SELECT {s}.history_tsquery(%(terms)s::text[]))"
_FILTERS: Final = (
    "AND (%(before)s::bigint IS NULL OR h.said_at < %(before)s::bigint) "
    "AND (%(after)s::bigint IS NULL OR h.said_at > %(after)s::bigint) "
    "AND (%(roles)s::text[] IS NULL OR h.role = ANY(%(roles)s::text[])) "
    "AND (%(tools)s::text[] IS NULL OR h.tools && %(tools)s::text[]) "
)


@dataclass(frozen=True)
class Queries:
    """The statements, rendered once for one schema."""

    append: str
    append_one: str
    append_attached: str
    """`append` with the attachments of the batch (`Batch.call` picks it)."""
    check: str
    put_session: str
    find_session: str
    list_sessions: str
    delete_session: str
    delete_expired: str
    find_indexed: str
    find_contained: str
    version: str
    events: str
    events_of_types: str
    events_after: str
    event_by_id: str
    events_by_ids: str
    set_body: str
    view: str
    tail: str
    stored_ids: str
    held_attachments: str
    read_attachment: str
    search_history: str
    """The best k history rows of one session for a query, with their events."""
    search_sessions: str
    """The same across the sessions named (all when NULL), whose metadata matches."""
    events_by_id: str
    """Whether the session exists, and its events of some ids (any type), by the id index."""
    history: bool
    """Whether the appends write the history index (and take its columns)."""
    direct_one: str | None
    """The one-statement version-checked append of one event; None on a partitioned schema."""
    fenced_one: str | None
    """The same, fenced by the newest event id a handle remembers; None when partitioned."""

    @classmethod
    def render(
        cls,
        schema: str,
        conn: AdaptContext,
        *,
        partitioned: bool,
        config: str,
        history: bool = True,
    ) -> Queries:
        """The statements for `schema`, quoted for `conn` (a connection of the store).

        `partitioned`: the events table is hash-partitioned (no one-statement appends then).
        `config`: the text-search configuration of the schema's history (a checked name).
        `history`: the schema has the history (False: a test's schema older than version 4;
        the appends then take no history columns, and nothing can be searched).
        """

        def q(text: str) -> str:
            if not history:
                text = re.sub(r", %s::text\[\], %s::bigint\[\], %s::text\[\]\)$", ")", text)
                text = text.replace(", %s::text, %s::bigint, %s::text)", ")")
                text = text.replace(
                    ", %s::text[], %s::bigint[], %s::text[], %s::text[], %b", ", %s::text[], %b"
                )
            text = text.replace("@HISTORY@", _HISTORY_ONE if history else " SELECT seq FROM e")
            text = text.replace("@CFG@", f"'{config}'::regconfig")
            composed = sql.SQL(text).format(s=sql.Identifier(schema))
            return composed.as_string(conn)

        lock = lock_class(schema)
        session_cols = "s.id, s.created_at, s.expires_at, s.metadata::text"
        session_events = (
            f"SELECT {_EVENT_COLUMNS} FROM {{s}}.sessions s "
            "LEFT JOIN {s}.events e ON e.session_id = s.id AND e.session_id = %(sid)s"
        )
        return cls(
            append=q(
                "SELECT {s}.append_events(%s, %s, %s::text[], %s::text[], %s::bigint[], "
                "%s::text[], %s::boolean[], %s::bytea[], %s::text[], %s, %s::text[], "
                "%s::text[], %s::bigint[], %s::text[])"
            ),
            append_attached=q(
                "SELECT {s}.append_attached(%s, %s, %s::text[], %s::text[], %s::bigint[], "
                "%s::text[], %s::boolean[], %s::bytea[], %s::text[], %s, %s::text[], "
                "%s::text[], %s::bigint[], %s::text[], "
                "%s::text[], %b::bytea[], %s::text[], %s::bigint[])"
            ),
            append_one=q(
                "SELECT {s}.append_one(%s, %s, %s::text, %s::text, %s::bigint, %s::text, "
                "%s::boolean, %s::bytea, %s::text, %s::bigint, %s::text)"
            ),
            check=q("SELECT * FROM {s}.append_check(%s, %s, %s::text[], %s::text[])"),
            put_session=q("SELECT {s}.put_session(%s, %s, %s, %s::jsonb, %s)"),
            find_session=q(f"SELECT {session_cols} FROM {{s}}.sessions s WHERE s.id = %s"),
            list_sessions=q(
                f"SELECT {session_cols} FROM {{s}}.sessions s "
                "ORDER BY s.created_at DESC, s.id DESC LIMIT %s"
            ),
            # A delete takes the sessions' advisory locks (exclusive) before the function
            # deletes their rows: an append function holds the lock shared and may then update
            # the row (a boundary), so the other order can deadlock. The function's own
            # statements run on fresh snapshots, after the lock is held.
            delete_session=q(
                "SELECT {s}.delete_session(%(id)s) FROM (SELECT pg_advisory_xact_lock("
                f"{lock}, hashtext(%(id)s::text))) AS l"
            ),
            delete_expired=q(
                "SELECT {s}.delete_expired(%(before)s) FROM (SELECT count(pg_advisory_xact_lock("
                f"{lock}, k.k)) FROM (SELECT DISTINCT hashtext(s.id) AS k FROM {{s}}.sessions s "
                "WHERE s.expires_at IS NOT NULL AND s.expires_at <= %(before)s ORDER BY 1) AS k) "
                "AS l"
            ),
            # An indexed key: the index table, or a containment query for a value too long
            # to be indexed. The value is compared as jsonb text, so the type must match too.
            find_indexed=q(
                f"SELECT {session_cols} FROM {{s}}.sessions s WHERE s.id IN ("
                "SELECT i.session_id FROM {s}.session_index i "
                "WHERE i.name = %(name)s AND i.value = (%(value)s::jsonb)::text) "
                "AND octet_length((%(value)s::jsonb)::text) <= %(limit)s "
                f"UNION ALL SELECT {session_cols} FROM {{s}}.sessions s "
                "WHERE octet_length((%(value)s::jsonb)::text) > %(limit)s "
                "AND s.metadata @> %(contains)s::jsonb "
                "AND jsonb_typeof(s.metadata -> %(name)s) = %(type)s "
                "AND s.metadata ->> %(name)s = %(text)s ORDER BY 2, 1"
            ),
            find_contained=q(
                f"SELECT {session_cols} FROM {{s}}.sessions s "
                "WHERE s.metadata @> %(contains)s::jsonb "
                "AND jsonb_typeof(s.metadata -> %(name)s) = %(type)s "
                "AND s.metadata ->> %(name)s = %(text)s ORDER BY s.created_at, s.id"
            ),
            version=q(
                "SELECT coalesce((SELECT max(e.seq) FROM {s}.events e "
                "WHERE e.session_id = %(sid)s), 0) FROM {s}.sessions s WHERE s.id = %(sid)s"
            ),
            events=q(f"{session_events} WHERE s.id = %(sid)s ORDER BY e.seq"),
            events_of_types=q(
                f"{session_events} AND e.type = ANY(%(types)s::text[]) "
                "WHERE s.id = %(sid)s ORDER BY e.seq"
            ),
            # A page of the log: a range of the primary key (seqs are dense from 1).
            events_after=q(
                f"{session_events} AND e.seq > %(after)s AND e.seq <= %(last)s "
                "WHERE s.id = %(sid)s ORDER BY e.seq"
            ),
            event_by_id=q(
                f"SELECT {_EVENT_COLUMNS} FROM {{s}}.events e WHERE e.session_id = %s AND e.id = %s"
            ),
            events_by_ids=q(
                f"SELECT {_EVENT_COLUMNS} FROM {{s}}.events e "
                "WHERE e.session_id = %s AND e.id = ANY(%s) AND e.type = 'MESSAGE'"
            ),
            # record_tokens: a body written again with its token count (nothing else changes)
            set_body=q(
                "UPDATE {s}.events SET body = %s::bytea WHERE session_id = %s AND seq = %s "
                "AND id = %s"
            ),
            # The end of a log, newest first, for the view rules: whether the session exists,
            # then a page of events (a range of the primary key, read backwards).
            tail=q(
                "SELECT e.seq, e.type, e.role, e.synthetic, e.body FROM {s}.sessions s "
                "LEFT JOIN LATERAL (SELECT * FROM {s}.events e WHERE e.session_id = %(sid)s "
                "AND e.seq < %(before)s ORDER BY e.seq DESC LIMIT %(n)s) e ON true "
                "WHERE s.id = %(sid)s"
            ),
            stored_ids=q(
                "SELECT e.id FROM {s}.events e WHERE e.session_id = %s AND e.id = ANY(%s)"
            ),
            # The sizes of the attachments a session holds, among some references.
            held_attachments=q(
                "SELECT l.ref, a.size FROM {s}.session_attachments l "
                "JOIN {s}.attachments a ON a.ref = l.ref "
                "WHERE l.session_id = %s AND l.ref = ANY(%s::text[])"
            ),
            # Whether the session exists, whether it holds the reference, and the range of the
            # bytes: the chunk rows `first` to `last` (a range of their primary key), joined,
            # and `n` bytes of them from `from` (NULL when the reference has no row: damage).
            read_attachment=q(
                "SELECT l.ref IS NOT NULL, CASE WHEN a.id IS NOT NULL THEN coalesce(("
                "SELECT substring(string_agg(c.data, ''::bytea ORDER BY c.n) "
                "FROM %(from)s::int FOR %(n)s::int) FROM {s}.attachment_chunks c "
                "WHERE c.id = a.id AND c.n BETWEEN %(first)s::int AND %(last)s::int"
                "), ''::bytea) END "
                "FROM {s}.sessions s LEFT JOIN {s}.session_attachments l "
                "ON l.session_id = s.id AND l.ref = %(ref)s::text "
                "LEFT JOIN {s}.attachments a ON a.ref = l.ref WHERE s.id = %(sid)s::text"
            ),
            # The view in one query: the boundary and the messages after it (a range of the
            # primary key), and the events the boundary names from before it, each looked up
            # by id in a unique index (never a scan of the covered range, whatever the
            # planner's statistics say).
            view=q(
                "SELECT s.boundary_seq, e.* FROM {s}.sessions s LEFT JOIN LATERAL ("
                f"SELECT {_EVENT_COLUMNS} FROM {{s}}.events e WHERE e.session_id = %(sid)s "
                "AND e.seq >= coalesce(s.boundary_seq, 0) "
                "AND (e.type = 'MESSAGE' OR e.seq = s.boundary_seq) "
                f"UNION ALL SELECT {_EVENT_COLUMNS} FROM unnest(s.boundary_ids) AS b(id) "
                "JOIN {s}.events e ON e.session_id = %(sid)s AND e.id = b.id "
                "WHERE e.seq < s.boundary_seq) e ON true "
                "WHERE s.id = %(sid)s ORDER BY e.seq"
            ),
            # Whether the session exists, then its hits (NULLs for none).
            search_history=q(
                "SELECT h.* FROM {s}.sessions s LEFT JOIN LATERAL ("
                'SELECT h.seq, h.role, h.said_at, h.rank, e.id, e.type, e."timestamp", '
                "e.synthetic, e.body FROM (SELECT h.seq, h.role, h.said_at, "
                f"ts_rank_cd(h.tsv, {_QUERY}, 1) AS rank FROM {{s}}.history h "
                f"WHERE h.session_id = %(sid)s::text AND h.tsv @@ {_QUERY} {_FILTERS}"
                "ORDER BY rank DESC, h.seq LIMIT %(k)s) h "
                "JOIN {s}.events e ON e.session_id = %(sid)s::text AND e.seq = h.seq) h ON true "
                "WHERE s.id = %(sid)s::text ORDER BY h.rank DESC, h.seq"
            ),
            search_sessions=q(
                "SELECT h.session_id, h.seq, h.role, h.said_at, h.rank, e.id, e.type, "
                'e."timestamp", e.synthetic, e.body FROM (SELECT h.session_id, h.seq, h.role, '
                f"h.said_at, ts_rank_cd(h.tsv, {_QUERY}, 1) AS rank FROM {{s}}.history h "
                f"JOIN {{s}}.sessions s ON s.id = h.session_id WHERE h.tsv @@ {_QUERY} "
                "AND (%(sids)s::text[] IS NULL OR h.session_id = ANY(%(sids)s::text[])) "
                "AND (%(meta)s::jsonb IS NULL OR (s.metadata @> %(meta)s::jsonb AND NOT EXISTS ("
                "SELECT 1 FROM jsonb_each(%(meta)s::jsonb) m "
                "WHERE (s.metadata -> m.key)::text IS DISTINCT FROM m.value::text))) "
                f"{_FILTERS}"
                "ORDER BY rank DESC, h.seq, h.session_id LIMIT %(k)s) h "
                "JOIN {s}.events e ON e.session_id = h.session_id AND e.seq = h.seq "
                "ORDER BY h.rank DESC, h.seq, h.session_id"
            ),
            events_by_id=q(
                f"SELECT {_EVENT_COLUMNS} FROM {{s}}.sessions s "
                "LEFT JOIN {s}.events e ON e.session_id = s.id "
                "AND e.session_id = %(sid)s::text AND e.id = ANY(%(ids)s::text[]) "
                "WHERE s.id = %(sid)s::text ORDER BY e.seq"
            ),
            # Unpartitioned, a version-checked single append needs no function: one plain
            # statement (no plpgsql, no SPI) does the lock, the check and the insert.
            history=history,
            direct_one=None if partitioned else q(_DIRECT_ONE),
            fenced_one=None if partitioned else q(_FENCED_ONE),
        )
