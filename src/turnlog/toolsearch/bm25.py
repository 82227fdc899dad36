"""`Bm25ToolIndex`: the default tool index, on SQLite FTS5 from the standard library."""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Sequence
from typing import Final

from turnlog.errors import InvalidInput
from turnlog.toolsearch._sets import RecentCache, SharedSets
from turnlog.toolsearch.base import ToolHit, ToolReference
from turnlog.toolsearch.words import (
    check_max_results,
    check_tools,
    index_text,
    name_words,
    query_words,
    schema_text,
    tool_digest,
    tools_fingerprint,
)

__all__ = ["Bm25ToolIndex"]

MAX_QUERY_WORDS: Final = 64
# Combining marks (M*) are letters' parts, not separators: without them unicode61 cuts Thai
# and Devanagari words at every vowel sign. Runs of the no-space scripts arrive already cut
# into character pairs (`index_text`), which unicode61 then keeps as tokens.
_TOKENIZER: Final = "porter unicode61 remove_diacritics 2 categories 'L* N* Co M*'"

ROW_CACHE_TOOLS: Final = 4096
"""How many tools' indexed text a `Bm25ToolIndex` keeps, so a new set of known tools is one
insert (the text of a BFCL tool is about 0.5 KB)."""
SPARE_TABLES: Final = 16
"""How many emptied tables a `Bm25ToolIndex` keeps for the next new tool sets."""


def _create(table: str) -> str:
    # Contentless: the text is only tokenized, never stored, and a search needs only rowids
    # (the names are kept in Python). One table per tool set keeps term statistics, and the
    # cost of a search, to that set.
    return (
        f"CREATE VIRTUAL TABLE {table} USING fts5("
        f"name_words, description, params, content='', tokenize = \"{_TOKENIZER}\")"
    )


def tool_row(tool: ToolReference) -> tuple[str, str, str]:
    """What a tool's row holds: its name's words, its description, its parameters' text."""
    return (
        index_text(" ".join(name_words(tool.name))),
        index_text(tool.description),
        index_text(schema_text(tool.parameters)),
    )


def _search_sql(table: str) -> str:
    return (
        f"SELECT rowid, bm25({table}, ?, ?, ?) AS rank FROM {table} "
        f"WHERE {table} MATCH ? ORDER BY rank, rowid LIMIT ?"
    )


def match_expression(query: str) -> str:
    """`query` as an FTS5 expression: its words, each quoted, joined with OR.

    User text never reaches FTS5 as syntax: only letters and digits survive the split, and each
    word is a quoted string, so `NEAR(`, `AND`, `*`, `-`, `:` or a stray quote are plain words
    or nothing. Stop words are dropped unless nothing else is left, and so are words made only
    of digits: the amounts, dates, times and ids of a request ("10 euros", "2023-10-01",
    "4:30") are values for a tool's arguments, not what it does, and they matched the numbers
    in other tools' examples and defaults. Words mixing letters and digits ("sha256", "mp3",
    "3d") stay.

    Returns:
        The expression, or "" when the query has no usable word.
    """
    words = query_words(query) or query_words(query, keep_stop_words=True)
    words = [word for word in words if not word.isdigit()] or words
    # Words hold only letters and digits; doubling quotes is what FTS5 asks for anyway.
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words[:MAX_QUERY_WORDS])


