"""Tool search on the Berkeley Function Calling Leaderboard: recall, latency, tokens, memory.

Data: the `simple_python` and `multiple` categories of the BFCL files in the `bfcl-eval` wheel
(downloaded once with `pip download --no-deps` into bench/.cache/). The union of their functions,
deduplicated by name, is indexed in one session; each question's user text is a query, and the
expected function is the one its possible answer calls.

For every index that can be built here (RegexToolIndex, Bm25ToolIndex, and with the `embeddings`
extra EmbeddingToolIndex and HybridToolIndex):
- recall@1 and recall@5 of the expected function;
- p50 and p99 query latency (max_results=5), CPU time per query (all threads), and the time to
  index the whole catalogue;
- the same on a harder catalogue of about 1,300 functions (adding, as distractors, the functions
  of the parallel, parallel_multiple, live_simple and live_multiple categories).
Then, for the default index (Bm25ToolIndex):
- tokens saved: o200k tokens of every tool definition sent as an OpenAI function tool (JSON
  schema), against the search tool's definition plus the definitions of the 5 tools the search
  returns, for catalogues of 20, 50 and 200 tools (per question, a random subset with a fixed seed
  that contains the expected function; averaged over the questions);
- memory: resident size added by 10,000 sessions of 50 tools each (a random 50 of the catalogue)
  prepared through `ToolSearch(index, eviction=...).prepare`, with no bound and with an LRU bound
  of 1,000 sessions, each in a fresh subprocess (also for EmbeddingToolIndex, with the extra).

Targets (issue 4): Bm25ToolIndex recall@5 >= 0.90; HybridToolIndex recall@5 above Bm25's.

    python bench/toolsearch_bfcl.py [--quick] [--parts recall,harder,tokens,memory]
        [--indexes regex,bm25,embedding,hybrid] [--misses N]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside bench/.cache, not even bytecode

import argparse  # noqa: E402
import contextlib  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import toolsearch_data as data  # noqa: E402
import turnlog  # noqa: E402
from turnlog.tokens import O200kCounter  # noqa: E402
from turnlog.toolsearch import (  # noqa: E402
    Bm25ToolIndex,
    LruEvictionStrategy,
    NeverEvict,
    RegexToolIndex,
    ToolIndex,
    ToolReference,
    ToolSearch,
    as_openai_tool,
)

HERE = Path(__file__).resolve().parent
SESSION = "bfcl"
TOP = 5
CATALOGUE_SIZES = (20, 50, 200)
RECALL_TARGET = 0.90


# --------------------------------------------------------------------------------------------
# Which indexes exist here.


def index_factories() -> dict[str, Callable[[], ToolIndex]]:
    """Name -> a function building a fresh index, for every index this environment has."""
    factories: dict[str, Callable[[], ToolIndex]] = {
        "regex": RegexToolIndex,
        "bm25": Bm25ToolIndex,
    }
    try:
        from turnlog.toolsearch.embedding import (
            EmbeddingToolIndex,
            HybridToolIndex,
            default_embedder,
        )

        embedder = default_embedder()  # raises ImportError when the extra is missing
    except ImportError as exc:
        print(f"(embedding and hybrid indexes skipped: {exc})")
        return factories
    start = time.perf_counter()
    embedder.embed(["load the model"])  # loaded once per process, shared by every index
    print(f"model: {embedder.model_path.name} from {embedder.model_path.parent}")
    print(f"model load and first embedding: {time.perf_counter() - start:.2f} s")
    factories["embedding"] = EmbeddingToolIndex
    factories["hybrid"] = HybridToolIndex
    return factories


# --------------------------------------------------------------------------------------------
# Recall and latency on the whole catalogue.


@dataclass
class Result:
    name: str
    index_seconds: float
    ranks: list[int | None] = field(default_factory=list)  # 1-based rank of the expected tool
    latencies: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # CPU seconds of the process, all threads
    misses: list[tuple[data.Question, list[str]]] = field(default_factory=list)

    def recall(self, k: int) -> float:
        return sum(1 for r in self.ranks if r is not None and r <= k) / len(self.ranks)

    def latency(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(
    name: str,
    factory: Callable[[], ToolIndex],
    questions: Sequence[data.Question],
    tools: Sequence[ToolReference],
) -> Result:
    """Index `tools` once in a new index (timed), then run every question (each timed)."""
    index = factory()
    gc.collect()
    start = time.perf_counter()
    index.index_tools(SESSION, tools)
    result = Result(name, time.perf_counter() - start)
    index.search(SESSION, "warm up")
    for question in questions:
        cpu = time.process_time()
        start = time.perf_counter()
        hits = index.search(SESSION, question.text, max_results=TOP)
        result.latencies.append(time.perf_counter() - start)
        result.cpu.append(time.process_time() - cpu)
        names = [hit.name for hit in hits]
        rank = names.index(question.expected) + 1 if question.expected in names else None
        result.ranks.append(rank)
        if rank is None:
            result.misses.append((question, names))
    return result


# --------------------------------------------------------------------------------------------
# Tokens saved.


def search_tool() -> dict[str, object]:
    """The search tool offered instead of the catalogue: ToolSearch's, as an OpenAI tool."""
    definition: dict[str, object] = as_openai_tool(
        ToolSearch(Bm25ToolIndex()).search_tool_definition()
    )
    return definition


