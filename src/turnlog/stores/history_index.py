"""`HistoryIndex`: a history index held in the process, for the stores without one of their own.

The memory store and the Redis stores keep no full-text index on their side: each process
builds one from the log on a session's first search (one log read) and brings it up to date
from the events appended since, by version, on each later search (`catch_up`). The index is an
in-memory SQLite FTS5 table with the tool search's tokenizer (so CJK and Thai are found by
their character pairs) and BM25 ranking; which sessions it holds is bounded by an eviction
strategy of the tool search (`LruEvictionStrategy(1000)` by default), so memory stays bounded
however many sessions are searched. An evicted session is indexed again, from its log, on its
next search.

A session deleted and created again under the same id is caught: each session's entry
remembers the id of the last event it indexed, and a log whose event at that seq is another
(or that is shorter) is indexed again from the start.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from turnlog.codec import from_micros, to_micros
from turnlog.events import SessionEvent
from turnlog.history import (
    HistoryHit,
    HistoryQuery,
    bm25_score,
    fts5_expression,
    indexed_text,
    said_at,
    snippet,
    tool_names,
)

if TYPE_CHECKING:
    from turnlog.toolsearch.base import ToolIndexEvictionStrategy

__all__ = ["PAGE", "CatchUp", "HistoryIndex", "catch_up", "catch_up_async"]

PAGE: Final = 1000
"""How many events a catch-up reads at a time."""
_TOKENIZER: Final = "porter unicode61 remove_diacritics 2 categories 'L* N* Co M*'"
_SEQ_BITS: Final = 40  # a session's rows are rowids (key << 40) + seq: one range per session
_TOOLS_SEP: Final = "\x1f"


CatchUp = Callable[["HistoryIndex", str, int, Callable[[str, int, int], list[SessionEvent]]], None]
"""`catch_up`'s type."""


@dataclass
class _Entry:
    key: int
    version: int
    last_id: str | None


