"""Agents SDK content items as turnlog parts, and back.

Private to `turnlog.integrations.openai_agents`. It reads the items as plain JSON (the SDK's
`TResponseInputItem` dicts) and does not import the SDK.

- `content_parts` maps a user or system message's content list to parts: `input_text` to text,
  `input_image` to an `ImagePart` (a data URL's bytes, or its URL), `input_file` to a `FilePart`
  (`file_data` as a data URL or bare base64, or `file_url`), and an image or a file named only by
  a `file_id` to a `ProviderPart("openai", "input_image" | "input_file", <the content item>)`.
- `reasoning_part` maps a `reasoning` item to a `ReasoningPart`: its summary texts joined with
  a blank line, its `encrypted_content`.

Each also names the strings of the item a part now holds (a data URL, the base64 of a file, the
encrypted content), so the adapter can store them once: `take` replaces them in the stored item
with "" and returns pointers; `give_back` puts them back from the parts, so the item read back
is the one stored. A string is taken out only if the part gives it back exactly.
"""

from __future__ import annotations

import base64
import binascii
import copy
import mimetypes
from collections.abc import Mapping, Sequence
from typing import Any, Final

from turnlog.errors import InvalidInput
from turnlog.parts import (
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
    data_url,
    read_data_url,
)

__all__ = ["PARTS_KEY", "content_parts", "give_back", "reasoning_part", "take"]

PARTS_KEY: Final = "openai_agents.parts"
"""The event metadata key listing the strings taken out of the stored items:
`[item index, [key or list index, ...], part index, form]` each, the form naming how the string
is made from the part ("data_url", "base64" or "encrypted")."""

_OCTETS: Final = "application/octet-stream"
_DETAILS: Final = frozenset({"auto", "low", "high"})

Path = tuple[str | int, ...]
Taken = tuple[Path, int, str]  # a path in the item, the part's index, the form
"""A string an item holds that a part gives back."""


