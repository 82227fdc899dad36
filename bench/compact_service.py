"""`SessionService.compact` end to end on every store, warm and cold.

`bench/compaction.py` times the strategy alone on a view already in memory. This script times
what an application calls: `service.compact(sid, trigger, strategy)`, which finds the session,
reads the version, reads the view from the store, evaluates the trigger, runs the strategy
(`last_turns(10)`, so it counts the tokens of every covered event for the saved estimate) and
appends the boundary with a version check. Every pass compacts a session of its own, whose view
is a system prompt and a 10,000-event conversation (the same texts as bench/compaction.py); so
every pass covers the same ~9,970 events and writes one boundary.

- warm: one long-lived store handle (connections open) and one `O200kCounter` whose per-event
  cache already holds the session's events (as when the application counted the view's tokens
  before, e.g. with a `TokenCountTrigger`); the time is the store I/O and the pass itself.
- cold: what a fresh process pays: a new store handle opened inside the timed pass (for
  SQLite a new file handle, for PostgreSQL a new pool, for Redis a new client; the memory store
  has no second handle, so only the counter is new) and a new `O200kCounter()`, so every event
  is tokenized again. Not included: importing turnlog and loading the tokenizer's vocabulary
  (tiktoken keeps it per process; it is loaded before timing).

For each store the table also gives the strategy alone on the view already read (what
bench/compaction.py times, warm) and the view read alone (`service.view`, warm handle), so the
share of the store in a pass is visible. Contenders are interleaved in rounds; medians.

    python bench/compact_service.py [--quick] [--stores memory,sqlite,postgres,redis]

PostgreSQL and Redis come from `TURNLOG_TEST_POSTGRES_DSN` and `TURNLOG_TEST_REDIS_URL` (the
local servers by default); everything is written to a schema / key prefix of its own, removed at
the end.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import argparse  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import tempfile  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import ExitStack  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from _harness import Block, conversation, interleave, machine, ms, table  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionRequest,
    CompactionWindow,
    MemoryStore,
    Message,
    O200kCounter,
    Session,
    SessionEvent,
    SessionService,
    SqliteStore,
    WindowCompactionStrategy,
)
from turnlog.stores.protocol import SessionStore  # noqa: E402
from turnlog.tokens import event_tokens  # noqa: E402

POSTGRES_DSN = os.environ.get(
    "TURNLOG_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("TURNLOG_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
WINDOW = CompactionWindow.last_turns(10)


def always(request: CompactionRequest) -> bool:
    return True


def session_events(sid: str, size: int, seed: int) -> list[SessionEvent]:
    """A system prompt, then `size - 1` conversation events (the same texts for every seed)."""
    talk = conversation(random.Random(seed))
    system = SessionEvent.for_message(
        sid, Message.system("You are a support agent. Cite the docs you search.")
    )
    return [system, *(SessionEvent.for_message(sid, next(talk)) for _ in range(size - 1))]


def fill(store: SessionStore, sid: str, size: int, seed: int) -> None:
    store.create_session(Session(sid, created_at=datetime.now(UTC)))
    events = session_events(sid, size, seed)
    version = 0
    for start in range(0, size, 1_000):
        version = store.append_events(sid, events[start : start + 1_000], version)


class Target:
    """One store: how to open a handle on it."""

    def __init__(self, name: str, opener: Callable[[], SessionStore]) -> None:
        self.name = name
        self.open = opener


def targets(names: list[str], tmp: Path, stack: ExitStack) -> Iterator[Target]:
    for name in names:
        if name == "memory":
            memory = MemoryStore()
            yield Target("memory", lambda memory=memory: memory)
        elif name == "sqlite":
            path = tmp / "compact.db"
            yield Target("sqlite", lambda path=path: SqliteStore(path))
        elif name == "postgres":
            import psycopg
            from psycopg import sql

            from turnlog.stores.postgres import PostgresStore

            schema = f"tl_bench_{uuid.uuid4().hex[:8]}"

            def drop(schema: str = schema) -> None:
                with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
                    admin.execute(
                        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                    )

            stack.callback(drop)
            yield Target(
                "postgres", lambda schema=schema: PostgresStore(POSTGRES_DSN, schema=schema)
            )
        elif name == "redis":
            import redis

            from turnlog.stores.redis import RedisStore

            prefix = f"tlbench-{uuid.uuid4().hex[:8]}"

            def purge(prefix: str = prefix) -> None:
                client = redis.Redis.from_url(REDIS_URL)
                keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
                for at in range(0, len(keys), 1000):
                    client.unlink(*keys[at : at + 1000])
                client.close()

            stack.callback(purge)
            yield Target("redis", lambda prefix=prefix: RedisStore(REDIS_URL, prefix=prefix))
        else:
            raise SystemExit(f"unknown store {name!r}: memory, sqlite, postgres or redis")


HEADERS = ["store", "strategy alone", "view read", "warm", "warm p90", "cold", "cold p90"]


def measure(target: Target, size: int, rounds: int, seed: int) -> list[str]:
    """One row of the table: the view read, the warm pass and the cold pass on `target`."""
    store = target.open()
    try:
        service = SessionService(store)
        # a session per timed pass (+1 for the warm-up block), per contender
        sessions = {k: [f"{k}-{i}" for i in range(rounds + 1)] for k in ("warm", "cold", "read")}
        for sid in (s for group in sessions.values() for s in group):
            fill(store, sid, size, seed)
        warm_counter = O200kCounter()
        warm_strategy = WindowCompactionStrategy(WINDOW, token_counter=warm_counter)
        for sid in sessions["warm"]:  # the counts the application had made before
            event_tokens(warm_counter).total(service.view(sid))
        session = service.get(sessions["warm"][0])
        view = service.view(session.id)  # read before any pass compacts it
        queues = {kind: iter(group) for kind, group in sessions.items()}
        results: dict[str, list[Any]] = {"warm": [], "cold": []}

        def warm() -> int:
            results["warm"].append(service.compact(next(queues["warm"]), always, warm_strategy))
            return 1

        def cold() -> int:
            fresh = target.open()
            try:
                strategy = WindowCompactionStrategy(WINDOW, token_counter=O200kCounter())
                result = SessionService(fresh).compact(next(queues["cold"]), always, strategy)
            finally:
                if fresh is not store:
                    fresh.close()
            results["cold"].append(result)
            return 1

        def read() -> int:
            assert len(service.view(next(queues["read"]))) == size
            return 1

        def alone() -> int:  # what bench/compaction.py times: the strategy on a read view
            assert not warm_strategy.compact(CompactionRequest.of(session, view)).unchanged
            return 1

        contenders: dict[str, Block] = {"warm": warm, "cold": cold, "read": read, "alone": alone}
        timed = interleave(contenders, rounds, seed)
    finally:
        store.close()
    for kind in ("warm", "cold"):
        assert all(
            not r.unchanged and not r.conflict and len(r.covered_events) > 0.99 * size - 40
            for r in results[kind]
        ), f"{target.name} {kind}: a pass did not compact"
    saved = {r.tokens_estimated_saved for r in results["warm"] + results["cold"]}
    assert len(saved) == 1, f"{target.name}: warm and cold passes disagree: {saved}"
    return [
        target.name,
        ms(timed["alone"].median),
        ms(timed["read"].median),
        ms(timed["warm"].median),
        ms(timed["warm"].quantile(0.9)),
        ms(timed["cold"].median),
        ms(timed["cold"].quantile(0.9)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stores", default="memory,sqlite,postgres,redis")
    args = parser.parse_args()
    size, rounds = (1_000, 3) if args.quick else (10_000, 7)

    print(f"service.compact end to end{' (--quick: not the figures)' if args.quick else ''}")
    print(machine())
    print(f"each pass: a session of {size:,} events, last_turns(10); {rounds} rounds, medians")
    O200kCounter().count("load the vocabulary before timing")
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp, ExitStack() as stack:
        for target in targets(args.stores.split(","), Path(tmp), stack):
            rows.append(measure(target, size, rounds, args.seed))
            print(table(HEADERS, rows[-1:]), flush=True)
    print()
    print("ms per service.compact pass; strategy alone and view read: warm, for comparison")
    print(table(HEADERS, rows))


if __name__ == "__main__":
    main()
