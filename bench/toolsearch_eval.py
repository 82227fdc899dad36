"""Tool search recall by slice: does the hybrid ever fall below the better of its two parts?

Two data sets from the BFCL wheel (downloaded once into bench/.cache/, see toolsearch_data.py):
- "repo": the questions of `simple_python` and `multiple` (600) against the union of their
  functions (589), the set bench/toolsearch_bfcl.py measures; the fusion was chosen on it.
- "live": the questions of `live_simple`, `live_multiple` and `live_parallel_multiple` (1,335,
  written by users of a live service) against the union of their functions, one tool per
  distinct (name, description): 1,115 tools, several variants of one function among them. It
  was not looked at while choosing. A variant past the first is named `<name>~<n>`, and a
  variant of the expected function counts as the function: the search asks for 25 hits and
  recall@5 reads its first 5 distinct functions. A question expecting several functions (the
  parallel ones) scores the share of them found.

Slices: every question on the whole pool; each category; "no shared word", the questions
sharing no word (turnlog's query words, no stemming) with any expected tool's name, description
or parameter text; and the same questions on a catalogue of 50 tools per question (the expected
ones plus random others, seed fixed), whole and "no shared word".

Contenders: Bm25ToolIndex, EmbeddingToolIndex, HybridToolIndex (default: standardized-score
fusion) and HybridToolIndex(fusion="rrf") (the earlier default). One embedder serves them all,
with query vectors memoized so a question is embedded once (recall does not depend on it).
The "oracle" column is no index: per question, the better of BM25's and the embedding's
recall, what a fusion that always picked the right one of the two lists would reach.

--ceiling adds, on each set's whole pool, the best recall of the standardized-score fusion
over a grid of list depths and BM25 weights, chosen on that very set: an upper bound of what
tuning this fusion's two constants could give, not a result.

Targets (issue 12, item 4): the hybrid at least as good as the better of BM25 and embedding on
every slice of both sets; hybrid recall@5 >= 0.95 on the whole live pool.

    python bench/toolsearch_eval.py [--quick] [--sets repo,live] [--seed N]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside bench/.cache, not even bytecode

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import toolsearch_data as data  # noqa: E402
from toolsearch_bfcl import machine, table  # noqa: E402
from turnlog.toolsearch import Bm25ToolIndex, ToolIndex, ToolReference  # noqa: E402
from turnlog.toolsearch.embedding import (  # noqa: E402
    E5SmallEmbedder,
    EmbeddingToolIndex,
    HybridToolIndex,
    default_embedder,
)
from turnlog.toolsearch.words import name_words, query_words, schema_text  # noqa: E402

HERE = Path(__file__).resolve().parent
LIVE = ("live_simple", "live_multiple", "live_parallel_multiple")
TOP = 5
ASK = 25  # hits asked for, so 5 distinct functions remain after folding variants
SMALL = 50
POOL_TARGET = 0.95
CONTENDERS = ("bm25", "embedding", "hybrid", "hybrid rrf")
COLUMNS = (*CONTENDERS, "oracle")
CEILING_DEPTHS = (10, 20, 50, 100)
CEILING_WEIGHTS = (0.5, 0.7, 0.85, 1.0, 1.2, 1.5)


@dataclass(frozen=True)
class Question:
    id: str
    category: str
    text: str
    expected: tuple[str, ...]


@dataclass
class DataSet:
    name: str
    questions: list[Question]
    tools: list[ToolReference]
    function: dict[str, str] = field(default_factory=dict)  # tool name -> function name


def repo_set(path: Path) -> DataSet:
    questions, tools = data.load(path)
    return DataSet(
        "repo",
        [Question(q.id, q.id.rsplit("_", 1)[0], q.text, (q.expected,)) for q in questions],
        tools,
        {t.name: t.name for t in tools},
    )


def _lines(archive: zipfile.ZipFile, member: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in archive.read(member).decode().splitlines() if line]


def live_set(path: Path) -> DataSet:
    questions: list[Question] = []
    variants: dict[tuple[str, str], dict[str, object]] = {}
    with zipfile.ZipFile(path) as archive:
        for category in LIVE:
            entries = _lines(archive, f"bfcl_eval/data/BFCL_v4_{category}.json")
            member = f"bfcl_eval/data/possible_answer/BFCL_v4_{category}.json"
            answers = {a["id"]: a["ground_truth"] for a in _lines(archive, member)}
            for entry in entries:
                for function in entry["function"]:  # type: ignore[attr-defined]
                    key = (function["name"], function.get("description", ""))
                    variants.setdefault(key, function)
                calls = answers[entry["id"]]
                expected = tuple(dict.fromkeys(next(iter(c)) for c in calls))  # type: ignore[attr-defined]
                text = data._user_text(entry["question"])
                questions.append(Question(str(entry["id"]), category, text, expected))
    tools: list[ToolReference] = []
    function: dict[str, str] = {}
    seen: dict[str, int] = {}
    for (name, description), spec in variants.items():
        seen[name] = seen.get(name, 0) + 1
        unique = name if seen[name] == 1 else f"{name}~{seen[name]}"
        tools.append(ToolReference(unique, description, spec.get("parameters")))  # type: ignore[arg-type]
        function[unique] = name
    return DataSet("live", questions, tools, function)


def tool_words(tool: ToolReference) -> set[str]:
    return (
        set(name_words(tool.name.split("~")[0]))
        | set(query_words(tool.description))
        | set(query_words(schema_text(tool.parameters)))
    )


def shares_no_word(question: Question, by_name: dict[str, ToolReference]) -> bool:
    words = set(query_words(question.text))
    return all(not (words & tool_words(by_name[name])) for name in question.expected)


EMBEDDERS: dict[str, Callable[[], Any]] = {"minilm": default_embedder, "e5": E5SmallEmbedder}
"""--embedder: the packaged default (all-MiniLM-L6-v2) or the multilingual extra's E5."""


