"""Sessions sharing reference-counted tool sets, so identical tool sets are stored once; and a
small bounded cache for what indexes derive from one tool."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["RecentCache", "SharedSets"]


class SharedSets(Generic[T]):
    """Each session points at one value per fingerprint; a value lives while a session uses it.

    Not thread-safe: the owner holds its lock around every call.
    """

    def __init__(self) -> None:
        self._session_key: dict[str, str] = {}
        self._values: dict[str, tuple[T, int]] = {}

    def key(self, session_id: str) -> str | None:
        """The fingerprint the session points at, or None."""
        return self._session_key.get(session_id)

    def get(self, session_id: str) -> T | None:
        """The session's value, or None."""
        key = self._session_key.get(session_id)
        return None if key is None else self._values[key][0]

    def value(self, key: str) -> T | None:
        """The value held for `key`, or None."""
        held = self._values.get(key)
        return None if held is None else held[0]

    def releases(self, session_id: str) -> T | None:
        """The value `detach(session_id)` would release, without detaching."""
        key = self._session_key.get(session_id)
        if key is None:
            return None
        value, refs = self._values[key]
        return value if refs == 1 else None

    def attach(self, session_id: str, key: str, make: Callable[[], T]) -> T | None:
        """Point the session at `key`'s value, made by `make()` when no session has it yet.

        Returns:
            The session's previous value when no session uses it any more (free it), else None.
        """
        if self._session_key.get(session_id) == key:
            return None
        if key in self._values:
            value, refs = self._values[key]
            self._values[key] = (value, refs + 1)
        else:
            self._values[key] = (make(), 1)
        released = self.detach(session_id)
        self._session_key[session_id] = key
        return released

    def detach(self, session_id: str) -> T | None:
        """Forget the session.

        Returns:
            Its value when no session uses it any more (free it), else None.
        """
        key = self._session_key.pop(session_id, None)
        if key is None:
            return None
        value, refs = self._values[key]
        if refs > 1:
            self._values[key] = (value, refs - 1)
            return None
        del self._values[key]
        return value

    def sessions(self) -> int:
        """How many sessions point at a value."""
        return len(self._session_key)

    def values(self) -> int:
        """How many distinct values are held."""
        return len(self._values)


K = TypeVar("K")
V = TypeVar("V")


class RecentCache(Generic[K, V]):
    """At most `limit` values, the least recently used dropped first. Thread-safe."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value for `key` (now the most recent), or None."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Keep `value` for `key`, dropping the oldest beyond the limit."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._limit:
                self._items.popitem(last=False)

    def get_many(self, keys: Sequence[K]) -> list[V | None]:
        """`get` of each key, under one lock."""
        with self._lock:
            items = self._items
            found = [items.get(key) for key in keys]
            for key, value in zip(keys, found, strict=True):
                if value is not None:
                    items.move_to_end(key)
            return found

    def put_many(self, pairs: Sequence[tuple[K, V]]) -> None:
        """`put` of each pair, under one lock."""
        with self._lock:
            items = self._items
            for key, value in pairs:
                items[key] = value
                items.move_to_end(key)
            while len(items) > self._limit:
                items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
