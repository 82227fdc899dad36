"""AsyncPostgresStore on the real server: the contract, and what only the async store does.

Every test gets a fresh PostgreSQL schema with a random name, dropped afterwards. The async cases
run their own event loop with `asyncio.run` inside plain test functions.
"""

import asyncio
import time
import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from test_postgres_store import PostgresAttachmentHooks
from turnlog import InvalidInput, Message, Session, SessionEvent, StoreError, ToolCall, ToolResult
from turnlog.service_async import AsyncSessionService
from turnlog.stores.postgres import (
    SCHEMA_VERSION,
    AsyncPostgresStore,
    PostgresStore,
    connections_async,
    migrate_async,
)
from turnlog.stores.postgres.ddl import lock_class
from turnlog.testing import AsyncStoreContract

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOWHERE = "postgresql://postgres@127.0.0.1:1/test"


def drop_schema(dsn, schema):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def pg_schema(postgres_dsn):
    """A fresh schema name; the schema is dropped after the test."""
    name = f"tl_async_{uuid.uuid4().hex[:12]}"
    yield name
    drop_schema(postgres_dsn, name)


@pytest.fixture
def admin(postgres_dsn):
    """A plain autocommit connection, for looking behind the store's back."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def app():
    """A fresh application_name, to find the store's server connections."""
    return f"tl-async-{uuid.uuid4().hex[:8]}"


def backends(admin, app):
    """The server connections with application_name `app`."""
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
    ).fetchone()
    return row[0]


def backends_once_closed(admin, app, wait=5.0):
    """`backends`, once the server has seen the closed connections go: a backend leaves
    pg_stat_activity a moment after its client disconnects (it never reaches 0 if one is
    still open)."""
    deadline = time.monotonic() + wait
    while (count := backends(admin, app)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return count


def turn(sid, n):
    return [
        SessionEvent.for_message(sid, Message.user(f"question {n}")),
        SessionEvent.for_message(sid, Message.assistant(f"answer {n}")),
    ]


def batch_of(sid, n, tag="e"):
    return [
        SessionEvent.for_message(
            sid,
            Message.user(f"{tag} {i}") if i % 2 == 0 else Message.assistant(f"{tag} {i}"),
            event_id=f"{sid}-{tag}{i}",
        )
        for i in range(n)
    ]


def leftover_tasks():
    me = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not me and not t.done()]


# -- the contract -------------------------------------------------------------------------------


class TestAsyncPostgresStore(PostgresAttachmentHooks, AsyncStoreContract):
    property_examples = 50  # the validation property test, on a server

    partitions = None

    @pytest.fixture(autouse=True)
    def _schema(self, postgres_dsn, pg_schema):
        self.dsn, self.schema_name = postgres_dsn, pg_schema

    async def make_async_store(self, tmp_path):
        # Not opened here: the first call of each case opens it (the race cases: many at once).
        return AsyncPostgresStore(
            self.dsn, schema=self.schema_name, partitions=self.partitions, pool_max=4
        )

    async def open_again_async(self, store, tmp_path):
        # The first handle may not have opened yet: either may make the schema.
        return await AsyncPostgresStore(
            self.dsn, schema=self.schema_name, partitions=self.partitions, pool_max=4
        ).open()


class TestPartitionedAsyncPostgresStore(TestAsyncPostgresStore):
    partitions = 4


# -- opening: no I/O in the constructor, lazily on first use, once ------------------------------


def test_the_constructor_connects_to_nothing(postgres_dsn, pg_schema, admin, app):
    # No event loop runs here, and nothing is reached: the store only checks its arguments.
    store = AsyncPostgresStore(NOWHERE, connect_timeout=2)
    assert store._pool is None
    dsn = make_conninfo(postgres_dsn, application_name=app)
    store = AsyncPostgresStore(dsn, schema=pg_schema)
    assert backends(admin, app) == 0
    assert admin.execute(
        "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (pg_schema,)
    ).fetchone() == (0,)

    async def main():
        async with store:
            assert backends(admin, app) >= 1
            await store.create_session(Session("s", T0))
        assert backends_once_closed(admin, app) == 0

    asyncio.run(main())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"schema": "no spaces"}, "schema name"),
        ({"partitions": 0}, "partitions"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"indexed_keys": "owner"}, "indexed_keys"),
    ],
)
def test_bad_arguments_fail_in_the_constructor(kwargs, match):
    with pytest.raises(InvalidInput, match=match):
        AsyncPostgresStore(NOWHERE, **kwargs)


def test_a_dsn_that_is_not_one_fails_in_the_constructor():
    with pytest.raises(InvalidInput, match="not a PostgreSQL connection string"):
        AsyncPostgresStore("host=127.0.0.1 nonsense_option=1")


