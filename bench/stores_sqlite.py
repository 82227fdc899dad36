"""Issue 3's store measures on SQLite: 8 writers on 8 sessions, and a whole 10,000-event log.

(The other SQLite measures are in `append.py`, one writer, and `view_read.py`, the view as the
covered history grows.)

- 8 writers on 8 sessions: 8 threads, each appending one event per call with its expected version
  to its own session of one `SqliteStore`, against 8 threads each with its own bare sqlite3
  connection doing `BEGIN IMMEDIATE; INSERT; COMMIT` into a same-shaped table (the store's own DDL)
  in another file with the same settings (WAL, synchronous=NORMAL, busy timeout). Writers of one
  file queue for its lock, in both contenders. Interleaved rounds; medians. Target >= 0.7.
- A whole 10,000-event log: `SqliteStore.events` against a bare `SELECT` of the same rows decoded
  by the same codec.

    python bench/stores_sqlite.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import random  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from _harness import (  # noqa: E402
    Block,
    conversation,
    interleave,
    machine,
    message_events,
    ms,
    parse_args,
    per_second,
    store_writer,
    table,
    verdict,
)
from turnlog import Session, SessionEvent, SqliteStore  # noqa: E402
from turnlog.codec import decode_event, encode_body, to_micros  # noqa: E402

WRITERS = 8
TARGET = 0.7
BUSY_TIMEOUT = 30.0
INSERT = (
    "INSERT INTO turnlog_events (session_id, seq, id, type, timestamp, role, synthetic, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def bare_connection(path: Path, ddl: list[str] | None) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
    )
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    for statement in ddl or []:
        conn.execute(statement)
    return conn


def store_ddl(path: Path) -> list[str]:
    with sqlite3.connect(path) as src:
        ddl = [
            sql
            for (sql,) in src.execute(
                "SELECT sql FROM sqlite_master WHERE tbl_name = 'turnlog_events' "
                "AND sql IS NOT NULL ORDER BY type DESC"
            )
        ]
    src.close()
    return ddl


def rows_of(session: str, events: list[SessionEvent]) -> list[tuple[Any, ...]]:
    now = to_micros(datetime.now(UTC))
    return [
        (session, seq, e.id, e.type.name, now + seq, e.role, int(e.synthetic), encode_body(e))
        for seq, e in enumerate(events, start=1)
    ]


def together(pool: ThreadPoolExecutor, jobs: list[Any], per_block: int) -> Block:
    def block() -> int:
        for future in [pool.submit(job, per_block) for job in jobs]:
            future.result()
        return per_block * len(jobs)

    return block


def bare_job(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> Any:
    state = {"at": 0}

    def run(n: int) -> None:
        for row in rows[state["at"] : state["at"] + n]:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(INSERT, row)
            conn.execute("COMMIT")
        state["at"] += n

    return run


def main() -> None:
    args = parse_args(__doc__)
    rounds, per_block, log_size, reads = (4, 20, 2_000, 3) if args.quick else (25, 100, 10_000, 15)
    rng = random.Random(args.seed)
    talk = conversation(rng)
    quick = " (--quick: not the reported figures)" if args.quick else ""
    print(f"SQLite store, issue 3 measures{quick}")
    print(machine())
    need = (rounds + 1) * per_block
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        store = SqliteStore(Path(tmp, "store.db"), busy_timeout=BUSY_TIMEOUT)
        ddl = store_ddl(store.path)
        bare_conns = [bare_connection(Path(tmp, "bare.db"), ddl)]
        bare_conns += [bare_connection(Path(tmp, "bare.db"), None) for _ in range(WRITERS - 1)]
        store_jobs, bare_jobs = [], []
        for w in range(WRITERS):
            session = f"writer-{w}"
            store.create_session(Session(session, created_at=datetime.now(UTC)))
            own = conversation(rng, prefix=f"s{w}")  # one conversation per session (view rules)
            events = message_events(session, own, need, id_prefix=f"s{w}-")
            store_jobs.append(store_writer(store, session, events))
            bare_events = message_events(session, talk, need, id_prefix=f"b{w}-")
            bare_jobs.append(bare_job(bare_conns[w], rows_of(session, bare_events)))
        with ThreadPoolExecutor(WRITERS) as pool:
            timed = interleave(
                {
                    "store": together(pool, store_jobs, per_block),
                    "bare": together(pool, bare_jobs, per_block),
                },
                rounds,
                args.seed,
            )
        ratio = timed["bare"].median / timed["store"].median
        print(f"\nAppends, {WRITERS} writers on {WRITERS} sessions, 1 event per call")
        print(
            table(
                ["contender", "appends/s", "vs bare"],
                [
                    [
                        "SqliteStore.append_events",
                        per_second(timed["store"].median),
                        f"{ratio:.2f}x",
                    ],
                    ["bare sqlite3, 1 INSERT/txn", per_second(timed["bare"].median), "1.00x"],
                ],
            )
        )
        print(f"store/bare = {ratio:.2f}x (target >= {TARGET}): {verdict(ratio >= TARGET)}")

        store.create_session(Session("long", created_at=datetime.now(UTC)))
        events = message_events("long", talk, log_size, id_prefix="long-")
        for i in range(0, log_size, 1_000):
            store.append_events("long", events[i : i + 1_000], i, check_rules=False)
        conn = bare_connection(store.path, None)

        def bare_read() -> list[SessionEvent]:
            rows = conn.execute(
                "SELECT id, session_id, seq, type, timestamp, synthetic, body FROM turnlog_events "
                "WHERE session_id = ? ORDER BY seq",
                ("long",),
            ).fetchall()
            return [
                decode_event(
                    event_id=r[0],
                    session_id=r[1],
                    seq=r[2],
                    type_name=r[3],
                    timestamp_micros=r[4],
                    synthetic=r[5],
                    body=r[6],
                )
                for r in rows
            ]

        times: dict[str, list[float]] = {"SqliteStore.events": [], "bare SELECT + codec": []}
        for _ in range(reads):
            for name, read in (
                ("SqliteStore.events", lambda: store.events("long")),
                ("bare SELECT + codec", bare_read),
            ):
                start = time.perf_counter()
                got = read()
                times[name].append(time.perf_counter() - start)
                assert len(got) == log_size
        print(f"\nWhole-log read, {log_size:,} events ({reads} reads each, interleaved)")
        print(
            table(
                ["reader", "median ms"],
                [[name, ms(statistics.median(t))] for name, t in times.items()],
            )
        )
        conn.close()
        for c in bare_conns:
            c.close()
        store.close()


if __name__ == "__main__":
    main()
