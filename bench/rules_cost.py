"""The view rules' cost on the server stores: a one-event append with the rules on and off.

For each store (PostgreSQL unpartitioned and partitioned, Redis), five contenders append the same
kind of conversation (user, call, result, reply, ...), one message per call, to a session of
their own, interleaved in shuffled rounds (`_harness.interleave`; medians):

- `append_events(session, [event], version)` with the rules on (`check_rules=True`, the default);
- the same with `check_rules=False`;
- the same with the rules on but without the handle's tail memory (`_append_remembered`
  switched off on that handle): what every append cost before the memory, a read of the log's
  end in one more round trip;
- `append_event(event)` (no expected version), with the rules on and off (it also builds the
  stored copy it returns, which `append_events` does not: compare it with its own "off" row).

    python bench/rules_cost.py [--quick] [--dsn=postgresql://...] [--url=redis://...]

The DSN defaults to $TURNLOG_TEST_POSTGRES_DSN, the URL to $TURNLOG_TEST_REDIS_URL, else the
servers on 127.0.0.1. Every schema and key it makes is dropped at the end.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing but the bench's schemas and keys

import argparse  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import uuid  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from typing import Any  # noqa: E402

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from _harness import (  # noqa: E402
    Block,
    Cursor,
    conversation,
    interleave,
    machine,
    message_events,
    table,
)
from turnlog import Session, SessionEvent  # noqa: E402
from turnlog.stores.postgres import PostgresStore  # noqa: E402
from turnlog.stores.redis import RedisStore  # noqa: E402

DSN = os.environ.get("TURNLOG_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
URL = os.environ.get("TURNLOG_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--seed", type=int, default=2, help="seed for content and round order")
    parser.add_argument("--dsn", default=DSN, help="the PostgreSQL server")
    parser.add_argument("--url", default=URL, help="the Redis server")
    return parser.parse_args()


def writer(store: Any, session: str, events: list[SessionEvent], how: str) -> Block:
    """Appends the next `per_block` events one per call; `how` says which call and rules."""
    cur = Cursor()

    def run(n: int) -> None:
        version = cur.version
        for event in events[cur.at : cur.at + n]:
            if how.startswith("event"):
                version = store.append_event(event, check_rules=how == "event").seq
            else:
                version = store.append_events(session, [event], version, check_rules=how != "off")
        cur.at += n
        cur.version = version

    return run


CONTENDERS = (
    ("append_events, rules on", "on", False),
    ("append_events, check_rules=False", "off", False),
    ("append_events, rules on, no tail memory", "on", True),
    ("append_event, rules on", "event", False),
    ("append_event, check_rules=False", "event-off", False),
)


def measure(name: str, make: Any, rounds: int, per_block: int, seed: int) -> list[list[object]]:
    """The contenders on stores `make()` builds; returns table rows."""
    stores: list[Any] = []
    contenders: dict[str, Block] = {}
    for n, (label, how, forget) in enumerate(CONTENDERS):
        store = make()
        stores.append(store)
        if forget:
            store._append_remembered = lambda *args: None  # the read path, every time
        sid = f"rules-{n}"
        store.create_session(Session(sid, datetime.now(UTC)))
        talk = conversation(random.Random(seed + n), prefix=sid)
        events = message_events(sid, talk, (rounds + 1) * per_block, id_prefix=sid)
        run = writer(store, sid, events, how)

        def block(run: Any = run) -> int:
            run(per_block)
            return per_block

        contenders[label] = block
    timed = interleave(contenders, rounds, seed)
    off = timed["append_events, check_rules=False"].median
    rows: list[list[object]] = []
    for label, _, _ in CONTENDERS:
        t = timed[label].median
        rows.append([f"{name}: {label}", f"{t * 1e3:.3f}", f"{1 / t:,.0f}", f"{t / off - 1:+.1%}"])
    for store in stores:
        store.close()
    return rows


def main() -> None:
    args = parse()
    rounds, per_block = (3, 20) if args.quick else (25, 100)
    print(f"The view rules' cost on the server stores{' (--quick)' if args.quick else ''}")
    print(machine())
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    schemas = [f"tl_rules_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    prefix = f"bench-rules-{uuid.uuid4().hex[:8]}"
    rows: list[list[object]] = []
    try:
        rows += measure(
            "PostgreSQL",
            lambda: PostgresStore(args.dsn, schema=schemas[0], pool_min=1, pool_max=2),
            rounds,
            per_block,
            args.seed,
        )
        rows += measure(
            "PostgreSQL, 4 partitions",
            lambda: PostgresStore(
                args.dsn, schema=schemas[1], partitions=4, pool_min=1, pool_max=2
            ),
            rounds,
            per_block,
            args.seed,
        )
        rows += measure(
            "Redis", lambda: RedisStore(args.url, prefix=prefix), rounds, per_block, args.seed
        )
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            for name in schemas:
                admin.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )
        with RedisStore(args.url, prefix=prefix) as store:
            keys = list(store.client.scan_iter(match=f"{prefix}:*", count=1000))
            for i in range(0, len(keys), 500):
                store.client.delete(*keys[i : i + 500])
    print(f"load average at end: {os.getloadavg()[0]:.2f}\n")
    print(f"One-event appends ({rounds} rounds of {per_block}, medians)")
    print(table(["store: contender", "ms/append", "appends/s", "vs rules off"], rows))


if __name__ == "__main__":
    main()
