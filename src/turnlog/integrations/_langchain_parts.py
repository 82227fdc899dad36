"""LangChain content blocks as turnlog parts, and back.

Private to `turnlog.integrations.langchain`. It does not import LangChain: it reads the content
list of a message's `message_to_dict` form.

`split` maps the blocks of a content list to parts (text, images, files, audio and, in an
assistant message, reasoning), and takes out of the stored form each string a part now holds
(base64 bytes, a data URL, a reasoning text or signature), leaving "" and a pointer in its place.
`rebuild` puts those strings back from the parts, so the form read back is the one stored. A
string is taken out only if rebuilding it gives it back exactly; a block that maps to no part,
or whose fields a part refuses, stays in the stored form as it was.
"""

from __future__ import annotations

import base64
import binascii
import copy
import mimetypes
import re
from collections.abc import Callable, Sequence
from typing import Any, Final

from turnlog.errors import InvalidInput
from turnlog.media import image_media_type
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ReasoningPart,
    TextPart,
    data_url,
)

__all__ = ["PARTS_KEY", "blocks", "rebuild", "split"]

PARTS_KEY: Final = "langchain_parts"
"""The message metadata key listing the strings taken out of the stored LangChain form:
`[content index, [key, ...], part index, form]` each, the form naming how the string is made
from the part ("base64", "data_url", "url", "text", "signature", "encrypted")."""

_DATA_URL: Final = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)
_OCTETS: Final = "application/octet-stream"
_UNKNOWN: Final = {"image/": "image/unknown", "audio/": "audio/unknown", "": _OCTETS}

Pointer = list[Any]  # [content index, [key, ...], part index, form]
_Found = tuple[Part, list[tuple[tuple[str, ...], str]]]  # a part, and the strings it holds


def _value(part: Part, form: str) -> str | None:
    """The string `form` makes from `part`; None when the part cannot make it."""
    if form in ("base64", "data_url"):
        data = getattr(part, "data", None)
        if not isinstance(data, bytes):
            return None
        if form == "data_url":
            return data_url(getattr(part, "media_type", ""), data)
        return base64.b64encode(data).decode("ascii")
    value = getattr(part, "encrypted" if form == "encrypted" else form, None)
    return value if isinstance(value, str) else None


def _guess(prefix: str, data: bytes | None = None, url: str | None = None) -> str:
    """A media type for bytes or a URL whose block names none: read from an image's header or
    guessed from the URL's file name; else "image/unknown", "audio/unknown" or
    "application/octet-stream"."""
    guess = None
    if data is not None and prefix == "image/":
        guess = image_media_type(data)
    elif url is not None:
        guess = mimetypes.guess_type(url.split("?", 1)[0])[0]
    if guess is not None and guess.startswith(prefix):
        return guess
    return _UNKNOWN[prefix]


def _decode(text: object) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode("".join(text.split()), validate=True)  # line breaks allowed
    except (binascii.Error, ValueError):
        return None


def _get(block: dict[str, Any], path: tuple[str, ...]) -> object:
    value: object = block
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _media(
    make: Callable[..., Part], block: dict[str, Any], prefix: str, **extra: Any
) -> _Found | None:
    """A media part from a LangChain block in any of its shapes, or None."""
    mime = block.get("mime_type") if isinstance(block.get("mime_type"), str) else None
    # v1 standard: base64 / url; v0: source_type + data / url
    if isinstance(block.get("base64"), str) or block.get("source_type") == "base64":
        key = "base64" if isinstance(block.get("base64"), str) else "data"
        data = _decode(block.get(key))
        if data is None:
            return None
        return make(mime or _guess(prefix, data=data), data=data, **extra), [((key,), "base64")]
    source = block.get("source")
    if isinstance(source, dict):  # Anthropic's own shape
        if source.get("type") == "base64":
            data = _decode(source.get("data"))
            if data is None:
                return None
            media_type = source.get("media_type") or _guess(prefix, data=data)
            return make(media_type, data=data, **extra), [(("source", "data"), "base64")]
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            return make(mime or _guess(prefix, url=source["url"]), url=source["url"], **extra), [
                (("source", "url"), "url")
            ]
        return None
    url = block.get("url")
    if isinstance(url, str):
        return _from_url(make, url, ("url",), prefix, mime, **extra)
    return None


def _from_url(
    make: Callable[..., Part],
    url: str,
    path: tuple[str, ...],
    prefix: str,
    mime: object = None,
    **extra: Any,
) -> _Found | None:
    """A media part from a URL, a data URL giving its bytes."""
    match = _DATA_URL.fullmatch(url)
    if match is None:
        if url.startswith("data:"):
            return None
        media_type = mime if isinstance(mime, str) else _guess(prefix, url=url)
        return make(media_type, url=url, **extra), [(path, "url")]
    data = _decode(match.group(2))
    if data is None:
        return None
    return make(match.group(1), data=data, **extra), [(path, "data_url")]


def _filename(block: dict[str, Any]) -> str | None:
    for holder in (block.get("extras"), block.get("metadata"), block):
        if isinstance(holder, dict):
            for key in ("filename", "name"):
                if isinstance(holder.get(key), str) and holder[key].strip():
                    return str(holder[key])
    return None


