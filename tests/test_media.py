"""turnlog.media: image sizes read from headers, PDF pages, WAV durations, and the token rules.

The oracle for the headers is Pillow, an independent encoder (a dev extra, never a run-time
dependency); for WAV, the standard library's `wave` writer. The token rules are checked against
the examples the providers publish.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import wave
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from turnlog.errors import InvalidInput
from turnlog.media import (
    ANTHROPIC_IMAGE_RULE,
    AUDIO_RULE,
    DEFAULT_IMAGE_RULE,
    OPENAI_IMAGE_RULE,
    anthropic_image_tokens,
    audio_tokens,
    image_media_type,
    image_size,
    image_tokens,
    openai_image_tokens,
    pdf_pages,
    pdf_tokens,
    token_rule,
    wav_seconds,
)

ROOT = Path(__file__).resolve().parent.parent


def encode(fmt: str, size: tuple[int, int], mode: str = "RGB", **params) -> bytes:
    color = {"RGBA": (10, 20, 30, 128), "L": 77, "CMYK": (1, 2, 3, 4), "P": 3, "1": 1}.get(
        mode, (200, 100, 50)
    )
    image = Image.new(mode, size, color)
    if size[0] > 1 and size[1] > 1 and size[0] * size[1] < 1_000_000:
        image.putpixel(
            (size[0] - 1, size[1] - 1), tuple(0 for _ in color) if isinstance(color, tuple) else 0
        )
    out = io.BytesIO()
    image.save(out, fmt, **params)
    return out.getvalue()


def exif_with_orientation() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90
    exif[0x010F] = "turnlog test camera"
    return exif.tobytes()


def animated_webp(size: tuple[int, int]) -> bytes:
    frames = [Image.new("RGBA", size, (i * 60, 0, 0, 255)) for i in range(3)]
    out = io.BytesIO()
    frames[0].save(out, "WEBP", save_all=True, append_images=frames[1:], duration=50, loop=0)
    return out.getvalue()


SIZES = [(1, 1), (3000, 17), (17, 3000), (640, 480), (1000, 1000)]

CASES = [
    ("PNG", "RGB", {}),
    ("PNG", "RGBA", {}),
    ("PNG", "P", {}),
    ("PNG", "L", {}),
    ("PNG", "1", {}),
    ("JPEG", "RGB", {}),
    ("JPEG", "RGB", {"progressive": True}),
    ("JPEG", "RGB", {"exif": exif_with_orientation()}),
    ("JPEG", "L", {}),
    ("JPEG", "CMYK", {}),
    ("JPEG", "RGB", {"quality": 95, "subsampling": 0, "optimize": True}),
    ("GIF", "P", {}),
    ("GIF", "L", {}),
    ("WEBP", "RGB", {"quality": 80}),
    ("WEBP", "RGB", {"lossless": True}),
    ("WEBP", "RGBA", {"quality": 80}),
    ("WEBP", "RGBA", {"lossless": True}),
    ("WEBP", "RGB", {"exif": exif_with_orientation()}),
]

MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("fmt,mode,params", CASES, ids=lambda c: str(c)[:40])
def test_image_size_matches_pillow(fmt, mode, params, size):
    data = encode(fmt, size, mode, **params)
    assert Image.open(io.BytesIO(data)).size == size  # the oracle agrees with itself
    assert image_size(data) == size
    assert image_media_type(data) == MEDIA_TYPES[fmt]


@pytest.mark.parametrize(
    "fmt,params",
    [("PNG", {"compress_level": 1}), ("JPEG", {}), ("JPEG", {"progressive": True}), ("GIF", {})],
)
def test_image_size_of_a_large_solid_image(fmt, params):
    mode = "P" if fmt == "GIF" else "RGB"
    data = encode(fmt, (4096, 8192), mode, **params)
    assert image_size(data) == (4096, 8192)


def test_image_size_of_webp_at_its_largest():
    data = encode("WEBP", (16383, 16383), "RGB", lossless=True)  # the VP8L limit, 14 bits
    assert image_size(data) == (16383, 16383)
    data = encode("WEBP", (16383, 3), "RGB", quality=50)
    assert image_size(data) == (16383, 3)


def test_webp_extended_files_read_the_canvas():
    for size in [(1, 1), (300, 17), (1000, 640)]:
        data = animated_webp(size)
        assert data[12:16] == b"VP8X"
        assert image_size(data) == size
        with_exif = encode("WEBP", size, "RGBA", exif=exif_with_orientation())
        assert with_exif[12:16] == b"VP8X"
        assert image_size(with_exif) == size


def test_animated_gif_and_png_read_the_first_header():
    frames = [Image.new("P", (320, 200), i) for i in range(3)]
    for fmt in ("GIF", "PNG"):
        out = io.BytesIO()
        frames[0].save(out, fmt, save_all=True, append_images=frames[1:], duration=40)
        assert image_size(out.getvalue()) == (320, 200)


def test_jpeg_with_fill_bytes_standalone_markers_and_comments():
    data = encode("JPEG", (123, 45), "RGB", exif=exif_with_orientation())
    # fill bytes before a marker, a standalone TEM marker and a COM segment, after SOI
    extra = b"\xff\xff\xfe\x00\x07hello" + b"\xff\xff\xff\xe0\x00\x04ab"
    patched = data[:2] + extra + data[2:]
    assert Image.open(io.BytesIO(patched)).size == (123, 45)
    assert image_size(patched) == (123, 45)
    # TEM (FF 01) and RST0-7 stand alone, with no length (T.81 table B.1); Pillow refuses TEM
    standalone = b"\xff\x01\xff\xff\xd0\xff\xd7"
    assert image_size(data[:2] + standalone + extra + data[2:]) == (123, 45)


def test_jpeg_markers_in_the_sof_range_that_are_not_frames_are_skipped():
    # A DHT (C4), JPG (C8) and DAC (CC) segment before the frame: each has the frame header's
    # shape, and reading one as a frame would give a wrong size.
    data = encode("JPEG", (321, 123))
    fake = b"\x00\x0b\x08\x00\x05\x00\x07\x01\x01\x11\x00"
    patched = data[:2] + b"".join(b"\xff" + bytes([m]) + fake for m in (0xC4, 0xC8, 0xCC))
    patched += data[2:]
    assert image_size(patched) == (321, 123)


def test_jpeg_whose_height_comes_from_a_dnl_segment_is_unknown():
    data = bytearray(encode("JPEG", (64, 32)))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 7] = b"\x00\x00"  # number of lines 0: set by a DNL segment
    assert image_size(bytes(data)) is None


@pytest.mark.parametrize("fmt,mode,params", CASES, ids=lambda c: str(c)[:40])
def test_every_truncation_reads_the_size_or_none(fmt, mode, params):
    data = encode(fmt, (300, 17), mode, **params)
    head = data[:2048]
    for n in range(len(head) + 1):
        assert image_size(head[:n]) in (None, (300, 17)), n
    # a header cut before the size field is unknown
    assert image_size(data[:9]) is None


def test_svg_is_recognised_so_callers_can_refuse_to_render_it():
    for text in [
        b'<svg xmlns="http://www.w3.org/2000/svg"/>',
        b'\xef\xbb\xbf  <?xml version="1.0"?>\n<!-- drawn -->\n<!DOCTYPE svg PUBLIC "-//W3C//DTD'
        b' SVG 1.1//EN" "x.dtd">\n<svg width="10"><script>alert(1)</script></svg>',
        b"\n\n<SVG>",
    ]:
        assert image_media_type(text) == "image/svg+xml", text
        assert image_size(text) is None
    for text in [b"<html><svg></svg></html>", b"svg", b"<svgx>", b""]:
        assert image_media_type(text) is None, text


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=256))
def test_random_bytes_never_raise(data):
    assert image_size(data) is None or all(v > 0 for v in image_size(data))
    image_media_type(data)
    pdf_pages(data)
    wav_seconds(data)


MAGIC = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8", b"GIF89a", b"RIFF\x00\x00\x00\x00WEBP", b"%PDF-1.4"]
MAGIC += [
    b"RIFF\x00\x00\x00\x00WAVE",
    b"RIFF\x00\x00\x00\x00WEBPVP8 ",
    b"RIFF\x00\x00\x00\x00WEBPVP8L",
]


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(MAGIC), st.binary(max_size=200))
def test_random_bytes_after_a_magic_number_never_raise(magic, tail):
    data = magic + tail
    size = image_size(data)
    assert size is None or (size[0] > 0 and size[1] > 0)
    pdf_pages(data)
    seconds = wav_seconds(data)
    assert seconds is None or seconds >= 0


VALID = [encode(fmt, (37, 5), mode, **params) for fmt, mode, params in CASES]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALID), st.data())
def test_corrupted_images_never_raise(data, draw):
    buf = bytearray(data[:600])
    for _ in range(draw.draw(st.integers(1, 8))):
        i = draw.draw(st.integers(0, len(buf) - 1))
        buf[i] = draw.draw(st.integers(0, 255))
    cut = draw.draw(st.integers(0, len(buf)))
    size = image_size(bytes(buf[:cut]))
    assert size is None or (size[0] > 0 and size[1] > 0)
    assert image_tokens(bytes(buf[:cut]), provider="openai") >= 85


# --- token rules ---------------------------------------------------------------------------


def test_openai_published_examples():
    # OpenAI, "Images and vision", Calculating costs (GPT-4o, GPT-4.1, o-series):
    assert openai_image_tokens(1024, 1024, detail="high") == 765  # 768x768, 4 tiles
    assert openai_image_tokens(2048, 4096, detail="high") == 1105  # 768x1536, 6 tiles
    assert openai_image_tokens(4096, 8192, detail="low") == 85  # low detail is fixed


def test_openai_rule_steps():
    assert openai_image_tokens(512, 512) == 255  # one tile, no resize
    assert openai_image_tokens(513, 512) == 425  # two tiles
    assert openai_image_tokens(1, 1) == 255
    assert openai_image_tokens(3000, 17) == 765  # fits 2048 -> 2048x11: 4 tiles
    assert openai_image_tokens(768, 4000) == openai_image_tokens(4000, 768)
    # auto and an unset detail count as high (the upper estimate)
    for detail in (None, "auto", "high", "something new"):
        assert openai_image_tokens(1024, 1024, detail=detail) == 765


def test_anthropic_published_examples():
    # Anthropic, "Vision", Evaluate image size: tokens = width * height / 750
    assert anthropic_image_tokens(200, 200) == 54
    assert anthropic_image_tokens(1000, 1000) == 1334
    assert anthropic_image_tokens(1092, 1092) == 1590
    # the table of largest sizes not resized: each is counted as is
    for w, h in [(1092, 1092), (951, 1268), (896, 1344), (819, 1456), (784, 1568)]:
        assert anthropic_image_tokens(w, h) == -(-(w * h) // 750)
        assert anthropic_image_tokens(h, w) == anthropic_image_tokens(w, h)


def test_anthropic_resize_caps_long_edge_and_area():
    cap = -(-(1568 * 784) // 750)
    assert anthropic_image_tokens(4096, 8192) <= cap
    assert anthropic_image_tokens(8000, 8000) <= cap
    assert anthropic_image_tokens(8000, 8000) > 1500
    # long edge over 1568 with a small area: scaled to 1568 wide
    assert anthropic_image_tokens(3000, 17) == -(-(1568 * 8) // 750)


def test_image_tokens_reads_the_header_and_picks_the_rule():
    png = encode("PNG", (2048, 4096), "RGB")
    assert image_tokens(png, provider="openai", detail="high") == 1105
    assert image_tokens(png, provider="OpenAI", detail="low") == 85
    assert image_tokens(png, provider="anthropic") == anthropic_image_tokens(2048, 4096)
    assert image_tokens((1000, 1000), provider="anthropic") == 1334
    # any other provider: the larger of the two
    assert image_tokens((100, 100), provider="gemini") == 255
    assert image_tokens((1000, 1000), provider="gemini") == 1334
    assert token_rule("image", "openai") == OPENAI_IMAGE_RULE
    assert token_rule("image", "Anthropic") == ANTHROPIC_IMAGE_RULE
    assert token_rule("image", "mistral") == DEFAULT_IMAGE_RULE


def test_unreadable_header_counts_as_1024_square_and_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="turnlog.media"):
        assert image_tokens(b"not an image", provider="openai") == 765
        assert image_tokens(b"not an image", provider="openai", detail="low") == 85
        assert image_tokens(b"\x89PNG\r\n\x1a\n\x00", provider="anthropic") == 1399
        assert image_tokens(b"", provider="other") == 1399
    records = [r for r in caplog.records if r.name == "turnlog.media"]
    assert len(records) == 4
    assert all(r.levelno == logging.WARNING for r in records)
    assert "image/png" in records[2].getMessage()
    assert "1024x1024" in records[0].getMessage()


def test_a_readable_header_does_not_warn(caplog):
    with caplog.at_level(logging.DEBUG, logger="turnlog.media"):
        image_tokens(encode("GIF", (10, 10), "P"), provider="openai")
    assert not caplog.records


@pytest.mark.parametrize("bad", [(0, 10), (10, -1), (1.5, 2), (True, 3), (1, 2, 3)])
def test_a_bad_size_is_the_callers_error(bad):
    with pytest.raises(InvalidInput):
        image_tokens(bad, provider="openai")


# --- PDF -----------------------------------------------------------------------------------


def pillow_pdf(pages: int) -> bytes:
    images = [Image.new("RGB", (60, 80), (i * 20 % 256, 0, 0)) for i in range(pages)]
    out = io.BytesIO()
    images[0].save(out, "PDF", save_all=True, append_images=images[1:])
    return out.getvalue()


@pytest.mark.parametrize("pages", [1, 2, 7, 30])
def test_pdf_pages_of_pillow_pdfs(pages):
    assert pdf_pages(pillow_pdf(pages)) == pages


def hand_pdf(objects: list[bytes]) -> bytes:
    body = b"%PDF-1.7\n"
    for number, obj in enumerate(objects, 1):
        body += b"%d 0 obj\n" % number + obj + b"\nendobj\n"
    return body + b"trailer\n<< /Root 1 0 R >>\n%%EOF\n"


def test_pdf_page_tree_with_intermediate_nodes():
    data = hand_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 5 >>",
            b"<< /Type /Pages /Parent 2 0 R /Kids [5 0 R 6 0 R] /Count 2 >>",
            b"<< /Type /Pages /Parent 2 0 R /Kids [7 0 R 8 0 R 9 0 R] /Count 3 >>",
            *[b"<< /Type /Page /Parent 3 0 R >>"] * 5,
        ]
    )
    assert pdf_pages(data) == 5


def test_pdf_incremental_update_uses_the_last_definition():
    data = hand_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R >>",
        ]
    )
    data += b"2 0 obj\n<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>\nendobj\n"
    data += b"4 0 obj\n<< /Type /Page /Parent 2 0 R >>\nendobj\n%%EOF\n"
    assert pdf_pages(data) == 2


def test_pdf_page_tree_inside_an_object_stream():
    inner = [
        (2, b"<< /Type /Pages /Kids [3 0 R 4 0 R 5 0 R] /Count 3 >>"),
        (3, b"<< /Type /Page /Parent 2 0 R >>"),
        (4, b"<< /Type /Page /Parent 2 0 R >>"),
        (5, b"<< /Type /Page /Parent 2 0 R >>"),
    ]
    offsets, bodies, at = [], b"", 0
    for number, body in inner:
        offsets.append(b"%d %d" % (number, at))
        bodies += body + b" "
        at += len(body) + 1
    header = b" ".join(offsets) + b"\n"
    stream = zlib.compress(header + bodies)
    objstm = (
        b"<< /Type /ObjStm /N 4 /First %d /Filter /FlateDecode /Length %d >>\nstream\n"
        % (len(header), len(stream))
        + stream
        + b"\nendstream"
    )
    data = hand_pdf([b"<< /Type /Catalog /Pages 2 0 R >>", objstm])
    assert pdf_pages(data) == 3


def test_pdf_without_a_page_tree_counts_page_objects_not_pages_objects():
    data = hand_pdf([b"<< /Type /Page >>", b"<< /Type /Page>>", b"<< /Type/Page /X 1 >>"])
    assert pdf_pages(data) == 3


def test_pdf_pages_is_none_when_unsure():
    assert pdf_pages(b"not a pdf") is None
    assert pdf_pages(b"%PDF-1.4\n") is None
    two_roots = hand_pdf([b"<< /Type /Pages /Count 2 >>", b"<< /Type /Pages /Count 3 >>"])
    assert pdf_pages(two_roots) is None
    data = pillow_pdf(3)
    assert pdf_pages(data[: len(data) // 3]) in (None, 3)


def test_pdf_tokens_rules(caplog):
    assert pdf_tokens(10, "anthropic") == 30_000
    assert pdf_tokens(10, "openai") == 22_650
    assert pdf_tokens(2, "other") == 6_000
    assert pdf_tokens(pillow_pdf(4), "anthropic") == 12_000
    with caplog.at_level(logging.WARNING, logger="turnlog.media"):
        assert pdf_tokens(b"%PDF-1.4\n" + b"x" * 120_000, "anthropic") == 9_000  # 3 pages
        assert pdf_tokens(b"x" * 50_000_000, "anthropic") == 300_000  # at most 100 pages
    assert len(caplog.records) == 2
    with pytest.raises(InvalidInput):
        pdf_tokens(-1, "anthropic")


# --- audio ---------------------------------------------------------------------------------


def wav(seconds: float, rate: int = 16000, channels: int = 1, width: int = 2) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(b"\x00" * int(seconds * rate) * channels * width)
    return out.getvalue()


@pytest.mark.parametrize(
    "seconds,rate,channels,width",
    [
        (1.0, 16000, 1, 2),
        (2.5, 44100, 2, 2),
        (0.25, 8000, 1, 1),
        (3.0, 48000, 2, 3),
        (0, 8000, 1, 2),
    ],
)
def test_wav_seconds_matches_the_wave_module(seconds, rate, channels, width):
    data = wav(seconds, rate, channels, width)
    with wave.open(io.BytesIO(data)) as w:
        expected = w.getnframes() / w.getframerate()
    assert wav_seconds(data) == pytest.approx(expected)


def test_wav_with_a_chunk_before_the_data_and_truncated():
    data = wav(2.0)
    fmt_end = data.index(b"data")
    riff_list = b"LIST" + (5).to_bytes(4, "little") + b"INFOx\x00"  # odd size, padded
    patched = data[:fmt_end] + riff_list + data[fmt_end:]
    assert wav_seconds(patched) == pytest.approx(2.0)
    assert wav_seconds(data[: len(data) // 2]) == pytest.approx((len(data) // 2 - 44) / 32000)
    streamed = bytearray(data)
    streamed[40:44] = b"\xff\xff\xff\xff"  # written before the length was known
    assert wav_seconds(bytes(streamed)) == pytest.approx(2.0)
    assert wav_seconds(data[:30]) is None  # the fmt chunk is cut
    assert wav_seconds(b"RIFF\x00\x00\x00\x00WAVE") is None


def test_audio_tokens(caplog):
    # OpenAI Realtime, Managing costs: user audio is 1 token per 100 ms
    assert audio_tokens(60, "openai") == 600
    assert audio_tokens(0.01, "anthropic") == 1
    assert audio_tokens(wav(2.5), "openai") == 25
    assert token_rule("audio", "openai") == AUDIO_RULE
    with caplog.at_level(logging.WARNING, logger="turnlog.media"):
        assert audio_tokens(b"ID3" + b"\x00" * 159_997, "openai") == 100  # 10 s at 128 kbit/s
    assert len(caplog.records) == 1
    for bad in (-1, float("nan"), float("inf"), True):
        with pytest.raises(InvalidInput):
            audio_tokens(bad, "openai")
    with pytest.raises(InvalidInput):
        token_rule("video", "openai")


def test_importing_media_loads_no_logging():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    code = "import sys, turnlog.media; print('logging' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
