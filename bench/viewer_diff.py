"""The viewer's diff page on SQLite: bytes, seconds and memory of one response as the log grows.

Each size gets one session in its own database file: N message events of a realistic
conversation (plain turns and tool-calling turns), never compacted, so the diff from seq 0 to
seq N has every event entering the view, the largest diff the session can have. For each size
it requests, through Starlette's TestClient against `create_app`, the HTML page and the JSON
of that diff: the first page (`offset=0`, the default `limit=100`) and a late page (the last
`limit` rows). Seconds are medians of a few requests; memory is the tracemalloc peak of one more
request above what was allocated before it (the app's own allocations, the log read included).

An app that does not page the diff answers every row on every request, whatever the offset.

    python bench/viewer_diff.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import random  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

from starlette.testclient import TestClient  # noqa: E402

from _harness import conversation, machine, message_events, parse_args, table  # noqa: E402
from turnlog import Session, SessionService, SqliteStore  # noqa: E402
from turnlog.viewer import create_app  # noqa: E402

SESSION = "bench-diff"
BATCH = 10_000
LIMIT = 100


def build(path: Path, events: int, seed: int) -> None:
    store = SqliteStore(path)
    store.create_session(Session(SESSION, created_at=datetime.now(UTC)))
    history = conversation(random.Random(seed), prefix="c")
    version = 0
    for start in range(0, events, BATCH):
        n = min(BATCH, events - start)
        batch = message_events(SESSION, history, n, id_prefix=f"e{start}")
        version = store.append_events(SESSION, batch, version, check_rules=False)  # setup
    store.close()


def measure(client: TestClient, url: str, rounds: int) -> tuple[int, float, float]:
    """Bytes of the body, median seconds, and the tracemalloc peak in MiB of one request."""
    seconds = []
    size = 0
    for _ in range(rounds):
        started = time.perf_counter()
        got = client.get(url)
        seconds.append(time.perf_counter() - started)
        assert got.status_code == 200, (url, got.status_code, got.text[:300])
        size = len(got.content)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    assert client.get(url).status_code == 200
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return size, statistics.median(seconds), peak / 2**20


def main() -> None:
    args = parse_args(__doc__)
    sizes = [1_000, 10_000] if args.quick else [10_000, 100_000]
    rounds = 2 if args.quick else 3
    print(machine())
    rows = []
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        for events in sizes:
            path = Path(tmp) / f"diff-{events}.db"
            build(path, events, args.seed)
            svc = SessionService(SqliteStore(path))
            with TestClient(create_app(svc), base_url="http://127.0.0.1:8765") as client:
                late = max(0, events - LIMIT)
                for kind, prefix in (("html", ""), ("json", "/api")):
                    for page, offset in (("first", 0), ("late", late)):
                        url = f"{prefix}/sessions/{SESSION}/diff?a=0&b={events}&offset={offset}"
                        size, seconds, peak = measure(client, url, rounds)
                        rows.append(
                            [
                                f"{events:,} events, {kind}, {page} page",
                                f"{size:,}",
                                f"{seconds:.3f}",
                                f"{peak:.1f}",
                            ]
                        )
            svc.close()
    print()
    print(f"GET .../diff?a=0&b=N&offset=O (limit {LIMIT}), medians of {rounds} requests")
    print(table(["case", "bytes", "seconds", "peak MiB"], rows))


if __name__ == "__main__":
    main()
