"""Media sizes and token estimates for content parts: images, PDFs and audio, from their bytes.

Pure functions on bytes and numbers: standard library only, no decoding library, no I/O. The
readers look at a file's header only, so their cost does not grow with the file's size, and
they never raise on malformed input: what they cannot read with certainty comes back as None.

Each token rule has a name with a version (`OPENAI_IMAGE_RULE` and the others), so a count
recorded with an event says which rule made it and a later recount can tell rules apart;
`token_rule` gives the name a provider's count is made by.

Sources, as read in 2025 (the rules change with the providers' models; a change here is a new
rule version):

- OpenAI images: the "Images and vision" guide, section "Calculating costs", for GPT-4o,
  GPT-4.1, GPT-4.5 and the o-series (platform.openai.com/docs/guides/vision#calculating-costs).
  The patch rule OpenAI documents for gpt-4.1-mini, gpt-4.1-nano and o4-mini is not modelled.
- Anthropic images: the "Vision" guide, section "Evaluate image size"
  (docs.anthropic.com/en/docs/build-with-claude/vision).
- Anthropic PDFs: the "PDF support" guide, section "Estimate your costs"
  (docs.anthropic.com/en/docs/build-with-claude/pdf-support).
- OpenAI audio: the Realtime API's "Managing costs" guide
  (platform.openai.com/docs/guides/realtime-costs).
"""

from __future__ import annotations

import math
import re

from turnlog.errors import InvalidInput

__all__ = [
    "ANTHROPIC_IMAGE_RULE",
    "ANTHROPIC_PDF_RULE",
    "AUDIO_FALLBACK_BYTES_PER_SECOND",
    "AUDIO_RULE",
    "DEFAULT_IMAGE_RULE",
    "DEFAULT_PDF_RULE",
    "FALLBACK_IMAGE_SIZE",
    "OPENAI_IMAGE_RULE",
    "OPENAI_PDF_RULE",
    "PDF_FALLBACK_BYTES_PER_PAGE",
    "PDF_FALLBACK_MAX_PAGES",
    "anthropic_image_tokens",
    "audio_tokens",
    "image_media_type",
    "image_size",
    "image_tokens",
    "openai_image_tokens",
    "pdf_pages",
    "pdf_tokens",
    "token_rule",
    "wav_seconds",
]

OPENAI_IMAGE_RULE = "openai-image/1"
"""OpenAI's tile rule (GPT-4o family): see `openai_image_tokens`."""

ANTHROPIC_IMAGE_RULE = "anthropic-image/1"
"""Anthropic's pixel-area rule: see `anthropic_image_tokens`."""

DEFAULT_IMAGE_RULE = "max-openai-anthropic-image/1"
"""Any other provider: the larger of the OpenAI and Anthropic counts, so a token budget
undercounts the image under neither."""

OPENAI_PDF_RULE = "openai-pdf/1"
"""1,500 text tokens plus a high-detail page image (765 tokens) per page: see `pdf_tokens`."""

ANTHROPIC_PDF_RULE = "anthropic-pdf/1"
"""3,000 tokens per page, the top of Anthropic's documented range: see `pdf_tokens`."""

DEFAULT_PDF_RULE = "max-openai-anthropic-pdf/1"
"""Any other provider: the larger per-page figure of the two (3,000)."""

AUDIO_RULE = "audio-10-per-second/1"
"""10 tokens per second of input audio, for every provider: see `audio_tokens`."""

_log_name = "turnlog.media"

# ---------------------------------------------------------------------------------------------
# Image headers


def _be16(data: bytes, i: int) -> int:
    return (data[i] << 8) | data[i + 1]


def _le16(data: bytes, i: int) -> int:
    return data[i] | (data[i + 1] << 8)


def _le24(data: bytes, i: int) -> int:
    return data[i] | (data[i + 1] << 8) | (data[i + 2] << 16)


def _le32(data: bytes, i: int) -> int:
    return int.from_bytes(data[i : i + 4], "little")


