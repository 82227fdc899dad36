"""PostgresStore under racing processes, killed writers and dropped connections.

Each test works in a fresh schema with a random name, dropped afterwards. The writer processes
come from a fork server (started once, with turnlog and psycopg already imported), so starting
one takes milliseconds; each process opens its own store.
"""

import contextlib
import multiprocessing as mp
import os
import queue
import random
import signal
import threading
import time
import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from turnlog import (
    CharCounter,
    CompactionBoundary,
    CompactionWindow,
    EventType,
    Message,
    Session,
    SessionEvent,
    SessionService,
    StoreError,
    VersionConflict,
    WindowCompactionStrategy,
)
from turnlog.stores.postgres import PostgresStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ctx():
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["turnlog", "turnlog.stores.postgres", "psycopg"])
    return context


@pytest.fixture
def pg_schema(postgres_dsn):
    name = f"tl_stress_{uuid.uuid4().hex[:12]}"
    PostgresStore(postgres_dsn, schema=name).close()
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _q(text, schema):
    return sql.SQL(text).format(s=sql.Identifier(schema))


def _open(dsn, schema):
    return PostgresStore(dsn, schema=schema, migrate=False, pool_min=1, pool_max=1)


def _join(procs, timeout=120):
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
        p.join()
    assert not alive, f"{len(alive)} processes did not finish in {timeout}s"
    assert [p.exitcode for p in procs] == [0] * len(procs)


# -- 8 processes x 500 appends ---------------------------------------------------------------------


def _appender(dsn, schema, sid, writer, count, pair, start, results):
    store = _open(dsn, schema)
    conflicts = 0
    pace = random.Random(writer)
    try:
        start.wait()
        for i in range(count):
            if pair:  # a chat's pace, so that compactions get a chance to land
                time.sleep(pace.uniform(0, 0.04))
            batch = [
                SessionEvent.for_message(
                    sid, Message.user(f"w{writer}-{i}"), event_id=f"w{writer}-{i}"
                )
            ]
            if pair:
                batch.append(
                    SessionEvent.for_message(
                        sid, Message.assistant(f"a{writer}-{i}"), event_id=f"w{writer}-{i}-a"
                    )
                )
            while True:
                version = store.version(sid)
                try:
                    store.append_events(sid, batch, version)
                    break
                except VersionConflict as exc:
                    assert exc.actual > exc.expected == version
                    conflicts += 1
        results.put(("appender", writer, conflicts))
    finally:
        store.close()


def _check_writers(log, writers, count, pair):
    mine = {w: [] for w in range(writers)}
    for event in log:
        if event.id.startswith("w") and not event.synthetic:
            writer, rest = event.id[1:].split("-", 1)
            mine[int(writer)].append(rest)
    for w in range(writers):
        expected = [
            f"{i}{suffix}" for i in range(count) for suffix in (("", "-a") if pair else ("",))
        ]
        assert mine[w] == expected, f"writer {w}'s events are missing, doubled or out of order"


def test_eight_processes_append_4000_events_without_loss_or_gaps(ctx, postgres_dsn, pg_schema):
    writers, count = 8, 500
    with _open(postgres_dsn, pg_schema) as store:
        store.create_session(Session("race", created_at=_now()))
    start, results = ctx.Barrier(writers), ctx.Queue()
    procs = [
        ctx.Process(
            target=_appender,
            args=(postgres_dsn, pg_schema, "race", w, count, False, start, results),
        )
        for w in range(writers)
    ]
    for p in procs:
        p.start()
    _join(procs)
    conflicts = [results.get(timeout=5)[2] for _ in procs]
    with _open(postgres_dsn, pg_schema) as store:
        log = store.events("race")
        assert store.version("race") == writers * count
    assert [e.seq for e in log] == list(range(1, writers * count + 1))
    assert len({e.id for e in log}) == writers * count
    _check_writers(log, writers, count, pair=False)
    assert sum(conflicts) > 0  # they really raced


# -- compactions racing appends --------------------------------------------------------------------


def _summarize(request):
    return [
        Message.user("what happened so far?"),
        Message.assistant(f"{len(request.covered)} events"),
    ]


