"""The pure parts of tool search, shared by `ToolSearch` and `AsyncToolSearch`.

The search tool's definition, the tool shapes of the providers, what one search found, and the
reading of the model's `tool_search` arguments. No I/O, so this module is not twinned.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from turnlog.errors import InvalidInput
from turnlog.toolsearch.base import ToolHit, ToolReference

__all__ = [
    "MAX_RESULTS_LIMIT",
    "SEARCH_TOOL_NAME",
    "SearchResult",
    "as_anthropic_tool",
    "as_openai_tool",
    "as_tool_dict",
    "check_limit",
    "error_answer",
    "lenient_limit",
    "search_arguments",
    "search_tool_definition",
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


def search_tool_definition(max_results: int) -> ToolReference:
    """The search tool, in the neutral shape, whose `max_results` defaults to `max_results`.

    Returns:
        A fresh `ToolReference` named `tool_search`; its parameters are a JSON schema with a
        required `query` string and an optional `max_results` integer.
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
                    "default": max_results,
                    "description": _MAX_RESULTS_DESCRIPTION,
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    )


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


def check_limit(value: object, what: str) -> int:
    """`value` as a result limit, capped at `MAX_RESULTS_LIMIT`.

    Raises:
        InvalidInput: `value` is not a positive integer.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{what} must be a positive integer, got {value!r}")
    return min(value, MAX_RESULTS_LIMIT)


def error_answer(message: str) -> str:
    """The tool result for a `tool_search` call that cannot be answered.

    Returns:
        `{"tools": [], "error": message}` as JSON.
    """
    return json.dumps({"tools": [], "error": message})


def lenient_limit(value: object) -> int | None:
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


def search_arguments(arguments: str | Mapping[str, Any]) -> tuple[str, int | None] | str:
    """Read a `tool_search` call's arguments, forgiving the model.

    Args:
        arguments: the JSON string the model produced, or the arguments parsed.

    Returns:
        `(query, max_results)`, with `max_results` None when missing or not a positive integer;
        or, when there is no usable query, the tool result saying what is wrong
        (`error_answer`).
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return error_answer('the arguments are not valid JSON; send {"query": "..."}')
    if not isinstance(arguments, Mapping):
        return error_answer('the arguments must be an object: {"query": "..."}')
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        return error_answer("give a non-empty 'query' saying what the tool should do")
    return query, lenient_limit(arguments.get("max_results"))
