"""Content parts <-> Anthropic Messages content blocks (plain JSON), both ways.

Pure: no `anthropic` import, no I/O; used by `turnlog.models.anthropic_format`.

Sent:

- `TextPart` -> a text block (an empty text is left out: the API refuses empty text blocks);
- `ImagePart` -> an image block: inline bytes of a type the API takes (JPEG, PNG, GIF, WebP) as a
  base64 source with their media type, a URL as a url source;
- `FilePart` -> a document block: a PDF inline (base64 source) or by URL (url source); a text
  file (`text/*`, inline, UTF-8) as a plain-text source; the part's `name` as its title;
- `ReasoningPart` of provider "anthropic" -> a `thinking` block (text and signature) or, when
  redacted, a `redacted_thinking` block (its data), exactly as received; a thinking part without
  a signature (the API refuses one) and reasoning of any other provider are left out;
- `ProviderPart` of provider "anthropic" -> its block as stored (a copy); any other provider's
  is left out, and so is a place marker (`MARKER_KIND`: where a tool_use block stood among a
  reply's other blocks, which `turnlog.models.anthropic_format` sends the call at).

What the API cannot take (audio, an attachment reference no store resolves yet, an image or file
type the API does not read) goes as a text block holding the part's note
(`turnlog.text.part_note`), so the model knows it was there.

Read: `thinking` -> `ReasoningPart("anthropic", text=, signature=)`, `redacted_thinking` ->
`ReasoningPart("anthropic", encrypted=<data>, redacted=True)`, image and document blocks ->
`ImagePart` / `FilePart`, any other block but text and tool_use ->
`ProviderPart("anthropic", <its type>, <the block>)` (a `compaction` block of the API's
server-side compaction among them, kept whole: content, encrypted content and signature).
"""

from __future__ import annotations

import base64
import binascii
import copy
from collections.abc import Sequence
from typing import Any, Final

from turnlog.events import ToolCall
from turnlog.models.base import MalformedReply, field_of
from turnlog.parts import (
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
)
from turnlog.text import part_note

__all__ = [
    "COMPACTION",
    "IMAGE_TYPES",
    "MARKER_KIND",
    "PROVIDER",
    "block_part",
    "call_marker",
    "marked_call",
    "part_block",
    "placed",
]

PROVIDER: Final = "anthropic"
"""The provider name of the reasoning and provider parts this wire format makes and takes."""

IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The media types of the images the Messages API takes inline."""

MARKER_KIND: Final = "tool_use"
"""The kind of the `ProviderPart` that marks where a tool_use block stood among a reply's
blocks: `ProviderPart("anthropic", "tool_use", {"id": <the call's id>})`. Only a call that
another block followed gets one (interleaved thinking: thinking between tool calls); a reply
whose calls come last has none, and is stored as it was before markers existed. The marker is
never sent: the call's tool_use block goes in its place."""

COMPACTION: Final = "compaction"
"""The type of the block the API's server-side compaction returns (`compact_20260112`)."""


def call_marker(call_id: str) -> ProviderPart:
    """The place marker of the call `call_id` (see `MARKER_KIND`)."""
    return ProviderPart(PROVIDER, MARKER_KIND, {"id": call_id})


def placed(items: Sequence[Part | ToolCall]) -> tuple[list[Part], list[ToolCall]]:
    """A reply's blocks, read in order (parts and calls), as a message's parts and calls: each
    call that a part follows gets its place marker there; the calls after the last part get
    none (see `MARKER_KIND`).

    Returns:
        (the parts, markers included; the calls in order).
    """
    last_part = max((i for i, x in enumerate(items) if not isinstance(x, ToolCall)), default=-1)
    parts: list[Part] = []
    calls: list[ToolCall] = []
    for i, x in enumerate(items):
        if isinstance(x, ToolCall):
            calls.append(x)
            if i < last_part:
                parts.append(call_marker(x.id))
        else:
            parts.append(x)
    return parts, calls


def marked_call(part: Part) -> str | None:
    """The call id of a place marker (see `MARKER_KIND`); None for any other part."""
    if type(part) is not ProviderPart or part.provider != PROVIDER or part.kind != MARKER_KIND:
        return None
    data = part.data
    if isinstance(data, dict) and len(data) == 1 and isinstance(data.get("id"), str):
        return str(data["id"])
    return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _note(part: Part) -> dict[str, Any]:
    return {"type": "text", "text": part_note(part)}


def _image(part: ImagePart) -> dict[str, Any]:
    if part.data is not None and part.media_type.lower() in IMAGE_TYPES:
        source = {"type": "base64", "media_type": part.media_type.lower(), "data": _b64(part.data)}
        return {"type": "image", "source": source}
    if part.url is not None:
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    return _note(part)


