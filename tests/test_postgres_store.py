"""PostgresStore on the real server: the contract, and what only PostgreSQL does.

Every test gets a fresh PostgreSQL schema with a random name, dropped afterwards.
"""

import contextlib
import hashlib
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from turnlog import (
    CompactionWindow,
    CorruptData,
    ImagePart,
    InvalidInput,
    Message,
    Session,
    SessionEvent,
    SessionNotFound,
    SessionService,
    StoreError,
    VersionConflict,
    WindowCompactionStrategy,
)
from turnlog.stores.attachments import split_attachments
from turnlog.stores.postgres import SCHEMA_VERSION, PostgresStore, ddl, migrate
from turnlog.stores.postgres import schema as schema_module
from turnlog.stores.postgres.ddl import lock_class
from turnlog.stores.postgres.rows import Batch, read_params
from turnlog.testing import StoreContract
from turnlog.testing.contract_attachments import blob

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def drop_schema(dsn, schema):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def pg_schema(postgres_dsn):
    """A fresh schema name; the schema is dropped after the test."""
    name = f"tl_test_{uuid.uuid4().hex[:12]}"
    yield name
    drop_schema(postgres_dsn, name)


@pytest.fixture
def admin(postgres_dsn):
    """A plain autocommit connection, for looking behind the store's back."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def store(postgres_dsn, pg_schema):
    with PostgresStore(postgres_dsn, schema=pg_schema, pool_max=4) as store:
        yield store


def q(text, schema):
    return sql.SQL(text).format(s=sql.Identifier(schema))


def turn(sid, n):
    return [
        SessionEvent.for_message(sid, Message.user(f"question {n}")),
        SessionEvent.for_message(sid, Message.assistant(f"answer {n}")),
    ]


# -- the contract -------------------------------------------------------------------------------


class PostgresAttachmentHooks:
    """The contract's looks at the attachment table, by a connection of their own."""

    def count_attachments(self, store):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(
                q("SELECT count(*) FROM {s}.attachments", self.schema_name)
            ).fetchone()[0]

    def damage_attachment(self, store, ref):
        first = "{s}.attachment_chunks WHERE n = 0 AND id = "  # the first chunk of its bytes
        first += "(SELECT id FROM {s}.attachments WHERE ref = %s)"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            (data,) = conn.execute(
                q("SELECT data FROM " + first, self.schema_name), (ref,)
            ).fetchone()
            data = bytearray(data)
            data[len(data) // 2] ^= 1
            conn.execute(
                q("UPDATE " + first.replace(" WHERE", " SET data = %s WHERE", 1), self.schema_name),
                (bytes(data), ref),
            )


class TestPostgresStore(PostgresAttachmentHooks, StoreContract):
    property_examples = 50  # the validation property test, on a server

    partitions = None

    @pytest.fixture(autouse=True)
    def _schema(self, postgres_dsn, pg_schema):
        self.dsn, self.schema_name = postgres_dsn, pg_schema

    def make_store(self, tmp_path):
        return PostgresStore(
            self.dsn, schema=self.schema_name, partitions=self.partitions, pool_max=4
        )

    def open_again(self, store, tmp_path):
        return PostgresStore(self.dsn, schema=self.schema_name, pool_max=4)


class TestPartitionedPostgresStore(TestPostgresStore):
    partitions = 4


# -- partitions -----------------------------------------------------------------------------------


def _relations(plan):
    """Every relation a JSON plan reads."""
    found = []
    stack = [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        if "Relation Name" in node:
            found.append(node["Relation Name"])
        stack.extend(node.get("Plans", []))
    return found


def test_a_session_read_touches_one_partition(postgres_dsn, pg_schema, admin):
    sid = "session-0042"
    with PostgresStore(postgres_dsn, schema=pg_schema, partitions=4) as store:
        for i in range(12):
            other = f"session-{i:04d}"
            store.create_session(Session(other, T0))
            store.append_events(other, turn(other, i), 0)
        store.create_session(Session(sid, T0))
        events = [*turn(sid, 1), *turn(sid, 2)]
        store.append_events(sid, events, 0)
        service = SessionService(store)
        service.compact(
            sid, lambda r: True, WindowCompactionStrategy(CompactionWindow.last_turns(1))
        )
        assert store.version(sid) == 5
        queries = {"view": store._q.view, "events": store._q.events}
    holders = {
        r[0]
        for r in admin.execute(
            q("SELECT tableoid::regclass::text FROM {s}.events WHERE session_id = %s", pg_schema),
            (sid,),
        )
    }
    assert len(holders) == 1
    holder = holders.pop().split(".")[-1].strip('"')
    used = {holder}
    for name, query in queries.items():
        plan = admin.execute("EXPLAIN (FORMAT JSON) " + query, {"sid": sid}).fetchone()[0]
        partitions = {r for r in _relations(plan) if r.startswith("events")}
        assert partitions == {holder}, f"the {name} read plans {partitions}"
    # The partitions really spread the sessions.
    spread = admin.execute(
        q("SELECT count(DISTINCT tableoid) FROM {s}.events", pg_schema)
    ).fetchone()[0]
    assert spread > 1 and used


# -- schema and migrations ------------------------------------------------------------------------


def test_migrate_is_idempotent_and_safe_to_race(postgres_dsn, pg_schema, admin):
    results, errors = [], []
    barrier = threading.Barrier(6)

    def run():
        barrier.wait()
        try:
            results.append(migrate(postgres_dsn, schema=pg_schema, partitions=2))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == [SCHEMA_VERSION] * 6
    assert migrate(postgres_dsn, schema=pg_schema) == SCHEMA_VERSION
    versions = [r[0] for r in admin.execute(q("SELECT version FROM {s}.schema_version", pg_schema))]
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    with PostgresStore(postgres_dsn, schema=pg_schema, migrate=False) as store:
        store.create_session(Session("s", T0))
        assert store.version("s") == 0


def test_without_migrate_a_missing_schema_says_how_to_make_it(postgres_dsn, pg_schema):
    with pytest.raises(StoreError, match="turnlog migrate"):
        PostgresStore(postgres_dsn, schema=pg_schema, migrate=False)


def test_a_schema_from_a_newer_turnlog_is_refused(postgres_dsn, pg_schema, admin):
    migrate(postgres_dsn, schema=pg_schema)
    admin.execute(
        q("INSERT INTO {s}.schema_version (version) VALUES (%s)", pg_schema), (SCHEMA_VERSION + 1,)
    )
    with pytest.raises(StoreError, match="newer turnlog"):
        PostgresStore(postgres_dsn, schema=pg_schema)
    with pytest.raises(StoreError, match="newer turnlog"):
        migrate(postgres_dsn, schema=pg_schema)


def test_a_schema_of_something_else_is_refused(postgres_dsn, pg_schema, admin):
    admin.execute(q("CREATE SCHEMA {s}", pg_schema))
    admin.execute(q("CREATE TABLE {s}.invoices (id int)", pg_schema))
    with pytest.raises(CorruptData, match="invoices"):
        PostgresStore(postgres_dsn, schema=pg_schema)
    tables = admin.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s", (pg_schema,)
    ).fetchall()
    assert tables == [("invoices",)]


def test_a_schema_whose_version_rows_are_gone_is_corrupt_data(postgres_dsn, pg_schema, admin):
    migrate(postgres_dsn, schema=pg_schema)
    admin.execute(q("DELETE FROM {s}.schema_version", pg_schema))
    for migrating in (False, True):
        with pytest.raises(CorruptData, match="schema version is missing"):
            PostgresStore(postgres_dsn, schema=pg_schema, migrate=migrating)


def test_a_store_connects_once_to_open_and_finds_its_keys_again(
    postgres_dsn, pg_schema, monkeypatch
):
    """The connection that checks the server is the pool's first: opening a store (pool_min 1)
    connects once, not twice; reopened, it finds the schema, its partitions and its keys."""
    connects = []
    plain = psycopg.Connection.connect.__func__

    def counted(cls, *args, **kwargs):
        connects.append(cls)
        return plain(cls, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(counted))
    with PostgresStore(postgres_dsn, schema=pg_schema, indexed_keys=["user"]) as store:
        store.create_session(Session("s", T0, metadata={"user": "ann"}))
    connects.clear()
    with PostgresStore(
        postgres_dsn, schema=pg_schema, partitions=None, indexed_keys=["user"], pool_min=1
    ) as store:
        assert len(connects) == 1
        assert store.indexed_keys == frozenset({"user"})
        assert [s.id for s in store.find_by_metadata("user", "ann")] == ["s"]
        assert len(connects) == 1  # the first operation used the same connection


def test_partitioning_is_fixed_when_the_schema_is_made(postgres_dsn, pg_schema):
    migrate(postgres_dsn, schema=pg_schema, partitions=2)
    with pytest.raises(StoreError, match="2 partitions"):
        PostgresStore(postgres_dsn, schema=pg_schema, partitions=4)
    with pytest.raises(StoreError, match=r"without partitions|2 partitions"):
        migrate(postgres_dsn, schema=pg_schema, partitions=3)
    PostgresStore(postgres_dsn, schema=pg_schema).close()  # None accepts what exists


@pytest.mark.parametrize(
    "schema", ['x"; DROP SCHEMA public; --', "a-b", "", "9lives", "x" * 64, "ünï"]
)
def test_schema_names_must_be_plain_identifiers(postgres_dsn, schema):
    with pytest.raises(InvalidInput, match="schema name"):
        PostgresStore(postgres_dsn, schema=schema)
    with pytest.raises(InvalidInput, match="schema name"):
        migrate(postgres_dsn, schema=schema)


# -- pools and connections ------------------------------------------------------------------------


def test_a_store_closes_the_pool_it_made_and_only_that(postgres_dsn, pg_schema):
    store = PostgresStore(postgres_dsn, schema=pg_schema)
    store.close()
    assert store._pool.closed
    with pytest.raises(StoreError, match="closed"):
        store.version("s")
    with ConnectionPool(
        postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True
    ) as pool:
        with PostgresStore(pool, schema=pg_schema) as store:
            store.create_session(Session("s", T0))
        assert not pool.closed
        with PostgresStore(pool, schema=pg_schema) as again:
            assert again.find_session("s") is not None


def test_a_pool_without_autocommit_is_refused(postgres_dsn, pg_schema):
    with (
        ConnectionPool(postgres_dsn, min_size=1, max_size=1, open=True) as pool,
        pytest.raises(InvalidInput, match="autocommit"),
    ):
        PostgresStore(pool, schema=pg_schema)


def test_an_unreachable_server_is_a_clear_error():
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"cannot connect to PostgreSQL.*port 1"):
        PostgresStore("postgresql://postgres@127.0.0.1:1/test", connect_timeout=2)
    assert time.monotonic() - started < 10


