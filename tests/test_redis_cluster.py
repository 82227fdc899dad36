"""RedisClusterStore on a real 3-master Redis Cluster started for this module: the contract, the
Redis behaviours of test_redis_store.py, and what only a cluster has (slots on real nodes, event-id
claims in other slots, the incarnation fence)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from datetime import UTC, datetime

import pytest
import redis

from redis_cluster import free_ports
from test_redis_store import (
    AttachmentHooks,
    RedisChecks,
    attachment_keys,
    image,
    purge,
    turn,
    version_lookups,
)
from turnlog import InvalidInput, Message, Session, SessionEvent, StoreError, VersionConflict
from turnlog.stores.attachments import ref_of
from turnlog.stores.redis import RedisClusterStore, RedisStore
from turnlog.testing import StoreContract
from turnlog.testing.contract_attachments import blob


@pytest.fixture(scope="module")
def cluster_url(redis_cluster_url):
    return redis_cluster_url


class _OnCluster:
    @pytest.fixture(autouse=True)
    def _cluster(self, cluster_url):
        self.url, self.prefix = cluster_url, f"tltest-{uuid.uuid4().hex[:12]}"
        yield
        with RedisClusterStore(cluster_url, prefix=self.prefix) as store:
            purge(store.client, self.prefix)


class ClusterAttachmentHooks(AttachmentHooks):
    def admin(self):
        return RedisClusterStore(self.url, prefix=self.prefix)


class TestRedisClusterStore(_OnCluster, ClusterAttachmentHooks, StoreContract):
    property_examples = 50  # the validation property test, on a server

    def make_store(self, tmp_path):
        return RedisClusterStore(self.url, prefix=self.prefix)

    def open_again(self, store, tmp_path):
        return RedisClusterStore(self.url, prefix=self.prefix)


class TestRedisClusterChecks(_OnCluster, RedisChecks):
    def new_store(self, **kw):
        return RedisClusterStore(self.url, **{"prefix": self.prefix, **kw})


class TestClusterOnly(_OnCluster):
    @pytest.fixture
    def store(self):
        with RedisClusterStore(self.url, prefix=self.prefix) as store:
            yield store

    def test_the_keys_of_a_session_share_a_slot_on_the_server(self, store):
        slots = set()
        for sid in ("a", "{a}", "ünï"):
            store.create_session(Session(sid, datetime.now(UTC)))
            store.append_events(sid, turn(sid, 1), 0)
            store.append_events(sid, [image(sid, blob(sid))], 2)
            keys = [*store._keys.session(sid), store._keys.attachment(sid, ref_of(blob(sid)))]
            assert store.client.exists(keys[-1]) == 1
            mine = {store.client.cluster_keyslot(k) for k in keys}  # asked of the server
            assert len(mine) == 1
            slots |= mine
        assert len(slots) == 3

    def test_the_attachment_keys_live_on_the_node_of_their_session(self, store):
        """Asked of each master directly: the bytes are on the node that holds the session."""
        sids = [f"s{i}" for i in range(12)]
        for sid in sids:
            store.create_session(Session(sid, datetime.now(UTC)))
            store.append_events(sid, [image(sid, blob(sid))], 0)
        nodes = {}
        for node in store.client.get_primaries():
            client = redis.Redis(host=node.host, port=node.port)
            try:
                for key in client.scan_iter(match=f"{self.prefix}:*", count=1000):
                    nodes[key.decode()] = (node.host, node.port)
            finally:
                client.close()
        assert len(set(nodes.values())) > 1  # the sessions are spread over the masters
        for sid in sids:
            (key,) = attachment_keys(store.client, self.prefix, sid)
            assert nodes[key] == nodes[store._keys.session(sid)[0]]
            assert nodes[key] == nodes[store._keys.session(sid)[3]]

    def test_claims_of_a_failed_append_are_kept_and_freed_with_the_session(self, store):
        for sid in ("a", "b"):
            store.create_session(Session(sid, datetime.now(UTC)))
        store.append_events("a", turn("a", 1), 0)
        late = [SessionEvent.for_message("a", Message.user("late"), event_id="late")]
        with pytest.raises(VersionConflict):
            store.append_events("a", late, 0)
        assert store.client.smembers(store._keys.session("a")[1]) == {b"late"}
        stolen = [SessionEvent.for_message("b", Message.user("mine"), event_id="late")]
        with pytest.raises(InvalidInput, match="another session"):
            store.append_events("b", stolen, 0)
        assert store.append_events("a", late, 2) == 3  # the retry uses its claim
        assert store.client.smembers(store._keys.session("a")[1]) == set()
        store.delete_session("a")
        assert store.client.get(store._keys.event("late")) is None
        assert store.append_events("b", stolen, 0) == 1

    def test_an_append_for_a_dead_incarnation_is_fenced_and_retried(self, store):
        other = RedisClusterStore(self.url, prefix=self.prefix)
        try:
            store.create_session(Session("s", datetime.now(UTC)))
            store.append_events("s", turn("s", 1), 0)  # caches the incarnation
            other.delete_session("s")
            other.create_session(Session("s", datetime.now(UTC)))
            assert store.append_events("s", turn("s", 2), 0) == 2
            inc = store.client.hget(store._keys.session("s")[0], "inc")
            assert store.client.get(store._keys.event("s-u2")) == b"s\x00" + inc
            assert store.client.get(store._keys.event("s-u1")) is None
        finally:
            other.close()

    def test_urls_and_clients(self, cluster_url):
        with pytest.raises(InvalidInput):
            RedisClusterStore("redis://127.0.0.1:6379")
        with pytest.raises(InvalidInput):
            RedisClusterStore("redis+cluster://127.0.0.1")
        with pytest.raises(InvalidInput, match="RedisClusterStore"):
            RedisStore(cluster_url)
        with RedisClusterStore(self.url, prefix=self.prefix) as owner:
            with RedisClusterStore(owner.client, prefix=self.prefix) as borrowed:
                borrowed.create_session(Session("a", datetime.now(UTC)))
            assert owner.find_session("a") is not None  # the borrowed store left it open

    def test_nodes_are_told_the_library_without_a_metadata_lookup(self, monkeypatch):
        """As the standalone store: redis-py is given its version, not left to look it up."""
        looked_up = version_lookups(monkeypatch)
        with RedisClusterStore(self.url, prefix=self.prefix) as store:
            store.create_session(Session("a", datetime.now(UTC)))
            assert store.find_session("a") is not None
        assert "redis" not in looked_up

    @pytest.mark.slow
    def test_connections_killed_mid_write_lose_and_double_nothing(self, store):
        """CLIENT KILL of every client on the session's node while a large batch is in flight.
        A kill during the claims is retried by redis-py's cluster pipeline (claims are
        idempotent); a kill during or after the script surfaces as StoreError. Either way the
        batch is whole or absent, and a retry of the same ids appends it exactly once."""
        store.create_session(Session("s", datetime.now(UTC)))
        node = store.client.nodes_manager.get_node_from_slot(
            store.client.cluster_keyslot(store._keys.session("s")[0])
        )
        admin = redis.Redis(host=node.host, port=node.port)
        rng = random.Random(3)
        outcomes = {"ok": 0, "StoreError": 0, "interrupted": 0}
        text = "x" * 200
        store.create_session(Session("calibrate", datetime.now(UTC)))
        sample = [SessionEvent.for_message("calibrate", Message.user(text)) for _ in range(3000)]
        started = time.perf_counter()
        store.append_events("calibrate", sample, 0)
        span = time.perf_counter() - started
        delay = span / 2
        rounds = 0
        try:
            # At least 6 rounds, and on until 2 kills interrupted a write (at most 20): a
            # staircase moves the kill earlier after a round that finished unharmed. A kill
            # interrupted the write when the writer had to reconnect to finish (redis-py
            # retries the claims and the idempotent script) or raised StoreError.
            while rounds < 6 or (outcomes["interrupted"] < 2 and rounds < 20):
                round_ = rounds
                rounds += 1
                version = store.version("s")
                batch = [
                    SessionEvent.for_message("s", Message.user(text), event_id=f"r{round_}-{i}")
                    for i in range(3000)
                ]
                errors: list[BaseException] = []

                def write(batch=batch, version=version, errors=errors) -> None:
                    try:
                        store.append_events("s", batch, version)
                    except BaseException as exc:
                        errors.append(exc)

                writer = threading.Thread(target=write)
                writer.start()
                time.sleep(delay * rng.uniform(0.8, 1.2))
                admin.client_kill_filter(_type="normal", skipme=True)
                connections = admin.info("stats")["total_connections_received"]
                writer.join(30)
                assert all(isinstance(e, StoreError) for e in errors), errors
                outcomes["StoreError" if errors else "ok"] += 1
                reconnected = admin.info("stats")["total_connections_received"] > connections
                interrupted = bool(errors) or reconnected
                outcomes["interrupted"] += interrupted
                delay = min(span * 3, max(0.001, delay * (1.2 if interrupted else 0.7)))
                assert store.version("s") in (version, version + 3000)
                assert store.append_events("s", batch, version) == version + 3000
            log = store.events("s")
            assert len(log) == rounds * 3000 and len({e.id for e in log}) == rounds * 3000
        finally:
            admin.close()
        assert outcomes["interrupted"] >= 1, f"no kill interrupted a write: {outcomes}"
        print(f"killed appends: {outcomes}")

    def test_a_connection_killed_during_the_script_raises_store_error(self, store):
        """The claims are made, then the node pauses writes: the script waits on the server,
        its connection is killed, the append raises StoreError and wrote nothing; a retry of
        the same ids appends them once."""
        store.create_session(Session("s", datetime.now(UTC)))
        node = store.client.nodes_manager.get_node_from_slot(
            store.client.cluster_keyslot(store._keys.session("s")[0])
        )
        admin = redis.Redis(host=node.host, port=node.port)

        class PausingAfterClaims(RedisClusterStore):
            def _reserve(self, *args, **kwargs):
                fresh = super()._reserve(*args, **kwargs)
                admin.client_pause(5000, all=False)
                return fresh

        batch = [
            SessionEvent.for_message("s", Message.user(f"{i}"), event_id=f"p{i}")
            for i in range(200)
        ]
        errors: list[BaseException] = []
        pausing = PausingAfterClaims(self.url, prefix=self.prefix)

        def write() -> None:
            try:
                pausing.append_events("s", batch, 0)
            except BaseException as exc:
                errors.append(exc)

        try:
            writer = threading.Thread(target=write)
            writer.start()
            deadline = time.monotonic() + 5
            blocked: list[dict] = []
            while not blocked and time.monotonic() < deadline:
                time.sleep(0.01)
                clients = admin.client_list()
                blocked = [c for c in clients if c["cmd"] == "evalsha" and "b" in c["flags"]]
            assert blocked, "the script never reached the server"
            admin.client_kill_filter(_id=blocked[0]["id"])
            writer.join(10)
        finally:
            admin.client_unpause()
            admin.close()
            pausing.close()
        assert len(errors) == 1 and isinstance(errors[0], StoreError), errors
        assert "lost the connection" in str(errors[0])
        assert store.version("s") == 0
        assert store.append_events("s", batch, 0) == 200
        assert store.append_events("s", batch, 0) == 200
        assert [e.id for e in store.events("s")] == [e.id for e in batch]


def test_no_cluster_raises_store_error():
    port = free_ports(1, bus=False)[0]
    with pytest.raises(StoreError, match="cannot reach the Redis Cluster"):
        RedisClusterStore(f"redis+cluster://127.0.0.1:{port}", timeout=1)
