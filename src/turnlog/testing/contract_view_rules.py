"""Appends that would break the view rules are refused (see `turnlog.rules`).

Every refusal writes nothing (the version is unchanged), on the version-checked path
(`append_events`) and on `append_event`. `check_rules=False` stores a broken transcript on
purpose, and `SessionService.view_messages` repairs its view.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from turnlog.compaction.boundary import CompactionBoundary
from turnlog.errors import InvalidInput, VersionConflict
from turnlog.events import Message, SessionEvent, ToolCall, ToolResult
from turnlog.rules import PLACEHOLDER_RESULT, REPAIR_KEY
from turnlog.service import SessionService
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import AUDIT, ContractBase, msg, session_at

__all__ = ["ViewRuleContract"]


def _user(sid: str, text: str = "question") -> SessionEvent:
    return msg(sid, Message.user(text))


def _calls(sid: str, *ids: str) -> SessionEvent:
    return msg(sid, Message.assistant(None, [ToolCall(i, "lookup", "{}") for i in ids]))


def _results(sid: str, *ids: str) -> SessionEvent:
    return msg(sid, Message.tool([ToolResult(i, "lookup", f"result {i}") for i in ids]))


def _reply(sid: str, text: str = "answer") -> SessionEvent:
    return msg(sid, Message.assistant(text))


def _race(writers: int, write: Callable[[int], None]) -> list[str]:
    """Run `write(n)` in `writers` threads released at once; "ok" or the error's name each."""
    barrier = threading.Barrier(writers)
    outcomes: list[str] = []

    def run(n: int) -> None:
        barrier.wait()
        try:
            write(n)
            outcomes.append("ok")
        except (InvalidInput, VersionConflict) as exc:
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


