"""RedisClusterStore on a real 3-master Redis Cluster started for this module: the contract, the
Redis behaviours of test_redis_store.py, and what only a cluster has (slots on real nodes, event-id
claims in other slots, the incarnation fence)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from redis_cluster import RedisCluster, ServerUnavailable, binaries, skip_or_fail
from test_redis_store import RedisChecks, purge, turn
from turnlog import InvalidInput, Message, Session, SessionEvent, VersionConflict
from turnlog.stores.redis import RedisClusterStore, RedisStore
from turnlog.testing import StoreContract


@pytest.fixture(scope="module")
def cluster_url():
    try:
        binaries()
    except ServerUnavailable as exc:
        skip_or_fail(str(exc))
    with RedisCluster.start() as cluster:
        yield cluster.url


class _OnCluster:
    @pytest.fixture(autouse=True)
    def _cluster(self, cluster_url):
        self.url, self.prefix = cluster_url, f"tltest-{uuid.uuid4().hex[:12]}"
        yield
        with RedisClusterStore(cluster_url, prefix=self.prefix) as store:
            purge(store.client, self.prefix)


class TestRedisClusterStore(_OnCluster, StoreContract):
    def make_store(self, tmp_path):
        return RedisClusterStore(self.url, prefix=self.prefix)

    def open_again(self, store, tmp_path):
        return RedisClusterStore(self.url, prefix=self.prefix)


class TestRedisClusterChecks(_OnCluster, RedisChecks):
    def new_store(self, **kw):
        return RedisClusterStore(self.url, prefix=self.prefix, **kw)


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
            keys = store._keys.session(sid)
            mine = {store.client.cluster_keyslot(k) for k in keys}
            assert len(mine) == 1
            slots |= mine
        assert len(slots) == 3

    def test_claims_of_a_failed_append_are_kept_and_freed_with_the_session(self, store):
        for sid in ("a", "b"):
            store.create_session(Session(sid, datetime.now(UTC)))
        store.append_events("a", turn("a", 1), 0)
        late = [SessionEvent.for_message("a", Message.user("late"), event_id="late")]
        with pytest.raises(VersionConflict):
            store.append_events("a", late, 0)
        assert store.client.smembers(store._keys.session("a")[3]) == {b"late"}
        stolen = [SessionEvent.for_message("b", Message.user("mine"), event_id="late")]
        with pytest.raises(InvalidInput, match="another session"):
            store.append_events("b", stolen, 0)
        assert store.append_events("a", late, 2) == 3  # the retry uses its claim
        assert store.client.smembers(store._keys.session("a")[3]) == set()
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
