"""`Bm25ToolIndex`: the default tool index, on SQLite FTS5 from the standard library."""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Sequence
from typing import Final

from turnlog.errors import InvalidInput
from turnlog.toolsearch._sets import SharedSets
from turnlog.toolsearch.base import ToolHit, ToolReference
from turnlog.toolsearch.words import (
    check_max_results,
    check_tools,
    index_text,
    name_words,
    query_words,
    schema_text,
    tools_fingerprint,
)

__all__ = ["Bm25ToolIndex"]

MAX_QUERY_WORDS: Final = 64
# Combining marks (M*) are letters' parts, not separators: without them unicode61 cuts Thai
# and Devanagari words at every vowel sign. Runs of the no-space scripts arrive already cut
# into character pairs (`index_text`), which unicode61 then keeps as tokens.
_TOKENIZER: Final = "porter unicode61 remove_diacritics 2 categories 'L* N* Co M*'"

_SCHEMA: Final = f"""
CREATE VIRTUAL TABLE tools USING fts5(
    name UNINDEXED,
    name_words,
    description,
    params,
    tokenize = "{_TOKENIZER}"
)
"""
_SEARCH: Final = (
    "SELECT name, bm25(tools, 0.0, ?, ?, ?) AS rank FROM tools "
    "WHERE tools MATCH ? AND rowid >= ? AND rowid <= ? ORDER BY rank, rowid LIMIT ?"
)


def match_expression(query: str) -> str:
    """`query` as an FTS5 expression: its words, each quoted, joined with OR.

    User text never reaches FTS5 as syntax: only letters and digits survive the split, and each
    word is a quoted string, so `NEAR(`, `AND`, `*`, `-`, `:` or a stray quote are plain words
    or nothing. English stop words are dropped unless nothing else is left.

    Returns:
        The expression, or "" when the query has no usable word.
    """
    words = query_words(query) or query_words(query, keep_stop_words=True)
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

    Each index object owns one in-memory SQLite database with one FTS5 table. A tool is stored
    with its name split into words (snake_case, camelCase, dotted, kebab-case, letters and
    digits: `getWeatherForecast` is found by "weather forecast"), its description, and the text
    of its parameter schema (property names, descriptions, enum values, recursively). Words are
    stemmed (Porter: "forecasts" finds "forecast") and folded to lower case without accents.

    Sessions with identical tool sets (same tools, same order) share one copy of the rows, so
    10,000 sessions offered the same 50 tools cost 50 rows, and indexing a set that another
    session holds already costs a fingerprint.

    A query's words are quoted and OR-ed, so user text never becomes FTS5 syntax; English stop
    words are dropped unless nothing else is left, and only the first 64 words count. Scores
    are FTS5's `bm25()` negated (higher is better), with the name column weighted above the
    description and the description above the parameters. Term statistics span every distinct
    tool set of the index object, so a score is comparable only with the scores of the same
    search; ties keep the order the tools were indexed in.

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
        self._conn.execute(_SCHEMA)
        # Each tool set's rows have consecutive rowids (first, count), so a search reads only
        # that set's rows and releasing a set deletes one rowid range.
        self._sets: SharedSets[tuple[int, int]] = SharedSets()
        self._next_rowid = 1

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise InvalidInput("this Bm25ToolIndex is closed; create a new one")
        return self._conn

    def index_tools(self, session_id: str, tools: Sequence[ToolReference]) -> None:
        """Replace the session's index with `tools`.

        Raises:
            InvalidInput: see `turnlog.toolsearch.words.check_tools`; the index is closed.
        """
        checked = check_tools(tools)
        key = tools_fingerprint(checked, ordered=True)
        with self._lock:
            conn = self._connection()
            if self._sets.key(session_id) == key:
                return
            span = self._sets.value(key)
            released = self._sets.releases(session_id)
            conn.execute("BEGIN")
            try:
                if span is None:
                    span = self._insert(conn, checked)
                if released is not None:
                    self._delete(conn, released)
                conn.execute("COMMIT")
            except BaseException as exc:
                conn.execute("ROLLBACK")
                if isinstance(exc, UnicodeEncodeError):
                    raise InvalidInput(
                        f"a tool's text is not valid Unicode (a lone surrogate?): {exc}"
                    ) from exc
                raise
            self._sets.attach(session_id, key, lambda: span)
            self._next_rowid = max(self._next_rowid, span[0] + span[1])

    def _insert(self, conn: sqlite3.Connection, tools: list[ToolReference]) -> tuple[int, int]:
        first = self._next_rowid
        conn.executemany(
            "INSERT INTO tools (rowid, name, name_words, description, params)"
            " VALUES (?, ?, ?, ?, ?)",
            [
                (
                    first + i,
                    tool.name,
                    index_text(" ".join(name_words(tool.name))),
                    index_text(tool.description),
                    index_text(schema_text(tool.parameters)),
                )
                for i, tool in enumerate(tools)
            ],
        )
        return first, len(tools)

    @staticmethod
    def _delete(conn: sqlite3.Connection, span: tuple[int, int]) -> None:
        first, count = span
        if count:
            conn.execute(
                "DELETE FROM tools WHERE rowid BETWEEN ? AND ?", (first, first + count - 1)
            )

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
            span = self._sets.get(session_id)
            if span is None or not span[1]:
                return []
            first, count = span
            rows = conn.execute(
                _SEARCH,
                (*self._weights, expression, first, first + count - 1, limit),
            ).fetchall()
        return [ToolHit(str(name), -float(rank)) for name, rank in rows]

    def clear(self, session_id: str) -> None:
        """Forget the session's index (a no-op for an unknown session)."""
        with self._lock:
            conn = self._connection()
            released = self._sets.releases(session_id)
            if released is not None:
                self._delete(conn, released)
            self._sets.detach(session_id)

    def size(self, session_id: str) -> int:
        """How many tools the session's index holds (0 when unknown)."""
        with self._lock:
            span = self._sets.get(session_id)
            return 0 if span is None else span[1]

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
