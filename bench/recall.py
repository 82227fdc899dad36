"""Recall (issue 27, item 5): how much of what compaction took out of the view a search gets back.

The generated long-conversation set of `bench/recall_data.py` (10 conversations of 9,000-13,000
tokens over 7-9 sessions spread across weeks, about 160 questions, each with its evidence
messages) is played turn by turn into a `SessionService` (over `MemoryStore`, or `SqliteStore` in
a temp dir with `--store sqlite`), with `service.compact` after every turn: a
`WindowCompactionStrategy(CompactionWindow.token_budget(N))` at 2,000, 4,000 and 8,000 tokens,
without a summarizer ("window") and with `ExtractiveSummarizer` ("+ extractive"). After the
conversation each question is asked, and per budget and strategy the table gives:

- evidence in view: an evidence event of the question is in `service.view(sid)`;
- reachable, BM25: it is in the view or in the top 5 of
  `service.store.search_history(sid, history_query(question, k=5))`;
- reachable, embeddings: the same with the top 5 by the cosine similarity of the question to
  each indexed event alone (the tool search's offline `MiniLmEmbedder`);
- reachable, hybrid: the same with the top 5 of `turnlog.history_hybrid.HybridHistory` (what
  `SessionService(history=HybridHistory())` ranks by: BM25's top 50 and the embeddings' top
  50 fused by the tool search's `score_fusion`); both left out, and said so, when the
  `embeddings` extra is missing;
- answer in view: every word of the answer string is in the view's text (for reference; a
  "date" question's answer is the day it was said, which only the metadata holds).

A question counts when at least one of its evidence events does. The targets (issue 27): at a
4,000-token budget, reachable at least 75% with BM25 and 90% with the hybrid, and never lower
than the plain view. Then: the questions by kind at 4,000 tokens, and BM25 with variants of the
query's words (`turnlog.history.query_terms` replaced for the run) to see what a miss is made of.

    python bench/recall.py [--quick] [--seed N] [--store memory|sqlite] [--no-hybrid]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import argparse  # noqa: E402
import contextlib  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import turnlog.history  # noqa: E402
from _harness import machine, table, verdict  # noqa: E402
from recall_data import KINDS, Conversation, Question, generate  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionRequest,
    CompactionWindow,
    ExtractiveSummarizer,
    MemoryStore,
    SessionService,
    SqliteStore,
    WindowCompactionStrategy,
)
from turnlog.history import history_query, indexed_text  # noqa: E402
from turnlog.text import event_text  # noqa: E402

BUDGETS = (2_000, 4_000, 8_000)
STRATEGIES = ("window", "+ extractive")
TARGET_BUDGET = 4_000
TARGET_BM25 = 0.75
TARGET_HYBRID = 0.90
K = 5
DEPTH = 50
"""How many hits of each ranking the hybrid fuses (as `HybridToolIndex` does)."""
_WORD = re.compile(r"[^\W_]+")


def always(request: CompactionRequest) -> bool:
    """Compact after every turn: the window decides whether anything leaves the view."""
    return True


def strategy(budget: int, name: str) -> WindowCompactionStrategy:
    summarizer = ExtractiveSummarizer() if name == "+ extractive" else None
    return WindowCompactionStrategy(CompactionWindow.token_budget(budget), summarizer=summarizer)


def event_id(sid: str, index: int) -> str:
    """The id the bench stores message `index` of the conversation played into `sid` under
    (event ids are unique across sessions)."""
    return f"{sid}-m{index}"


def play(service: SessionService, conv: Conversation, budget: int, name: str) -> str:
    """Play `conv` turn by turn into a new session, compacting after every turn; its id."""
    sid = service.create().id
    compaction = strategy(budget, name)
    start = 0
    for end in conv.turn_ends:
        for index in range(start, end):
            service.append_message(sid, conv.messages[index], event_id=event_id(sid, index))
        start = end
        service.compact(sid, always, compaction)
    return sid


Search = Callable[[SessionService, str, Conversation, Question], list[str]]
"""The ids of the top `K` events a search of session `sid` finds for a question."""


def bm25(service: SessionService, sid: str, conv: Conversation, question: Question) -> list[str]:
    hits = service.store.search_history(sid, history_query(question.text, k=K))
    return [h.event_id for h in hits]


class Hybrid:
    """BM25 and embeddings fused: each event's embedding is computed once per text (the same
    conversation is played once per budget and strategy)."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self.vectors: dict[str, Any] = {}
        self.sessions: dict[str, tuple[list[str], Any]] = {}
        self.seconds = 0.0

    def _embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        started = time.perf_counter()
        rows = np.asarray(self.embedder.embed(list(texts)), dtype=np.float32)
        self.seconds += time.perf_counter() - started
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.maximum(norms, 1e-12)

    def semantic(self, service: SessionService, sid: str) -> tuple[list[str], Any]:
        """The ids of the session's indexed events and their unit vectors, one row each (read
        once per session: the questions come after the conversation)."""
        import numpy as np

        known = self.sessions.get(sid)
        if known is not None:
            return known
        texts = {}
        for event in service.events(sid):
            text = indexed_text(event)
            if text is not None:
                texts[event.id] = text
        missing = [t for t in dict.fromkeys(texts.values()) if t not in self.vectors]
        if missing:
            for text, row in zip(missing, self._embed(missing), strict=True):
                self.vectors[text] = row
        ids = list(texts)
        known = self.sessions[sid] = (ids, np.stack([self.vectors[texts[i]] for i in ids]))
        return known

    def embeddings(
        self, service: SessionService, sid: str, conv: Conversation, question: Question
    ) -> list[str]:
        """The top `K` by cosine similarity alone."""
        return [h.name for h in self._semantic_hits(service, sid, question)[:K]]

    def _semantic_hits(self, service: SessionService, sid: str, question: Question) -> list[Any]:
        import numpy as np

        from turnlog.toolsearch.base import ToolHit

        ids, matrix = self.semantic(service, sid)
        query = self.vectors.get(question.text)
        if query is None:
            query = self.vectors[question.text] = self._embed([question.text])[0]
        cosine = matrix @ query
        order = np.argsort(-cosine)[:DEPTH]
        return [ToolHit(ids[i], float(cosine[i])) for i in order]

    def __call__(
        self, service: SessionService, sid: str, conv: Conversation, question: Question
    ) -> list[str]:
        """The top `K` of BM25 and embeddings fused."""
        from turnlog.toolsearch.base import ToolHit
        from turnlog.toolsearch.hybrid import score_fusion

        semantic = self._semantic_hits(service, sid, question)
        reachable = min(DEPTH, len(self.semantic(service, sid)[0]))
        keyword = [
            ToolHit(h.event_id, h.score)
            for h in service.store.search_history(sid, history_query(question.text, k=DEPTH))
        ]
        fused = score_fusion(
            [keyword, semantic],
            unscored=[max(0, reachable - len(hits)) for hits in (keyword, semantic)],
        )
        return [h.name for h in fused[:K]]


