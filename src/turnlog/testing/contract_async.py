"""`AsyncStoreContract`: every case of `StoreContract`, run on an async store.

Subclass it and say how to build the store, as a coroutine::

    class TestMyAsyncStore(AsyncStoreContract):
        async def make_async_store(self, tmp_path):
            return MyAsyncStore(...)

The cases are written once: each test runs an event loop on a thread of its own, builds the
store there, and drives it through a blocking bridge, so a call of the test is a coroutine
awaited on that loop. The race cases call the bridge from many threads at once, which makes
their calls concurrent tasks on the one loop: the interleavings an asyncio application has.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from turnlog.events import Session, SessionEvent, TokenCount
from turnlog.history import HistoryHit, HistoryQuery
from turnlog.lazy import LazyEvents
from turnlog.stores.base import EventFilter
from turnlog.stores.protocol import SessionStore
from turnlog.stores.protocol_async import AsyncSessionStore
from turnlog.testing.contract import StoreContract
from turnlog.testing.contract_asyncio import AsyncioContract

__all__ = ["AsyncStoreContract", "LoopThread", "blocking"]

T = TypeVar("T")


class LoopThread:
    """An event loop running on a daemon thread; `run(coro)` awaits a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on the loop and return its result (or raise its exception)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        """Stop the loop, check that no task was left running, and close it."""

        async def leftovers() -> list[asyncio.Task[Any]]:
            me = asyncio.current_task()
            return [t for t in asyncio.all_tasks() if t is not me and not t.done()]

        try:
            left = self.run(leftovers())
        finally:  # the loop is closed whatever happened, so no unclosed loop outlives a test
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
            self.loop.close()
        assert not left, f"tasks left running on the store's event loop: {left}"


class _Blocking:
    """An async store behind the blocking `SessionStore` protocol, for the contract cases."""

    def __init__(self, store: AsyncSessionStore, loop: LoopThread) -> None:
        self.async_store = store
        self._loop = loop

    def create_session(self, session: Session) -> None:
        self._loop.run(self.async_store.create_session(session))

    def save_session(self, session: Session) -> None:
        self._loop.run(self.async_store.save_session(session))

    def find_session(self, session_id: str) -> Session | None:
        return self._loop.run(self.async_store.find_session(session_id))

    def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        return self._loop.run(self.async_store.list_sessions(limit=limit))

    def delete_session(self, session_id: str) -> bool:
        return self._loop.run(self.async_store.delete_session(session_id))

    def delete_expired(self, before: datetime) -> int:
        return self._loop.run(self.async_store.delete_expired(before))

    def find_by_metadata(self, name: str, value: str | int | bool) -> list[Session]:
        return self._loop.run(self.async_store.find_by_metadata(name, value))

    def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        expected_version: int,
        *,
        check_rules: bool = True,
    ) -> int:
        return self._loop.run(
            self.async_store.append_events(
                session_id, events, expected_version, check_rules=check_rules
            )
        )

    def append_event(self, event: SessionEvent, *, check_rules: bool = True) -> SessionEvent:
        return self._loop.run(self.async_store.append_event(event, check_rules=check_rules))

    def events(self, session_id: str, flt: EventFilter | None = None) -> list[SessionEvent]:
        return self._loop.run(self.async_store.events(session_id, flt))

    def events_after(self, session_id: str, after: int, limit: int) -> list[SessionEvent]:
        return self._loop.run(self.async_store.events_after(session_id, after, limit))

    def version(self, session_id: str) -> int:
        return self._loop.run(self.async_store.version(session_id))

    def view(self, session_id: str) -> list[SessionEvent]:
        return self._loop.run(self.async_store.view(session_id))

    def view_lazy(self, session_id: str) -> LazyEvents:
        return self._loop.run(self.async_store.view_lazy(session_id))

    def record_tokens(self, session_id: str, counts: Mapping[str, TokenCount]) -> int:
        return self._loop.run(self.async_store.record_tokens(session_id, counts))

    def read_attachment(
        self, session_id: str, ref: str, offset: int = 0, length: int | None = None
    ) -> bytes:
        return self._loop.run(self.async_store.read_attachment(session_id, ref, offset, length))

    def events_by_id(self, session_id: str, ids: Sequence[str]) -> list[SessionEvent]:
        return self._loop.run(self.async_store.events_by_id(session_id, ids))

    def search_history(self, session_id: str, query: HistoryQuery) -> list[HistoryHit]:
        return self._loop.run(self.async_store.search_history(session_id, query))

    def search_sessions(
        self,
        query: HistoryQuery,
        *,
        sessions: Sequence[str] | None = None,
        metadata: Mapping[str, str | int | bool] | None = None,
    ) -> list[HistoryHit]:
        return self._loop.run(
            self.async_store.search_sessions(query, sessions=sessions, metadata=metadata)
        )

    def close(self) -> None:
        self._loop.run(self.async_store.close())


def blocking(store: AsyncSessionStore, loop: LoopThread) -> SessionStore:
    """`store` as a blocking `SessionStore` whose every call is awaited on `loop`."""
    return _Blocking(store, loop)


class AsyncStoreContract(AsyncioContract, StoreContract):
    """The contract suite for an async store. Subclasses implement `make_async_store`."""

    _loop: LoopThread | None = None

    def _async_store(self, store: SessionStore) -> AsyncSessionStore:
        assert isinstance(store, _Blocking)
        return store.async_store

    def _run_on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._running_loop().run(coro)

    async def make_async_store(self, tmp_path: Path) -> AsyncSessionStore:
        """A new, empty async store for one test (built on the test's event loop)."""
        raise NotImplementedError

    async def open_again_async(self, store: AsyncSessionStore, tmp_path: Path) -> AsyncSessionStore:
        """A second handle on the same data; the same object by default."""
        return store

    def _running_loop(self) -> LoopThread:
        if self._loop is None:
            self._loop = LoopThread()
        return self._loop

    def make_store(self, tmp_path: Path) -> SessionStore:
        loop = self._running_loop()
        return blocking(loop.run(self.make_async_store(tmp_path)), loop)

    def open_again(self, store: SessionStore, tmp_path: Path) -> SessionStore:
        assert isinstance(store, _Blocking)
        loop = self._running_loop()
        other = loop.run(self.open_again_async(store.async_store, tmp_path))
        return store if other is store.async_store else blocking(other, loop)

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SessionStore]:
        store = self.make_store(tmp_path)
        try:
            yield store
        finally:
            try:
                store.close()
            finally:
                loop, self._loop = self._loop, None
                if loop is not None:
                    loop.stop()
