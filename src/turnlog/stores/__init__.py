"""Stores: where sessions and their logs live. See `SessionStore` for the protocol.

`PostgresStore`, `RedisStore` and `RedisClusterStore` load on first use, so importing turnlog
never needs their drivers; a missing driver fails with the `pip install` line that fixes it.
The async stores (`AsyncSqliteStore`, `AsyncMemoryStore`, `AsyncPostgresStore`,
`AsyncRedisStore`, `AsyncRedisClusterStore`, ...) load on first use too. They are left out of
`__all__`, so `from turnlog.stores import *` works without the extras.
"""

from typing import Any

from turnlog.stores.base import EventFilter
from turnlog.stores.memory import MemoryStore
from turnlog.stores.opening import open_store
from turnlog.stores.opening_async import open_store_async
from turnlog.stores.protocol import SessionStore
from turnlog.stores.sqlite import SqliteStore
from turnlog.stores.url import load_optional

__all__ = [
    "EventFilter",
    "MemoryStore",
    "SessionStore",
    "SqliteStore",
    "open_store",
    "open_store_async",
]

_LAZY = {
    "AsyncMemoryStore": "turnlog.stores.memory_async",
    "AsyncRedisClusterStore": "turnlog.stores.redis",
    "AsyncRedisStore": "turnlog.stores.redis",
    "AsyncSqliteStore": "turnlog.stores.sqlite_async",
    "PostgresStore": "turnlog.stores.postgres",
    "AsyncPostgresStore": "turnlog.stores.postgres",
    "RedisClusterStore": "turnlog.stores.redis",
    "RedisStore": "turnlog.stores.redis",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'turnlog.stores' has no attribute {name!r}")
    return load_optional(module, name)
