"""`HybridHistory`: a history search that finds what was said in other words.

BM25 finds an event only by the words it shares with the query: "what is our cat called?" never
finds "we got a kitten and named her Sprocket". An embedding model does. `HybridHistory` ranks a
session's events both ways and fuses the two rankings by their standardized scores (the tool
search's `score_fusion`): the store's index gives its best `depth` matches, an embedding of every
indexed event gives the `depth` most similar ones, and a hit found only one way counts as an
unscored one of the other (bench/recall.py measures what each way reaches).

Give it to the service, which then uses it for `search_history` (and so for the recall tools of
the runner and the adapters)::

    service = SessionService(store, history=HybridHistory())  # the offline MiniLM embedder

The vectors are kept in the process: a session's events are embedded on its first search and
the events appended since on each later one (a session deleted and created again under the same
id is embedded again). At most `max_events` vectors are held; the sessions searched least
recently go first. Embedding costs about 4 ms an event on one core with MiniLM: a session of
10,000 events takes about 40 s on its first search. `search_sessions` stays BM25.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from turnlog.errors import InvalidInput
from turnlog.events import SessionEvent
from turnlog.history import (
    HistoryHit,
    HistoryQuery,
    indexed_text,
    said_at,
    snippet,
    tool_names,
)

if TYPE_CHECKING:
    from turnlog.service import SessionService
    from turnlog.service_async import AsyncSessionService
    from turnlog.toolsearch.embedding import Embedder

__all__ = ["DEPTH", "HybridHistory"]

DEPTH: Final = 50
"""How many hits of each ranking the fusion weighs."""
_PAGE: Final = 1000
_BATCH: Final = 64


@dataclass
class _Row:
    event_id: str
    seq: int
    role: str
    said: datetime
    stamp: datetime
    tools: tuple[str, ...]
    text: str


@dataclass
class _Session:
    version: int = 0
    last_id: str | None = None
    rows: list[_Row] = field(default_factory=list)
    matrix: Any = None  # numpy array, one unit row per entry of `rows`


class HybridHistory:
    """BM25 and embeddings fused, for `SessionService(history=...)`.

    Args:
        embedder: anything with `embed(texts)` (and optionally `embed_queries`): the tool
            search's `MiniLmEmbedder` by default (the `embeddings` extra; nothing is
            downloaded).
        depth: how many hits of each ranking are fused (default 50).
        keyword_weight, semantic_weight: each ranking's weight in the fusion.
        max_events: the most event vectors held in the process.

    Raises:
        InvalidInput: a bad depth, weight or bound; ImportError: no embedder was given and the
            `embeddings` extra is not installed.
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        depth: int = DEPTH,
        keyword_weight: float = 1.0,
        semantic_weight: float = 1.0,
        max_events: int = 200_000,
    ) -> None:
        for name, value in (("depth", depth), ("max_events", max_events)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name} must be a positive integer, got {value!r}")
        # here: numpy and the embedder load when a hybrid search is made, not on import
        from turnlog.toolsearch.hybrid import score_fusion

        self._fuse = score_fusion
        self._weights = [float(keyword_weight), float(semantic_weight)]
        score_fusion([[], []], weights=self._weights)  # checks the weights
        if embedder is None:
            from turnlog.toolsearch.embedding import default_embedder

            embedder = default_embedder()
        self._embedder = embedder
        self.depth = depth
        self._max = max_events
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    # -- the vectors -------------------------------------------------------------------------

    def _known(self, session_id: str) -> tuple[int, str | None]:
        with self._lock:
            held = self._sessions.get(session_id)
            return (0, None) if held is None else (held.version, held.last_id)

    def _forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def _add(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        import numpy as np

        rows: list[_Row] = []
        with self._lock:
            held = self._sessions.setdefault(session_id, _Session())
            start = held.version
        last: SessionEvent | None = None
        for event in events:
            if event.seq is None or event.seq <= start:
                continue
            last = event
            text = indexed_text(event)
            if text is None or event.message is None or event.timestamp is None:
                continue
            rows.append(
                _Row(
                    event.id,
                    event.seq,
                    event.message.role,
                    said_at(event),
                    event.timestamp,
                    tuple(tool_names(event)),
                    text,
                )
            )
        vectors = self._unit([r.text for r in rows]) if rows else None
        with self._lock:
            held = self._sessions.setdefault(session_id, _Session())
            if last is None or held.version != start:
                return  # another search added these meanwhile
            held.version, held.last_id = last.seq or held.version, last.id
            if vectors is not None:
                held.rows.extend(rows)
                held.matrix = (
                    vectors if held.matrix is None else np.concatenate([held.matrix, vectors])
                )
            self._sessions.move_to_end(session_id)
            total = sum(len(s.rows) for s in self._sessions.values())
            while total > self._max and len(self._sessions) > 1:
                _, dropped = self._sessions.popitem(last=False)
                total -= len(dropped.rows)

    def _unit(self, texts: list[str], *, query: bool = False) -> Any:
        import numpy as np

        embed = getattr(self._embedder, "embed_queries", None) if query else None
        embed = embed or self._embedder.embed
        chunks = [
            np.asarray(embed(texts[i : i + _BATCH]), dtype=np.float32)
            for i in range(0, len(texts), _BATCH)
        ]
        matrix = np.concatenate(chunks)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.maximum(norms, 1e-12)

    # -- the ranking -------------------------------------------------------------------------

    def _rank(
        self, session_id: str, query: HistoryQuery, keyword: list[HistoryHit]
    ) -> list[HistoryHit]:
        import numpy as np

        from turnlog.toolsearch.base import ToolHit

        with self._lock:
            held = self._sessions.get(session_id)
            rows = list(held.rows) if held is not None else []
            matrix = held.matrix if held is not None else None
        semantic: list[ToolHit] = []
        by_id: dict[str, HistoryHit] = {h.event_id: h for h in keyword}
        if rows and matrix is not None:
            cosine = matrix @ self._unit([query.text], query=True)[0]
            for i in np.argsort(-cosine):
                row = rows[int(i)]
                if not query.accepts(row.role, row.said, row.tools):
                    continue
                semantic.append(ToolHit(row.event_id, float(cosine[int(i)])))
                if row.event_id not in by_id:
                    by_id[row.event_id] = HistoryHit(
                        session_id=session_id,
                        event_id=row.event_id,
                        seq=row.seq,
                        timestamp=row.stamp,
                        said_at=row.said,
                        role=row.role,
                        snippet=snippet(row.text, query.terms),
                        score=0.0,
                    )
                if len(semantic) >= self.depth:
                    break
        reachable = min(self.depth, len(rows))
        fused = self._fuse(
            [[ToolHit(h.event_id, h.score) for h in keyword], semantic],
            weights=self._weights,
            unscored=[max(0, reachable - len(keyword)), max(0, reachable - len(semantic))],
        )
        out = []
        for hit in fused[: query.k]:
            found = by_id[hit.name]
            out.append(_with_score(found, hit.score))
        return out

    def _wide(self, query: HistoryQuery) -> HistoryQuery:
        return HistoryQuery(
            text=query.text,
            terms=query.terms,
            k=max(query.k, self.depth),
            before=query.before,
            after=query.after,
            roles=query.roles,
            tools=query.tools,
        )

    def search(
        self, service: SessionService, session_id: str, query: HistoryQuery
    ) -> list[HistoryHit]:
        """The best `query.k` events of the session for `query`, both rankings fused."""
        keyword = service.store.search_history(session_id, self._wide(query))
        version = service.store.version(session_id)
        done, last_id = self._known(session_id)
        if done and (version < done or _id_at(service.store.events_by_id, session_id, last_id)):
            self._forget(session_id)
            done = 0
        while done < version:
            page = service.store.events_after(session_id, done, _PAGE)
            if not page:
                break
            self._add(session_id, page)
            done = page[-1].seq or done + len(page)
        return self._rank(session_id, query, keyword)

    async def search_async(
        self, service: AsyncSessionService, session_id: str, query: HistoryQuery
    ) -> list[HistoryHit]:
        """`search` for an `AsyncSessionService` (the embedding runs in a worker thread)."""
        import asyncio

        keyword = await service.store.search_history(session_id, self._wide(query))
        version = await service.store.version(session_id)
        done, last_id = self._known(session_id)
        if done and last_id is not None:
            found = await service.store.events_by_id(session_id, [last_id])
            if version < done or not found:
                self._forget(session_id)
                done = 0
        while done < version:
            page = await service.store.events_after(session_id, done, _PAGE)
            if not page:
                break
            await asyncio.to_thread(self._add, session_id, page)
            done = page[-1].seq or done + len(page)
        return await asyncio.to_thread(self._rank, session_id, query, keyword)


def _id_at(events_by_id: Any, session_id: str, last_id: str | None) -> bool:
    """True when the event last embedded is no longer in the session (created again)."""
    return last_id is None or not events_by_id(session_id, [last_id])


def _with_score(hit: HistoryHit, score: float) -> HistoryHit:
    return HistoryHit(
        session_id=hit.session_id,
        event_id=hit.event_id,
        seq=hit.seq,
        timestamp=hit.timestamp,
        said_at=hit.said_at,
        role=hit.role,
        snippet=hit.snippet,
        score=score,
    )
