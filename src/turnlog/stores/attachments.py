"""Attachments: the bytes of large parts, stored once per store apart from the event rows.

A store moves the inline bytes of every image, file and audio part at or above
`AttachmentLimits.threshold` out of the event before it writes it: the event keeps a reference,
`"sha256:<hex>"` of the bytes, and the bytes go to the store's attachment table in the same
all-or-nothing write. The same bytes in many events of a session, or in many sessions, are kept
once (per session on Redis: see docs/redis.md). A session may read back only the attachments its
own events name (`read_attachment`); the bytes go when the last session naming them is deleted
or expires.

This module holds what every store shares: the limits, the split of a batch into events and
bytes, and the checks of references and of bytes read back. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from turnlog import media
from turnlog.errors import CorruptData, InvalidInput
from turnlog.events import Message, SessionEvent, trusted_copy
from turnlog.parts import AudioPart, FilePart, ImagePart, Part

__all__ = [
    "DEFAULT_LIMITS",
    "AttachmentLimits",
    "Split",
    "check_read_range",
    "check_ref",
    "check_refs_known",
    "has_media",
    "inline_bytes",
    "ref_of",
    "refs_in",
    "refs_of_messages",
    "split_attachments",
    "verified",
]

_KIB: Final = 1024
_MIB: Final = 1024 * 1024
_HEX: Final = frozenset("0123456789abcdef")
_MEDIA: Final = (ImagePart, FilePart, AudioPart)


@dataclass(frozen=True, slots=True)
class AttachmentLimits:
    """When a part's bytes are stored apart, and how many bytes an append may carry.

    Args:
        threshold: inline bytes of at least this many are stored as an attachment (16 KiB);
            smaller ones stay in the event's body.
        max_part: the most bytes one part may hold (32 MiB).
        max_event: the most bytes the parts of one event may hold together (64 MiB).

    Raises:
        InvalidInput: a limit that is not a positive integer, or `max_part` above `max_event`.
    """

    threshold: int = 16 * _KIB
    max_part: int = 32 * _MIB
    max_event: int = 64 * _MIB

    def __post_init__(self) -> None:
        for name in ("threshold", "max_part", "max_event"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"attachment {name} must be a positive integer, got {value!r}")
        if self.max_part > self.max_event:
            raise InvalidInput(
                f"attachment max_part ({self.max_part}) is above max_event ({self.max_event})"
            )


DEFAULT_LIMITS: Final = AttachmentLimits()


@dataclass(slots=True)
class Split:
    """A batch ready to write: its events with large bytes replaced by references, the bytes
    by reference, and the references its events name without bringing the bytes."""

    events: list[SessionEvent]
    blobs: dict[str, bytes] = field(default_factory=dict)
    """The bytes to store, by reference (each once however many parts hold it)."""
    named: dict[str, int | None] = field(default_factory=dict)
    """References given as such (`ImagePart(ref=...)`), with the size the part gives: the
    session must hold them already (`check_refs_known`)."""

    @property
    def refs(self) -> list[str]:
        """Every reference the batch's events hold, sorted (the order stores lock them in)."""
        return sorted(self.blobs.keys() | self.named.keys())


def ref_of(data: bytes) -> str:
    """The attachment reference of `data`: `"sha256:"` and the hex digest."""
    import hashlib  # here: `import turnlog` does not load it (tests/test_cold_start.py)

    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_ref(ref: object) -> str:
    """Return `ref` if it is an attachment reference, else raise `InvalidInput`."""
    if (
        not isinstance(ref, str)
        or len(ref) != 71
        or not ref.startswith("sha256:")
        or not _HEX.issuperset(ref[7:])
    ):
        raise InvalidInput(
            f"{ref!r} is not an attachment reference: it is 'sha256:' followed by 64 lowercase "
            "hex digits, as a part's ref holds it"
        )
    return ref


def check_read_range(offset: object, length: object) -> tuple[int, int | None]:
    """Raise `InvalidInput` unless `offset` is an integer >= 0 and `length` None or >= 0."""
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 2**62:
        raise InvalidInput(f"offset must be an integer >= 0, got {offset!r}")
    if length is not None and (
        isinstance(length, bool) or not isinstance(length, int) or not 0 <= length < 2**62
    ):
        raise InvalidInput(f"length must be an integer >= 0 or None, got {length!r}")
    return offset, length


def has_media(message: Message | None) -> bool:
    """True when `message` holds an image, file or audio part (or a tool result does)."""
    if message is None:
        return False
    if message.parts and any(isinstance(p, _MEDIA) for p in message.parts):
        return True
    results = message.tool_results
    return any(r.parts and any(isinstance(p, _MEDIA) for p in r.parts) for r in results)