class ViewRuleContract(ContractBase):
    """Part of `StoreContract`; see the module docstring."""

    def _refused(self, store: SessionStore, sid: str, event: SessionEvent, match: str) -> None:
        """`event` is refused by both append paths, and nothing is written."""
        before = store.version(sid)
        log = store.events(sid)
        with pytest.raises(InvalidInput, match=match):
            store.append_events(sid, [event], before)
        with pytest.raises(InvalidInput, match=match):
            store.append_event(event)
        assert store.version(sid) == before
        assert store.events(sid) == log

    # -- refused ------------------------------------------------------------------------------

    def test_an_orphan_tool_result_is_refused(self, store: SessionStore, sid: str) -> None:
        store.append_events(sid, [_user(sid), _reply(sid)], 0)
        self._refused(store, sid, _results(sid, "c1"), "R1")

    def test_a_result_for_an_already_answered_call_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, [_user(sid), _calls(sid, "c1", "c2"), _results(sid, "c1")], 0)
        self._refused(store, sid, _results(sid, "c1"), "R1")
        store.append_events(sid, [_results(sid, "c2")], 3)
        self._refused(store, sid, _results(sid, "c2"), "R1")

    def test_one_message_answering_a_call_twice_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, [_user(sid), _calls(sid, "c1", "c2")], 0)
        self._refused(store, sid, _results(sid, "c1", "c1"), "R1")

    def test_a_result_after_the_next_user_message_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        events = [_user(sid), _calls(sid, "c1"), _results(sid, "c1"), _reply(sid), _user(sid)]
        store.append_events(sid, events, 0)
        self._refused(store, sid, _results(sid, "c1"), "R1")

    def test_a_user_message_while_calls_are_open_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, [_user(sid), _calls(sid, "c1", "c2"), _results(sid, "c2")], 0)
        self._refused(store, sid, _user(sid, "next"), r"'c1' are unanswered \(R2")

    def test_an_assistant_message_while_calls_are_open_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, [_user(sid), _calls(sid, "c1")], 0)
        self._refused(store, sid, _reply(sid), "R2")
        self._refused(store, sid, _calls(sid, "c2"), "R2")

    def test_an_empty_assistant_message_is_refused(self, store: SessionStore, sid: str) -> None:
        store.append_events(sid, [_user(sid)], 0)
        self._refused(store, sid, msg(sid, Message.assistant()), "empty")
        self._refused(store, sid, msg(sid, Message.assistant(" \n")), "empty")
        self._refused(store, sid, msg(sid, Message.assistant("")), "empty")

    def test_an_assistant_or_tool_message_first_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        self._refused(store, sid, _reply(sid, "hello"), "R3")
        self._refused(store, sid, _calls(sid, "c1"), "R3")
        self._refused(store, sid, _results(sid, "c1"), "R3")
        store.append_events(sid, [msg(sid, Message.system("be brief"))], 0)
        self._refused(store, sid, _reply(sid, "hello"), "R3")  # a system message is no start

    def test_a_call_id_twice_in_one_message_is_refused(self, store: SessionStore, sid: str) -> None:
        store.append_events(sid, [_user(sid)], 0)
        self._refused(store, sid, _calls(sid, "c1", "c1"), "twice")

    def test_a_batch_breaking_a_rule_midway_writes_nothing(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, [_user(sid)], 0)
        batch = [_calls(sid, "c1"), _results(sid, "c1"), _reply(sid), _results(sid, "c1")]
        with pytest.raises(InvalidInput, match="R1"):
            store.append_events(sid, batch, 1)
        assert store.version(sid) == 1
        with pytest.raises(InvalidInput, match="R2"):
            store.append_events(sid, [_calls(sid, "c2"), _user(sid)], 1)
        assert store.version(sid) == 1

    def test_a_synthetic_event_outside_a_compaction_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, [_user(sid), _calls(sid, "c1")], 0)
        shadow = SessionEvent.for_message(sid, Message.user("recap"), synthetic=True)
        self._refused(store, sid, shadow, "synthetic")

    def test_a_summary_must_start_with_a_user_message(self, store: SessionStore, sid: str) -> None:
        u1, a1, u2, a2 = _user(sid), _reply(sid), _user(sid), _reply(sid)
        store.append_events(sid, [u1, a1, u2, a2], 0)
        summary = SessionEvent.for_message(sid, Message.assistant("recap"), synthetic=True)
        boundary = CompactionBoundary("b", (), (summary.id,), (u2.id, a2.id), 2, 0, "t")
        with pytest.raises(InvalidInput, match="summary"):
            store.append_events(sid, [boundary.to_event(sid), summary], 4)
        assert store.version(sid) == 4

    # -- accepted -----------------------------------------------------------------------------

    def test_parallel_calls_answered_in_several_tool_messages(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, [_user(sid), _calls(sid, "c1", "c2", "c3")], 0)
        store.append_events(sid, [_results(sid, "c2")], 2)
        store.append_event(_results(sid, "c3", "c1"))
        assert store.append_events(sid, [_reply(sid), _user(sid, "next")], 4) == 6

    def test_a_turn_in_progress_may_end_with_open_calls(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, [_user(sid), _calls(sid, "c1")], 0)
        service = SessionService(store)
        sent = service.view_messages(sid)
        assert [m.role for m in sent] == ["user", "assistant"]  # nothing repaired
        assert all(REPAIR_KEY not in m.metadata for m in sent)

    def test_system_messages_and_custom_events_may_sit_anywhere(
        self, store: SessionStore, sid: str
    ) -> None:
        system = msg(sid, Message.system("be brief"))
        audit = SessionEvent.for_payload(sid, AUDIT, {"step": 1})
        store.append_events(sid, [system, audit, _user(sid), _calls(sid, "c1")], 0)
        store.append_event(msg(sid, Message.system("be briefer")))
        store.append_event(SessionEvent.for_payload(sid, AUDIT, {"step": 2}))
        store.append_events(sid, [_results(sid, "c1")], 6)
        assert store.append_events(sid, [SessionEvent.for_payload(sid, AUDIT, 3)], 7) == 8
        store.append_event(_reply(sid))
        assert store.version(sid) == 9

    def test_a_long_tool_loop_is_read_back_past_many_events(
        self, store: SessionStore, sid: str
    ) -> None:
        ids = [f"c{i}" for i in range(12)]
        store.append_events(sid, [_user(sid), _calls(sid, *ids)], 0)
        for i in ids[:-1]:  # one tool message per call, custom events between them
            store.append_event(_results(sid, i))
            store.append_event(SessionEvent.for_payload(sid, AUDIT, {"after": i}))
        self._refused(store, sid, _reply(sid), r"'c11' are unanswered")
        self._refused(store, sid, _results(sid, "c3"), "R1")
        store.append_event(_results(sid, "c11"))
        for n in range(10):
            store.append_event(SessionEvent.for_payload(sid, AUDIT, {"n": n}))
        self._refused(store, sid, _results(sid, "c0"), "R1")
        store.append_event(_reply(sid))
        assert store.version(sid) == 2 + 22 + 1 + 10 + 1

    def test_a_compaction_between_a_call_and_its_result(
        self, store: SessionStore, sid: str
    ) -> None:
        u1, a1, u2, call = _user(sid), _reply(sid), _user(sid), _calls(sid, "c1")
        store.append_events(sid, [u1, a1, u2, call], 0)
        shadow = SessionEvent.for_message(sid, Message.user("recap?"), synthetic=True)
        recap = SessionEvent.for_message(sid, Message.assistant("recap"), synthetic=True)
        boundary = CompactionBoundary(
            "b", (), (shadow.id, recap.id), (u2.id, call.id), 2, 0, "window"
        )
        store.append_events(sid, [boundary.to_event(sid), shadow, recap], 4)
        store.append_event(_results(sid, "c1"))  # the walk back skips the summary
        store.append_event(_reply(sid))
        sent = SessionService(store).view_messages(sid)
        assert [m.text for m in sent] == ["recap?", "recap", "question", None, None, "answer"]
        assert all(REPAIR_KEY not in m.metadata for m in sent)

    def test_a_batch_valid_as_a_whole_is_accepted(self, store: SessionStore, sid: str) -> None:
        batch = [_user(sid), _calls(sid, "c1", "c2"), _results(sid, "c1"), _results(sid, "c2")]
        batch += [_reply(sid), _user(sid, "again"), _reply(sid)]
        assert store.append_events(sid, batch, 0) == 7

    def test_a_retried_batch_is_checked_on_its_new_part_only(
        self, store: SessionStore, sid: str
    ) -> None:
        u, call, result = _user(sid), _calls(sid, "c1"), _results(sid, "c1")
        store.append_events(sid, [u, call, result], 0)
        assert store.append_events(sid, [result], 3) == 3  # a retry of what landed: a no-op
        assert store.append_event(result).seq == 3
        assert store.append_events(sid, [result, _reply(sid)], 3) == 4

    def test_racing_writers_cannot_together_break_a_rule(
        self, store: SessionStore, sid: str
    ) -> None:
        """Four writers answer the one open call at once, on both append paths: exactly one
        may (R1: a call is answered once)."""
        for round_ in range(4):
            call = f"c{round_}"
            store.append_event(_user(sid, f"q{round_}"))
            store.append_event(_calls(sid, call))
            outcomes = _race(4, functools.partial(self._answer, store, sid, call))
            assert outcomes.count("ok") == 1, outcomes
            results = [e for e in store.events(sid) if e.role == "tool"]
            assert len(results) == round_ + 1
            store.append_event(_reply(sid))

    def test_a_re_created_session_is_checked_afresh(
        self, store: SessionStore, sid: str, tmp_path: Path
    ) -> None:
        """A handle that appended a call does not take its memory of the log for the log: the
        session was deleted and re-created by another handle, at the same version."""
        other = self.open_again(store, tmp_path)
        try:
            store.append_events(sid, [_user(sid)], 0)
            store.append_events(sid, [_calls(sid, "c1")], 1)
            assert other.delete_session(sid)
            other.create_session(session_at(sid))
            other.append_events(sid, [_user(sid), _reply(sid)], 0)
            self._refused(store, sid, _results(sid, "c1"), "R1")
            store.append_events(sid, [_user(sid, "next")], 2)
        finally:
            if other is not store:
                other.close()

    def test_another_handles_appends_are_seen(
        self, store: SessionStore, sid: str, tmp_path: Path
    ) -> None:
        """A handle's memory of the log's end is stale once another handle appended: its
        next append is judged on the log as it is."""
        other = self.open_again(store, tmp_path)
        try:
            store.append_event(_user(sid))
            store.append_event(_calls(sid, "c1"))  # this handle: the call c1 is open
            other.append_event(_results(sid, "c1"))
            other.append_event(_user(sid, "next"))
            late = _results(sid, "c1")  # c1 was answered (R1)
            with pytest.raises(InvalidInput, match="R1"):
                store.append_event(late)
            with pytest.raises(VersionConflict):  # at the version this handle wrote last
                store.append_events(sid, [late], 2)
            with pytest.raises(InvalidInput, match="R1"):
                store.append_events(sid, [late], 4)
            assert store.version(sid) == 4
            assert store.append_event(_reply(sid)).seq == 5
            other.append_events(sid, [_user(sid, "more"), _calls(sid, "c2")], 5)
            assert store.append_event(_results(sid, "c2")).seq == 8
            assert store.append_event(_user(sid, "last")).seq == 9
            assert [e.role for e in store.events(sid)][-3:] == ["assistant", "tool", "user"]
        finally:
            if other is not store:
                other.close()

    def test_a_session_re_created_by_another_handle_is_checked_afresh(
        self, store: SessionStore, sid: str, tmp_path: Path
    ) -> None:
        """As above on `append_event`: the new log is at the version this handle remembers,
        and its end does not have the call this handle remembers open."""
        other = self.open_again(store, tmp_path)
        try:
            store.append_event(_user(sid))
            store.append_event(_calls(sid, "c1"))
            assert other.delete_session(sid)
            other.create_session(session_at(sid))
            other.append_event(_user(sid))
            other.append_event(_reply(sid))
            with pytest.raises(InvalidInput, match="R1"):
                store.append_event(_results(sid, "c1"))
            with pytest.raises(InvalidInput, match="R1"):
                store.append_events(sid, [_results(sid, "c1")], 2)
            assert [e.role for e in store.events(sid)] == ["user", "assistant"]
            assert store.append_event(_user(sid, "next")).seq == 3
        finally:
            if other is not store:
                other.close()

    def test_a_retried_event_does_not_mislead_the_next_check(
        self, store: SessionStore, sid: str
    ) -> None:
        """Re-sending a stored call writes nothing: the call is not open again afterwards."""
        call = _calls(sid, "c1")
        store.append_event(_user(sid))
        store.append_event(call)
        store.append_event(_results(sid, "c1"))
        assert store.append_event(call).seq == 2  # a retry: stored before
        assert store.append_events(sid, [call], 3) == 3
        with pytest.raises(InvalidInput, match="R1"):
            store.append_event(_results(sid, "c1"))
        with pytest.raises(InvalidInput, match="R1"):
            store.append_events(sid, [_results(sid, "c1")], 3)
        assert store.version(sid) == 3

    def _answer(self, store: SessionStore, sid: str, call: str, n: int) -> None:
        event = _results(sid, call)
        if n % 2:
            store.append_event(event)
        else:
            store.append_events(sid, [event], store.version(sid))

    # -- the explicit path --------------------------------------------------------------------

    def test_a_broken_transcript_is_stored_on_purpose_and_its_view_repaired(
        self, store: SessionStore, sid: str
    ) -> None:
        broken = [
            msg(sid, Message.system("sys")),
            _reply(sid, "hello, I am the bot"),  # R3: the assistant speaks first
            _results(sid, "ghost"),  # R1: answers no call
            _user(sid, "look it up"),
            _calls(sid, "c1", "c2"),
            _results(sid, "c1"),  # c2 is never answered (R2)
            msg(sid, Message.assistant("")),  # empty
            _user(sid, "thanks"),
            _results(sid, "c1", "c2"),  # R1: after the next user message
        ]
        assert store.append_events(sid, broken, 0, check_rules=False) == 9
        assert store.append_event(_reply(sid, "bye"), check_rules=False).seq == 10
        assert [e.id for e in store.events(sid)][:9] == [e.id for e in broken]  # stored as is
        sent = SessionService(store).view_messages(sid)
        assert [(m.role, m.text, m.metadata.get(REPAIR_KEY)) for m in sent] == [
            ("system", "sys", None),
            ("user", sent[1].text, "placeholder user message"),
            ("assistant", "hello, I am the bot", None),
            ("user", "look it up", None),
            ("assistant", None, None),
            ("tool", None, None),
            ("tool", None, "missing tool results"),
            ("user", "thanks", None),
            ("assistant", "bye", None),
        ]
        assert sent[6].tool_results == (ToolResult("c2", "lookup", PLACEHOLDER_RESULT),)
        # the checked path goes on from the end of the stored log
        store.append_event(_calls(sid, "c9"))
        self._refused(store, sid, _user(sid, "more"), "R2")
