"""View read on SQLite: the time to read a 50-event active view as the covered history grows.

Each size gets its own database file holding one session: N covered message events, then the 50
events of the view (ten tool-calling turns' worth of users, assistants and tool results, starting
at a user message), then a COMPACTION boundary that names those 50 as preserved. Reads of
`SqliteStore.view` on every database are interleaved in rounds (shuffled each round); the table
gives medians.

Target (issue 2): median(view read, 100,000 covered) / median(view read, 100 covered) <= 1.5.

For context it also times a 50-event session that was never compacted (the cheapest possible
50-event read), and, before the boundaries are written, each session's view without a boundary
(the whole log is the view then, so that read grows with the log).

    python bench/view_read.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import random  # noqa: E402
import tempfile  # noqa: E402
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
    verdict,
)
from turnlog import CompactionBoundary, Session, SqliteStore  # noqa: E402
from turnlog.events import new_id  # noqa: E402

SESSION = "bench-session"
VIEW_EVENTS = 50
BATCH = 1_000
TARGET = 1.5


def build(path: Path, covered: int, seed: int) -> tuple[SqliteStore, list[str]]:
    """A database whose one session logs `covered` events and then the 50 of the view.

    Returns the store and the ids of the 50 view events. No boundary yet.
    """
    store = SqliteStore(path)
    store.create_session(Session(SESSION, created_at=datetime.now(UTC)))
    history = conversation(random.Random(seed), prefix="old")
    version = 0
    for start in range(0, covered, BATCH):
        n = min(BATCH, covered - start)
        batch = message_events(SESSION, history, n, id_prefix=f"old{start}")
        version = store.append_events(SESSION, batch, version, check_rules=False)  # setup
    tail = message_events(
        SESSION, conversation(random.Random(seed + 1), prefix="new"), VIEW_EVENTS, id_prefix="new"
    )
    assert tail[0].starts_turn
    store.append_events(SESSION, tail, version, check_rules=False)
    return store, [e.id for e in tail]


def add_boundary(store: SqliteStore, covered: int, view_ids: list[str]) -> None:
    """Append the boundary that keeps exactly `view_ids` (what last_events(50) would keep)."""
    boundary = CompactionBoundary(
        id=new_id(),
        pinned_event_ids=(),
        summary_event_ids=(),
        preserved_event_ids=tuple(view_ids),
        covered_event_count=covered,
        tokens_estimated_saved=0,
        strategy="window:last_events(50)",
    )
    store.append_events(SESSION, [boundary.to_event(SESSION)], store.version(SESSION))
    view = store.view(SESSION)
    assert [e.id for e in view] == view_ids, "the view is not the 50 preserved events"


def reads(store: SqliteStore, times: int, expect: int) -> Block:
    def block() -> int:
        for _ in range(times):
            view = store.view(SESSION)
        assert len(view) == expect
        return times

    return block


def main() -> None:
    args = parse_args(__doc__)
    sizes = [100, 1_000, 10_000] if args.quick else [100, 10_000, 100_000]
    rounds, inner = (5, 5) if args.quick else (41, 20)
    whole_rounds = 2 if args.quick else 5

    print(f"View read on SQLite{' (--quick: not the reported figures)' if args.quick else ''}")
    print(machine())
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        stores: dict[int, SqliteStore] = {}
        view_ids: dict[int, list[str]] = {}
        for size in sizes:
            stores[size], view_ids[size] = build(Path(tmp, f"covered-{size}.db"), size, args.seed)
        floor, _ = build(Path(tmp, "no-boundary-50.db"), 0, args.seed)

        # 1. Context: no boundary yet, so the view is the whole log.
        whole = interleave(
            {f"{s}": reads(stores[s], 1, s + VIEW_EVENTS) for s in sizes},
            whole_rounds,
            args.seed,
        )

        # 2. The benchmark: a boundary keeps the 50 newest events.
        for size in sizes:
            add_boundary(stores[size], size, view_ids[size])
        contenders = {f"{s}": reads(stores[s], inner, VIEW_EVENTS) for s in sizes}
        contenders["floor"] = reads(floor, inner, VIEW_EVENTS)
        timed = interleave(contenders, rounds, args.seed)
        for store in [*stores.values(), floor]:
            store.close()

    smallest = timed[f"{sizes[0]}"].median
    rows = [
        [
            f"{s:,} covered + boundary + 50",
            f"{s + VIEW_EVENTS + 1:,}",
            VIEW_EVENTS,
            ms(timed[f"{s}"].median),
            ms(timed[f"{s}"].quantile(0.1)),
            ms(timed[f"{s}"].quantile(0.9)),
            f"{timed[f'{s}'].median / smallest:.2f}x",
        ]
        for s in sizes
    ]
    rows.append(
        [
            "no boundary, 50 events only",
            VIEW_EVENTS,
            VIEW_EVENTS,
            ms(timed["floor"].median),
            ms(timed["floor"].quantile(0.1)),
            ms(timed["floor"].quantile(0.9)),
            f"{timed['floor'].median / smallest:.2f}x",
        ]
    )
    print()
    print(f"SqliteStore.view, 50-event view: {rounds} rounds x {inner} reads, ms per read")
    print(table(["session", "log events", "view", "median", "p10", "p90", "vs 100"], rows))
    ratio = timed[f"{sizes[-1]}"].median / smallest
    print(
        f"\nlargest/smallest ({sizes[-1]:,} vs {sizes[0]:,} covered): {ratio:.2f}x "
        f"(target <= {TARGET}): {verdict(ratio <= TARGET)}"
    )

    print()
    print(f"Context: the same sessions before compaction (view = whole log), {whole_rounds} rounds")
    print(
        table(
            ["session", "log events", "view", "median ms"],
            [
                [f"{s:,} + 50, no boundary", f"{s + 50:,}", f"{s + 50:,}", ms(whole[f"{s}"].median)]
                for s in sizes
            ],
        )
    )


if __name__ == "__main__":
    main()
