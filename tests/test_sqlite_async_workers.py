"""AsyncSqliteStore's worker threads: two by default (bench/async_loop.py measured why)."""

import asyncio
import sqlite3
import threading
from datetime import UTC, datetime

import pytest

from turnlog import Session
from turnlog.stores.sqlite_async import AsyncSqliteStore


def busy_threads(path, **options) -> int:
    """How many threads the store runs 8 concurrent writes on while another connection holds the
    file's write lock (every call blocks, so the store starts all the threads it may)."""

    async def main() -> int:
        async with AsyncSqliteStore(path, **options) as store:
            blocker = sqlite3.connect(path, isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")
            now = datetime.now(UTC)
            calls = [
                asyncio.ensure_future(store.create_session(Session(f"s{i}", now))) for i in range(8)
            ]
            await asyncio.sleep(0.3)  # every call handed to the pool, every free thread busy
            prefix = f"turnlog-sqlite {store.path}"
            count = sum(t.name.startswith(prefix) for t in threading.enumerate())
            blocker.execute("COMMIT")
            blocker.close()
            await asyncio.gather(*calls)
            return count

    return asyncio.run(main())


def test_one_worker_by_default(tmp_path):
    assert busy_threads(tmp_path / "default.db") == 1


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_sets_the_thread_count(tmp_path, workers):
    assert busy_threads(tmp_path / "set.db", workers=workers) == workers
