"""Append throughput on SQLite: `SqliteStore.append_events` against a bare sqlite3 insert loop.

The app's way: one message per call, with the version it expects
(`version = store.append_events(session, [event], version)`). The floor: a bare sqlite3 loop with
the same durability settings (WAL, synchronous=NORMAL, the same busy timeout), one transaction
per event (`BEGIN IMMEDIATE; INSERT; COMMIT`), inserting the same rows (same ids, same encoded
bodies, precomputed) into a table made by the very DDL the store wrote for its own events table
(same columns, `(session_id, seq)` primary key, unique index on `id`). Each contender has its own
database file in one temp dir; the contenders run interleaved in rounds (shuffled each round) and
the table gives medians.

Target (issue 2): store appends/s / bare appends/s >= 0.7, one event per call.

Also reported: batches of 100 events per call against a bare `executemany` of 100 rows in one
transaction, and, for context, `SqliteStore.append_event` (no expected version; what
`SessionService.append_message` calls) on a short and on a long log.

    python bench/append.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import random  # noqa: E402
import sqlite3  # noqa: E402
import tempfile  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from _harness import (  # noqa: E402
    Block,
    conversation,
    interleave,
    machine,
    message_events,
    parse_args,
    per_second,
    table,
    verdict,
)
from turnlog import Session, SessionEvent, SqliteStore  # noqa: E402
from turnlog.codec import encode_body, to_micros  # noqa: E402

SESSION = "bench-session"
TARGET = 0.7
RULES_LIMIT = 0.05  # issue 7: checking the view rules costs at most 5% per append
BUSY_TIMEOUT = 30.0
INSERT = (
    "INSERT INTO turnlog_events (session_id, seq, id, type, timestamp, role, synthetic, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def new_store(path: Path) -> SqliteStore:
    store = SqliteStore(path, busy_timeout=BUSY_TIMEOUT, synchronous="NORMAL")
    store.create_session(Session(SESSION, created_at=datetime.now(UTC)))
    return store


def bare_db(path: Path, like: Path) -> sqlite3.Connection:
    """A bare connection with the store's settings, holding a copy of the store's events table."""
    with sqlite3.connect(like) as src:
        ddl = [
            sql
            for (sql,) in src.execute(
                "SELECT sql FROM sqlite_master WHERE tbl_name = 'turnlog_events' "
                "AND sql IS NOT NULL ORDER BY type DESC"
            )
        ]
    src.close()
    assert len(ddl) == 2, ddl  # the table, then its unique index on id
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None, cached_statements=64)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.execute("PRAGMA synchronous=NORMAL")
    for statement in ddl:
        conn.execute(statement)
    return conn


def rows_of(events: list[SessionEvent]) -> list[tuple[Any, ...]]:
    """The rows the store writes for `events` as seq 1, 2, ...: same ids, same bodies."""
    now = to_micros(datetime.now(UTC))
    return [
        (SESSION, seq, e.id, e.type.name, now + seq, e.role, int(e.synthetic), encode_body(e))
        for seq, e in enumerate(events, start=1)
    ]


class Cursor:
    """Where a contender is in its pre-built events."""

    def __init__(self) -> None:
        self.at = 0
        self.version = 0


def store_single(
    store: SqliteStore, events: list[SessionEvent], per_block: int, *, check_rules: bool = True
) -> Block:
    cur = Cursor()

    def block() -> int:
        version = cur.version
        for event in events[cur.at : cur.at + per_block]:
            version = store.append_events(SESSION, [event], version, check_rules=check_rules)
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


def store_batched(store: SqliteStore, events: list[SessionEvent], size: int, batches: int) -> Block:
    cur = Cursor()

    def block() -> int:
        version = cur.version
        for _ in range(batches):
            version = store.append_events(SESSION, events[cur.at : cur.at + size], version)
            cur.at += size
        cur.version = version
        return size * batches

    return block


def bare_batched(
    conn: sqlite3.Connection, rows: list[tuple[Any, ...]], size: int, batches: int
) -> Block:
    cur = Cursor()

    def block() -> int:
        for _ in range(batches):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(INSERT, rows[cur.at : cur.at + size])
            conn.execute("COMMIT")
            cur.at += size
        return size * batches

    return block


def store_append_event(store: SqliteStore, events: list[SessionEvent], per_block: int) -> Block:
    cur = Cursor()

    def block() -> int:
        for event in events[cur.at : cur.at + per_block]:
            store.append_event(event)
        cur.at += per_block
        return per_block

    return block


def main() -> None:
    args = parse_args(__doc__)
    rounds, single, batch, batches = (5, 50, 100, 2) if args.quick else (41, 250, 100, 10)
    # a long log of whole cycles of the conversation (6 events), so it ends between turns
    ctx_rounds, ctx_per_block, long_log = (3, 10, 1_998) if args.quick else (15, 20, 9_996)
    rng = random.Random(args.seed)

    def fresh(n: int, tag: str) -> list[SessionEvent]:
        """`n` events of a conversation of their own (each store's log keeps the view rules)."""
        return message_events(SESSION, conversation(rng, prefix=tag), n, id_prefix=tag)

    need_single = (rounds + 1) * single
    need_batched = (rounds + 1) * batch * batches

    quick = " (--quick: not the reported figures)" if args.quick else ""
    print(f"Append throughput on SQLite{quick}")
    print(machine())
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        s1 = new_store(Path(tmp, "store-single.db"))
        s1_off = new_store(Path(tmp, "store-single-rules-off.db"))
        s100 = new_store(Path(tmp, "store-batched.db"))
        b1 = bare_db(Path(tmp, "bare-single.db"), like=s1.path)
        b100 = bare_db(Path(tmp, "bare-batched.db"), like=s1.path)
        single_events = fresh(need_single, "single")
        off_events = fresh(need_single, "off")
        batched_events = fresh(need_batched, "batched")
        contenders = {
            "store 1/call": store_single(s1, single_events, single),
            "store 1/call, rules off": store_single(s1_off, off_events, single, check_rules=False),
            "bare 1/txn": bare_single(b1, rows_of(single_events), single),
            "store 100/call": store_batched(s100, batched_events, batch, batches),
            "bare 100/txn": bare_batched(b100, rows_of(batched_events), batch, batches),
        }
        timed = interleave(contenders, rounds, args.seed)
        assert s1.version(SESSION) == need_single
        assert s1_off.version(SESSION) == need_single
        assert s100.version(SESSION) == need_batched
        for conn, want in ((b1, need_single), (b100, need_batched)):
            assert conn.execute("SELECT count(*) FROM turnlog_events").fetchone()[0] == want
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL

        # Context: append_event (no expected version) on a short log and on a long one.
        short, long_ = new_store(Path(tmp, "ae-short.db")), new_store(Path(tmp, "ae-long.db"))
        long_.append_events(SESSION, fresh(long_log, "prefill"), 0)
        need_ctx = (ctx_rounds + 1) * ctx_per_block
        context = interleave(
            {
                "short": store_append_event(short, fresh(need_ctx, "ae-s"), ctx_per_block),
                "long": store_append_event(long_, fresh(need_ctx, "ae-l"), ctx_per_block),
            },
            ctx_rounds,
            args.seed,
        )
        for store in (s1, s1_off, s100, short, long_):
            store.close()
        b1.close()
        b100.close()

    def row(label: str, name: str, floor: str) -> list[str]:
        t = timed[name]
        return [
            label,
            per_second(t.median),
            f"{t.median * 1e6:.1f}",
            per_second(t.quantile(0.9)),
            per_second(t.quantile(0.1)),
            f"{timed[floor].median / t.median:.2f}x",
        ]

    print()
    print(
        f"{rounds} rounds; a round = {single} single appends, or {batches} batches of {batch}, "
        "per contender; events/s"
    )
    print(
        table(
            ["contender", "median/s", "us/event", "p10/s", "p90/s", "vs bare"],
            [
                row("SqliteStore.append_events, 1 event/call", "store 1/call", "bare 1/txn"),
                row(
                    "the same, check_rules=False",
                    "store 1/call, rules off",
                    "bare 1/txn",
                ),
                row("bare sqlite3, 1 INSERT/txn", "bare 1/txn", "bare 1/txn"),
                row(
                    f"SqliteStore.append_events, {batch} events/call",
                    "store 100/call",
                    "bare 100/txn",
                ),
                row(f"bare sqlite3, executemany {batch}/txn", "bare 100/txn", "bare 100/txn"),
            ],
        )
    )
    ratio = timed["bare 1/txn"].median / timed["store 1/call"].median
    batched_ratio = timed["bare 100/txn"].median / timed["store 100/call"].median
    met = verdict(ratio >= TARGET)
    print(f"\n1 event/call: store/bare = {ratio:.2f}x (target >= {TARGET}): {met}")
    cost = timed["store 1/call"].median / timed["store 1/call, rules off"].median - 1
    rules_met = verdict(cost <= RULES_LIMIT)
    print(
        f"the view rules' check: {cost:+.1%} per 1-event append "
        f"(limit +{RULES_LIMIT:.0%}): {rules_met}"
    )
    print(f"{batch} events/call: store/bare = {batched_ratio:.2f}x (no target)")

    print()
    print(f"Context: SqliteStore.append_event (SessionService.append_message), {ctx_rounds} rounds")
    print(
        table(
            ["log before", "median/s", "us/event"],
            [
                [f"{n:,} events", per_second(context[k].median), f"{context[k].median * 1e6:.1f}"]
                for k, n in (("short", 0), ("long", long_log))
            ],
        )
    )


if __name__ == "__main__":
    main()