# -- isolation and bad input ----------------------------------------------------------------------

HOSTILE = [
    "a'b",
    'a"b',
    "a%",
    "%",
    "%s",
    "%(sid)s",
    "{a}",
    "{s}",
    "a*",
    "*",
    "a\\b",
    "ünï €",
    "'; DELETE FROM events; --",
    "$1",
    "$fn$",
    "a_",
    "_",
    "日本語 🌦",
]


@pytest.mark.parametrize(
    "bad", [0, -1, float("nan"), float("inf"), "10", True, None, timedelta(days=2)]
)
def test_a_connect_timeout_that_is_not_a_duration_is_refused_before_connecting(bad):
    # Issue 7 item 10: seconds or a timedelta, positive and finite, as every duration.
    with pytest.raises(InvalidInput, match="connect_timeout"):
        PostgresStore("postgresql://postgres@127.0.0.1:1/test", connect_timeout=bad)


def test_connect_timeout_takes_a_timedelta(postgres_dsn, pg_schema):
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
        PostgresStore(
            "postgresql://postgres@127.0.0.1:1/test", connect_timeout=timedelta(seconds=2)
        )
    assert time.monotonic() - started < 6
    with PostgresStore(postgres_dsn, schema=pg_schema, connect_timeout=timedelta(seconds=5)) as s:
        s.create_session(Session("a", T0))
        assert s.version("a") == 0