class Memo:
    """The shared embedder, with each distinct text (and query) embedded once."""

    def __init__(self, embedder: str = "minilm") -> None:
        self.model = EMBEDDERS[embedder]()
        self.rows: dict[str, np.ndarray] = {}
        self.query_rows: dict[str, np.ndarray] = {}
        self.lock = threading.Lock()
        if hasattr(self.model, "embed_queries"):  # E5: queries embedded their own way
            self.embed_queries = self._embed_queries

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._memo(texts, self.rows, self.model.embed)

    def _embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._memo(texts, self.query_rows, self.model.embed_queries)

    def _memo(
        self, texts: list[str], rows: dict[str, np.ndarray], embed: Callable[[list[str]], Any]
    ) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in rows]
        if missing:
            fresh = embed(missing)
            with self.lock:
                rows.update(zip(missing, fresh, strict=True))
        return np.stack([rows[t] for t in texts]) if texts else np.zeros((0, 384))


def contenders(memo: Memo) -> dict[str, ToolIndex]:
    bm25, embedding = Bm25ToolIndex(), EmbeddingToolIndex(memo)
    return {
        "bm25": bm25,
        "embedding": embedding,
        "hybrid": HybridToolIndex(bm25, embedding),
        "hybrid rrf": HybridToolIndex(bm25, embedding, fusion="rrf"),
    }


def found(index: ToolIndex, session: str, question: Question, function: dict[str, str]) -> float:
    hits = index.search(session, question.text, max_results=ASK)
    top = list(dict.fromkeys(function[hit.name] for hit in hits))[:TOP]
    return sum(name in top for name in question.expected) / len(question.expected)


def run(dataset: DataSet, seed: int, memo: Memo) -> dict[str, dict[str, list[float]]]:
    """slice -> contender -> per-question recall@5."""
    indexes = contenders(memo)
    first: dict[str, ToolReference] = {}
    for tool in dataset.tools:
        first.setdefault(dataset.function[tool.name], tool)
    start = time.perf_counter()
    indexes["bm25"].index_tools("pool", dataset.tools)
    indexes["embedding"].index_tools("pool", dataset.tools)
    print(f"  indexed {len(dataset.tools):,} tools in {time.perf_counter() - start:.1f} s")
    rng = random.Random(seed)
    slices: dict[str, dict[str, list[float]]] = {}

    def add(slice_name: str, contender: str, value: float) -> None:
        slices.setdefault(slice_name, {c: [] for c in COLUMNS})[contender].append(value)

    for n, question in enumerate(dataset.questions):
        lonely = shares_no_word(question, first)
        expected_tools = [first[name] for name in question.expected]
        others = [t for t in dataset.tools if dataset.function[t.name] not in question.expected]
        small = [*expected_tools, *rng.sample(others, SMALL - len(expected_tools))]
        rng.shuffle(small)
        session = f"q{n}"
        indexes["bm25"].index_tools(session, small)
        indexes["embedding"].index_tools(session, small)
        wholes: dict[str, float] = {}
        fifties: dict[str, float] = {}
        for contender, index in indexes.items():
            wholes[contender] = found(index, "pool", question, dataset.function)
            fifties[contender] = found(index, session, question, dataset.function)
        for results in (wholes, fifties):
            results["oracle"] = max(results["bm25"], results["embedding"])
        for contender in COLUMNS:
            whole, fifty = wholes[contender], fifties[contender]
            add("whole pool", contender, whole)
            add(f"  {question.category}", contender, whole)
            add(f"{SMALL} tools", contender, fifty)
            if lonely:
                add("no shared word, whole pool", contender, whole)
                add(f"no shared word, {SMALL} tools", contender, fifty)
        indexes["bm25"].clear(session)
        indexes["embedding"].clear(session)
    return slices


