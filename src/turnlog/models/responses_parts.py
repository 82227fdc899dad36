"""Content parts <-> Responses API content items and reasoning items (plain JSON), both ways.

Pure: no `openai` import, no I/O; used by `turnlog.models.responses_format`.

Sent (`content_item`, for a user message or a tool result): `TextPart` -> `input_text` (an
empty one is left out); `ImagePart` -> `input_image` (`image_url`: a `data:` URL for inline
bytes, or the URL; `detail` when set); `FilePart` -> `input_file` (`file_data`: a `data:` URL,
and `filename`: the part's name or "file"; or `file_url`); `AudioPart` -> its note
(`turnlog.text.part_note`: the API takes no audio in a message); an OpenAI `ProviderPart` ->
its object as stored (`provider_item`); reasoning and another provider's parts -> nothing.

Read (`content_part`): the inverse; an item of another type -> `ProviderPart("openai", <its
type>, <the item>)`.

Reasoning (`reasoning_part`, `reasoning_item`): a `reasoning` item and its
`ReasoningPart("openai", ...)`, which gives back the same item (every field and value).
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Mapping
from typing import Any, Final

from turnlog.errors import InvalidInput
from turnlog.models.base import MalformedReply, field_of
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
    data_url,
    read_data_url,
)
from turnlog.text import part_note

__all__ = [
    "PROVIDER",
    "content_item",
    "content_part",
    "provider_item",
    "reasoning_item",
    "reasoning_part",
]

PROVIDER: Final = "openai"
"""The provider of the reasoning and provider parts this wire format makes and takes."""


def _summary_texts(item: Mapping[str, Any]) -> list[str]:
    texts: list[str] = []
    for key in ("summary", "content"):
        entries = item.get(key)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("text"), str):
                texts.append(entry["text"])
        if texts:  # the summary; the reasoning text only when there is no summary
            break
    return texts


def _canonical(item_id: str | None, text: str | None, encrypted: str | None) -> dict[str, Any]:
    """The reasoning item a part of these fields stands for, in the API's field order."""
    item: dict[str, Any] = {} if item_id is None else {"id": item_id}
    item["type"] = "reasoning"
    item["summary"] = [] if text is None else [{"type": "summary_text", "text": text}]
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def reasoning_part(item: Mapping[str, Any], what: str) -> ReasoningPart:
    """A `reasoning` item as its part, from which `reasoning_item` gives the item back.

    `text` is the summary texts joined by a blank line (the reasoning text when there is no
    summary; None when there is neither), `encrypted` the `encrypted_content`. `signature`
    holds the rest: the item's `id` when that is all (an item of `id`, `type`, one summary
    text or none, and `encrypted_content`), else the whole item as compact JSON, its
    `encrypted_content` (a string) replaced by "" (it then starts with "{", which an id never
    does).

    Raises:
        MalformedReply: an `encrypted_content` that is neither a string nor null.
    """
    encrypted = item.get("encrypted_content")
    if encrypted is not None and not isinstance(encrypted, str):
        raise MalformedReply(f"{what} has an encrypted_content that is not a string")
    texts = _summary_texts(item)
    text = "\n\n".join(texts) if texts else None
    item_id = item.get("id")
    canonical = isinstance(item_id, str) and not item_id.startswith("{")
    if canonical and dict(item) == _canonical(item_id, text, encrypted):
        return ReasoningPart(PROVIDER, text=text, signature=item_id, encrypted=encrypted)
    rest = {k: ("" if k == "encrypted_content" and v is not None else v) for k, v in item.items()}
    signature = json.dumps(rest, ensure_ascii=False, separators=(",", ":"))
    return ReasoningPart(PROVIDER, text=text, signature=signature, encrypted=encrypted)


def reasoning_item(part: ReasoningPart) -> dict[str, Any] | None:
    """The `reasoning` item an OpenAI reasoning part is sent as: the item `reasoning_part`
    read, exactly (the same fields and values); for a part read elsewhere (no signature), its
    summary text and encrypted content. None for another provider's reasoning, and for a part
    with neither a signature nor encrypted content (the API could not take it back)."""
    if part.provider != PROVIDER:
        return None
    signature = part.signature
    if signature is not None and signature.startswith("{"):
        try:
            stored = json.loads(signature)
        except ValueError:
            stored = None
        if isinstance(stored, dict):
            if part.encrypted is not None:
                stored["encrypted_content"] = part.encrypted  # its place is kept
            return stored
    if signature is None and part.encrypted is None:
        return None
    return _canonical(signature, part.text, part.encrypted)