def test_hostile_session_ids_reach_only_their_own_rows(store):
    for i, sid in enumerate(HOSTILE):
        store.create_session(Session(sid, T0 + timedelta(seconds=i), metadata={"owner": sid}))
        store.append_events(sid, turn(sid, i), 0)
    assert store.delete_session("%") is True
    assert store.delete_session("*") is True
    assert store.delete_session("a_x") is False
    survivors = [s for s in HOSTILE if s not in ("%", "*")]
    assert {s.id for s in store.list_sessions()} == set(survivors)
    for i, sid in enumerate(HOSTILE):
        if sid in ("%", "*"):
            continue
        assert [e.message.text for e in store.events(sid) if e.message] == [
            f"question {i}",
            f"answer {i}",
        ]
        assert len(store.view(sid)) == 2
        assert [s.id for s in store.find_by_metadata("owner", sid)] == [sid]


def test_hostile_metadata_is_matched_literally(store):
    nasty = {
        "owner": "x'); DROP TABLE sessions; --",
        "o'wn%er*": 'x"{y}\n%',
        "{}": "}{",
        "line\nbreak": "tab\there",
        "ünï": "€ 🌦",
        "%s": "%(name)s",
    }
    store.create_session(Session("a", T0, metadata=nasty))
    store.create_session(Session("b", T0, metadata={"owner": "x", "o'wn%er*": "x"}))
    for name, value in nasty.items():
        assert [s.id for s in store.find_by_metadata(name, value)] == ["a"], name
    assert store.find_by_metadata("owner", "x'%") == []
    assert store.find_by_metadata("o%", "%") == []
    assert store.find_by_metadata("owner", "%") == []
    assert store.find_session("a").metadata == nasty


def test_metadata_postgresql_cannot_hold_is_refused_with_nothing_written(store):
    with pytest.raises(InvalidInput, match="U\\+0000"):
        store.create_session(Session("a", T0, metadata={"k": "nul\x00byte"}))
    assert store.find_session("a") is None
    assert store.find_by_metadata("k", "nul\x00byte") == []


def test_find_by_metadata_is_type_exact_on_indexed_and_other_keys(store):
    values = {"owner": 1, "tier": 1}
    store.create_session(Session("int", T0, metadata=values))
    store.create_session(Session("str", T0, metadata={"owner": "1", "tier": "1"}))
    store.create_session(Session("float", T0, metadata={"owner": 1.0, "tier": 1.0}))
    store.create_session(Session("bool", T0, metadata={"owner": True, "tier": True}))
    store.create_session(Session("list", T0, metadata={"owner": [1], "tier": [1]}))
    for key in ("owner", "tier"):  # indexed, and not
        assert [s.id for s in store.find_by_metadata(key, 1)] == ["int"]
        assert [s.id for s in store.find_by_metadata(key, "1")] == ["str"]
        assert [s.id for s in store.find_by_metadata(key, True)] == ["bool"]
        assert store.find_by_metadata(key, False) == []


def test_indexed_lookups_use_the_index_table_and_follow_saves(store, admin, pg_schema):
    long_value = "v" * 3000
    store.create_session(Session("a", T0, metadata={"owner": "ann", "user_id": long_value}))
    rows = admin.execute(
        q("SELECT name, value, session_id FROM {s}.session_index ORDER BY name", pg_schema)
    ).fetchall()
    assert rows == [("owner", '"ann"', "a")]  # the long value is not indexed
    assert [s.id for s in store.find_by_metadata("user_id", long_value)] == ["a"]
    store.save_session(Session("a", T0, metadata={"owner": "bob"}))
    assert store.find_by_metadata("owner", "ann") == []
    assert [s.id for s in store.find_by_metadata("owner", "bob")] == ["a"]
    store.delete_session("a")
    assert admin.execute(q("SELECT count(*) FROM {s}.session_index", pg_schema)).fetchone() == (0,)


