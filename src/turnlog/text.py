"""`event_text`: the one-line rendering of an event that token estimates and summaries use.

Tool calls and tool results count by their full rendering, not by their text (which is None).
"""

from __future__ import annotations

from turnlog.events import Message, SessionEvent

__all__ = ["event_text", "message_text"]

_LABELS = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool"}


def message_text(message: Message) -> str:
    """The one-line rendering of a message (see `event_text`)."""
    label = _LABELS[message.role]
    if message.role == "tool":
        results = ", ".join(
            f"{r.name} → {'error: ' if r.is_error else ''}{r.content}" for r in message.tool_results
        )
        return f"{label} [responses: {results}]"
    head = label if message.text is None else f"{label}: {message.text}"
    if message.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        return f"{head} [tool calls: {calls}]"
    return head


def event_text(event: SessionEvent) -> str:
    """The one-line rendering of an event.

    `System: <text>`, `User: <text>`, `Assistant: <text>`; an assistant message with tool calls
    `Assistant [tool calls: name(args), ...]`, with its text first when it has one
    (`Assistant: <text> [tool calls: ...]`); a tool message `Tool [responses: name → content, ...]`.
    A non-message event renders as `<TYPE> <payload as given>`.
    """
    if event.message is None:
        return f"{event.type.name} {event.payload!r}"
    return message_text(event.message)
