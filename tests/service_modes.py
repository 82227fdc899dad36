"""Run the service tests in both modes: `SessionService`, and `AsyncSessionService` driven
through a blocking bridge (each call awaited on an event loop of the test's own)."""

import inspect
import threading

from turnlog import MemoryStore, SessionService, SqliteStore
from turnlog.service_async import AsyncSessionService
from turnlog.stores.memory_async import AsyncMemoryStore
from turnlog.stores.sqlite_async import AsyncSqliteStore
from turnlog.testing.contract_async import LoopThread

MODES = ["memory", "sqlite", "async-memory", "async-sqlite"]


class BlockingService:
    """An `AsyncSessionService` with blocking methods: each coroutine is awaited on `loop`."""

    def __init__(self, service, loop):
        self.async_service = service
        self._loop = loop

    def __getattr__(self, name):
        attr = getattr(self.async_service, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args, **kwargs):
            if threading.current_thread() is self._loop.thread:
                raise RuntimeError(f"{name}() called from the service's own event loop")
            return self._loop.run(attr(*args, **kwargs))

        return call


def open_service(mode, tmp_path, clock):
    """(service, close) for `mode`, one of MODES."""
    if mode == "memory":
        service = SessionService(MemoryStore(clock=clock), clock=clock)
        return service, service.close
    if mode == "sqlite":
        service = SessionService(SqliteStore(tmp_path / "t.db", clock=clock), clock=clock)
        return service, service.close
    loop = LoopThread()
    if mode == "async-memory":
        store = AsyncMemoryStore(clock=clock)
    else:
        store = AsyncSqliteStore(tmp_path / "t.db", clock=clock)
    service = BlockingService(AsyncSessionService(store, clock=clock), loop)

    def close():
        try:
            service.close()
        finally:
            loop.stop()

    return service, close