def test_a_newly_indexed_key_is_filled_in_for_existing_sessions(postgres_dsn, pg_schema, admin):
    with PostgresStore(postgres_dsn, schema=pg_schema, indexed_keys=("owner",)) as first:
        first.create_session(Session("a", T0, metadata={"team": "red"}))
        assert "team" not in first.indexed_keys
        with PostgresStore(
            postgres_dsn, schema=pg_schema, indexed_keys=("owner", "team")
        ) as second:
            assert {"owner", "team"} <= second.indexed_keys
            assert [s.id for s in second.find_by_metadata("team", "red")] == ["a"]
            # The first handle still writes index rows for the key the second one added.
            first.create_session(Session("b", T0, metadata={"team": "red"}))
            assert [s.id for s in second.find_by_metadata("team", "red")] == ["a", "b"]
            assert [s.id for s in first.find_by_metadata("team", "red")] == ["a", "b"]
    indexed = admin.execute(
        q("SELECT session_id FROM {s}.session_index WHERE name = 'team' ORDER BY 1", pg_schema)
    ).fetchall()
    assert indexed == [("a",), ("b",)]


# -- damage ---------------------------------------------------------------------------------------


def _damage(admin, schema, sid, seq, body=b"\x00{not json"):
    admin.execute(
        q("UPDATE {s}.events SET body = %s WHERE session_id = %s AND seq = %s", schema),
        (body, sid, seq),
    )


def test_a_damaged_row_names_its_session_and_seq_and_spares_others(store, admin, pg_schema):
    service = SessionService(store)
    for sid in ("a", "b"):
        service.create(sid)
        for i in range(3):
            service.append_message(sid, Message.user(f"{sid}{i}"))
    _damage(admin, pg_schema, "a", 2)
    with pytest.raises(CorruptData, match=r"seq 2 .* session 'a'"):
        store.events("a")
    with pytest.raises(CorruptData, match=r"seq 2 .* session 'a'"):
        store.view("a")
    assert [e.message.text for e in store.events("b") if e.message] == ["b0", "b1", "b2"]
    assert [e.message.text for e in store.view("b") if e.message] == ["b0", "b1", "b2"]
    assert store.version("a") == 3
    service.append_message("a", Message.user("still writable"))
    assert store.version("a") == 4


def test_reading_the_view_does_not_read_the_covered_history(store, admin, pg_schema):
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
    _damage(admin, pg_schema, "s", 1)  # a covered event
    assert store.view("s") == view_before
    with pytest.raises(CorruptData):
        store.events("s")


def test_a_damaged_boundary_pointer_is_reported(store, admin, pg_schema):
    store.create_session(Session("s", T0))
    store.append_events("s", turn("s", 1), 0)
    admin.execute(q("UPDATE {s}.sessions SET boundary_seq = 99 WHERE id = 's'", pg_schema))
    with pytest.raises(CorruptData, match="boundary seq 99"):
        store.view("s")


# -- TTL ------------------------------------------------------------------------------------------


def test_delete_expired_deletes_events_and_frees_their_ids(store, admin, pg_schema):
    events = turn("old", 1)
    store.create_session(Session("old", T0, expires_at=T0 + timedelta(minutes=1)))
    store.create_session(Session("new", T0, expires_at=T0 + timedelta(hours=1)))
    store.append_events("old", events, 0)
    store.append_events("new", turn("new", 1), 0)
    assert store.delete_expired(T0 + timedelta(minutes=30)) == 1
    for table in ("events", "session_index"):
        left = admin.execute(
            q(f"SELECT count(*) FROM {{s}}.{table} WHERE session_id = 'old'", pg_schema)
        ).fetchone()
        assert left == (0,), table
    # The ids of a deleted session may be used again, by any session.
    again = [SessionEvent.for_message("new", e.message, event_id=e.id) for e in events]
    assert store.append_events("new", again, 2) == 4


def _waiters(admin, schema):
    return admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND position(%s in query) > 0",
        (schema,),
    ).fetchone()[0]


def _wait_for_waiters(admin, schema, n):
    deadline = time.monotonic() + 10
    while _waiters(admin, schema) < n:
        assert time.monotonic() < deadline, f"{n} writers never queued for the row lock"
        time.sleep(0.01)


def test_a_ttl_extended_concurrently_is_kept(store, postgres_dsn, pg_schema, admin):
    store.create_session(Session("a", T0, expires_at=T0 + timedelta(minutes=1)))
    store.append_events("a", turn("a", 1), 0)
    deleted = []
    extend = threading.Thread(
        target=store.save_session,
        args=(Session("a", T0, expires_at=T0 + timedelta(hours=2)),),
    )
    sweep = threading.Thread(
        target=lambda: deleted.append(store.delete_expired(T0 + timedelta(hours=1)))
    )
    with psycopg.connect(postgres_dsn, autocommit=True) as holder, holder.transaction():
        # Hold the row, so both writers queue for it: the extension first, then the sweep.
        holder.execute(q("SELECT 1 FROM {s}.sessions WHERE id = 'a' FOR UPDATE", pg_schema))
        extend.start()
        _wait_for_waiters(admin, pg_schema, 1)
        sweep.start()
        _wait_for_waiters(admin, pg_schema, 2)
    extend.join(10)
    sweep.join(10)
    assert deleted == [0]
    found = store.find_session("a")
    assert found is not None and found.expires_at == T0 + timedelta(hours=2)
    assert store.version("a") == 2