def test_an_unreachable_server_fails_at_open_with_the_blocking_stores_text():
    store = AsyncPostgresStore(NOWHERE, connect_timeout=2)
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"cannot connect to PostgreSQL.*port 1") as info:
        asyncio.run(store.open())
    assert time.monotonic() - started < 10
    with pytest.raises(StoreError) as blocking:
        PostgresStore(NOWHERE, connect_timeout=2)
    assert str(info.value) == str(blocking.value)


def test_the_first_call_opens_the_store(postgres_dsn, pg_schema, admin):
    async def main():
        store = AsyncPostgresStore(postgres_dsn, schema=pg_schema)
        try:
            assert await store.find_session("s") is None  # opened, schema made
            await store.create_session(Session("s", T0))
            assert await store.append_events("s", turn("s", 1), 0) == 2
        finally:
            await store.close()

    asyncio.run(main())
    found = admin.execute(
        sql.SQL("SELECT max(version) FROM {}.schema_version").format(sql.Identifier(pg_schema))
    ).fetchone()
    assert found == (SCHEMA_VERSION,)


def test_a_store_connects_once_to_open(postgres_dsn, pg_schema, monkeypatch):
    """The connection that checks the server is the pool's first (as the sync store)."""
    connects = []
    plain = psycopg.AsyncConnection.connect.__func__

    async def counted(cls, *args, **kwargs):
        connects.append(cls)
        return await plain(cls, *args, **kwargs)

    async def main():
        async with AsyncPostgresStore(postgres_dsn, schema=pg_schema) as store:
            await store.create_session(Session("s", T0))
        monkeypatch.setattr(psycopg.AsyncConnection, "connect", classmethod(counted))
        async with AsyncPostgresStore(postgres_dsn, schema=pg_schema, pool_min=1) as store:
            assert len(connects) == 1
            assert await store.version("s") == 0
            assert len(connects) == 1

    asyncio.run(main())


def test_concurrent_first_calls_open_one_pool(postgres_dsn, pg_schema, admin, app, monkeypatch):
    made = []

    class Counted(AsyncConnectionPool):
        def __init__(self, *args, **kwargs):
            made.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(connections_async, "AsyncConnectionPool", Counted)
    dsn = make_conninfo(postgres_dsn, application_name=app)

    async def main():
        store = AsyncPostgresStore(dsn, schema=pg_schema, pool_min=1, pool_max=2)
        try:
            await store.create_session(Session("s", T0))  # the schema, made first
            other = AsyncPostgresStore(dsn, schema=pg_schema, pool_min=1, pool_max=2)
            try:
                found = await asyncio.gather(*(other.version("s") for _ in range(20)))
                assert found == [0] * 20
                assert backends(admin, app) <= 4  # two pools of at most 2
            finally:
                await other.close()
        finally:
            await store.close()
        assert not leftover_tasks()

    asyncio.run(main())
    assert len(made) == 2  # one per store, however many calls raced to open it
    assert all(pool.closed for pool in made)


def test_a_failed_open_is_tried_again_by_the_next_call(postgres_dsn, pg_schema):
    async def main():
        store = AsyncPostgresStore(postgres_dsn, schema=pg_schema, migrate=False)
        try:
            with pytest.raises(StoreError, match="turnlog migrate"):
                await store.version("s")
            assert await migrate_async(postgres_dsn, schema=pg_schema) == SCHEMA_VERSION
            assert await migrate_async(postgres_dsn, schema=pg_schema) == SCHEMA_VERSION
            await store.create_session(Session("s", T0))
            assert await store.version("s") == 0
        finally:
            await store.close()

    asyncio.run(main())


def test_connecting_does_not_block_the_event_loop():
    # A server that accepts and never answers: libpq waits for it until connect_timeout, and
    # the loop goes on running other tasks meanwhile.
    async def main():
        accepted = []

        async def silent(reader, writer):
            accepted.append(writer)
            await reader.read()  # until the client gives up

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        store = AsyncPostgresStore(
            f"postgresql://postgres@127.0.0.1:{port}/test", connect_timeout=2
        )
        started = time.monotonic()
        try:
            with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
                await store.open()
        finally:
            ticker.cancel()
            server.close()
            for writer in accepted:
                writer.close()
            await server.wait_closed()
        waited = time.monotonic() - started
        assert ticks >= waited * 100 / 4  # the loop ran the ticker all along
        assert waited >= 1.5
        assert accepted, "libpq never reached the silent server"

    asyncio.run(main())


# -- closing --------------------------------------------------------------------------------------


