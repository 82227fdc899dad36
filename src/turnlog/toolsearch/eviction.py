"""Eviction strategies: which sessions' tool indexes to clear, so memory stays bounded.

Every strategy is thread-safe and lazy: decisions are taken inside `on_access`, called at the
start of each request; no strategy starts a thread. `ToolSearch` clears the indexes a strategy
names and then calls `on_removed` for each, as it does after an explicit `ToolSearch.evict`.

- `LruEvictionStrategy(max_sessions)`: at most `max_sessions` indexes (the default of
  `ToolSearch`).
- `TtlEvictionStrategy(ttl)`: clear the indexes of sessions idle for `ttl`.
- `CompositeEvictionStrategy(a, b, ...)`: both at once (for example a TTL and an LRU bound).
- `NeverEvict`: keep every index (unbounded).
- `AlwaysEvict`: re-index the current session on every request.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import timedelta
from typing import Final

from turnlog.durations import Duration, to_timedelta
from turnlog.errors import InvalidInput
from turnlog.toolsearch.base import ToolIndexEvictionStrategy

__all__ = [
    "AlwaysEvict",
    "CompositeEvictionStrategy",
    "LruEvictionStrategy",
    "MonotonicClock",
    "NeverEvict",
    "TtlEvictionStrategy",
]

MonotonicClock = Callable[[], float]
"""Returns seconds from an arbitrary origin that never goes backwards (`time.monotonic`)."""

_log: Final = logging.getLogger("turnlog.toolsearch")


class TtlEvictionStrategy:
    """Clears the index of every session idle for at least `ttl`.

    Expiry is evaluated lazily in each `on_access`: every tracked session other than the one
    being accessed whose idle time has reached the ttl (`>=`) is returned and forgotten. No
    thread is started. Every access resets the session's idle time, so a session whose
    requests come less than `ttl` apart keeps its index.

    The sessions are kept in access order, so one access costs O(1) amortized plus the number
    of sessions it returns. A clock that goes backwards is treated as standing still.

    Args:
        ttl: the idle time after which a session's index is cleared: a `timedelta` or a
            number of seconds (as every duration in turnlog; see `turnlog.durations`).
        clock: seconds from a monotonic source; `time.monotonic` by default.

    Raises:
        InvalidInput: `ttl` is zero, negative, NaN, infinite or not a duration.
    """

    def __init__(self, ttl: Duration, *, clock: MonotonicClock = time.monotonic) -> None:
        self._span = to_timedelta(ttl, "ttl")
        self._ttl = self._span.total_seconds()
        self._clock = clock
        self._lock = threading.Lock()
        self._last_access: OrderedDict[str, float] = OrderedDict()
        self._latest = -math.inf

    @property
    def ttl(self) -> timedelta:
        """The configured time to live."""
        return self._span

    def on_access(self, session_id: str) -> set[str]:
        """Record an access to `session_id` now.

        Returns:
            The other tracked sessions idle for at least the ttl; they are forgotten.
        """
        with self._lock:
            now = self._latest = max(self._clock(), self._latest)
            self._last_access.pop(session_id, None)
            expired: set[str] = set()
            # Ordered by last access, so the expired sessions are at the front.
            for other, last in self._last_access.items():
                if now - last < self._ttl:
                    break
                expired.add(other)
            for other in expired:
                del self._last_access[other]
            self._last_access[session_id] = now
            return expired

    def on_removed(self, session_id: str) -> None:
        """Forget `session_id` (a no-op when it is not tracked)."""
        with self._lock:
            self._last_access.pop(session_id, None)

    def __len__(self) -> int:
        """How many sessions are tracked."""
        with self._lock:
            return len(self._last_access)

    def __repr__(self) -> str:
        return f"TtlEvictionStrategy(ttl={self.ttl!r})"


class LruEvictionStrategy:
    """Keeps at most `max_sessions` indexes: beyond that, the least recently accessed go.

    The session being accessed is never returned. One access costs O(1) amortized.

    Args:
        max_sessions: how many sessions may hold an index at once.

    Raises:
        InvalidInput: `max_sessions` is not a positive integer.
    """

    def __init__(self, max_sessions: int = 1000) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions <= 0:
            raise InvalidInput(f"max_sessions must be a positive integer, got {max_sessions!r}")
        self._max = max_sessions
        self._lock = threading.Lock()
        self._order: OrderedDict[str, None] = OrderedDict()

    @property
    def max_sessions(self) -> int:
        """The bound."""
        return self._max

    def on_access(self, session_id: str) -> set[str]:
        """Mark `session_id` as the most recently used.

        Returns:
            The least recently used sessions beyond `max_sessions`; they are forgotten.
        """
        with self._lock:
            if session_id in self._order:
                self._order.move_to_end(session_id)
            else:
                self._order[session_id] = None
            evicted: set[str] = set()
            # The current session is last and max_sessions >= 1, so it is never popped here.
            while len(self._order) > self._max:
                evicted.add(self._order.popitem(last=False)[0])
            return evicted

    def on_removed(self, session_id: str) -> None:
        """Forget `session_id` (a no-op when it is not tracked)."""
        with self._lock:
            self._order.pop(session_id, None)

    def __len__(self) -> int:
        """How many sessions are tracked."""
        with self._lock:
            return len(self._order)

    def __repr__(self) -> str:
        return f"LruEvictionStrategy(max_sessions={self._max})"


class CompositeEvictionStrategy:
    """Several strategies at once: a session is cleared when any of them says so.

    `on_access` returns the union of the delegates' decisions; `on_removed` reaches every
    delegate, so a session one delegate evicted is forgotten by the others too. The composite
    never raises: a delegate that raises is logged (logger `turnlog.toolsearch`) and skipped,
    and the other delegates still run. With no delegates it never evicts.

    Args:
        strategies: the delegates, asked in order.

    Raises:
        InvalidInput: an argument is not a `ToolIndexEvictionStrategy`.
    """

    def __init__(self, *strategies: ToolIndexEvictionStrategy) -> None:
        for strategy in strategies:
            if not isinstance(strategy, ToolIndexEvictionStrategy):
                raise InvalidInput(
                    "CompositeEvictionStrategy takes eviction strategies (objects with "
                    f"on_access and on_removed), got {type(strategy).__name__}"
                )
        self._strategies = tuple(strategies)

    @property
    def strategies(self) -> tuple[ToolIndexEvictionStrategy, ...]:
        """The delegates."""
        return self._strategies

    def on_access(self, session_id: str) -> set[str]:
        """Ask every delegate.

        Returns:
            Every session any delegate named.
        """
        evicted: set[str] = set()
        for strategy in self._strategies:
            try:
                evicted |= strategy.on_access(session_id)
            except Exception:
                _log.exception("eviction strategy %r failed in on_access; skipped", strategy)
        return evicted

    def on_removed(self, session_id: str) -> None:
        """Tell every delegate that `session_id` was cleared."""
        for strategy in self._strategies:
            try:
                strategy.on_removed(session_id)
            except Exception:
                _log.exception("eviction strategy %r failed in on_removed; skipped", strategy)

    def __repr__(self) -> str:
        return f"CompositeEvictionStrategy{self._strategies!r}"


class NeverEvict:
    """Keeps every session's index until it is evicted explicitly.

    Unbounded: memory grows with the number of sessions. Use it only when sessions are few, or
    when you call `ToolSearch.evict` yourself when a session ends.
    """

    def on_access(self, session_id: str) -> set[str]:
        """Returns: an empty set."""
        return set()

    def on_removed(self, session_id: str) -> None:
        """Nothing to forget."""

    def __repr__(self) -> str:
        return "NeverEvict()"


class AlwaysEvict:
    """Clears the current session's index on every access: a full re-index on every request.

    The one deliberate exception to the rule that `on_access` never returns the session being
    accessed. Useful when the tool set behind the same names changes between requests, or to
    measure indexing cost. It bounds nothing by itself (other sessions keep their indexes):
    combine it with `LruEvictionStrategy` in a `CompositeEvictionStrategy` to bound memory.
    """

    def on_access(self, session_id: str) -> set[str]:
        """Returns: `{session_id}`."""
        return {session_id}

    def on_removed(self, session_id: str) -> None:
        """Nothing to forget."""

    def __repr__(self) -> str:
        return "AlwaysEvict()"
