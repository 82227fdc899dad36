"""Redis and Redis Cluster under racing processes and killed writers.

- 8 processes x 500 appends on one session, each reading the version and appending with it,
  retrying on VersionConflict: exactly 4,000 events, seqs 1..4000, no event twice, each
  process's events in its own order.
- The same with compactions racing the appends: each compaction lands whole or reports a
  conflict; no append is lost.
- A writer killed with SIGKILL in the middle of a large batch, 50 times: every batch is all or
  nothing and the store stays readable and writable.

Processes come from a forkserver (no fork of a threaded pytest). Every test uses its own key
prefix and deletes its keys afterwards.
"""

from __future__ import annotations

import multiprocessing
import random
import signal
import time
import uuid
from collections import Counter
from datetime import UTC, datetime

import pytest

from test_redis_store import purge
from turnlog import (
    CompactionBoundary,
    CompactionWindow,
    EventType,
    MemoryStore,
    Message,
    Session,
    SessionEvent,
    SessionService,
    TurnCountTrigger,
    VersionConflict,
    WindowCompactionStrategy,
)
from turnlog.stores.redis import RedisClusterStore, RedisStore

pytestmark = pytest.mark.slow

WRITERS = 8
APPENDS = 500
CRASHES = 50
CRASH_BATCH = 2_000
TIMEOUT = 120


def _context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["test_redis_stress"])  # children fork with everything imported
    return ctx


def _open(kind: str, url: str, prefix: str) -> RedisStore:
    return (RedisClusterStore if kind == "cluster" else RedisStore)(url, prefix=prefix)


# -- what the processes run ---------------------------------------------------------------------


def append_one_by_one(kind, url, prefix, sid, writer, n):
    """Append `n` events one at a time, each with the version just read; returns conflicts."""
    conflicts = 0
    with _open(kind, url, prefix) as store:
        for i in range(n):
            event = SessionEvent.for_message(
                sid, Message.user(f"w{writer}-{i}"), event_id=f"w{writer}-{i}"
            )
            while True:
                try:
                    store.append_events(sid, [event], store.version(sid))
                    break
                except VersionConflict:
                    conflicts += 1
    return conflicts


def append_turns(kind, url, prefix, sid, writer, n, ready):
    """Once `ready` is set, append `n` turns (user, assistant) with version checks, a few ms
    apart, as chats do; returns conflicts."""
    conflicts = 0
    rng = random.Random(writer)
    with _open(kind, url, prefix) as store:
        while not store.client.exists(ready):
            time.sleep(0.01)
        for i in range(n):
            time.sleep(rng.uniform(0, 0.03))
            q, a = Message.user(f"q {writer} {i}"), Message.assistant(f"a {writer} {i}")
            turn = [
                SessionEvent.for_message(sid, q, event_id=f"w{writer}-{i}-q"),
                SessionEvent.for_message(sid, a, event_id=f"w{writer}-{i}-a"),
            ]
            while True:
                try:
                    store.append_events(sid, turn, store.version(sid))
                    break
                except VersionConflict:
                    conflicts += 1
    return conflicts


def compact_until_done(kind, url, prefix, sid, ready, flag):
    """Compact (window of 20 events) until `flag` is set; returns landed boundary ids and counts.

    Sets `ready` once warm (the token counter loads on first use, which takes a while).
    """
    landed: list[str] = []
    outcomes: Counter[str] = Counter()
    with _open(kind, url, prefix) as store:
        service = SessionService(store)
        strategy = WindowCompactionStrategy(CompactionWindow.last_events(20))
        trigger = TurnCountTrigger(10)
        with SessionService(MemoryStore()) as scratch:  # warm up: load the token counter
            scratch.create("warm")
            for i in range(12):
                scratch.append_message("warm", Message.user(f"q{i}"))
                scratch.append_message("warm", Message.assistant(f"a{i}"))
            scratch.compact("warm", trigger, strategy)
        store.client.set(ready, 1)
        while not store.client.exists(flag):
            result = service.compact(sid, trigger, strategy)
            if result.conflict:
                outcomes["conflict"] += 1
            elif result.unchanged:
                outcomes["unchanged"] += 1
                time.sleep(0.002)
            else:
                assert result.boundary is not None
                landed.append(result.boundary.id)
                outcomes["landed"] += 1
    return landed, dict(outcomes)


def append_batch(kind, url, prefix, sid, round_, ready):
    """Append one large batch; `ready` is set just before the append starts."""
    store = _open(kind, url, prefix)
    version = store.version(sid)
    batch = [
        SessionEvent.for_message(
            sid, Message.user(f"crash {round_} {i} " + "x" * 100), event_id=f"c{round_}-{i}"
        )
        for i in range(CRASH_BATCH)
    ]
    ready.set()
    store.append_events(sid, batch, version)
    time.sleep(120)  # until killed: the kill always finds the writer alive


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster_url(redis_cluster_url):
    return redis_cluster_url