def report(dataset: DataSet, slices: dict[str, dict[str, list[float]]]) -> list[bool]:
    rows = []
    verdicts = []
    order = ["whole pool", *sorted(n for n in slices if n.startswith("  ")), f"{SMALL} tools"]
    order += [n for n in slices if n not in order]
    for name in order:
        results = slices[name]
        mean = {c: sum(v) / len(v) for c, v in results.items()}
        best_part = max(mean["bm25"], mean["embedding"])
        ok = mean["hybrid"] >= best_part - 1e-12
        verdicts.append(ok)
        rows.append(
            [
                name,
                f"{len(results['bm25']):,}",
                *(f"{mean[c]:.3f}" for c in COLUMNS),
                "yes" if ok else f"NO ({mean['hybrid'] - best_part:+.3f})",
            ]
        )
    print(table(["slice", "questions", *COLUMNS, "hybrid >= best part"], rows))
    return verdicts


def ceiling(dataset: DataSet, memo: Memo) -> None:
    """The best whole-pool recall of the default fusion over its depth and BM25 weight,
    chosen on this set (an upper bound of tuning, not a result)."""
    bm25, embedding = Bm25ToolIndex(), EmbeddingToolIndex(memo)
    bm25.index_tools("pool", dataset.tools)
    embedding.index_tools("pool", dataset.tools)
    rows = []
    for depth in CEILING_DEPTHS:
        for weight in CEILING_WEIGHTS:
            hybrid = HybridToolIndex(bm25, embedding, weights=(weight, 1.0), depth=depth)
            values = [found(hybrid, "pool", q, dataset.function) for q in dataset.questions]
            rows.append((sum(values) / len(values), depth, weight))
    rows.sort(reverse=True)
    print(f"  fusion ceiling on {dataset.name}'s whole pool (depth x BM25 weight, tuned on it):")
    for recall, depth, weight in rows[:3]:
        print(f"    {recall:.3f}  depth {depth}, BM25 weight {weight}")
    default = next(r for r, d, w in rows if d == 50 and w == 1.0)
    print(f"    (the default, depth 50 and weight 1.0: {default:.3f})")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 questions per set")
    parser.add_argument("--seed", type=int, default=12, help="seed of the 50-tool catalogues")
    parser.add_argument("--sets", default="repo,live", help="comma-separated: repo,live")
    parser.add_argument(
        "--ceiling", action="store_true", help="also the fusion's best depth and weight, per set"
    )
    parser.add_argument(
        "--embedder",
        choices=sorted(EMBEDDERS),
        default="minilm",
        help="minilm: the default model (embeddings extra); e5: E5SmallEmbedder (multilingual)",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=HERE / ".cache", help="where the bfcl-eval wheel goes"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    path = data.wheel(args.cache_dir)
    print(machine())
    print(f"data: {path.name}")
    builders: dict[str, Callable[[Path], DataSet]] = {"repo": repo_set, "live": live_set}
    verdicts: dict[str, list[bool]] = {}
    pool_recall = None
    for name in args.sets.split(","):
        dataset = builders[name](path)
        if args.quick:
            dataset.questions = random.Random(args.seed).sample(dataset.questions, 200)
        print(
            f"\n{name}: {len(dataset.questions):,} questions, {len(dataset.tools):,} tools "
            f"({len(set(dataset.function.values())):,} functions); recall@{TOP}"
        )
        memo = Memo(args.embedder)
        slices = run(dataset, args.seed, memo)
        verdicts[name] = report(dataset, slices)
        if args.ceiling:
            ceiling(dataset, memo)
        if name == "live":
            hybrid = slices["whole pool"]["hybrid"]
            pool_recall = sum(hybrid) / len(hybrid)
    print()
    for name, marks in verdicts.items():
        met = "MET" if all(marks) else f"MISSED on {marks.count(False)} of {len(marks)} slices"
        print(f"target hybrid >= max(bm25, embedding) on every slice of {name}: {met}")
    if pool_recall is not None:
        met = "MET" if pool_recall >= POOL_TARGET else "MISSED"
        print(f"target hybrid recall@5 >= {POOL_TARGET} on the whole live pool: {met}")
        print(f"  ({pool_recall:.3f})")


if __name__ == "__main__":
    main()
