"""Stores: where sessions and their logs live. See `SessionStore` for the protocol."""

from turnlog.stores.base import EventFilter, SessionStore
from turnlog.stores.memory import MemoryStore
from turnlog.stores.sqlite import SqliteStore
from turnlog.stores.url import open_store

__all__ = ["EventFilter", "MemoryStore", "SessionStore", "SqliteStore", "open_store"]
