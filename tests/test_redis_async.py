"""AsyncRedisStore and AsyncRedisClusterStore on the real servers: the async contract, and what
only the async stores have (no I/O in the constructor, open and close, owned and borrowed
clients, cancelled tasks, servers that go away).

The async-specific tests run their own event loop with `asyncio.run` inside plain test
functions. Every test uses a random key prefix and deletes its keys afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_cluster import RedisServer, free_ports
from test_redis_cluster import ClusterAttachmentHooks
from test_redis_store import AttachmentHooks, purge, turn
from turnlog import InvalidInput, Message, Session, SessionEvent, StoreError
from turnlog.stores.redis import (
    AsyncRedisClusterStore,
    AsyncRedisStore,
    RedisClusterStore,
    RedisStore,
)
from turnlog.testing import AsyncStoreContract


def now() -> datetime:
    return datetime.now(UTC)


def batch_of(sid: str, n: int, tag: str) -> list[SessionEvent]:
    return [
        SessionEvent.for_message(
            sid, Message.user(f"{tag} {i} " + "x" * 200), event_id=f"{tag}-{i}"
        )
        for i in range(n)
    ]


def leftover_tasks() -> list[asyncio.Task[Any]]:
    me = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not me and not t.done()]


# -- the contract ----------------------------------------------------------------------------------


class TestAsyncRedisStore(AttachmentHooks, AsyncStoreContract):
    property_examples = 50  # the validation property test, on a server

    @pytest.fixture(autouse=True)
    def _redis(self, redis_url):
        self.url, self.prefix = redis_url, f"tltest-{uuid.uuid4().hex[:12]}"
        yield
        with RedisStore(redis_url, prefix=self.prefix) as store:
            purge(store.client, self.prefix)

    async def make_async_store(self, tmp_path):
        return AsyncRedisStore(self.url, prefix=self.prefix)

    async def open_again_async(self, store, tmp_path):
        # a second handle (its own memory of the logs' ends) on the first one's client, which
        # the first handle closes
        return await AsyncRedisStore(store.client, prefix=self.prefix).open()


class TestAsyncRedisClusterStore(ClusterAttachmentHooks, AsyncStoreContract):
    property_examples = 50

    @pytest.fixture(autouse=True)
    def _cluster(self, redis_cluster_url):
        self.url, self.prefix = redis_cluster_url, f"tltest-{uuid.uuid4().hex[:12]}"
        yield
        with RedisClusterStore(redis_cluster_url, prefix=self.prefix) as store:
            purge(store.client, self.prefix)

    async def make_async_store(self, tmp_path):
        return AsyncRedisClusterStore(self.url, prefix=self.prefix)

    async def open_again_async(self, store, tmp_path):
        return await AsyncRedisClusterStore(store.client, prefix=self.prefix).open()


# -- constructing, opening, closing ----------------------------------------------------------------


def _unreachable() -> str:
    return f"127.0.0.1:{free_ports(1, bus=False)[0]}"


def test_the_constructor_does_no_io_and_open_reports_an_unreachable_server():
    where = _unreachable()

    async def main() -> None:
        began = time.monotonic()
        store = AsyncRedisStore(f"redis://{where}/0", timeout=1)  # nothing is sent
        cluster = AsyncRedisClusterStore(f"redis+cluster://{where}", timeout=1)
        assert time.monotonic() - began < 0.5
        for handle in (store, cluster):
            with pytest.raises(StoreError, match="cannot reach") as raised:
                await handle.open()
            assert "may or may not" not in str(raised.value)
            with pytest.raises(StoreError, match="cannot reach"):  # open again: still unreachable
                async with handle:
                    pass
            await handle.close()
        assert not leftover_tasks()

    asyncio.run(main())


def test_the_first_call_opens_the_store_and_reports_an_unreachable_server():
    where = _unreachable()

    async def main() -> None:
        for make in (
            lambda: AsyncRedisStore(f"redis://{where}/0", timeout=1),
            lambda: AsyncRedisClusterStore(f"redis+cluster://{where}", timeout=1),
        ):
            store = make()
            with pytest.raises(StoreError, match="cannot reach") as raised:
                await store.create_session(Session("a", now()))
            assert "may or may not" not in str(raised.value)
            with pytest.raises(StoreError, match="cannot reach") as raised:
                await store.view("a")
            assert "may or may not" not in str(raised.value)
            await store.close()

    asyncio.run(main())


def test_bad_arguments_are_refused_at_once(redis_url):
    async def main() -> None:
        decoding = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
        blocking = redis.Redis.from_url(redis_url)
        try:
            with pytest.raises(InvalidInput, match="decode_responses"):
                AsyncRedisStore(decoding)
            with pytest.raises(InvalidInput, match=r"redis\.asyncio\.Redis client, not Redis"):
                AsyncRedisStore(blocking)  # a blocking client in an async store
            with pytest.raises(InvalidInput, match="AsyncRedisClusterStore"):
                AsyncRedisStore("redis+cluster://127.0.0.1:7000")
            with pytest.raises(InvalidInput, match="RedisCluster client"):
                AsyncRedisClusterStore(decoding)
            with pytest.raises(InvalidInput, match="prefix"):
                AsyncRedisStore(redis_url, prefix="a:b")
            with pytest.raises(InvalidInput, match="timeout"):
                AsyncRedisStore(redis_url, timeout=0)
        finally:
            await decoding.aclose()
            blocking.close()

    asyncio.run(main())


def _clients_named(admin: redis.Redis, name: str) -> int:
    return sum(1 for c in admin.client_list() if c.get("name") == name)


def test_close_closes_an_owned_client(redis_url):
    name = f"tlowned-{uuid.uuid4().hex[:8]}"
    prefix = f"tltest-{uuid.uuid4().hex[:12]}"
    admin = redis.Redis.from_url(redis_url)

    async def main() -> None:
        store = AsyncRedisStore(f"{redis_url}?client_name={name}", prefix=prefix)
        assert _clients_named(admin, name) == 0  # not opened yet
        assert await store.open() is store
        assert await store.open() is store  # idempotent
        await asyncio.gather(*(store.create_session(Session(f"s{i}", now())) for i in range(4)))
        assert _clients_named(admin, name) >= 1
        await store.close()
        await store.close()  # idempotent
        deadline = time.monotonic() + 5
        while _clients_named(admin, name) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert _clients_named(admin, name) == 0
        with pytest.raises(StoreError, match="closed"):
            await store.find_session("s0")
        with pytest.raises(StoreError, match="closed"):
            await store.open()
        assert not leftover_tasks()

    try:
        asyncio.run(main())
    finally:
        purge(admin, prefix)
        admin.close()


def test_close_leaves_a_borrowed_client_open(redis_url, redis_cluster_url):
    prefix = f"tltest-{uuid.uuid4().hex[:12]}"

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        async with AsyncRedisStore(client, prefix=prefix) as store:
            await store.create_session(Session("a", now()))
            assert store.client is client
        assert await client.ping()
        assert await client.exists(f"{prefix}:{{a}}:s") == 1
        await client.aclose()
        async with AsyncRedisClusterStore(redis_cluster_url, prefix=prefix) as owner:
            borrowed = AsyncRedisClusterStore(owner.client, prefix=prefix)
            await borrowed.create_session(Session("a", now()))  # opens on first use
            await borrowed.close()
            assert await owner.client.ping()
            assert (await owner.find_session("a")) is not None
        assert not leftover_tasks()

    try:
        asyncio.run(main())
    finally:
        with RedisStore(redis_url, prefix=prefix) as store:
            purge(store.client, prefix)
        with RedisClusterStore(redis_cluster_url, prefix=prefix) as store:
            purge(store.client, prefix)


def test_concurrent_first_calls_open_once(redis_url, monkeypatch):
    prefix = f"tltest-{uuid.uuid4().hex[:12]}"
    opened = 0
    real = AsyncRedisStore._prepare

    async def counting(self: AsyncRedisStore) -> None:
        nonlocal opened
        opened += 1
        await asyncio.sleep(0.01)  # let the other first calls arrive meanwhile
        await real(self)

    monkeypatch.setattr(AsyncRedisStore, "_prepare", counting)

    async def main() -> None:
        async with AsyncRedisStore(redis_url, prefix=prefix) as store:
            pass
        store = AsyncRedisStore(redis_url, prefix=prefix)
        found = await asyncio.gather(*(store.find_session(f"s{i}") for i in range(20)))
        assert found == [None] * 20
        await store.close()

    try:
        asyncio.run(main())
    finally:
        with RedisStore(redis_url, prefix=prefix) as store:
            purge(store.client, prefix)
    assert opened == 2


# -- cancelled tasks and lost servers --------------------------------------------------------------


@pytest.fixture(scope="module")
def private_redis():
    """A standalone server of our own: these tests pause and kill clients."""
    with RedisServer.start() as server:
        yield server


async def _blocked_evalsha(admin: redis.Redis) -> dict[str, Any]:
    """The client whose EVALSHA waits on a paused server."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        blocked = [c for c in admin.client_list() if c["cmd"] == "evalsha" and "b" in c["flags"]]
        if blocked:
            return blocked[0]
        await asyncio.sleep(0.01)
    raise AssertionError("the script never reached the server")