class HistoryIndex:
    """The history of the sessions a process searched, indexed in memory.

    Thread-safe. `indexed(session_id)` says how far a session is indexed, `add` indexes the
    events after that, `search` ranks them; a store's `search_history` is `catch_up` and then
    `search`.

    Args:
        eviction: which sessions to forget when more are held (default: the 1,000 searched
            most recently).
    """

    def __init__(self, eviction: ToolIndexEvictionStrategy | None = None) -> None:
        # here: `import turnlog` loads none of the tool search (tests/test_cold_start.py)
        from turnlog.toolsearch.eviction import LruEvictionStrategy
        from turnlog.toolsearch.words import index_text

        self._index_text = index_text
        self._eviction = eviction if eviction is not None else LruEvictionStrategy(1000)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._db.execute(
            "CREATE VIRTUAL TABLE h USING fts5(text, event_id UNINDEXED, role UNINDEXED, "
            f'said UNINDEXED, stamp UNINDEXED, tools UNINDEXED, tokenize = "{_TOKENIZER}")'
        )
        self._entries: dict[str, _Entry] = {}
        self._next_key = 1

    def indexed(self, session_id: str) -> tuple[int, str | None]:
        """How many of the session's events are indexed, and the id of the last of them
        ((0, None) when none is)."""
        with self._lock:
            entry = self._entries.get(session_id)
            return (0, None) if entry is None else (entry.version, entry.last_id)

    def add(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        """Index `events`, the session's events right after those indexed, in order. Events
        already indexed (by seq) are skipped."""
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None:
                entry = self._entries[session_id] = _Entry(self._next_key, 0, None)
                self._next_key += 1
            rows = []
            for event in events:
                seq = event.seq
                if seq is None or seq <= entry.version:
                    continue
                entry.version, entry.last_id = seq, event.id
                text = indexed_text(event)
                if text is None or event.message is None or event.timestamp is None:
                    continue
                rows.append(
                    (
                        (entry.key << _SEQ_BITS) + seq,
                        self._index_text(text),
                        event.id,
                        event.message.role,
                        to_micros(said_at(event)),
                        to_micros(event.timestamp),
                        _TOOLS_SEP.join(tool_names(event)),
                    )
                )
            if rows:
                self._db.executemany(
                    "INSERT INTO h (rowid, text, event_id, role, said, stamp, tools) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )

    def forget(self, session_id: str) -> None:
        """Drop the session's entries (it was deleted, or is to be indexed again)."""
        with self._lock:
            self._forget(session_id)
        self._eviction.on_removed(session_id)

    def _forget(self, session_id: str) -> None:
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            low = entry.key << _SEQ_BITS
            self._db.execute(
                "DELETE FROM h WHERE rowid >= ? AND rowid < ?", (low, low + (1 << _SEQ_BITS))
            )

    def touch(self, session_id: str) -> None:
        """Count a search of the session for eviction, and forget those the strategy names."""
        for evicted in self._eviction.on_access(session_id):
            if evicted != session_id:
                with self._lock:
                    self._forget(evicted)
                self._eviction.on_removed(evicted)

    def search(self, session_ids: Sequence[str], query: HistoryQuery) -> list[HistoryHit]:
        """The best `query.k` events of these sessions (as indexed now) for `query`."""
        expression = fts5_expression(query.terms)
        if not expression:
            return []
        hits: list[tuple[float, int, HistoryHit]] = []
        with self._lock:
            for session_id in dict.fromkeys(session_ids):
                entry = self._entries.get(session_id)
                if entry is not None:
                    hits.extend(self._search_one(session_id, entry, expression, query))
        hits.sort(key=lambda h: (-h[0], h[1]))
        return [hit for _, _, hit in hits[: query.k]]

    def _search_one(
        self, session_id: str, entry: _Entry, expression: str, query: HistoryQuery
    ) -> list[tuple[float, int, HistoryHit]]:
        low = entry.key << _SEQ_BITS
        sql = (
            "SELECT rowid, text, event_id, role, said, stamp, tools, bm25(h) AS rank FROM h "
            "WHERE h MATCH ? AND rowid >= ? AND rowid < ?"
        )
        params: list[object] = [expression, low, low + (1 << _SEQ_BITS)]
        if query.before is not None:
            sql += " AND said < ?"
            params.append(to_micros(query.before))
        if query.after is not None:
            sql += " AND said > ?"
            params.append(to_micros(query.after))
        if query.roles is not None:
            sql += f" AND role IN ({', '.join('?' * len(query.roles))})"
            params.extend(sorted(query.roles))
        if query.tools is None:
            sql += " ORDER BY rank, rowid LIMIT ?"
            params.append(query.k)
        else:
            sql += " AND tools != '' ORDER BY rank, rowid"
        out: list[tuple[float, int, HistoryHit]] = []
        for rowid, text, event_id, role, said, stamp, tools, rank in self._db.execute(sql, params):
            if query.tools is not None and query.tools.isdisjoint(tools.split(_TOOLS_SEP)):
                continue
            seq = rowid - low
            score = bm25_score(rank)
            hit = HistoryHit(
                session_id=session_id,
                event_id=event_id,
                seq=seq,
                timestamp=from_micros(stamp),
                said_at=from_micros(said),
                role=role,
                snippet=snippet(text, query.terms),
                score=score,
            )
            out.append((score, seq, hit))
            if len(out) >= query.k:
                break
        return out

    def sessions(self) -> int:
        """How many sessions are indexed."""
        with self._lock:
            return len(self._entries)

    def close(self) -> None:
        """Release the in-memory database."""
        with self._lock:
            self._entries.clear()
            self._db.close()


def catch_up(
    index: HistoryIndex,
    session_id: str,
    version: int,
    events_after: Callable[[str, int, int], list[SessionEvent]],
) -> None:
    """Bring the index of one session up to `version` (its log's version, read just before)
    with `events_after` (the store's): the events appended since it was indexed, a page at
    a time; the whole log again when the log is not the one indexed (deleted and created
    again, or shorter)."""
    done, last_id = index.indexed(session_id)
    if done and (version < done or _id_at(events_after, session_id, done) != last_id):
        index.forget(session_id)
        done = 0
    index.touch(session_id)
    while done < version:
        page = events_after(session_id, done, PAGE)
        if not page:
            break
        index.add(session_id, page)
        done = page[-1].seq or done + len(page)


def _id_at(
    events_after: Callable[[str, int, int], list[SessionEvent]], session_id: str, seq: int
) -> str | None:
    found = events_after(session_id, seq - 1, 1)
    return found[0].id if found else None


async def catch_up_async(
    index: HistoryIndex,
    session_id: str,
    version: int,
    events_after: Callable[[str, int, int], Awaitable[list[SessionEvent]]],
) -> None:
    """`catch_up` for an async store's `events_after`."""
    done, last_id = index.indexed(session_id)
    if done and version >= done:
        found = await events_after(session_id, done - 1, 1)
        stale = not found or found[0].id != last_id
    else:
        stale = bool(done)
    if stale:
        index.forget(session_id)
        done = 0
    index.touch(session_id)
    while done < version:
        page = await events_after(session_id, done, PAGE)
        if not page:
            break
        index.add(session_id, page)
        done = page[-1].seq or done + len(page)
