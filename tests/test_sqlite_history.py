"""The SQLite store's own history index (schema 4): written by the searches, not the appends
(each search first catches its sessions up from the log), its upgrade from schema 2 (tables
only) and from schema 3 (indexed at append), searches and appends from several handles and
processes, its removal with a session, and queries it must survive."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from datetime import UTC, datetime, timedelta

import pytest

from turnlog import Message, SessionService
from turnlog.codec import encode_body, to_micros
from turnlog.errors import InvalidInput, StoreError
from turnlog.events import Session, SessionEvent, ToolCall, ToolResult
from turnlog.history import history_query
from turnlog.parts import ImagePart
from turnlog.stores.memory import MemoryStore
from turnlog.stores.sqlite import SCHEMA_VERSION, SqliteStore

# The schema-2 DDL as the code at 16f7705 wrote it (turnlog.stores.sqlite _SCHEMA + _ATTACHMENTS).
_V2_DDL = """
CREATE TABLE turnlog_schema (version INTEGER NOT NULL);
CREATE TABLE turnlog_sessions (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    metadata TEXT NOT NULL,
    boundary_seq INTEGER
) WITHOUT ROWID;
CREATE INDEX turnlog_sessions_expiry ON turnlog_sessions (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE turnlog_events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    timestamp INTEGER NOT NULL,
    role TEXT,
    synthetic INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX turnlog_events_id ON turnlog_events (id);
CREATE TABLE turnlog_attachments (
    ref TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE turnlog_session_attachments (
    session_id TEXT NOT NULL,
    ref TEXT NOT NULL,
    PRIMARY KEY (session_id, ref)
) WITHOUT ROWID;
CREATE INDEX turnlog_session_attachments_ref ON turnlog_session_attachments (ref);
INSERT INTO turnlog_schema (version) VALUES (2);
"""


def _v2_file(path, logs):
    """A schema-2 file holding `logs` ({session id: [Message]}), its rows as 16f7705 wrote them
    (bodies from the one codec, events stamped by a memory store)."""
    memory = SessionService(MemoryStore())
    for sid, messages in logs.items():
        memory.create(sid)
        for m in messages:
            memory.append_message(sid, m)
    conn = sqlite3.connect(path)
    conn.executescript(_V2_DDL)
    with conn:
        for sid in logs:
            session = memory.store.find_session(sid)
            conn.execute(
                "INSERT INTO turnlog_sessions (id, created_at, expires_at, metadata) "
                "VALUES (?, ?, NULL, '{}')",
                (sid, to_micros(session.created_at)),
            )
            for e in memory.events(sid):
                conn.execute(
                    "INSERT INTO turnlog_events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (sid, e.seq, e.id, e.type.name, to_micros(e.timestamp), e.role,
                     int(e.synthetic), encode_body(e)),
                )  # fmt: skip
    conn.close()


def _batch(svc, sid, messages):
    """Append `messages` as one batch (one `append_events` call)."""
    events = [SessionEvent.for_message(sid, m) for m in messages]
    return svc.append_events(sid, events, svc.store.version(sid))


def _count(path, sql, args=()):
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, args).fetchone()[0]
    finally:
        conn.close()


def _raw_matches(path, word):
    """Rowids the FTS5 table itself matches for `word` (no join with the rows table)."""
    conn = sqlite3.connect(path)
    try:
        return [
            r[0]
            for r in conn.execute(
                "SELECT rowid FROM turnlog_history_text WHERE turnlog_history_text MATCH ?",
                (f'"{word}"',),
            )
        ]
    finally:
        conn.close()


def _search(store, sid, text, **kw):
    return store.search_history(sid, history_query(text, **kw))


def _record(path, sid):
    """The session's index record: (history key, indexed seq, the id recorded at it)."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT history_key, history_seq, history_id FROM turnlog_sessions WHERE id = ?",
            (sid,),
        ).fetchone()
    finally:
        conn.close()


def test_a_schema_2_file_gains_empty_tables_and_each_search_indexes_its_session(tmp_path):
    path = tmp_path / "v2.db"
    long = [Message.user(f"note {i} about the lighthouse keeper") for i in range(1_200)]
    _v2_file(
        path,
        {
            "a": [Message.user("the zeppelin lands at noon"), Message.assistant("noted")],
            "b": [Message.user("東京タワーに行きました"), Message.assistant("いいですね")],
            "long": long,  # more than one catch-up page
        },
    )
    with SqliteStore(path) as store:
        # the upgrade creates the tables: nothing is indexed, no session has a key yet
        assert _count(path, "SELECT max(version) FROM turnlog_schema") == SCHEMA_VERSION == 4
        assert _count(path, "SELECT count(*) FROM turnlog_history") == 0
        assert _count(path, "SELECT count(history_key) FROM turnlog_sessions") == 0
        assert [h.session_id for h in _search(store, "a", "zeppelin")] == ["a"]
        assert _count(path, "SELECT count(*) FROM turnlog_history") == 2  # "a" alone
        assert _search(store, "b", "東京")[0].seq == 1
        assert len(_search(store, "long", "lighthouse", k=100)) == 100
        assert _search(store, "long", "1199")[0].seq == 1200
        assert _search(store, "a", "lighthouse") == []  # one session's range only
        store.create_session(Session(id="c", created_at=datetime.now(UTC)))
        assert _record(path, "c") == (None, 0, None)
        last = store.events_after("long", 1_199, 1)[0].id
    assert _record(path, "long")[1:] == (1_200, last)
    keys = {r[0] for r in sqlite3.connect(path).execute("SELECT history_key FROM turnlog_sessions")}
    assert keys == {1, 2, 3, None}
    assert _count(path, "SELECT count(*) FROM turnlog_history") == 2 + 2 + 1_200


def _as_schema_3(path):
    """Turn a schema-4 file back into what the append-time design (schema 3) left: no record
    columns, the rows table holding every message indexed."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("ALTER TABLE turnlog_sessions DROP COLUMN history_seq")
        conn.execute("ALTER TABLE turnlog_sessions DROP COLUMN history_id")
        conn.execute("UPDATE turnlog_schema SET version = 3")
    conn.close()


def test_a_schema_3_file_is_indexed_up_to_its_rows(tmp_path):
    """A file of the append-time design: its sessions count as indexed up to their newest
    row; events after it (not indexable, or appended since) are indexed by the next search,
    and nothing is indexed twice (the rows table's key would refuse it)."""
    path = tmp_path / "v3.db"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("s")
        svc.create("never")  # no key: never indexed
        _batch(svc, "s", [Message.user("okapi one"), Message.assistant("okapi two")])
        call = ToolCall("c1", "look", "{}")
        svc.append_message("s", Message.user("okapi three"))
        assert len(_search(svc.store, "s", "okapi")) == 3
        svc.append_message("s", Message.assistant(None, tool_calls=(call,)))  # not indexed
    _as_schema_3(path)
    with SessionService(SqliteStore(path)) as svc:
        assert _count(path, "SELECT max(version) FROM turnlog_schema") == 4
        _key, seq, last = _record(path, "s")
        assert seq == 3 and last == svc.events("s")[2].id
        svc.append_message("s", Message.tool(ToolResult("c1", "look", "okapi four")))
        hits = _search(svc.store, "s", "okapi", k=10)
        assert sorted(h.seq for h in hits) == [1, 2, 3, 5]
        assert _record(path, "s")[1:] == (5, svc.events("s")[4].id)
        assert _record(path, "never") == (None, 0, None)
        assert len(_raw_matches(path, "okapi")) == 4


def test_appends_never_touch_the_index_and_a_search_finds_them(tmp_path):
    path = tmp_path / "s.db"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("s")
        svc.append_message("s", Message.user("first aardvark"))
        _batch(svc, "s", [Message.assistant("second aardvark"), Message.user("third")])
        assert _count(path, "SELECT count(*) FROM turnlog_history") == 0
        assert _record(path, "s") == (None, 0, None)
        assert [h.seq for h in _search(svc.store, "s", "aardvark")] in ([1, 2], [2, 1])
        assert _count(path, "SELECT count(*) FROM turnlog_history") == 3
        svc.append_message("s", Message.assistant("fourth aardvark"))
        assert len(_search(svc.store, "s", "aardvark")) == 3


def test_an_append_whose_batch_breaks_a_view_rule_leaves_nothing_searchable(tmp_path):
    path = tmp_path / "s.db"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("s")
        svc.append_message("s", Message.user("first words"))
        orphan = Message.tool(ToolResult("nope", "x", "orphan words"))
        with pytest.raises(InvalidInput):
            _batch(svc, "s", [Message.assistant("second words"), orphan])
        assert [h.seq for h in _search(svc.store, "s", "words")] == [1]
        assert _search(svc.store, "s", "second orphan") == []
    assert _count(path, "SELECT count(*) FROM turnlog_history") == 1
    assert _raw_matches(path, "second") == []


def test_an_append_refused_after_its_rows_were_written_leaves_nothing_searchable(tmp_path):
    """The attachment check runs after the inserts: the events go, nothing is found."""
    path = tmp_path / "s.db"
    ref = "sha256:" + "0" * 64
    with SessionService(SqliteStore(path)) as svc:
        svc.create("s")
        with pytest.raises(Exception, match=r"ref|attachment"):
            _batch(
                svc,
                "s",
                [
                    Message.user("words before the image"),
                    Message.user("look", ImagePart("image/png", ref=ref, size=10)),
                ],
            )
        assert svc.events("s") == []
        assert _search(svc.store, "s", "words before") == []
        assert svc.store.search_sessions(history_query("words")) == []
    assert _count(path, "SELECT count(*) FROM turnlog_history") == 0
    assert _raw_matches(path, "before") == []


def test_a_catch_up_that_fails_leaves_the_record_where_it_was(tmp_path):
    """Appends go on when the index cannot be written (they never write it); a search whose
    catch-up fails writes none of it and advances nothing, and the next one does it all."""
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    svc = SessionService(store)
    svc.create("s")
    svc.append_message("s", Message.user("hello"))
    assert len(_search(store, "s", "hello")) == 1
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON turnlog_history "
        "WHEN (SELECT count(*) FROM turnlog_history) >= 2 BEGIN SELECT RAISE(ABORT, 'no'); END"
    )
    conn.commit()
    svc.append_message("s", Message.assistant("one refused"))
    _batch(svc, "s", [Message.user("two refused"), Message.assistant("three refused")])
    assert store.version("s") == 4
    with pytest.raises(StoreError):
        _search(store, "s", "refused")
    assert _record(path, "s")[1] == 1
    assert _count(path, "SELECT count(*) FROM turnlog_history") == 1
    assert _raw_matches(path, "one") == []
    conn.execute("DROP TRIGGER refuse")
    conn.commit()
    conn.close()
    assert sorted(h.seq for h in _search(store, "s", "refused")) == [2, 3, 4]
    store.close()


def test_a_search_with_nothing_new_takes_no_write_lock(tmp_path):
    path = tmp_path / "s.db"
    with SessionService(SqliteStore(path, busy_timeout=0)) as svc:
        svc.create("s")
        svc.create("t")
        svc.append_message("s", Message.user("quokka here"))
        svc.append_message("t", Message.user("quokka there"))
        assert len(_search(svc.store, "s", "quokka")) == 1
        assert len(svc.store.search_sessions(history_query("quokka"))) == 2
        writer = sqlite3.connect(path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")  # another process's write in progress
        try:
            assert len(_search(svc.store, "s", "quokka")) == 1
            assert len(svc.store.search_sessions(history_query("quokka"))) == 2
            assert len(svc.store.search_sessions(history_query("quokka"), sessions=["t"])) == 1
        finally:
            writer.execute("ROLLBACK")
        svc.append_message("s", Message.assistant("another quokka"))
        writer.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreError, match="locked"):
                _search(svc.store, "s", "quokka")  # behind: it needs the lock
        finally:
            writer.execute("ROLLBACK")
        writer.close()
        assert len(_search(svc.store, "s", "quokka")) == 2


def test_a_search_finds_what_another_handle_appended(tmp_path):
    path = tmp_path / "s.db"
    with SqliteStore(path) as reader, SessionService(SqliteStore(path)) as writer:
        writer.create("s")
        writer.create("t", metadata={"team": "red"})
        writer.create("u", metadata={"team": "blue"})
        writer.append_message("s", Message.user("a wombat"))
        assert len(_search(reader, "s", "wombat")) == 1
        writer.append_message("s", Message.assistant("more wombat"))
        _batch(writer, "t", [Message.user("wombat in t"), Message.assistant("ok")])
        writer.append_message("u", Message.user("wombat in u"))
        assert len(_search(reader, "s", "wombat")) == 2
        red = reader.search_sessions(history_query("wombat"), metadata={"team": "red"})
        assert [h.session_id for h in red] == ["t"]
        assert _record(path, "u") == (None, 0, None)  # not searched: not caught up
        named = reader.search_sessions(history_query("wombat"), sessions=["u", "zz"])
        assert [h.session_id for h in named] == ["u"]
        writer.append_message("t", Message.user("late wombat"))
        every = reader.search_sessions(history_query("wombat", k=10))
        assert sorted(h.session_id for h in every) == ["s", "s", "t", "t", "u"]


def test_a_session_deleted_and_created_again_finds_only_its_own_events(tmp_path):
    path = tmp_path / "s.db"
    with SessionService(SqliteStore(path)) as svc, SqliteStore(path) as other:
        svc.create("s")
        svc.append_message("s", Message.user("old narwhal"))
        assert len(_search(other, "s", "narwhal")) == 1  # indexed
        svc.create("n")
        svc.append_message("n", Message.user("unsearched narwhal"))  # never indexed
        svc.delete("s")
        svc.delete("n")
        assert _count(path, "SELECT count(*) FROM turnlog_history") == 0
        for sid in ("s", "n"):
            svc.create(sid)
            svc.append_message(sid, Message.user(f"new narwhal of {sid}"))
            svc.append_message(sid, Message.assistant("yes"))
            hits = _search(other, sid, "narwhal")
            assert [(h.seq, "new" in h.snippet) for h in hits] == [(1, True)]
        every = other.search_sessions(history_query("narwhal", k=10))
        assert sorted(h.session_id for h in every) == ["n", "s"]
        assert all("new" in h.snippet for h in every)


def test_a_log_that_is_not_the_one_indexed_is_indexed_again(tmp_path):
    """The record's event id tells a log replaced beneath the index (a file changed by hand):
    the index starts again rather than trusting rows it cannot check."""
    path = tmp_path / "s.db"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("s")
        svc.create("t")
        svc.append_message("s", Message.user("old ibis"))
        svc.append_message("t", Message.user("ibis of t"))
        assert len(svc.store.search_sessions(history_query("ibis"))) == 2
        conn = sqlite3.connect(path)
        with conn:  # a new log under the same session row
            conn.execute("DELETE FROM turnlog_events WHERE session_id = 's'")
        conn.close()
        svc.append_message("s", Message.user("new ibis"))
        hits = _search(svc.store, "s", "ibis")
        assert [("new" in h.snippet) for h in hits] == [True]
        assert sorted(h.session_id for h in svc.store.search_sessions(history_query("ibis"))) == [
            "s",
            "t",
        ]
        assert len(_raw_matches(path, "ibis")) == 2


def test_a_catch_up_reads_the_record_inside_its_write_transaction(tmp_path):
    """Two handles both find the session behind; the other one catches up between this one's
    look and its lock: this one must index nothing again (the rows' key would refuse it)."""
    path = tmp_path / "s.db"
    with SessionService(SqliteStore(path)) as svc, SqliteStore(path) as other:
        svc.create("s")
        svc.append_message("s", Message.user("first gecko"))
        assert len(_search(svc.store, "s", "gecko")) == 1
        svc.append_message("s", Message.assistant("second gecko"))
        write = svc.store._write

        def first_the_other():
            assert len(_search(other, "s", "gecko")) == 2  # it catches up first
            return write()

        svc.store._write = first_the_other  # type: ignore[method-assign]
        assert len(_search(svc.store, "s", "gecko")) == 2
    assert _count(path, "SELECT count(*) FROM turnlog_history") == 2
    assert len(_raw_matches(path, "gecko")) == 2


def _appender(path, n, ready):
    with SessionService(SqliteStore(path)) as svc:
        ready.wait()
        for i in range(n):
            svc.append_message("s", Message.user(f"marmot number {i}"))


def _searcher(path, n, ready, out):
    """Search until all `n` events are found (or for 30 s), as fast as it can."""
    seen = []
    with SqliteStore(path) as store:
        ready.wait()
        deadline = time.monotonic() + 30
        while (not seen or seen[-1] < n) and time.monotonic() < deadline:
            try:
                hits = _search(store, "s", "marmot", k=100)
            except StoreError as exc:  # a catch-up that indexed twice fails on the rows' key
                out.put(("error", str(exc)))
                return
            ids = [h.event_id for h in hits]
            if len(ids) != len(set(ids)):
                out.put(("duplicate", ids))
                return
            seen.append(len(ids))
    out.put(("ok", seen))


def test_searches_in_two_processes_while_a_third_appends(tmp_path):
    """Catch-ups race with each other and with appends: no event is indexed twice (the rows
    table's key would refuse it, and a hit would come twice), and every event committed before
    a search began is found by it."""
    path = tmp_path / "s.db"
    n = 80
    with SessionService(SqliteStore(path)) as svc:
        svc.create("s")
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_appender, args=(path, n, ready))]
    procs += [ctx.Process(target=_searcher, args=(path, n, ready, out)) for _ in range(2)]
    for p in procs:
        p.start()
    ready.set()
    results = [out.get(timeout=120) for _ in range(2)]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    for kind, seen in results:
        assert kind == "ok", seen
        assert seen == sorted(seen)  # a later search never finds less
        assert seen[-1] == n
    with SqliteStore(path) as store:
        assert len(_search(store, "s", "marmot", k=100)) == n
        assert _record(path, "s")[1] == n
    assert _count(path, "SELECT count(*) FROM turnlog_history") == n
    assert len(_raw_matches(path, "marmot")) == n