# -- content items -------------------------------------------------------------------------------


def _no_ref(part: ImagePart | FilePart | AudioPart) -> None:
    if part.ref is not None:
        raise InvalidInput(
            f"{part_note(part)} holds an attachment reference, not its bytes: put the bytes "
            "back before sending (service.with_bytes(session_id, messages), as the turn "
            "runner does)"
        )


def content_item(part: Part) -> dict[str, Any] | None:
    """The content item a part of a user message or a tool result is sent as (a note when the
    API cannot take it); None when it is not sent (another provider's part, an empty text,
    reasoning).

    Raises:
        InvalidInput: a media part that holds an attachment reference.
    """
    if type(part) is TextPart:
        return {"type": "input_text", "text": part.text} if part.text else None
    if type(part) is ImagePart:
        _no_ref(part)
        url = part.url if part.data is None else data_url(part.media_type, part.data)
        image: dict[str, Any] = {"type": "input_image", "image_url": url}
        if part.detail is not None:
            image["detail"] = part.detail
        return image
    if type(part) is FilePart:
        _no_ref(part)
        if part.data is None:
            return {"type": "input_file", "file_url": part.url}
        return {
            "type": "input_file",
            "file_data": data_url(part.media_type, part.data),
            "filename": part.name or "file",
        }
    if type(part) is AudioPart:
        _no_ref(part)
        return {"type": "input_text", "text": part_note(part)}
    return provider_item(part)  # None for reasoning and another provider's parts


def provider_item(part: Part) -> dict[str, Any] | None:
    """A copy of the object of an OpenAI provider part (sent as stored); None for any other
    part."""
    if type(part) is ProviderPart and part.provider == PROVIDER and isinstance(part.data, dict):
        stored: dict[str, Any] = copy.deepcopy(part.data)
        return stored
    return None


_AUDIO: Final = {"wav": "audio/wav", "mp3": "audio/mpeg"}

_EXTENSIONS: Final = {
    ".png": "image/png",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".pdf": "application/pdf",
    ".txt": "text/plain",
    ".csv": "text/csv",
}


def _guess(url: str, default: str) -> str:
    """The media type of media the wire names by URL alone, from its extension (the wire
    carries none), else `default`."""
    path = url.split("?", 1)[0].split("#", 1)[0].lower()
    return next((t for ext, t in _EXTENSIONS.items() if path.endswith(ext)), default)


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedReply(f"{what} has data that is not base64") from exc


def content_part(entry: object, what: str) -> Part:
    """A content item of a user message or a tool output as its part (see the module
    docstring).

    Raises:
        MalformedReply: an item that is no JSON object, or inline data that is not base64.
    """
    kind = field_of(entry, "type", str, what)
    assert isinstance(entry, dict)
    if kind == "input_text":
        return TextPart(str(field_of(entry, "text", str, what)))
    if kind == "input_image" and isinstance(entry.get("image_url"), str):
        url = entry["image_url"]
        detail = entry.get("detail") if isinstance(entry.get("detail"), str) else None
        inline = read_data_url(url)
        if inline is not None:
            return ImagePart(inline[0], data=inline[1], detail=detail)
        return ImagePart(_guess(url, "image/jpeg"), url=url, detail=detail)
    if kind == "input_file" and isinstance(entry.get("file_data"), str):
        name = entry.get("filename") if isinstance(entry.get("filename"), str) else None
        inline = read_data_url(entry["file_data"])
        if inline is not None:
            return FilePart(inline[0], data=inline[1], name=name)
        data = _b64(entry["file_data"], what)  # bare base64, as some clients send
        return FilePart("application/octet-stream", data=data, name=name)
    if kind == "input_file" and isinstance(entry.get("file_url"), str):
        return FilePart(_guess(entry["file_url"], "application/pdf"), url=entry["file_url"])
    if kind == "input_audio" and isinstance(entry.get("input_audio"), dict):
        audio = entry["input_audio"]
        media_type = _AUDIO.get(str(audio.get("format")), "audio/wav")
        return AudioPart(media_type, data=_b64(str(field_of(audio, "data", str, what)), what))
    return ProviderPart(PROVIDER, str(kind), entry)
