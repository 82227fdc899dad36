"""What an image event's stored record costs to decode, in four forms (issue 25: the log read).

The log read beside 100 MiB of images misses its 1.1x on PostgreSQL and Redis and is on the line
on SQLite (bench/log_read_instructions.py): the 100 image events decode about 7,500 more
instructions each than their text-only twins, in msgspec, whatever the store. This script counts
(valgrind's callgrind, deterministic) one decode of a user message's body in model structs that
mirror the codec's, in four forms, against the same message without its image:

- "today": the text twice (`"text"` and a `TextPart`) and the image part as an object;
- "text once": the `TextPart` alone (a reader would rebuild `text` from it: not counted here);
- "arrays": the parts as arrays (`["image", media_type, ref, size, width, height]`);
- "arrays, text once": both.

    python bench/parts_record_forms.py      # needs valgrind; about 30 s
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import re  # noqa: E402
import subprocess  # noqa: E402

import msgspec  # noqa: E402


class T(msgspec.Struct, frozen=True, gc=False, tag_field="type", tag="text"):
    text: str


class I(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag_field="type", tag="image"):  # noqa: E742
    media_type: str
    data: bytes | None = None
    url: str | None = None
    ref: str | None = None
    size: int | None = None
    detail: str | None = None
    width: int | None = None
    height: int | None = None
    filename: str | None = None


class TA(msgspec.Struct, frozen=True, gc=False, tag="text", array_like=True):
    text: str


class IA(msgspec.Struct, frozen=True, gc=False, tag="image", array_like=True):
    media_type: str
    ref: str | None = None
    size: int | None = None
    width: int | None = None
    height: int | None = None
    data: bytes | None = None
    url: str | None = None
    detail: str | None = None
    filename: str | None = None


class M(msgspec.Struct):
    role: str
    text: str | None = None
    parts: tuple[T | I, ...] = ()


class MA(msgspec.Struct):
    role: str
    text: str | None = None
    parts: tuple[TA | IA, ...] = ()


class B(msgspec.Struct):
    v: int
    message: M | None = None
    tokens: tuple[str, int] | None = None


class BA(msgspec.Struct):
    v: int
    message: MA | None = None
    tokens: tuple[str, int] | None = None


TEXT = (
    "paper retry white by an or came times out began picture keep days go long always some "
    "always with below land who years world even night head paper big webhook three never"
)
REF = "sha256:" + "d651daf009d56a556b8c2d15f9920c07e48f69b2086cb1d21d9f2d57121290b8"
IMAGE = {"type": "image", "media_type": "image/png", "ref": REF, "size": 1048382}
IMAGE |= {"width": 512, "height": 682}
ROW = ["image", "image/png", REF, 1048382, 512, 682]
COUNTED = ["o200k_base toktok-rs/0.3.0+media/1", 522]


def body(message: dict[str, object], counted: list[object] = COUNTED) -> bytes:
    return msgspec.json.encode({"v": 1, "message": message, "tokens": counted})


FORMS = {
    "text only (the twin)": (B, body({"role": "user", "text": TEXT}, ["o200k_base", 42])),
    "today": (
        B,
        body({"role": "user", "text": TEXT, "parts": [{"type": "text", "text": TEXT}, IMAGE]}),
    ),
    "text once": (B, body({"role": "user", "parts": [{"type": "text", "text": TEXT}, IMAGE]})),
    "arrays": (BA, body({"role": "user", "text": TEXT, "parts": [["text", TEXT], ROW]})),
    "arrays, text once": (BA, body({"role": "user", "parts": [["text", TEXT], ROW]})),
}


def count(form: str, n: int) -> int:
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         __file__, form, str(n)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found, done.stderr[-2000:]
    return int(found.group(1))


def main() -> None:
    if len(sys.argv) == 3:  # a counted child: decode the form n times
        kind, raw = FORMS[sys.argv[1]]
        decoder = msgspec.json.Decoder(kind)
        for _ in range(int(sys.argv[2])):
            decoder.decode(raw)
        return
    n = 2000
    per = {form: (count(form, n) - count(form, 0)) / n for form in FORMS}
    twin = per["text only (the twin)"]
    extra_today = per["today"] - twin
    print(
        f"{'form':22s} {'bytes':>6s} {'instructions':>12s} {'over the twin':>14s} {'of today':>9s}"
    )
    for form, (_, raw) in FORMS.items():
        extra = per[form] - twin
        print(
            f"{form:22s} {len(raw):6d} {per[form]:12,.0f} {extra:14,.0f} {extra / extra_today:8.0%}"
        )


if __name__ == "__main__":
    main()
