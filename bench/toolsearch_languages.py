"""Tool search beyond English: recall@5 of queries in seven languages.

Data: tests/fixtures/toolsearch_languages.json, written for turnlog (not translated from any
benchmark): 24 tools of a consumer assistant (weather, flights, bank cards, ...), each with an
English name and parameter names and one description in each of English, Chinese, Japanese,
Korean, Thai, French, German and Spanish; and 84 search queries, 12 per language (zh, ja, ko,
th, fr, de, es), each naming the tool it looks for. Queries are phrased as a user or a model
would ask, not copied from the descriptions: some share no word with their tool.

Catalogues, each in its own session:
- "same language": the 24 tools described in the query's language;
- "same language + BFCL": those 24 among the 589 English functions of bench/toolsearch_bfcl.py
  (the bfcl-eval wheel, downloaded once into bench/.cache/; skipped with --no-bfcl);
- "English descriptions": the 24 tools described in English, queried in the other languages
  (the cross-language case, which lexical search cannot bridge).

Contenders: RegexToolIndex, Bm25ToolIndex, EmbeddingToolIndex, HybridToolIndex (default
fusion) and HybridToolIndex(fusion="rrf") when this turnlog has it.

Targets (issue 12, item 3): on "same language", recall@5 >= 0.85 with BM25 and with the hybrid.

    python bench/toolsearch_languages.py [--quick] [--no-bfcl]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside bench/.cache, not even bytecode

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

import toolsearch_data as data  # noqa: E402
from toolsearch_bfcl import machine, table  # noqa: E402
from turnlog.toolsearch import Bm25ToolIndex, RegexToolIndex, ToolIndex, ToolReference  # noqa: E402

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "fixtures" / "toolsearch_languages.json"
TOP = 5
TARGET = 0.85


def load(path: Path = FIXTURE) -> tuple[list[dict[str, object]], list[dict[str, str]]]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return raw["tools"], raw["queries"]


def catalogue(tools: list[dict[str, object]], lang: str) -> list[ToolReference]:
    """The fixture's tools with their descriptions in `lang`."""
    return [
        ToolReference(
            str(t["name"]),
            t["description"][lang],  # type: ignore[index]
            {
                "type": "object",
                "properties": {p: {"type": "string"} for p in t["params"]},  # type: ignore[attr-defined]
            },
        )
        for t in tools
    ]


def factories(embedder: str = "minilm") -> dict[str, Callable[[], ToolIndex]]:
    made: dict[str, Callable[[], ToolIndex]] = {"regex": RegexToolIndex, "bm25": Bm25ToolIndex}
    try:
        from turnlog.toolsearch.embedding import (
            EmbeddingToolIndex,
            HybridToolIndex,
            default_embedder,
        )

        if embedder == "e5":  # the multilingual extra's model, one for every index here
            from turnlog.toolsearch.embedding import E5SmallEmbedder

            e5 = E5SmallEmbedder()
            e5.load()
            made["embedding"] = lambda: EmbeddingToolIndex(e5)
            made["hybrid"] = lambda: HybridToolIndex(Bm25ToolIndex(), EmbeddingToolIndex(e5))
            return made
        default_embedder().embed(["load the model"])
    except ImportError as exc:
        print(f"(embedding and hybrid skipped: {exc})")
        return made
    made["embedding"] = EmbeddingToolIndex
    made["hybrid"] = HybridToolIndex
    try:
        HybridToolIndex(fusion="rrf")  # type: ignore[call-arg]
        made["hybrid rrf"] = lambda: HybridToolIndex(fusion="rrf")  # type: ignore[call-arg]
    except TypeError:  # a turnlog from before the fusion option
        pass
    return made


def measure(
    made: dict[str, Callable[[], ToolIndex]],
    queries: list[dict[str, str]],
    catalogues: dict[str, list[ToolReference]],
) -> dict[str, dict[str, list[bool]]]:
    """contender -> language -> found at 5, per query; catalogues maps a language to its tools."""
    out: dict[str, dict[str, list[bool]]] = {}
    for name, factory in made.items():
        index = factory()
        for lang, tools in catalogues.items():
            index.index_tools(lang, tools)
        per: dict[str, list[bool]] = {}
        for q in queries:
            hits = index.search(q["lang"], q["text"], max_results=TOP)
            per.setdefault(q["lang"], []).append(q["expected"] in [h.name for h in hits])
        out[name] = per
    return out


def report(title: str, results: dict[str, dict[str, list[bool]]]) -> dict[str, float]:
    names = list(results)
    langs = list(next(iter(results.values())))
    rows = []
    for lang in langs:
        rows.append(
            [lang, *(f"{sum(results[n][lang]) / len(results[n][lang]):.2f}" for n in names)]
        )
    overall = {
        n: sum(sum(v) for v in results[n].values()) / sum(len(v) for v in results[n].values())
        for n in names
    }
    rows.append(["all", *(f"{overall[n]:.3f}" for n in names)])
    print(f"\n{title}: recall@{TOP}")
    print(table(["language", *names], rows))
    return overall


def misses(results: dict[str, dict[str, list[bool]]], queries: list[dict[str, str]]) -> None:
    if "bm25" not in results:
        return
    flat = [hit for lang in results["bm25"].values() for hit in lang]
    order = [q for lang in results["bm25"] for q in queries if q["lang"] == lang]
    missed = [q for q, hit in zip(order, flat, strict=True) if not hit]
    print(f"bm25 misses ({len(missed)}):")
    for q in missed:
        print(f"- [{q['lang']}] {q['text']!r} -> {q['expected']}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the BFCL catalogue")
    parser.add_argument("--no-bfcl", action="store_true", help="skip the BFCL catalogue")
    parser.add_argument(
        "--cache-dir", type=Path, default=HERE / ".cache", help="where the bfcl-eval wheel goes"
    )
    parser.add_argument(
        "--embedder",
        choices=["minilm", "e5"],
        default="minilm",
        help="minilm: the default model (embeddings extra); e5: E5SmallEmbedder (multilingual)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    tools, queries = load()
    print(machine())
    langs = list(dict.fromkeys(q["lang"] for q in queries))
    print(f"data: {FIXTURE.name}, {len(tools)} tools, {len(queries)} queries in {', '.join(langs)}")
    start = time.perf_counter()
    made = factories(args.embedder)
    print(f"indexes ready in {time.perf_counter() - start:.1f} s (model load included)")

    same = measure(made, queries, {lang: catalogue(tools, lang) for lang in langs})
    overall = report("same language, 24 tools", same)
    misses(same, queries)
    if not (args.quick or args.no_bfcl):
        _, functions = data.load(data.wheel(args.cache_dir))
        ours = {str(t["name"]) for t in tools}
        bfcl = [f for f in functions if f.name not in ours]  # a few names are in both
        big = {lang: [*catalogue(tools, lang), *bfcl] for lang in langs}
        report(f"same language + {len(bfcl)} English BFCL functions", measure(made, queries, big))
    english = catalogue(tools, "en")
    report(
        "English descriptions, queries in other languages",
        measure(made, queries, dict.fromkeys(langs, english)),
    )
    print()
    for name in ("bm25", "hybrid"):
        if name in overall:
            met = "MET" if overall[name] >= TARGET else "MISSED"
            print(
                f"target {name} recall@5 >= {TARGET} (same language): {met} ({overall[name]:.3f})"
            )


if __name__ == "__main__":
    main()
