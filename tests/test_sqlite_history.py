"""The SQLite store's own history index (schema 3): its migration from schema 2, its writes in
the append's transaction, its removal with a session, and queries it must survive."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from turnlog import Message, SessionService
from turnlog.codec import encode_body, to_micros
from turnlog.errors import InvalidInput, StoreError
from turnlog.events import SessionEvent, ToolCall, ToolResult
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


def test_a_schema_2_file_is_indexed_when_opened(tmp_path):
    path = tmp_path / "v2.db"
    long = [Message.user(f"note {i} about the lighthouse keeper") for i in range(1_200)]
    _v2_file(
        path,
        {
            "a": [Message.user("the zeppelin lands at noon"), Message.assistant("noted")],
            "b": [Message.user("東京タワーに行きました"), Message.assistant("いいですね")],
            "long": long,  # more than one backfill page
        },
    )
    with SqliteStore(path) as store:
        assert [h.session_id for h in _search(store, "a", "zeppelin")] == ["a"]
        assert _search(store, "b", "東京")[0].seq == 1
        assert len(_search(store, "long", "lighthouse", k=100)) == 100
        assert _search(store, "long", "1199")[0].seq == 1200
        assert _search(store, "a", "lighthouse") == []  # one session's range only
        store.create_session(SessionService(MemoryStore()).create("c"))
        keys = [
            r for r in sqlite3.connect(path).execute("SELECT history_key FROM turnlog_sessions")
        ]
    assert len(set(keys)) == 4 and None not in {k[0] for k in keys}
    assert _count(path, "SELECT max(version) FROM turnlog_schema") == SCHEMA_VERSION == 3
    assert _count(path, "SELECT count(*) FROM turnlog_history") == 2 + 2 + 1_200


def test_an_append_whose_batch_breaks_a_view_rule_leaves_no_index_row(tmp_path):
    path = tmp_path / "s.db"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("s")
        svc.append_message("s", Message.user("first words"))
        orphan = Message.tool(ToolResult("nope", "x", "orphan words"))
        with pytest.raises(InvalidInput):
            _batch(svc, "s", [Message.assistant("second words"), orphan])
    assert _count(path, "SELECT count(*) FROM turnlog_history") == 1
    assert _raw_matches(path, "second") == []


def test_an_append_refused_after_its_rows_were_written_leaves_no_index_row(tmp_path):
    """The attachment check runs after the inserts: the index rows go with the events."""
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
    assert _count(path, "SELECT count(*) FROM turnlog_history") == 0
    assert _raw_matches(path, "before") == []


@pytest.mark.parametrize("batched", [False, True])
def test_an_index_write_that_fails_stores_no_event(tmp_path, batched):
    """One event (the one-statement path) or a batch: if the index row cannot be written,
    the event is not stored either."""
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    svc = SessionService(store)
    svc.create("s")
    svc.append_message("s", Message.user("hello"))
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON turnlog_history "
        "BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    conn.close()
    with pytest.raises(StoreError):
        if batched:
            _batch(svc, "s", [Message.assistant("one"), Message.user("two")])
        else:
            svc.append_message("s", Message.assistant("refused reply"))
    assert store.version("s") == 1
    assert _raw_matches(path, "refused") == [] and _raw_matches(path, "two") == []
    store.close()


def test_delete_and_expiry_remove_the_index_rows(tmp_path):
    path = tmp_path / "s.db"
    now = datetime.now(UTC)
    key_of = "SELECT history_key FROM turnlog_sessions WHERE id = ?"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("kept")
        svc.create("old", ttl=timedelta(seconds=1))
        svc.create("gone")  # the newest key
        for sid in ("gone", "old", "kept"):
            _batch(svc, sid, [Message.user(f"platypus {sid}"), Message.assistant("ok")])
        assert _count(path, "SELECT count(*) FROM turnlog_history") == 6
        assert len(_raw_matches(path, "platypus")) == 3
        gone_key = _count(path, key_of, ("gone",))
        svc.delete("gone")
        assert svc.store.delete_expired(now + timedelta(seconds=5)) == 1
        assert _count(path, "SELECT count(*) FROM turnlog_history") == 2
        assert len(_raw_matches(path, "platypus")) == 1
        assert len(_raw_matches(path, "gone")) == 0 and len(_raw_matches(path, "old")) == 0
        # created again under the same id: a key never given before, none of the old events
        svc.create("gone")
        assert _count(path, key_of, ("gone",)) > gone_key
        assert _search(svc.store, "gone", "platypus") == []
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
