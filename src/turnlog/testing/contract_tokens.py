"""The store contract's token-count cases: counts stored with message events, read back as
stored, and filled in later for events appended without one (`record_tokens`).

A count is derived data: it never changes what an event says, takes no part in an event's
equality, and filling it in never moves, adds or removes an event.
"""

from __future__ import annotations

import pytest

from turnlog.compaction import CompactionBoundary
from turnlog.errors import InvalidInput, SessionNotFound
from turnlog.events import Message, SessionEvent, TokenCount, ToolCall, ToolResult
from turnlog.stores.base import EventFilter
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import AUDIT, ContractBase, msg, session_at, turn

__all__ = ["TokenCountContract"]

COUNTER = "test-counter/1"


def _counted(events: list[SessionEvent], base: int = 10) -> list[SessionEvent]:
    return [e.with_tokens(TokenCount(COUNTER, base + i)) for i, e in enumerate(events)]


def _tool_turn(sid: str) -> list[SessionEvent]:
    call = ToolCall(f"call-{sid}", "weather", '{"city": "Oslo"}')
    return [
        msg(sid, Message.user("weather in Oslo?")),
        msg(sid, Message.assistant(None, [call])),
        msg(sid, Message.tool(ToolResult(call.id, "weather", "3 C"))),
        msg(sid, Message.assistant("3 C in Oslo.")),
    ]


def _counts(events: list[SessionEvent]) -> list[tuple[str, int] | None]:
    return [None if e.tokens is None else (e.tokens.counter, e.tokens.count) for e in events]


class TokenCountContract(ContractBase):
    """Token counts stored with events, and filled in later, on every store."""

    def test_a_count_is_stored_with_its_event_and_read_back(
        self, store: SessionStore, sid: str
    ) -> None:
        events = _counted(_tool_turn(sid))
        store.append_events(sid, events, 0)
        expected = [(COUNTER, 10 + i) for i in range(4)]
        assert _counts(store.events(sid)) == expected
        assert _counts(store.view(sid)) == expected
        assert _counts(store.events_after(sid, 1, 10)) == expected[1:]
        assert _counts(store.events(sid, EventFilter(roles=["tool"]))) == [expected[2]]

    def test_a_single_append_returns_and_keeps_its_count(
        self, store: SessionStore, sid: str
    ) -> None:
        (event,) = _counted([msg(sid, Message.user("hi"))], base=7)
        stored = store.append_event(event)
        assert stored.tokens == TokenCount(COUNTER, 7)
        assert store.events(sid)[0].tokens == TokenCount(COUNTER, 7)

    def test_events_without_a_count_read_back_without_one(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        store.append_event(SessionEvent.for_payload(sid, AUDIT, {"who": "ann"}))
        assert _counts(store.events(sid)) == [None, None, None]

    def test_a_count_takes_no_part_in_equality(self, store: SessionStore, sid: str) -> None:
        store.append_events(sid, _counted(turn(sid, 1)), 0)
        stored = store.events(sid)
        assert all(e.tokens is not None for e in stored)
        uncounted = [e.with_tokens(None) for e in stored]
        assert stored == uncounted

    def test_record_tokens_fills_in_counts_and_changes_nothing_else(
        self, store: SessionStore, sid: str
    ) -> None:
        events = _tool_turn(sid)
        store.append_events(sid, events, 0)
        before = store.events(sid)
        counts = {e.id: TokenCount(COUNTER, 100 + i) for i, e in enumerate(events)}
        assert store.record_tokens(sid, counts) == 4
        after = store.events(sid)
        assert after == before
        assert [(e.id, e.seq, e.timestamp) for e in after] == [
            (e.id, e.seq, e.timestamp) for e in before
        ]
        assert _counts(after) == [(COUNTER, 100 + i) for i in range(4)]
        assert _counts(store.view(sid)) == [(COUNTER, 100 + i) for i in range(4)]
        assert store.version(sid) == 4

    def test_record_tokens_replaces_a_count_of_another_counter(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, _counted(turn(sid, 1)), 0)
        first = store.events(sid)[0]
        assert store.record_tokens(sid, {first.id: TokenCount("other/2", 3)}) == 1
        assert _counts(store.events(sid)) == [("other/2", 3), (COUNTER, 11)]

    def test_record_tokens_skips_unknown_ids_and_non_messages(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        audit = store.append_event(SessionEvent.for_payload(sid, AUDIT, {"who": "ann"}))
        store.create_session(session_at("other"))
        theirs = store.append_event(msg("other", Message.user("theirs")))
        written = store.record_tokens(
            sid,
            {
                "no-such-event": TokenCount(COUNTER, 1),
                audit.id: TokenCount(COUNTER, 2),
                theirs.id: TokenCount(COUNTER, 3),  # an event of another session
            },
        )
        assert written == 0
        assert _counts(store.events(sid)) == [None, None, None]
        assert _counts(store.events("other")) == [None]

    def test_record_tokens_keeps_a_compacted_view(self, store: SessionStore, sid: str) -> None:
        first, second = turn(sid, 1), turn(sid, 2)
        store.append_events(sid, [*first, *second], 0)
        boundary = CompactionBoundary(
            id="b1",
            pinned_event_ids=(),
            summary_event_ids=(),
            preserved_event_ids=tuple(e.id for e in second),
            covered_event_count=2,
            tokens_estimated_saved=0,
            strategy="test",
        )
        store.append_events(sid, [boundary.to_event(sid)], 4)
        counts = {e.id: TokenCount(COUNTER, 5) for e in [*first, *second]}
        counts["b1"] = TokenCount(COUNTER, 9)  # a boundary carries no count: skipped
        assert store.record_tokens(sid, counts) == 4
        assert [e.id for e in store.view(sid)] == [e.id for e in second]
        assert _counts(store.view(sid)) == [(COUNTER, 5), (COUNTER, 5)]
        assert store.version(sid) == 5

    def test_record_tokens_on_an_unknown_session_raises(self, store: SessionStore) -> None:
        with pytest.raises(SessionNotFound):
            store.record_tokens("nope", {"e": TokenCount(COUNTER, 1)})

    def test_record_tokens_refuses_what_is_not_a_count(self, store: SessionStore, sid: str) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        first = store.events(sid)[0]
        with pytest.raises(InvalidInput):
            store.record_tokens(sid, {first.id: 12})  # type: ignore[dict-item]
        assert store.events(sid)[0].tokens is None
