"""Event-loop health of the async stores: 1,000 concurrent sessions, against a thread pool.

Issue 8's deliverable 5. For each store kind (`--stores`), three contenders run the same
workload, interleaved in shuffled rounds (medians over rounds):

- async: `--sessions` asyncio tasks (1,000) on one event loop, each creating a session,
  appending `--messages` messages (20, user and assistant in turn) with
  `AsyncSessionService.append_message` and reading them back with `view_messages`; a ticker task
  sleeps 1 ms in a loop and records how late it wakes (the loop's stalls: p50, p99, max);
- sync, N threads: the same workload on the sync store (`SessionService`) driven by a
  `ThreadPoolExecutor` of as many workers as there are sessions ("the same size");
- sync, 32 threads (`--pool`): the pool size people run.

In the sync runs a ticker *thread* sleeps 1 ms in a loop too: its lateness is what the GIL and
the OS cost a thread that wants to run, the nearest sync analogue of a loop stall.

Throughput is messages appended per second (ops/s counts every call: create, appends, view).
Every contender gets a fresh store handle per run, opened and warmed (its threads started, its
connections made) before the clock starts; the garbage collector stays on (a collection is a
real stall), collected before each run. The server stores get the same `--pool-max` on both
sides. SQLite: a fresh file per run; the async store runs on
`--sqlite-workers` threads (1, its default; then 2 and 4 for comparison), the sync store opens
one connection per thread.

    python bench/async_loop.py [--quick] [--stores memory,sqlite,postgres,redis,cluster]
        [--sessions 1000] [--messages 20] [--pool 32] [--pool-max 20] [--rounds 3]
        [--dsn postgresql://...] [--url redis://...] [--cluster-url redis+cluster://...]

PostgreSQL and Redis default to $TURNLOG_TEST_POSTGRES_DSN / $TURNLOG_TEST_REDIS_URL, else the
servers on 127.0.0.1; each run writes into a schema / key prefix of its own, dropped at the end.
`cluster` starts a 3-master Redis Cluster on loopback ports (tests/redis_cluster.py) unless
`--cluster-url` names one. A store kind whose async class is not in this checkout is skipped.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # redis_cluster

import argparse  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import tempfile  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import ExitStack, contextmanager  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

from _harness import machine, table, verdict, words  # noqa: E402
from _loop_runs import Made, Run, run_async, run_idle, run_sync  # noqa: E402
from turnlog import Message  # noqa: E402

DSN = os.environ.get("TURNLOG_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
URL = os.environ.get("TURNLOG_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
KINDS = ("memory", "sqlite", "postgres", "redis", "cluster")
STALL_TARGET_MS = 10.0  # AsyncSqliteStore: p99 loop stall under this
RATIO_TARGET = 1.5
IDLE = "idle loop (the floor)"  # the ticker alone on a loop: what the machine costs it
IDLE_SECONDS = 2.0  # AsyncPostgresStore, AsyncRedisStore: throughput vs the same-size pool


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (100 sessions)")
    parser.add_argument("--seed", type=int, default=2, help="seed for content and round order")
    parser.add_argument("--stores", default=",".join(KINDS), help="comma-separated store kinds")
    parser.add_argument("--sessions", type=int, help="concurrent sessions (1,000; quick 100)")
    parser.add_argument("--messages", type=int, default=20, help="messages per session")
    parser.add_argument("--pool", type=int, default=32, help="the smaller sync thread pool")
    parser.add_argument("--pool-max", type=int, default=20, help="server store pool size")
    parser.add_argument(
        "--sqlite-workers",
        default="1,2,4",
        help="AsyncSqliteStore worker counts: the first is the main row, the others extra rows",
    )
    parser.add_argument("--rounds", type=int, help="rounds per store (3; quick 1)")
    parser.add_argument("--dsn", default=DSN, help="the PostgreSQL server")
    parser.add_argument("--url", default=URL, help="the Redis server")
    parser.add_argument("--cluster-url", help="a Redis Cluster (default: start one)")
    args = parser.parse_args(argv)
    args.sessions = args.sessions or (100 if args.quick else 1_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.sqlite_workers = [int(w) for w in args.sqlite_workers.split(",")]
    unknown = set(args.stores.split(",")) - set(KINDS)
    if unknown:
        parser.error(f"unknown store kinds {sorted(unknown)}; choose from {', '.join(KINDS)}")
    return args


@dataclass
class Kind:
    """One store kind: how to make a fresh async and sync store for a run."""

    name: str
    make_async: Callable[[], Made]
    make_sync: Callable[[], Made]
    about: str
    variants: dict[str, Callable[[], Made]] = field(default_factory=dict)
    """More async contenders, by label (SQLite: other worker counts)."""


def script(rng: random.Random, count: int) -> list[Message]:
    """`count` messages, user and assistant in turn, 5-40 words each."""
    return [
        (Message.user if i % 2 == 0 else Message.assistant)(words(rng, rng.randint(5, 40)))
        for i in range(count)
    ]


def sqlite_kind(args: argparse.Namespace, tmp: Path) -> Kind:
    from turnlog import SqliteStore
    from turnlog.stores.sqlite_async import AsyncSqliteStore

    def path() -> Path:
        return tmp / f"loop-{uuid.uuid4().hex[:8]}.db"

    def make(workers: int) -> Callable[[], Made]:
        return lambda: (AsyncSqliteStore(path(), workers=workers), None)

    first, *more = args.sqlite_workers
    return Kind(
        "SQLite",
        make(first),
        lambda: (SqliteStore(path()), None),
        f"a fresh file per run; async on {first} worker thread(s) (then "
        f"{', '.join(map(str, more)) or 'no other count'}), sync one connection per thread",
        {f"async, 1 loop, {w} worker{'s' if w > 1 else ''}": make(w) for w in more},
    )


def memory_kind() -> Kind:
    from turnlog import MemoryStore
    from turnlog.stores.memory_async import AsyncMemoryStore

    return Kind(
        "memory",
        lambda: (AsyncMemoryStore(), None),
        lambda: (MemoryStore(), None),
        "a fresh store per run",
    )


@contextmanager
def postgres_kind(args: argparse.Namespace) -> Iterator[Kind]:
    import psycopg
    from psycopg import sql

    from turnlog.stores.postgres import AsyncPostgresStore, PostgresStore

    schema = f"tl_loop_{uuid.uuid4().hex[:8]}"
    # pool_min stays at its default (1): with pool_min near pool_max, more callers than
    # connections starve (the store keeps up to pool_min connections warm outside the pool,
    # where a caller already waiting in the pool never gets them; measured, see the docs)
    # connect_timeout is also how long a call waits for a free connection: 1,000 callers on 20
    # connections wait longer than the default 10 s (the pool does not serve them in turn)
    size = {"pool_max": args.pool_max, "connect_timeout": 120}
    try:
        yield Kind(
            "PostgreSQL",
            lambda: (AsyncPostgresStore(args.dsn, schema=schema, **size), None),
            lambda: (PostgresStore(args.dsn, schema=schema, **size), None),
            f"schema {schema}; pool_max = {args.pool_max} (pool_min 1), connect_timeout 120 s "
            "on both",
        )
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            admin.execute(drop)


def drop_keys(client: Any, prefix: str) -> None:
    """Unlink every key under `prefix` (one key per command: a cluster refuses cross-slot ones)."""
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1_000))
    for at in range(0, len(keys), 1_000):
        pipe = client.pipeline(transaction=False)
        for key in keys[at : at + 1_000]:
            pipe.unlink(key)
        pipe.execute()


@contextmanager
def redis_kind(args: argparse.Namespace) -> Iterator[Kind]:
    """Standalone Redis. The stores take no pool size, so both get a client of our own on a
    blocking pool of `--pool-max` connections (callers wait for a free one, as on PostgreSQL)."""
    import redis
    import redis.asyncio

    from turnlog.stores.redis import AsyncRedisStore, RedisStore

    prefix = f"bench-loop-{uuid.uuid4().hex[:8]}"

    def make_async() -> Made:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            args.url, max_connections=args.pool_max, timeout=60
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        return AsyncRedisStore(client, prefix=prefix), client.aclose

    def make_sync() -> Made:
        pool = redis.BlockingConnectionPool.from_url(
            args.url, max_connections=args.pool_max, timeout=60
        )
        client = redis.Redis(connection_pool=pool)
        return RedisStore(client, prefix=prefix), client.close

    try:
        yield Kind(
            "Redis",
            make_async,
            make_sync,
            f"prefix {prefix}; a blocking pool of {args.pool_max} connections on both",
        )
    finally:
        admin = redis.Redis.from_url(args.url)
        drop_keys(admin, prefix)
        admin.close()


@contextmanager
def cluster_kind(args: argparse.Namespace, stack: ExitStack) -> Iterator[Kind]:
    """Redis Cluster. Both stores get a client of our own allowing `--sessions` connections per
    node: redis-py's cluster pools do not block when full, they fail (the async client's default
    of 100 per node fails 1,000 concurrent calls), and a thread pool needs one per thread."""
    import redis.asyncio.cluster as async_cluster
    import redis.cluster as sync_cluster

    from turnlog.stores.redis import AsyncRedisClusterStore, RedisClusterStore

    url = args.cluster_url
    if url is None:
        from redis_cluster import RedisCluster

        url = stack.enter_context(RedisCluster.start()).url
    seeds = [s.rpartition(":") for s in url.split("://", 1)[1].split(",")]
    prefix = f"bench-loop-{uuid.uuid4().hex[:8]}"
    most = args.sessions

    def make_async() -> Made:
        nodes = [async_cluster.ClusterNode(h, int(p)) for h, _, p in seeds]
        client = async_cluster.RedisCluster(startup_nodes=nodes, max_connections=most)
        return AsyncRedisClusterStore(client, prefix=prefix), client.aclose

    def make_sync() -> Made:
        nodes = [sync_cluster.ClusterNode(h, int(p)) for h, _, p in seeds]
        client = sync_cluster.RedisCluster(startup_nodes=nodes, max_connections=most)
        return RedisClusterStore(client, prefix=prefix), client.close

    try:
        yield Kind(
            "Redis Cluster",
            make_async,
            make_sync,
            f"{url}; prefix {prefix}; up to {most} connections per node on both",
        )
    finally:
        admin = sync_cluster.RedisCluster(
            startup_nodes=[sync_cluster.ClusterNode(h, int(p)) for h, _, p in seeds]
        )
        drop_keys(admin, prefix)
        admin.close()


def kinds(args: argparse.Namespace, tmp: Path, stack: ExitStack) -> Iterator[Kind]:
    """The store kinds asked for; a kind whose async store is missing is reported, skipped."""
    for name in args.stores.split(","):
        try:
            if name == "memory":
                yield memory_kind()
            elif name == "sqlite":
                yield sqlite_kind(args, tmp)
            elif name == "postgres":
                yield stack.enter_context(postgres_kind(args))
            elif name == "redis":
                yield stack.enter_context(redis_kind(args))
            elif name == "cluster":
                yield stack.enter_context(cluster_kind(args, stack))
        except ImportError as exc:
            print(f"\n{name}: skipped, its async store is not in this checkout ({exc})")


def contenders(args: argparse.Namespace, kind: Kind) -> dict[str, Callable[[str], Run]]:
    rng = random.Random(args.seed)
    messages = script(rng, args.messages)
    n = args.sessions
    found = {
        "async, 1 loop": lambda tag: run_async(kind.make_async, tag, n, messages),
        **{
            label: lambda tag, make=make: run_async(make, tag, n, messages)
            for label, make in kind.variants.items()
        },
        f"sync, {n} threads": lambda tag: run_sync(kind.make_sync, tag, n, messages, n),
    }
    if args.pool < n:
        found[f"sync, {args.pool} threads"] = lambda tag: run_sync(
            kind.make_sync, tag, n, messages, args.pool
        )
    found[IDLE] = lambda tag: run_idle(IDLE_SECONDS)
    return found


def measure(args: argparse.Namespace, kind: Kind) -> dict[str, list[Run]]:
    """Every contender once per round, in a shuffled order each round."""
    found = contenders(args, kind)
    runs: dict[str, list[Run]] = {name: [] for name in found}
    order = list(found)
    rng = random.Random(args.seed)
    for r in range(args.rounds):
        rng.shuffle(order)
        for name in order:
            runs[name].append(found[name](f"r{r}-{uuid.uuid4().hex[:6]}"))
    return runs


def rows_of(
    kind: Kind, runs: dict[str, list[Run]], sessions: int, pool: int
) -> tuple[list[list[object]], float]:
    """Table rows for one store, and the async / same-size-pool throughput ratio."""
    rate = {name: Run.median(r, "messages_per_s") for name, r in runs.items()}
    same, small = rate[f"sync, {sessions} threads"], rate.get(f"sync, {pool} threads")
    rows: list[list[object]] = []
    for name, got in runs.items():
        idle = name == IDLE
        rows.append(
            [
                f"{kind.name}: {name}",
                "" if idle else f"{rate[name]:,.0f}",
                "" if idle else f"{Run.median(got, 'ops_per_s'):,.0f}",
                f"{Run.median(got, 'seconds'):.2f}",
                f"{Run.median(got, 'cpu_share'):.0%}",
                "" if idle else f"{Run.median(got, 'cpu') / got[0].ops * 1e6:,.0f}",
                f"{Run.median(got, 'stall_p50') * 1e3:.2f}",
                f"{Run.median(got, 'stall_p99') * 1e3:.2f}",
                f"{max(g.stall_max for g in got) * 1e3:.1f}",
                f"{Run.median(got, 'net_p99') * 1e3:.2f}",
                f"{Run.median(got, 'cpu_wait_share'):.0%}",
                "" if idle else f"{rate[name] / same:.2f}x",
                "" if idle or small is None else f"{rate[name] / small:.2f}x",
            ]
        )
    return rows, rate["async, 1 loop"] / same


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    quick = " (--quick: not the reported figures)" if args.quick else ""
    print(f"Async stores: event-loop health{quick}")
    print(machine())
    print(
        f"{args.sessions:,} sessions x ({args.messages} appends + create + view); "
        f"{args.rounds} round(s); medians; load average at start: {os.getloadavg()[0]:.2f}"
    )
    rows: list[list[object]] = []
    verdicts: list[str] = []
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp, ExitStack() as stack:
        for kind in kinds(args, Path(tmp), stack):
            print(f"\n{kind.name}: {kind.about}", flush=True)
            runs = measure(args, kind)
            got, ratio = rows_of(kind, runs, args.sessions, args.pool)
            rows += got
            async_runs = runs["async, 1 loop"]
            p99 = Run.median(async_runs, "stall_p99") * 1e3
            if kind.name == "SQLite":
                verdicts.append(
                    f"AsyncSqliteStore p99 loop stall {p99:.2f} ms (target < {STALL_TARGET_MS:g}"
                    f" ms): {verdict(p99 < STALL_TARGET_MS)}"
                )
            if kind.name in ("PostgreSQL", "Redis", "Redis Cluster"):
                verdicts.append(
                    f"{kind.name} async / sync {args.sessions:,} threads = {ratio:.2f}x "
                    f"(target >= {RATIO_TARGET}): {verdict(ratio >= RATIO_TARGET)}"
                )
            for line in got:
                print("  " + "  ".join(str(c) for c in line), flush=True)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}\n")
    headers = [
        "store: contender",
        "msgs/s",
        "ops/s",
        "wall s",
        "CPU",
        "CPU us/op",
        "stall p50 ms",
        "p99 ms",
        "max ms",
        "p99 net",
        "CPU wait",
        f"/ sync {args.sessions}",
        f"/ sync {args.pool}",
    ]
    print(table(headers, rows))
    print(
        "(stall: how late a ticker sleeping 1 ms wakes: a task on the loop for the async rows "
        f"and '{IDLE}', a thread for the sync rows; p99 net: less the ticker's waits for a CPU; "
        "CPU wait: their share of the ticks late by > 5 ms; CPU: process CPU time / wall time, "
        f"100% = one core; / sync N: msgs/s over that row's)"
    )
    for line in verdicts:
        print(line)


if __name__ == "__main__":
    main()
