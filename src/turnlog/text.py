"""`event_text`: the one-line rendering of an event that token estimates and summaries use.

Tool calls and tool results count by their full rendering, not by their text (which is None).
A message's parts other than text render as short bracketed notes (`part_note`), so that a
summarizer knows an image or a file was there; their bytes never appear.
"""

from __future__ import annotations

from turnlog.events import Message, SessionEvent
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
)

__all__ = ["event_text", "message_text", "part_note"]

_LABELS = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool"}


def part_note(part: Part) -> str:
    """The bracketed note standing for a part that is not text.

    `[image: image/png, 1024x768, cat.png, 150,000 bytes]`,
    `[file: application/pdf, report.pdf, 12 pages, 48,213 bytes]`, `[audio: audio/wav, 3.2 s]`
    (each item only when known; a part held as an attachment ends with the start of its
    reference, `sha256:` and 12 hex digits), `[reasoning]` (`[reasoning, redacted]`: never its
    text, which is the provider's and goes back to it alone),
    `[provider: anthropic, web_search_tool_result]`.
    A text part is its text.
    """
    if type(part) is TextPart:
        return part.text
    items: list[str]
    if type(part) is ImagePart:
        items = ["image", part.media_type]
        if part.width is not None and part.height is not None:
            items.append(f"{part.width}x{part.height}")
        if part.filename is not None:
            items.append(part.filename)
    elif type(part) is FilePart:
        items = ["file", part.media_type]
        if part.name is not None:
            items.append(part.name)
        if part.pages is not None:
            items.append(f"{part.pages} page" if part.pages == 1 else f"{part.pages} pages")
    elif type(part) is AudioPart:
        items = ["audio", part.media_type]
        if part.seconds is not None:
            items.append(f"{part.seconds:.1f} s")
    elif type(part) is ReasoningPart:
        return "[reasoning, redacted]" if part.redacted else "[reasoning]"
    elif type(part) is ProviderPart:
        return f"[provider: {part.provider}, {part.kind}]"
    else:  # pragma: no cover - the union has no other member
        raise TypeError(f"not a part: {type(part).__name__}")
    if part.size is not None:
        items.append(f"{part.size:,} bytes")
    if part.ref is not None:  # the attachment's first 12 hex digits: enough to tell them apart
        items.append(part.ref[: len("sha256:") + 12])
    return f"[{items[0]}: {', '.join(items[1:])}]"


def _parts_text(parts: tuple[Part, ...]) -> str:
    """Parts in order: runs of text joined as `Message.text` joins them, notes set apart by a
    space."""
    pieces: list[str] = []
    run: list[str] = []
    for part in parts:
        if type(part) is TextPart:
            run.append(part.text)
            continue
        if run:
            pieces.append("".join(run))
            run = []
        pieces.append(part_note(part))
    if run:
        pieces.append("".join(run))
    return " ".join(pieces)


def message_text(message: Message) -> str:
    """The one-line rendering of a message (see `event_text`)."""
    label = _LABELS[message.role]
    if message.role == "tool":
        results = ", ".join(
            f"{r.name} → {'error: ' if r.is_error else ''}"
            f"{_parts_text(r.parts) if r.parts else r.content}"
            for r in message.tool_results
        )
        return f"{label} [responses: {results}]"
    if message.parts:
        head = f"{label}: {_parts_text(message.parts)}"
    else:
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
    A message or tool result with parts renders them in order, text as it is and each other part
    as its note (`part_note`): `User: What is this? [image: image/png, 1024x768, 150,000 bytes]`.
    A non-message event renders as `<TYPE> <payload as given>`.
    """
    if event.message is None:
        return f"{event.type.name} {event.payload!r}"
    return message_text(event.message)
