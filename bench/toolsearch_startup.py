"""How fast the embedding index starts: model load, first search, and a known tool set.

Each measurement runs in a fresh interpreter (the model loads once per process, so only a new
process shows the load), in rounds, the contenders interleaved within each round:
- "import": `import turnlog.toolsearch.embedding` and building `EmbeddingToolIndex()` (which
  must load nothing);
- "load": `MiniLmEmbedder.load()`, as `load_seconds` reports it;
- "cold first search": index 50 tools (the BFCL catalogue's first 50; a built-in list with
  --no-bfcl) and search once, the model loading on that first use;
- "warmed first search": the same after `warm_up()` was called at process start and the
  process spent 1 s on other start-up work (the load runs meanwhile, on another thread).
Then, in this process, a session offered a tool set that was indexed before (and released):
how many model calls and how long that indexing takes, against a new set.

Target (issue 12, item 6): the warmed first search pays no load (its time close to a search
on a loaded model), and a known set does no model work (0 calls).

    python bench/toolsearch_startup.py [--quick] [--rounds N] [--no-bfcl]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside bench/.cache, not even bytecode

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from toolsearch_bfcl import machine, table  # noqa: E402

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time
sys.dont_write_bytecode = True
mode, tools_file = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
from turnlog.toolsearch.base import ToolReference
from turnlog.toolsearch.embedding import EmbeddingToolIndex, default_embedder
if mode == "warmed":
    default_embedder().warm_up()
index = EmbeddingToolIndex()
imported = time.perf_counter() - t0
loaded_after_import = default_embedder().loaded
tools = [ToolReference(t["name"], t["description"], t["parameters"])
         for t in json.load(open(tools_file, encoding="utf-8"))]
out = {"import": imported, "loaded_after_import": loaded_after_import}
if mode == "load":
    default_embedder().load()
    out["load"] = default_embedder().load_seconds
else:
    if mode == "warmed":
        time.sleep(1.0)  # the application's other start-up work
    start = time.perf_counter()
    index.index_tools("s", tools)
    index.search("s", "what is the weather like in Paris tomorrow")
    out["first"] = time.perf_counter() - start
    start = time.perf_counter()
    index.search("s", "send an email to my colleague")
    out["next"] = time.perf_counter() - start
print(json.dumps(out))
"""

FALLBACK = [
    {"name": f"tool_{i}", "description": f"Tool number {i} does task {i}.", "parameters": None}
    for i in range(50)
]


def tool_list(use_bfcl: bool, cache_dir: Path) -> list[dict[str, object]]:
    if not use_bfcl:
        return FALLBACK
    import toolsearch_data as data

    _, tools = data.load(data.wheel(cache_dir))
    return [
        {"name": t.name, "description": t.description, "parameters": t.parameters}
        for t in tools[:50]
    ]


def child(mode: str, tools_file: Path) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(tools_file)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    out: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def known_set(tools: list[dict[str, object]]) -> list[list[str]]:
    """Model calls and time of indexing a new set, the same set again, and it after release."""
    import numpy as np

    from turnlog.toolsearch.base import ToolReference
    from turnlog.toolsearch.embedding import EmbeddingToolIndex, default_embedder

    class Counted:
        def __init__(self) -> None:
            self.calls = 0

        def embed(self, texts: list[str]) -> np.ndarray:
            self.calls += 1
            return default_embedder().embed(texts)

    refs = [ToolReference(str(t["name"]), str(t["description"]), t["parameters"]) for t in tools]  # type: ignore[arg-type]
    model = Counted()
    index = EmbeddingToolIndex(model)
    rows = []
    for label, session, order in (
        ("a new set of 50 tools", "a", refs),
        ("the same set, another session", "b", refs),
        ("the same set after both were released, reversed", "c", refs[::-1]),
    ):
        if session == "c":
            index.clear("a")
            index.clear("b")
        before = model.calls
        start = time.perf_counter()
        index.index_tools(session, order)
        elapsed = time.perf_counter() - start
        rows.append([label, str(model.calls - before), f"{elapsed * 1e3:,.2f}"])
    return rows


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds")
    parser.add_argument("--rounds", type=int, default=7, help="fresh processes per contender")
    parser.add_argument("--no-bfcl", action="store_true", help="use a built-in tool list")
    parser.add_argument(
        "--cache-dir", type=Path, default=HERE / ".cache", help="where the bfcl-eval wheel goes"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    import tempfile

    args = parse_args(argv)
    rounds = 2 if args.quick else args.rounds
    tools = tool_list(not args.no_bfcl, args.cache_dir)
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        tools_file = Path(tmp) / "tools.json"
        tools_file.write_text(json.dumps(tools), encoding="utf-8")
        samples: dict[str, list[dict[str, float]]] = {"load": [], "cold": [], "warmed": []}
        for _ in range(rounds):
            for mode in samples:  # interleaved: one process of each per round
                samples[mode].append(child(mode, tools_file))

    def med(mode: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[mode])

    lazy = not any(s["loaded_after_import"] for s in samples["load"] + samples["cold"])
    print(f"\n{rounds} fresh processes per contender, medians; {len(tools)} tools")
    rows = [
        ["import + EmbeddingToolIndex()", f"{med('cold', 'import') * 1e3:,.0f}"],
        ["model load (load_seconds)", f"{med('load', 'load') * 1e3:,.0f}"],
        ["cold: index 50 tools + first search", f"{med('cold', 'first') * 1e3:,.0f}"],
        ["warmed: the same, 1 s after warm_up()", f"{med('warmed', 'first') * 1e3:,.0f}"],
        ["a later search (loaded model)", f"{med('cold', 'next') * 1e3:,.1f}"],
    ]
    print(table(["step", "ms"], rows))
    print(f"model loaded by the import or the construction: {'no' if lazy else 'YES'}")
    print("\nin this process: indexing a tool set")
    known = known_set(tools)
    print(table(["tool set", "model calls", "ms"], known))
    saved = med("cold", "first") - med("warmed", "first")
    print(f"\nwarm-up saved {saved * 1e3:,.0f} ms of the first search")
    free = all(row[1] == "0" for row in known[1:])
    print(f"target a known set does no model work: {'MET' if free else 'MISSED'}")
    print(f"target the model loads lazily: {'MET' if lazy else 'MISSED'}")
    # Paid no load: the warm-up took at least half the load off the first search.
    paid_none = saved >= 0.5 * med("load", "load")
    print(f"target the warmed first search pays no load: {'MET' if paid_none else 'MISSED'}")


if __name__ == "__main__":
    main()
