"""`ToolSearch`: one search tool for the model instead of every tool definition.

The flow of one request (see docs/toolsearch.md):

1. `prepare(session_id, tools)`: eviction runs, and the session's tools are indexed when they
   changed since its last request.
2. Send the model `offered_tools(session_id)`: the search tool and the tools it discovered.
3. When the model calls `tool_search`, answer with `answer_call` (or `run_search`): the names of
   the matching tools, which are now discovered and offered from the next step on.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from turnlog.errors import InvalidInput
from turnlog.events import check_id
from turnlog.service import SessionService
from turnlog.stores.base import EventFilter
from turnlog.toolsearch._sets import SharedSets
from turnlog.toolsearch.base import ToolHit, ToolIndex, ToolIndexEvictionStrategy, ToolReference
from turnlog.toolsearch.bm25 import Bm25ToolIndex
from turnlog.toolsearch.discovery import TOOLS_DISCOVERED, discovered_names, discovery_event
from turnlog.toolsearch.eviction import LruEvictionStrategy
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

SEARCH_TOOL_NAME: Final = "tool_search"
"""The name of the search tool the model calls."""

MAX_RESULTS_LIMIT: Final = 25
"""The most tools one search returns, whatever the model asks for."""

_DESCRIPTION: Final = (
    "Search the tools available to you. Only the tools found with this search can be "
    "called, so search first whenever you need to act: describe the capability in a few "
    "plain words (for example 'weather forecast for a city' or 'send an email with an "
    "attachment'). The names of the best matching tools come back, and those tools become "
    "available to call from your next step. Tools found earlier in this conversation stay "
    "available. If nothing fits, search again with other words."
)
_QUERY_DESCRIPTION: Final = "What the tool should do, in a few plain words."
_MAX_RESULTS_DESCRIPTION: Final = "How many tools to return at most."


def as_tool_dict(tool: ToolReference) -> dict[str, Any]:
    """The neutral shape: `{"name", "description", "parameters"}` (`ToolReference.as_dict`)."""
    return tool.as_dict()


def as_openai_tool(tool: ToolReference) -> dict[str, Any]:
    """The OpenAI Chat Completions shape (`ToolReference.as_openai_tool`)."""
    return tool.as_openai_tool()


def as_anthropic_tool(tool: ToolReference) -> dict[str, Any]:
    """The Anthropic Messages shape (`ToolReference.as_anthropic_tool`)."""
    return tool.as_anthropic_tool()


def tool_from_dict(spec: Mapping[str, Any]) -> ToolReference:
    """A `ToolReference` from a tool definition in the neutral, OpenAI or Anthropic shape.

    Raises:
        InvalidInput: `spec` is none of those shapes.
    """
    if not isinstance(spec, Mapping):
        raise InvalidInput(f"a tool definition must be a mapping, got {type(spec).__name__}")
    if spec.get("type") == "function" and isinstance(spec.get("function"), Mapping):
        spec = spec["function"]
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(f"a tool definition needs a non-blank 'name', got {name!r}")
    description = spec.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise InvalidInput(f"the 'description' of tool {name!r} must be a string")
    parameters = spec.get("parameters", spec.get("input_schema"))
    if parameters is not None and not isinstance(parameters, Mapping):
        raise InvalidInput(f"the parameters of tool {name!r} must be a JSON-schema object")
    return ToolReference(name, description, parameters)


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What one search found."""

    query: str
    """The query, as given."""
    hits: tuple[ToolHit, ...]
    """The matching tools, best first."""
    new: tuple[str, ...]
    """The names among `hits` the session had not discovered before."""

    @property
    def names(self) -> list[str]:
        """The matching tool names, best first."""
        return [hit.name for hit in self.hits]

    def to_json(self) -> str:
        """The tool result to send the model: `{"tools": [names], "message": ...}`."""
        names = self.names
        if names:
            message = "These tools are now available: call them directly."
        else:
            message = "No tool matched. Search again with other words."
        return json.dumps({"tools": names, "message": message})


