# Generated from src/turnlog/toolsearch/search_async.py by scripts/async_to_sync.py.
# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.
"""`ToolSearch`: one search tool for the model instead of every tool definition.

The flow of one request (see docs/toolsearch.md):

1. `prepare(session_id, tools)`: eviction runs, and the session's tools are indexed when they
   changed since its last request.
2. Send the model `offered_tools(session_id)`: the search tool and the tools it discovered.
3. When the model calls `tool_search`, answer with `answer_call` (or
   `run_search`): the names of the matching tools, which are now discovered and offered
   from the next step on.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from turnlog.errors import InvalidInput, VersionConflict
from turnlog.events import check_id
from turnlog.service import SessionService
from turnlog.stores.base import EventFilter
from turnlog.toolsearch._sets import SharedSets
from turnlog.toolsearch.base import ToolIndex, ToolIndexEvictionStrategy, ToolReference
from turnlog.toolsearch.bm25 import Bm25ToolIndex
from turnlog.toolsearch.discovery import TOOLS_DISCOVERED, discovered_names, discovery_event
from turnlog.toolsearch.eviction import LruEvictionStrategy
from turnlog.toolsearch.shapes import (
    MAX_RESULTS_LIMIT,
    SEARCH_TOOL_NAME,
    SearchResult,
    as_anthropic_tool,
    as_openai_tool,
    as_tool_dict,
    check_limit,
    search_arguments,
    search_tool_definition,
    tool_from_dict,
)
from turnlog.toolsearch.words import check_tools, tools_fingerprint

__all__ = [
    "MAX_RESULTS_LIMIT",
    "SEARCH_TOOL_NAME",
    "SearchResult",
    "ToolSearch",
    "as_anthropic_tool",
    "as_openai_tool",
    "as_tool_dict",
    "tool_from_dict",
]

CHECKED_ATTEMPTS: Final = 8
"""Version-checked attempts at recording a discovery before it is appended unchecked."""

_log: Final = logging.getLogger("turnlog.toolsearch")


class ToolSearch:
    """Offers the model one search tool, and the tools it found, instead of every tool.

    Memory: each prepared session holds an index of its tools until the eviction strategy (an
    LRU bound of 1,000 sessions by default) or `evict` releases it. Sessions offered the same
    tools share one copy of them.

    Discoveries: with a `service`, every search that finds tools new to a session appends a
    `TURNLOG.TOOLS_DISCOVERED` event to the session's log, and `offered_tools` reads them from
    the log: they survive compaction (which never covers custom events), restarts, and work
    across `ToolSearch` objects sharing a store. The session must exist in the service's
    store. Concurrent searches of a session record each tool once: the append is checked
    against the version the discoveries were read at, and a search that loses the race reads
    them again. Without a service, discoveries are kept in memory and dropped with the
    session's index.

    Thread-safe, and safe across tasks: a session in use (a call running on it, or a `prepared`
    block) is never released; when the eviction strategy names it, it goes when its use ends.

    Args:
        index: where tools are indexed; a new `Bm25ToolIndex` by default.
        eviction: which sessions' indexes to release; `LruEvictionStrategy(1000)` by default.
        max_results: how many tools a search returns when the model does not say (at most 25).
        service: the session service whose logs record discoveries; None keeps them in memory.

    Raises:
        InvalidInput: an argument of the wrong kind, or `max_results` not a positive integer.
    """

    def __init__(
        self,
        index: ToolIndex | None = None,
        *,
        eviction: ToolIndexEvictionStrategy | None = None,
        max_results: int = 5,
        service: SessionService | None = None,
    ) -> None:
        if index is not None and not isinstance(index, ToolIndex):
            raise InvalidInput(f"index must be a ToolIndex, got {type(index).__name__}")
        if eviction is not None and not isinstance(eviction, ToolIndexEvictionStrategy):
            raise InvalidInput(
                f"eviction must be a ToolIndexEvictionStrategy, got {type(eviction).__name__}"
            )
        if service is not None and not isinstance(service, SessionService):
            wanted = "a SessionService"
            raise InvalidInput(f"service must be {wanted}, got {type(service).__name__}")
        self._index: ToolIndex = Bm25ToolIndex() if index is None else index
        self._eviction: ToolIndexEvictionStrategy = (
            LruEvictionStrategy(1000) if eviction is None else eviction
        )
        self._max_results = check_limit(max_results, "max_results")
        self._service = service
        # Guards the state below; held for a few dictionary operations, never across an await.
        self._lock = threading.Lock()
        # Per prepared session: its tools by name (shared between identical tool sets).
        self._toolsets: SharedSets[dict[str, ToolReference]] = SharedSets()
        # Without a service: the names discovered per session, in order.
        self._discovered: dict[str, dict[str, None]] = {}
        # With a service: per session, the log version read and the names it held then.
        self._log_cache: dict[str, tuple[int, tuple[str, ...]]] = {}
        # Per prepared session: the tools given to its last prepare, as a tuple, so the next
        # prepare of the same tools is a comparison of pointers.
        self._snapshots: dict[str, tuple[ToolReference, ...]] = {}
        # Sessions in use: how many calls or `prepared` blocks hold each one. A session the
        # eviction strategy names while it is in use is released when the last one ends.
        self._holds: dict[str, int] = {}
        self._doomed: set[str] = set()
        # Per session being indexed: orders its prepares, as the index works outside the lock.
        self._gates: dict[str, threading.Lock] = {}

    @property
    def index(self) -> ToolIndex:
        """The tool index."""
        return self._index

    @property
    def eviction(self) -> ToolIndexEvictionStrategy:
        """The eviction strategy."""
        return self._eviction

    @property
    def service(self) -> SessionService | None:
        """The session service recording discoveries, or None."""
        return self._service

    @property
    def max_results(self) -> int:
        """How many tools a search returns when not told."""
        return self._max_results

    # -- the per-request flow ------------------------------------------------------------------

    def prepare(self, session_id: str, tools: Sequence[ToolReference]) -> bool:
        """Start a request: run eviction, and index the session's tools if they changed.

        Calls `eviction.on_access(session_id)`, clears the index of every session it names and
        then calls `eviction.on_removed` for each; a named session that is in use (see
        `prepared`) is released when its use ends instead. When the strategy names the current
        session (`AlwaysEvict`), its index is cleared and rebuilt now, without `on_removed` (the
        session stays in use) and keeping its discoveries.

        What an unchanged tool set costs: the same tuple as last time, one identity test; the
        same list, or a new sequence of the same `ToolReference` objects, one pointer
        comparison per tool (in C: about 5 us for 1,115 tools); new objects equal to the last
        ones, one `==` per tool. No tool is serialized again. A changed set costs one digest
        per tool never seen before (`turnlog.toolsearch.words.tool_digest`, kept on the
        object) and the index's insert; the same tools in another order are not re-indexed.

        Returns:
            True when the session's tools were (re-)indexed.

        Raises:
            InvalidInput: a bad session id, or bad tools (not `ToolReference`, blank or
                repeated names, parameters that are not JSON).
        """
        return self._prepare(session_id, tools, hold=False)

    @contextlib.contextmanager
    def prepared(self, session_id: str, tools: Sequence[ToolReference]) -> Iterator[bool]:
        """`prepare`, then keep the session in use until the block ends.

        A session in use is never released: when the eviction strategy (or `evict`) names it
        meanwhile, it is released when the block ends (so the index may hold more sessions
        than an LRU bound, by as many as are in use at once). Use it around one request, so
        that its searches find the tools it prepared however many other sessions are
        prepared meanwhile:

            with search.prepared(session_id, tools):
                ...  # offered_tools, answer_call, run_search

        Yields:
            What `prepare` returned: True when the session's tools were (re-)indexed.

        Raises:
            InvalidInput: see `prepare`.
        """
        indexed = self._prepare(session_id, tools, hold=True)
        try:
            yield indexed
        finally:
            self._unhold(session_id)

    def _prepare(self, session_id: str, tools: Sequence[ToolReference], *, hold: bool) -> bool:
        check_id(session_id, "session id")
        if isinstance(tools, (str, bytes, Mapping)):
            check_tools(tools)  # raises
        snapshot = tools if type(tools) is tuple else tuple(tools)
        # A read without the lock, checked again under it: the comparison (pointers for the
        # same objects, `==` for new ones) is done outside.
        last = self._snapshots.get(session_id)
        same = last is not None and (last is snapshot or last == snapshot)
        checked: list[ToolReference] | None = None
        key = ""
        if not same:
            checked = check_tools(snapshot)
            key = tools_fingerprint(checked, ordered=False)
        with self._lock:
            current = True
            for other in self._eviction.on_access(session_id):
                if other == session_id:  # AlwaysEvict: re-indexed below, in the gate
                    current = False
                    self._toolsets.detach(other)
                    self._snapshots.pop(other, None)
                else:
                    self._release_or_defer(other)
            # Accessed again: the strategy tracks the session again, so it stays.
            self._doomed.discard(session_id)
            # Held from here: while it is indexed (and for the caller's block, with `hold`).
            self._holds[session_id] = self._holds.get(session_id, 0) + 1
            if current and same and self._snapshots.get(session_id) is last:
                if not hold:
                    self._unhold_locked(session_id)
                return False
            gate = self._gates.setdefault(session_id, threading.Lock())
        kept = False
        try:
            if checked is None:  # released or re-prepared since the read
                checked = check_tools(snapshot)
                key = tools_fingerprint(checked, ordered=False)
            # The index works outside the lock, so other sessions are prepared and searched
            # meanwhile; the gate orders the prepares of this session.
            with gate:
                with self._lock:
                    if self._toolsets.key(session_id) == key:
                        self._snapshots[session_id] = snapshot
                        kept = hold
                        return False
                if not current:
                    self._index.clear(session_id)
                self._index.index_tools(session_id, checked)
                listed = checked
                with self._lock:
                    self._toolsets.attach(session_id, key, lambda: {t.name: t for t in listed})
                    self._snapshots[session_id] = snapshot
                kept = hold
                return True
        finally:
            if not kept:
                self._unhold(session_id)

    def _release_or_defer(self, session_id: str) -> None:
        """Release the session now, or when its use ends (lock held)."""
        if self._holds.get(session_id):
            self._doomed.add(session_id)
        else:
            self._release(session_id)

    def _hold(self, session_id: str) -> None:
        with self._lock:
            self._holds[session_id] = self._holds.get(session_id, 0) + 1

    def _unhold(self, session_id: str) -> None:
        with self._lock:
            self._unhold_locked(session_id)

    def _unhold_locked(self, session_id: str) -> None:
        left = self._holds.get(session_id, 0) - 1
        if left > 0:
            self._holds[session_id] = left
            return
        self._holds.pop(session_id, None)
        self._gates.pop(session_id, None)
        if session_id in self._doomed:
            self._doomed.discard(session_id)
            self._release(session_id)

    def _release(self, session_id: str) -> bool:
        """Clear the session's index and state, then tell the eviction strategy (lock held)."""
        held = self._toolsets.key(session_id) is not None
        self._index.clear(session_id)
        self._toolsets.detach(session_id)
        self._snapshots.pop(session_id, None)
        self._discovered.pop(session_id, None)
        self._log_cache.pop(session_id, None)
        self._eviction.on_removed(session_id)
        return held

    def evict(self, session_id: str) -> bool:
        """Release the session's index now (when a conversation ends, for example).

        Clears the index, forgets the tool fingerprint and the in-memory discoveries (the log's
        stay), and calls `eviction.on_removed`. The next `prepare` indexes the tools again. A
        session in use (a call running on it, or a `prepared` block) is released when that use
        ends.

        Returns:
            True when the session had been prepared.
        """
        with self._lock:
            if self._holds.get(session_id):
                self._doomed.add(session_id)
                return self._toolsets.key(session_id) is not None
            return self._release(session_id)

    def sessions(self) -> int:
        """How many sessions hold prepared tools."""
        with self._lock:
            return self._toolsets.sessions()

    # -- the search tool -----------------------------------------------------------------------

    def search_tool_definition(self) -> ToolReference:
        """The search tool to offer the model, in the neutral shape.

        Named `tool_search`; its parameters are a JSON schema with a required `query` string
        and an optional `max_results` integer. Turn it into a provider's shape with
        `as_openai_tool` or `as_anthropic_tool`. A fresh object on each call.
        """
        return search_tool_definition(self._max_results)

    def run_search(
        self, session_id: str, query: str, max_results: int | None = None
    ) -> SearchResult:
        """Answer the search tool: the session's tools matching `query`.

        The tools found become discovered: offered by `offered_tools` from now on. With a
        service, tools new to the session are recorded in its log first.

        Args:
            session_id: the session, prepared for this request.
            query: what the model asked for.
            max_results: at most this many tools (capped at 25); `max_results` of the
                `ToolSearch` when None.

        Returns:
            The hits, best first (none for a session that was not prepared); `to_json()` gives
            the tool result to send back.

        Raises:
            InvalidInput: `query` is not a string, or `max_results` is not a positive integer.
            SessionNotFound: with a service, the session does not exist in its store.
        """
        if not isinstance(query, str):
            raise InvalidInput(f"query must be a string, got {type(query).__name__}")
        limit = (
            self._max_results if max_results is None else check_limit(max_results, "max_results")
        )
        self._hold(session_id)
        try:
            hits = self._index.search(session_id, query, max_results=limit)
            with self._lock:
                toolset = self._toolsets.get(session_id)
            if toolset is None:
                _log.warning(
                    "tool search in session %r, which is not prepared (never, or released "
                    "since): nothing found; call prepare first, and see ToolSearch.prepared",
                    session_id,
                )
                return SearchResult(query, (), ())
            hits = [hit for hit in hits if hit.name in toolset]
            if not hits:
                return SearchResult(query, (), ())
            found = tuple(dict.fromkeys(hit.name for hit in hits))
            new = self._discover(session_id, found, query)
            return SearchResult(query, tuple(hits), new)
        finally:
            self._unhold(session_id)

    def answer_call(self, session_id: str, arguments: str | Mapping[str, Any]) -> str:
        """Answer a `tool_search` call from its raw arguments, as the tool result to send.

        Forgiving of the model: a malformed argument string or a missing query gives a result
        that says so (the model can retry); a `max_results` that is not a positive integer is
        replaced by the default.

        Args:
            session_id: the session.
            arguments: the call's arguments: the JSON string the model produced, or parsed.

        Returns:
            `SearchResult.to_json()`, or `{"tools": [], "error": ...}`.

        Raises:
            SessionNotFound: with a service, the session does not exist in its store.
        """
        read = search_arguments(arguments)
        if isinstance(read, str):
            return read
        query, limit = read
        return self.run_search(session_id, query, limit).to_json()

    def offered_tools(self, session_id: str) -> list[ToolReference]:
        """The tools to send the model: the search tool, then every tool discovered so far.

        Discovered tools come in discovery order, as defined in the tools of the session's last
        `prepare`; a discovered tool no longer among them is left out. A session that was not
        prepared gets the search tool alone.

        Raises:
            SessionNotFound: with a service, a prepared session does not exist in its store.
        """
        offered = [self.search_tool_definition()]
        self._hold(session_id)
        try:
            with self._lock:
                toolset = self._toolsets.get(session_id)
            if not toolset:
                return offered
            known = self._known(session_id)
            offered.extend(toolset[name] for name in known if name in toolset)
            return offered
        finally:
            self._unhold(session_id)

    def discovered(self, session_id: str) -> list[str]:
        """The names of the tools discovered in the session, in discovery order.

        With a service, read from the log (every tool ever discovered there); without one, the
        in-memory record of a prepared session.

        Raises:
            SessionNotFound: with a service, the session does not exist in its store.
        """
        return list(self._known(session_id))

    # -- discoveries ---------------------------------------------------------------------------

    def _known(self, session_id: str) -> tuple[str, ...]:
        """The names discovered in the session, in order."""
        service = self._service
        if service is None:
            with self._lock:
                return tuple(self._discovered.get(session_id, ()))
        return self._read(service, session_id)[1]

    def _read(self, service: SessionService, session_id: str) -> tuple[int, tuple[str, ...]]:
        """The session's version, and the names its log had discovered by then."""
        version = service.version(session_id)
        with self._lock:
            cached = self._log_cache.get(session_id)
        if cached is not None and cached[0] == version:
            return cached
        events = service.events(session_id, EventFilter(event_types=[TOOLS_DISCOVERED]))
        names = tuple(discovered_names(events))
        self._remember(session_id, version, names)
        return version, names

    def _remember(self, session_id: str, version: int, names: tuple[str, ...]) -> None:
        """Cache what the log held at `version`; only for prepared sessions, so the cache is
        bounded like the indexes."""
        with self._lock:
            if self._toolsets.key(session_id) is not None:
                self._log_cache[session_id] = (version, names)

    def _discover(self, session_id: str, found: tuple[str, ...], query: str) -> tuple[str, ...]:
        """Record those of `found` the session had not discovered; returns them.

        With a service, the discovery event is appended at the version the known names were
        read at; when another writer appended first, the names are read again and only those
        still new are recorded. After `CHECKED_ATTEMPTS` lost races (a log busy with other
        writes), it is appended unchecked: a name recorded twice is read back once.
        """
        service = self._service
        if service is None:
            with self._lock:
                held = self._discovered.get(session_id, {})
                new = tuple(name for name in found if name not in held)
                if new and self._toolsets.key(session_id) is not None:
                    self._discovered.setdefault(session_id, {}).update(dict.fromkeys(new))
            return new
        for _ in range(CHECKED_ATTEMPTS):
            version, known = self._read(service, session_id)
            new = tuple(name for name in found if name not in known)
            if not new:
                return new
            event = discovery_event(session_id, new, query)
            try:
                stored = service.append_events(session_id, [event], version)
            except VersionConflict:
                continue
            self._remember(session_id, stored, (*known, *new))
            return new
        known = self._known(session_id)
        new = tuple(name for name in found if name not in known)
        if new:
            service.append_event(discovery_event(session_id, new, query))
        return new

    def __repr__(self) -> str:
        return (
            f"ToolSearch(index={self._index!r}, eviction={self._eviction!r}, "
            f"max_results={self._max_results}, service={self._service!r})"
        )