def _positive(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _png_size(data: bytes) -> tuple[int, int] | None:
    # 8-byte signature, then the IHDR chunk: length (13), "IHDR", width, height (big-endian).
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    if width > 0x7FFFFFFF or height > 0x7FFFFFFF:  # the PNG spec's limit is 2**31 - 1
        return None
    return _positive(width, height)


def _gif_size(data: bytes) -> tuple[int, int] | None:
    # "GIF87a" / "GIF89a", then the logical screen width and height (little-endian).
    if len(data) < 10:
        return None
    return _positive(_le16(data, 6), _le16(data, 8))


# JPEG markers that stand alone (no length field): TEM, RST0-RST7, SOI.
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})
# SOF0-SOF15 frame headers, except DHT (C4), JPG (C8) and DAC (CC), which share the range.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    n = len(data)
    i = 2  # after SOI (FF D8)
    while True:
        if i >= n or data[i] != 0xFF:
            return None  # truncated, or not at a marker where one must be
        while i < n and data[i] == 0xFF:  # a marker may be preceded by any number of fill bytes
            i += 1
        if i >= n:
            return None
        marker = data[i]
        i += 1
        if marker in _JPEG_STANDALONE:
            continue
        if marker in (0x00, 0xD9, 0xDA):
            return None  # a stuffed byte, EOI or SOS before any frame header
        if i + 2 > n:
            return None
        length = _be16(data, i)
        if length < 2:
            return None
        if marker in _JPEG_SOF:
            # length, sample precision (1), number of lines (2), samples per line (2)
            if length < 7 or i + 7 > n:
                return None
            # A height of 0 is set later by a DNL segment: not read here, so unknown.
            return _positive(_be16(data, i + 5), _be16(data, i + 3))
        i += length


def _webp_size(data: bytes) -> tuple[int, int] | None:
    # RIFF <size> WEBP, then the first chunk: VP8 (lossy), VP8L (lossless) or VP8X (extended).
    if len(data) < 30:
        return None
    chunk = data[12:16]
    if chunk == b"VP8 ":
        # frame tag (3 bytes), start code 9D 01 2A, then 14-bit width and height (+2 scale bits)
        if data[23:26] != b"\x9d\x01\x2a":
            return None
        return _positive(_le16(data, 26) & 0x3FFF, _le16(data, 28) & 0x3FFF)
    if chunk == b"VP8L":
        # signature 0x2F, then 14 bits width - 1 and 14 bits height - 1 (little-endian)
        if data[20] != 0x2F:
            return None
        bits = _le32(data, 21)
        return ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X":
        # flags (1), reserved (3), canvas width - 1 (24 bits), canvas height - 1 (24 bits)
        return (_le24(data, 24) + 1, _le24(data, 27) + 1)
    return None


def image_media_type(data: bytes) -> str | None:
    """The media type of an image, told by its magic bytes.

    Args:
        data: the image file's bytes (the first kilobyte is enough).

    Returns:
        `"image/png"`, `"image/jpeg"`, `"image/gif"`, `"image/webp"`, or `"image/svg+xml"` for
        SVG text (an XML declaration, comments or a doctype may come before `<svg`), so that a
        caller can refuse to render it inline; None for anything else. Never raises.
    """
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    if _looks_like_svg(data):
        return "image/svg+xml"
    return None


def _looks_like_svg(data: bytes) -> bool:
    head = data[:4096]
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    head = head.lstrip().lower()
    if not head.startswith(b"<"):
        return False
    # Skip the prolog: an XML declaration, processing instructions, comments and a doctype.
    return (
        re.match(rb"(?:<\?.*?\?>\s*|<!--.*?-->\s*|<!doctype[^>]*>\s*)*<svg[\s>/]", head, re.S)
        is not None
    )


def image_size(data: bytes) -> tuple[int, int] | None:
    """The width and height of a PNG, JPEG, GIF or WebP image, read from its header.

    PNG: the IHDR chunk. JPEG: the first SOF0-SOF15 frame header, reached by walking the
    marker segments (fill bytes, standalone markers and APP segments such as EXIF are
    skipped); the size is as stored, before any EXIF orientation. GIF: the logical screen.
    WebP: the VP8 (lossy) or VP8L (lossless) bitstream header, or the VP8X canvas size
    (extended files: alpha, animation, metadata).

    Args:
        data: the image file's bytes. Only the header is read, so the cost does not depend on
            the size of the image.

    Returns:
        `(width, height)` in pixels, both positive; None when the format is not one of these,
        the header is truncated or malformed, or the size is not in the header (a JPEG whose
        height is set by a later DNL segment). Never raises.
    """
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n"):
            return _png_size(data)
        if data.startswith(b"\xff\xd8"):
            return _jpeg_size(data)
        if data.startswith((b"GIF87a", b"GIF89a")):
            return _gif_size(data)
        if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
            return _webp_size(data)
    except (IndexError, ValueError):  # a bound the checks above missed: unreadable, not a crash
        return None
    return None


