"""The PostgreSQL stores: `PostgresStore` (blocking) and `AsyncPostgresStore` (asyncio).

`store_async` is the source; `store` is generated from it by `scripts/async_to_sync.py` (so are
`connections` and `schema`). `ddl` holds the schema's SQL, `queries` the statements the stores
run, `rows` what they send and read back.
"""

# The drivers, checked here: the package's modules may be loaded already when they are not.
try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the PostgreSQL stores need psycopg 3 and psycopg-pool: pip install 'turnlog[postgres]'"
    ) from exc

from turnlog.stores.postgres.ddl import SCHEMA_VERSION
from turnlog.stores.postgres.schema import migrate
from turnlog.stores.postgres.schema_async import migrate_async
from turnlog.stores.postgres.store import PostgresStore
from turnlog.stores.postgres.store_async import AsyncPostgresStore

__all__ = ["SCHEMA_VERSION", "AsyncPostgresStore", "PostgresStore", "migrate", "migrate_async"]
