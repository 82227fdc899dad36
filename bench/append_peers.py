"""Appends at the peers' durability: one message per call, one commit per message, on SQLite.

Contenders, each on its own database file in one temp dir, interleaved in rounds (shuffled
each round); the table gives medians of appends per second:

- turnlog FULL / NORMAL: `SqliteStore(path, synchronous=...)`, the app's way:
  `version = store.append_events(session, [event], version)` (view rules checked).
- turnlog async FULL: the same with `AsyncSqliteStore` (one worker thread), awaited on one
  event loop: the SDK's own shape (its `add_items` runs on a worker thread too).
- bare FULL / NORMAL: a bare sqlite3 loop with the same settings (WAL, the same synchronous
  level), `BEGIN IMMEDIATE; INSERT; COMMIT` per message, inserting the same rows (ids, encoded
  bodies, precomputed) into a copy of the store's own events table (same DDL, same indexes).
- Agents SDK FULL: the OpenAI Agents SDK's `SQLiteSession.add_items([item])` per message (its
  own schema and WAL at SQLite's default synchronous=FULL), one Responses item per message,
  awaited on one event loop as an application would. The SDK version is pinned (`PEER`): the
  script refuses another one.

For context, not targets: `bare NORMAL, autocommit` (one INSERT per message with no BEGIN or
COMMIT around it, its own transaction: what turnlog's one-event append does now); `Agents SDK,
no sync` (the same SDK calls with its connections set to synchronous=NORMAL, a setting the SDK
does not offer: its own work per call without the sync); and `fdatasync alone` (a 12 KB write
over a file's existing blocks and one `os.fdatasync`, in the same directory: the sync a commit
waits for). From these the script prints what one sync per commit allows: a store that syncs
once per commit, as the SDK does, can be at best (sync + SDK's work) / (sync + its own work)
times the SDK.

Targets (issue 11, item 5): with synchronous=FULL, turnlog >= 2x the Agents SDK and >= 0.8x bare
sqlite3; with synchronous=NORMAL, turnlog >= 0.8x bare sqlite3.

    pip install openai-agents==0.24.0     # the pinned peer (in the dev extra)
    python bench/append_peers.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import asyncio  # noqa: E402
import importlib.metadata  # noqa: E402
import os  # noqa: E402
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
from turnlog.stores.sqlite_async import AsyncSqliteStore  # noqa: E402

SESSION = "bench-session"
PEER = "0.24.0"  # openai-agents, the version the figures in docs/benchmarks.md were measured on
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


def async_single(
    loop: asyncio.AbstractEventLoop, store: AsyncSqliteStore, events: list[SessionEvent], n: int
) -> Block:
    cur = Cursor()

    def block() -> int:
        version = cur.version
        for event in events[cur.at : cur.at + n]:
            version = loop.run_until_complete(store.append_events(SESSION, [event], version))
        cur.at += n
        cur.version = version
        return n

    return block


def bare_autocommit(conn: sqlite3.Connection, rows: list[tuple[Any, ...]], per_block: int) -> Block:
    cur = Cursor()

    def block() -> int:
        for row in rows[cur.at : cur.at + per_block]:
            conn.execute(INSERT, row)  # autocommit: the statement is its own transaction
        cur.at += per_block
        return per_block

    return block


def sync_alone(path: Path, per_block: int) -> tuple[Block, Any]:
    """Blocks of a 12 KB overwrite + `fdatasync` on a file of its own; and its closer."""
    page = os.urandom(12 * 1024)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, page * 64)
    os.fsync(fd)
    cur = Cursor()

    def block() -> int:
        for _ in range(per_block):
            os.pwrite(fd, page, (cur.at % 64) * len(page))
            os.fdatasync(fd)
            cur.at += 1
        return per_block

    return block, lambda: os.close(fd)


def agents_no_sync(path: Path) -> Any:
    """A `SQLiteSession` whose connections run at synchronous=NORMAL (context only)."""
    from agents import SQLiteSession

    class NoSync(SQLiteSession):
        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute("PRAGMA synchronous=NORMAL")

    return NoSync(SESSION, path)


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
    found = importlib.metadata.version("openai-agents")
    if found != PEER:
        sys.exit(f"this comparison is pinned to openai-agents {PEER}, found {found}: "
                 f"pip install openai-agents=={PEER}")  # fmt: skip
    # blocks of commits that wait for the disk are short in count; those that do not are longer,
    # so that a block lasts milliseconds and a scheduling hiccup is a small part of it
    rounds, per_block, per_fast = (3, 10, 50) if args.quick else (51, 20, 300)
    need, need_fast = (rounds + 1) * per_block, (rounds + 1) * per_fast
    rng = random.Random(args.seed)
    print(f"Appends at the peers' durability{' (--quick)' if args.quick else ''}")
    print(machine())
    print(f"openai-agents {found}")
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        contenders: dict[str, Block] = {}
        closers: list[Any] = []
        for level in ("FULL", "NORMAL"):
            n, size = (need, per_block) if level == "FULL" else (need_fast, per_fast)
            store = new_store(Path(tmp, f"store-{level}.db"), level)
            closers.append(store.close)
            events = message_events(SESSION, conversation(rng, prefix=level), n, id_prefix=level)
            contenders[f"turnlog {level}"] = store_single(store, events, size)
            twins = message_events(SESSION, conversation(rng, prefix=level), n, id_prefix="b")
            conn = bare_db(Path(tmp, f"bare-{level}.db"), Path(tmp, f"store-{level}.db"), level)
            closers.append(conn.close)
            contenders[f"bare {level}"] = bare_single(conn, rows_of(twins), size)
        twins = message_events(SESSION, conversation(rng, prefix="auto"), need_fast, id_prefix="c")
        conn = bare_db(Path(tmp, "bare-auto.db"), Path(tmp, "store-NORMAL.db"), "NORMAL")
        closers.append(conn.close)
        contenders["bare NORMAL, autocommit"] = bare_autocommit(conn, rows_of(twins), per_fast)
        loop = asyncio.new_event_loop()
        astore = AsyncSqliteStore(Path(tmp, "store-async.db"), synchronous="FULL")
        loop.run_until_complete(
            astore.create_session(Session(SESSION, created_at=datetime.now(UTC)))
        )
        mine = message_events(SESSION, conversation(rng, prefix="async"), need, id_prefix="s")
        contenders["turnlog async FULL"] = async_single(loop, astore, mine, per_block)
        peer = SQLiteSession(SESSION, Path(tmp, "agents.db"))
        unsynced = agents_no_sync(Path(tmp, "agents-no-sync.db"))
        closers += [
            lambda: loop.run_until_complete(astore.close()),
            peer.close,
            unsynced.close,
            loop.close,
        ]
        talk = message_events(SESSION, conversation(rng, prefix="agents"), need, id_prefix="a")
        contenders["Agents SDK FULL"] = agents_single(loop, peer, agents_items(talk), per_block)
        contenders["Agents SDK, no sync"] = agents_single(
            loop, unsynced, agents_items(talk), per_block
        )
        contenders["fdatasync alone"], close_probe = sync_alone(Path(tmp, "probe"), per_block)
        closers.append(close_probe)
        timed = interleave(contenders, rounds, args.seed)
        for close in closers:
            close()

    rate = {name: 1 / s.median for name, s in timed.items()}
    print()
    print(
        f"One message per call, one commit each: {rounds} rounds x {per_block} appends "
        f"({per_fast} at NORMAL)"
    )
    print(
        table(
            ["contender", "appends/s", "us/append", "p10 appends/s", "p90 appends/s"],
            [
                [
                    name,
                    per_second(s.median),
                    f"{s.median * 1e6:,.0f}",
                    per_second(s.quantile(0.9)),
                    per_second(s.quantile(0.1)),
                ]
                for name, s in timed.items()
            ],
        )
    )
    us = {name: s.median * 1e6 for name, s in timed.items()}
    sync = us["fdatasync alone"]
    sdk_work, own_work = us["Agents SDK, no sync"], us["turnlog NORMAL"]
    print()
    print(
        f"One sync per commit: fdatasync alone {sync:,.0f} us; work besides the sync: Agents "
        f"SDK {sdk_work:,.0f} us, turnlog {own_work:,.0f} us (its NORMAL append). At this sync "
        f"cost, turnlog FULL can be at most {(sync + sdk_work) / (sync + own_work):.2f}x the SDK "
        f"and a store doing nothing but the sync {(sync + sdk_work) / sync:.2f}x; 2x needs a sync "
        f"under {max(0.0, sdk_work - 2 * own_work):,.0f} us."
    )
    print(
        f"FULL, turnlog async / Agents SDK: "
        f"{rate['turnlog async FULL'] / rate['Agents SDK FULL']:.2f}; NORMAL, turnlog / bare "
        f"autocommit: {rate['turnlog NORMAL'] / rate['bare NORMAL, autocommit']:.2f} "
        "(context, no target)"
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
