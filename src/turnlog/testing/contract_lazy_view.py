"""The store contract's lazy-view cases: `view_lazy` is `view`, with each event decoded when
first read, and its outline (ids, roles, synthetic flags, stored counts) agrees with the events.

A compaction pass reads the view this way, so what these cases prove is what a pass plans on.
"""

from __future__ import annotations

import pytest

from turnlog.compaction import CompactionBoundary
from turnlog.errors import SessionNotFound
from turnlog.events import Message, SessionEvent, TokenCount, ToolCall, ToolResult
from turnlog.lazy import LazyEvents
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import AUDIT, ContractBase, msg, turn

__all__ = ["LazyViewContract"]


def _outline_agrees(lazy: LazyEvents, events: list[SessionEvent]) -> None:
    """The outline of `lazy` is what `events` say, field by field."""
    assert lazy.ids == tuple(e.id for e in events)
    assert lazy.roles == tuple(None if e.message is None else e.message.role for e in events)
    assert lazy.synthetic == tuple(e.synthetic for e in events)
    assert lazy.tokens == tuple(e.tokens for e in events)


def _mixed_log(sid: str) -> list[SessionEvent]:
    call = ToolCall(f"call-{sid}", "weather", '{"city": "Oslo"}')
    counted = msg(sid, Message.user("weather in Oslo?")).with_tokens(TokenCount("c/1", 5))
    return [
        msg(sid, Message.system("be brief")),
        counted,
        msg(sid, Message.assistant(None, [call])),
        SessionEvent.for_payload(sid, AUDIT, {"x": 1}),
        msg(sid, Message.tool(ToolResult(call.id, "weather", "3 C", is_error=True))),
        msg(sid, Message.assistant("3 C in Oslo.")).with_tokens(TokenCount("other/2", 0)),
        *turn(sid, 2),
    ]


class LazyViewContract(ContractBase):
    """`view_lazy` on every store."""

    def test_a_lazy_view_is_the_view(self, store: SessionStore, sid: str) -> None:
        log = _mixed_log(sid)
        store.append_events(sid, log, 0)
        view = store.view(sid)
        lazy = store.view_lazy(sid)
        assert isinstance(lazy, LazyEvents)
        assert [e.id for e in lazy] == [e.id for e in log if e.is_message]  # not the custom one
        _outline_agrees(lazy, view)
        assert lazy == view and list(lazy) == view
        assert [e.tokens for e in lazy] == [e.tokens for e in view]

    def test_a_lazy_view_of_a_transcript_stored_as_is(self, store: SessionStore, sid: str) -> None:
        # a synthetic message with no boundary (an imported transcript): its flag is outlined
        events = [
            *turn(sid, 1),
            SessionEvent.for_message(sid, Message.user("a summary"), synthetic=True),
            msg(sid, Message.tool(ToolResult("orphan", "t", "no call"))),
            *turn(sid, 2),
        ]
        store.append_events(sid, events, 0, check_rules=False)
        lazy = store.view_lazy(sid)
        view = store.view(sid)
        _outline_agrees(lazy, view)
        assert lazy.synthetic == (False, False, True, False, False, False)
        assert lazy == view

    def test_a_lazy_view_decodes_what_is_read(self, store: SessionStore, sid: str) -> None:
        store.append_events(sid, _mixed_log(sid), 0)
        view = store.view(sid)
        lazy = store.view_lazy(sid)
        assert lazy[-1] == view[-1] and lazy[2] == view[2]
        assert lazy[1:3] == view[1:3] and lazy.select([4, 0]) == [view[4], view[0]]
        assert view[4] in lazy and msg(sid, Message.user("never stored")) not in lazy
        assert list(lazy[::-1]) == view[::-1]

    def test_a_lazy_view_follows_the_newest_boundary(self, store: SessionStore, sid: str) -> None:
        system = msg(sid, Message.system("sys"))
        t1, t2, t3 = turn(sid, 1), turn(sid, 2), turn(sid, 3)
        store.append_events(sid, [system, *t1, *t2, *t3], 0)
        summary = SessionEvent.for_message(sid, Message.user("the summary"), synthetic=True)
        boundary = CompactionBoundary(
            "b1", (system.id,), (summary.id,), tuple(e.id for e in t3), 4, 10, "t"
        )
        store.append_events(sid, [boundary.to_event(sid), summary], 7)
        lazy = store.view_lazy(sid)
        view = store.view(sid)
        assert [e.id for e in view] == [system.id, summary.id, *(e.id for e in t3)]
        _outline_agrees(lazy, view)
        assert lazy.synthetic == (False, True, False, False)
        assert lazy == view

    def test_a_lazy_view_of_an_empty_log_is_empty(self, store: SessionStore, sid: str) -> None:
        lazy = store.view_lazy(sid)
        assert len(lazy) == 0 and list(lazy) == [] and lazy == []

    def test_a_lazy_view_of_an_unknown_session_raises(self, store: SessionStore) -> None:
        with pytest.raises(SessionNotFound):
            store.view_lazy("no-such-session")