def test_an_append_racing_a_delete_leaves_no_orphans(store, postgres_dsn, pg_schema, admin):
    store.create_session(Session("a", T0))
    store.append_events("a", turn("a", 1), 0)
    outcome = []

    def append():
        try:
            outcome.append(store.append_events("a", turn("a", 2), 2))
        except Exception as exc:
            outcome.append(type(exc).__name__)

    writer = threading.Thread(target=append)
    with psycopg.connect(postgres_dsn, autocommit=True) as deleter, deleter.transaction():
        # A delete in flight: it holds the session's advisory lock, so the append waits ...
        deleter.execute("SELECT pg_advisory_xact_lock(%s, hashtext('a'))", (lock_class(pg_schema),))
        writer.start()
        _wait_for_waiters(admin, pg_schema, 1)
        deleter.execute(q("SELECT {s}.delete_session('a')", pg_schema))
    writer.join(10)
    # ... and then finds no session; nothing of it is left behind.
    assert outcome == ["SessionNotFound"]
    for table in ("events", "session_index"):
        count = admin.execute(q(f"SELECT count(*) FROM {{s}}.{table}", pg_schema)).fetchone()
        assert count == (0,), table


@pytest.mark.parametrize("version", [0, 2])
def test_a_version_checked_append_begun_during_a_delete_finds_no_session(
    store, postgres_dsn, pg_schema, admin, version
):
    # Issue 7 item 1: the one-statement fast path (one event, an expected version) took its
    # snapshot before a delete committed and made its check after, so it wrote into the deleted
    # session and a session made again with the same id started at the old version.
    store.create_session(Session("a", T0))
    if version:
        store.append_events("a", turn("a", 1), 0)
    outcome = []

    def append():
        event = SessionEvent.for_message("a", Message.user("late"), event_id="late")
        try:
            outcome.append(store.append_events("a", [event], version))
        except Exception as exc:
            outcome.append(type(exc).__name__)

    writer = threading.Thread(target=append)
    with psycopg.connect(postgres_dsn, autocommit=True) as deleter, deleter.transaction():
        # The delete has done its work but not committed: the append starts now, and waits.
        assert deleter.execute(q("SELECT {s}.delete_session('a')", pg_schema)).fetchone() == (1,)
        writer.start()
        _wait_for_waiters(admin, pg_schema, 1)
    writer.join(10)
    assert outcome == ["SessionNotFound"]
    for table in ("events", "session_index"):
        count = admin.execute(q(f"SELECT count(*) FROM {{s}}.{table}", pg_schema)).fetchone()
        assert count == (0,), table
    store.create_session(Session("a", T0))
    assert store.version("a") == 0
    assert store.events("a") == []
    assert store.view("a") == []


def test_a_delete_waits_for_an_append_in_flight_and_removes_its_events(
    store, postgres_dsn, pg_schema, admin
):
    store.create_session(Session("a", T0))
    store.create_session(Session("b", T0))
    deleted = []
    deleter = threading.Thread(target=lambda: deleted.append(store.delete_session("a")))
    with psycopg.connect(postgres_dsn, autocommit=True) as writer, writer.transaction():
        # An append in flight holds the session's advisory lock shared, and has written a row.
        writer.execute(
            "SELECT pg_advisory_xact_lock_shared(%s, hashtext('a'))", (lock_class(pg_schema),)
        )
        writer.execute(
            q("SELECT {s}.append_one('a', 0, 'e1', 'MESSAGE', 0, 'user', false, %s)", pg_schema),
            (b'{"v":1}',),
        )
        deleter.start()
        _wait_for_waiters(admin, pg_schema, 1)
    deleter.join(10)
    assert deleted == [True]
    assert admin.execute(q("SELECT count(*) FROM {s}.events", pg_schema)).fetchone() == (0,)
    store.append_events("b", [SessionEvent.for_message("b", Message.user("x"), event_id="e1")], 0)


def test_appends_at_the_end_from_many_threads_all_land_in_order(store):
    store.create_session(Session("tail", T0))
    errors = []

    def write(w):
        try:
            for i in range(60):
                event = SessionEvent.for_message(
                    "tail", Message.user(f"{w}-{i}"), event_id=f"{w}-{i}"
                )
                store.append_event(event)
                if i % 3 == 0:  # writers with an expected version race them too
                    while True:
                        try:
                            version = store.version("tail")
                            store.append_events(
                                "tail",
                                [
                                    SessionEvent.for_message(
                                        "tail", Message.user("x"), event_id=f"{w}-{i}-v"
                                    )
                                ],
                                version,
                            )
                            break
                        except VersionConflict:
                            continue
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    log = store.events("tail")
    assert [e.seq for e in log] == list(range(1, 6 * 80 + 1))
    for w in range(6):
        mine = [e.id for e in log if e.id.startswith(f"{w}-") and not e.id.endswith("-v")]
        assert mine == [f"{w}-{i}" for i in range(60)]


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("created_at", "infinity"),
        ("created_at", "20000-01-01 00:00:00+00"),
        ("expires_at", "-infinity"),
        ("expires_at", "0001-01-01 00:00:00+00 BC"),
        ("metadata", "[1, 2]"),
    ],
)
def test_a_damaged_session_row_is_corrupt_data(store, admin, pg_schema, column, value):
    store.create_session(Session("a", T0))
    store.create_session(Session("b", T0))
    cast = "jsonb" if column == "metadata" else "timestamptz"
    admin.execute(
        q(f"UPDATE {{s}}.sessions SET {column} = %s::{cast} WHERE id = 'a'", pg_schema), (value,)
    )
    with pytest.raises(CorruptData):
        store.find_session("a")
    with pytest.raises(CorruptData):
        store.list_sessions()
    assert store.find_session("b") == Session("b", T0)


