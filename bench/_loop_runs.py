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
    net: list[float] = field(default_factory=list)
    """The same, less the time the ticker's thread spent runnable but waiting for a CPU (the OS
    run queue, from /proc schedstat; all of the lateness where that is not available)."""

    cpu: float = float("nan")
    """CPU seconds the whole process used (every thread) while the workload ran."""

    @property
    def cpu_share(self) -> float:
        """CPU seconds per wall second: 1.0 is one core busy all along."""
        return self.cpu / self.seconds

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds

    @staticmethod
    def _q(values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def stall_p50(self) -> float:
        return self._q(self.stalls, 0.50)

    @property
    def stall_p99(self) -> float:
        return self._q(self.stalls, 0.99)

    @property
    def net_p99(self) -> float:
        return self._q(self.net, 0.99)

    @property
    def cpu_wait_share(self) -> float:
        """Of the lateness of ticks late by more than 5 ms, the share spent waiting for a CPU."""
        late = [(s, s - n) for s, n in zip(self.stalls, self.net, strict=True) if s > 0.005]
        total = sum(s for s, _ in late)
        return sum(w for _, w in late) / total if total else float("nan")

    @property
    def stall_max(self) -> float:
        return max(self.stalls, default=float("nan"))

    @staticmethod
    def median(runs: list[Run], attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs)


def _counts(sessions: int, messages: list[Message]) -> tuple[int, int]:
    return sessions * len(messages), sessions * (len(messages) + 2)


# -- async ----------------------------------------------------------------------------------


Tick = tuple[float, float, float]
"""When a tick began and woke (perf_counter seconds), and how long its thread waited for a CPU."""


def run_queue_clock() -> Callable[[], float]:
    """A clock of the seconds the calling thread has spent runnable but not running (Linux
    schedstat), or one that stays at 0 where the kernel does not say."""
    path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
    try:
        with open(path) as f:
            f.read()
    except OSError:
        return lambda: 0.0

    def waited() -> float:
        with open(path) as f:
            return int(f.read().split()[1]) / 1e9

    return waited


def window(ticks: list[Tick], start: float, end: float) -> tuple[list[float], list[float]]:
    """How late each tick woke, and that less its CPU wait, for the ticks that overlap the
    window [start, end].

    A tick that began before `end` and woke after `start` counts, even when it woke only after
    the workload ended: a stall that lasted to the end (a store that never yields) is kept.
    """
    kept = [
        (woke - began - TICK, wait) for began, woke, wait in ticks if began < end and woke > start
    ]
    return [late for late, _ in kept], [max(0.0, late - wait) for late, wait in kept]


class LoopTicker:
    """A task that sleeps `TICK` in a loop and records every tick."""

    def __init__(self) -> None:
        self.ticks: list[Tick] = []

    async def run(self) -> None:
        clock, waited = time.perf_counter, run_queue_clock()
        while True:
            began, wait = clock(), waited()
            await asyncio.sleep(TICK)
            self.ticks.append((began, clock(), waited() - wait))


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
        cpu, start = time.process_time(), time.perf_counter()
        await asyncio.gather(
            *(session_async(service, f"{tag}-{i}", messages) for i in range(sessions))
        )
        end, cpu = time.perf_counter(), time.process_time() - cpu
        await asyncio.sleep(0.01)  # let the tick that spans the end record itself
        ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticking
    finally:
        await service.close()
        if cleanup is not None:
            await cleanup()
    appended, ops = _counts(sessions, messages)
    return Run(end - start, appended, ops, *window(ticker.ticks, start, end), cpu=cpu)


async def _run_idle(seconds: float) -> Run:
    ticker = LoopTicker()
    ticking = asyncio.create_task(ticker.run())
    await asyncio.sleep(0.02)
    cpu, start = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    end, cpu = time.perf_counter(), time.process_time() - cpu
    ticking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ticking
    return Run(end - start, 0, 0, *window(ticker.ticks, start, end), cpu=cpu)


def run_idle(seconds: float) -> Run:
    """The ticker alone on a fresh loop for `seconds`: the stalls the machine itself causes
    (other processes, the OS), the floor under every async row."""
    return asyncio.run(_run_idle(seconds))


def run_async(make: Callable[[], Made], tag: str, sessions: int, messages: list[Message]) -> Run:
    """`sessions` tasks on a fresh event loop, over a fresh store from `make()`."""
    return asyncio.run(_run_async(make, tag, sessions, messages))


# -- sync -----------------------------------------------------------------------------------


class ThreadTicker:
    """A thread that sleeps `TICK` in a loop and records every tick."""

    def __init__(self) -> None:
        self.ticks: list[Tick] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ticker", daemon=True)

    def _run(self) -> None:
        clock, waited = time.perf_counter, run_queue_clock()
        while not self._stop.is_set():
            began, wait = clock(), waited()
            time.sleep(TICK)
            self.ticks.append((began, clock(), waited() - wait))

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
                cpu, start = time.process_time(), time.perf_counter()
                futures = [
                    pool.submit(session_sync, service, f"{tag}-{i}", messages)
                    for i in range(sessions)
                ]
                for future in futures:
                    future.result()
                end, cpu = time.perf_counter(), time.process_time() - cpu
    finally:
        service.close()
        if cleanup is not None:
            cleanup()
    appended, ops = _counts(sessions, messages)
    return Run(end - start, appended, ops, *window(ticker.ticks, start, end), cpu=cpu)