# ---------------------------------------------------------------------------------------------
# Image token rules

_OPENAI_LOW = 85
_OPENAI_BASE = 85
_OPENAI_TILE = 170
# Anthropic's table of the largest sizes that are not resized ends at 784x1568 (1:2): that
# image's area is the largest area taken as is.
_ANTHROPIC_LONG_EDGE = 1568
_ANTHROPIC_MAX_PIXELS = 1568 * 784
FALLBACK_IMAGE_SIZE = (1024, 1024)
"""The size an image whose size is unknown is counted as (width, height)."""


def _check_size(width: int, height: int) -> None:
    if (
        isinstance(width, bool)
        or isinstance(height, bool)
        or not isinstance(width, int)
        or not isinstance(height, int)
        or width <= 0
        or height <= 0
    ):
        raise InvalidInput(
            f"an image size is two positive integers (width, height), got {(width, height)!r}"
        )


def openai_image_tokens(width: int, height: int, *, detail: str | None = None) -> int:
    """Tokens for an image under OpenAI's tile rule (`OPENAI_IMAGE_RULE`).

    The rule, from OpenAI's "Images and vision" guide ("Calculating costs", GPT-4o, GPT-4.1,
    GPT-4.5 and o-series models): `detail="low"` costs 85 tokens whatever the size. Otherwise
    the image is scaled to fit within 2048x2048 keeping its aspect ratio, then scaled so its
    shortest side is 768 px (both steps only shrink), and costs 170 tokens per 512 px tile
    needed to cover it, plus 85. The guide's examples: 1024x1024 high is 765 tokens,
    2048x4096 high is 1105, 4096x8192 low is 85.

    `"auto"` lets the model choose; it is counted as `"high"`, the upper estimate, as is None
    and any other value. Scaled sizes are rounded down to whole pixels.

    Args:
        width: the image's width in pixels.
        height: the image's height in pixels.
        detail: the `detail` sent with the image: `"low"`, `"high"`, `"auto"` or None.

    Returns:
        The token count.

    Raises:
        InvalidInput: `width` or `height` is not a positive integer.
    """
    _check_size(width, height)
    if detail == "low":
        return _OPENAI_LOW
    w, h = width, height
    if max(w, h) > 2048:
        if w >= h:
            w, h = 2048, max(1, h * 2048 // w)
        else:
            w, h = max(1, w * 2048 // h), 2048
    if min(w, h) > 768:
        if w <= h:
            w, h = 768, max(1, h * 768 // w)
        else:
            w, h = max(1, w * 768 // h), 768
    tiles = -(-w // 512) * -(-h // 512)
    return _OPENAI_TILE * tiles + _OPENAI_BASE


def anthropic_image_tokens(width: int, height: int) -> int:
    """Tokens for an image under Anthropic's pixel-area rule (`ANTHROPIC_IMAGE_RULE`).

    The rule, from Anthropic's "Vision" guide ("Evaluate image size"): tokens are about
    width x height / 750, after Claude's own resize: an image whose long edge is over 1568 px,
    or that is over about 1,600 tokens (about 1.15-1.2 megapixels), is first scaled down
    keeping its aspect ratio. The guide's table of the largest sizes that are not resized
    (1092x1092, 951x1268, 896x1344, 819x1456, 784x1568) ends at 784x1568, so this rule scales
    an image down only when its long edge is over 1568 px or its area is over 784 x 1568 px,
    to the largest size (whole pixels, rounded down) within both. The count is rounded up,
    which gives the guide's examples: 200x200 is ~54 tokens, 1000x1000 ~1334, 1092x1092 ~1590.

    Args:
        width: the image's width in pixels.
        height: the image's height in pixels.

    Returns:
        The token count.

    Raises:
        InvalidInput: `width` or `height` is not a positive integer.
    """
    _check_size(width, height)
    w, h = width, height
    scale = min(1.0, _ANTHROPIC_LONG_EDGE / max(w, h), math.sqrt(_ANTHROPIC_MAX_PIXELS / (w * h)))
    if scale < 1.0:
        w, h = max(1, math.floor(w * scale)), max(1, math.floor(h * scale))
    return -(-(w * h) // 750)


def token_rule(kind: str, provider: str) -> str:
    """The name and version of the rule that counts `kind` for `provider`.

    Args:
        kind: `"image"`, `"pdf"` or `"audio"`.
        provider: `"openai"`, `"anthropic"` or any other name (the default rules).

    Returns:
        One of the `*_RULE` constants, to record with a count.

    Raises:
        InvalidInput: `kind` is none of the three.
    """
    provider = provider.lower()
    if kind == "image":
        return {"openai": OPENAI_IMAGE_RULE, "anthropic": ANTHROPIC_IMAGE_RULE}.get(
            provider, DEFAULT_IMAGE_RULE
        )
    if kind == "pdf":
        return {"openai": OPENAI_PDF_RULE, "anthropic": ANTHROPIC_PDF_RULE}.get(
            provider, DEFAULT_PDF_RULE
        )
    if kind == "audio":
        return AUDIO_RULE
    raise InvalidInput(f"kind must be 'image', 'pdf' or 'audio', got {kind!r}")


def _warn(message: str, *args: object) -> None:
    import logging  # lazily: `import turnlog` loads no logging

    logging.getLogger(_log_name).warning(message, *args)


def image_tokens(
    data_or_size: bytes | tuple[int, int], *, provider: str, detail: str | None = None
) -> int:
    """Tokens for an image under `provider`'s rule, its size read from its header.

    `"openai"` counts by `openai_image_tokens` (with `detail`), `"anthropic"` by
    `anthropic_image_tokens` (`detail` is ignored); any other provider by the larger of the
    two (`DEFAULT_IMAGE_RULE`). `token_rule("image", provider)` names the rule.

    An image whose size cannot be read from its header (an unknown format, a truncated or
    malformed header) is counted as a 1024x1024 image under the same rule (OpenAI: 765, or 85
    at low detail; Anthropic: 1399; default: 1399), and a WARNING is logged on the
    `turnlog.media` logger. It never raises for the bytes.

    Args:
        data_or_size: the image file's bytes, or its `(width, height)` in pixels.
        provider: the provider the image is sent to: `"openai"`, `"anthropic"`, or another.
        detail: OpenAI's `detail` for the image: `"low"`, `"high"`, `"auto"` or None.

    Returns:
        The token count.

    Raises:
        InvalidInput: a given `(width, height)` is not two positive integers.
    """
    if isinstance(data_or_size, tuple):
        if len(data_or_size) != 2:
            raise InvalidInput(f"an image size is (width, height), got {data_or_size!r}")
        size = data_or_size
        _check_size(*size)
    else:
        read = image_size(data_or_size)
        if read is None:
            _warn(
                "image header not readable (%d bytes, media type %s): counted as a %dx%d "
                "image under %s",
                len(data_or_size),
                image_media_type(data_or_size) or "unknown",
                *FALLBACK_IMAGE_SIZE,
                token_rule("image", provider),
            )
            read = FALLBACK_IMAGE_SIZE
        size = read
    name = provider.lower()
    if name == "openai":
        return openai_image_tokens(*size, detail=detail)
    if name == "anthropic":
        return anthropic_image_tokens(*size)
    return max(openai_image_tokens(*size, detail=detail), anthropic_image_tokens(*size))


# ---------------------------------------------------------------------------------------------
# PDF pages

_PDF_OBJ = re.compile(rb"(\d+)\s+\d+\s+obj\b(.*?)\bendobj\b", re.S)
_PDF_TYPE_PAGES = re.compile(rb"/Type\s*/Pages(?![A-Za-z0-9])")
_PDF_TYPE_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z0-9])")
_PDF_TYPE_OBJSTM = re.compile(rb"/Type\s*/ObjStm(?![A-Za-z0-9])")
_PDF_COUNT = re.compile(rb"/Count\s+(\d+)")
_PDF_PARENT = re.compile(rb"/Parent\s+\d+\s+\d+\s+R")
_PDF_INT = re.compile(rb"/(N|First|Length)\s+(\d+)(?!\s+\d+\s+R)")
_OBJSTM_LIMIT = 16 * 1024 * 1024  # at most this much inflated per object stream


def _objstm_objects(body: bytes) -> list[tuple[int, bytes]]:
    """The objects inside a FlateDecode object stream (PDF 1.5), or [] when unreadable."""
    import zlib  # lazily: only PDFs with object streams need it

    start = body.find(b"stream")
    end = body.rfind(b"endstream")
    if start < 0 or end < start or b"/FlateDecode" not in body[:start]:
        return []
    ints = {m.group(1): int(m.group(2)) for m in _PDF_INT.finditer(body[:start])}
    if b"N" not in ints or b"First" not in ints:
        return []
    raw = body[start + 6 : end]
    raw = raw[2:] if raw.startswith(b"\r\n") else raw[1:] if raw[:1] in (b"\n", b"\r") else raw
    try:
        text = zlib.decompressobj().decompress(raw, _OBJSTM_LIMIT)
    except zlib.error:
        return []
    first = ints[b"First"]
    numbers = [int(x) for x in text[:first].split()]
    pairs = list(zip(numbers[0::2], numbers[1::2], strict=False))[: ints[b"N"]]
    objects = []
    for k, (number, offset) in enumerate(pairs):
        stop = first + pairs[k + 1][1] if k + 1 < len(pairs) else len(text)
        objects.append((number, text[first + offset : stop]))
    return objects


def pdf_pages(data: bytes) -> int | None:
    """The number of pages of a PDF, read without a PDF library.

    The page count is the `/Count` of the root of the page tree (the `/Type /Pages` object with
    no `/Parent`); objects in FlateDecode object streams (PDF 1.5) are read too, and when an
    incremental update redefines an object, its last definition counts. A file with no page
    tree found is counted by its `/Type /Page` objects (not followed by `s`), if any.

    Args:
        data: the PDF file's bytes.

    Returns:
        The page count; None when the bytes are not a PDF, or the count is not certain (no
        page tree and no page found, or two roots that disagree). Never raises.
    """
    try:
        return _pdf_pages(data)
    except (IndexError, ValueError, OverflowError, MemoryError):
        return None


def _pdf_pages(data: bytes) -> int | None:
    if b"%PDF-" not in data[:1024]:
        return None
    objects: dict[int, bytes] = {}
    for m in _PDF_OBJ.finditer(data):
        number, body = int(m.group(1)), m.group(2)
        objects[number] = body
        if _PDF_TYPE_OBJSTM.search(body[:1024]):
            for inner_number, inner_body in _objstm_objects(body):
                objects.setdefault(inner_number, inner_body)
    roots: set[int] = set()
    leaves = 0
    for body in objects.values():
        dictionary = body.split(b"stream", 1)[0]
        if _PDF_TYPE_PAGES.search(dictionary):
            if not _PDF_PARENT.search(dictionary):
                count = _PDF_COUNT.search(dictionary)
                if count is None:
                    return None
                roots.add(int(count.group(1)))
        elif _PDF_TYPE_PAGE.search(dictionary):
            leaves += 1
    if len(roots) == 1:
        return roots.pop()
    if roots:
        return None
    return leaves or None


_OPENAI_PDF_PAGE = 1500 + 765
_ANTHROPIC_PDF_PAGE = 3000
PDF_FALLBACK_BYTES_PER_PAGE = 50_000
"""A PDF whose page count is unknown is counted as one page per this many bytes, at least 1
and at most `PDF_FALLBACK_MAX_PAGES`."""
PDF_FALLBACK_MAX_PAGES = 100
"""The most pages that fallback counts (Anthropic's limit of pages per request)."""


def pdf_tokens(pages_or_data: int | bytes, provider: str) -> int:
    """An estimate of the tokens of a PDF document under `provider`'s per-page rule.

    Anthropic's "PDF support" guide gives a page's text as typically 1,500-3,000 tokens,
    depending on how dense it is, and sends an image of each page as well;
    `ANTHROPIC_PDF_RULE` counts 3,000 tokens per page, the top of that range (an estimate
    that errs high rather than overflow a window; the page image is not added on top).
    OpenAI also sends each page's text and an image of it, and documents no per-page figure;
    `OPENAI_PDF_RULE` counts 1,500 tokens of text (the low end of Anthropic's range) plus 765
    for the page image (a US Letter page at high detail under the tile rule), 2,265 per page.
    Any other provider: the larger, 3,000 (`DEFAULT_PDF_RULE`).

    Given bytes whose page count cannot be read (`pdf_pages` returns None), the count is one
    page per 50 KB, at least 1 and at most 100 (Anthropic's limit of pages per request), and a
    WARNING is logged on the `turnlog.media` logger.

    Args:
        pages_or_data: the page count, or the PDF file's bytes.
        provider: the provider the document is sent to.

    Returns:
        The token count.

    Raises:
        InvalidInput: a given page count is negative or not an integer.
    """
    if isinstance(pages_or_data, bytes):
        pages = pdf_pages(pages_or_data)
        if pages is None:
            pages = min(
                PDF_FALLBACK_MAX_PAGES,
                max(1, -(-len(pages_or_data) // PDF_FALLBACK_BYTES_PER_PAGE)),
            )
            _warn(
                "PDF page count not readable (%d bytes): counted as %d pages under %s",
                len(pages_or_data),
                pages,
                token_rule("pdf", provider),
            )
    else:
        pages = pages_or_data
        if isinstance(pages, bool) or not isinstance(pages, int) or pages < 0:
            raise InvalidInput(f"a page count is an integer >= 0, got {pages!r}")
    per_page = _OPENAI_PDF_PAGE if provider.lower() == "openai" else _ANTHROPIC_PDF_PAGE
    return pages * per_page


# ---------------------------------------------------------------------------------------------
# Audio

_AUDIO_TOKENS_PER_SECOND = 10
AUDIO_FALLBACK_BYTES_PER_SECOND = 16_000
"""Audio whose duration is unknown is counted at this many bytes per second (128 kbit/s, a
common compressed rate)."""


def wav_seconds(data: bytes) -> float | None:
    """The duration of a WAV file, from its RIFF/WAVE header.

    The duration is the `data` chunk's size over the `fmt ` chunk's average bytes per second.
    A `data` chunk that declares more bytes than the file holds (a truncated file, or the
    0xFFFFFFFF of a stream written before its length was known) is measured by the bytes
    present.

    Args:
        data: the WAV file's bytes.

    Returns:
        The duration in seconds; None when the bytes are not RIFF/WAVE, or the `fmt ` or
        `data` chunk is missing or unreadable. Never raises.
    """
    n = len(data)
    if n < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    byte_rate: int | None = None
    data_size: int | None = None
    i = 12
    while i + 8 <= n and (byte_rate is None or data_size is None):
        chunk, size, body = data[i : i + 4], _le32(data, i + 4), i + 8
        if chunk == b"fmt ":
            if size < 16 or body + 16 > n:
                return None
            byte_rate = _le32(data, body + 8)
        elif chunk == b"data":
            data_size = min(size, n - body)
        i = body + size + (size & 1)
    if not byte_rate or data_size is None:
        return None
    return data_size / byte_rate


def audio_tokens(seconds_or_data: float | bytes, provider: str) -> int:
    """An estimate of the tokens of input audio (`AUDIO_RULE`), for every provider.

    OpenAI's Realtime "Managing costs" guide: audio in user messages is 1 token per 100 ms
    (10 per second; assistant audio is 1 per 50 ms). The same rate is the estimate for
    gpt-4o audio input in chat completions and for any other provider; Anthropic's Messages
    API takes no audio, so there an audio part is sent as its transcript or not at all, and
    the rate is only an upper figure. The count is rounded up.

    Given bytes that are not a readable WAV file (`wav_seconds` returns None), the duration is
    taken as the bytes at 128 kbit/s (16,000 bytes per second, a common compressed rate), and
    a WARNING is logged on the `turnlog.media` logger.

    Args:
        seconds_or_data: the duration in seconds, or the audio file's bytes.
        provider: the provider the audio is sent to (the rule is the same for all).

    Returns:
        The token count.

    Raises:
        InvalidInput: a given duration is negative or not a finite number.
    """
    if isinstance(seconds_or_data, bytes):
        seconds = wav_seconds(seconds_or_data)
        if seconds is None:
            seconds = len(seconds_or_data) / AUDIO_FALLBACK_BYTES_PER_SECOND
            _warn(
                "audio duration not readable (%d bytes, not a WAV file): counted as %.1f s "
                "under %s",
                len(seconds_or_data),
                seconds,
                token_rule("audio", provider),
            )
    else:
        seconds = seconds_or_data
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise InvalidInput(f"a duration is a finite number of seconds >= 0, got {seconds!r}")
    return math.ceil(seconds * _AUDIO_TOKENS_PER_SECOND)