@pytest.mark.parametrize("micros", [2**63 - 1, -(2**63)])
def test_a_damaged_event_timestamp_is_corrupt_data(store, admin, pg_schema, micros):
    store.create_session(Session("s", T0))
    store.append_events("s", turn("s", 1), 0)
    admin.execute(q('UPDATE {s}.events SET "timestamp" = %s WHERE seq = 2', pg_schema), (micros,))
    for read in (store.events, store.view):
        with pytest.raises(CorruptData, match=r"seq 2 .* session 's'"):
            read("s")


def test_a_delete_never_deadlocks_with_a_compaction_in_flight(
    store, postgres_dsn, pg_schema, admin
):
    # A batch holding a boundary (a compaction) takes the session's advisory lock shared, inserts,
    # then updates the session row's boundary pointer. A delete that deleted the row first and
    # then waited for the advisory lock made a cycle: PostgreSQL broke it after deadlock_timeout
    # by failing the delete. Deletes take the advisory lock before they touch the row.
    store.create_session(Session("a", T0))
    store.append_events("a", turn("a", 1), 0)
    outcome = []

    def delete():
        try:
            outcome.append(store.delete_session("a"))
        except Exception as exc:
            outcome.append(exc)

    deleter = threading.Thread(target=delete)
    with psycopg.connect(postgres_dsn, autocommit=True) as writer, writer.transaction():
        writer.execute(
            "SELECT pg_advisory_xact_lock_shared(%s, hashtext('a'))", (lock_class(pg_schema),)
        )
        deleter.start()
        _wait_for_waiters(admin, pg_schema, 1)
        started = time.monotonic()
        writer.execute(q("UPDATE {s}.sessions SET boundary_seq = 2 WHERE id = 'a'", pg_schema))
        assert time.monotonic() - started < 0.5, "the compaction waited for the delete"
    deleter.join(10)
    assert outcome == [True]
    assert admin.execute(q("SELECT count(*) FROM {s}.events", pg_schema)).fetchone() == (0,)


# -- the warm connections never starve callers waiting in the pool --------------------------------


def test_callers_waiting_in_the_pool_get_connections_when_all_are_kept_warm(
    postgres_dsn, pg_schema
):
    """With pool_min == pool_max every connection may be kept warm outside the pool: a caller
    already waiting in the pool must still get one, not time out while later callers take the
    warm ones (found by bench/async_loop.py: 24 threads on 20 connections timed out)."""
    store = PostgresStore(postgres_dsn, schema=pg_schema, pool_min=2, pool_max=2, connect_timeout=3)
    errors = []

    def writer(n):
        sid = f"w{n}"
        try:
            store.create_session(Session(id=sid, created_at=T0))
            for i in range(40):
                store.append_events(sid, turn(sid, i), 2 * i)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        assert all(store.version(f"w{n}") == 80 for n in range(8))
    finally:
        store.close()


# -- attachments ----------------------------------------------------------------------------------


def image(sid, data, text="look"):
    return SessionEvent.for_message(sid, Message.user(text, ImagePart("image/png", data=data)))


