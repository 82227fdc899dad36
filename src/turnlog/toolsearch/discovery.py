"""Discovered tools as events of the session log, so they survive compaction and restarts.

Each search that finds tools new to a session appends one `TURNLOG.TOOLS_DISCOVERED` event:

    {"names": ["get_weather", "send_email"], "query": "weather then email it"}

A custom event type is never part of the view and compaction never covers it, so the tools a
session discovered stay known however much of the conversation a compaction summarizes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from turnlog.events import EventType, SessionEvent

__all__ = ["MAX_QUERY_CHARS", "TOOLS_DISCOVERED", "discovered_names", "discovery_event"]

TOOLS_DISCOVERED: Final = EventType.of("TURNLOG.TOOLS_DISCOVERED")
"""The event type of a discovery."""

MAX_QUERY_CHARS: Final = 1000
"""A query longer than this is stored cut to this length."""


def discovery_event(session_id: str, names: Sequence[str], query: str) -> SessionEvent:
    """The event recording that a search for `query` found `names` in the session.

    Raises:
        InvalidInput: a bad session id.
    """
    return SessionEvent.for_payload(
        session_id,
        TOOLS_DISCOVERED,
        {"names": list(names), "query": query[:MAX_QUERY_CHARS]},
    )


def discovered_names(events: Iterable[SessionEvent]) -> list[str]:
    """The tool names the discovery events record, in discovery order, each once.

    Events of other types and malformed payloads (written by something else) are skipped.
    """
    found: dict[str, None] = {}
    for event in events:
        if event.type != TOOLS_DISCOVERED or not isinstance(event.payload, dict):
            continue
        names = event.payload.get("names")
        if not isinstance(names, list):
            continue
        for name in names:
            if isinstance(name, str) and name:
                found[name] = None
    return list(found)