def _decode(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _image(block: Mapping[str, Any]) -> tuple[Part, str | None] | None:
    """The part for an `input_image` content item and the form of the string it holds."""
    detail = block.get("detail")
    extra: dict[str, Any] = {"detail": detail} if detail in _DETAILS else {}
    url = block.get("image_url")
    if isinstance(url, str):
        if url.startswith("data:"):
            found = read_data_url(url)
            if found is None or not found[0].lower().startswith("image/"):
                return None
            return ImagePart(found[0], data=found[1], **extra), "data_url"
        media_type = mimetypes.guess_type(url.split("?", 1)[0])[0]
        if media_type is None or not media_type.startswith("image/"):
            media_type = "image/unknown"
        return ImagePart(media_type, url=url, **extra), None
    if isinstance(block.get("file_id"), str):
        return ProviderPart("openai", "input_image", dict(block)), None
    return None


def _file(block: Mapping[str, Any]) -> tuple[Part, str | None] | None:
    """The part for an `input_file` content item and the form of the string it holds."""
    name = block.get("filename")
    extra: dict[str, Any] = {"name": name} if isinstance(name, str) and name.strip() else {}
    guessed = mimetypes.guess_type(name)[0] if isinstance(name, str) else None
    data = block.get("file_data")
    if isinstance(data, str):
        if data.startswith("data:"):
            found = read_data_url(data)
            if found is None:
                return None
            return FilePart(found[0], data=found[1], **extra), "data_url"
        raw = _decode(data)
        if raw is None:
            return None
        return FilePart(guessed or _OCTETS, data=raw, **extra), "base64"
    url = block.get("file_url")
    if isinstance(url, str):
        media_type = guessed or mimetypes.guess_type(url.split("?", 1)[0])[0] or _OCTETS
        return FilePart(media_type, url=url, **extra), None
    if isinstance(block.get("file_id"), str):
        return ProviderPart("openai", "input_file", dict(block)), None
    return None


_KEYS: Final = {"input_image": "image_url", "input_file": "file_data"}


def content_parts(content: object) -> tuple[list[Part], list[Taken]] | None:
    """The parts of a message's content list, with the strings they hold; None when the
    content maps to text alone (a string, or text items only)."""
    if not isinstance(content, list):
        return None
    parts: list[Part] = []
    taken: list[Taken] = []
    texts = 0
    media = False
    for n, block in enumerate(content):
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        found: tuple[Part, str | None] | None = None
        try:
            if kind == "input_image":
                found = _image(block)
            elif kind == "input_file":
                found = _file(block)
        except InvalidInput:  # a field a part refuses: the item keeps it, the text a label
            found = None
        if found is not None:
            part, form = found
            if form is not None:
                taken.append(((n, _KEYS[str(kind)]), len(parts), form))
            parts.append(part)
            media = True
            continue
        text = next((block[k] for k in ("text", "refusal") if isinstance(block.get(k), str)), None)
        label = text if text is not None else f"[{kind or 'part'}]"
        parts.append(TextPart(("\n" if texts else "") + label))
        texts += 1
    return (parts, [(("content", *p), i, f) for p, i, f in taken]) if media else None


def reasoning_part(item: Mapping[str, Any]) -> tuple[ReasoningPart, list[Taken]] | None:
    """The part for a `reasoning` item: its summary texts joined with a blank line, its
    encrypted content; None when a field is not a string."""
    summary = item.get("summary")
    texts = [
        s["text"]
        for s in (summary if isinstance(summary, list) else [])
        if isinstance(s, Mapping) and isinstance(s.get("text"), str)
    ]
    encrypted = item.get("encrypted_content")
    if encrypted is not None and not isinstance(encrypted, str):
        return None
    try:
        part = ReasoningPart("openai", text="\n\n".join(texts) or None, encrypted=encrypted)
    except InvalidInput:
        return None
    return part, ([(("encrypted_content",), -1, "encrypted")] if encrypted else [])


def _value(part: Part, form: str) -> str | None:
    """The string `form` makes from `part`."""
    if form == "encrypted":
        return part.encrypted if isinstance(part, ReasoningPart) else None
    data = getattr(part, "data", None)
    if not isinstance(data, bytes):
        return None
    if form == "data_url":
        return data_url(getattr(part, "media_type", ""), data)
    return base64.b64encode(data).decode("ascii")


def _get(item: object, path: Path) -> object:
    for key in path:
        if isinstance(key, int) and isinstance(item, list) and 0 <= key < len(item):
            item = item[key]
        elif isinstance(key, str) and isinstance(item, dict):
            item = item.get(key)
        else:
            return None
    return item


def _set(item: Any, path: Path, value: str) -> None:
    for key in path[:-1]:
        item = item[key]
    item[path[-1]] = value


def take(
    items: Sequence[dict[str, Any]],
    found: Sequence[tuple[int, Path, int, str]],
    parts: Sequence[Part],
) -> tuple[dict[int, dict[str, Any]], list[list[Any]]]:
    """The items of `found` with the strings their parts give back replaced by "", by item
    index, and the pointers that put them back."""
    changed: dict[int, dict[str, Any]] = {}
    pointers: list[list[Any]] = []
    for n, path, p, form in found:
        value = _get(items[n], path)
        if not isinstance(value, str) or not value or value != _value(parts[p], form):
            continue
        stored = changed.setdefault(n, copy.deepcopy(items[n]))
        _set(stored, path, "")
        pointers.append([n, list(path), p, form])
    return changed, pointers


def give_back(items: list[dict[str, Any]], pointers: object, parts: Sequence[Part]) -> None:
    """Put the strings `pointers` name back into `items`, from `parts`, in place."""
    if not isinstance(pointers, list):
        return
    for pointer in pointers:
        if not (isinstance(pointer, list) and len(pointer) == 4):
            continue
        n, path, p, form = pointer
        if not (isinstance(n, int) and 0 <= n < len(items) and isinstance(p, int)):
            continue
        if not (0 <= p < len(parts) and isinstance(path, list) and path):
            continue
        value = _value(parts[p], str(form))
        if value is not None and isinstance(_get(items[n], tuple(path)), str):
            _set(items[n], tuple(path), value)
