"""Content parts: the pieces of a message beyond its text (images, files, audio, reasoning, and
what a provider returns that turnlog does not model).

One tagged union (`Part`), stored by the one codec: each part is a JSON object whose `"type"`
names its kind (`"text"`, `"image"`, `"file"`, `"audio"`, `"reasoning"`, `"provider"`). Building a
part checks every field and raises `InvalidInput` naming the one that is wrong; the codec, whose
decoder types each field in C, builds them without those checks (see `_Checked`).

A leaf module: it imports nothing from turnlog but the errors, never reads the clock and does no
I/O. It also holds the text and JSON checks that `turnlog.events` uses for its own records.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from typing import Any, ClassVar, Final, TypeAlias

import msgspec
from msgspec.structs import force_setattr

from turnlog.errors import InvalidInput

__all__ = [
    "DETAILS",
    "PART_KINDS",
    "AudioPart",
    "FilePart",
    "ImagePart",
    "Part",
    "ProviderPart",
    "ReasoningPart",
    "TextPart",
    "data_url",
    "part_text",
    "read_data_url",
]

JsonValue: TypeAlias = Any
"""A value that JSON can carry: dict with str keys, list, str, int, finite float, bool or None."""

DETAILS: Final = frozenset({"auto", "low", "high"})
"""The values `ImagePart.detail` takes (OpenAI's image detail levels)."""

_SURROGATE: Final = re.compile("[\\ud800-\\udfff]")
# RFC 6838 restricted names: type "/" subtype, 1-127 characters each; no parameters.
_MEDIA_TYPE: Final = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
)
_REF: Final = re.compile(r"sha256:[0-9a-f]{64}")
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S")


def _check_text(value: object, what: str) -> str:
    """Return `value` if it is a string that UTF-8 can carry, else raise `InvalidInput`."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, got {type(value).__name__}")
    if not value.isascii() and _SURROGATE.search(value):  # isascii: O(1), a flag of the str
        raise InvalidInput(
            f"{what} holds a lone surrogate code point, which UTF-8 cannot store: "
            "decode the text with errors='replace' first"
        )
    return value


def check_json(value: object, what: str) -> bool:
    """Raise `InvalidInput` unless `value` is plain JSON (see `JsonValue`).

    Returns:
        True when `value` holds a tuple, which stores give back as a list (see `plain_json`).
    """
    has_tuple = False
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > 64:
            raise InvalidInput(f"{what} is nested more than 64 levels deep")
        if isinstance(item, str):
            _check_text(item, what)
            continue
        if item is None or isinstance(item, (bool, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidInput(f"{what} holds {item!r}, which JSON cannot carry")
            continue
        if isinstance(item, (list, tuple)):
            has_tuple = has_tuple or isinstance(item, tuple)
            stack.extend((v, depth + 1) for v in item)
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise InvalidInput(f"{what} has a non-string key {k!r}; JSON keys are strings")
                _check_text(k, what)
                stack.append((v, depth + 1))
            continue
        raise InvalidInput(
            f"{what} holds a {type(item).__name__}, which is not JSON: "
            "use dicts, lists, strings, numbers, booleans and None"
        )
    return has_tuple


def plain_json(value: JsonValue) -> JsonValue:
    """`value` (checked JSON) with every tuple turned into a list, as every store returns it."""
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_json(v) for k, v in value.items()}
    return value


class _Checked(msgspec.StructMeta):
    """The metaclass of the records msgspec decodes from a stored body (the parts here;
    `ToolCall`, `ToolResult` and `Message` in `turnlog.events`): building one in the application
    runs its `_check`; the decoder, which types every field in C and builds the records without
    calling the class, does not, so a whole-log read runs no Python per record.
    (`msgspec.structs.replace` does not check either: build a new record to have it checked.)"""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        record = super().__call__(*args, **kwargs)
        record._check()
        return record


def _name(value: object, what: str) -> str:
    """A non-blank string without lone surrogates."""
    text = _check_text(value, what)
    if not text.strip():
        raise InvalidInput(f"{what} must not be blank")
    return text


def _optional_name(value: object, what: str) -> None:
    if value is not None:
        _name(value, what)


def _count(value: object, what: str, *, least: int) -> None:
    """An int (not a bool) of at least `least`, or None."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an integer or None, got {type(value).__name__}")
    if value < least:
        raise InvalidInput(f"{what} must be >= {least}, got {value}")


