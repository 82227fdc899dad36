"""`open_store_async(url)`: open any async store from a URL (the edge of the library only)."""

from __future__ import annotations

from typing import Any, Final

from turnlog.stores.protocol_async import AsyncSessionStore
from turnlog.stores.url import load_optional, store_target

__all__ = ["open_store_async"]

# kind -> (module, class)
_STORES: Final = {
    "sqlite": ("turnlog.stores.sqlite_async", "AsyncSqliteStore"),
    "memory": ("turnlog.stores.memory_async", "AsyncMemoryStore"),
    "postgresql": ("turnlog.stores.postgres", "AsyncPostgresStore"),
    "redis": ("turnlog.stores.redis", "AsyncRedisStore"),
    "redis+cluster": ("turnlog.stores.redis", "AsyncRedisClusterStore"),
}


async def open_store_async(url: str, **options: Any) -> AsyncSessionStore:
    """Open the async store a URL names; it is open when returned (so an unreachable server
    fails here). The caller owns it: `await store.close()`, or use it in an `async with`.

    - `sqlite:///relative/path.db`, `sqlite:////absolute/path.db`, or a plain file path
    - `postgresql://user@host:5432/db` (extra `turnlog[postgres]`)
    - `redis://host:6379/0`, `rediss://...`, `unix:///path/redis.sock` (extra `turnlog[redis]`)
    - `redis+cluster://host:port,host:port`, `rediss+cluster://...` (extra `turnlog[redis]`)
    - `memory://`

    Query parameters set the store's arguments (see `URL_PARAMETERS` and docs/stores.md):
    `?busy_timeout=` on SQLite, `?schema=`, `?connect_timeout=`, `?partitions=`, `?pool_min=`,
    `?pool_max=` on PostgreSQL (libpq's own parameters such as `sslmode` pass through),
    `?prefix=`, `?connect_timeout=`, `?timeout=`, `?retries=` on Redis (redis-py's own pass
    through).

    Args:
        url: the store's address.
        **options: passed to the store's constructor (e.g. `busy_timeout`, `schema`, `prefix`).

    Raises:
        InvalidInput: an unknown scheme or parameter, a malformed URL, an argument given both in
            the URL and in `options`.
        ImportError: the store's extra is not installed; the message has the pip line.
    """
    kind, target, arguments = store_target(url, options)
    module, name = _STORES[kind]
    make = load_optional(module, name)
    store: AsyncSessionStore = make(**arguments) if kind == "memory" else make(target, **arguments)
    opening = getattr(store, "open", None)  # a store that connects lazily connects now
    if opening is not None:
        try:
            await opening()
        except BaseException:
            await store.close()
            raise
    return store