def _compactor(dsn, schema, sid, start, stop, results):
    store = _open(dsn, schema)
    service = SessionService(store)
    strategy = WindowCompactionStrategy(
        CompactionWindow.last_events(20), summarizer=_summarize, token_counter=CharCounter()
    )
    landed, conflicts, unchanged = [], 0, 0
    try:
        start.wait()
        while not stop.is_set() or not landed:
            result = service.compact(sid, lambda request: len(request.view) > 30, strategy)
            if result.conflict:
                conflicts += 1
            elif result.unchanged:
                unchanged += 1
            else:
                assert result.boundary is not None
                landed.append((result.boundary.id, [e.id for e in result.summary_events]))
        results.put(("compactor", landed, conflicts, unchanged))
    finally:
        store.close()


def test_compactions_racing_appends_land_whole_or_conflict(ctx, postgres_dsn, pg_schema):
    writers, count = 6, 100
    with _open(postgres_dsn, pg_schema) as store:
        store.create_session(Session("race", created_at=_now()))
        store.append_events("race", [SessionEvent.for_message("race", Message.system("sys"))], 0)
    start, stop, results = ctx.Barrier(writers + 1), ctx.Event(), ctx.Queue()
    appenders = [
        ctx.Process(
            target=_appender,
            args=(postgres_dsn, pg_schema, "race", w, count, True, start, results),
        )
        for w in range(writers)
    ]
    compactor = ctx.Process(
        target=_compactor, args=(postgres_dsn, pg_schema, "race", start, stop, results)
    )
    for p in [*appenders, compactor]:
        p.start()
    _join(appenders)
    stop.set()
    _join([compactor])
    reports = [results.get(timeout=5) for _ in range(writers + 1)]
    (_, landed, conflicts, _unchanged) = next(r for r in reports if r[0] == "compactor")
    with _open(postgres_dsn, pg_schema) as store:
        log = store.events("race")
        view = store.view("race")
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert len({e.id for e in log}) == len(log)
    _check_writers(log, writers, count, pair=True)
    boundaries = [e for e in log if e.type == EventType.COMPACTION]
    assert [b.id for b in boundaries] == [b for b, _ in landed]
    print(f"compactions: {len(landed)} landed, {conflicts} lost the race, {_unchanged} unchanged")
    assert len(landed) > 1 and conflicts > 0, (len(landed), conflicts)
    by_position = {e.id: i for i, e in enumerate(log)}
    for boundary_id, summary_ids in landed:
        at = by_position[boundary_id]
        # Whole: the boundary and its summary turn are one contiguous batch.
        assert [e.id for e in log[at + 1 : at + 1 + len(summary_ids)]] == summary_ids
        assert all(e.synthetic for e in log[at + 1 : at + 1 + len(summary_ids)])
        CompactionBoundary.project(log[: at + 1 + len(summary_ids)])  # names only what exists
    assert view == CompactionBoundary.project(log)
    assert len(log) == 1 + writers * count * 2 + sum(1 + len(s) for _, s in landed)


# -- a writer killed in the middle of a big batch, 50 times ----------------------------------------

BATCH = 5000


def _batch_writer(dsn, schema, sid, round_, ready, go):
    message = Message.user(f"round {round_} " + "x" * 80)
    events = [
        SessionEvent.for_message(sid, message, event_id=f"r{round_}-{i}") for i in range(BATCH)
    ]
    store = _open(dsn, schema)
    ready.set()
    go.wait()
    with contextlib.suppress(Exception):  # an earlier round's zombie may win the version
        store.append_events(sid, events, store.version(sid))
    time.sleep(120)  # until killed


def _settle(admin, app):
    """Wait until the server has finished every backend of `app` (a killed client's last
    statement runs to its end on the server)."""
    deadline = time.monotonic() + 60
    while admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
    ).fetchone()[0]:
        assert time.monotonic() < deadline, "a killed writer's backend never went away"
        time.sleep(0.02)