def split_attachments(
    events: Sequence[SessionEvent], limits: AttachmentLimits = DEFAULT_LIMITS
) -> Split:
    """Move the large inline bytes of `events` out of them (see the module docstring).

    Raises:
        InvalidInput: a part or an event holds more bytes than `limits` allow; nothing is
            written.
    """
    split = Split([])
    for event in events:
        message = event.message
        if message is None or not has_media(message):
            split.events.append(event)
            continue
        total = [0]
        parts = _moved(message.parts, event.id, limits, split, total) if message.parts else ()
        results = tuple(
            msgspec.structs.replace(r, parts=_moved(r.parts, event.id, limits, split, total))
            if r.parts
            else r
            for r in message.tool_results
        )
        if total[0] > limits.max_event:
            raise InvalidInput(
                f"the parts of event {event.id!r} hold {total[0]:,} bytes, over the limit of "
                f"{limits.max_event:,} per event: send some by URL, split the message, or "
                "raise AttachmentLimits.max_event"
            )
        new_message = msgspec.structs.replace(message, parts=parts, tool_results=results)
        split.events.append(trusted_copy(event, message=new_message))
    return split


def _moved(
    parts: tuple[Part, ...],
    event_id: str,
    limits: AttachmentLimits,
    split: Split,
    total: list[int],
) -> tuple[Part, ...]:
    """`parts` with large inline bytes replaced by references (the bytes go to `split`);
    adds the inline bytes to `total[0]`."""
    out: list[Part] = []
    for part in parts:
        if not isinstance(part, _MEDIA) or part.data is None:
            if isinstance(part, _MEDIA) and part.ref is not None:
                split.named.setdefault(part.ref, part.size)
            out.append(part)
            continue
        data = part.data
        if len(data) > limits.max_part:
            raise InvalidInput(
                f"a {type(part).__name__} of event {event_id!r} holds {len(data):,} bytes, over "
                f"the limit of {limits.max_part:,} per part: send it by URL, or raise "
                "AttachmentLimits.max_part"
            )
        total[0] += len(data)
        if len(data) < limits.threshold:
            out.append(part)
            continue
        ref = ref_of(data)
        split.blobs.setdefault(ref, data)
        out.append(
            msgspec.structs.replace(part, data=None, ref=ref, size=len(data), **_facts(part))
        )
    return tuple(out)


def _facts(part: ImagePart | FilePart | AudioPart) -> dict[str, object]:
    """What the bytes of `part` tell that its token count needs once they are stored apart
    (an image's size, a PDF's pages, a WAV's seconds), where the part does not say already."""
    data = part.data
    assert data is not None
    if isinstance(part, ImagePart):
        if part.width is None or part.height is None:
            size = media.image_size(data)
            if size is not None:
                return {"width": size[0], "height": size[1]}
    elif isinstance(part, FilePart):
        if part.pages is None and part.media_type.lower() == "application/pdf":
            pages = media.pdf_pages(data)
            if pages is not None:
                return {"pages": pages}
    elif part.seconds is None:
        seconds = media.wav_seconds(data)
        if seconds is not None:
            return {"seconds": seconds}
    return {}


def check_refs_known(session_id: str, named: dict[str, int | None], held: dict[str, int]) -> None:
    """Refuse references the session does not hold, or given with another size.

    Args:
        named: the references a batch gives as such, with the size its part states.
        held: the session's attachments among them, with their stored sizes (and those the
            batch itself stores).

    Raises:
        InvalidInput: a reference the session holds no attachment for, or a wrong size.
    """
    for ref, size in named.items():
        stored = held.get(ref)
        if stored is None:
            raise InvalidInput(
                f"session {session_id!r} holds no attachment {ref}: a part may name by ref only "
                "bytes its session stored already; give the bytes as data instead"
            )
        if size is not None and size != stored:
            raise InvalidInput(
                f"a part names attachment {ref} with size {size}, but it holds {stored} bytes"
            )


def verified(ref: str, data: bytes, size: int | None = None) -> bytes:
    """`data`, read back as attachment `ref` (stored with `size` bytes, when known).

    Raises:
        CorruptData: `data` is not the bytes of `ref` (truncated or altered).
    """
    if size is not None and len(data) != size:
        raise CorruptData(
            f"attachment {ref} is damaged: {len(data):,} bytes were read back, {size:,} were stored"
        )
    if ref_of(data) != ref:
        raise CorruptData(
            f"attachment {ref} is damaged: the bytes read back have another sha256 "
            f"({ref_of(data)[:19]}...)"
        )
    return data


def refs_in(events: Iterable[SessionEvent]) -> set[str]:
    """The attachment references `events` hold."""
    return refs_of_messages(e.message for e in events if e.message is not None)


def refs_of_messages(messages: Iterable[Message]) -> set[str]:
    """The attachment references `messages` hold."""
    found: set[str] = set()
    for message in messages:
        if not has_media(message):
            continue
        for parts in (message.parts, *(r.parts for r in message.tool_results)):
            found.update(p.ref for p in parts if isinstance(p, _MEDIA) and p.ref is not None)
    return found


def inline_bytes(message: Message, blobs: dict[str, bytes]) -> Message:
    """`message` with the bytes of `blobs` back in the parts that name them by ref."""
    if not has_media(message):
        return message

    def back(parts: tuple[Part, ...]) -> tuple[Part, ...]:
        return tuple(
            msgspec.structs.replace(p, data=blobs[p.ref], ref=None)
            if isinstance(p, _MEDIA) and p.ref is not None and p.ref in blobs
            else p
            for p in parts
        )

    results = tuple(
        msgspec.structs.replace(r, parts=back(r.parts)) if r.parts else r
        for r in message.tool_results
    )
    return msgspec.structs.replace(message, parts=back(message.parts), tool_results=results)
