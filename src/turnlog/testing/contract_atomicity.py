"""Every append is all or nothing, whatever the batch or boundary size.

The sizes are past the limits a store meets inside one server command (Redis Lua scripts cannot
`unpack` about 8,000 values at once; SQL drivers cap parameters per statement): a 20,000-event
batch, a boundary naming 20,000 events, and huge batches that are refused and must leave nothing
behind, so that a retry is not mistaken for a batch stored already.
"""

from __future__ import annotations

import functools

import pytest

from turnlog.compaction import CompactionBoundary
from turnlog.errors import InvalidInput, VersionConflict
from turnlog.events import Message, SessionEvent
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import ContractBase, msg, session_at

__all__ = ["AtomicityContract"]

BIG = 20_000
"""Events in a huge batch, ids a huge boundary names."""


def conversation(session_id: str, n: int, tag: str = "m") -> list[SessionEvent]:
    """`n` messages, a user question then its answer, turn after turn."""
    return list(_conversation(session_id, n, tag))


@functools.cache
def _conversation(session_id: str, n: int, tag: str) -> tuple[SessionEvent, ...]:
    # built once per process: 20,000 events take a while, and they are immutable
    return tuple(
        msg(
            session_id,
            Message.user(f"q{i}") if i % 2 == 0 else Message.assistant(f"a{i}"),
            event_id=f"{tag}{i}",
        )
        for i in range(n)
    )


def summary(session_id: str) -> list[SessionEvent]:
    """A synthetic summary pair, as a summarizing compaction appends after its boundary."""
    return [
        SessionEvent.for_message(
            session_id, Message.user("summarize"), event_id="sum-q", synthetic=True
        ),
        SessionEvent.for_message(
            session_id, Message.assistant("the summary"), event_id="sum-a", synthetic=True
        ),
    ]


def boundary(
    session_id: str, preserved: list[SessionEvent], *, summarized: bool = False, extra: str = ""
) -> SessionEvent:
    """A boundary keeping `preserved` (after a summary pair when `summarized`); `extra` names one
    more id after them (an unknown one, for the refusals)."""
    kept = tuple(e.id for e in preserved) + ((extra,) if extra else ())
    summary_ids = ("sum-q", "sum-a") if summarized else ()
    return CompactionBoundary("bnd", (), summary_ids, kept, 0, 0, "test").to_event(session_id)


def shape(events: list[SessionEvent]) -> list[tuple[str, int | None, Message | None, bool]]:
    """What must read back exactly: id, seq, message, synthetic."""
    return [(e.id, e.seq, e.message, e.synthetic) for e in events]


def numbered(events: list[SessionEvent], first: int = 1) -> list[tuple[str, int, object, bool]]:
    """`shape` of `events` as appended from seq `first` on."""
    return [(e.id, seq, e.message, e.synthetic) for seq, e in enumerate(events, start=first)]


class AtomicityContract(ContractBase):
    """Part of `StoreContract`; see the module docstring."""

    def test_a_20000_event_batch_reads_back_exactly(self, store: SessionStore, sid: str) -> None:
        log = conversation(sid, BIG)
        assert store.append_events(sid, log, 0) == BIG
        assert store.version(sid) == BIG
        assert shape(store.events(sid)) == numbered(log)
        assert shape(store.view(sid)) == numbered(log)
        # deleting it frees all 20,000 ids (ids are unique across a store's sessions)
        assert store.delete_session(sid)
        assert store.find_session(sid) is None
        store.create_session(session_at("other"))
        reused = [msg("other", Message.user("again"), event_id=e.id) for e in (log[0], log[-1])]
        assert store.append_events("other", reused, 0) == 2

    def test_a_boundary_naming_20000_logged_events_reads_back_exactly(
        self, store: SessionStore, sid: str
    ) -> None:
        log = conversation(sid, BIG)
        store.append_events(sid, log, 0)
        compaction = [boundary(sid, log, summarized=True), *summary(sid)]
        assert store.append_events(sid, compaction, BIG) == BIG + 3
        assert store.version(sid) == BIG + 3
        events = store.events(sid)
        assert shape(events) == numbered(log + compaction)
        view = store.view(sid)
        assert shape(view) == numbered(compaction[1:], BIG + 2) + numbered(log)
        assert view == CompactionBoundary.project(events)

    def test_a_boundary_naming_20000_events_of_its_own_batch_reads_back_exactly(
        self, store: SessionStore, sid: str
    ) -> None:
        log = conversation(sid, BIG)
        batch = [*log, boundary(sid, log)]
        assert store.append_events(sid, batch, 0) == BIG + 1
        assert store.version(sid) == BIG + 1
        assert shape(store.events(sid)) == numbered(batch)
        assert shape(store.view(sid)) == numbered(log)

    def test_a_refused_huge_boundary_leaves_nothing_behind(
        self, store: SessionStore, sid: str
    ) -> None:
        log = conversation(sid, BIG)
        store.append_events(sid, log, 0)
        refused = [boundary(sid, log, summarized=True, extra="nope"), *summary(sid)]
        with pytest.raises(InvalidInput, match="nope"):
            store.append_events(sid, refused, BIG)
        assert store.version(sid) == BIG
        assert shape(store.events(sid)) == numbered(log)
        assert shape(store.view(sid)) == numbered(log)
        # nothing of the refused batch counts as stored: the good one appends in full
        compaction = [boundary(sid, log, summarized=True), *summary(sid)]
        assert store.append_events(sid, compaction, BIG) == BIG + 3
        assert [e.id for e in store.view(sid)][:3] == ["sum-q", "sum-a", "m0"]

    def test_a_refused_huge_batch_leaves_nothing_behind(
        self, store: SessionStore, sid: str
    ) -> None:
        log = conversation(sid, BIG)
        with pytest.raises(InvalidInput, match="nope"):
            store.append_events(sid, [*log, boundary(sid, log, extra="nope")], 0)
        with pytest.raises(VersionConflict):
            store.append_events(sid, [*log, boundary(sid, log)], 1)
        assert store.version(sid) == 0
        assert store.events(sid) == []
        assert store.view(sid) == []
        batch = [*log, boundary(sid, log)]
        assert store.append_events(sid, batch, 0) == BIG + 1
        assert shape(store.events(sid)) == numbered(batch)