@dataclass
class Tokens:
    size: int
    all_tools: float  # mean o200k tokens of the whole catalogue's definitions
    searched: float  # mean tokens of the search tool plus the returned definitions
    recall: float  # how often the expected tool was among those returned


def tokens_saved(
    questions: Sequence[data.Question],
    tools: Sequence[ToolReference],
    size: int,
    seed: int,
) -> Tokens:
    counter = O200kCounter()
    by_name = {tool.name: tool for tool in tools}
    cost = {
        tool.name: counter.count(json.dumps(data.openai_tool(tool), ensure_ascii=False))
        for tool in tools
    }
    search_cost = counter.count(json.dumps(search_tool(), ensure_ascii=False))
    rng = random.Random(seed * 1_000 + size)
    index = Bm25ToolIndex()
    all_total = searched_total = found = 0
    for i, question in enumerate(questions):
        others = [t for t in tools if t.name != question.expected]
        subset = [by_name[question.expected], *rng.sample(others, size - 1)]
        rng.shuffle(subset)
        session = f"q{i}"
        index.index_tools(session, subset)
        hits = [hit.name for hit in index.search(session, question.text, max_results=TOP)]
        index.clear(session)
        # The whole catalogue as one request's tools list, against the search tool plus the
        # definitions the search returned.
        all_total += counter.count(
            json.dumps([data.openai_tool(t) for t in subset], ensure_ascii=False)
        )
        searched_total += search_cost + sum(cost[name] for name in hits)
        found += question.expected in hits
    n = len(questions)
    return Tokens(size, all_total / n, searched_total / n, found / n)


# --------------------------------------------------------------------------------------------
# Memory, each measurement in a fresh interpreter.


