"""Image token estimates per rule, and the cost of reading an image's size from its header.

For a set of images generated with Pillow (a dev extra; turnlog.media needs none), prints the
size `image_size` reads and the count under each rule: OpenAI's tile rule at high and low
detail, Anthropic's area rule, and the default (the larger). Then times `image_size` and
`image_tokens` on a small (about 10 KB) and a large (about 10 MB) image of each format, to show
that the header read does not grow with the image: the ratio large/small should be near 1.

    python bench/image_tokens.py [--quick]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.dont_write_bytecode = True

from PIL import Image  # noqa: E402

from turnlog.media import (  # noqa: E402
    anthropic_image_tokens,
    image_size,
    image_tokens,
    openai_image_tokens,
)

SIZES = [(64, 64), (200, 200), (512, 512), (1000, 1000), (1092, 1092), (1024, 1024)]
SIZES += [(1920, 1080), (2048, 4096), (3000, 17), (4096, 8192)]


def encode(fmt: str, image: Image.Image, **params: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **params)
    return out.getvalue()


def noise(side: int) -> Image.Image:
    return Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))


def per_call(fn: Callable[[bytes], object], data: bytes, number: int) -> float:
    """The median over 7 runs of the seconds per call of `fn(data)`."""
    runs = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(number):
            fn(data)
        runs.append((time.perf_counter() - start) / number)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls per timing")
    args = parser.parse_args()
    number = 2_000 if args.quick else 20_000

    print("image tokens per rule (size read from a PNG header)")
    print(f"{'size':>11} {'openai high':>12} {'openai low':>11} {'anthropic':>10} {'default':>8}")
    for w, h in SIZES:
        data = encode("PNG", Image.new("RGB", (w, h), (120, 30, 200)), compress_level=1)
        size = image_size(data)
        assert size == (w, h), (size, (w, h))
        print(
            f"{w:>5}x{h:<5} {openai_image_tokens(w, h, detail='high'):>12}"
            f" {openai_image_tokens(w, h, detail='low'):>11} {anthropic_image_tokens(w, h):>10}"
            f" {image_tokens(data, provider='other'):>8}"
        )

    print()
    print(
        "header read per call: a ~10 KB image against a ~10 MB one (noise, so it compresses little)"
    )
    small, large = noise(58), noise(1830)
    formats: dict[str, dict[str, Any]] = {
        "PNG": {},
        "JPEG": {"quality": 100, "exif": Image.Exif().tobytes()},
        "WEBP": {"lossless": True},
        "GIF": {},
    }
    print(
        f"{'format':>6} {'small':>9} {'large':>10} {'image_size small':>17} {'large':>9}"
        f" {'ratio':>6} {'image_tokens large':>19}"
    )
    for fmt, params in formats.items():
        a = encode(fmt, small, **params)
        b = encode(fmt, large, **params)
        assert image_size(a) == small.size and image_size(b) == large.size
        ta, tb = per_call(image_size, a, number), per_call(image_size, b, number)
        tt = per_call(lambda d: image_tokens(d, provider="anthropic"), b, number)
        print(
            f"{fmt:>6} {len(a) / 1e3:>7.1f}KB {len(b) / 1e6:>8.2f}MB {ta * 1e6:>15.2f}us"
            f" {tb * 1e6:>7.2f}us {tb / ta:>6.2f} {tt * 1e6:>17.2f}us"
        )
    print()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {number} calls x 7 runs")


if __name__ == "__main__":
    main()