def _check_limit(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{what} must be a positive integer, got {value!r}")
    return min(value, MAX_RESULTS_LIMIT)


class ToolSearch:
    """Offers the model one search tool, and the tools it found, instead of every tool.

    Memory: each prepared session holds an index of its tools until the eviction strategy (an
    LRU bound of 1,000 sessions by default) or `evict` releases it. Sessions offered the same
    tools share one copy of them.

    Discoveries: with a `service`, every search that finds tools new to a session appends a
    `TURNLOG.TOOLS_DISCOVERED` event to the session's log, and `offered_tools` reads them from
    the log: they survive compaction (which never covers custom events), restarts, and work
    across `ToolSearch` objects sharing a store. The session must exist in the service's store.
    Without a service, discoveries are kept in memory and dropped with the session's index.

    Thread-safe.

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
            raise InvalidInput(f"service must be a SessionService, got {type(service).__name__}")
        self._index: ToolIndex = Bm25ToolIndex() if index is None else index
        self._eviction: ToolIndexEvictionStrategy = (
            LruEvictionStrategy(1000) if eviction is None else eviction
        )
        self._max_results = _check_limit(max_results, "max_results")
        self._service = service
        self._lock = threading.Lock()
        # Per prepared session: its tools by name (shared between identical tool sets).
        self._toolsets: SharedSets[dict[str, ToolReference]] = SharedSets()
        # Without a service: the names discovered per session, in order.
        self._discovered: dict[str, dict[str, None]] = {}
        # With a service: per session, the log version read and the names it held then.
        self._log_cache: dict[str, tuple[int, tuple[str, ...]]] = {}

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
        then calls `eviction.on_removed` for each. When the strategy names the current session
        (`AlwaysEvict`), its index is cleared and rebuilt now, without `on_removed` (the
        session stays in use) and keeping its discoveries. The session is re-indexed only when
        its tools differ from the last prepared ones (a fingerprint over names, descriptions
        and parameters, in any order), so an unchanged tool set costs one fingerprint.

        Returns:
            True when the session's tools were (re-)indexed.

        Raises:
            InvalidInput: a bad session id, or bad tools (not `ToolReference`, blank or
                repeated names, parameters that are not JSON).
        """
        check_id(session_id, "session id")
        checked = check_tools(tools)
        key = tools_fingerprint(checked, ordered=False)
        with self._lock:
            for other in self._eviction.on_access(session_id):
                if other == session_id:
                    self._index.clear(other)
                    self._toolsets.detach(other)
                else:
                    self._release(other)
            if self._toolsets.key(session_id) == key:
                return False
            self._index.index_tools(session_id, checked)
            self._toolsets.attach(session_id, key, lambda: {t.name: t for t in checked})
            return True

    def _release(self, session_id: str) -> bool:
        """Clear the session's index and state, then tell the eviction strategy (lock held)."""
        held = self._toolsets.key(session_id) is not None
        self._index.clear(session_id)
        self._toolsets.detach(session_id)
        self._discovered.pop(session_id, None)
        self._log_cache.pop(session_id, None)
        self._eviction.on_removed(session_id)
        return held

    def evict(self, session_id: str) -> bool:
        """Release the session's index now (when a conversation ends, for example).

        Clears the index, forgets the tool fingerprint and the in-memory discoveries (the log's
        stay), and calls `eviction.on_removed`. The next `prepare` indexes the tools again.

        Returns:
            True when the session had been prepared.
        """
        with self._lock:
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
        return ToolReference(
            SEARCH_TOOL_NAME,
            _DESCRIPTION,
            {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": _QUERY_DESCRIPTION},
                    "max_results": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_RESULTS_LIMIT,
                        "default": self._max_results,
                        "description": _MAX_RESULTS_DESCRIPTION,
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        )

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
            self._max_results if max_results is None else _check_limit(max_results, "max_results")
        )
        hits = self._index.search(session_id, query, max_results=limit)
        with self._lock:
            toolset = self._toolsets.get(session_id) or {}
        hits = [hit for hit in hits if hit.name in toolset]
        if not hits:
            return SearchResult(query, (), ())
        known = set(self._known(session_id))
        new = tuple(dict.fromkeys(hit.name for hit in hits if hit.name not in known))
        if new:
            self._record(session_id, new, query)
        return SearchResult(query, tuple(hits), new)

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
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                return _error('the arguments are not valid JSON; send {"query": "..."}')
        if not isinstance(arguments, Mapping):
            return _error('the arguments must be an object: {"query": "..."}')
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return _error("give a non-empty 'query' saying what the tool should do")
        limit = _lenient_limit(arguments.get("max_results"))
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
        with self._lock:
            toolset = self._toolsets.get(session_id)
        if not toolset:
            return offered
        offered.extend(toolset[name] for name in self._known(session_id) if name in toolset)
        return offered

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
        service = self._service
        if service is None:
            with self._lock:
                return tuple(self._discovered.get(session_id, ()))
        version = service.version(session_id)
        with self._lock:
            cached = self._log_cache.get(session_id)
        if cached is not None and cached[0] == version:
            return cached[1]
        events = service.events(session_id, EventFilter(event_types=[TOOLS_DISCOVERED]))
        names = tuple(discovered_names(events))
        with self._lock:
            # Cached only for prepared sessions, so the cache is bounded like the indexes.
            if self._toolsets.key(session_id) is not None:
                self._log_cache[session_id] = (version, names)
        return names

    def _record(self, session_id: str, new: tuple[str, ...], query: str) -> None:
        service = self._service
        if service is None:
            with self._lock:
                if self._toolsets.key(session_id) is not None:
                    self._discovered.setdefault(session_id, {}).update(dict.fromkeys(new))
            return
        stored = service.append_event(discovery_event(session_id, new, query))
        with self._lock:
            cached = self._log_cache.get(session_id)
            if cached is not None and stored.seq is not None and cached[0] == stored.seq - 1:
                names = tuple(dict.fromkeys((*cached[1], *new)))
                self._log_cache[session_id] = (stored.seq, names)
            else:
                self._log_cache.pop(session_id, None)

    def __repr__(self) -> str:
        return (
            f"ToolSearch(index={self._index!r}, eviction={self._eviction!r}, "
            f"max_results={self._max_results}, service={self._service!r})"
        )


def _error(message: str) -> str:
    return json.dumps({"tools": [], "error": message})


def _lenient_limit(value: object) -> int | None:
    """A model's max_results as a positive integer, or None for the default."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            return None
        value = int(value)
    if isinstance(value, int) and value >= 1:
        return min(value, MAX_RESULTS_LIMIT)
    return None