class Cached:
    """An embedder that embeds each text once across the replays (a conversation is played
    once per budget and strategy), for `HybridHistory`: the vectors are the same, so is the
    ranking."""

    def __init__(self, inner: Any, vectors: dict[str, Any]) -> None:
        self.inner, self.vectors = inner, vectors

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            rows = np.asarray(self.inner.embed(missing), dtype=np.float32)
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            for text, row in zip(missing, rows / np.maximum(norms, 1e-12), strict=True):
                self.vectors[text] = row
        return np.stack([self.vectors[t] for t in texts])


def shipped(history: Any) -> Search:
    """The hybrid as turnlog ships it: `HybridHistory.search` (BM25 of the store's index
    fused with the embeddings of every indexed event)."""

    def search(service: SessionService, sid: str, conv: Conversation, q: Question) -> list[str]:
        return [h.event_id for h in history.search(service, sid, history_query(q.text, k=K))]

    return search


def words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


@dataclass(frozen=True)
class Outcome:
    """What one question found in one run."""

    question: Question
    in_view: bool
    reachable: dict[str, bool]
    """Per search name."""
    answer_in_view: bool
    found: dict[str, bool]
    """Per search name: an evidence event is among the search's own hits."""


def judge(
    service: SessionService, sid: str, conv: Conversation, searches: dict[str, Search]
) -> list[Outcome]:
    """Ask every question of `conv` after it was played into `sid`."""
    view = service.view(sid)
    in_view_ids = {e.id for e in view}
    view_words: set[str] = set()
    for event in view:
        view_words |= words(event_text(event))
    out = []
    for question in conv.questions:
        evidence = {event_id(sid, i) for i in question.evidence}
        seen = not evidence.isdisjoint(in_view_ids)
        found = {name: not evidence.isdisjoint(s(service, sid, conv, question))
                 for name, s in searches.items()}  # fmt: skip
        out.append(
            Outcome(
                question,
                seen,
                {name: seen or hit for name, hit in found.items()},
                words(question.answer) <= view_words,
                found,
            )
        )
    return out


