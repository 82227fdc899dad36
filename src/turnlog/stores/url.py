"""`open_store(url)`: one way to open any store from a URL (the edge of the library only)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from turnlog.errors import InvalidInput
from turnlog.stores.base import SessionStore

__all__ = ["SCHEMES", "open_store"]

SCHEMES = (
    "sqlite",
    "postgresql",
    "postgres",
    "redis",
    "rediss",
    "unix",
    "redis+cluster",
    "rediss+cluster",
    "memory",
)

_EXTRAS = {
    "turnlog.stores.postgres": "postgres",
    "turnlog.stores.redis": "redis",
    "turnlog.stores.redis_cluster": "redis",
}


def load_optional(module: str, name: str) -> Any:
    """`module.name`, or an ImportError naming the extra to install."""
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        extra = _EXTRAS.get(module, "")
        raise ImportError(
            f"{name} needs an optional dependency that is not installed ({exc.name or exc}): "
            f"pip install 'turnlog[{extra}]'"
        ) from exc


def open_store(url: str, **options: Any) -> SessionStore:
    """Open the store a URL names. The caller owns it: `close()` it, or use it in a `with`.

    - `sqlite:///relative/path.db`, `sqlite:////absolute/path.db`, or a plain file path
    - `postgresql://user@host:5432/db` (extra `turnlog[postgres]`)
    - `redis://host:6379/0`, `rediss://...`, `unix:///path/redis.sock` (extra `turnlog[redis]`)
    - `redis+cluster://host:port,host:port`, `rediss+cluster://...` (extra `turnlog[redis]`)
    - `memory://`

    Args:
        url: the store's address.
        **options: passed to the store's constructor (e.g. `busy_timeout`, `schema`, `prefix`).

    Raises:
        InvalidInput: an unknown scheme or a malformed URL.
        ImportError: the store's extra is not installed; the message has the pip line.
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("a store URL must be a non-empty string")
    scheme, sep, _ = url.partition("://")
    if not sep:
        from turnlog.stores.sqlite import SqliteStore

        return SqliteStore(Path(url), **options)
    scheme = scheme.lower()
    if scheme == "sqlite":
        path = unquote(urlsplit(url).path)
        if path.startswith("/"):
            path = path[1:]  # sqlite:///rel.db -> rel.db ; sqlite:////abs.db -> /abs.db
        if not path:
            raise InvalidInput(f"{url!r} names no file: use sqlite:///path/to/file.db")
        from turnlog.stores.sqlite import SqliteStore

        return SqliteStore(Path(path), **options)
    if scheme == "memory":
        from turnlog.stores.memory import MemoryStore

        return MemoryStore(**options)
    if scheme in ("postgresql", "postgres"):
        store: SessionStore = load_optional("turnlog.stores.postgres", "PostgresStore")(
            url, **options
        )
        return store
    if scheme in ("redis", "rediss", "unix"):
        store = load_optional("turnlog.stores.redis", "RedisStore")(url, **options)
        return store
    if scheme in ("redis+cluster", "rediss+cluster"):
        store = load_optional("turnlog.stores.redis_cluster", "RedisClusterStore")(url, **options)
        return store
    raise InvalidInput(
        f"unknown store URL scheme {scheme!r} in {url!r}: use one of "
        "sqlite:///path, postgresql://..., redis://..., redis+cluster://host:port,..., memory://"
    )