def test_close_closes_the_pool_it_made_and_leaks_no_task(postgres_dsn, pg_schema):
    async def main():
        store = await AsyncPostgresStore(postgres_dsn, schema=pg_schema, pool_min=2).open()
        pool = store._pool
        await store.create_session(Session("s", T0))
        await store.close()
        assert pool.closed
        assert not leftover_tasks()
        with pytest.raises(StoreError, match="closed"):
            await store.version("s")
        with pytest.raises(StoreError, match="closed"):
            await store.open()
        await store.close()  # again: nothing to do

    asyncio.run(main())


def test_close_leaves_a_users_pool_open(postgres_dsn, pg_schema):
    async def main():
        async with AsyncConnectionPool(
            postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
        ) as pool:
            store = AsyncPostgresStore(pool, schema=pg_schema)
            assert store._pool is pool
            async with store:
                await store.create_session(Session("s", T0))
            assert not pool.closed
            async with AsyncPostgresStore(pool, schema=pg_schema) as again:
                assert await again.find_session("s") is not None
            assert not pool.closed
        assert pool.closed

    asyncio.run(main())


def test_a_users_pool_without_autocommit_is_refused_at_open(postgres_dsn, pg_schema):
    async def main():
        async with AsyncConnectionPool(postgres_dsn, min_size=1, max_size=1, open=False) as pool:
            store = AsyncPostgresStore(pool, schema=pg_schema)  # not checked yet: no I/O
            with pytest.raises(InvalidInput, match=r"AsyncConnectionPool\(.*autocommit"):
                await store.open()
            assert not pool.closed

    asyncio.run(main())


# -- cancellation ---------------------------------------------------------------------------------


def _waiting_on_locks(admin, app):
    row = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
        (app,),
    ).fetchone()
    return None if row is None else row[0]


async def _blocked(admin, app):
    """The pid of the store's backend once it waits for a lock."""
    deadline = time.monotonic() + 10
    while (pid := _waiting_on_locks(admin, app)) is None:
        assert time.monotonic() < deadline, "the append never waited for the lock"
        await asyncio.sleep(0.01)
    return pid


@pytest.mark.parametrize("partitions", [None, 4])
def test_an_append_cancelled_while_its_statement_runs_writes_nothing(
    postgres_dsn, pg_schema, admin, app, partitions
):
    dsn = make_conninfo(postgres_dsn, application_name=app)
    events = batch_of("s", 50)

    async def main():
        # One connection, so the one the cancelled append used is the one used next.
        async with AsyncPostgresStore(
            dsn, schema=pg_schema, partitions=partitions, pool_min=1, pool_max=1
        ) as store:
            await store.create_session(Session("s", T0))
            with psycopg.connect(postgres_dsn, autocommit=True) as holder, holder.transaction():
                # A delete in flight holds the session's advisory lock: the append waits.
                holder.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext('s'))", (lock_class(pg_schema),)
                )
                task = asyncio.create_task(store.append_events("s", events, 0))
                await _blocked(admin, app)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert await store.version("s") == 0  # nothing of the batch
            assert await store.append_events("s", events, 0) == 50
            assert [e.id for e in await store.events("s")] == [e.id for e in events]
        assert not leftover_tasks()

    asyncio.run(main())


def test_appends_cancelled_at_any_moment_land_whole_or_not_at_all(postgres_dsn, pg_schema):
    size = 400

    async def main():
        async with AsyncPostgresStore(postgres_dsn, schema=pg_schema, pool_max=2) as store:
            outcomes = set()
            for n, delay in enumerate([0, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.05, 0.2]):
                sid = f"s{n}"
                await store.create_session(Session(sid, T0))
                events = batch_of(sid, size)
                task = asyncio.create_task(store.append_events(sid, events, 0))
                await asyncio.sleep(delay)
                task.cancel()
                try:
                    await task
                    outcomes.add("landed")
                except asyncio.CancelledError:
                    outcomes.add("cancelled")
                version = await store.version(sid)
                assert version in (0, size), f"half a batch after a cancel at {delay}s"
                stored = await store.events(sid)
                assert [e.id for e in stored] == [e.id for e in events][:version]
                # the connections are fine: a retry lands (or is a no-op) on them
                assert await store.append_events(sid, events, 0) == size
            assert "cancelled" in outcomes

    asyncio.run(main())


def test_an_append_cut_by_a_timeout_leaves_the_pool_usable(postgres_dsn, pg_schema, admin, app):
    dsn = make_conninfo(postgres_dsn, application_name=app)

    async def main():
        async with AsyncPostgresStore(dsn, schema=pg_schema, pool_min=1, pool_max=1) as store:
            await store.create_session(Session("s", T0))
            with psycopg.connect(postgres_dsn, autocommit=True) as holder, holder.transaction():
                holder.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext('s'))", (lock_class(pg_schema),)
                )
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(store.append_events("s", turn("s", 1), 0), 0.3)
            assert await store.append_events("s", turn("s", 1), 0) == 2
            assert await store.version("s") == 2

    asyncio.run(main())


