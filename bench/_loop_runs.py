"""One run of `async_loop.py`'s workload: async tasks on one loop, or sync calls on a pool.

Not a benchmark itself: `bench/async_loop.py` times these and prints the tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from turnlog import Message, SessionService
from turnlog.service_async import AsyncSessionService

Made = tuple[Any, Callable[[], Any] | None]
"""What a contender's `make()` returns: a fresh store, and what to call (await, for an async
store) after the store is closed, for a client the store does not own; or None."""

TICK = 0.001  # the ticker sleeps this long, then records how much later it woke
WARM = 64  # concurrent calls that open an async store's threads or connections before timing


@dataclass
class Run:
    """What one run of the workload measured."""

    seconds: float
    messages: int
    ops: int
    stalls: list[float] = field(default_factory=list)
    """The ticker's lateness per tick while the workload ran, seconds."""

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds

    def _q(self, q: float) -> float:
        if not self.stalls:
            return float("nan")
        ordered = sorted(self.stalls)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def stall_p50(self) -> float:
        return self._q(0.50)

    @property
    def stall_p99(self) -> float:
        return self._q(0.99)

    @property
    def stall_max(self) -> float:
        return max(self.stalls, default=float("nan"))

    @staticmethod
    def median(runs: list[Run], attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs)


def _counts(sessions: int, messages: list[Message]) -> tuple[int, int]:
    return sessions * len(messages), sessions * (len(messages) + 2)


# -- async ----------------------------------------------------------------------------------


def lateness(ticks: list[tuple[float, float]], start: float, end: float) -> list[float]:
    """How late each tick woke, for the ticks that overlap the window [start, end].

    A tick that began before `end` and woke after `start` counts, even when it woke only after
    the workload ended: a stall that lasted to the end (a store that never yields) is kept.
    """
    return [woke - began - TICK for began, woke in ticks if began < end and woke > start]


class LoopTicker:
    """A task that sleeps `TICK` in a loop and records (began, woke) for every tick."""

    def __init__(self) -> None:
        self.ticks: list[tuple[float, float]] = []

    async def run(self) -> None:
        clock = time.perf_counter
        while True:
            began = clock()
            await asyncio.sleep(TICK)
            self.ticks.append((began, clock()))


async def session_async(service: AsyncSessionService, sid: str, messages: list[Message]) -> None:
    """One session's life: create, append every message, read the view back."""
    await service.create(sid)
    for message in messages:
        await service.append_message(sid, message)
    view = await service.view_messages(sid)
    assert len(view) == len(messages), (sid, len(view))


async def _run_async(
    make: Callable[[], Made], tag: str, sessions: int, messages: list[Message]
) -> Run:
    store, cleanup = make()
    service = AsyncSessionService(store)
    try:
        await store.open()
        await asyncio.gather(*(service.find(f"{tag}-warm-{i}") for i in range(WARM)))
        gc.collect()
        ticker = LoopTicker()
        ticking = asyncio.create_task(ticker.run())
        await asyncio.sleep(0.02)
        start = time.perf_counter()
        await asyncio.gather(
            *(session_async(service, f"{tag}-{i}", messages) for i in range(sessions))
        )
        end = time.perf_counter()
        await asyncio.sleep(0.01)  # let the tick that spans the end record itself
        ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticking
    finally:
        await service.close()
        if cleanup is not None:
            await cleanup()
    appended, ops = _counts(sessions, messages)
    return Run(end - start, appended, ops, lateness(ticker.ticks, start, end))


async def _run_idle(seconds: float) -> Run:
    ticker = LoopTicker()
    ticking = asyncio.create_task(ticker.run())
    await asyncio.sleep(0.02)
    start = time.perf_counter()
    await asyncio.sleep(seconds)
    end = time.perf_counter()
    ticking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ticking
    return Run(end - start, 0, 0, lateness(ticker.ticks, start, end))


def run_idle(seconds: float) -> Run:
    """The ticker alone on a fresh loop for `seconds`: the stalls the machine itself causes
    (other processes, the OS), the floor under every async row."""
    return asyncio.run(_run_idle(seconds))


def run_async(make: Callable[[], Made], tag: str, sessions: int, messages: list[Message]) -> Run:
    """`sessions` tasks on a fresh event loop, over a fresh store from `make()`."""
    return asyncio.run(_run_async(make, tag, sessions, messages))


# -- sync -----------------------------------------------------------------------------------


class ThreadTicker:
    """A thread that sleeps `TICK` in a loop and records (began, woke) for every tick."""

    def __init__(self) -> None:
        self.ticks: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ticker", daemon=True)

    def _run(self) -> None:
        clock = time.perf_counter
        while not self._stop.is_set():
            began = clock()
            time.sleep(TICK)
            self.ticks.append((began, clock()))

    def __enter__(self) -> ThreadTicker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def session_sync(service: SessionService, sid: str, messages: list[Message]) -> None:
    """One session's life, blocking: create, append every message, read the view back."""
    service.create(sid)
    for message in messages:
        service.append_message(sid, message)
    view = service.view_messages(sid)
    assert len(view) == len(messages), (sid, len(view))


def run_sync(
    make: Callable[[], Made], tag: str, sessions: int, messages: list[Message], workers: int
) -> Run:
    """The sessions on a pool of `workers` threads (all started, each having called the store
    once, before the clock starts), over a fresh sync store from `make()`."""
    store, cleanup = make()
    service = SessionService(store)
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="bench") as pool:
            ready = threading.Barrier(workers)

            def warm(i: int) -> None:
                service.find(f"{tag}-warm-{i}")
                ready.wait(timeout=120)

            list(pool.map(warm, range(workers)))
            gc.collect()
            with ThreadTicker() as ticker:
                start = time.perf_counter()
                futures = [
                    pool.submit(session_sync, service, f"{tag}-{i}", messages)
                    for i in range(sessions)
                ]
                for future in futures:
                    future.result()
                end = time.perf_counter()
    finally:
        service.close()
        if cleanup is not None:
            cleanup()
    appended, ops = _counts(sessions, messages)
    return Run(end - start, appended, ops, lateness(ticker.ticks, start, end))
