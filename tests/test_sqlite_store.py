"""What only the SQLite store does: files, processes, damage, and reading the view alone."""

import multiprocessing as mp
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from turnlog import (
    CompactionWindow,
    CorruptData,
    InvalidInput,
    Message,
    Session,
    SessionEvent,
    SessionNotFound,
    SessionService,
    SqliteStore,
    StoreError,
    ToolCall,
    ToolResult,
    VersionConflict,
    WindowCompactionStrategy,
)
from turnlog.stores.sqlite import SCHEMA_VERSION

T0 = datetime(2026, 1, 1, tzinfo=UTC)


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


def _fill_to_the_limit(store, sid, text):
    """Append single messages and batches until SQLite reports the database full."""
    errors = []
    for size in (1, 5):  # the one-event fast path, then the batch path
        for _ in range(10_000):
            version = store.version(sid)
            batch = [SessionEvent.for_message(sid, Message.user(text)) for _ in range(size)]
            try:
                store.append_events(sid, batch, version)
            except Exception as exc:
                errors.append(exc)
                assert store.version(sid) == version  # nothing of the failed write landed
                break
    return errors


@pytest.fixture
def small_disk(tmp_path):
    """A directory on a real 1 MB tmpfs (as root), else None: mounting needs privileges."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        yield None
        return
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        yield None
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_is_a_store_error_and_keeps_the_data(tmp_path, small_disk):
    # On a real full tmpfs the failing step is often the COMMIT (SQLite has already ended the
    # transaction); without the privilege to mount one, max_page_count makes SQLite answer
    # SQLITE_FULL on the insert instead. Both must be a StoreError with the data intact.
    path = (small_disk or tmp_path) / "t.db"
    store = SqliteStore(path)
    SessionService(store).create("s")
    if small_disk is None:
        store._conn().execute("PRAGMA max_page_count = 40")
    errors = _fill_to_the_limit(store, "s", "x" * 3000)
    assert errors and all(isinstance(e, StoreError) for e in errors), errors
    assert all("full" in str(e) and "free disk space" in str(e) for e in errors)
    version = store.version("s")
    assert version > 0 and len(store.events("s")) == version
    store.close()
    with SqliteStore(path) as again:
        assert again.version("s") == version


def test_a_full_database_is_a_store_error_and_keeps_the_data(tmp_path):
    # max_page_count makes SQLite answer SQLITE_FULL exactly as a full disk does (a real full
    # tmpfs takes the same path: see the report of issue 7)
    store = SqliteStore(tmp_path / "t.db")
    SessionService(store).create("s")
    store._conn().execute("PRAGMA max_page_count = 40")
    errors = _fill_to_the_limit(store, "s", "x" * 3000)
    assert len(errors) == 2
    for exc in errors:
        assert isinstance(exc, StoreError), repr(exc)
        assert "full" in str(exc) and "free disk space" in str(exc)
    with pytest.raises(StoreError, match="full"):
        store.create_session(Session(id="t", created_at=T0, metadata={"k": "v" * 200_000}))
    version = store.version("s")
    assert version > 0 and len(store.events("s")) == version
    store._conn().execute("PRAGMA max_page_count = 100000")
    SessionService(store).append_message("s", Message.user("room again"))
    assert store.version("s") == version + 1


@pytest.mark.parametrize("one_event", [True, False], ids=["fast-path", "general-path"])
@pytest.mark.parametrize("stagger", [0.0, 0.25], ids=["together", "staggered"])
def test_threads_waiting_for_the_lock_give_up_within_the_busy_timeout(tmp_path, one_event, stagger):
    # Issue 7 item 5: the wait for the in-process lock counts against busy_timeout. Before, the
    # threads queued on that lock and then each waited the whole busy_timeout in SQLite: with
    # four threads they gave up after 1, 2, 3 and 4 seconds. Started together, the later ones
    # give up waiting for the lock; staggered, each gets the lock with part of its time left
    # and spends only that part in SQLite's busy handler.
    path = tmp_path / "t.db"
    timeout = 1.0
    store = SqliteStore(path, busy_timeout=timeout)
    SessionService(store).create("s")
    blocker = _held_lock(path)  # another connection holds the write lock throughout
    go = threading.Barrier(4)
    outcomes = {}

    def write(n):
        event = SessionEvent.for_message("s", Message.user(f"t{n}"), event_id=f"t{n}")
        go.wait()
        time.sleep(n * stagger)
        started = time.monotonic()
        try:
            if one_event:
                store.append_events("s", [event], 0)
            else:
                store.append_event(event)
        except StoreError as exc:
            outcomes[n] = (time.monotonic() - started, str(exc))
        else:
            outcomes[n] = (time.monotonic() - started, "written")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    blocker.execute("ROLLBACK")
    blocker.close()
    assert sorted(outcomes) == [0, 1, 2, 3]
    for waited, error in outcomes.values():
        assert "stayed locked by another writer past the busy timeout" in error
        assert timeout - 0.1 <= waited <= timeout + 0.4, sorted(outcomes.values())
    assert store.version("s") == 0
    store.close()


def test_a_long_write_of_another_thread_counts_against_the_busy_timeout(tmp_path):
    # A thread of the same store that keeps the write lock (a long batch, say) makes the others
    # give up after busy_timeout, as a writer in another process would.
    path = tmp_path / "t.db"
    store = SqliteStore(path, busy_timeout=0.5)
    SessionService(store).create("s")
    holding, done = threading.Event(), threading.Event()

    def long_write():
        with store._write_lock:  # what a long write in this thread holds
            holding.set()
            done.wait(1.5)

    holder = threading.Thread(target=long_write)
    holder.start()
    holding.wait()
    started = time.monotonic()
    with pytest.raises(StoreError, match="past the busy timeout"):
        store.append_events("s", [SessionEvent.for_message("s", Message.user("x"))], 0)
    assert 0.4 <= time.monotonic() - started <= 0.9
    done.set()
    holder.join()
    assert store.append_events("s", [SessionEvent.for_message("s", Message.user("y"))], 0) == 1
    store.close()


def test_a_writer_that_waited_for_another_thread_still_gets_the_lock_when_it_frees(tmp_path):
    # The remaining budget, not a fresh one and not none: the lock frees after 0.4 s, well
    # within the 2 s budget of every writer, so all four write.
    path = tmp_path / "t.db"
    store = SqliteStore(path, busy_timeout=2.0)
    SessionService(store).create("s")
    blocker = _held_lock(path)
    release = threading.Timer(0.4, lambda: blocker.execute("ROLLBACK"))
    errors = []

    def write(n):
        try:
            store.append_event(SessionEvent.for_message("s", Message.user(f"t{n}")))
        except StoreError as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    release.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    release.join()
    blocker.close()
    assert errors == []
    assert store.version("s") == 4
    store.close()


def test_busy_timeout_takes_seconds_or_a_timedelta(tmp_path):
    store = SqliteStore(tmp_path / "t.db", busy_timeout=timedelta(milliseconds=300))
    SessionService(store).create("s")
    blocker = _held_lock(tmp_path / "t.db")
    started = time.monotonic()
    with pytest.raises(StoreError, match="past the busy timeout"):
        store.append_events("s", [SessionEvent.for_message("s", Message.user("x"))], 0)
    assert 0.2 <= time.monotonic() - started <= 0.8
    blocker.execute("ROLLBACK")
    blocker.close()
    store.close()


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("created_at", 2**63 - 1),
        ("created_at", -(2**63)),
        ("created_at", "yesterday"),
        ("created_at", 1.5),
        ("expires_at", 2**63 - 1),
        ("expires_at", b"blob"),
        ("metadata", "[1, 2]"),
        ("metadata", "{not json"),
    ],
)
def test_a_damaged_session_row_is_corrupt_data(tmp_path, column, value):
    path = tmp_path / "t.db"
    with SqliteStore(path) as store:
        store.create_session(Session(id="a", created_at=T0, metadata={"k": 1}))
        store.create_session(Session(id="b", created_at=T0))
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE turnlog_sessions SET {column} = ? WHERE id = 'a'", (value,))
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        with pytest.raises(CorruptData, match="session 'a'"):
            store.find_session("a")
        with pytest.raises(CorruptData, match="session 'a'"):
            store.list_sessions()
        assert store.find_session("b") == Session(id="b", created_at=T0)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("timestamp", 2**63 - 1),
        ("timestamp", -(2**63)),
        ("timestamp", "noon"),
        ("timestamp", 2.5),
        ("type", "not a type"),
    ],
)
def test_a_damaged_event_row_is_corrupt_data(tmp_path, column, value):
    path = tmp_path / "t.db"
    with SqliteStore(path) as store:
        service = SessionService(store)
        service.create("s")
        service.append_message("s", Message.user("hello"))
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE turnlog_events SET {column} = ?", (value,))
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        # the view reads message rows only: a row whose type is damaged is not among them
        for read in (store.events, store.view)[: 1 if column == "type" else 2]:
            with pytest.raises(CorruptData, match=r"seq 1 .* session 's'"):
                read("s")


def test_find_by_metadata_handles_integers_beyond_64_bits(tmp_path):
    with SqliteStore(tmp_path / "t.db") as store:
        for i, n in enumerate([2**63, 2**63 + 1, 2**64, -(2**63) - 1, 2**63 - 1, 1]):
            store.create_session(Session(id=f"s{i}", created_at=T0, metadata={"n": n}))
        store.create_session(Session(id="f", created_at=T0, metadata={"n": float(2**63)}))
        assert [s.id for s in store.find_by_metadata("n", 2**63)] == ["s0"]
        assert [s.id for s in store.find_by_metadata("n", 2**63 + 1)] == ["s1"]
        assert [s.id for s in store.find_by_metadata("n", -(2**63) - 1)] == ["s3"]
        assert [s.id for s in store.find_by_metadata("n", 2**63 - 1)] == ["s4"]
        assert store.find_by_metadata("n", 2**65) == []


@pytest.mark.parametrize(
    "bad", [-1, float("nan"), float("inf"), 10**7, "30", None, True, timedelta(seconds=-1)]
)
def test_a_bad_busy_timeout_is_refused_before_the_file_is_made(tmp_path, bad):
    with pytest.raises(InvalidInput, match="busy_timeout"):
        SqliteStore(tmp_path / "t.db", busy_timeout=bad)
    assert not (tmp_path / "t.db").exists()


def _turn_events(sid):
    call = ToolCall(id="c1", name="lookup", arguments='{"q": "x"}')
    return (
        SessionEvent.for_message(sid, Message.user("question")),
        SessionEvent.for_message(sid, Message.assistant(tool_calls=[call])),
        SessionEvent.for_message(sid, Message.tool([ToolResult("c1", "lookup", "found")])),
    )


def test_a_handle_whose_memory_of_the_log_is_stale_appends_by_the_log(tmp_path):
    # The one-event append writes with one statement conditioned on what this handle remembers
    # of the log's end; another handle's appends must make that write fail and be judged anew.
    path = tmp_path / "t.db"
    with SqliteStore(path) as mine, SqliteStore(path) as other:
        mine.create_session(Session("s", created_at=T0))
        user, call, result = _turn_events("s")
        assert mine.append_events("s", [user], 0) == 1
        assert mine.append_events("s", [call], 1) == 2  # remembered: c1 is open at version 2
        assert other.append_events("s", [result], 2) == 3
        more = SessionEvent.for_message("s", Message.user("next"))
        assert other.append_events("s", [more], 3) == 4
        late = SessionEvent.for_message("s", Message.tool([ToolResult("c1", "lookup", "again")]))
        with pytest.raises(VersionConflict) as info:
            mine.append_events("s", [late], 2)  # the version this handle wrote last
        assert (info.value.expected, info.value.actual) == (2, 4)
        with pytest.raises(InvalidInput, match="R1"):  # c1 was answered by the other handle
            mine.append_events("s", [late], 4)
        reply = SessionEvent.for_message("s", Message.assistant("done"))
        assert mine.append_events("s", [reply], 4) == 5
        ids = [user.id, call.id, result.id, more.id, reply.id]
        assert [e.id for e in other.events("s")] == ids


def test_append_event_at_the_end_when_another_handle_wrote_since(tmp_path):
    # append_event (no expected version) tries the one-statement append at the version this
    # handle remembers from its own last one-event append; when another handle appended
    # meanwhile it must land at the log's end, with the rules judged on the log.
    path = tmp_path / "t.db"
    with SqliteStore(path) as mine, SqliteStore(path) as other:
        mine.create_session(Session("s", created_at=T0))
        user, call, result = _turn_events("s")
        assert mine.append_events("s", [user], 0) == 1  # remembered: version 1
        stored_call = mine.append_event(call)  # the fast path at version 1
        assert stored_call.seq == 2 and stored_call.timestamp is not None
        assert mine.events("s")[-1] == stored_call
        other.append_event(result)
        late = SessionEvent.for_message("s", Message.tool([ToolResult("c1", "lookup", "again")]))
        with pytest.raises(InvalidInput, match="R1"):  # c1 was answered by the other handle
            mine.append_event(late)
        reply = mine.append_event(SessionEvent.for_message("s", Message.assistant("done")))
        assert reply.seq == 4
        assert other.events("s")[-1] == reply
        assert mine.append_events("s", [SessionEvent.for_message("s", Message.user("q"))], 4) == 5
        again = mine.append_event(SessionEvent.for_message("s", Message.assistant("a")))
        assert again.seq == 6  # the fast path again
        assert mine.append_event(again) == again  # a retry: the stored event, not a new one
        assert [e.seq for e in other.events("s")] == [1, 2, 3, 4, 5, 6]
        assert other.events("s")[-1] == again


def test_a_batch_leaves_the_tail_it_checked_for_the_next_append(tmp_path):
    # A batch appended through the general path remembers the tail its rules check read, so
    # the next one-event append checks against it without reading: that tail must be right.
    with SqliteStore(tmp_path / "t.db") as store:
        store.create_session(Session("s", created_at=T0))
        user, call, result = _turn_events("s")
        assert store.append_events("s", [user, call], 0) == 2  # c1 left open
        with pytest.raises(InvalidInput, match="R2"):
            store.append_event(SessionEvent.for_message("s", Message.user("next")))
        assert store.append_event(result).seq == 3
        assert store.append_event(SessionEvent.for_message("s", Message.user("next"))).seq == 4
        assert [e.seq for e in store.events("s")] == [1, 2, 3, 4]


@pytest.mark.parametrize("check_rules", [True, False], ids=["system-message", "rules-off"])
def test_an_expected_version_past_the_log_writes_nothing(tmp_path, check_rules):
    # Without a tail to check, the one-event append is still conditioned on the row at the
    # expected version: a version past the log's end must not leave a gap in it.
    with SqliteStore(tmp_path / "t.db") as store:
        store.create_session(Session("s", created_at=T0))
        user, call, _ = _turn_events("s")
        assert store.append_events("s", [user, call], 0) == 2
        message = Message.system("rules") if check_rules else Message.user("q")
        for expected in (5, 3, 1):
            event = SessionEvent.for_message("s", message)
            with pytest.raises(VersionConflict) as info:
                store.append_events("s", [event], expected, check_rules=check_rules)
            assert (info.value.expected, info.value.actual) == (expected, 2)
        assert store.version("s") == 2
        assert store.append_events("s", [event], 2, check_rules=check_rules) == 3
        assert [e.seq for e in store.events("s")] == [1, 2, 3]


def test_a_one_event_append_into_an_unknown_session_writes_nothing(tmp_path):
    with SqliteStore(tmp_path / "t.db") as store:
        for check_rules in (True, False):
            event = SessionEvent.for_message("nobody", Message.user("hi"))
            with pytest.raises(SessionNotFound):
                store.append_events("nobody", [event], 0, check_rules=check_rules)
        store.create_session(Session("nobody", created_at=T0))
        assert store.events("nobody") == []


def test_an_event_without_a_timestamp_is_stamped_now(tmp_path):
    with SqliteStore(tmp_path / "t.db") as store:
        store.create_session(Session("s", created_at=T0))
        before = datetime.now(UTC)
        store.append_events("s", [SessionEvent.for_message("s", Message.user("hi"))], 0)
        after = datetime.now(UTC)
        (stored,) = store.events("s")
        assert stored.timestamp is not None and before <= stored.timestamp <= after


def test_a_version_1_file_gains_the_attachment_tables_and_keeps_its_log(tmp_path):
    """A file written before attachments (schema 1: no attachment tables) is upgraded in place
    when opened: its sessions and events read back, and images are then stored apart."""
    import hashlib

    from turnlog import ImagePart

    path = tmp_path / "v1.db"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("old")
        svc.append_message("old", Message.user("hello"))
        svc.append_message("old", Message.assistant("hi"))
        before = svc.events("old")
    conn = sqlite3.connect(path)
    with conn:  # what version 1 was: the same file without the attachment tables
        conn.execute("DROP TABLE turnlog_session_attachments")
        conn.execute("DROP TABLE turnlog_attachments")
        conn.execute("DELETE FROM turnlog_schema")
        conn.execute("INSERT INTO turnlog_schema (version) VALUES (1)")
    conn.close()
    big = b"\x89PNG\r\n\x1a\n" + bytes(30_000)
    with SessionService(SqliteStore(path)) as svc:
        assert svc.events("old") == before
        svc.append_message("old", Message.user("and this", ImagePart("image/png", data=big)))
        ref = "sha256:" + hashlib.sha256(big).hexdigest()
        assert svc.events("old")[2].message.parts[1].ref == ref
        assert svc.attachment("old", ref) == big
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT max(version) FROM turnlog_schema").fetchone() == (SCHEMA_VERSION,)
    conn.close()
    with SqliteStore(path) as again:  # opening an upgraded file changes nothing
        assert again.version("old") == 3