def _document(part: FilePart) -> dict[str, Any]:
    media_type = part.media_type.lower()
    source: dict[str, Any] | None = None
    if media_type == "application/pdf" and part.data is not None:
        source = {"type": "base64", "media_type": "application/pdf", "data": _b64(part.data)}
    elif media_type == "application/pdf" and part.url is not None:
        source = {"type": "url", "url": part.url}
    elif media_type.startswith("text/") and part.data is not None:
        try:
            text = part.data.decode("utf-8")
        except UnicodeDecodeError:
            return _note(part)
        source = {"type": "text", "media_type": "text/plain", "data": text}
    if source is None:
        return _note(part)
    block: dict[str, Any] = {"type": "document", "source": source}
    if part.name is not None:
        block["title"] = part.name
    return block


def part_block(part: Part) -> dict[str, Any] | None:
    """The content block `part` is sent as; None when it is not sent (see the module
    docstring). The block is a new object: marking it (a cache breakpoint) changes no part."""
    if type(part) is TextPart:
        return {"type": "text", "text": part.text} if part.text else None
    if type(part) is ImagePart:
        return _image(part)
    if type(part) is FilePart:
        return _document(part)
    if type(part) is ReasoningPart:
        if part.provider != PROVIDER:
            return None
        if part.redacted:
            if part.encrypted is None:
                return None
            return {"type": "redacted_thinking", "data": part.encrypted}
        if part.signature is None:
            return None
        return {"type": "thinking", "thinking": part.text or "", "signature": part.signature}
    if type(part) is ProviderPart:
        if part.provider != PROVIDER or not isinstance(part.data, dict):
            return None
        if marked_call(part) is not None:
            return None  # a place marker: the caller puts the call's block there
        block: dict[str, Any] = copy.deepcopy(part.data)
        return block
    return _note(part)  # audio: the Messages API takes none


def _source_bytes(source: dict[str, Any], what: str) -> bytes:
    data = field_of(source, "data", str, what)
    assert isinstance(data, str)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedReply(f"{what} has data that is not base64") from exc


_EXTENSIONS: Final = {".png": "image/png", ".gif": "image/gif", ".webp": "image/webp"}


def _guess_image_type(url: str) -> str:
    """The media type of an image the wire names by URL alone, from its extension (the
    Messages API sends none back): image/jpeg unless the path ends in .png, .gif or .webp."""
    path = url.split("?", 1)[0].split("#", 1)[0].lower()
    return next((t for ext, t in _EXTENSIONS.items() if path.endswith(ext)), "image/jpeg")


def _media(block: dict[str, Any], what: str) -> Part:
    """An image or document block as its part; a source this module does not read (a file id,
    a content source) as a provider part."""
    kind = block["type"]
    source = block.get("source")
    stype = source.get("type") if isinstance(source, dict) else None
    assert source is None or isinstance(source, dict)
    if kind == "image" and source is not None:
        if stype == "base64":
            media_type = str(field_of(source, "media_type", str, what))
            return ImagePart(media_type, data=_source_bytes(source, what))
        if stype == "url":
            url = str(field_of(source, "url", str, what))
            return ImagePart(_guess_image_type(url), url=url)
    if kind == "document" and source is not None:
        title = block.get("title") if isinstance(block.get("title"), str) else None
        if stype == "base64":
            media_type = str(field_of(source, "media_type", str, what))
            return FilePart(media_type, data=_source_bytes(source, what), name=title)
        if stype == "url":
            url = str(field_of(source, "url", str, what))
            return FilePart("application/pdf", url=url, name=title)
        if stype == "text":
            text = str(field_of(source, "data", str, what))
            return FilePart("text/plain", data=text.encode("utf-8"), name=title)
    return ProviderPart(PROVIDER, str(kind), block)


def block_part(block: object, what: str) -> Part:
    """A content block other than text and tool_use, read as its part (see the module
    docstring).

    Raises:
        MalformedReply: a thinking block without its text or signature, a redacted_thinking
            block without its data, a block that is no JSON object.
    """
    kind = field_of(block, "type", str, what)
    assert isinstance(block, dict)
    if kind == "thinking":
        return ReasoningPart(
            PROVIDER,
            text=str(field_of(block, "thinking", str, f"{what}'s thinking block")),
            signature=str(field_of(block, "signature", str, f"{what}'s thinking block")),
        )
    if kind == "redacted_thinking":
        data = field_of(block, "data", str, f"{what}'s redacted_thinking block")
        return ReasoningPart(PROVIDER, encrypted=str(data), redacted=True)
    if kind in ("image", "document"):
        return _media(block, what)
    return ProviderPart(PROVIDER, str(kind), block)