def test_delete_and_expiry_remove_the_index_rows(tmp_path):
    path = tmp_path / "s.db"
    now = datetime.now(UTC)
    key_of = "SELECT history_key FROM turnlog_sessions WHERE id = ?"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("kept")
        svc.create("old", ttl=timedelta(seconds=1))
        svc.create("gone")
        for sid in ("gone", "old", "kept"):
            _batch(svc, sid, [Message.user(f"platypus {sid}"), Message.assistant("ok")])
        assert len(svc.store.search_sessions(history_query("platypus"))) == 3
        assert _count(path, "SELECT count(*) FROM turnlog_history") == 6
        assert len(_raw_matches(path, "platypus")) == 3
        gone_key = _count(path, key_of, ("gone",))
        _batch(svc, "gone", [Message.user("unindexed platypus"), Message.assistant("ok")])
        svc.delete("gone")
        assert svc.store.delete_expired(now + timedelta(seconds=5)) == 1
        assert _count(path, "SELECT count(*) FROM turnlog_history") == 2
        assert len(_raw_matches(path, "platypus")) == 1
        assert len(_raw_matches(path, "gone")) == 0 and len(_raw_matches(path, "old")) == 0
        # created again under the same id: a key never given before, none of the old events
        svc.create("gone")
        svc.append_message("gone", Message.user("hello"))
        assert _search(svc.store, "gone", "platypus") == []
        assert _count(path, key_of, ("gone",)) > gone_key
        hits = svc.store.search_sessions(history_query("platypus"))
        assert [h.session_id for h in hits] == ["kept"]


