"""Image token estimates against the tokens a provider bills for them (issue 25, item 3).

Scripted image conversations (screenshots, phone photos, tiny icons, banners and scrolls, the
providers' own worked examples, at low, high, auto or no detail, as PNG, JPEG, GIF and WebP made
with Pillow in memory) are played through `OpenAIChatModel` and `AnthropicChatModel` over real
sockets to a local `ScriptedServer` (tests/model_servers.py). The server bills every inline
image by the provider's published rule, its own implementation of it, the size decoded from the
base64 data with Pillow (not with turnlog's header reader), and adds it to the input tokens it
reports; the text is billed as scripted, a fixed count, so the reported input tokens less that
count are the tokens of the images the request carried.

turnlog's side is what it records: each user message is appended through `SessionService` with
`O200kCounter(media_provider=...)`, and the count stored with the event (under the counter name
`...+media-<provider>/1`) is the message's text and notes plus, for each image,
`turnlog.tokens.part_tokens` (`turnlog.media`'s rule, for the size read from the image's
header): that per-image figure is the estimate compared.

Each request sends the whole view, so it is billed again for every earlier image. Per image,
the billed tokens are the growth of the reported image tokens from one request to the next;
per request, the estimate is the sum over the images of the view.

    python bench/image_token_error.py [--quick]

The Anthropic table is also given with the area limit read three ways (the guide is not exact
about it; see docs/benchmarks.md). Last, the rules alone are compared on 200,000 random sizes
(seeded by `--seed`), to show how often a size falls where the two implementations round apart.
`--quick` plays the first conversation only, and 20,000 sizes.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing, not even bytecode

import io  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from PIL import Image, ImageDraw  # noqa: E402

from _harness import machine, parse_args, table  # noqa: E402
from model_servers import (  # noqa: E402
    ANTHROPIC_MAX_PIXELS,
    ScriptedServer,
    anthropic_billed_tokens,
    anthropic_message,
    openai_billed_tokens,
    openai_completion,
)
from turnlog import ImagePart, MemoryStore, Message, O200kCounter, SessionService  # noqa: E402
from turnlog.compaction import sent_events  # noqa: E402
from turnlog.media import anthropic_image_tokens, openai_image_tokens  # noqa: E402
from turnlog.models import AnthropicChatModel, OpenAIChatModel  # noqa: E402
from turnlog.tokens import part_tokens  # noqa: E402

SCRIPTED_PROMPT = 42
"""The input tokens the scripted replies report for the text (OpenAI's prompt_tokens;
Anthropic's 10 uncached + 32 read from the cache, summed by the adapter)."""


@dataclass(frozen=True)
class Shot:
    """One image of a conversation."""

    label: str
    width: int
    height: int
    fmt: str  # a Pillow format: PNG, JPEG, GIF, WEBP
    detail: str | None = None  # OpenAI's detail; Anthropic has none


# Each conversation: user turns, each a question and its images.
CONVERSATIONS: list[tuple[str, list[tuple[str, list[Shot]]]]] = [
    (
        "screenshots",
        [
            ("What does this error dialog say?", [Shot("1024x768 screenshot", 1024, 768, "PNG")]),
            (
                "And on the full screen?",
                [Shot("1920x1080 screen", 1920, 1080, "PNG", "auto")],
            ),
            ("The same at 1440p.", [Shot("2560x1440 screen", 2560, 1440, "WEBP", "high")]),
            (
                "Compare the two icons.",
                [
                    Shot("16x16 icon", 16, 16, "PNG", "high"),
                    Shot("64x48 GIF icon", 64, 48, "GIF"),
                ],
            ),
            ("Cheaper, please.", [Shot("1920x1080 screen", 1920, 1080, "PNG", "low")]),
        ],
    ),
    (
        "photos",
        [
            ("What is in this photo?", [Shot("4000x3000 photo", 4000, 3000, "JPEG", "high")]),
            ("Portrait now.", [Shot("3000x4000 photo", 3000, 4000, "JPEG")]),
            ("Phone camera.", [Shot("4032x3024 phone photo", 4032, 3024, "JPEG", "auto")]),
            (
                "A 24 MP one at low detail.",
                [Shot("6000x4000 photo", 6000, 4000, "JPEG", "low")],
            ),
            ("A web-sized one.", [Shot("1280x853 photo", 1280, 853, "WEBP", "high")]),
        ],
    ),
    (
        "extremes",
        [
            ("Read this banner.", [Shot("3000x200 banner", 3000, 200, "PNG", "high")]),
            ("And this scroll.", [Shot("200x3000 scroll", 200, 3000, "PNG")]),
            ("A receipt strip.", [Shot("8000x100 strip", 8000, 100, "PNG", "high")]),
            ("A thread.", [Shot("100x4000 thread", 100, 4000, "GIF", "high")]),
            ("One pixel.", [Shot("1x1 pixel", 1, 1, "PNG")]),
        ],
    ),
    (
        "the guides' examples and edges",
        [
            (
                "OpenAI's examples.",
                [
                    Shot("1024x1024", 1024, 1024, "PNG", "high"),
                    Shot("2048x4096", 2048, 4096, "PNG", "high"),
                    Shot("4096x8192", 4096, 8192, "JPEG", "low"),
                ],
            ),
            (
                "Anthropic's examples.",
                [
                    Shot("200x200", 200, 200, "PNG"),
                    Shot("1000x1000", 1000, 1000, "JPEG"),
                    Shot("1092x1092", 1092, 1092, "WEBP"),
                ],
            ),
            (
                "Tile edges.",
                [
                    Shot("512x512", 512, 512, "PNG", "high"),
                    Shot("513x513", 513, 513, "PNG", "high"),
                ],
            ),
            (
                "Anthropic's largest sizes not resized.",
                [
                    Shot("951x1268", 951, 1268, "JPEG"),
                    Shot("896x1344", 896, 1344, "JPEG"),
                    Shot("819x1456", 819, 1456, "PNG"),
                    Shot("784x1568", 784, 1568, "PNG"),
                ],
            ),
            (
                "A side just over a tile after scaling.",
                [Shot("2001x1500 (1024.5 px after scaling)", 2001, 1500, "PNG", "high")],
            ),
        ],
    ),
]

MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


def encode(shot: Shot) -> bytes:
    """A picture of the shot's size and format: a gradient with a few shapes, so a photo is
    a photo-sized JPEG rather than a flat one."""
    base = Image.linear_gradient("L").resize((shot.width, shot.height))
    image = Image.merge("RGB", (base, base.transpose(Image.Transpose.FLIP_LEFT_RIGHT), base))
    draw = ImageDraw.Draw(image)
    w, h = shot.width, shot.height
    draw.ellipse((w // 5, h // 5, w // 2, h // 2), fill=(200, 40, 40))
    draw.rectangle((w // 2, h // 2, w - w // 6, h - h // 6), fill=(30, 120, 220))
    if shot.fmt == "GIF":
        image = image.convert("P")
    out = io.BytesIO()
    image.save(out, shot.fmt, **({"quality": 85} if shot.fmt == "JPEG" else {}))
    return out.getvalue()


def _claude_takes(shot: Shot) -> bool:
    """Whether the Messages API takes the image: it refuses one over 8000 px on a side."""
    return max(shot.width, shot.height) <= 8000


@dataclass(frozen=True)
class ImageMeasure:
    conversation: str
    shot: Shot
    estimate: int
    billed: int


@dataclass(frozen=True)
class RequestMeasure:
    estimate: int
    billed: int


def play(
    provider: str,
    conversation: str,
    turns: Sequence[tuple[str, list[Shot]]],
    pictures: dict[Shot, bytes],
    anthropic_max_pixels: int,
) -> tuple[list[ImageMeasure], list[RequestMeasure]]:
    """Play one conversation through `provider`'s adapter; per image and per request."""
    counter = O200kCounter(media_provider=provider)
    server = ScriptedServer()
    server.anthropic_max_pixels = anthropic_max_pixels
    service = SessionService(MemoryStore(), token_counter=counter)
    images: list[ImageMeasure] = []
    requests: list[RequestMeasure] = []
    try:
        if provider == "openai":
            model: OpenAIChatModel | AnthropicChatModel = OpenAIChatModel(
                "gpt-bench", base_url=server.url + "/v1", api_key="k", max_retries=0
            )
        else:
            model = AnthropicChatModel(
                "claude-bench", base_url=server.url, api_key="k", max_retries=0
            )
        with model:
            sid = service.create().id
            view_estimate = 0
            billed_before = 0
            for question, all_shots in turns:
                shots = [s for s in all_shots if provider == "openai" or _claude_takes(s)]
                if not shots:
                    continue
                parts = [
                    ImagePart(MEDIA_TYPES[s.fmt], data=pictures[s], detail=s.detail) for s in shots
                ]
                event = service.append_message(sid, Message.user(question, *parts))
                assert event.tokens is not None and event.tokens.counter.endswith(
                    f"+media-{provider}/1"
                ), event.tokens
                per_part = [part_tokens(p, counter, provider) for p in parts]
                # The recorded count is the message's text and notes, plus these.
                assert event.tokens.count > sum(per_part), (event.tokens, per_part)
                view_estimate += sum(per_part)
                server.reply_json(
                    openai_completion("Seen.")
                    if provider == "openai"
                    else anthropic_message("Seen.")
                )
                sent = [e.message for e in sent_events(service.view(sid)) if e.message]
                # A store that keeps large bytes apart from the event (attachments) gives
                # them back for the wire with `with_bytes`.
                with_bytes = getattr(service, "with_bytes", None)
                response = model.respond(sent if with_bytes is None else with_bytes(sid, sent))
                assert response.usage.input_tokens is not None
                billed = response.usage.input_tokens - SCRIPTED_PROMPT
                # The server's own list of what it billed agrees with what it reported.
                assert billed == sum(i.tokens for i in server.requests[-1].images)
                requests.append(RequestMeasure(view_estimate, billed))
                # The new images are the last ones of the request, in order.
                new = server.requests[-1].images[-len(shots) :]
                assert billed - billed_before == sum(i.tokens for i in new)
                for shot, estimate, image in zip(shots, per_part, new, strict=True):
                    assert (image.width, image.height) == (shot.width, shot.height)
                    images.append(ImageMeasure(conversation, shot, estimate, image.tokens))
                billed_before = billed
                service.append_message(sid, response.message)
    finally:
        service.close()
        server.close()
    return images, requests


def error(estimate: int, billed: int) -> float:
    """The signed % error of an estimate against the billed count."""
    return 100 * (estimate - billed) / billed


def summary(provider: str, images: list[ImageMeasure], requests: list[RequestMeasure]) -> list:
    errs = [error(m.estimate, m.billed) for m in images]
    worst = max(range(len(images)), key=lambda i: abs(errs[i]))
    w = images[worst]
    exact = sum(1 for m in images if m.estimate == m.billed)
    req_errs = [abs(error(r.estimate, r.billed)) for r in requests]
    return [
        provider,
        len(images),
        f"{exact}",
        f"{statistics.mean(abs(e) for e in errs):.2f}",
        f"{max(abs(e) for e in errs):.2f}",
        f"{w.shot.label}: {w.estimate} est / {w.billed} billed ({errs[worst]:+.1f}%)"
        if errs[worst]
        else "-",
        len(requests),
        f"{statistics.mean(req_errs):.2f}",
        f"{max(req_errs):.2f}",
    ]


HEADERS = [
    "provider",
    "images",
    "exact",
    "mean |err| %",
    "max |err| %",
    "worst image",
    "requests",
    "req mean |err| %",
    "req max |err| %",
]


def main() -> None:
    args = parse_args(__doc__)
    conversations = CONVERSATIONS[:1] if args.quick else CONVERSATIONS
    print(f"Image token estimates vs billed image tokens{' (--quick)' if args.quick else ''}")
    print(machine())
    began = time.perf_counter()
    shots = {s for _, turns in conversations for _, turn in turns for s in turn}
    pictures = {s: encode(s) for s in shots}
    print(
        f"\n{len(conversations)} conversations, {len(pictures)} images "
        f"({sum(map(len, pictures.values())) / 1e6:.2f} MB encoded)"
    )
    rows = []
    per_image: dict[str, list[ImageMeasure]] = {}
    for provider in ("openai", "anthropic"):
        images: list[ImageMeasure] = []
        requests: list[RequestMeasure] = []
        for name, turns in conversations:
            i, r = play(provider, name, turns, pictures, ANTHROPIC_MAX_PIXELS)
            images += i
            requests += r
        per_image[provider] = images
        rows.append(summary(provider, images, requests))
    print()
    print("% error of turnlog's recorded image tokens against the server's billed ones")
    print(table(HEADERS, rows))

    for provider, images in per_image.items():
        print(f"\n{provider}: every image (estimate / billed)")
        detail = provider == "openai"  # the Messages API takes no detail
        print(
            table(
                ["image", "format", *(["detail"] if detail else []), "estimate", "billed", "err %"],
                [
                    [
                        m.shot.label,
                        m.shot.fmt,
                        *([m.shot.detail or "-"] if detail else []),
                        m.estimate,
                        m.billed,
                        f"{error(m.estimate, m.billed):+.1f}",
                    ]
                    for m in images
                ],
            )
        )

    print("\nanthropic, the area over which the image is scaled down, read three ways")
    readings = [
        ("~1,600 tokens (the guide's sentence; the default)", ANTHROPIC_MAX_PIXELS),
        ("784x1568 (the guide's table of sizes not resized)", 784 * 1568),
        ("1.15 MP (the guide's time-to-first-token advice)", 1_150_000),
    ]
    sensitivity = []
    for label, pixels in readings:
        images, requests = [], []
        for name, turns in conversations:
            i, r = play("anthropic", name, turns, pictures, pixels)
            images += i
            requests += r
        sensitivity.append([f"{label}: {pixels:,} px", *summary("anthropic", images, requests)[1:]])
    print(table(["area limit", *HEADERS[1:]], sensitivity))
    sweep(random.Random(args.seed), 20_000 if args.quick else 200_000)
    print(f"\n{time.perf_counter() - began:.1f} s")


def sweep(rng: random.Random, n: int) -> None:
    """The rules alone, on `n` random sizes of 1-6000 px a side: how often turnlog.media and
    the server's rule disagree, and by how much."""
    sizes = [(rng.randint(1, 6000), rng.randint(1, 6000)) for _ in range(n)]
    rows = []
    cases = [
        (
            "openai, high",
            lambda w, h: openai_image_tokens(w, h, detail="high"),
            lambda w, h: openai_billed_tokens(w, h, "high"),
        ),
        *[
            (
                f"anthropic, {label}",
                anthropic_image_tokens,
                lambda w, h, p=pixels: anthropic_billed_tokens(w, h, p),
            )
            for label, pixels in [
                ("~1,600 tokens", ANTHROPIC_MAX_PIXELS),
                ("784x1568", 784 * 1568),
                ("1.15 MP", 1_150_000),
            ]
        ],
    ]
    for label, ours, theirs in cases:
        diffs = [(ours(w, h), theirs(w, h), w, h) for w, h in sizes]
        diffs = [d for d in diffs if d[0] != d[1]]
        worst = max(diffs, key=lambda d: abs(error(d[0], d[1])), default=None)
        rows.append(
            [
                label,
                f"{100 * len(diffs) / n:.3f}",
                "-" if worst is None else f"{max(abs(a - b) for a, b, _, _ in diffs)}",
                "-"
                if worst is None
                else f"{worst[2]}x{worst[3]}: {worst[0]} / {worst[1]} "
                f"({error(worst[0], worst[1]):+.1f}%)",
            ]
        )
    print(f"\nthe rules alone, {n:,} random sizes of 1-6000 px a side (turnlog.media / server)")
    print(table(["rule, area limit", "% of sizes differing", "max tokens apart", "worst"], rows))


if __name__ == "__main__":
    main()
