"""`AsyncSqliteStore`: the SQLite store for asyncio programs."""

from __future__ import annotations

from pathlib import Path

from turnlog.durations import Duration
from turnlog.errors import InvalidInput
from turnlog.stores.attachments import DEFAULT_LIMITS, AttachmentLimits
from turnlog.stores.base import Clock, utc_now
from turnlog.stores.sqlite import SqliteStore, Synchronous, check_options
from turnlog.stores.threaded import ThreadedAsyncStore

__all__ = ["AsyncSqliteStore"]


class AsyncSqliteStore(ThreadedAsyncStore):
    """Sessions in one SQLite file, for asyncio programs; the event loop never waits on SQLite.

    Every call runs `SqliteStore` on one of the store's worker threads, so the file, its format
    and its locking are the same: a blocking process and an async one can share a database.
    Reads run in parallel on the workers (WAL); writes queue, as they do in `SqliteStore`.

    Keep `workers` small: the store's work is mostly Python (the codec, the view rules), so
    workers take turns on the GIL rather than run in parallel, and every busy worker is one
    more thread the event loop must win the GIL back from. Measured with 1,000 concurrent
    sessions (docs/benchmarks.md, "Async stores: event-loop health"): on a quiet machine one
    worker serves them as fast as 2 (1,795 against 1,826 messages/s) with the loop's p99 stall
    at 5.7 ms against 10.0 ms; 4 workers stall the loop 33 ms at p99 and read no faster.

    Nothing is opened until `await store.open()`, `async with store`, or the first call; the
    arguments are checked at once.

    Args:
        path: the database file (created with its schema when missing).
        workers: worker threads (each with its own connection); at least 1. One by default:
            the loop then competes for the GIL with one thread only. Two let one long read (a
            whole log) run beside the other calls, at the cost of longer loop stalls.
        busy_timeout: as `SqliteStore`.
        synchronous: as `SqliteStore`.
        clock: stamps events appended without a timestamp.
        attachments: as `SqliteStore`.

    Raises:
        InvalidInput: as `SqliteStore`; `workers` not a positive integer.
    """

    def __init__(
        self,
        path: str | Path = "turnlog.db",
        *,
        workers: int = 1,
        busy_timeout: Duration = 30.0,
        synchronous: Synchronous = "NORMAL",
        clock: Clock = utc_now,
        attachments: AttachmentLimits = DEFAULT_LIMITS,
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InvalidInput(f"workers must be an integer >= 1, got {workers!r}")
        self.path, _ = check_options(path, busy_timeout, synchronous)
        self.attachment_limits = attachments

        def make() -> SqliteStore:
            return SqliteStore(
                self.path,
                busy_timeout=busy_timeout,
                synchronous=synchronous,
                clock=clock,
                attachments=attachments,
            )

        super().__init__(make, workers=workers, name=f"sqlite {self.path}")

    async def open(self) -> AsyncSqliteStore:
        """Open the file (creating its schema when missing) now; returns the store.

        Raises:
            CorruptData: the file is not a turnlog database.
            StoreError: it was made by a newer turnlog, or cannot be opened.
        """
        await super().open()
        return self

    async def __aenter__(self) -> AsyncSqliteStore:
        return await self.open()