@pytest.mark.parametrize(
    "text",
    ['NEAR(', '"', '*', 'a AND', '-x', 'col:', 'text:x', 'NEAR(a b, 2)', '"unterminated',
     '^start', 'x OR', '(((', 'AND OR NOT', "'", '{text}: x', '+', 'a*b'],
)  # fmt: skip
def test_fts_syntax_never_raises(tmp_path, text):
    with SessionService(SqliteStore(tmp_path / "s.db")) as svc:
        svc.create("s")
        _batch(svc, "s", [Message.user("x AND start text col a b"), Message.assistant("k")])
        try:
            query = history_query(text)
        except InvalidInput:  # blank once its words are taken: refused before any engine
            return
        assert isinstance(svc.store.search_history("s", query), list)
        assert isinstance(svc.store.search_sessions(query), list)


def test_cjk_text_is_found_by_a_cjk_query(tmp_path):
    with SessionService(SqliteStore(tmp_path / "s.db")) as svc:
        svc.create("s")
        _batch(
            svc,
            "s",
            [
                Message.user("我昨天在北京吃了烤鸭"),
                Message.assistant("烤鸭很好吃"),
                Message.user("明日は東京で会議があります"),
                Message.assistant("了解しました"),
            ],
        )
        assert [h.seq for h in _search(svc.store, "s", "北京")] == [1]
        assert [h.seq for h in _search(svc.store, "s", "東京")] == [3]
        assert "北京" in _search(svc.store, "s", "北京")[0].snippet


