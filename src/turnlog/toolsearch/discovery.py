"""Discovered tools as events of the session log, so they survive compaction and restarts.

Each search that finds tools new to a session appends one `TURNLOG.TOOLS_DISCOVERED` event, whose
payload is a `ToolsDiscovered` record (in the core, `turnlog.payloads`, where the codec reads it):

    {"names": ["get_weather", "send_email"], "query": "weather then email it"}

A custom event type is never part of the view and compaction never covers it, so the tools a
session discovered stay known however much of the conversation a compaction summarizes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from turnlog.events import JsonValue, SessionEvent
from turnlog.payloads import TOOLS_DISCOVERED, ToolsDiscovered

__all__ = [
    "MAX_QUERY_CHARS",
    "TOOLS_DISCOVERED",
    "ToolsDiscovered",
    "discovered_names",
    "discovery_event",
]

MAX_QUERY_CHARS: Final = 1000
"""A query longer than this is stored cut to this length."""


def discovery_event(session_id: str, names: Sequence[str], query: str) -> SessionEvent:
    """The event recording that a search for `query` found `names` in the session.

    Raises:
        InvalidInput: a bad session id, or a name that is not a non-empty string.
    """
    return ToolsDiscovered(tuple(names), query[:MAX_QUERY_CHARS]).to_event(session_id)


def discovered_names(events: Iterable[SessionEvent]) -> list[str]:
    """The tool names the discovery events record, in discovery order, each once.

    Events of other types are skipped, and so is what a malformed payload (written by something
    else) holds that is not a non-empty name.
    """
    found: dict[str, None] = {}
    for event in events:
        if event.type != TOOLS_DISCOVERED:
            continue
        record = event.record
        if type(record) is ToolsDiscovered:
            found.update(dict.fromkeys(record.names))
        else:
            found.update(dict.fromkeys(_names(event.payload)))
    return list(found)


def _names(payload: JsonValue) -> list[str]:
    """The names a payload that is not a `ToolsDiscovered` holds: its non-empty strings under
    "names", if that is a list."""
    names = payload.get("names") if isinstance(payload, dict) else None
    if not isinstance(names, list):
        return []
    return [name for name in names if isinstance(name, str) and name]
