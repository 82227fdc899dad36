"""PostgreSQL store benchmarks: appends/s against a bare psycopg loop, view and log reads.

Appends: `PostgresStore.append_events(session, [event], version)`, one message per call with the
version it expects, against a bare psycopg 3 loop inserting the same rows (same ids, same encoded
bodies, precomputed) with one autocommit `INSERT` per event (one transaction per append) into a
table made `LIKE` the store's events table `INCLUDING ALL` (same columns, `(session_id, seq)`
primary key, unique `(session_id, id)` index). Same server, same `synchronous_commit` (the
server's setting; printed), same prepared-statement threshold. One writer on one session, and 8
writer threads on 8 sessions (the store with a pool of 8, the bare loop with 8 connections).
Contenders run interleaved in rounds, shuffled each round; the table gives medians.

The store does more per append than the bare loop: it writes the event's id into `event_ids`
(ids are unique across sessions), bumps the session row's version, and checks the version, all
in the one round trip of its append function.

Targets (issue 3): store appends/s / bare appends/s >= 0.7, for 1 writer and for 8 writers;
median(view read, 100,000 covered) / median(view read, 100 covered) <= 1.5.

Also: the time to read a whole 10,000-event log with `PostgresStore.events`, against a bare
`SELECT` of the same rows decoded by the same codec.

    python bench/stores_postgres.py [--quick] [--dsn=postgresql://...]

The DSN defaults to $TURNLOG_TEST_POSTGRES_DSN, else postgresql://postgres@127.0.0.1:5432/test.
Everything is written to a schema of its own, dropped at the end.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing but the bench schema, not even bytecode

import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import uuid  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
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
    ms,
    parse_args,
    per_second,
    store_writer,
    table,
    verdict,
)
from turnlog import CompactionBoundary, Session, SessionEvent  # noqa: E402
from turnlog.codec import decode_event, encode_body, to_micros  # noqa: E402
from turnlog.stores.postgres import PostgresStore  # noqa: E402

DSN = os.environ.get("TURNLOG_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
APPEND_TARGET = 0.7
VIEW_TARGET = 1.5
WRITERS = 8
VIEW_EVENTS = 50
INSERT = (
    'INSERT INTO {b}.events (session_id, seq, id, type, "timestamp", role, synthetic, body) '
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)


def rows_of(session: str, events: list[SessionEvent]) -> list[tuple[Any, ...]]:
    """The rows the store writes for `events` as seq 1, 2, ...: same ids, same bodies."""
    now = to_micros(datetime.now(UTC))
    return [
        (session, seq, e.id, e.type.name, now + seq, e.role, e.synthetic, encode_body(e))
        for seq, e in enumerate(events, start=1)
    ]


def bare_writer(conn: psycopg.Connection[Any], insert: str, rows: list[tuple[Any, ...]]) -> Any:
    cur = Cursor()

    def run(n: int) -> None:
        for row in rows[cur.at : cur.at + n]:
            conn.execute(insert, row)  # autocommit: one transaction per append
        cur.at += n

    return run


def together(pool: ThreadPoolExecutor, runs: list[Any], n: int) -> Block:
    """A block in which every writer of `runs` appends `n` events, each in its own thread."""

    def block() -> int:
        for future in [pool.submit(run, n) for run in runs]:
            future.result()
        return n * len(runs)

    return block


def alone(run: Any, n: int) -> Block:
    def block() -> int:
        run(n)
        return n

    return block


def fill(store: PostgresStore, session: str, events: list[SessionEvent]) -> int:
    version = 0
    for i in range(0, len(events), 1_000):
        # setup, not timed: slices of a shared stream, stored as they are
        version = store.append_events(session, events[i : i + 1_000], version, check_rules=False)
    return version


def build_view_session(store: PostgresStore, session: str, covered: int, talk: Any) -> None:
    """`covered` message events, then the 50 of the view, then a boundary naming those 50."""
    store.create_session(Session(session, datetime.now(UTC)))
    history = message_events(session, talk, covered, id_prefix=f"{session}-old")
    view = message_events(session, talk, VIEW_EVENTS, id_prefix=f"{session}-view")
    while view[0].role != "user":  # start the view at a turn
        view = view[1:] + message_events(session, talk, 1, id_prefix=f"{session}-v{len(view)}")
    version = fill(store, session, history + view)
    boundary = CompactionBoundary(
        f"{session}-boundary", (), (), tuple(e.id for e in view), covered, 0, "bench"
    )
    store.append_events(session, [boundary.to_event(session)], version)
    assert [e.id for e in store.view(session)] == [e.id for e in view]


def main() -> None:
    args = parse_args(__doc__, [a for a in sys.argv[1:] if not a.startswith("--dsn")])
    dsn = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--dsn=")), DSN)
    quick = args.quick
    rounds, per_block = (3, 30) if quick else (31, 100)
    view_rounds, big, log_size = (5, 10_000, 2_000) if quick else (31, 100_000, 10_000)
    rng = random.Random(args.seed)
    talk = conversation(rng)
    schema = f"tl_bench_{uuid.uuid4().hex[:8]}"
    bare = f"{schema}_bare"

    print(f"PostgreSQL store{' (--quick: not the reported figures)' if quick else ''}")
    print(machine())
    admin = psycopg.connect(dsn, autocommit=True)
    server = admin.execute("SHOW server_version").fetchone()
    durability = admin.execute("SHOW synchronous_commit").fetchone()
    print(f"PostgreSQL {server[0] if server else '?'} | synchronous_commit={durability[0]!s}")
    store = PostgresStore(dsn, schema=schema, pool_min=WRITERS, pool_max=WRITERS)
    conns: list[psycopg.Connection[Any]] = []
    try:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(bare)))
        admin.execute(
            sql.SQL("CREATE TABLE {}.events (LIKE {}.events INCLUDING ALL)").format(
                sql.Identifier(bare), sql.Identifier(schema)
            )
        )
        insert = sql.SQL(INSERT).format(b=sql.Identifier(bare)).as_string(admin)
        conns = [psycopg.connect(dsn, autocommit=True) for _ in range(WRITERS)]
        for c in conns:
            assert c.execute("SHOW synchronous_commit").fetchone() == durability

        # -- appends ------------------------------------------------------------------------
        need = (rounds + 1) * per_block
        sessions = [f"w{i}" for i in range(WRITERS)]
        store_runs, bare_runs = [], []
        for sid in ["one", *sessions]:
            store.create_session(Session(sid, datetime.now(UTC)))
            own = conversation(rng, prefix=sid)  # one conversation per session (view rules)
            events = message_events(sid, own, need, id_prefix=f"{sid}-s")
            store_runs.append(store_writer(store, sid, events))
            twins = message_events(f"bare-{sid}", talk, need, id_prefix=f"{sid}-b")
            bare_runs.append(
                bare_writer(conns[len(bare_runs) % WRITERS], insert, rows_of(f"bare-{sid}", twins))
            )
        with ThreadPoolExecutor(WRITERS) as pool:
            contenders = {
                "store, 1 writer": alone(store_runs[0], per_block),
                "bare, 1 writer": alone(bare_runs[0], per_block),
                "store, 8 writers": together(pool, store_runs[1:], per_block // 2),
                "bare, 8 writers": together(pool, bare_runs[1:], per_block // 2),
            }
            timed = interleave(contenders, rounds, args.seed)
        assert store.version("one") == need
        rows = []
        for kind in ("1 writer", "8 writers"):
            s, b = timed[f"store, {kind}"].median, timed[f"bare, {kind}"].median
            ratio = b / s
            rows.append(
                [
                    kind,
                    per_second(s),
                    per_second(b),
                    f"{ratio:.2f}",
                    verdict(ratio >= APPEND_TARGET),
                ]
            )
        print()
        print("Appends with version checks, 1 event per call (appends/s, medians)")
        print(table(["writers", "store", "bare psycopg", "store/bare", ">= 0.7"], rows))

        # -- view reads ------------------------------------------------------------------------
        build_view_session(store, "view-small", 100, talk)
        build_view_session(store, "view-big", big, talk)

        def read_view(session: str) -> Block:
            def block() -> int:
                for _ in range(20):
                    store.view(session)
                return 20

            return block

        views = interleave(
            {"100": read_view("view-small"), "big": read_view("view-big")}, view_rounds, args.seed
        )
        small_t, big_t = views["100"].median, views["big"].median
        print()
        print(f"Active-view read, {VIEW_EVENTS}-event view (ms per read, medians)")
        print(
            table(
                ["covered events", "view read", "p90"],
                [
                    ["100", ms(small_t), ms(views["100"].quantile(0.9))],
                    [f"{big:,}", ms(big_t), ms(views["big"].quantile(0.9))],
                ],
            )
        )
        ratio = big_t / small_t
        print(f"ratio {ratio:.2f} (target <= {VIEW_TARGET}): {verdict(ratio <= VIEW_TARGET)}")

        # -- whole-log reads -------------------------------------------------------------------
        store.create_session(Session("log", datetime.now(UTC)))
        fill(store, "log", message_events("log", talk, log_size, id_prefix="log"))
        select = (
            sql.SQL(
                'SELECT seq, id, type, "timestamp", synthetic, body FROM {}.events '
                "WHERE session_id = %s ORDER BY seq"
            )
            .format(sql.Identifier(schema))
            .as_string(admin)
        )

        def read_log() -> int:
            assert len(store.events("log")) == log_size
            return 1

        def read_bare() -> int:
            rows_ = conns[0].execute(select, ("log",), binary=True).fetchall()
            events = [
                decode_event(
                    event_id=r[1],
                    session_id="log",
                    seq=r[0],
                    type_name=r[2],
                    timestamp_micros=r[3],
                    synthetic=r[4],
                    body=r[5],
                )
                for r in rows_
            ]
            assert len(events) == log_size
            return 1

        logs = interleave({"store": read_log, "bare": read_bare}, view_rounds, args.seed)
        print()
        print(f"Whole-log read, {log_size:,} events (ms per read, medians)")
        print(
            table(
                ["reader", "read", "p90"],
                [
                    [
                        "PostgresStore.events",
                        ms(logs["store"].median),
                        ms(logs["store"].quantile(0.9)),
                    ],
                    [
                        "bare SELECT + codec",
                        ms(logs["bare"].median),
                        ms(logs["bare"].quantile(0.9)),
                    ],
                ],
            )
        )
        spread = (
            statistics.pstdev(timed["store, 1 writer"].per_op) / timed["store, 1 writer"].median
        )
        print(f"\n(store 1-writer samples vary by {spread:.0%} around the median)")
    finally:
        store.close()
        for c in conns:
            c.close()
        for name in (schema, bare):
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        admin.close()


if __name__ == "__main__":
    main()