def _part(block: dict[str, Any], assistant: bool, provider: str) -> _Found | None:
    """The part a content block maps to, with the strings it holds; None for another block."""
    kind = block.get("type")
    if kind == "image":
        return _media(ImagePart, block, "image/")
    if kind == "image_url":  # OpenAI chat completions' shape
        inner = block.get("image_url")
        if isinstance(inner, str):
            return _from_url(ImagePart, inner, ("image_url",), "image/")
        if isinstance(inner, dict) and isinstance(inner.get("url"), str):
            detail = inner.get("detail")
            extra = {"detail": detail} if detail in ("auto", "low", "high") else {}
            return _from_url(ImagePart, inner["url"], ("image_url", "url"), "image/", **extra)
        return None
    if kind in ("file", "document"):
        inner = block.get("file")
        if isinstance(inner, dict):  # OpenAI chat completions' shape
            name = inner.get("filename")
            extra = {"name": name} if isinstance(name, str) and name.strip() else {}
            data_url = inner.get("file_data")
            if isinstance(data_url, str):
                return _from_url(FilePart, data_url, ("file", "file_data"), "", **extra)
            return None
        name = _filename(block)
        return _media(FilePart, block, "", **({"name": name} if name else {}))
    if kind == "audio":
        return _media(AudioPart, block, "audio/")
    if kind == "input_audio":  # OpenAI chat completions' shape
        inner = block.get("input_audio")
        if isinstance(inner, dict) and isinstance(inner.get("format"), str):
            data = _decode(inner.get("data"))
            if data is not None:
                clip = AudioPart(f"audio/{inner['format']}", data=data)
                return clip, [(("input_audio", "data"), "base64")]
        return None
    if not assistant:
        return None
    if kind == "reasoning" and isinstance(block.get("reasoning"), str):
        return ReasoningPart(provider, text=block["reasoning"]), [(("reasoning",), "text")]
    if kind == "thinking" and isinstance(block.get("thinking"), str):  # Anthropic's
        signature = block.get("signature")
        signed = isinstance(signature, str)
        thinking = ReasoningPart(
            "anthropic", text=block["thinking"], signature=signature if signed else None
        )
        moved: list[tuple[tuple[str, ...], str]] = [(("thinking",), "text")]
        if signed:
            moved.append((("signature",), "signature"))
        return thinking, moved
    if kind == "redacted_thinking" and isinstance(block.get("data"), str):  # Anthropic's
        redacted = ReasoningPart("anthropic", encrypted=block["data"], redacted=True)
        return redacted, [(("data",), "encrypted")]
    return None


def split(
    content: object, *, assistant: bool, provider: str
) -> tuple[list[Part], list[Pointer], object]:
    """The parts of a LangChain content list, and the content with their strings taken out.

    Args:
        content: a message's content (a str, or a list of str and block dicts).
        assistant: True for an AI message (only those carry reasoning).
        provider: the provider named by a standard reasoning block's part.

    Returns:
        The parts in order (text parts included; empty when the content is only text), the
        pointers to the strings taken out, and the content to store (`content` itself when
        nothing was taken out).
    """
    if not isinstance(content, list):
        return [], [], content
    parts: list[Part] = []
    pointers: list[Pointer] = []
    stub: list[Any] | None = None
    media = False
    for at, block in enumerate(content):
        if isinstance(block, str):
            parts.append(TextPart(block))
            continue
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(TextPart(block["text"]))
            continue
        try:
            found = _part(block, assistant, provider)
        except InvalidInput:  # a field the part refuses: the block stays as it was
            found = None
        if found is None:
            continue
        part, moved = found
        media = True
        parts.append(part)
        for path, form in moved:
            if _value(part, form) != _get(block, path):
                continue
            if stub is None:
                stub = list(content)
            if stub[at] is block:
                stub[at] = copy.deepcopy(block)
            _set(stub[at], path, "")
            pointers.append([at, list(path), len(parts) - 1, form])
    if not media:
        return [], [], content
    return parts, pointers, content if stub is None else stub


def _set(block: dict[str, Any], path: Sequence[str], value: str) -> None:
    for key in path[:-1]:
        block = block[key]
    block[path[-1]] = value


def rebuild(content: object, pointers: object, parts: Sequence[Part]) -> object | None:
    """`content` with the strings `split` took out put back from `parts`.

    Returns:
        The content as LangChain gave it; None when the pointers do not fit the parts (a part
        cleared or changed since), so the caller reads the message from its turnlog form.
    """
    if not isinstance(content, list) or not isinstance(pointers, list):
        return None
    out = list(content)
    copied: set[int] = set()
    for pointer in pointers:
        try:
            at, path, index, form = pointer
            value = _value(parts[index], form)
            if value is None:
                return None
            if at not in copied:
                out[at] = copy.deepcopy(out[at])
                copied.add(at)
            _set(out[at], path, value)
        except (TypeError, ValueError, IndexError, KeyError):
            return None
    return out


def blocks(parts: Sequence[Part]) -> list[dict[str, Any]]:
    """LangChain v1 standard content blocks for `parts` (for a message not stored from
    LangChain): text, and images, files and audio given inline or by URL. Reasoning, provider
    parts and attachment references have no block here and are left out."""
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append({"type": "text", "text": part.text})
        elif isinstance(part, (ImagePart, FilePart, AudioPart)):
            kind = {ImagePart: "image", FilePart: "file", AudioPart: "audio"}[type(part)]
            if part.data is not None:
                encoded = base64.b64encode(part.data).decode("ascii")
                out.append({"type": kind, "base64": encoded, "mime_type": part.media_type})
            elif part.url is not None:
                out.append({"type": kind, "url": part.url, "mime_type": part.media_type})
    return out
