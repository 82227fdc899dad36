"""The history cases of the store contract: `search_history`, `search_sessions` and
`events_by_id` find what the log keeps, in one session only, and nothing of a deleted one."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from turnlog.errors import InvalidInput, SessionNotFound, VersionConflict
from turnlog.events import Message, SessionEvent, ToolCall, ToolResult
from turnlog.history import SAID_AT, HistoryHit, history_query
from turnlog.payloads import CompactionBoundary
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import T0, ContractBase, msg, session_at, turn

__all__ = ["HistoryContract"]


def _ids(hits: list[HistoryHit]) -> list[str]:
    return [h.event_id for h in hits]


class HistoryContract(ContractBase):
    """Recall: a search of the log by words."""

    def test_a_search_finds_an_event_the_view_no_longer_holds(
        self, store: SessionStore, sid: str
    ) -> None:
        fact = msg(sid, Message.user("my dentist appointment moved to March 3"))
        reply = msg(sid, Message.assistant("Noted, the dentist on March 3."))
        later = turn(sid, 2)
        store.append_events(sid, [fact, reply, *later], 0)
        boundary = CompactionBoundary("b", (), (), tuple(e.id for e in later), 2, 10, "t")
        store.append_events(sid, [boundary.to_event(sid)], 4)
        assert fact.id not in [e.id for e in store.view(sid)]
        hits = store.search_history(sid, history_query("when is the dentist?"))
        assert set(_ids(hits)) == {fact.id, reply.id}
        best = hits[0]
        assert best.session_id == sid and best.role in ("user", "assistant")
        assert best.seq in (1, 2) and "dentist" in best.snippet.lower()
        assert best.said_at == best.timestamp and best.timestamp.tzinfo is not None
        assert all(a.score >= b.score for a, b in itertools.pairwise(hits))

    def test_k_bounds_the_hits_and_appends_are_found_at_once(
        self, store: SessionStore, sid: str
    ) -> None:
        events = [msg(sid, Message.user(f"invoice number {n} for the plumber")) for n in range(8)]
        events = [
            e for pair in ((e, msg(sid, Message.assistant("ok"))) for e in events) for e in pair
        ]
        store.append_events(sid, events[:8], 0)
        assert len(store.search_history(sid, history_query("plumber invoice", k=3))) == 3
        assert len(store.search_history(sid, history_query("plumber invoice", k=10))) == 4
        store.append_events(sid, events[8:], 8)
        hits = store.search_history(sid, history_query("plumber invoice", k=10))
        assert len(hits) == 8
        numbered = store.search_history(sid, history_query("invoice 6"))
        assert numbered[0].event_id == events[12].id

    def test_synthetic_events_are_not_searched(self, store: SessionStore, sid: str) -> None:
        t1, t2 = turn(sid, 1), turn(sid, 2)
        store.append_events(sid, [*t1, *t2], 0)
        summary = SessionEvent.for_message(
            sid, Message.user("summary: the kangaroo question was answered"), synthetic=True
        )
        boundary = CompactionBoundary("b", (), (summary.id,), tuple(e.id for e in t2), 2, 1, "t")
        store.append_events(sid, [boundary.to_event(sid), summary], 4)
        assert summary.id in [e.id for e in store.view(sid)]
        assert store.search_history(sid, history_query("kangaroo")) == []
        assert next(h.seq for h in store.search_history(sid, history_query("question 1"))) == 1

    def test_tool_calls_and_results_are_found_and_recall_results_are_not(
        self, store: SessionStore, sid: str
    ) -> None:
        call = ToolCall("c1", "lookup_order", '{"order": "A-7731"}')
        recall = ToolCall("c2", "search_history", '{"query": "zeppelin"}')
        events = [
            msg(sid, Message.user("where is my parcel?")),
            msg(sid, Message.assistant(tool_calls=[call, recall])),
            msg(
                sid,
                Message.tool(
                    [
                        ToolResult("c1", "lookup_order", "shipped by courier, tracking ZX-42"),
                        ToolResult("c2", "search_history", "zeppelin hangar was mentioned"),
                    ]
                ),
            ),
            msg(sid, Message.assistant("It shipped.")),
        ]
        store.append_events(sid, events, 0)
        assert _ids(store.search_history(sid, history_query("tracking courier"))) == [events[2].id]
        assert _ids(store.search_history(sid, history_query("A-7731"))) == [events[1].id]
        assert _ids(store.search_history(sid, history_query("hangar"))) == []
        by_tool = store.search_history(sid, history_query("parcel shipped", tools=["lookup_order"]))
        assert set(_ids(by_tool)) <= {events[1].id, events[2].id} and by_tool

    def test_filters_apply_before_the_cut(self, store: SessionStore, sid: str) -> None:
        events: list[SessionEvent] = []
        for n in range(6):
            said = (T0 + timedelta(days=n)).isoformat()
            events.append(msg(sid, Message("user", f"garden note {n}", metadata={SAID_AT: said})))
            events.append(msg(sid, Message.assistant(f"garden note {n} kept")))
        store.append_events(sid, events, 0)
        users = store.search_history(sid, history_query("garden note", k=3, roles=["user"]))
        assert len(users) == 3 and {h.role for h in users} == {"user"}
        early = store.search_history(
            sid, history_query("garden", k=10, roles=["user"], before=T0 + timedelta(days=2))
        )
        assert sorted(h.said_at for h in early) == [T0, T0 + timedelta(days=1)]
        late = store.search_history(
            sid, history_query("garden", k=10, roles=["user"], after=T0 + timedelta(days=4))
        )
        assert [h.said_at for h in late] == [T0 + timedelta(days=5)]

    def test_a_search_never_returns_another_sessions_events(
        self, store: SessionStore, sid: str
    ) -> None:
        store.create_session(session_at("s2", metadata={"owner": "bob"}))
        store.append_events(sid, [msg(sid, Message.user("the walrus is mine"))], 0)
        theirs = msg("s2", Message.user("the walrus is theirs"))
        store.append_events("s2", [theirs], 0)
        mine = store.search_history(sid, history_query("walrus", k=10))
        assert len(mine) == 1 and mine[0].session_id == sid
        assert store.events_by_id(sid, [theirs.id]) == []
        both = store.search_sessions(history_query("walrus", k=10))
        assert {h.session_id for h in both} == {sid, "s2"}
        owned = store.search_sessions(history_query("walrus", k=10), metadata={"owner": "bob"})
        assert _ids(owned) == [theirs.id]
        some = store.search_sessions(history_query("walrus"), sessions=[sid, "nope"])
        assert [h.session_id for h in some] == [sid]

    def test_a_deleted_session_is_never_found_again(self, store: SessionStore, sid: str) -> None:
        old = msg(sid, Message.user("the lighthouse keeper retired"))
        store.append_events(sid, [old], 0)
        assert _ids(store.search_history(sid, history_query("lighthouse"))) == [old.id]
        assert store.delete_session(sid)
        with pytest.raises(SessionNotFound):
            store.search_history(sid, history_query("lighthouse"))
        assert store.search_sessions(history_query("lighthouse")) == []
        store.create_session(session_at(sid))
        new = msg(sid, Message.user("a new lighthouse opened"))
        store.append_events(sid, [new], 0)
        assert _ids(store.search_history(sid, history_query("lighthouse", k=10))) == [new.id]

    def test_an_expired_session_is_never_found_again(self, store: SessionStore) -> None:
        store.create_session(session_at("gone", expires_at=T0 + timedelta(hours=1)))
        store.append_events("gone", [msg("gone", Message.user("the tortoise escaped"))], 0)
        assert store.search_sessions(history_query("tortoise"))
        assert store.delete_expired(T0 + timedelta(days=1)) == 1
        assert store.search_sessions(history_query("tortoise")) == []

    def test_a_refused_append_is_not_found(self, store: SessionStore, sid: str) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        with pytest.raises(VersionConflict):
            store.append_events(sid, [msg(sid, Message.user("a stale quokka"))], 0)
        with pytest.raises(InvalidInput):  # a result without its call breaks a view rule
            store.append_events(
                sid,
                [msg(sid, Message.tool(ToolResult("nope", "f", "an orphan quokka")))],
                2,
            )
        assert store.search_history(sid, history_query("quokka")) == []

    def test_queries_of_search_syntax_are_plain_words(self, store: SessionStore, sid: str) -> None:
        event = msg(sid, Message.user('he said "near" and AND or NOT: col* -x (y)'))
        store.append_events(sid, [event], 0)
        for query in ("NEAR(a b", '"', "***", "AND OR NOT", "-x", "col:y", "a'b", "(", "^"):
            store.search_history(sid, history_query(query))
        assert _ids(store.search_history(sid, history_query('"near'))) == [event.id]
        assert store.search_history(sid, history_query("?!")) == []

    def test_text_without_spaces_is_found_by_its_words(self, store: SessionStore, sid: str) -> None:
        event = msg(sid, Message.user("明天的天气预报说会下雨"))
        store.append_events(sid, [event, msg(sid, Message.assistant("好的"))], 0)
        assert _ids(store.search_history(sid, history_query("天气预报"))) == [event.id]

    def test_unknown_session(self, store: SessionStore) -> None:
        with pytest.raises(SessionNotFound):
            store.search_history("nope", history_query("anything"))
        with pytest.raises(SessionNotFound):
            store.events_by_id("nope", ["e1"])

    def test_events_by_id_gives_the_stored_events_in_log_order(
        self, store: SessionStore, sid: str
    ) -> None:
        events = turn(sid, 1) + turn(sid, 2)
        store.append_events(sid, events, 0)
        found = store.events_by_id(sid, [events[3].id, events[0].id, events[3].id, "missing"])
        assert [e.id for e in found] == [events[0].id, events[3].id]
        assert [e.message for e in found] == [events[0].message, events[3].message]
        assert [e.seq for e in found] == [1, 4]
        assert store.events_by_id(sid, []) == []
        with pytest.raises(InvalidInput):
            store.events_by_id(sid, "e1")
