"""Stores: where sessions and their logs live. See `SessionStore` for the protocol.

`PostgresStore`, `RedisStore`, `RedisClusterStore` and their async twins `AsyncRedisStore` and
`AsyncRedisClusterStore` load on first use, so importing turnlog never needs their drivers; a
missing driver fails with the `pip install` line that fixes it.
They are left out of `__all__`, so `from turnlog.stores import *` works without the extras.
"""

from typing import Any

from turnlog.stores.base import EventFilter
from turnlog.stores.memory import MemoryStore
from turnlog.stores.protocol import SessionStore
from turnlog.stores.sqlite import SqliteStore
from turnlog.stores.url import load_optional, open_store

__all__ = [
    "EventFilter",
    "MemoryStore",
    "SessionStore",
    "SqliteStore",
    "open_store",
]

_LAZY = {
    "PostgresStore": "turnlog.stores.postgres",
    "RedisStore": "turnlog.stores.redis",
    "RedisClusterStore": "turnlog.stores.redis",
    "AsyncRedisStore": "turnlog.stores.redis",
    "AsyncRedisClusterStore": "turnlog.stores.redis",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'turnlog.stores' has no attribute {name!r}")
    return load_optional(module, name)
