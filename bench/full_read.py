"""Whole-log reads: loading a 10,000-event session with `events()` against the bare drivers.

One session of 10,000 message events (the harness's conversation: plain and tool-calling turns)
is written to each store: SQLite (a file, synchronous=FULL as the peers use it), PostgreSQL and
Redis. Every reader below then loads it whole, all of them interleaved in one run (shuffled each
round); the table gives medians.

- `<store>.events(session)`: turnlog's whole-log read, `SessionEvent` records out.
- bare + json: the same rows through the bare driver and `json.loads` of each stored body (the
  floor the issue names: what an application storing JSON itself would write). On SQLite and
  PostgreSQL the same SELECT of the same columns as the store; on Redis one `HMGET` of the same
  records, their header and body each parsed with `json.loads`.
- bare + msgspec (SQLite): the same rows with an untyped `msgspec` decode, for context.
- The OpenAI Agents SDK's `SQLiteSession.get_items()` on its own database file holding the same
  conversation as Responses input items (one item per message event), run on one event loop.

Targets (issue 11, item 2): turnlog / (bare + json) <= 1.2 on each store, and turnlog below the
Agents SDK's full load on SQLite.

    python bench/full_read.py [--quick] [--stores sqlite,postgres,redis]

PostgreSQL and Redis are read from `TURNLOG_TEST_POSTGRES_DSN` and `TURNLOG_TEST_REDIS_URL`; a
store whose variable is unset is left out. Everything is written under a schema or key prefix of
its own and deleted at the end.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import asyncio  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sqlite3  # noqa: E402
import tempfile  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402
from contextlib import ExitStack  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import msgspec  # noqa: E402

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
from turnlog import Session, SessionEvent, SqliteStore  # noqa: E402

SESSION = "bench-session"
TARGET = 1.2
BATCH = 1_000


def fill(store: Any, events: list[SessionEvent]) -> None:
    store.create_session(Session(SESSION, created_at=datetime.now(UTC)))
    version = 0
    for start in range(0, len(events), BATCH):
        version = store.append_events(SESSION, events[start : start + BATCH], version)


def agents_items(events: list[SessionEvent]) -> list[dict[str, Any]]:
    """The conversation as the Agents SDK stores it: one Responses input item per message."""
    items: list[dict[str, Any]] = []
    for e in events:
        m = e.message
        assert m is not None
        if m.tool_calls:
            c = m.tool_calls[0]
            items.append(
                {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
            )
        elif m.tool_results:
            r = m.tool_results[0]
            items.append(
                {"type": "function_call_output", "call_id": r.call_id, "output": r.content}
            )
        elif m.role == "assistant":
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": m.text, "annotations": []}],
                }
            )
        else:
            items.append({"role": m.role, "content": m.text})
    return items


def reader(read: Callable[[], list[Any]], size: int) -> Block:
    def block() -> int:
        assert len(read()) == size
        return 1

    return block


def sqlite_readers(tmp: Path, events: list[SessionEvent], stack: ExitStack) -> dict[str, Block]:
    from agents import SQLiteSession

    size = len(events)
    store = SqliteStore(Path(tmp, "turnlog.db"), synchronous="FULL")
    stack.callback(store.close)
    fill(store, events)
    conn = sqlite3.connect(Path(tmp, "turnlog.db"), isolation_level=None)
    stack.callback(conn.close)
    select = (
        "SELECT id, session_id, seq, type, timestamp, synthetic, body FROM turnlog_events "
        "WHERE session_id = ? ORDER BY seq"
    )
    loads, decode = json.loads, msgspec.json.Decoder().decode

    def bare_json() -> list[Any]:
        return [loads(r[6]) for r in conn.execute(select, (SESSION,)).fetchall()]

    def bare_msgspec() -> list[Any]:
        return [decode(r[6]) for r in conn.execute(select, (SESSION,)).fetchall()]

    loop = asyncio.new_event_loop()
    stack.callback(loop.close)
    peer = SQLiteSession(SESSION, Path(tmp, "agents.db"))
    stack.callback(peer.close)
    items = agents_items(events)
    for start in range(0, size, BATCH):
        loop.run_until_complete(peer.add_items(items[start : start + BATCH]))

    def agents() -> list[Any]:
        return loop.run_until_complete(peer.get_items())

    return {
        "sqlite store": reader(lambda: store.events(SESSION), size),
        "sqlite bare+json": reader(bare_json, size),
        "sqlite bare+msgspec": reader(bare_msgspec, size),
        "sqlite agents": reader(agents, size),
    }


def postgres_readers(dsn: str, events: list[SessionEvent], stack: ExitStack) -> dict[str, Block]:
    import psycopg
    from psycopg import sql

    from turnlog import PostgresStore

    schema = f"tl_bench_{uuid.uuid4().hex[:8]}"
    store = PostgresStore(dsn, schema=schema)
    admin = psycopg.connect(dsn, autocommit=True)
    stack.callback(admin.close)
    stack.callback(
        lambda: admin.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )
    )
    stack.callback(store.close)
    fill(store, events)
    conn = psycopg.connect(dsn, autocommit=True)
    stack.callback(conn.close)
    select = (
        sql.SQL(
            'SELECT seq, id, type, "timestamp", synthetic, body FROM {}.events '
            "WHERE session_id = %s ORDER BY seq"
        )
        .format(sql.Identifier(schema))
        .as_string(admin)
    )
    loads = json.loads

    def bare_json() -> list[Any]:
        rows = conn.execute(select, (SESSION,), binary=True).fetchall()
        return [loads(r[5]) for r in rows]

    size = len(events)
    return {
        "postgres store": reader(lambda: store.events(SESSION), size),
        "postgres bare+json": reader(bare_json, size),
    }


def redis_readers(url: str, events: list[SessionEvent], stack: ExitStack) -> dict[str, Block]:
    import redis

    from turnlog import RedisStore

    prefix = f"tl-bench-{uuid.uuid4().hex[:8]}"
    store = RedisStore(url, prefix=prefix)
    client = redis.Redis.from_url(url)
    stack.callback(client.close)
    stack.callback(lambda: [client.delete(k) for k in client.scan_iter(f"{prefix}*")])
    stack.callback(store.close)
    fill(store, events)
    size = len(events)
    key = store._keys.session(SESSION)[0]
    fields = [str(s) for s in range(1, size + 1)]
    loads = json.loads

    def bare_json() -> list[Any]:
        out = []
        for raw in client.hmget(key, fields):
            head, _, body = raw.partition(b"\n")
            out.append((loads(head), loads(body)))
        return out

    return {
        "redis store": reader(lambda: store.events(SESSION), size),
        "redis bare+json": reader(bare_json, size),
    }


def main() -> None:
    argv = [a for a in sys.argv[1:] if not a.startswith("--stores")]
    args = parse_args(__doc__, argv)
    wanted = next(
        (a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--stores=")),
        "sqlite,postgres,redis",
    ).split(",")
    size, rounds = (2_000, 5) if args.quick else (10_000, 31)
    dsn = os.environ.get("TURNLOG_TEST_POSTGRES_DSN")
    url = os.environ.get("TURNLOG_TEST_REDIS_URL")

    print(f"Whole-log read{' (--quick: not the reported figures)' if args.quick else ''}")
    print(machine())
    print(f"openai-agents {importlib.metadata.version('openai-agents')}")
    events = message_events(SESSION, conversation(random.Random(args.seed)), size, id_prefix="e")
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp, ExitStack() as stack:
        contenders: dict[str, Block] = {}
        if "sqlite" in wanted:
            contenders |= sqlite_readers(Path(tmp), events, stack)
        if "postgres" in wanted and dsn:
            contenders |= postgres_readers(dsn, events, stack)
        if "redis" in wanted and url:
            contenders |= redis_readers(url, events, stack)
        timed = interleave(contenders, rounds, args.seed)

    print()
    print(f"Loading a {size:,}-event log, {rounds} rounds interleaved (ms per load)")
    rows = []
    for name, samples in timed.items():
        kind = name.split(" ", 1)[0]
        floor = timed[f"{kind} bare+json"].median
        rows.append(
            [
                name,
                ms(samples.median),
                ms(samples.quantile(0.1)),
                ms(samples.quantile(0.9)),
                f"{samples.median / floor:.2f}x",
            ]
        )
    print(table(["reader", "median", "p10", "p90", "vs bare+json"], rows))
    print()
    for kind in ("sqlite", "postgres", "redis"):
        if f"{kind} store" not in timed:
            continue
        ratio = timed[f"{kind} store"].median / timed[f"{kind} bare+json"].median
        met = verdict(ratio <= TARGET)
        print(f"{kind}: store / bare+json {ratio:.2f} (target <= {TARGET}): {met}")
    if "sqlite agents" in timed:
        ratio = timed["sqlite store"].median / timed["sqlite agents"].median
        print(
            f"sqlite: store / Agents SDK SQLiteSession {ratio:.2f} (target < 1): "
            f"{verdict(ratio < 1)}"
        )


if __name__ == "__main__":
    main()
