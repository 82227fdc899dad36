"""The store contract's stand-in cases: a boundary's `replaced` map, honoured by `view()`.

A compaction may replace an event of the view (a long tool output) with a synthetic stand-in
appended after the boundary; the boundary names the stand-in where the original was and maps it
to the original. Every store's view must put it there, and keep the original in the log.
"""

from __future__ import annotations

import pytest

from turnlog.compaction import CompactionBoundary, CompactionRequest, ToolOutputCompactionStrategy
from turnlog.errors import InvalidInput
from turnlog.events import Message, SessionEvent, ToolCall, ToolResult
from turnlog.stores.base import EventFilter
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import ContractBase, msg, session_at, turn

__all__ = ["StandInContract"]


def _tool_turn(sid: str, n: int, size: int = 400) -> list[SessionEvent]:
    """A user question, a call, its (long) result and the answer."""
    call = ToolCall(f"c{n}-{sid}", "search", '{"q": "' + "long query " * 40 + '"}')
    return [
        msg(sid, Message.user(f"look {n} up")),
        msg(sid, Message.assistant(None, [call])),
        msg(sid, Message.tool(ToolResult(call.id, "search", f"hit {n} " * size))),
        msg(sid, Message.assistant(f"found {n}")),
    ]


def _stand_in(sid: str, original: SessionEvent) -> SessionEvent:
    assert original.message is not None
    results = [ToolResult(r.call_id, r.name, "[cleared]") for r in original.message.tool_results]
    return SessionEvent.for_message(sid, Message.tool(results), synthetic=True)


class StandInContract(ContractBase):
    """Stand-ins in the view: the boundary's `replaced` map, on every store."""

    def test_a_stand_in_takes_its_originals_place_in_the_view(
        self, store: SessionStore, sid: str
    ) -> None:
        t1, t2 = _tool_turn(sid, 1), _tool_turn(sid, 2)
        store.append_events(sid, [*t1, *t2], 0)
        s1, s2 = _stand_in(sid, t1[2]), _stand_in(sid, t2[2])
        kept = [t1[0], t1[1], s1, t1[3], t2[0], t2[1], s2, t2[3]]
        boundary = CompactionBoundary(
            "b1", (), (), tuple(e.id for e in kept), 2, 100, "t", {s1.id: t1[2].id, s2.id: t2[2].id}
        )
        store.append_events(sid, [boundary.to_event(sid), s1, s2], 8)
        tail = turn(sid, 3)
        store.append_events(sid, tail, 11)
        view = store.view(sid)
        assert [e.id for e in view] == [e.id for e in kept + tail]
        assert view == CompactionBoundary.project(store.events(sid))
        assert view[2].synthetic and view[2].message == s1.message
        everything = [e.id for e in store.events(sid, EventFilter.all())]
        assert t1[2].id in everything and t2[2].id in everything  # the originals stay
        stored = CompactionBoundary.from_event(store.events(sid)[8])
        assert stored.replaced == {s1.id: t1[2].id, s2.id: t2[2].id}

    def test_a_later_boundary_keeps_an_earlier_stand_in(
        self, store: SessionStore, sid: str
    ) -> None:
        t1, t2 = _tool_turn(sid, 1), _tool_turn(sid, 2)
        store.append_events(sid, [*t1, *t2], 0)
        s2 = _stand_in(sid, t2[2])
        kept = [*t1, t2[0], t2[1], s2, t2[3]]
        first = CompactionBoundary(
            "b1", (), (), tuple(e.id for e in kept), 1, 100, "t", {s2.id: t2[2].id}
        )
        store.append_events(sid, [first.to_event(sid), s2], 8)
        second = CompactionBoundary("b2", (), (), tuple(e.id for e in kept[4:]), 4, 10, "t")
        store.append_events(sid, [second.to_event(sid)], 10)
        assert [e.id for e in store.view(sid)] == [e.id for e in kept[4:]]

    def test_a_boundary_replacing_an_unknown_event_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        t1 = _tool_turn(sid, 1)
        store.append_events(sid, t1, 0)
        s1 = _stand_in(sid, t1[2])
        kept = (t1[0].id, t1[1].id, s1.id, t1[3].id)
        boundary = CompactionBoundary("b1", (), (), kept, 1, 1, "t", {s1.id: "nope"})
        with pytest.raises(InvalidInput):
            store.append_events(sid, [boundary.to_event(sid), s1], 4)
        assert store.version(sid) == 4

    def test_a_stand_in_the_boundary_does_not_replace_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        t1 = _tool_turn(sid, 1)
        store.append_events(sid, t1, 0)
        s1 = _stand_in(sid, t1[2])
        kept = (t1[0].id, t1[1].id, s1.id, t1[3].id)
        boundary = CompactionBoundary("b1", (), (), kept, 1, 1, "t")  # no `replaced`
        with pytest.raises(InvalidInput):
            store.append_events(sid, [boundary.to_event(sid), s1], 4)
        assert store.version(sid) == 4

    def test_a_tool_output_pass_reads_back_as_it_was_decided(
        self, store: SessionStore, sid: str
    ) -> None:
        events = [e for n in range(1, 5) for e in _tool_turn(sid, n)]
        store.append_events(sid, events, 0)
        session = store.find_session(sid) or session_at(sid)
        strategy = ToolOutputCompactionStrategy(keep_last=1, clear_arguments=True, min_tokens=1)
        result = strategy.compact(CompactionRequest.of(session, store.view(sid)))
        assert len(result.stand_in_events) == 3 + 3  # three results, three calls
        store.append_events(sid, result.events_to_append(sid), len(events))
        view = store.view(sid)
        assert [(e.id, e.message) for e in view] == [(e.id, e.message) for e in result.view]
        # the conversation goes on after the stand-ins, and a second pass clears the rest
        more = _tool_turn(sid, 5)
        store.append_events(sid, more, store.version(sid))
        again = strategy.compact(CompactionRequest.of(session, store.view(sid)))
        assert len(again.stand_in_events) == 2  # turn 4's result and call
        store.append_events(sid, again.events_to_append(sid), store.version(sid))
        assert [e.id for e in store.view(sid)] == [e.id for e in again.view]
