"""Appends at the peers' durability: one message per call, one commit per message, on SQLite.

Contenders, each on its own database file in one temp dir, interleaved in rounds (shuffled
each round); the table gives medians of appends per second:

- turnlog FULL / NORMAL: `SqliteStore(path, synchronous=...)`, the app's way:
  `version = store.append_events(session, [event], version)` (view rules checked).
- bare FULL / NORMAL: a bare sqlite3 loop with the same settings (WAL, the same synchronous
  level), `BEGIN IMMEDIATE; INSERT; COMMIT` per message, inserting the same rows (ids, encoded
  bodies, precomputed) into a copy of the store's own events table (same DDL, same indexes).
- Agents SDK FULL: the OpenAI Agents SDK's `SQLiteSession.add_items([item])` per message (its
  own schema and WAL at SQLite's default synchronous=FULL), one Responses item per message,
  awaited on one event loop as an application would.

Targets (issue 11, item 5): with synchronous=FULL, turnlog >= 2x the Agents SDK and >= 0.8x bare
sqlite3; with synchronous=NORMAL, turnlog >= 0.8x bare sqlite3.

    python bench/append_peers.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import asyncio  # noqa: E402
import importlib.metadata  # noqa: E402
import random  # noqa: E402
import sqlite3  # noqa: E402
import tempfile  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from _harness import (  # noqa: E402
    Block,
    Cursor,
    conversation,
    interleave,
    machine,
    message_events,
    parse_args,
    per_second,
    table,
    verdict,
)
from full_read import agents_items  # noqa: E402
from turnlog import Session, SessionEvent, SqliteStore  # noqa: E402
from turnlog.codec import encode_body, to_micros  # noqa: E402

SESSION = "bench-session"
INSERT = (
    "INSERT INTO turnlog_events (session_id, seq, id, type, timestamp, role, synthetic, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def new_store(path: Path, synchronous: str) -> SqliteStore:
    store = SqliteStore(path, synchronous=synchronous)  # type: ignore[arg-type]
    store.create_session(Session(SESSION, created_at=datetime.now(UTC)))
    return store


def bare_db(path: Path, like: Path, synchronous: str) -> sqlite3.Connection:
    """A bare connection with the store's settings, holding a copy of the store's events table."""
    src = sqlite3.connect(like)
    ddl = [
        sql
        for (sql,) in src.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'turnlog_events' "
            "AND sql IS NOT NULL ORDER BY type DESC"
        )
    ]
    src.close()
    conn = sqlite3.connect(path, isolation_level=None, cached_statements=64)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.execute(f"PRAGMA synchronous={synchronous}")
    for statement in ddl:
        conn.execute(statement)
    return conn


def rows_of(events: list[SessionEvent]) -> list[tuple[Any, ...]]:
    now = to_micros(datetime.now(UTC))
    return [
        (SESSION, seq, e.id, e.type.name, now + seq, e.role, int(e.synthetic), encode_body(e))
        for seq, e in enumerate(events, start=1)
    ]


def store_single(store: SqliteStore, events: list[SessionEvent], per_block: int) -> Block:
    cur = Cursor()

    def block() -> int:
        version = cur.version
        for event in events[cur.at : cur.at + per_block]:
            version = store.append_events(SESSION, [event], version)
        cur.at += per_block
        cur.version = version
        return per_block

    return block


def bare_single(conn: sqlite3.Connection, rows: list[tuple[Any, ...]], per_block: int) -> Block:
    cur = Cursor()

    def block() -> int:
        for row in rows[cur.at : cur.at + per_block]:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(INSERT, row)
            conn.execute("COMMIT")
        cur.at += per_block
        return per_block

    return block


def agents_single(
    loop: asyncio.AbstractEventLoop, peer: Any, items: list[dict[str, Any]], per_block: int
) -> Block:
    cur = Cursor()

    def block() -> int:
        for item in items[cur.at : cur.at + per_block]:
            loop.run_until_complete(peer.add_items([item]))
        cur.at += per_block
        return per_block

    return block


def main() -> None:
    from agents import SQLiteSession

    args = parse_args(__doc__)
    rounds, per_block = (3, 10) if args.quick else (21, 40)
    need = (rounds + 1) * per_block
    rng = random.Random(args.seed)
    print(f"Appends at the peers' durability{' (--quick)' if args.quick else ''}")
    print(machine())
    print(f"openai-agents {importlib.metadata.version('openai-agents')}")
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        contenders: dict[str, Block] = {}
        closers: list[Any] = []
        for level in ("FULL", "NORMAL"):
            store = new_store(Path(tmp, f"store-{level}.db"), level)
            closers.append(store.close)
            events = message_events(SESSION, conversation(rng, prefix=level), need, id_prefix=level)
            contenders[f"turnlog {level}"] = store_single(store, events, per_block)
            twins = message_events(SESSION, conversation(rng, prefix=level), need, id_prefix="b")
            conn = bare_db(Path(tmp, f"bare-{level}.db"), Path(tmp, f"store-{level}.db"), level)
            closers.append(conn.close)
            contenders[f"bare {level}"] = bare_single(conn, rows_of(twins), per_block)
        loop = asyncio.new_event_loop()
        peer = SQLiteSession(SESSION, Path(tmp, "agents.db"))
        closers += [peer.close, loop.close]
        talk = message_events(SESSION, conversation(rng, prefix="agents"), need, id_prefix="a")
        contenders["Agents SDK FULL"] = agents_single(loop, peer, agents_items(talk), per_block)
        timed = interleave(contenders, rounds, args.seed)
        for close in closers:
            close()

    rate = {name: 1 / s.median for name, s in timed.items()}
    print()
    print(f"One message per call, one commit each: {rounds} rounds x {per_block} appends")
    print(
        table(
            ["contender", "appends/s", "p10 appends/s", "p90 appends/s"],
            [
                [
                    name,
                    per_second(s.median),
                    per_second(s.quantile(0.9)),
                    per_second(s.quantile(0.1)),
                ]
                for name, s in timed.items()
            ],
        )
    )
    print()
    checks = [
        ("FULL: turnlog / Agents SDK", rate["turnlog FULL"] / rate["Agents SDK FULL"], 2.0),
        ("FULL: turnlog / bare", rate["turnlog FULL"] / rate["bare FULL"], 0.8),
        ("NORMAL: turnlog / bare", rate["turnlog NORMAL"] / rate["bare NORMAL"], 0.8),
    ]
    for what, ratio, target in checks:
        print(f"{what} {ratio:.2f} (target >= {target}): {verdict(ratio >= target)}")


if __name__ == "__main__":
    main()