@pytest.fixture(params=["redis", "cluster"])
def target(request, redis_url):
    kind = request.param
    url = request.getfixturevalue("cluster_url") if kind == "cluster" else redis_url
    prefix = f"tlstress-{uuid.uuid4().hex[:12]}"
    store = _open(kind, url, prefix)
    try:
        yield kind, url, prefix, store
    finally:
        purge(store.client, prefix)
        store.close()


def _check_log(log: list[SessionEvent]) -> None:
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert len({e.id for e in log}) == len(log)


# -- tests ----------------------------------------------------------------------------------------


def test_racing_processes_append_every_event_exactly_once(target):
    kind, url, prefix, store = target
    store.create_session(Session("race", datetime.now(UTC)))
    args = [(kind, url, prefix, "race", w, APPENDS) for w in range(WRITERS)]
    with _context().Pool(WRITERS) as pool:
        conflicts = pool.starmap_async(append_one_by_one, args).get(TIMEOUT)
    log = store.events("race")
    assert len(log) == WRITERS * APPENDS
    _check_log(log)
    for w in range(WRITERS):
        mine = [e.id for e in log if e.id.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(APPENDS)]
    print(f"{kind}: {sum(conflicts)} version conflicts retried")


def test_compactions_racing_appends_land_whole_or_conflict(target):
    kind, url, prefix, store = target
    store.create_session(Session("mixed", datetime.now(UTC)))
    ready, flag = f"{prefix}:ready", f"{prefix}:done"
    appenders, turns = WRITERS - 1, 100
    with _context().Pool(WRITERS) as pool:
        compactor = pool.apply_async(compact_until_done, (kind, url, prefix, "mixed", ready, flag))
        args = [(kind, url, prefix, "mixed", w, turns, ready) for w in range(appenders)]
        pool.starmap_async(append_turns, args).get(TIMEOUT)
        store.client.set(flag, 1)
        landed, outcomes = compactor.get(TIMEOUT)
    log = store.events("mixed")
    _check_log(log)
    boundaries = [e.id for e in log if e.type == EventType.COMPACTION]
    assert boundaries == landed  # what reported landing is in the log, whole; nothing else is
    assert outcomes.get("landed", 0) + outcomes.get("conflict", 0) >= 1  # they did race
    messages = [e for e in log if e.is_message]
    assert len(messages) == appenders * turns * 2
    for w in range(appenders):
        mine = [e.id for e in messages if e.id.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}-{x}" for i in range(turns) for x in "qa"]
    view = store.view("mixed")
    assert view == CompactionBoundary.project(log)
    print(f"{kind}: compactions {outcomes}")


def test_a_writer_killed_mid_batch_leaves_all_or_nothing(target):
    kind, url, prefix, store = target
    store.create_session(Session("crash", datetime.now(UTC)))
    store.create_session(Session("calibrate", datetime.now(UTC)))
    sample = [
        SessionEvent.for_message("calibrate", Message.user("x" * 110)) for _ in range(CRASH_BATCH)
    ]
    started = time.perf_counter()
    store.append_events("calibrate", sample, 0)
    span = time.perf_counter() - started
    delay = span
    ctx = _context()
    rng = random.Random(7)
    landed = 0
    for round_ in range(CRASHES):
        before = store.version("crash")
        ready = ctx.Event()
        writer = ctx.Process(target=append_batch, args=(kind, url, prefix, "crash", round_, ready))
        writer.start()
        deadline = time.monotonic() + 30
        while not ready.wait(0.05):
            assert writer.is_alive() and time.monotonic() < deadline, "the writer died early"
        time.sleep(delay * rng.uniform(0.8, 1.2))
        writer.kill()  # SIGKILL; the writer never exits by itself
        writer.join(30)
        assert writer.exitcode == -signal.SIGKILL, f"round {round_}: exit code {writer.exitcode}"
        count = store.version("crash") - before
        assert count in (0, CRASH_BATCH), f"round {round_}: {count} of {CRASH_BATCH} landed"
        landed += count == CRASH_BATCH
        # A staircase around the moment a batch lands: kill sooner after a batch landed, later
        # after one did not, so the kills keep hitting appends in flight.
        delay = min(span * 5, max(0.001, delay * (0.7 if count else 1.4)))
        event = SessionEvent.for_message(
            "crash", Message.user("still here"), event_id=f"after-{round_}"
        )
        assert store.append_events("crash", [event], before + count) == before + count + 1
    assert 0 < landed < CRASHES, f"{landed} of {CRASHES} landed: the kills missed the writes"
    log = store.events("crash")
    _check_log(log)
    assert len(log) == landed * CRASH_BATCH + CRASHES
    for round_ in range(CRASHES):
        count = sum(1 for e in log if e.id.startswith(f"c{round_}-"))
        assert count in (0, CRASH_BATCH)
    print(f"{kind}: {landed} of {CRASHES} killed batches had landed whole, the rest not at all")