@contextlib.contextmanager
def open_service(kind: str) -> Iterator[SessionService]:
    if kind == "memory":
        with SessionService(MemoryStore()) as service:
            yield service
        return
    with (
        tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp,
        SessionService(SqliteStore(Path(tmp) / "recall.db")) as service,
    ):
        yield service


def run(
    service: SessionService,
    conversations: Sequence[Conversation],
    budgets: Sequence[int],
    strategies: Sequence[str],
    searches: dict[str, Search],
) -> dict[tuple[int, str], list[Outcome]]:
    """Every conversation played and asked per budget and strategy."""
    results: dict[tuple[int, str], list[Outcome]] = {}
    for budget in budgets:
        for name in strategies:
            outcomes = results.setdefault((budget, name), [])
            for conv in conversations:
                sid = play(service, conv, budget, name)
                outcomes += judge(service, sid, conv, searches)
    return results


def share(flags: Sequence[bool]) -> str:
    return f"{sum(flags) / len(flags):.1%}" if flags else "-"


def embedder() -> Any | None:
    """The tool search's offline embedder, or None when the `embeddings` extra is missing."""
    try:
        from turnlog.toolsearch.embedding import default_embedder

        found = default_embedder()
        found.embed(["warm"])
    except ImportError as exc:
        print(f"hybrid left out: {exc}")
        return None
    return found


_QUESTION_WORDS = frozenset(
    [
        "whats",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "how",
        "many",
        "much",
        "often",
        "long",
        "does",
        "did",
        "do",
        "get",
        "got",
        "ever",
        "supposed",
        "usually",
        "now",
        "again",
        "tell",
        "told",
        "remind",
        "remember",
        "know",
        "said",
        "mention",
        "mentioned",
    ]
)