def test_a_task_cancelled_mid_append_leaves_the_whole_batch_and_a_usable_store(private_redis):
    """The append was sent; the server is paused, so the task waits on the reply and is
    cancelled there. The server runs the script whole afterwards; the store's next calls use
    a clean connection."""
    admin = redis.Redis.from_url(private_redis.url)

    async def main() -> None:
        async with AsyncRedisStore(private_redis.url, prefix="cancel") as store:
            await store.create_session(Session("s", now()))
            batch = batch_of("s", 500, "c")
            admin.client_pause(5000, all=False)
            try:
                task = asyncio.create_task(store.append_events("s", batch, 0))
                await _blocked_evalsha(admin)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            finally:
                admin.client_unpause()
            assert await store.version("s") in (0, 500)  # whole or nothing, never a part
            assert await store.append_events("s", batch, 0) == 500  # the retry: a no-op or all
            assert [e.id for e in await store.events("s")] == [e.id for e in batch]
            assert len(await store.view("s")) == 500
        assert not leftover_tasks()

    try:
        asyncio.run(main())
    finally:
        purge(admin, "cancel")
        admin.close()


def test_appends_cancelled_at_random_points_are_whole_or_absent(private_redis):
    """Tasks cancelled at random moments of an append (before sending, while sending, while
    waiting): each batch is all there or not at all, and the store keeps working."""
    rng = random.Random(7)
    admin = redis.Redis.from_url(private_redis.url)

    async def main() -> None:
        landed = 0
        async with AsyncRedisStore(private_redis.url, prefix="cut-async") as store:
            await store.create_session(Session("s", now()))
            for round_ in range(20):
                batch = batch_of("s", 300, f"r{round_}")
                version = await store.version("s")
                task = asyncio.create_task(store.append_events("s", batch, version))
                await asyncio.sleep(rng.uniform(0, 0.004))
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await asyncio.sleep(0.02)  # a sent script finishes on the server
                after = await store.version("s")
                assert after in (version, version + 300)
                landed += after != version
                assert await store.append_events("s", batch, version) == version + 300
            log = await store.events("s")
        assert len(log) == 6000 and len({e.id for e in log}) == 6000
        assert [e.seq for e in log] == list(range(1, 6001))
        print(f"{landed} of 20 cancelled appends had landed")

    try:
        asyncio.run(main())
    finally:
        purge(admin, "cut-async")
        admin.close()