def test_writers_killed_mid_batch_leave_whole_batches(ctx, postgres_dsn, pg_schema):
    app = f"tl-crash-{uuid.uuid4().hex[:8]}"
    dsn = make_conninfo(postgres_dsn, application_name=app)
    rng = random.Random(7)
    with _open(dsn, pg_schema) as store:
        store.create_session(Session("crash", created_at=_now()))
        store.create_session(Session("calibrate", created_at=_now()))
        sample = [
            SessionEvent.for_message("calibrate", Message.user("x" * 100)) for _ in range(BATCH)
        ]
        started = time.perf_counter()
        store.append_events("calibrate", sample, 0)
        span = time.perf_counter() - started
    versions: list[int] = []
    delay = span

    def writer(round_):
        ready, go = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=_batch_writer, args=(dsn, pg_schema, "crash", round_, ready, go))
        proc.start()
        return proc, ready, go

    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        following = writer(0)
        for round_ in range(50):
            proc, ready, go = following
            assert ready.wait(30)
            go.set()
            if round_ < 49:  # the next writer builds its batch meanwhile
                following = writer(round_ + 1)
            time.sleep(delay * rng.uniform(0.8, 1.2))
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(10)
            assert proc.exitcode == -signal.SIGKILL
            count, version = admin.execute(
                _q(
                    "SELECT count(*), coalesce(max(seq), 0) FROM {s}.events "
                    "WHERE session_id = 'crash'",
                    pg_schema,
                )
            ).fetchone()
            assert version % BATCH == 0 and count == version
            # A staircase around the moment a batch lands: kill sooner after a batch landed,
            # later after one did not, so the kills keep hitting appends in flight.
            landed_now = version > (versions[-1] if versions else 0)
            delay = min(span * 5, max(0.001, delay * (0.7 if landed_now else 1.4)))
            versions.append(version)
        _settle(admin, app)
        count, top, distinct = admin.execute(
            _q(
                "SELECT count(*), max(seq), count(DISTINCT id) FROM {s}.events "
                "WHERE session_id = 'crash'",
                pg_schema,
            )
        ).fetchone()
    with _open(postgres_dsn, pg_schema) as store:
        version = store.version("crash")
        assert version % BATCH == 0 and version >= versions[-1]
        assert count == distinct == version and (top or 0) == version
        landed = version // BATCH
        assert 0 < landed < 50, f"{landed} of 50 batches landed: the kills missed the writes"
        # Still writable, and readable: one more whole batch, then the whole log.
        more = [SessionEvent.for_message("crash", Message.user(f"after {i}")) for i in range(BATCH)]
        assert store.append_events("crash", more, version) == version + BATCH
        log = store.events("crash")
        assert [e.seq for e in log] == list(range(1, version + BATCH + 1))
        # Whole batches: each landed round's 5,000 events, in order, one contiguous run.
        for start in range(0, version, BATCH):
            round_ = log[start].id.split("-")[0]
            assert [e.id for e in log[start : start + BATCH]] == [
                f"{round_}-{i}" for i in range(BATCH)
            ]


# -- the server connection dropped mid-write -------------------------------------------------------


def test_a_connection_killed_mid_write_is_a_store_error_and_a_retry_doubles_nothing(
    postgres_dsn, pg_schema
):
    app = f"tl-victim-{uuid.uuid4().hex[:8]}"
    size = 20_000
    killed = queue.Queue()

    def kill_when_active(stop):
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            while not stop.is_set():
                row = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                    "AND state = 'active' AND position('append_events' in query) > 0",
                    (app,),
                ).fetchone()
                if row:
                    admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                    killed.put(row[0])
                    return
                time.sleep(0.002)

    with PostgresStore(
        make_conninfo(postgres_dsn, application_name=app), schema=pg_schema, pool_max=2
    ) as store:
        store.create_session(Session("s", created_at=_now()))
        events = [
            SessionEvent.for_message("s", Message.user(f"event {i} " + "y" * 200), event_id=f"e{i}")
            for i in range(size)
        ]
        stop = threading.Event()
        killer = threading.Thread(target=kill_when_active, args=(stop,))
        killer.start()
        try:
            with pytest.raises(StoreError, match="connection lost") as info:
                store.append_events("s", events, 0)
        finally:
            stop.set()
            killer.join()
        assert killed.qsize() == 1
        assert "retrying it with the same event ids is safe" in str(info.value)
        assert store.version("s") == 0  # the transaction died with its connection
        assert store.append_events("s", events, 0) == size
        assert store.append_events("s", events, 0) == size  # and again: a no-op
        assert store.append_events("s", events[:10], 17) == size
        log = store.events("s")
    assert [e.seq for e in log] == list(range(1, size + 1))
    assert [e.id for e in log] == [e.id for e in events]


def test_an_idle_pooled_connection_killed_is_a_store_error_once(postgres_dsn, pg_schema):
    app = f"tl-idle-{uuid.uuid4().hex[:8]}"
    with PostgresStore(
        make_conninfo(postgres_dsn, application_name=app), schema=pg_schema, pool_min=1, pool_max=1
    ) as store:
        store.create_session(Session("s", created_at=_now()))
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (app,),
            )
        with pytest.raises(StoreError, match="connection lost"):
            store.version("s")
        assert store.version("s") == 0  # the pool replaced the broken connection


def _now():
    from datetime import UTC, datetime

    return datetime.now(UTC)
