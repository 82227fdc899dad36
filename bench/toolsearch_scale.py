"""Tool search at production scale: the cost of `prepare`, memory under churn, crowded search.

Data: the pool of issue 12, the functions of BFCL's live_simple, live_multiple and
live_parallel_multiple categories (from the `bfcl-eval` wheel, downloaded once into bench/.cache),
one tool per distinct (name, description): 1,115 tools; a name seen again with another
description gets a suffix, so names stay unique. Their 1,335 questions are the queries.

1. `ToolSearch.prepare` with the whole pool, interleaved in rounds with a plain FTS5 insert of
   the same rows (the same contentless table and tokenizer, rows made beforehand): an unchanged
   set (the same list; the same tuple; new but equal objects) and a new set (tools seen before;
   new objects of known content; content never seen, with the words of its names split before
   and not). Targets: unchanged at most 0.1 ms, a new set at most 1.5x the plain insert.
2. Memory: 10,000 sessions of 50 tools each (a random 50 of the pool) prepared through
   `ToolSearch(index, eviction=LruEvictionStrategy(1000))`, in a fresh process per index; RSS
   after 1,000, 2,000, 5,000 and 10,000 sessions. Target: RSS at 10,000 at most 1.2x RSS at
   1,000.
3. Search latency of one session (a random 50 tools) alone in its index, and with 1,000 other
   sessions indexed, interleaved query by query, each query 3 times. Target: p50 and p99
   within 1.2x, over all samples and over each query's fastest of 3.

    python bench/toolsearch_scale.py [--quick] [--parts prepare,memory,latency]
        [--indexes bm25,regex]
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
import random  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

import _harness as harness  # noqa: E402
import toolsearch_data as data  # noqa: E402
from turnlog.toolsearch import (  # noqa: E402
    Bm25ToolIndex,
    LruEvictionStrategy,
    RegexToolIndex,
    ToolIndex,
    ToolReference,
    ToolSearch,
    words,
)
from turnlog.toolsearch.bm25 import _TOKENIZER as TOKENIZER  # noqa: E402
from turnlog.toolsearch.bm25 import tool_row  # noqa: E402

HERE = Path(__file__).resolve().parent
POOL = ("live_simple", "live_multiple", "live_parallel_multiple")
UNCHANGED_TARGET = 0.1e-3
NEW_SET_TARGET = 1.5
MEMORY_TARGET = 1.2
LATENCY_TARGET = 1.2
REPEATS = 3


def pool(path: Path) -> tuple[list[ToolReference], list[str]]:
    """The 1,115 tools of `POOL` (one per distinct name and description) and the questions."""
    tools: dict[tuple[str, str], ToolReference] = {}
    names: dict[str, int] = {}
    questions: list[str] = []
    with zipfile.ZipFile(path) as archive:
        for category in POOL:
            member = f"bfcl_eval/data/BFCL_v4_{category}.json"
            for line in archive.read(member).decode("utf-8").splitlines():
                if not line.strip():
                    continue
                entry = json.loads(line)
                questions.append(data._user_text(entry["question"]))
                for function in entry["function"]:
                    key = (function["name"], function.get("description", ""))
                    if key in tools:
                        continue
                    seen = names.get(key[0], 0)
                    names[key[0]] = seen + 1
                    name = key[0] if not seen else f"{key[0]}_{seen + 1}"
                    tools[key] = ToolReference(name, key[1], function.get("parameters"))
    return list(tools.values()), questions


def rss_bytes() -> int:
    """Resident bytes, after handing freed heap back to the OS."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: a little noisier
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------------------------
# 1. The cost of prepare.

Setup = Callable[[], Callable[[], object]]
"""Prepares one timed operation (untimed) and returns it."""


def interleave(contenders: dict[str, Setup], rounds: int, seed: int) -> dict[str, list[float]]:
    """Each round, every contender in a shuffled order: its setup untimed, then one operation
    timed with the garbage collector off. One untimed warm-up round first."""
    rng = random.Random(seed)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    order = list(contenders)
    for round_ in range(rounds + 1):
        rng.shuffle(order)
        for name in order:
            operation = contenders[name]()
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                operation()
                elapsed = time.perf_counter() - start
            finally:
                gc.enable()
            if round_:
                samples[name].append(elapsed)
    return samples


def copies(tools: Sequence[ToolReference], tag: str = "") -> list[ToolReference]:
    """New objects with the same content (or, with a tag, content never seen)."""
    return [ToolReference(t.name, t.description + tag, t.parameters) for t in tools]