# -- the server going away ------------------------------------------------------------------------


def test_a_connection_killed_mid_write_is_a_store_error_and_a_retry_doubles_nothing(
    postgres_dsn, pg_schema, admin, app
):
    dsn = make_conninfo(postgres_dsn, application_name=app)
    events = batch_of("s", 40)

    async def main():
        async with AsyncPostgresStore(dsn, schema=pg_schema, pool_max=2) as store:
            await store.create_session(Session("s", T0))
            with psycopg.connect(postgres_dsn, autocommit=True) as holder, holder.transaction():
                holder.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext('s'))", (lock_class(pg_schema),)
                )
                task = asyncio.create_task(store.append_events("s", events, 0))
                pid = await _blocked(admin, app)
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                with pytest.raises(StoreError, match="connection lost") as info:
                    await task
            assert "retrying it with the same event ids is safe" in str(info.value)
            assert await store.version("s") == 0  # the statement died with its connection
            assert await store.append_events("s", events, 0) == 40
            assert await store.append_events("s", events, 0) == 40  # and again: a no-op
            assert [e.seq for e in await store.events("s")] == list(range(1, 41))

    asyncio.run(main())


def test_an_idle_pooled_connection_killed_is_a_store_error_once(
    postgres_dsn, pg_schema, admin, app
):
    dsn = make_conninfo(postgres_dsn, application_name=app)

    async def main():
        async with AsyncPostgresStore(dsn, schema=pg_schema, pool_min=1, pool_max=1) as store:
            await store.create_session(Session("s", T0))
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (app,),
            )
            with pytest.raises(StoreError, match="connection lost"):
                await store.version("s")
            assert await store.version("s") == 0  # the pool replaced the broken connection

    asyncio.run(main())


# -- the view rules read the log's end page by page ----------------------------------------------


def _calls(sid, ids):
    return SessionEvent.for_message(
        sid, Message.assistant(None, [ToolCall(i, "lookup", "{}") for i in ids])
    )


def _result(sid, call_id):
    return SessionEvent.for_message(
        sid, Message.tool([ToolResult(call_id, "lookup", f"result {call_id}")])
    )


def test_the_rules_read_back_past_a_page_of_tool_results(postgres_dsn, pg_schema):
    # Ten calls and nine results: the open call is found past the first page (8 rows) of the
    # log's end, by a handle that remembers nothing of the log.
    calls = [f"c{i}" for i in range(10)]

    async def main():
        async with AsyncPostgresStore(postgres_dsn, schema=pg_schema) as writer:
            await writer.create_session(Session("s", T0))
            await writer.append_events("s", [SessionEvent.for_message("s", Message.user("go"))], 0)
            await writer.append_events("s", [_calls("s", calls)], 1)
            for n, call in enumerate(calls[:-1]):
                await writer.append_events("s", [_result("s", call)], 2 + n)
        async with AsyncPostgresStore(postgres_dsn, schema=pg_schema) as fresh:
            with pytest.raises(InvalidInput, match="R1"):
                await fresh.append_event(_result("s", "c0"))  # answered already
        async with AsyncPostgresStore(postgres_dsn, schema=pg_schema) as fresh:
            assert (await fresh.append_event(_result("s", "c9"))).seq == 12

    asyncio.run(main())
    with (
        PostgresStore(postgres_dsn, schema=pg_schema) as blocking,
        pytest.raises(InvalidInput, match="R1"),
    ):
        blocking.append_event(_result("s", "c9"))  # and now every call is answered


# -- names and the service ------------------------------------------------------------------------


def test_the_names_load_from_the_stores_package():
    from turnlog import stores

    assert stores.AsyncPostgresStore is AsyncPostgresStore
    assert stores.PostgresStore is PostgresStore


def test_the_async_service_runs_on_it(postgres_dsn, pg_schema):
    async def main():
        store = AsyncPostgresStore(postgres_dsn, schema=pg_schema)
        async with AsyncSessionService(store) as service:
            session = await service.create("chat")
            await service.append_message(session.id, Message.user("hi"))
            await service.append_message(session.id, Message.assistant("hello"))
            view = await service.view_messages(session.id)
            assert [m.text for m in view] == ["hi", "hello"]
        with pytest.raises(StoreError, match="closed"):
            await store.version("chat")

    asyncio.run(main())
