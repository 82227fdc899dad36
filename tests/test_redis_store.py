"""RedisStore on the real server: the contract, and what only Redis has (keys, scripts, TTL)."""

from __future__ import annotations

import uuid

import pytest

from turnlog.stores.redis import RedisStore
from turnlog.testing import StoreContract


def purge(client, prefix: str) -> None:
    """Delete every key under `prefix` (SCAN MATCH; on a cluster, every master)."""
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for key in keys:
        client.delete(key)


@pytest.fixture
def prefix(redis_url):
    return f"tltest-{uuid.uuid4().hex[:12]}"


class TestRedisStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _redis(self, redis_url, prefix):
        self.url, self.prefix = redis_url, prefix
        yield
        with RedisStore(redis_url, prefix=prefix) as store:
            purge(store.client, prefix)

    def make_store(self, tmp_path):
        return RedisStore(self.url, prefix=self.prefix)

    def open_again(self, store, tmp_path):
        return RedisStore(self.url, prefix=self.prefix)
