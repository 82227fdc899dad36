"""PostgreSQL history index (schema 4): search latency on a large session, append overhead.

Search: `PostgresStore.search_history` on a 100,000-event session in a store that also holds
20 other sessions of 5,000 events each, for queries of rare and mid-frequency words (k=5);
p50 and p99 over the queries. Targets: p50 <= 5 ms, p99 <= 20 ms.

Appends: one message per `append_events` call, with the index (the store as it is) against
without it (the same store with `history_columns` patched to index nothing: the events, ids
and checks unchanged), interleaved in rounds; the ratio of medians. Target: within 15%.

    python bench/history_postgres.py [--dsn=postgresql://...] [--events=100000]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime

import psycopg
from psycopg import sql

from turnlog import Message, Session, SessionEvent
from turnlog.history import history_query
from turnlog.stores.postgres import PostgresStore, rows
from turnlog.stores.postgres import store as store_module

DSN = os.environ.get("TURNLOG_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
WORDS = [f"w{i}" for i in range(5000)]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def text_of(n: int) -> str:
    # each event: 12 common words, 3 of 5,000 mid words, one rare word (1 in 100,000)
    mid = " ".join(WORDS[(n * 7 + j * 131) % len(WORDS)] for j in range(3))
    return f"the user asked about the order and the invoice again today {mid} rare{n}"


def fill(store: PostgresStore, sid: str, n: int) -> None:
    store.create_session(Session(sid, T0))
    done = 0
    while done < n:
        batch = [
            SessionEvent.for_message(sid, Message.user(text_of(done + i)), timestamp=T0)
            for i in range(min(1000, n - done))
        ]
        store.append_events(sid, batch, done, check_rules=False)
        done += len(batch)


def main() -> None:
    args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
    dsn, events = args.get("dsn", DSN), int(args.get("events", "100000"))
    schema = f"bench_hist_{uuid.uuid4().hex[:8]}"
    try:
        with PostgresStore(dsn, schema=schema, pool_max=2) as store:
            began = time.perf_counter()
            for i in range(20):
                fill(store, f"other{i}", 5000)
            fill(store, "big", events)
            print(f"filled {events + 100_000:,} events in {time.perf_counter() - began:.0f} s")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("VACUUM ANALYZE {}.history").format(sql.Identifier(schema)))
            queries = [f"rare{n * 997 % events}" for n in range(100)]
            queries += [
                f"{WORDS[n * 37 % len(WORDS)]} {WORDS[n * 91 % len(WORDS)]}" for n in range(100)
            ]
            for query in queries[:20]:  # warm
                store.search_history("big", history_query(query))
            times = []
            for query in queries * 3:
                t = time.perf_counter()
                hits = store.search_history("big", history_query(query))
                times.append((time.perf_counter() - t) * 1000)
                assert hits
            times.sort()
            p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
            print(f"search_history, 100k-event session: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
                  f"(targets 5 / 20 ms) over {len(times)} searches")  # fmt: skip
            common = []
            for _ in range(20):
                t = time.perf_counter()
                store.search_history("big", history_query("invoice"))
                common.append((time.perf_counter() - t) * 1000)
            print(
                f"a word in every event (100k matches): median {statistics.median(common):.0f} ms"
            )

            real = rows.history_columns
            off = lambda e, stamp: (None, None, "")  # noqa: E731
            store.create_session(Session("w", T0))
            version, ratios = 0, []
            with_t, without_t = [], []
            for r in range(10):
                for label in ("on", "off") if r % 2 else ("off", "on"):
                    store_module.history_columns = real if label == "on" else off
                    rows.history_columns = store_module.history_columns
                    t = time.perf_counter()
                    for _ in range(200):
                        e = SessionEvent.for_message("w", Message.user(text_of(version)))
                        version = store.append_events("w", [e], version)
                    (with_t if label == "on" else without_t).append(time.perf_counter() - t)
                ratios.append(with_t[-1] / without_t[-1])
            store_module.history_columns = rows.history_columns = real
            print(f"appends, 1 event per call: with index {200 / statistics.median(with_t):.0f}/s, "
                  f"without {200 / statistics.median(without_t):.0f}/s; time ratio per round "
                  f"{', '.join(f'{x:.3f}' for x in ratios)}; median {statistics.median(ratios):.3f}"
                  " (target <= 1.15)")  # fmt: skip
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
