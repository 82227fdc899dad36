"""The Redis stores: `RedisStore` and `RedisClusterStore` (blocking), `AsyncRedisStore` and
`AsyncRedisClusterStore` (asyncio). The async modules are the sources; store.py, cluster.py and
core.py are generated from them by scripts/async_to_sync.py. Key layout and records: layout.py;
the Lua scripts: scripts.lua; the design: docs/redis.md.
"""

from turnlog.stores.redis.cluster import RedisClusterStore
from turnlog.stores.redis.cluster_async import AsyncRedisClusterStore
from turnlog.stores.redis.store import RedisStore
from turnlog.stores.redis.store_async import AsyncRedisStore

__all__ = ["AsyncRedisClusterStore", "AsyncRedisStore", "RedisClusterStore", "RedisStore"]