def test_filters_and_events_by_id(tmp_path):
    with SessionService(SqliteStore(tmp_path / "s.db")) as svc:
        svc.create("s")
        svc.create("t")
        call = ToolCall("c1", "weather", '{"city": "Oslo"}')
        _batch(
            svc,
            "s",
            [
                Message.user("what is the weather in Oslo"),
                Message.assistant(None, tool_calls=(call,)),
                Message.tool(ToolResult("c1", "weather", "Oslo rain")),
                Message.assistant("Oslo has rain"),
            ],
        )
        _batch(svc, "t", [Message.user("Oslo in t"), Message.assistant("yes")])
        assert {h.role for h in _search(svc.store, "s", "oslo", roles=["user"])} == {"user"}
        tooled = _search(svc.store, "s", "oslo", tools=["weather"])
        assert sorted(h.seq for h in tooled) == [2, 3]
        ids = [e.id for e in svc.events("s")]
        other = svc.events("t")[0].id
        got = svc.store.events_by_id("s", [ids[3], ids[0], other])
        assert [e.id for e in got] == [ids[0], ids[3]]
        assert got == [svc.events("s")[0], svc.events("s")[3]]


def test_a_long_backlog_is_indexed_in_several_transactions(tmp_path, monkeypatch):
    import turnlog.stores.sqlite as sqlite_module

    monkeypatch.setattr(sqlite_module, "_CATCH_UP_SPAN", 3)
    calls = []
    real = sqlite_module._catch_up

    def counted(conn, session_id):
        calls.append(session_id)
        return real(conn, session_id)

    monkeypatch.setattr(sqlite_module, "_catch_up", counted)
    store = SqliteStore(tmp_path / "b.db")
    svc = SessionService(store)
    svc.create("b")
    for n in range(5):
        svc.append_message("b", Message.user(f"walrus number {n}"))
        svc.append_message("b", Message.assistant("ok"))
    hits = store.search_history("b", history_query("walrus", k=10))
    assert sorted(h.seq for h in hits) == [1, 3, 5, 7, 9]
    assert len(calls) == 4  # 10 seqs, 3 a transaction
    store.search_sessions(history_query("walrus"))
    assert len(calls) == 4  # caught up: no write transaction
    store.close()
