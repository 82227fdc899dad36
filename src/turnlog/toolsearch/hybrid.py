"""`HybridToolIndex`: keyword and semantic search fused, and the two fusion functions.

Pure Python: the default semantic index (`EmbeddingToolIndex`) is imported only when a hybrid
is built without one, so a hybrid of two other `ToolIndex` objects needs no extra.

The default fusion, `score_fusion`, adds each index's scores after standardizing them per query
(z-scores: Fox and Shaw's CombSUM over Montague and Aslam's zero-mean, unit-variance
normalization, "Relevance score normalization for metasearch", CIKM 2001). An index whose best
hit stands far above the rest of its list (BM25 matching a rare word of one tool, an embedding
close to one tool) moves the fused order a lot; one whose top scores are bunched together (BM25
matching only a common word, embeddings of a language the model does not read) moves it
little. Reciprocal rank fusion (`reciprocal_rank_fusion`) looks at ranks only, so a weak first
place counts as much as a strong one; it stays available as `fusion="rrf"`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Final, Literal

from turnlog.errors import InvalidInput
from turnlog.toolsearch.base import ToolHit, ToolIndex, ToolReference
from turnlog.toolsearch.words import check_max_results

__all__ = ["HybridToolIndex", "reciprocal_rank_fusion", "score_fusion"]

FUSIONS: Final = ("scores", "rrf")


def _weights(weights: Sequence[float] | None, count: int) -> list[float]:
    if weights is None:
        return [1.0] * count
    if len(weights) != count:
        raise InvalidInput(f"{len(weights)} weights for {count} rankings")
    out = []
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise InvalidInput(f"a weight must be a number, got {weight!r}")
        if not math.isfinite(weight) or weight < 0:
            raise InvalidInput(f"a weight must be a finite number >= 0, got {weight!r}")
        out.append(float(weight))
    return out


def reciprocal_rank_fusion(
    rankings: Iterable[Sequence[str]],
    *,
    k: int = 60,
    weights: Sequence[float] | None = None,
) -> list[ToolHit]:
    """Fuse rankings by reciprocal rank: score(name) = sum of weight / (k + rank), ranks from 1.

    Args:
        rankings: names best first, one sequence per ranker (a name missing from one adds 0).
        k: damps the weight of the top ranks (60 in Cormack et al.'s paper).
        weights: one per ranking (default 1.0 each).

    Returns:
        Every name, highest fused score first; ties go to the better best rank, then by name.

    Raises:
        InvalidInput: when k < 0 or the weights do not match the rankings.
    """
    if k < 0:
        raise InvalidInput(f"k must be 0 or more, got {k}")
    lists = [list(r) for r in rankings]
    factors = _weights(weights, len(lists))
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for weight, ranking in zip(factors, lists, strict=True):
        seen: set[str] = set()
        for rank, name in enumerate(ranking, start=1):
            if name in seen:
                continue
            seen.add(name)
            scores[name] = scores.get(name, 0.0) + weight / (k + rank)
            best[name] = min(best.get(name, rank), rank)
    ordered = sorted(scores, key=lambda n: (-scores[n], best[n], n))
    return [ToolHit(name, scores[name]) for name in ordered]


def score_fusion(
    rankings: Iterable[Sequence[ToolHit]],
    *,
    weights: Sequence[float] | None = None,
    unscored: Sequence[int] | None = None,
) -> list[ToolHit]:
    """Fuse scored rankings by the weighted sum of their standardized scores.

    Each ranking's scores become z-scores, (score - mean) / standard deviation, the mean and
    deviation taken over that ranking's hits plus, when `unscored` says so, that many scores of
    0 (the tools a keyword index did not match at all, up to the depth asked). A name missing
    from a ranking gets that ranking's z-score of 0 when it has unscored tools, else its lowest
    z-score. A ranking with fewer than two scores, or all of them equal, adds nothing. Scores
    that are not finite count as 0.

    Args:
        rankings: hits best first, one sequence per ranker (a name's first hit counts).
        weights: one per ranking (default 1.0 each).
        unscored: per ranking, how many more tools it would have scored 0.

    Returns:
        Every name, highest fused score first; ties go to the better best rank, then by name.

    Raises:
        InvalidInput: the weights or `unscored` do not match the rankings, or a weight is
            negative or not finite.
    """
    lists = [list(r) for r in rankings]
    factors = _weights(weights, len(lists))
    pads = [0] * len(lists) if unscored is None else [max(0, int(n)) for n in unscored]
    if len(pads) != len(lists):
        raise InvalidInput(f"{len(pads)} unscored counts for {len(lists)} rankings")
    fused: dict[str, float] = {}
    best: dict[str, int] = {}
    parts: list[tuple[float, dict[str, float], float]] = []
    for weight, ranking, pad in zip(factors, lists, pads, strict=True):
        scores: dict[str, float] = {}
        for rank, hit in enumerate(ranking, start=1):
            if hit.name in scores:
                continue
            scores[hit.name] = hit.score if math.isfinite(hit.score) else 0.0
            best[hit.name] = min(best.get(hit.name, rank), rank)
        values = [*scores.values(), *([0.0] * pad)]
        spread = statistics.pstdev(values) if len(values) > 1 else 0.0
        if spread <= 0.0 or not math.isfinite(spread):
            parts.append((0.0, {}, 0.0))
            continue
        mean = statistics.fmean(values)
        z = {name: (score - mean) / spread for name, score in scores.items()}
        floor = (0.0 - mean) / spread if pad else min(z.values())
        parts.append((weight, z, floor))
    for name in best:
        fused[name] = sum(w * z.get(name, floor) for w, z, floor in parts if z)
    ordered = sorted(fused, key=lambda n: (-fused[n], best[n], n))
    return [ToolHit(name, fused[name]) for name in ordered]


class HybridToolIndex:
    """Keyword and semantic search, fused.

    Both indexes hold every session's tools; a query asks each for its best `depth` tools and
    fuses the two lists. By default (`fusion="scores"`) with `score_fusion`: each list's scores
    are standardized, the tools the keyword index did not match count as scored 0, and the
    weighted sums rank the tools, so an index that is sure of its best hit outweighs one that
    is not (see the module's docstring). `fusion="rrf"` fuses the ranks instead
    (`reciprocal_rank_fusion` with constant `k`). The score of a hit is the fused score.

    Args:
        bm25: the keyword index (default: a new `Bm25ToolIndex`).
        embedding: the semantic index (default: a new `EmbeddingToolIndex` on the packaged model).
        fusion: "scores" (standardized scores, the default) or "rrf" (reciprocal ranks).
        k: the RRF constant (used by `fusion="rrf"` only).
        weights: the weights of the keyword and the semantic list.
        depth: how many hits to take from each index before fusing.
        max_results: how many hits `search` returns when not told.
        preload: with the default embedding index, start loading its model in a background
            thread now (see `EmbeddingToolIndex`).

    Raises:
        ImportError: when `embedding` is None and the `embeddings` extra is not installed.
        InvalidInput: an unknown fusion, k negative, a weight negative or not finite, or depth
            or max_results not positive.
    """

    def __init__(
        self,
        bm25: ToolIndex | None = None,
        embedding: ToolIndex | None = None,
        *,
        fusion: Literal["scores", "rrf"] = "scores",
        k: int = 60,
        weights: tuple[float, float] = (1.0, 1.0),
        depth: int = 50,
        max_results: int = 5,
        preload: bool = False,
    ) -> None:
        self._max_results = check_max_results(max_results, 5)
        if fusion not in FUSIONS:
            raise InvalidInput(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
        if k < 0:
            raise InvalidInput(f"k must be 0 or more, got {k}")
        if depth < 1:
            raise InvalidInput(f"depth must be at least 1, got {depth}")
        self._weights = tuple(_weights(weights, 2))
        if bm25 is None:
            from turnlog.toolsearch.bm25 import Bm25ToolIndex

            bm25 = Bm25ToolIndex()
        if embedding is None:
            from turnlog.toolsearch.embedding import EmbeddingToolIndex

            embedding = EmbeddingToolIndex(preload=preload)
        self.bm25: ToolIndex = bm25
        self.embedding: ToolIndex = embedding
        self._fusion = fusion
        self._k = k
        self._depth = depth

    def index_tools(self, session_id: str, tools: Sequence[ToolReference]) -> None:
        """Index `tools` for the session in both indexes."""
        self.bm25.index_tools(session_id, tools)
        self.embedding.index_tools(session_id, tools)

    def search(
        self, session_id: str, query: str, *, max_results: int | None = None
    ) -> list[ToolHit]:
        """The fused ranking, best first, with fused scores; nothing for an unknown session.

        Raises:
            InvalidInput: `max_results` is not a positive integer.
        """
        limit = check_max_results(max_results, self._max_results)
        depth = max(self._depth, limit)
        lists = [
            index.search(session_id, query, max_results=depth)
            for index in (self.bm25, self.embedding)
        ]
        if self._fusion == "rrf":
            names = [[hit.name for hit in hits] for hits in lists]
            return reciprocal_rank_fusion(names, k=self._k, weights=self._weights)[:limit]
        if not any(lists):
            return []
        # A tool an index left out of a short list scored nothing there (BM25: no shared word).
        reachable = min(depth, self.size(session_id))
        unscored = [max(0, reachable - len(hits)) for hits in lists]
        return score_fusion(lists, weights=self._weights, unscored=unscored)[:limit]

    def clear(self, session_id: str) -> None:
        """Forget the session in both indexes."""
        self.bm25.clear(session_id)
        self.embedding.clear(session_id)

    def size(self, session_id: str) -> int:
        """How many tools the session holds (0 when unknown)."""
        return max(self.bm25.size(session_id), self.embedding.size(session_id))

    def __repr__(self) -> str:
        return (
            f"HybridToolIndex({self.bm25!r}, {self.embedding!r}, fusion={self._fusion!r}, "
            f"weights={self._weights})"
        )