class _Media(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """The fields every binary part shares: a media type and exactly one source of its bytes."""

    media_type: str
    """The media type, `type/subtype` (for example `"image/png"`), as the provider names it."""
    data: bytes | None = None
    """The bytes, inline (stored as base64 in the body)."""
    url: str | None = None
    """Where the provider fetches the bytes (`https:`, `gs:`, ...); turnlog never fetches it."""
    ref: str | None = None
    """An attachment reference, `"sha256:<64 lowercase hex>"`: the bytes stored apart."""
    size: int | None = None
    """The byte count: set from `data` when inline, given with `ref`, unknown (None) for a URL
    unless given."""

    _KIND: ClassVar[str] = "a media"  # the name errors use; each part sets its own

    def _check_media(self, prefix: str | None) -> None:
        kind = self._KIND
        media_type = _check_text(self.media_type, f"{kind} part media_type")
        if not _MEDIA_TYPE.fullmatch(media_type):
            raise InvalidInput(
                f"{kind} part media_type {media_type!r} is not a media type: give type/subtype, "
                "for example 'image/png' or 'application/pdf'"
            )
        if prefix is not None and not media_type.lower().startswith(prefix):
            raise InvalidInput(
                f"{kind} part media_type {media_type!r} is not {prefix}*: use a FilePart for "
                "other media types"
            )
        given = [n for n in ("data", "url", "ref") if getattr(self, n) is not None]
        if len(given) != 1:
            raise InvalidInput(
                f"{kind} part needs exactly one of data, url and ref, got "
                f"{' and '.join(given) if given else 'none'}"
            )
        _count(self.size, f"{kind} part size", least=0)
        if self.data is not None:
            data = self.data
            if isinstance(data, (bytearray, memoryview)):
                data = bytes(data)
                force_setattr(self, "data", data)
            if not isinstance(data, bytes):
                raise InvalidInput(f"{kind} part data must be bytes, got {type(data).__name__}")
            if self.size is None:
                force_setattr(self, "size", len(data))
            elif self.size != len(data):
                raise InvalidInput(
                    f"{kind} part size is {self.size} but its data holds {len(data)} bytes: "
                    "leave size out for inline data"
                )
        elif self.url is not None:
            url = _check_text(self.url, f"{kind} part url")
            if not _SCHEME.match(url) or any(c.isspace() for c in url):
                raise InvalidInput(
                    f"{kind} part url {url[:80]!r} is not a URL: give an absolute URL with a "
                    "scheme (https://...), or the bytes as data"
                )
        else:
            ref = self.ref
            if not isinstance(ref, str) or not _REF.fullmatch(ref):
                raise InvalidInput(
                    f"{kind} part ref {ref!r} is not an attachment reference: it is "
                    "'sha256:' followed by 64 lowercase hex digits"
                )

    def _fields_repr(self, extra: tuple[str, ...]) -> str:
        shown = [repr(self.media_type)]
        if self.data is not None:
            shown.append(f"data=<{len(self.data):,} bytes>")
        for name in ("url", "ref", *extra):
            value = getattr(self, name)
            if value is not None and value is not False:
                shown.append(f"{name}={value!r}")
        if self.data is None and self.size is not None:
            shown.append(f"size={self.size!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


class TextPart(
    msgspec.Struct,
    frozen=True,
    gc=False,
    tag_field="type",
    tag="text",
    metaclass=_Checked,
):
    """A run of text. A message's `text` is its text parts joined."""

    text: str
    """The text."""

    def _check(self) -> None:
        _check_text(self.text, "text part text")


class ImagePart(
    _Media,
    frozen=True,
    gc=False,
    omit_defaults=True,
    tag_field="type",
    tag="image",
    metaclass=_Checked,
):
    """An image: inline bytes, a URL, or an attachment reference (exactly one of them)."""

    detail: str | None = None
    """How closely the model looks: "auto", "low" or "high" (OpenAI's levels); None to let the
    provider choose."""
    width: int | None = None
    """The width in pixels, when known."""
    height: int | None = None
    """The height in pixels, when known."""
    filename: str | None = None
    """The file name it came with, when known."""

    _KIND: ClassVar[str] = "an image"

    def _check(self) -> None:
        self._check_media("image/")
        if self.detail is not None and self.detail not in DETAILS:
            raise InvalidInput(
                f"an image part detail {self.detail!r} is not one of 'auto', 'low', 'high' "
                "(or None)"
            )
        _count(self.width, "an image part width", least=1)
        _count(self.height, "an image part height", least=1)
        _optional_name(self.filename, "an image part filename")

    def __repr__(self) -> str:
        return self._fields_repr(("detail", "width", "height", "filename"))


class FilePart(
    _Media,
    frozen=True,
    gc=False,
    omit_defaults=True,
    tag_field="type",
    tag="file",
    metaclass=_Checked,
):
    """A document (a PDF, a spreadsheet, any media type): inline bytes, a URL, or an attachment
    reference (exactly one of them)."""

    name: str | None = None
    """The file name, when known."""
    pages: int | None = None
    """The page count, when known."""

    _KIND: ClassVar[str] = "a file"

    def _check(self) -> None:
        self._check_media(None)
        _optional_name(self.name, "a file part name")
        _count(self.pages, "a file part pages", least=1)

    def __repr__(self) -> str:
        return self._fields_repr(("name", "pages"))


class AudioPart(
    _Media,
    frozen=True,
    gc=False,
    omit_defaults=True,
    tag_field="type",
    tag="audio",
    metaclass=_Checked,
):
    """A sound clip: inline bytes, a URL, or an attachment reference (exactly one of them)."""

    seconds: float | None = None
    """The duration in seconds, when known."""

    _KIND: ClassVar[str] = "an audio"

    def _check(self) -> None:
        self._check_media("audio/")
        seconds = self.seconds
        if seconds is not None:
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise InvalidInput(
                    f"an audio part seconds must be a number or None, got {type(seconds).__name__}"
                )
            if not math.isfinite(seconds) or seconds < 0:
                raise InvalidInput(
                    f"an audio part seconds must be a finite number >= 0, got {seconds!r}"
                )
            force_setattr(self, "seconds", float(seconds))

    def __repr__(self) -> str:
        return self._fields_repr(("seconds",))


class ReasoningPart(
    msgspec.Struct,
    frozen=True,
    gc=False,
    omit_defaults=True,
    tag_field="type",
    tag="reasoning",
    metaclass=_Checked,
):
    """A model's reasoning, stored exactly as its provider returned it, to be sent back to
    that provider only (Anthropic's thinking and redacted_thinking blocks, OpenAI's reasoning
    items). Only assistant messages carry it."""

    provider: str
    """The provider that produced it (for example "anthropic", "openai")."""
    text: str | None = None
    """The reasoning text, or the summary text a provider gives instead; None when it gives
    none."""
    signature: str | None = None
    """The signature the provider checks when the block comes back (Anthropic's)."""
    encrypted: str | None = None
    """Opaque encrypted content (Anthropic's redacted_thinking data, OpenAI's
    encrypted_content)."""
    redacted: bool = False
    """True when the provider withheld the text (Anthropic's redacted_thinking)."""

    def _check(self) -> None:
        _name(self.provider, "a reasoning part provider")
        for name in ("text", "signature", "encrypted"):
            value = getattr(self, name)
            if value is not None:
                _check_text(value, f"a reasoning part {name}")
        if not isinstance(self.redacted, bool):
            raise InvalidInput(
                f"a reasoning part redacted must be a bool, got {type(self.redacted).__name__}"
            )

    def __repr__(self) -> str:
        shown = [repr(self.provider)]
        for name in ("text", "signature", "encrypted"):
            value = getattr(self, name)
            if value is not None:
                shown.append(f"{name}={_clip(value)}")
        if self.redacted:
            shown.append("redacted=True")
        return f"ReasoningPart({', '.join(shown)})"


class ProviderPart(
    msgspec.Struct,
    frozen=True,
    tag_field="type",
    tag="provider",
    metaclass=_Checked,
):
    """Anything a provider returns that turnlog does not model (citations, server tool blocks,
    compaction items), stored verbatim and meant for that provider only.

    A part of a kind this version of turnlog does not know, found in stored data, reads back
    as `ProviderPart("unknown", <its type>, <the whole stored object>)`.
    """

    provider: str
    """The provider it came from ("unknown" for a stored part of a kind not known here)."""
    kind: str
    """The provider's name for it (for example "web_search_tool_result")."""
    data: JsonValue
    """The provider's object, as plain JSON (tuples are kept as lists)."""

    def _check(self) -> None:
        _name(self.provider, "a provider part provider")
        _name(self.kind, "a provider part kind")
        if check_json(self.data, "a provider part data"):
            force_setattr(self, "data", plain_json(self.data))


def _clip(value: str) -> str:
    """`value` for a repr: in full up to 60 characters, else its start and its length."""
    if len(value) <= 60:
        return repr(value)
    return f"{value[:40]!r}...<{len(value):,} characters>"


Part: TypeAlias = TextPart | ImagePart | FilePart | AudioPart | ReasoningPart | ProviderPart
"""A content part: one of the six kinds."""

PART_TYPES: Final = (TextPart, ImagePart, FilePart, AudioPart, ReasoningPart, ProviderPart)

PART_KINDS: Final = frozenset(
    str(t.__struct_config__.tag) for t in PART_TYPES
)  # "text", "image", ...
"""The `"type"` tags of the part kinds this version stores and reads."""


def check_parts(parts: object, what: str, *, reasoning: bool) -> tuple[Part, ...]:
    """`parts` as a tuple, if it holds only parts (and reasoning only where `reasoning`).

    Raises:
        InvalidInput: an item is not a part, or a reasoning part where none belongs.
    """
    if isinstance(parts, (str, bytes)) or not hasattr(parts, "__iter__"):
        raise InvalidInput(f"{what} must be a sequence of parts, got {type(parts).__name__}")
    out = tuple(parts)
    for part in out:
        if not isinstance(part, PART_TYPES):
            raise InvalidInput(
                f"{what} must hold parts (TextPart, ImagePart, FilePart, AudioPart, "
                f"ReasoningPart, ProviderPart), got {type(part).__name__}"
            )
        if not reasoning and type(part) is ReasoningPart:
            raise InvalidInput(f"{what} holds a ReasoningPart: only assistant messages carry one")
    return out


def part_text(parts: tuple[Part, ...]) -> str | None:
    """The text of `parts`: their text parts joined with "", or None when there is none."""
    texts = [p.text for p in parts if type(p) is TextPart]
    return "".join(texts) if texts else None


def only_text(parts: tuple[Part, ...]) -> bool:
    """True when every part is a text part."""
    return all(type(p) is TextPart for p in parts)


_DATA_URL: Final = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


def data_url(media_type: str, data: bytes) -> str:
    """`data:<media_type>;base64,<data>`: bytes as the URL the providers and browsers take."""
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def read_data_url(url: str) -> tuple[str, bytes] | None:
    """The media type and the bytes of a base64 `data:` URL as `data_url` writes it; None for
    any other string (another URL, parameters before `;base64`, base64 that does not decode)."""
    found = _DATA_URL.fullmatch(url)
    if found is None:
        return None
    try:
        return found.group(1), base64.b64decode(found.group(2), validate=True)
    except (binascii.Error, ValueError):
        return None