def rss_bytes() -> int:
    """Resident bytes, after handing freed heap back to the OS (so earlier garbage does not
    hide what the sessions take)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: a little noisier
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(args: argparse.Namespace) -> None:
    """Prepare `--sessions` sessions of 50 tools each, then print the RSS delta as JSON."""
    _, tools = data.load(data.wheel(args.cache_dir))
    rng = random.Random(args.seed)
    # The tool lists are built before the first measurement, so only the index is counted.
    lists = [rng.sample(tools, 50) for _ in range(args.sessions)]
    if args.same_tools:
        lists = [lists[0]] * args.sessions
    index: ToolIndex
    if args.memory_child == "embedding":
        from turnlog.toolsearch.embedding import EmbeddingToolIndex

        index = EmbeddingToolIndex()  # its text cache (4,096 vectors) holds the catalogue
    else:
        index = Bm25ToolIndex()
    # Every tool once, before the measurement: the model, the caches and SQLite's schema are
    # loaded, so the delta is what the sessions hold.
    index.index_tools("warm-up", tools)
    index.clear("warm-up")
    eviction = LruEvictionStrategy(args.bound) if args.bound else NeverEvict()
    prepare = ToolSearch(index, eviction=eviction).prepare
    before = rss_bytes()
    start = time.perf_counter()
    for i, session_tools in enumerate(lists):
        prepare(f"s{i}", session_tools)
    elapsed = time.perf_counter() - start
    after = rss_bytes()
    held = sum(1 for i in range(args.sessions) if index.size(f"s{i}"))
    print(json.dumps({"delta": after - before, "seconds": elapsed, "sessions_held": held}))


def memory(
    args: argparse.Namespace, kind: str, bound: int, *, same: bool = False
) -> dict[str, object]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--memory-child",
        kind,
        *(["--same-tools"] if same else []),
        "--sessions",
        str(args.sessions),
        "--bound",
        str(bound),
        "--seed",
        str(args.seed),
        "--cache-dir",
        str(args.cache_dir),
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------------------------
# Report.


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            [
                row[0].ljust(widths[0]),
                *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)),
            ]
        )

    return "\n".join(
        [line(cells[0]), "  ".join("-" * w for w in widths), *(line(r) for r in cells[1:])]
    )


def machine() -> str:
    return (
        f"nproc {os.cpu_count()} | Python {platform.python_version()} | "
        f"SQLite {sqlite3.sqlite_version} | {platform.system()} {platform.machine()} | "
        f"turnlog {turnlog.__version__}"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--seed", type=int, default=4, help="seed of the random catalogues")
    parser.add_argument(
        "--indexes", default="", help="comma-separated subset of regex,bm25,embedding,hybrid"
    )
    parser.add_argument("--misses", type=int, default=8, help="misses of the default to print")
    parser.add_argument(
        "--parts",
        default="recall,harder,tokens,memory",
        help="comma-separated parts to run (default: all; --quick skips harder)",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=HERE / ".cache", help="where the bfcl-eval wheel goes"
    )
    parser.add_argument("--sessions", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bound", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--memory-child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--same-tools", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def recall_table(results: dict[str, Result]) -> str:
    return table(
        ["index", "recall@1", "recall@5", "p50 ms", "p99 ms", "cpu ms/q", "index all ms"],
        [
            [
                r.name,
                f"{r.recall(1):.3f}",
                f"{r.recall(TOP):.3f}",
                f"{r.latency(0.5) * 1e3:.3f}",
                f"{r.latency(0.99) * 1e3:.3f}",
                f"{statistics.fmean(r.cpu) * 1e3:.3f}",
                f"{r.index_seconds * 1e3:,.1f}",
            ]
            for r in results.values()
        ],
    )


def targets(results: dict[str, Result], misses: int) -> None:
    if "bm25" not in results:
        return
    bm25 = results["bm25"].recall(TOP)
    print(
        f"target bm25 recall@5 >= {RECALL_TARGET}: {'MET' if bm25 >= RECALL_TARGET else 'MISSED'}"
    )
    if "hybrid" in results:
        above = results["hybrid"].recall(TOP) > bm25
        print(f"target hybrid recall@5 > bm25: {'MET' if above else 'MISSED'}")
    if misses:
        missed = results["bm25"].misses
        print(f"\n{len(missed)} bm25 misses at 5; the first {min(misses, len(missed))}:")
        for question, got in missed[:misses]:
            print(f"- {question.id}: {question.text[:110]!r}")
            print(f"  expected {question.expected}; got {', '.join(got) or 'nothing'}")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.memory_child:
        memory_child(args)
        return
    path = data.wheel(args.cache_dir)
    questions, tools = data.load(path)
    print(machine())
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"data: {path.name}, categories {', '.join(data.CATEGORIES)}")
    if args.quick:
        questions = random.Random(args.seed).sample(questions, 60)
    factories = index_factories()
    if args.indexes:
        wanted = args.indexes.split(",")
        factories = {name: f for name, f in factories.items() if name in wanted}

    parts = set(args.parts.split(","))
    if "recall" in parts:
        print(f"\n{len(questions)} questions, {len(tools)} distinct functions in one session")
        results = {name: measure(name, f, questions, tools) for name, f in factories.items()}
        print(recall_table(results))
        targets(results, args.misses)

    if "harder" in parts and not args.quick:
        _, more = data.load(path, distractors=True)
        print(
            f"\nharder: the same questions, {len(more)} functions in one session (adding those "
            f"of {', '.join(data.DISTRACTORS)})"
        )
        harder = {name: measure(name, f, questions, more) for name, f in factories.items()}
        print(recall_table(harder))
        targets(harder, 0)

    if "tokens" in parts:
        tokens_part(questions, tools, args.seed)
    if "memory" in parts:
        memory_part(args, "embedding" in factories)


def tokens_part(
    questions: Sequence[data.Question], tools: Sequence[ToolReference], seed: int
) -> None:
    print("\ntokens: all definitions vs the search tool + the 5 returned (bm25), mean per question")
    cost = O200kCounter().count(json.dumps(search_tool(), ensure_ascii=False))
    print(f"search tool definition (ToolSearch's, OpenAI shape): {cost} tokens")
    rows = []
    for size in CATALOGUE_SIZES:
        t = tokens_saved(questions, tools, size, seed)
        rows.append(
            [
                size,
                f"{t.all_tools:,.0f}",
                f"{t.searched:,.0f}",
                f"{1 - t.searched / t.all_tools:.1%}",
                f"{t.recall:.3f}",
            ]
        )
    print(table(["tools", "all tokens", "search tokens", "saved", "recall@5"], rows))


def memory_row(label: str, m: dict[str, object]) -> list[str]:
    return [
        label,
        f"{int(str(m['delta'])) / 2**20:,.1f}",
        f"{int(str(m['sessions_held'])):,}",
        f"{float(str(m['seconds'])):.1f}",
    ]


def memory_part(args: argparse.Namespace, embeddings: bool) -> None:
    if args.sessions is None:
        args.sessions = 1_000 if args.quick else 10_000
    bound = 100 if args.quick else 1_000
    print(f"\nmemory: {args.sessions:,} sessions x 50 tools, each run in a fresh process")
    kinds = ["bm25"] + (["embedding"] if embeddings and not args.quick else [])
    rows = []
    for kind in kinds:
        for label, b in (("no bound", 0), (f"LRU {bound:,}", bound)):
            rows.append(memory_row(f"{kind}, {label}", memory(args, kind, b)))
    if embeddings and not args.quick:
        m = memory(args, "embedding", 0, same=True)
        rows.append(memory_row("embedding, no bound, one tool list for all", m))
    print(table(["index, bound", "RSS delta MiB", "indexes held", "seconds"], rows))
    print("(each session prepared with ToolSearch(index, eviction=...).prepare)")


if __name__ == "__main__":
    main()