def ref_of(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def attachment_rows(admin, schema):
    """{ref: refs} of the attachments table."""
    return dict(admin.execute(q("SELECT ref, refs FROM {s}.attachments", schema)).fetchall())


def assert_counts_match_links(admin, schema):
    """Every attachment row counts exactly the sessions linking it, and every link has a row
    and a session: the invariant deletes rely on."""
    links = dict(
        admin.execute(
            q("SELECT ref, count(*) FROM {s}.session_attachments GROUP BY ref", schema)
        ).fetchall()
    )
    assert attachment_rows(admin, schema) == links
    orphans = admin.execute(
        q(
            "SELECT count(*) FROM {s}.session_attachments l WHERE NOT EXISTS "
            "(SELECT 1 FROM {s}.sessions s WHERE s.id = l.session_id)",
            schema,
        )
    ).fetchone()
    assert orphans == (0,)


def test_the_bytes_are_stored_in_page_sized_rows_and_a_range_reads_only_its_rows(
    store, admin, pg_schema
):
    storage = admin.execute(
        "SELECT a.attstorage FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = 'attachment_chunks' AND a.attname = 'data'",
        (pg_schema,),
    ).fetchone()
    assert storage == ("p",)  # in line, never compressed
    data = blob("big", 4 << 20)
    store.create_session(Session("s", T0))
    store.append_events("s", [image("s", data)], 0)
    assert store.read_attachment("s", ref_of(data), 3_000_000, 100) == data[3_000_000:3_000_100]
    pages, rows, toast = admin.execute(
        q(
            "SELECT pg_relation_size(c.oid) / 8192, (SELECT count(*) FROM {s}.attachment_chunks), "
            "pg_relation_size(c.reltoastrelid) FROM pg_class c "
            "WHERE c.oid = '{s}.attachment_chunks'::regclass",
            pg_schema,
        )
    ).fetchone()
    assert rows == -(-len(data) // ddl.CHUNK_BYTES) and pages == rows  # one row to a page
    assert toast == 0  # nothing out of line

    def buffers(offset, length):
        params = read_params("s", ref_of(data), offset, length)
        plan = admin.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + store._q.read_attachment, params
        ).fetchone()[0]
        top = plan[0]["Plan"]
        return top["Shared Hit Blocks"] + top["Shared Read Blocks"]

    # 4 MiB is 517 rows, a page each; 100 bytes late in it are one or two.
    whole, late = buffers(0, 4 << 20), buffers(3_000_000, 100)
    assert whole > 500 and late < 30, (whole, late)


def test_a_view_or_log_read_never_touches_the_attachment_tables(
    store, postgres_dsn, pg_schema, admin
):
    store.create_session(Session("s", T0))
    data = blob("unread")
    store.append_events("s", [image("s", data), turn("s", 1)[1]], 0)
    done = []

    def read_all():
        done.append(
            (
                len(store.view("s")),
                len(store.events("s")),
                len(store.events_after("s", 0, 10)),
                store.version("s"),
            )
        )

    def read_bytes():
        done.append(len(store.read_attachment("s", ref_of(data))))

    with psycopg.connect(postgres_dsn, autocommit=True) as holder, holder.transaction():
        tables = "{s}.attachments, {s}.session_attachments"
        holder.execute(q(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE", pg_schema))
        reader = threading.Thread(target=read_all)
        reader.start()
        reader.join(10)
        assert done == [(2, 2, 2, 2)], "a read waited for the attachment tables"
        # The lock does hold off what reads them:
        attachment_reader = threading.Thread(target=read_bytes)
        attachment_reader.start()
        _wait_for_waiters(admin, pg_schema, 1)
    attachment_reader.join(10)
    assert done[1] == len(data)


def test_an_append_of_bytes_whose_last_holder_is_being_deleted_stores_them_again(
    store, postgres_dsn, pg_schema, admin
):
    data = blob("handover")
    for sid in ("doomed", "keeper"):
        store.create_session(Session(sid, T0))
    store.append_events("doomed", [image("doomed", data)], 0)
    outcome = []

    def append():
        try:
            outcome.append(store.append_events("keeper", [image("keeper", data)], 0))
        except Exception as exc:  # pragma: no cover - reported below
            outcome.append(exc)

    writer = threading.Thread(target=append)
    with psycopg.connect(postgres_dsn, autocommit=True) as deleter, deleter.transaction():
        # The delete has counted the bytes down to 0 and deleted their row, not committed yet.
        delete = q("SELECT {s}.delete_session('doomed')", pg_schema)
        assert deleter.execute(delete).fetchone() == (1,)
        writer.start()
        _wait_for_waiters(admin, pg_schema, 1)  # the append's upsert waits for that row
    writer.join(10)
    assert outcome == [1]
    assert attachment_rows(admin, pg_schema) == {ref_of(data): 1}
    assert store.read_attachment("keeper", ref_of(data)) == data
    assert_counts_match_links(admin, pg_schema)


def test_a_delete_of_the_last_holder_waits_for_an_append_linking_the_same_bytes(
    store, postgres_dsn, pg_schema, admin
):
    data = blob("kept")
    for sid in ("doomed", "keeper"):
        store.create_session(Session(sid, T0))
    store.append_events("doomed", [image("doomed", data)], 0)
    split = split_attachments([image("keeper", data)])
    statement, params = Batch(split.events, 0, split).call(store._q, "keeper", 0)
    assert statement == store._q.append_attached
    deleted = []
    deleter = threading.Thread(target=lambda: deleted.append(store.delete_session("doomed")))
    with psycopg.connect(postgres_dsn, autocommit=True) as writer, writer.transaction():
        # The append has linked the bytes and counted them (2), not committed yet.
        assert writer.execute(statement, params).fetchone() == (1,)
        deleter.start()
        _wait_for_waiters(admin, pg_schema, 1)  # the delete waits for the row's lock
    deleter.join(10)
    assert deleted == [True]
    assert attachment_rows(admin, pg_schema) == {ref_of(data): 1}
    assert store.read_attachment("keeper", ref_of(data)) == data
    assert_counts_match_links(admin, pg_schema)


def test_a_count_is_of_sessions_and_a_sweep_counts_down_once_per_expired_session(
    store, admin, pg_schema
):
    shared, own = blob("shared"), blob("own")
    for sid, days in (("old1", 0), ("old2", 0), ("live", 9)):
        store.create_session(Session(sid, T0, expires_at=T0 + timedelta(days=days, hours=1)))
        store.append_events(sid, [image(sid, shared, "a"), turn(sid, 1)[1]], 0)
    store.append_events("old1", [image("old1", own, "b")], 2)
    store.append_events("live", [image("live", shared, "again")], 2)  # held already: no count
    assert attachment_rows(admin, pg_schema) == {ref_of(shared): 3, ref_of(own): 1}
    assert store.delete_expired(T0 + timedelta(days=1)) == 2
    assert attachment_rows(admin, pg_schema) == {ref_of(shared): 1}
    assert store.delete_session("live")
    assert attachment_rows(admin, pg_schema) == {}


def test_appends_and_deletes_of_shared_bytes_racing_keep_the_counts_exact(
    postgres_dsn, pg_schema, admin
):
    blobs = [blob(f"pool{i}") for i in range(4)]
    errors = []

    def work(w):
        try:
            with PostgresStore(postgres_dsn, schema=pg_schema, pool_max=2) as mine:
                for i in range(25):
                    sid = f"w{w}-{i}"
                    mine.create_session(Session(sid, T0))
                    picked = [blobs[(w + i) % 4], blobs[(w * i) % 4]]
                    parts = [ImagePart("image/png", data=b) for b in picked]
                    event = SessionEvent.for_message(sid, Message.user("x", *parts))
                    with contextlib.suppress(SessionNotFound):  # deleted by another worker
                        mine.append_events(sid, [event], 0)
                    if i % 2:
                        mine.delete_session(f"w{(w + 1) % 4}-{i - 1}")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    migrate(postgres_dsn, schema=pg_schema)
    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert_counts_match_links(admin, pg_schema)
    with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        for s in store.list_sessions():
            for event in store.events(s.id):
                for part in event.message.parts:
                    if isinstance(part, ImagePart):
                        assert store.read_attachment(s.id, part.ref) in blobs
            assert store.delete_session(s.id)
    assert attachment_rows(admin, pg_schema) == {}


def test_a_schema_at_version_2_keeps_its_attachments_when_upgraded(
    postgres_dsn, pg_schema, admin, monkeypatch
):
    # Schema 2 kept the bytes in attachments.data (TOAST); 3 moves them to chunk rows.
    small, large = blob("two small"), blob("two large", 3 * ddl.CHUNK_BYTES + 5)
    with monkeypatch.context() as patched:
        patched.setattr(ddl, "SCHEMA_VERSION", 2)
        patched.setattr(schema_module, "SCHEMA_VERSION", 2)
        migrate(postgres_dsn, schema=pg_schema)
    # What a schema-2 store held: a's two attachments, b's one (shared with a).
    admin.execute(
        q(
            "INSERT INTO {s}.sessions (id, created_at, metadata) "
            "VALUES ('a', now(), '{{}}'), ('b', now(), '{{}}')",
            pg_schema,
        )
    )
    for sid, data in (("a", small), ("a", large), ("b", large)):
        admin.execute(
            q("INSERT INTO {s}.session_attachments VALUES (%s, %s)", pg_schema), (sid, ref_of(data))
        )
        admin.execute(
            q(
                "INSERT INTO {s}.attachments AS x VALUES (%s, %s, 1, %s) "
                "ON CONFLICT (ref) DO UPDATE SET refs = x.refs + 1",
                pg_schema,
            ),
            (ref_of(data), len(data), data),
        )
    with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        assert store.read_attachment("a", ref_of(small)) == small
        assert store.read_attachment("b", ref_of(large)) == large
        edge = ddl.CHUNK_BYTES - 2
        assert store.read_attachment("a", ref_of(large), edge, 9) == large[edge : edge + 9]
        assert store.delete_session("a")
        assert store.read_attachment("b", ref_of(large)) == large
        assert store.delete_session("b")
    assert attachment_rows(admin, pg_schema) == {}
    chunks = admin.execute(q("SELECT count(*) FROM {s}.attachment_chunks", pg_schema)).fetchone()
    assert chunks == (0,)


@pytest.mark.parametrize("partitions", [None, 2])
def test_a_schema_at_version_1_with_data_is_upgraded(
    postgres_dsn, pg_schema, admin, monkeypatch, partitions
):
    # What turnlog made before attachments: version 1, written by the store as it was then
    # (text, a small inline image, a boundary, an expiring session).
    small = b"\x89PNG" + bytes(100)
    with monkeypatch.context() as patched:
        patched.setattr(ddl, "SCHEMA_VERSION", 1)
        patched.setattr(schema_module, "SCHEMA_VERSION", 1)
        with PostgresStore(postgres_dsn, schema=pg_schema, partitions=partitions) as old:
            service = SessionService(old)
            service.create("s")
            for i in range(3):
                old.append_events("s", turn("s", i), 2 * i)
            old.append_events("s", [image("s", small, "tiny"), turn("s", 9)[1]], 6)
            service.compact(
                "s", lambda r: True, WindowCompactionStrategy(CompactionWindow.last_turns(1))
            )
            old.create_session(Session("brief", T0, expires_at=T0 + timedelta(hours=1)))
            old.append_events("brief", turn("brief", 1), 0)
            log, view = old.events("s"), old.view("s")
    versions = [r[0] for r in admin.execute(q("SELECT version FROM {s}.schema_version", pg_schema))]
    assert versions == [1]
    assert admin.execute("SELECT to_regclass(%s)", (f"{pg_schema}.attachments",)).fetchone() == (
        None,
    )
    with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        versions = [
            r[0] for r in admin.execute(q("SELECT version FROM {s}.schema_version", pg_schema))
        ]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        assert store.events("s") == log and store.view("s") == view
        data = blob("after the upgrade")
        store.append_events("s", [image("s", data)], len(log))
        assert store.read_attachment("s", ref_of(data)) == data
        assert store.delete_expired(T0 + timedelta(days=1)) == 1
        assert store.delete_session("s")
    assert attachment_rows(admin, pg_schema) == {}
    assert admin.execute(q("SELECT count(*) FROM {s}.events", pg_schema)).fetchone() == (0,)
