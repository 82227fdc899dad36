"""A compaction pass in a fresh process (issue 11, item 4), on SQLite, PostgreSQL and Redis.

Each store holds sessions of a system prompt and a 10,000-event conversation (the texts of
bench/compaction.py), appended through `SessionService`, so every message carries its o200k count
(issue 11, item 1). One pass is `service.compact(sid, always, WindowCompactionStrategy(
last_turns(10)))`: find the session, read the version and the 10,000-event view from the store,
run the window (which needs every covered event's tokens for its saved estimate), append the
boundary with a version check. Every pass compacts a session of its own, so all do the same work.

- **fresh process**: a new Python per pass. The child imports turnlog (timed apart: "import"),
  and the store's driver module (psycopg, redis-py: an application imports them at start), then
  times from opening the store (a new file handle, pool or client) to the return of `compact`:
  everything a worker's first request pays for compaction. The o200k vocabulary is not
  loaded (nothing is counted: the counts are read), and OpenTelemetry is installed but not
  configured, as in the test environment. The pass reads the view lazily (`view_lazy`): it
  decodes the events it keeps, not the 9,970 it covers; "+ read covered" is what reading
  `result.covered_events` afterwards costs in the same child (not part of the pass).
- **warm**: the same pass in one long-lived process: the store handle open, and the per-event
  count cache holding the session's events from a previous read.
- **fresh, no counts**: a fresh process on sessions appended without counts
  (`record_tokens=False`, as every log written before counts were stored): the pass tokenizes
  the 9,970 covered events (vocabulary load not included: the child loads it before timing).

Rounds are interleaved (the order shuffled each round); the table gives medians and p90 in ms.
Targets (issue 11, item 4): fresh process at most 50 ms on SQLite, and at most 1.5x warm.

With `--baseline SRC` (another checkout's `src/`, e.g. from `git worktree add`), a fresh pass of
that code on the same kind of session runs in the same rounds: "fresh / baseline" is the change
measured in one run, which stays meaningful when the machine's speed moves between runs.

    python bench/compact_cold.py [--quick] [--stores sqlite,postgres,redis] [--baseline SRC]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

from _harness import machine, table, verdict  # noqa: E402
from compact_service import session_events  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionWindow,
    O200kCounter,
    SessionService,
    WindowCompactionStrategy,
    open_store,
)

POSTGRES_DSN = os.environ.get(
    "TURNLOG_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("TURNLOG_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TARGET_MS = 50.0
TARGET_RATIO = 1.5

CHILD = textwrap.dedent(
    """
    import sys, time, json
    t0 = time.perf_counter()
    from turnlog import CompactionWindow, SessionService, WindowCompactionStrategy
    from turnlog import open_store
    t1 = time.perf_counter()
    url, sid, load = sys.argv[1], sys.argv[2], sys.argv[3] == "load"
    if load:  # a log without counts: load the vocabulary first, it is not what is measured
        from turnlog import O200kCounter
        O200kCounter().count("load")
    # the store's driver, as an application imports it at start (not counted: not turnlog's)
    if url.startswith("postgresql"):
        import turnlog.stores.postgres
    elif url.startswith("redis"):
        import turnlog.stores.redis
    t2 = time.perf_counter()
    svc = SessionService(open_store(url))
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(10))
    result = svc.compact(sid, lambda request: True, strategy)
    t3 = time.perf_counter()
    covered = list(result.covered_events)  # decoded now: what reading them costs on top
    t4 = time.perf_counter()
    svc.close()
    assert not result.unchanged and not result.conflict
    print(json.dumps({"import": t1 - t0, "pass": t3 - t2, "saved": result.tokens_estimated_saved,
                      "covered": len(covered), "read covered": t4 - t3}))
    """
)


def always(request: object) -> bool:
    return True


def fill(url: str, sid: str, size: int, seed: int, *, counts: bool) -> None:
    with SessionService(open_store(url), record_tokens=counts) as svc:
        svc.create(sid)
        events = session_events(sid, size, seed)
        version = 0
        for start in range(0, size, 1_000):
            version = svc.append_events(sid, events[start : start + 1_000], version)


def child(url: str, sid: str, *, load: bool, source: str | None = None) -> dict[str, float]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if source is not None:  # another checkout's src/ (--baseline)
        env["PYTHONPATH"] = source
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, sid, "load" if load else "counts"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    if out.returncode != 0:
        raise SystemExit(f"the child failed:\n{out.stderr}")
    result: dict[str, float] = json.loads(out.stdout)
    return result


def urls(names: list[str], tmp: Path) -> dict[str, str]:
    out = {}
    for name in names:
        tag = uuid.uuid4().hex[:8]
        if name == "sqlite":
            out[name] = f"sqlite:///{tmp / 'cold.db'}"
        elif name == "postgres":
            sep = "&" if "?" in POSTGRES_DSN else "?"
            out[name] = f"{POSTGRES_DSN}{sep}schema=tl_cold_{tag}"
        elif name == "redis":
            sep = "&" if "?" in REDIS_URL else "?"
            out[name] = f"{REDIS_URL}{sep}prefix=tlcold-{tag}"
        else:
            raise SystemExit(f"unknown store {name!r}: sqlite, postgres or redis")
    return out


def cleanup(name: str, url: str) -> None:
    if name == "postgres":
        import psycopg
        from psycopg import sql

        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )
    elif name == "redis":
        import redis

        prefix = url.rsplit("prefix=", 1)[1]
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for at in range(0, len(keys), 1000):
            client.unlink(*keys[at : at + 1000])
        client.close()


def measure(
    name: str, url: str, size: int, rounds: int, seed: int, baseline: str | None
) -> list[str]:
    kinds: tuple[str, ...] = ("fresh", "warm", "fresh, no counts")
    if baseline is not None:
        kinds += ("fresh, baseline",)
    sessions = {k: [f"{k[:5]}-{i}-{k.count(' ')}" for i in range(rounds + 1)] for k in kinds}
    for kind, group in sessions.items():
        for sid in group:
            fill(url, sid, size, seed, counts=kind != "fresh, no counts")
    O200kCounter().count("load the vocabulary before timing")
    warm_store = open_store(url)
    warm_svc = SessionService(warm_store)
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(10))
    for sid in sessions["warm"]:
        warm_svc.view(sid)  # the handle and the caches a long-lived process has
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    imports: list[float] = []
    reads: list[float] = []
    saved: set[int] = set()
    queues = {k: iter(v) for k, v in sessions.items()}

    def warm() -> float:
        t = time.perf_counter()
        result = warm_svc.compact(next(queues["warm"]), always, strategy)
        elapsed = time.perf_counter() - t
        assert not result.unchanged
        saved.add(result.tokens_estimated_saved)
        return elapsed

    def fresh() -> float:
        got = child(url, next(queues["fresh"]), load=False)
        imports.append(got["import"])
        reads.append(got["read covered"])
        saved.add(int(got["saved"]))
        return got["pass"]

    def legacy() -> float:
        got = child(url, next(queues["fresh, no counts"]), load=True)
        saved.add(int(got["saved"]))
        return got["pass"]

    def before() -> float:
        got = child(url, next(queues["fresh, baseline"]), load=False, source=baseline)
        saved.add(int(got["saved"]))
        return got["pass"]

    run: dict[str, Callable[[], float]] = {
        "fresh": fresh,
        "warm": warm,
        "fresh, no counts": legacy,
        "fresh, baseline": before,
    }
    order = list(kinds)
    rng = random.Random(seed)
    for i in range(rounds + 1):
        rng.shuffle(order)
        for kind in order:
            elapsed = run[kind]()
            if i > 0:  # the first round warms up
                samples[kind].append(elapsed)
    warm_svc.close()
    assert len(saved) == 1, f"{name}: the passes disagree on the tokens saved: {saved}"

    def med(kind: str) -> float:
        return statistics.median(samples[kind]) * 1e3

    def p90(kind: str) -> float:
        ordered = sorted(samples[kind])
        return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] * 1e3

    ratio = med("fresh") / med("warm")
    return [
        name,
        f"{statistics.median(imports) * 1e3:.1f}",
        f"{med('fresh'):.1f}",
        f"{p90('fresh'):.1f}",
        f"{med('warm'):.1f}",
        f"{ratio:.2f}x",
        f"{statistics.median(reads) * 1e3:.1f}",
        f"{med('fresh, no counts'):.1f}",
        *(
            [f"{med('fresh, baseline'):.1f}", f"{med('fresh') / med('fresh, baseline'):.2f}x"]
            if baseline is not None
            else []
        ),
    ]


HEADERS = [
    "store",
    "import",
    "fresh",
    "fresh p90",
    "warm",
    "fresh/warm",
    "+ read covered",
    "fresh, no counts",
]
BASELINE_HEADERS = ["fresh, baseline", "fresh / baseline"]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stores", default="sqlite,postgres,redis")
    parser.add_argument(
        "--baseline",
        metavar="SRC",
        help="another checkout's src/ folder: its fresh pass is timed in the same rounds",
    )
    args = parser.parse_args()
    size, rounds = (1_000, 3) if args.quick else (10_000, 9)
    print(
        f"a compaction pass in a fresh process{' (--quick: not the figures)' if args.quick else ''}"
    )
    print(machine())
    print(f"each pass: a session of {size:,} events, last_turns(10); {rounds} rounds, medians (ms)")
    headers = HEADERS + (BASELINE_HEADERS if args.baseline else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        for name, url in urls(args.stores.split(","), Path(tmp)).items():
            try:
                rows.append(measure(name, url, size, rounds, args.seed, args.baseline))
            finally:
                cleanup(name, url)
            print(table(headers, rows[-1:]), flush=True)
    print()
    print(table(headers, rows))
    for row in rows:
        fresh, ratio = float(row[2]), float(row[5].rstrip("x"))
        if row[0] == "sqlite":
            print(
                f"sqlite: fresh process {fresh:.1f} ms (target <= {TARGET_MS:.0f}): "
                f"{verdict(fresh <= TARGET_MS)}"
            )
        print(
            f"{row[0]}: fresh / warm {ratio:.2f}x (target <= {TARGET_RATIO}): "
            f"{verdict(ratio <= TARGET_RATIO)}"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
