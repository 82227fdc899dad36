"""What only the SQLite store does: files, processes, damage, and reading the view alone."""

import multiprocessing as mp
import sqlite3
import threading
import time

import pytest

from turnlog import (
    CompactionWindow,
    CorruptData,
    Message,
    SessionEvent,
    SessionService,
    SqliteStore,
    StoreError,
    VersionConflict,
    WindowCompactionStrategy,
)
from turnlog.stores.sqlite import SCHEMA_VERSION


def _race(path, sid, expected, barrier, results, n):
    store = SqliteStore(path)
    event = SessionEvent.for_message(sid, Message.user(f"from process {n}"), event_id=f"p{n}")
    barrier.wait()
    try:
        store.append_events(sid, [event], expected)
        results.put("won")
    except VersionConflict as exc:
        results.put(f"conflict {exc.expected}->{exc.actual}")
    finally:
        store.close()


@pytest.mark.slow
def test_two_processes_with_one_expected_version_have_one_winner(tmp_path):
    path = tmp_path / "race.db"
    with SqliteStore(path) as store:
        service = SessionService(store)
        service.create("s")
        service.append_message("s", Message.user("hello"))
    ctx = mp.get_context("spawn")
    for round_ in range(3):
        with SqliteStore(path) as store:
            version = store.version("s")
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [
            ctx.Process(target=_race, args=(path, "s", version, barrier, results, f"{round_}{n}"))
            for n in range(2)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        outcomes = sorted(results.get(timeout=5) for _ in procs)
        assert outcomes == [f"conflict {version}->{version + 1}", "won"]
    with SqliteStore(path) as store:
        log = store.events("s")
    assert [e.seq for e in log] == [1, 2, 3, 4]
    assert len({e.id for e in log}) == 4


def test_a_file_that_is_not_a_database_is_reported(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    with pytest.raises(CorruptData, match="not a readable SQLite database"):
        SqliteStore(path)
    assert path.read_bytes().startswith(b"these are my notes")


def test_a_database_of_something_else_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    with pytest.raises(CorruptData, match="invoices"):
        SqliteStore(path)
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert tables == {"invoices"}


def test_a_database_from_a_newer_turnlog_is_refused(tmp_path):
    path = tmp_path / "new.db"
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE turnlog_schema SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer turnlog"):
        SqliteStore(path)


def test_reopening_keeps_everything(tmp_path):
    path = tmp_path / "t.db"
    with SqliteStore(path) as store:
        service = SessionService(store)
        service.create("s", metadata={"owner": "ann"})
        for i in range(3):
            service.append_message("s", Message.user(f"u{i}"))
    with SqliteStore(path) as store:
        assert store.version("s") == 3
        assert store.find_by_metadata("owner", "ann")[0].id == "s"


def _damage(path, sid, seq):
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE turnlog_events SET body = ? WHERE session_id = ? AND seq = ?",
        (b"{not json", sid, seq),
    )
    conn.commit()
    conn.close()


def test_a_damaged_row_names_its_session_and_seq_and_spares_others(tmp_path):
    path = tmp_path / "t.db"
    with SqliteStore(path) as store:
        service = SessionService(store)
        for sid in ("a", "b"):
            service.create(sid)
            for i in range(3):
                service.append_message(sid, Message.user(f"{sid}{i}"))
    _damage(path, "a", 2)
    with SqliteStore(path) as store:
        with pytest.raises(CorruptData, match=r"seq 2 .* session 'a'"):
            store.events("a")
        assert [e.message.text for e in store.events("b") if e.message] == ["b0", "b1", "b2"]
        assert store.version("a") == 3


def test_reading_the_view_does_not_read_the_covered_history(tmp_path):
    path = tmp_path / "t.db"
    with SqliteStore(path) as store:
        service = SessionService(store)
        service.create("s")
        for i in range(10):
            service.append_message("s", Message.user(f"u{i}"))
            service.append_message("s", Message.assistant(f"a{i}"))
        result = service.compact(
            "s", lambda r: True, WindowCompactionStrategy(CompactionWindow.last_turns(2))
        )
        assert not result.unchanged
        view_before = service.view("s")
    _damage(path, "s", 1)  # a covered event
    with SqliteStore(path) as store:
        assert store.view("s") == view_before
        with pytest.raises(CorruptData):
            store.events("s")


def _held_lock(path):
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    return blocker


def test_busy_writers_queue_for_the_lock(tmp_path):
    path = tmp_path / "t.db"
    store = SqliteStore(path, busy_timeout=10)
    SessionService(store).create("s")
    blocker = _held_lock(path)
    release = threading.Timer(0.3, lambda: blocker.execute("ROLLBACK"))
    release.start()
    started = time.monotonic()
    assert store.append_event(SessionEvent.for_message("s", Message.user("x"))).seq == 1
    assert time.monotonic() - started >= 0.25
    release.join()
    blocker.close()
    store.close()


def test_a_lock_held_past_the_busy_timeout_is_a_clear_error(tmp_path):
    path = tmp_path / "t.db"
    store = SqliteStore(path, busy_timeout=0.2)
    SessionService(store).create("s")
    blocker = _held_lock(path)
    with pytest.raises(StoreError, match="locked"):
        store.append_event(SessionEvent.for_message("s", Message.user("x")))
    blocker.execute("ROLLBACK")
    blocker.close()
    assert store.version("s") == 0
    store.close()


def test_closed_store_refuses_work(tmp_path):
    store = SqliteStore(tmp_path / "t.db")
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.version("s")
