"""Content parts <-> Gemini `parts` (plain JSON, the REST API's camelCase names), both ways.

Pure: no `google` import, no I/O; used by `turnlog.models.gemini_format`.

Sent (`media_item`, for a user message or a tool result): `TextPart` -> `{"text"}` (an empty
one is left out); an image, file or audio part with inline bytes -> `{"inlineData":
{"mimeType", "data": <base64>}}`; one given by URL -> `{"fileData": {"mimeType", "fileUri"}}`;
a Gemini `ProviderPart` -> its part as stored (`provider_item`); reasoning and another
provider's parts -> nothing.

Read (`media_part`): the inverse; a part of another kind -> `ProviderPart("gemini", <its kind>,
<the part>)`.

Reasoning (`thought_part`, `signature_part`, `thought_item`, `signature_of`): Gemini returns two
things that must come back to it and to no other provider, both kept as
`ReasoningPart("gemini", ...)`:

- a thought part (`{"text", "thought": true, "thoughtSignature"?}`, a summary of the model's
  thinking when the request asks for `includeThoughts`) -> `ReasoningPart("gemini",
  text=<its text>, signature=<its thoughtSignature, or None>)`;
- a `thoughtSignature` on any other part (a function call, a text) -> `ReasoningPart("gemini",
  signature=<it>)`, text None, placed just before the part it came on, which gets it back when
  the message is sent. Its text being None tells it from a thought part (whose text is a
  string, "" when the part had none).

Signatures are base64 as the client writes them: the bytes Gemini sent, which it checks.
"""

from __future__ import annotations

import base64
import binascii
import copy
from typing import Any, Final

from turnlog.errors import InvalidInput
from turnlog.models.base import MalformedReply
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
)
from turnlog.text import part_note

__all__ = [
    "PROVIDER",
    "SIGNATURE_KEY",
    "media_item",
    "media_part",
    "part_kind",
    "provider_item",
    "signature_of",
    "signature_part",
    "thought_item",
    "thought_part",
]

PROVIDER: Final = "gemini"
"""The provider of the reasoning and provider parts this wire format makes and takes."""

SIGNATURE_KEY: Final = "thoughtSignature"
"""The key of a part's thought signature."""

_FLAGS: Final = frozenset({SIGNATURE_KEY, "thought", "partMetadata", "mediaResolution"})
"""Keys of a part that are not its kind (its data key is the one left)."""


def part_kind(item: dict[str, Any]) -> str:
    """The kind of a Gemini part: its data key ("text", "functionCall", "executableCode",
    ...); "thought" for a thought part; "empty" for a part with no data key."""
    if item.get("thought") is True:
        return "thought"
    return next((k for k in item if k not in _FLAGS), "empty")


# -- reasoning -----------------------------------------------------------------------------------


def thought_part(item: dict[str, Any], what: str) -> ReasoningPart:
    """A thought part as its reasoning part (see the module docstring).

    Raises:
        MalformedReply: a text or signature that is not a string.
    """
    text = item.get("text", "")
    signature = item.get(SIGNATURE_KEY)
    if not isinstance(text, str) or not (signature is None or isinstance(signature, str)):
        raise MalformedReply(f"a thought part of {what} has a text or signature not a string")
    return ReasoningPart(PROVIDER, text=text, signature=signature)


def signature_part(signature: object, what: str) -> ReasoningPart:
    """The reasoning part that keeps the `thoughtSignature` of the part after it.

    Raises:
        MalformedReply: a signature that is not a string.
    """
    if not isinstance(signature, str):
        raise MalformedReply(f"a part of {what} has a thoughtSignature that is not a string")
    return ReasoningPart(PROVIDER, signature=signature)


def signature_of(part: Part) -> str | None:
    """The signature a Gemini signature part keeps for the part after it; None for any other
    part (a thought part included)."""
    if type(part) is ReasoningPart and part.provider == PROVIDER and part.text is None:
        return part.signature
    return None


def thought_item(part: ReasoningPart) -> dict[str, Any] | None:
    """The thought part a Gemini reasoning part with text is sent as; None for another
    provider's reasoning and for a signature part."""
    if part.provider != PROVIDER or part.text is None:
        return None
    item: dict[str, Any] = {"text": part.text, "thought": True}
    if part.signature is not None:
        item[SIGNATURE_KEY] = part.signature
    return item


# -- media and provider parts --------------------------------------------------------------------


def _no_ref(part: ImagePart | FilePart | AudioPart) -> None:
    if part.ref is not None:
        raise InvalidInput(
            f"{part_note(part)} holds an attachment reference, not its bytes: put the bytes "
            "back before sending (service.with_bytes(session_id, messages), as the turn "
            "runner does)"
        )


def provider_item(part: Part) -> dict[str, Any] | None:
    """A copy of the part a Gemini provider part holds (sent as stored); None for any other
    part."""
    if type(part) is ProviderPart and part.provider == PROVIDER and isinstance(part.data, dict):
        stored: dict[str, Any] = copy.deepcopy(part.data)
        return stored
    return None


def media_item(part: Part) -> dict[str, Any] | None:
    """The Gemini part a part of a user message or a tool result is sent as; None when it is
    not sent (an empty text, reasoning, another provider's part).

    Raises:
        InvalidInput: a media part that holds an attachment reference.
    """
    if type(part) is TextPart:
        return {"text": part.text} if part.text else None
    if type(part) in (ImagePart, FilePart, AudioPart):
        assert isinstance(part, (ImagePart, FilePart, AudioPart))
        _no_ref(part)
        if part.data is not None:
            data = base64.b64encode(part.data).decode("ascii")
            return {"inlineData": {"mimeType": part.media_type, "data": data}}
        return {"fileData": {"mimeType": part.media_type, "fileUri": part.url}}
    return provider_item(part)


def _b64(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise MalformedReply(f"{what} has inline data that is not a string")
    try:
        return base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedReply(f"{what} has inline data that is not base64") from exc


def media_part(item: dict[str, Any], what: str) -> Part:
    """A Gemini part of a user content (or a function response) as its part (see the module
    docstring).

    Raises:
        MalformedReply: inline data that is not base64, or a media part without its type.
    """
    kind = part_kind(item)
    if kind == "text" and isinstance(item["text"], str) and len(item) == 1:
        return TextPart(item["text"])
    source = item.get(kind)
    if kind in ("inlineData", "fileData") and isinstance(source, dict) and len(item) == 1:
        media_type = source.get("mimeType")
        if not isinstance(media_type, str):
            raise MalformedReply(f"an {kind} part of {what} has no mimeType")
        if kind == "inlineData":
            data = _b64(source.get("data"), f"an inlineData part of {what}")
            where: dict[str, Any] = {"data": data}
        else:
            where = {"url": source.get("fileUri")}
        if media_type.startswith("image/"):
            return ImagePart(media_type, **where)
        if media_type.startswith("audio/"):
            return AudioPart(media_type, **where)
        return FilePart(media_type, **where)
    return ProviderPart(PROVIDER, kind, item)