def variants() -> dict[str, Callable[[str], list[str]]]:
    """Replacements for `turnlog.history.query_terms` to measure against the default."""
    default = turnlog.history.query_terms

    def conversational(query: str) -> list[str]:
        terms = [t for t in default(query) if t not in _QUESTION_WORDS]
        return terms or default(query)

    return {"default query_terms": default, "+ question/chat words dropped": conversational}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 conversations, one budget")
    parser.add_argument("--seed", type=int, default=0, help="the set's seed")
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--no-hybrid", action="store_true", help="BM25 only")
    args = parser.parse_args()
    started = time.perf_counter()
    conversations = generate(args.seed, conversations=3 if args.quick else 10)
    budgets = (TARGET_BUDGET,) if args.quick else BUDGETS
    questions = [q for c in conversations for q in c.questions]
    quick = " (--quick: not the reported figures)" if args.quick else ""
    print(f"Recall over compaction, store {args.store}{quick}")
    print(machine())
    counts = {k: sum(q.kind == k for q in questions) for k in KINDS}
    unshared = sum(_unshared(c, q) for c in conversations for q in c.questions)
    print(
        f"{len(conversations)} conversations, {sum(len(c.turn_ends) - 1 for c in conversations)} "
        f"turns, {sum(len(c.messages) for c in conversations):,} messages; "
        f"{len(questions)} questions ("
        + ", ".join(f"{k} {n}" for k, n in counts.items())
        + f"); {unshared} ({unshared / len(questions):.0%}) share no word with their evidence "
        "but stop words"
    )
    searches: dict[str, Search] = {"bm25": bm25}
    hybrid = None if args.no_hybrid else embedder()
    if hybrid is not None:
        from turnlog.history_hybrid import HybridHistory

        fused = Hybrid(hybrid)
        searches["embeddings"] = fused.embeddings
        searches["hybrid"] = shipped(HybridHistory(Cached(hybrid, fused.vectors), depth=DEPTH))
    with open_service(args.store) as service:
        results = run(service, conversations, budgets, STRATEGIES, searches)
        print()
        rows = []
        for (budget, name), outcomes in results.items():
            rows.append(
                [
                    f"{budget:,}",
                    name,
                    share([o.in_view for o in outcomes]),
                    share([o.reachable["bm25"] for o in outcomes]),
                    share([o.reachable["embeddings"] for o in outcomes]) if hybrid else "-",
                    share([o.reachable["hybrid"] for o in outcomes]) if hybrid else "-",
                    share([o.answer_in_view for o in outcomes]),
                ]
            )
        print(
            table(
                [
                    "budget",
                    "strategy",
                    "evidence in view",
                    "reachable BM25",
                    "reachable embeddings",
                    "reachable hybrid",
                    "answer in view",
                ],
                rows,
            )
        )
        at_target = results[(TARGET_BUDGET, "window")]
        reach = sum(o.reachable["bm25"] for o in at_target) / len(at_target)
        print()
        print(f"BM25 reachable at {TARGET_BUDGET:,} >= {TARGET_BM25:.0%}: {reach:.1%}, "
              f"{verdict(reach >= TARGET_BM25)}")  # fmt: skip
        if hybrid:
            h = sum(o.reachable["hybrid"] for o in at_target) / len(at_target)
            print(f"hybrid reachable at {TARGET_BUDGET:,} >= {TARGET_HYBRID:.0%}: {h:.1%}, "
                  f"{verdict(h >= TARGET_HYBRID)}")  # fmt: skip
        never_lower = all(
            o.reachable[n] >= o.in_view for os_ in results.values() for o in os_ for n in searches
        )
        print(f"reachable never below the view: {verdict(never_lower)}")
        print()
        kind_rows = []
        for kind in KINDS:
            picked = [o for o in at_target if o.question.kind == kind]
            kind_rows.append(
                [
                    kind,
                    len(picked),
                    share([o.in_view for o in picked]),
                    share([o.found["bm25"] for o in picked]),
                    share([o.reachable["bm25"] for o in picked]),
                    share([o.found["embeddings"] for o in picked]) if hybrid else "-",
                    share([o.found["hybrid"] for o in picked]) if hybrid else "-",
                    share([o.reachable["hybrid"] for o in picked]) if hybrid else "-",
                ]
            )
        print(f"By kind, {TARGET_BUDGET:,} tokens, window:")
        print(
            table(
                [
                    "kind",
                    "questions",
                    "in view",
                    "BM25 top 5",
                    "reachable BM25",
                    "embeddings top 5",
                    "hybrid top 5",
                    "reachable hybrid",
                ],
                kind_rows,
            )
        )
        print()
        variant_rows = []
        original = turnlog.history.query_terms
        try:
            for label, terms in variants().items():
                turnlog.history.query_terms = terms
                res = run(service, conversations, (TARGET_BUDGET,), ("window",), {"bm25": bm25})
                outcomes = res[(TARGET_BUDGET, "window")]
                paraphrased = [o for o in outcomes if o.question.kind == "paraphrase"]
                variant_rows.append(
                    [
                        label,
                        share([o.found["bm25"] for o in outcomes]),
                        share([o.found["bm25"] for o in paraphrased]),
                        share([o.reachable["bm25"] for o in outcomes]),
                    ]
                )
        finally:
            turnlog.history.query_terms = original
        print(f"BM25 query variants, {TARGET_BUDGET:,} tokens, window:")
        print(
            table(["query terms", "BM25 top 5", "paraphrase top 5", "reachable BM25"], variant_rows)
        )
    print()
    extra = ""
    if hybrid is not None:
        hy = fused
        extra = f" (embedding {hy.seconds:.1f} s of it)"
    print(f"{time.perf_counter() - started:.1f} s{extra}")


def _unshared(conv: Conversation, question: Question) -> bool:
    """Whether the question shares no word but stop words with its evidence (exact words)."""
    from turnlog.toolsearch.words import STOP_WORDS

    evidence = set()
    for index in question.evidence:
        message = conv.messages[index]
        evidence |= words(message.text or "")
        for result in message.tool_results:
            evidence |= words(result.content)
    return not (words(question.text) - STOP_WORDS - _QUESTION_WORDS) & evidence


if __name__ == "__main__":
    main()
