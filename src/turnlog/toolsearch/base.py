"""The shapes of tool search: tool references, hits, the index and eviction protocols."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["ToolHit", "ToolIndex", "ToolIndexEvictionStrategy", "ToolReference"]


@dataclass(frozen=True, slots=True)
class ToolReference:
    """A tool the model may discover: its name, description and JSON-schema parameters."""

    name: str
    """The tool's name, as the model calls it."""
    description: str
    """What the tool does."""
    parameters: Mapping[str, Any] | None = field(default=None, hash=False, compare=True)
    """The JSON schema of its arguments (an object schema), or None. Treated as frozen: tool
    search reads it once per object (see `turnlog.toolsearch.words.tool_digest`), so change a
    tool by building a new `ToolReference`, never by editing this mapping in place."""
    _digest: bytes | None = field(default=None, init=False, repr=False, compare=False, hash=False)
    # The tool's digest once computed (words.tool_digest), so a tool is serialized once.

    def as_dict(self) -> dict[str, Any]:
        """The neutral shape, as plain JSON: `{"name", "description", "parameters"}`.

        `parameters` is a copy (an empty object schema when None).
        """
        return {
            "name": self.name,
            "description": self.description,
            "parameters": _plain(
                self.parameters
                if self.parameters is not None
                else {"type": "object", "properties": {}}
            ),
        }

    def as_openai_tool(self) -> dict[str, Any]:
        """The OpenAI Chat Completions shape: `{"type": "function", "function": {...}}`."""
        return {"type": "function", "function": self.as_dict()}

    def as_anthropic_tool(self) -> dict[str, Any]:
        """The Anthropic Messages shape: `{"name", "description", "input_schema"}`."""
        neutral = self.as_dict()
        return {
            "name": neutral["name"],
            "description": neutral["description"],
            "input_schema": neutral["parameters"],
        }


def _plain(value: object) -> Any:
    """A deep copy of JSON-like data with every mapping a dict and every sequence a list."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class ToolHit:
    """One search result: a tool name and its score (higher is better)."""

    name: str
    score: float


@runtime_checkable
class ToolIndex(Protocol):
    """Per-session tool indexes the model searches."""

    def index_tools(self, session_id: str, tools: Sequence[ToolReference]) -> None:
        """Replace the session's index with `tools`."""
        ...

    def search(
        self, session_id: str, query: str, *, max_results: int | None = None
    ) -> list[ToolHit]:
        """The best matches for `query`, best first; nothing for an unknown session."""
        ...

    def clear(self, session_id: str) -> None:
        """Forget the session's index (a no-op for an unknown session)."""
        ...

    def size(self, session_id: str) -> int:
        """How many tools the session's index holds (0 when unknown)."""
        ...


@runtime_checkable
class ToolIndexEvictionStrategy(Protocol):
    """Decides which sessions' indexes to clear, so memory stays bounded."""

    def on_access(self, session_id: str) -> set[str]:
        """Called at the start of each request for `session_id`.

        Returns:
            The sessions whose indexes must be cleared now; never `session_id` itself (except
            `AlwaysEvict`).
        """
        ...

    def on_removed(self, session_id: str) -> None:
        """Called after a session's index was cleared; forget its tracking state."""
        ...
