"""The attachment cases of the store contract: the large bytes of parts are stored once, apart
from the event rows, in the same all-or-nothing write, and go with the last session naming them.

Two hooks let a store's test module show what its storage holds; both must be implemented (the
contract skips nothing):

- `count_attachments(store)`: how many attachment byte strings the store keeps;
- `damage_attachment(store, ref)`: change the stored bytes of `ref` (a disk that flipped a bit),
  so that the checks of bytes read back can be seen to work.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest

from turnlog.errors import (
    AttachmentNotFound,
    CorruptData,
    InvalidInput,
    SessionNotFound,
    VersionConflict,
)
from turnlog.events import Message, SessionEvent, ToolCall, ToolResult
from turnlog.parts import AudioPart, FilePart, ImagePart, ProviderPart, ReasoningPart, TextPart
from turnlog.service import SessionService
from turnlog.stores.attachments import DEFAULT_LIMITS
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import T0, ContractBase, msg, session_at

__all__ = ["AttachmentContract", "blob"]

_BIG = DEFAULT_LIMITS.threshold  # the smallest size stored apart


def blob(seed: str, size: int = _BIG + 1000) -> bytes:
    """`size` bytes that differ for each `seed` (not compressible, like an image)."""
    out = bytearray()
    block = seed.encode()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


def _ref(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _image_message(data: bytes, text: str = "look at this") -> Message:
    return Message.user(text, ImagePart("image/png", data=data))


def _only_image(event: SessionEvent) -> ImagePart:
    assert event.message is not None
    images = [p for p in event.message.parts if isinstance(p, ImagePart)]
    assert len(images) == 1
    return images[0]


class AttachmentContract(ContractBase):
    """Attachments: stored once, apart, atomically; read only by their sessions."""

    attachments_shared_across_sessions = True
    """False for a store that keeps the bytes once per session rather than once per store
    (Redis, whose write of one session's keys cannot reach another cluster slot atomically)."""

    def count_attachments(self, store: SessionStore) -> int:
        """How many attachment byte strings `store` keeps."""
        raise NotImplementedError

    def damage_attachment(self, store: SessionStore, ref: str) -> None:
        """Change the stored bytes of attachment `ref` (flip one byte)."""
        raise NotImplementedError

    def test_large_bytes_are_stored_apart_and_read_back(
        self, store: SessionStore, sid: str
    ) -> None:
        data = blob("a")
        store.append_events(sid, [msg(sid, _image_message(data))], 0)
        for read in (store.events(sid), store.view(sid), store.events_after(sid, 0, 10)):
            part = _only_image(read[0])
            assert part.data is None and part.ref == _ref(data) and part.size == len(data)
            assert read[0].message is not None and read[0].message.text == "look at this"
        assert store.read_attachment(sid, _ref(data)) == data
        assert self.count_attachments(store) == 1

    def test_small_bytes_stay_in_the_event(self, store: SessionStore, sid: str) -> None:
        data = blob("small", _BIG - 1)
        event = msg(sid, _image_message(data))
        store.append_events(sid, [event], 0)
        assert store.events(sid)[0].message == event.message
        assert self.count_attachments(store) == 0

    def test_every_kind_of_part_reads_back_equal(self, store: SessionStore, sid: str) -> None:
        user = Message.user(
            "see",
            ImagePart("image/gif", data=b"GIF89a", detail="low", width=1, height=1),
            ImagePart("image/png", url="https://example.com/a.png", filename="a.png"),
            FilePart("application/pdf", data=b"%PDF-1.7", name="r.pdf", pages=1),
            AudioPart("audio/wav", data=b"RIFF", seconds=0.5),
            TextPart(" and this"),
        )
        reply = Message.assistant(
            parts=[
                ReasoningPart("anthropic", text="thinking", signature="sig=="),
                ReasoningPart("anthropic", redacted=True, encrypted="opaque"),
                ProviderPart("anthropic", "citation", {"cited": [1, "x"]}),
                "done",
            ]
        )
        events = [msg(sid, user), msg(sid, reply)]
        store.append_events(sid, events, 0)
        assert [e.message for e in store.events(sid)] == [user, reply]
        assert [e.message for e in store.view(sid)] == [user, reply]

    def test_a_tool_results_bytes_are_stored_apart(self, store: SessionStore, sid: str) -> None:
        data = blob("shot")
        call = ToolCall("c1", "screenshot", "{}")
        result = ToolResult("c1", "screenshot", "", parts=(ImagePart("image/png", data=data),))
        store.append_events(
            sid,
            [
                msg(sid, Message.user("take one")),
                msg(sid, Message.assistant(tool_calls=[call])),
                msg(sid, Message.tool([result])),
            ],
            0,
        )
        tool = store.events(sid)[2].message
        assert tool is not None
        (part,) = tool.tool_results[0].parts
        assert isinstance(part, ImagePart) and part.ref == _ref(data) and part.data is None
        assert store.read_attachment(sid, _ref(data)) == data

    def test_the_same_bytes_are_stored_once(self, store: SessionStore, sid: str) -> None:
        data = blob("same")
        store.append_events(
            sid,
            [msg(sid, _image_message(data, "one")), msg(sid, Message.assistant("ok"))],
            0,
        )
        store.append_events(sid, [msg(sid, _image_message(data, "two"))], 2)
        store.create_session(session_at("other"))
        store.append_events("other", [msg("other", _image_message(data))], 0)
        assert self.count_attachments(store) == (
            1 if self.attachments_shared_across_sessions else 2
        )
        assert store.read_attachment("other", _ref(data)) == data

    def test_bytes_go_with_the_last_session_naming_them(self, store: SessionStore) -> None:
        shared, own = blob("shared"), blob("own")
        for sid in ("a", "b"):
            store.create_session(session_at(sid))
        store.append_events("a", [msg("a", Message.user("x", *_images(shared, own)))], 0)
        store.append_events("a", [msg("a", Message.assistant("ok"))], 1)
        store.append_events("a", [msg("a", _image_message(shared))], 2)  # again, apart
        store.append_events("b", [msg("b", _image_message(shared))], 0)
        assert self.count_attachments(store) == (
            2 if self.attachments_shared_across_sessions else 3
        )
        assert store.delete_session("a")
        assert self.count_attachments(store) == 1
        assert store.read_attachment("b", _ref(shared)) == shared
        assert store.delete_session("b")
        assert self.count_attachments(store) == 0

    def test_bytes_named_again_after_their_session_was_made_again_are_stored_again(
        self, store: SessionStore, sid: str
    ) -> None:
        # A store may remember which bytes a session holds and not send them again: a
        # session deleted and made again holds none of them, whoever remembers what.
        data = blob("back", 3 * 65_536 + 17)
        store.append_events(sid, [msg(sid, _image_message(data))], 0)
        assert store.delete_session(sid)
        store.create_session(session_at(sid))
        store.append_events(sid, [msg(sid, _image_message(data, "again"))], 0)
        assert store.read_attachment(sid, _ref(data)) == data
        assert self.count_attachments(store) == 1

    def test_ranges_across_the_stores_chunks(self, store: SessionStore, sid: str) -> None:
        # Stores keep large bytes in chunks (8,120 bytes on PostgreSQL, 65,472 on Redis):
        # a range is cut right wherever it starts and ends.
        data = blob("chunks", 3 * 65_536 + 17)
        store.append_events(sid, [msg(sid, _image_message(data))], 0)
        for offset in (0, 1, 8_119, 8_120, 16_241, 65_471, 65_472, 130_944, len(data) - 1):
            for length in (1, 8_120, 8_121, 65_473, 200_000, None):
                end = None if length is None else offset + length
                got = store.read_attachment(sid, _ref(data), offset, length)
                assert got == data[offset:end], (offset, length)
        assert store.read_attachment(sid, _ref(data), len(data), 10) == b""
        assert store.read_attachment(sid, _ref(data), 8_120, 0) == b""

    def test_expired_sessions_take_their_bytes(self, store: SessionStore) -> None:
        store.create_session(session_at("old", expires_at=T0 + timedelta(hours=1)))
        store.create_session(session_at("new", expires_at=T0 + timedelta(days=9)))
        store.append_events("old", [msg("old", _image_message(blob("old")))], 0)
        store.append_events("new", [msg("new", _image_message(blob("new")))], 0)
        assert store.delete_expired(T0 + timedelta(days=1)) == 1
        assert self.count_attachments(store) == 1
        assert store.read_attachment("new", _ref(blob("new"))) == blob("new")

    def test_a_session_reads_only_its_own_attachments(self, store: SessionStore, sid: str) -> None:
        data = blob("private")
        store.append_events(sid, [msg(sid, _image_message(data))], 0)
        store.create_session(session_at("stranger"))
        with pytest.raises(AttachmentNotFound) as caught:
            store.read_attachment("stranger", _ref(data))
        assert caught.value.ref == _ref(data) and _ref(data) in str(caught.value)
        with pytest.raises(SessionNotFound):
            store.read_attachment("nobody", _ref(data))
        with pytest.raises(InvalidInput):
            store.read_attachment(sid, "sha256:XYZ")
        with pytest.raises(InvalidInput):
            store.read_attachment(sid, _ref(data), -1)

    def test_a_ref_the_session_does_not_hold_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        data = blob("elsewhere")
        store.create_session(session_at("owner"))
        store.append_events("owner", [msg("owner", _image_message(data))], 0)
        borrowed = Message.user("mine?", ImagePart("image/png", ref=_ref(data)))
        with pytest.raises(InvalidInput, match="holds no attachment"):
            store.append_events(sid, [msg(sid, borrowed)], 0)
        assert store.version(sid) == 0

    def test_a_ref_the_session_holds_may_be_named_again(
        self, store: SessionStore, sid: str
    ) -> None:
        data = blob("again")
        store.append_events(
            sid, [msg(sid, _image_message(data)), msg(sid, Message.assistant("seen"))], 0
        )
        again = Message.user("once more", ImagePart("image/png", ref=_ref(data), size=len(data)))
        store.append_events(sid, [msg(sid, again)], 2)
        assert _only_image(store.events(sid)[2]).ref == _ref(data)
        wrong = Message.user("size?", ImagePart("image/png", ref=_ref(data), size=3))
        with pytest.raises(InvalidInput, match="size"):
            store.append_events(sid, [msg(sid, Message.assistant("a")), msg(sid, wrong)], 3)
        assert store.version(sid) == 3

    def test_a_refused_append_writes_no_bytes(self, store: SessionStore, sid: str) -> None:
        store.append_events(sid, [msg(sid, Message.user("first"))], 0)
        data = blob("conflict")
        with pytest.raises(VersionConflict):
            store.append_events(sid, [msg(sid, _image_message(data))], 0)
        orphan = ToolResult("nobody-called", "shot", "", parts=(ImagePart("image/png", data=data),))
        with pytest.raises(InvalidInput):  # a result without its call breaks a view rule
            store.append_events(sid, [msg(sid, Message.tool([orphan]))], 1)
        assert self.count_attachments(store) == 0
        with pytest.raises(AttachmentNotFound):
            store.read_attachment(sid, _ref(data))

    def test_size_limits_refuse_the_append(self, store: SessionStore, sid: str) -> None:
        too_big = bytes(DEFAULT_LIMITS.max_part + 1)
        with pytest.raises(InvalidInput, match="per part"):
            store.append_events(sid, [msg(sid, _image_message(too_big))], 0)
        half = bytes(DEFAULT_LIMITS.max_part)
        two = Message.user(  # at the limit exactly: allowed
            "two", ImagePart("image/png", data=half), FilePart("application/pdf", data=half)
        )
        three = Message.user("three", *(FilePart("application/pdf", data=half) for _ in range(3)))
        with pytest.raises(InvalidInput, match="per event"):
            store.append_events(sid, [msg(sid, three)], 0)
        assert store.version(sid) == 0 and self.count_attachments(store) == 0
        store.append_events(sid, [msg(sid, two)], 0)
        assert self.count_attachments(store) == 1

    def test_a_retried_append_is_a_no_op(self, store: SessionStore, sid: str) -> None:
        data = blob("retry")
        batch = [msg(sid, _image_message(data)), msg(sid, Message.assistant("ok"))]
        assert store.append_events(sid, batch, 0) == 2
        assert store.append_events(sid, batch, 0) == 2
        one = msg(sid, _image_message(blob("one"), "single"))
        stored = store.append_event(one)
        assert _only_image(stored).ref == _ref(blob("one"))
        assert store.append_event(one).seq == stored.seq
        assert self.count_attachments(store) == 2

    def test_a_range_of_an_attachment(self, store: SessionStore, sid: str) -> None:
        data = blob("range", 100_000)
        store.append_events(sid, [msg(sid, _image_message(data))], 0)
        ref = _ref(data)
        assert store.read_attachment(sid, ref, 10, 20) == data[10:30]
        assert store.read_attachment(sid, ref, 99_990) == data[99_990:]
        assert store.read_attachment(sid, ref, 99_990, 1000) == data[99_990:]
        assert store.read_attachment(sid, ref, 200_000, 10) == b""
        assert store.read_attachment(sid, ref, 0, 0) == b""

    def test_the_service_checks_the_bytes_it_reads(self, store: SessionStore, sid: str) -> None:
        service = SessionService(store)
        data = blob("checked", 300_000)
        store.append_events(sid, [msg(sid, _image_message(data))], 0)
        ref = _ref(data)
        assert service.attachment(sid, ref) == data
        assert b"".join(service.iter_attachment(sid, ref, chunk_size=65_536)) == data
        self.damage_attachment(store, ref)
        with pytest.raises(CorruptData, match=ref):
            service.attachment(sid, ref)
        with pytest.raises(CorruptData, match=ref):
            b"".join(service.iter_attachment(sid, ref, chunk_size=65_536))

    def test_deleting_a_session_races_an_append_of_the_same_bytes(
        self, store: SessionStore, tmp_path: Path
    ) -> None:
        other = self.open_again(store, tmp_path)
        try:
            for round_ in range(12):
                data = blob(f"race{round_}")
                doomed, keeper = f"doomed{round_}", f"keeper{round_}"
                store.create_session(session_at(doomed))
                store.create_session(session_at(keeper))
                store.append_events(doomed, [msg(doomed, _image_message(data))], 0)
                _race(
                    partial(store.delete_session, doomed),
                    partial(other.append_events, keeper, [msg(keeper, _image_message(data))], 0),
                )
                assert store.read_attachment(keeper, _ref(data)) == data
                assert other.read_attachment(keeper, _ref(data)) == data
            assert self.count_attachments(store) == 12
        finally:
            if other is not store:
                other.close()


def _race(*calls: Callable[[], object]) -> None:
    """Run `calls` on threads of their own, released together; re-raise the first error."""
    start = threading.Barrier(len(calls))
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            start.wait()
            call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _images(*blobs: bytes) -> list[ImagePart]:
    return [ImagePart("image/png", data=b) for b in blobs]
