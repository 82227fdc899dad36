"""Compaction: one pass over a 10,000-event view, with warm and with cold token counts.

The view is read once from a `SqliteStore` in a temp dir (a system prompt, then a conversation of
plain and tool-calling turns), so every event carries its stored seq and timestamp, which is what
the per-event token cache keys on. Each timed pass is pure:
`strategy.compact(CompactionRequest.of(session, view))`.

- warm: the default counter (`O200kCounter`, shared cache), after a first pass filled the cache.
- cold: a fresh `O200kCounter()` for every pass, so every event is tokenized again.

Passes: `last_turns(10)` (the issue's figure), `token_budget(20,000)`, and the evaluation of a
`TokenCountTrigger`. Contenders are interleaved in rounds (shuffled each round); medians.
For context: tokenizing the view's texts in one `count_many` call, and rendering them.

    python bench/compaction.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import random  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

from _harness import (  # noqa: E402
    Block,
    conversation,
    interleave,
    machine,
    message_events,
    ms,
    parse_args,
    table,
)
from turnlog import (  # noqa: E402
    CompactionRequest,
    CompactionResult,
    CompactionWindow,
    Message,
    O200kCounter,
    Session,
    SessionEvent,
    SqliteStore,
    TokenCountTrigger,
    WindowCompactionStrategy,
    event_text,
)
from turnlog.tokens import default_counter  # noqa: E402

SESSION = "bench-session"
BUDGET = 20_000
THRESHOLD = 100_000


def stored_view(path: Path, size: int, seed: int) -> tuple[Session, list[SessionEvent]]:
    """A session whose view is `size` stored message events: a system prompt, then turns."""
    with SqliteStore(path) as store:
        session = Session(SESSION, created_at=datetime.now(UTC))
        store.create_session(session)
        system = SessionEvent.for_message(
            SESSION, Message.system("You are a support agent. Cite the docs you search.")
        )
        events = [
            system,
            *message_events(SESSION, conversation(random.Random(seed)), size - 1, id_prefix="e"),
        ]
        version = 0
        for start in range(0, size, 1_000):
            version = store.append_events(
                SESSION, events[start : start + 1_000], version, check_rules=False
            )
        view = store.view(SESSION)
    assert len(view) == size and all(e.seq is not None and e.timestamp for e in view)
    return session, view


def passes(run: Callable[[], object], times: int) -> Block:
    def block() -> int:
        for _ in range(times):
            run()
        return times

    return block


def main() -> None:
    args = parse_args(__doc__)
    size, rounds = (2_000, 3) if args.quick else (10_000, 21)
    warm_times = 3

    print(f"Compaction{' (--quick: not the reported figures)' if args.quick else ''}")
    print(machine())
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        session, view = stored_view(Path(tmp, "compaction.db"), size, args.seed)
    request = CompactionRequest.of(session, view)
    counter = default_counter()
    assert isinstance(counter, O200kCounter), f"the default counter is {counter!r}, not o200k"

    def window_pass(window: CompactionWindow, *, cold: bool) -> Callable[[], CompactionResult]:
        warm_strategy = WindowCompactionStrategy(window)

        def run() -> CompactionResult:
            if cold:
                strategy = WindowCompactionStrategy(window, token_counter=O200kCounter())
            else:
                strategy = warm_strategy
            return strategy.compact(CompactionRequest.of(session, view))

        return run

    def trigger_eval(*, cold: bool) -> Callable[[], bool]:
        warm_trigger = TokenCountTrigger(THRESHOLD)

        def run() -> bool:
            if cold:
                return TokenCountTrigger(THRESHOLD, token_counter=O200kCounter())(request)
            return warm_trigger(request)

        return run

    turns, budget = CompactionWindow.last_turns(10), CompactionWindow.token_budget(BUDGET)
    runs: dict[str, tuple[Callable[[], object], int]] = {
        "turns warm": (window_pass(turns, cold=False), warm_times),
        "turns cold": (window_pass(turns, cold=True), 1),
        "budget warm": (window_pass(budget, cold=False), warm_times),
        "budget cold": (window_pass(budget, cold=True), 1),
        "trigger warm": (trigger_eval(cold=False), warm_times),
        "trigger cold": (trigger_eval(cold=True), 1),
    }
    # The same answers warm and cold (the cache changes the time, never the counts).
    for kind in ("turns", "budget"):
        warm, cold = runs[f"{kind} warm"][0](), runs[f"{kind} cold"][0]()
        assert isinstance(warm, CompactionResult) and isinstance(cold, CompactionResult)
        assert not warm.unchanged and warm.tokens_estimated_saved == cold.tokens_estimated_saved
        assert [e.id for e in warm.view] == [e.id for e in cold.view]
    sent = runs["trigger warm"][0]()
    assert sent == runs["trigger cold"][0]()
    texts = [event_text(e) for e in view]
    tokens = sum(counter.count_many(texts))  # type: ignore[attr-defined]

    contenders = {name: passes(run, times) for name, (run, times) in runs.items()}
    contenders["render"] = passes(lambda: [event_text(e) for e in view], 1)
    contenders["tokenize"] = passes(lambda: O200kCounter().count_many(texts), 1)
    timed = interleave(contenders, rounds, args.seed)

    turns_result = runs["turns warm"][0]()
    budget_result = runs["budget warm"][0]()
    assert isinstance(turns_result, CompactionResult)
    assert isinstance(budget_result, CompactionResult)
    print(
        f"\nview: {len(view):,} stored message events, {request.turn_count:,} turns, "
        f"{tokens:,} o200k tokens"
    )
    print(
        f"last_turns(10): covers {len(turns_result.covered_events):,}, keeps "
        f"{len(turns_result.view):,}; token_budget({BUDGET:,}): covers "
        f"{len(budget_result.covered_events):,}, keeps {len(budget_result.view):,}; "
        f"TokenCountTrigger({THRESHOLD:,}) fires: {sent}"
    )
    print()
    print(f"{rounds} rounds; ms per pass (warm: median of blocks of {warm_times} passes)")

    def row(label: str, kind: str) -> list[str]:
        warm, cold = timed[f"{kind} warm"], timed[f"{kind} cold"]
        return [
            label,
            ms(warm.median),
            ms(warm.quantile(0.9)),
            ms(cold.median),
            ms(cold.quantile(0.9)),
            f"{cold.median / warm.median:.1f}x",
        ]

    print(
        table(
            ["pass", "warm", "warm p90", "cold", "cold p90", "cold/warm"],
            [
                row("compact, last_turns(10)", "turns"),
                row(f"compact, token_budget({BUDGET:,})", "budget"),
                row(f"TokenCountTrigger({THRESHOLD:,})", "trigger"),
            ],
        )
    )
    print()
    print("Context: the view's texts, once")
    print(
        table(
            ["step", "ms"],
            [
                [f"event_text for {len(view):,} events", ms(timed["render"].median)],
                [f"O200kCounter().count_many({len(view):,} texts)", ms(timed["tokenize"].median)],
            ],
        )
    )


if __name__ == "__main__":
    main()