def _weight(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{what} must be a number, got {type(value).__name__}")
    weight = float(value)
    if not math.isfinite(weight) or weight < 0:
        raise InvalidInput(f"{what} must be a finite number >= 0, got {value!r}")
    return weight


class Bm25ToolIndex:
    """Tools ranked by BM25 over their name, description and parameters (SQLite FTS5).

    Each index object owns one in-memory SQLite database, and each distinct tool set one
    contentless FTS5 table in it (the text is tokenized, not stored). A tool is indexed with its
    name split into words (snake_case, camelCase, dotted, kebab-case, letters and
    digits: `getWeatherForecast` is found by "weather forecast"), its description, and the text
    of its parameter schema (property names, descriptions, enum values, recursively). Words are
    stemmed (Porter: "forecasts" finds "forecast") and folded to lower case without accents;
    text in scripts written without spaces (Chinese, Japanese, Korean, Thai, ...) is indexed
    and searched as overlapping pairs of characters.

    Sessions with identical tool sets (same tools, same order) share one table, so 10,000
    sessions offered the same 50 tools cost 50 rows, and indexing a set that another session
    holds already costs a fingerprint. When no session holds a set any more its table is
    emptied (up to 16 are kept for the next sets) or dropped, so memory follows the sets held,
    not the sets ever indexed. The indexed text of the last 4,096 tools is kept, so a new set
    of tools seen before costs one insert.

    A query's words are quoted and OR-ed, so user text never becomes FTS5 syntax; English stop
    words are dropped unless nothing else is left, and only the first 64 words count. Scores
    are FTS5's `bm25()` negated (higher is better), with the name column weighted above the
    description and the description above the parameters. Term statistics are those of the
    session's tool set alone, so a score does not depend on the other sessions, and a search
    reads only that set's table: its cost does not grow with the sessions indexed. Ties keep
    the order the tools were indexed in.

    Thread-safe: one lock around the connection. `close()` releases the database.

    Args:
        max_results: how many hits `search` returns when not told.
        name_weight: the weight of the name column.
        description_weight: the weight of the description column.
        parameters_weight: the weight of the parameters column.

    Raises:
        InvalidInput: a weight is negative or not finite, or `max_results` is not positive.
    """

    def __init__(
        self,
        *,
        max_results: int = 5,
        name_weight: float = 4.0,
        description_weight: float = 2.0,
        parameters_weight: float = 1.0,
    ) -> None:
        self._max_results = check_max_results(max_results, 5)
        self._weights = (
            _weight(name_weight, "name_weight"),
            _weight(description_weight, "description_weight"),
            _weight(parameters_weight, "parameters_weight"),
        )
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            ":memory:", check_same_thread=False, isolation_level=None
        )
        # Small pages: a set of 50 tools fills a few dozen, and each of a table's shadow
        # tables takes at least one.
        self._conn.execute("PRAGMA page_size = 1024")
        # Per tool set: its table and the names of its tools by rowid - 1.
        self._sets: SharedSets[tuple[str, tuple[str, ...]]] = SharedSets()
        self._spare: list[str] = []  # emptied tables, reused before a new one is created
        self._tables = 0
        self._rows: RecentCache[bytes, tuple[str, str, str]] = RecentCache(ROW_CACHE_TOOLS)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise InvalidInput("this Bm25ToolIndex is closed; create a new one")
        return self._conn

    def index_tools(self, session_id: str, tools: Sequence[ToolReference]) -> None:
        """Replace the session's index with `tools`.

        A set no session holds gets a table of its own; a set another session holds is
        shared; the session's previous set is released when no session uses it any more.

        Raises:
            InvalidInput: see `turnlog.toolsearch.words.check_tools`; the index is closed.
        """
        checked = check_tools(tools)
        key = tools_fingerprint(checked, ordered=True)
        with self._lock:
            self._connection()
            if self._sets.key(session_id) == key:
                return
            held = self._sets.value(key)
        # The text is made outside the lock: other sessions search meanwhile.
        rows = None if held is not None else self._make_rows(checked)
        with self._lock:
            conn = self._connection()
            if self._sets.key(session_id) == key:
                return
            held = self._sets.value(key)
            if held is None:
                if rows is None:  # the set was released meanwhile
                    rows = self._make_rows(checked)
                held = (self._fill(conn, rows), tuple(tool.name for tool in checked))
            made = held
            released = self._sets.attach(session_id, key, lambda: made)
            if released is not None:
                self._release(conn, released[0])

    def _fill(self, conn: sqlite3.Connection, rows: list[tuple[str, str, str]]) -> str:
        """An empty table (a spare one, or a new one) holding `rows`, in one transaction."""
        spare = self._spare.pop() if self._spare else None
        if spare is None:
            self._tables += 1
        table = spare or f"set{self._tables}"
        conn.execute("BEGIN")
        try:
            if spare is None:
                conn.execute(_create(table))
            conn.executemany(
                f"INSERT INTO {table} (rowid, name_words, description, params) VALUES (?, ?, ?, ?)",
                [(i + 1, *row) for i, row in enumerate(rows)],
            )
            conn.execute("COMMIT")
        except BaseException as exc:
            conn.execute("ROLLBACK")
            if spare is not None:
                self._spare.append(spare)  # still empty
            if isinstance(exc, UnicodeEncodeError):
                raise InvalidInput(
                    f"a tool's text is not valid Unicode (a lone surrogate?): {exc}"
                ) from exc
            raise
        return table

    def _make_rows(self, tools: list[ToolReference]) -> list[tuple[str, str, str]]:
        """The tools' indexed text (see `tool_row`); rows made before come from the cache,
        read and written under one lock each."""
        digests = [tool._digest or tool_digest(tool) for tool in tools]
        rows: list[tuple[str, str, str]] = []
        made: list[tuple[bytes, tuple[str, str, str]]] = []
        for tool, digest, row in zip(tools, digests, self._rows.get_many(digests), strict=True):
            if row is None:
                row = tool_row(tool)
                made.append((digest, row))
            rows.append(row)
        if made:
            self._rows.put_many(made)
        return rows

    def _release(self, conn: sqlite3.Connection, table: str) -> None:
        """Empty a set's table for reuse, or drop it when enough are spare (lock held)."""
        if len(self._spare) < SPARE_TABLES:
            # Frees every page of its index (they are reused by the next sets); no schema
            # change, so prepared statements stay valid.
            conn.execute(f"INSERT INTO {table} ({table}) VALUES ('delete-all')")
            self._spare.append(table)
        else:
            conn.execute(f"DROP TABLE {table}")

    def search(
        self, session_id: str, query: str, *, max_results: int | None = None
    ) -> list[ToolHit]:
        """The best matches for `query`, best first; nothing for an unknown session or a
        query without a usable word.

        Raises:
            InvalidInput: `max_results` is not a positive integer; the index is closed.
        """
        limit = check_max_results(max_results, self._max_results)
        if not isinstance(query, str):
            return []
        expression = match_expression(query)
        if not expression:
            return []
        with self._lock:
            conn = self._connection()
            held = self._sets.get(session_id)
            if held is None or not held[1]:
                return []
            table, tool_names = held
            rows = conn.execute(_search_sql(table), (*self._weights, expression, limit)).fetchall()
        return [ToolHit(tool_names[rowid - 1], -float(rank)) for rowid, rank in rows]

    def clear(self, session_id: str) -> None:
        """Forget the session's index (a no-op for an unknown session)."""
        with self._lock:
            conn = self._connection()
            released = self._sets.detach(session_id)
            if released is not None:
                self._release(conn, released[0])

    def size(self, session_id: str) -> int:
        """How many tools the session's index holds (0 when unknown)."""
        with self._lock:
            held = self._sets.get(session_id)
            return 0 if held is None else len(held[1])

    def sessions(self) -> int:
        """How many sessions hold an index (empty ones included)."""
        with self._lock:
            return self._sets.sessions()

    def tool_sets(self) -> int:
        """How many distinct tool sets are stored."""
        with self._lock:
            return self._sets.values()

    def close(self) -> None:
        """Release the database; the index is unusable afterwards. Closing twice is fine."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
                self._sets = SharedSets()
                self._spare = []

    def __enter__(self) -> Bm25ToolIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        name, description, parameters = self._weights
        return (
            f"Bm25ToolIndex(max_results={self._max_results}, name_weight={name}, "
            f"description_weight={description}, parameters_weight={parameters})"
        )
