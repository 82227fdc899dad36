"""The attachments of events, named for summaries and stand-ins: one note per part.

Both summarizers name the attachments of the events they cover, and a cleared tool result names
those it held, with the same note: `turnlog.text.part_note` (kind, media type, size in pixels or
pages or seconds, name, bytes, the start of its sha256 reference), followed by where the bytes
are fetched from for a part held by URL. Text and reasoning are not attachments. A note never
holds the bytes: a `data:` URL is named as one, not quoted.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

from turnlog.events import Message
from turnlog.parts import Part, ReasoningPart, TextPart
from turnlog.text import part_note

__all__ = ["attachment_note", "attachment_notes"]

_URL_CHARS: Final = 120
"""The most characters of a URL a note quotes (a signed URL can run to a thousand)."""


def attachment_note(part: Part) -> str | None:
    """The note naming `part` as an attachment; None for a text or a reasoning part.

    `[image: image/jpeg, cat.jpg, 48,213 bytes, sha256:abababababab]`, or for a part held by URL
    `[file: application/pdf, report.pdf, https://example.com/report.pdf]` (a URL over 120
    characters cut with "…", a `data:` URL named `data: URL`). A provider's block is named by its
    `part_note` (`[provider: anthropic, web_search_tool_result]`).
    """
    if type(part) is TextPart or type(part) is ReasoningPart:
        return None
    note = part_note(part)
    url = getattr(part, "url", None)
    if not isinstance(url, str):
        return note
    if url[:5].lower() == "data:":
        shown = "data: URL"
    elif len(url) > _URL_CHARS:
        shown = url[: _URL_CHARS - 1] + "…"
    else:
        shown = url
    return f"{note[:-1]}, {shown}]"  # a note that is not text ends with "]"


def attachment_notes(message: Message) -> list[tuple[str | None, str]]:
    """The attachments of `message` and of its tool results, in order.

    Returns:
        `(tool, note)` pairs: `tool` is None for the message's own parts, the tool's name for
        a tool result's.
    """
    out: list[tuple[str | None, str]] = []
    for part in message.parts:
        note = attachment_note(part)
        if note is not None:
            out.append((None, note))
    for result in message.tool_results:
        for part in result.parts:
            note = attachment_note(part)
            if note is not None:
                out.append((result.name, note))
    return out