def rotated(tools: list[ToolReference], n: int) -> list[ToolReference]:
    """The same tools in an order no other session holds (so the index stores a new set)."""
    at = 1 + n % (len(tools) - 1)
    return tools[at:] + tools[:at]


def prepare_part(tools: list[ToolReference], rounds: int, seed: int) -> None:
    print(f"\n1. ToolSearch.prepare with {len(tools):,} tools; {rounds} rounds, medians")
    rows = [tool_row(t) for t in tools]
    search = ToolSearch(Bm25ToolIndex(), eviction=LruEvictionStrategy(1000))
    as_tuple = tuple(tools)
    twins = [copies(tools), copies(tools)]
    counter = iter(range(10**9))

    def unchanged(tools_for: Callable[[], Sequence[ToolReference]]) -> Setup:
        def setup() -> Callable[[], object]:
            given = tools_for()
            search.prepare("steady", given)
            again = tools_for()
            return lambda: search.prepare("steady", again)

        return setup

    def new_set(tools_for: Callable[[int], Sequence[ToolReference]], cold: bool = False) -> Setup:
        def setup() -> Callable[[], object]:
            n = next(counter)
            search.evict("new")  # the previous round's set: its table is emptied for reuse
            given = tools_for(n)
            if cold:  # names never split either: a catalogue's first prepare in a process
                words._forget_names()
            return lambda: search.prepare("new", given)

        return setup

    def step(work: Callable[[list[ToolReference]], object]) -> Setup:
        def setup() -> Callable[[], object]:
            given = copies(tools, f" (s{next(counter)})")
            return lambda: work(given)

        return setup

    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("PRAGMA page_size = 1024")

    def plain(content: bool) -> Setup:
        def setup() -> Callable[[], object]:
            table = f"plain{next(counter)}"
            columns = "name_words, description, params"
            if content:
                conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(name UNINDEXED, "
                             f"{columns}, tokenize = \"{TOKENIZER}\")")  # fmt: skip
                values = [
                    (i + 1, t.name, *r) for i, (t, r) in enumerate(zip(tools, rows, strict=False))
                ]
                sql = f"INSERT INTO {table} (rowid, name, {columns}) VALUES (?, ?, ?, ?, ?)"
            else:
                conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5({columns}, "
                             f"content='', tokenize = \"{TOKENIZER}\")")  # fmt: skip
                values = [(i + 1, *r) for i, r in enumerate(rows)]
                sql = f"INSERT INTO {table} (rowid, {columns}) VALUES (?, ?, ?, ?)"

            def insert() -> None:
                conn.execute("BEGIN")
                conn.executemany(sql, values)
                conn.execute("COMMIT")

            return insert

        return setup

    contenders: dict[str, Setup] = {
        "unchanged: the same list": unchanged(lambda: tools),
        "unchanged: the same tuple": unchanged(lambda: as_tuple),
        "unchanged: new equal objects": unchanged(lambda: twins[next(counter) % 2]),
        "new set: tools seen before": new_set(lambda n: rotated(tools, n)),
        "new set: new objects, known content": new_set(lambda n: copies(rotated(tools, n))),
        "new set: content never seen": new_set(lambda n: copies(tools, f" (v{n})")),
        "new set: never seen, names too": new_set(lambda n: copies(tools, f" (w{n})"), True),
        "plain FTS5 insert, contentless": plain(False),
        "plain FTS5 insert, with content": plain(True),
    }
    # Two steps of a never-seen set alone, for its floor: what any prepare must add to the
    # insert for content never seen. Rounds of their own (with the insert, for the ratio): the
    # garbage they make would disturb the microsecond cases above.
    steps: dict[str, Setup] = {
        "step alone: the rows' text, never seen": step(lambda given: [tool_row(t) for t in given]),
        "step alone: check and digest, never seen": step(words.check_tools),
        "plain FTS5 insert, contentless": plain(False),
    }
    samples = interleave(contenders, rounds, seed)
    apart = interleave(steps, rounds, seed)
    medians = {name: sorted(s)[len(s) // 2] for name, s in samples.items()}
    base = medians["plain FTS5 insert, contentless"]
    print(
        harness.table(
            ["operation", "median ms", "p90 ms", "x plain insert"],
            [
                [
                    name,
                    harness.ms(medians[name]),
                    harness.ms(sorted(s)[int(0.9 * len(s))]),
                    f"{medians[name] / base:.2f}",
                ]
                for name, s in samples.items()
            ],
        )
    )
    assert [tool_row(t) for t in tools] == rows
    unchanged_ms = medians["unchanged: the same list"]
    print(
        f"target unchanged set <= {UNCHANGED_TARGET * 1e3} ms: "
        f"{harness.verdict(unchanged_ms <= UNCHANGED_TARGET)} ({unchanged_ms * 1e3:.4f} ms)"
    )
    for case in (
        "tools seen before",
        "new objects, known content",
        "content never seen",
        "never seen, names too",
    ):
        ratio = medians[f"new set: {case}"] / base
        print(
            f"target new set ({case}) <= {NEW_SET_TARGET}x the plain insert: "
            f"{harness.verdict(ratio <= NEW_SET_TARGET)} ({ratio:.2f}x)"
        )
    steps_median = {name: sorted(s)[len(s) // 2] for name, s in apart.items()}
    insert = steps_median["plain FTS5 insert, contentless"]
    text = steps_median["step alone: the rows' text, never seen"] / insert
    check = steps_median["step alone: check and digest, never seen"] / insert
    print(
        "  (the steps, in rounds of their own: "
        + ", ".join(f"{name} {harness.ms(v)} ms" for name, v in steps_median.items())
        + ")"
    )
    print(
        f"floor of a never-seen set: the insert + its rows' text ({text:.2f}x) + the check and "
        f"digest ({check:.2f}x) = {1 + text + check:.2f}x the plain insert, before any other work"
    )


# --------------------------------------------------------------------------------------------
# 2. Memory under churn, each index in a fresh process.


def make_index(kind: str) -> ToolIndex:
    if kind == "embedding":
        from turnlog.toolsearch.embedding import EmbeddingToolIndex

        return EmbeddingToolIndex()
    return {"bm25": Bm25ToolIndex, "regex": RegexToolIndex}[kind]()


def memory_child(args: argparse.Namespace) -> None:
    tools, _ = pool(data.wheel(args.cache_dir))
    rng = random.Random(args.seed)
    lists = [rng.sample(tools, 50) for _ in range(args.sessions)]
    index = make_index(args.memory_child)
    index.index_tools("warm-up", tools)  # every tool once: caches and schema loaded
    index.clear("warm-up")
    prepare = ToolSearch(index, eviction=LruEvictionStrategy(args.bound)).prepare
    marks = {m for m in (1_000, 2_000, 5_000, 10_000) if m <= args.sessions}
    marks |= {args.bound, args.sessions}
    out: dict[str, object] = {"before": rss_bytes()}
    start = time.perf_counter()
    for i, session_tools in enumerate(lists, 1):
        prepare(f"s{i}", session_tools)
        if i in marks:
            out[str(i)] = rss_bytes()
    out["seconds"] = time.perf_counter() - start
    out["held"] = sum(1 for i in range(1, args.sessions + 1) if index.size(f"s{i}"))
    print(json.dumps(out))


def memory_part(args: argparse.Namespace, kinds: Sequence[str]) -> None:
    sessions = 2_000 if args.quick else 10_000
    bound = 200 if args.quick else 1_000
    first = bound
    print(f"\n2. memory: {sessions:,} sessions x 50 tools, LRU bound {bound:,}, RSS in MiB")
    rows = []
    for kind in kinds:
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--memory-child",
            kind,
            "--sessions",
            str(sessions),
            "--bound",
            str(bound),
            "--seed",
            str(args.seed),
            "--cache-dir",
            str(args.cache_dir),
        ]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        m = json.loads(out.strip().splitlines()[-1])
        marks = sorted((k for k in m if k.isdigit()), key=int)
        at_first = m[str(first)]
        last = m[str(sessions)]
        ratio = last / at_first
        delta_ratio = (last - m["before"]) / max(1, at_first - m["before"])
        rows.append(
            [
                kind,
                f"{m['before'] / 2**20:.1f}",
                *(f"{m[k] / 2**20:.1f}" for k in marks),
                f"{ratio:.3f}",
                f"{delta_ratio:.3f}",
                f"{m['held']:,}",
                f"{m['seconds']:.1f}",
            ]
        )
        print(
            f"target {kind} RSS at {sessions:,} <= {MEMORY_TARGET}x RSS at {first:,}: "
            f"{harness.verdict(ratio <= MEMORY_TARGET)} ({ratio:.3f}x)"
        )
    headers = ["index", "before", *(f"{int(k):,}" for k in marks), "ratio", "delta ratio"]
    print(harness.table([*headers, "held", "seconds"], rows))
    print("(ratio: RSS at the end / RSS after the first bound's worth of sessions; delta ratio:")
    print(" the same for what the sessions added to the RSS before them)")


# --------------------------------------------------------------------------------------------
# 3. Search latency, alone and crowded.


def latency_part(
    args: argparse.Namespace, kinds: Sequence[str], tools: list[ToolReference], queries: list[str]
) -> None:
    others = 200 if args.quick else 1_000
    rng = random.Random(args.seed)
    mine = rng.sample(tools, 50)
    crowd = [rng.sample(tools, 50) for _ in range(others)]
    if args.quick:
        queries = queries[:300]
    print(f"\n3. search latency of one session of 50 tools, alone and with {others:,} others")
    rows = []
    for kind in kinds:
        alone, crowded = make_index(kind), make_index(kind)
        alone.index_tools("me", mine)
        for i, other in enumerate(crowd):
            crowded.index_tools(f"o{i}", other)
        crowded.index_tools("me", mine)
        for query in queries[:20]:  # warm up
            alone.search("me", query)
            crowded.search("me", query)
        # Every query 3 times on each index, the order shuffled each time: all the samples
        # (raw), and each query's fastest of its 3 (what the search costs without the other
        # processes' preemptions, which on this shared machine decide a raw p99).
        raw: dict[str, list[float]] = {"alone": [], "crowded": []}
        best: dict[str, list[float]] = {"alone": [], "crowded": []}
        pair = [("alone", alone), ("crowded", crowded)]
        for n, query in enumerate(queries):
            fastest = {"alone": float("inf"), "crowded": float("inf")}
            for repeat in range(REPEATS):
                random.Random(n * REPEATS + repeat).shuffle(pair)
                for name, index in pair:
                    start = time.perf_counter()
                    index.search("me", query)
                    elapsed = time.perf_counter() - start
                    raw[name].append(elapsed)
                    fastest[name] = min(fastest[name], elapsed)
            for name, seconds in fastest.items():
                best[name].append(seconds)
        for label, times in (("raw", raw), ("fastest of 3", best)):
            p50 = quantile(times["crowded"], 0.5) / quantile(times["alone"], 0.5)
            p99 = quantile(times["crowded"], 0.99) / quantile(times["alone"], 0.99)
            rows.append(
                [
                    f"{kind}, {label}",
                    harness.ms(quantile(times["alone"], 0.5)),
                    harness.ms(quantile(times["crowded"], 0.5)),
                    f"{p50:.2f}",
                    harness.ms(quantile(times["alone"], 0.99)),
                    harness.ms(quantile(times["crowded"], 0.99)),
                    f"{p99:.2f}",
                ]
            )
            met = p50 <= LATENCY_TARGET and p99 <= LATENCY_TARGET
            print(
                f"target {kind} ({label}) crowded p50 and p99 <= {LATENCY_TARGET}x alone: "
                f"{harness.verdict(met)} (p50 {p50:.2f}x, p99 {p99:.2f}x)"
            )
    headers = ["index, samples", "p50 alone", "p50 crowded", "ratio", "p99 alone"]
    print(harness.table([*headers, "p99 crowded", "ratio"], rows))
    print(
        f"(ms, max_results 5; raw: {len(queries) * REPEATS:,} searches each; fastest of 3: "
        f"{len(queries):,} queries)"
    )


def quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--seed", type=int, default=12, help="seed of the samples and rounds")
    parser.add_argument("--parts", default="prepare,memory,latency", help="which parts to run")
    parser.add_argument("--indexes", default="bm25,regex", help="bm25,regex[,embedding]")
    parser.add_argument(
        "--cache-dir", type=Path, default=HERE / ".cache", help="where the bfcl-eval wheel goes"
    )
    parser.add_argument("--sessions", type=int, default=10_000, help=argparse.SUPPRESS)
    parser.add_argument("--bound", type=int, default=1_000, help=argparse.SUPPRESS)
    parser.add_argument("--memory-child", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.memory_child:
        memory_child(args)
        return
    path = data.wheel(args.cache_dir)
    tools, queries = pool(path)
    print(harness.machine())
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"data: {path.name}, {', '.join(POOL)}: {len(tools):,} tools, {len(queries):,} questions")
    parts = set(args.parts.split(","))
    kinds = args.indexes.split(",")
    if "prepare" in parts:
        prepare_part(tools, 15 if args.quick else 60, args.seed)
    if "memory" in parts:
        memory_part(args, kinds)
    if "latency" in parts:
        latency_part(args, kinds, tools, queries)


if __name__ == "__main__":
    main()
