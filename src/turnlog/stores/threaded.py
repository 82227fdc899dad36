"""Async stores that run a blocking store: `AsyncSqliteStore` and `AsyncMemoryStore`.

SQLite has no asynchronous driver, so the async SQLite store is the blocking `SqliteStore` with
every call handed to a small pool of worker threads: one hop off the event loop per call, the
same file, format and locking as a blocking process on the same database. This is the one
direction the twins are not generated in (see docs/async.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import ParamSpec, TypeVar

from turnlog.errors import StoreError
from turnlog.events import Session, SessionEvent, TokenCount
from turnlog.history import HistoryHit, HistoryQuery
from turnlog.lazy import LazyEvents
from turnlog.stores.base import EventFilter
from turnlog.stores.protocol import SessionStore

__all__ = ["ThreadedAsyncStore"]

P = ParamSpec("P")
T = TypeVar("T")


class ThreadedAsyncStore:
    """An async store made of a blocking one.

    With `workers=0` every call runs on the event loop itself (for a store whose calls never
    block, like `MemoryStore`); otherwise on up to `workers` threads of the store's own pool.
    A cancelled call is not interrupted: its thread finishes the whole operation (an append
    lands whole or not at all), and the cancelled task does not wait for it.
    """

    def __init__(self, make: Callable[[], SessionStore], *, workers: int, name: str) -> None:
        self._make = make
        self._store: SessionStore | None = None
        self._name = name
        self._opening = asyncio.Lock()
        self._closed = False
        self._pool = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"turnlog-{name}")
            if workers
            else None
        )

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._pool is None:
            return fn(*args, **kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    async def _sync(self) -> SessionStore:
        store = self._store
        if store is not None:
            return store
        async with self._opening:
            if self._closed:
                raise StoreError(f"the {self._name} store is closed")
            if self._store is None:
                self._store = await self._run(self._make)
            return self._store

    async def open(self) -> ThreadedAsyncStore:
        """Open the store now (the first call opens it otherwise); returns the store.

        Raises:
            StoreError, CorruptData: as the blocking store's constructor.
        """
        await self._sync()
        return self

    async def __aenter__(self) -> ThreadedAsyncStore:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the store and stop its threads; it is unusable afterwards."""
        async with self._opening:
            self._closed = True
            store, self._store = self._store, None
        if self._pool is not None:
            pool = self._pool
            await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)
        if store is not None:
            store.close()

    async def create_session(self, session: Session) -> None:
        await self._run((await self._sync()).create_session, session)

    async def save_session(self, session: Session) -> None:
        await self._run((await self._sync()).save_session, session)

    async def find_session(self, session_id: str) -> Session | None:
        return await self._run((await self._sync()).find_session, session_id)

    async def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        return await self._run((await self._sync()).list_sessions, limit=limit)

    async def delete_session(self, session_id: str) -> bool:
        return await self._run((await self._sync()).delete_session, session_id)

    async def delete_expired(self, before: datetime) -> int:
        return await self._run((await self._sync()).delete_expired, before)

    async def find_by_metadata(self, name: str, value: str | int | bool) -> list[Session]:
        return await self._run((await self._sync()).find_by_metadata, name, value)

    async def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        expected_version: int,
        *,
        check_rules: bool = True,
    ) -> int:
        store = await self._sync()
        return await self._run(
            store.append_events, session_id, events, expected_version, check_rules=check_rules
        )

    async def append_event(self, event: SessionEvent, *, check_rules: bool = True) -> SessionEvent:
        store = await self._sync()
        return await self._run(store.append_event, event, check_rules=check_rules)

    async def events(self, session_id: str, flt: EventFilter | None = None) -> list[SessionEvent]:
        return await self._run((await self._sync()).events, session_id, flt)

    async def events_after(self, session_id: str, after: int, limit: int) -> list[SessionEvent]:
        return await self._run((await self._sync()).events_after, session_id, after, limit)

    async def version(self, session_id: str) -> int:
        return await self._run((await self._sync()).version, session_id)

    async def view(self, session_id: str) -> list[SessionEvent]:
        return await self._run((await self._sync()).view, session_id)

    async def view_lazy(self, session_id: str) -> LazyEvents:
        return await self._run((await self._sync()).view_lazy, session_id)

    async def record_tokens(self, session_id: str, counts: Mapping[str, TokenCount]) -> int:
        return await self._run((await self._sync()).record_tokens, session_id, counts)

    async def events_by_id(self, session_id: str, ids: Sequence[str]) -> list[SessionEvent]:
        return await self._run((await self._sync()).events_by_id, session_id, ids)

    async def search_history(self, session_id: str, query: HistoryQuery) -> list[HistoryHit]:
        return await self._run((await self._sync()).search_history, session_id, query)

    async def search_sessions(
        self,
        query: HistoryQuery,
        *,
        sessions: Sequence[str] | None = None,
        metadata: Mapping[str, str | int | bool] | None = None,
    ) -> list[HistoryHit]:
        store = await self._sync()
        return await self._run(store.search_sessions, query, sessions=sessions, metadata=metadata)

    async def read_attachment(
        self, session_id: str, ref: str, offset: int = 0, length: int | None = None
    ) -> bytes:
        store = await self._sync()
        return await self._run(store.read_attachment, session_id, ref, offset, length)