def test_a_connection_killed_mid_write_raises_store_error(private_redis):
    admin = redis.Redis.from_url(private_redis.url)

    async def main() -> None:
        async with AsyncRedisStore(private_redis.url, prefix="kill-async") as store:
            await store.create_session(Session("s", now()))
            batch = batch_of("s", 500, "k")
            admin.client_pause(5000, all=False)
            try:
                task = asyncio.create_task(store.append_events("s", batch, 0))
                blocked = await _blocked_evalsha(admin)
                admin.client_kill_filter(_id=blocked["id"])
                with pytest.raises(StoreError) as raised:
                    await task
            finally:
                admin.client_unpause()
            assert "lost the connection" in str(raised.value)
            assert "may or may not have landed" in str(raised.value)
            assert await store.version("s") == 0  # the killed command never ran
            assert await store.append_events("s", batch, 0) == 500

    try:
        asyncio.run(main())
    finally:
        purge(admin, "kill-async")
        admin.close()


def test_a_stopped_server_raises_store_error():
    async def main(stop: Callable[[], None]) -> None:
        async with AsyncRedisStore(server.url, prefix="gone") as store:
            await store.create_session(Session("s", now()))
            stop()
            with pytest.raises(StoreError, match=r"cannot reach|lost the connection"):
                await store.append_events("s", turn("s", 1), 0)
            with pytest.raises(StoreError, match=r"cannot reach|lost the connection"):
                await store.view("s")

    with RedisServer.start() as server:
        asyncio.run(main(server._servers.stop))


def test_a_client_out_of_connections_is_named_as_such(redis_cluster_url):
    """redis.asyncio's cluster client raises when every connection it may open to a node is
    busy (100 by default): the error says so, not that the server went away (found by
    bench/async_loop.py with 1,000 tasks)."""
    prefix = f"tltest-{uuid.uuid4().hex[:12]}"

    async def main() -> list[BaseException]:
        async with AsyncRedisClusterStore(redis_cluster_url, prefix=prefix) as owner:
            startup = [
                redis.asyncio.cluster.ClusterNode(n.host, n.port) for n in owner.client.get_nodes()
            ]
            client = redis.asyncio.cluster.RedisCluster(startup_nodes=startup, max_connections=1)
            store = AsyncRedisClusterStore(client, prefix=prefix)
            await store.create_session(Session("busy", now()))
            results = await asyncio.gather(
                *(
                    store.append_event(SessionEvent.for_message("busy", Message.user(f"m{i}")))
                    for i in range(40)
                ),
                return_exceptions=True,
            )
            await store.close()
            await client.aclose()
            return [r for r in results if isinstance(r, BaseException)]

    try:
        errors = asyncio.run(main())
    finally:
        with RedisClusterStore(redis_cluster_url, prefix=prefix) as store:
            purge(store.client, prefix)
    assert errors, "40 calls at once on one connection per node all got one"
    for error in errors:
        assert isinstance(error, StoreError), repr(error)
        assert "max_connections" in str(error) and "nothing was sent" in str(error)
