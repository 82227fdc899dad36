"""`StoreContract`: the behaviour every `SessionStore` must have, as a pytest class.

Subclass it in a test module and say how to build the store::

    class TestMyStore(StoreContract):
        def make_store(self, tmp_path):
            return MyStore(...)

One behaviour per test. `make_store` is called once per test, and the store is closed after it.
Override `open_again` when the store can be opened a second time on the same data (a file or a
server): the concurrency tests then race two handles instead of one.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from turnlog.compaction import CompactionBoundary
from turnlog.errors import InvalidInput, SessionAlreadyExists, SessionNotFound, VersionConflict
from turnlog.events import EventType, Message, SessionEvent, ToolCall, ToolResult
from turnlog.stores.base import EventFilter
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import AUDIT, T0, ContractBase, msg, session_at, turn
from turnlog.testing.contract_atomicity import AtomicityContract
from turnlog.testing.contract_attachments import AttachmentContract
from turnlog.testing.contract_history import HistoryContract
from turnlog.testing.contract_lazy_view import LazyViewContract
from turnlog.testing.contract_races import RaceContract
from turnlog.testing.contract_regressions import RegressionContract
from turnlog.testing.contract_stand_ins import StandInContract
from turnlog.testing.contract_tokens import TokenCountContract
from turnlog.testing.contract_validation import ValidationContract
from turnlog.testing.contract_view_rules import ViewRuleContract

__all__ = ["StoreContract"]


class StoreContract(
    RaceContract,
    AtomicityContract,
    ValidationContract,
    ViewRuleContract,
    RegressionContract,
    StandInContract,
    TokenCountContract,
    LazyViewContract,
    AttachmentContract,
    HistoryContract,
    ContractBase,
):
    """The contract suite. Subclasses implement `make_store`."""

    # -- sessions ---------------------------------------------------------------------------

    def test_created_session_is_found_as_saved(self, store: SessionStore) -> None:
        session = session_at("a", expires_at=T0 + timedelta(hours=1), metadata={"owner": "ann"})
        store.create_session(session)
        assert store.find_session("a") == session

    def test_unknown_session_is_none(self, store: SessionStore) -> None:
        assert store.find_session("nope") is None

    def test_creating_a_taken_id_raises(self, store: SessionStore, sid: str) -> None:
        with pytest.raises(SessionAlreadyExists):
            store.create_session(session_at(sid))

    def test_save_session_updates_metadata_and_keeps_the_log(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        store.save_session(session_at(sid, metadata={"owner": "bob"}))
        found = store.find_session(sid)
        assert found is not None and found.metadata == {"owner": "bob"}
        assert store.version(sid) == 2

    def test_list_sessions_newest_first(self, store: SessionStore) -> None:
        for i in range(3):
            store.create_session(session_at(f"s{i}", created_at=T0 + timedelta(minutes=i)))
        assert [s.id for s in store.list_sessions()] == ["s2", "s1", "s0"]
        assert [s.id for s in store.list_sessions(limit=1)] == ["s2"]

    def test_list_sessions_limit_fits_in_64_bits(self, store: SessionStore) -> None:
        store.create_session(session_at("s0"))
        for limit in (2**62, 2**63 - 2, 2**63 - 1):
            assert [s.id for s in store.list_sessions(limit=limit)] == ["s0"], limit
        for limit in (2**63, 2**64, 10**30):
            with pytest.raises(InvalidInput, match="2\\*\\*63"):
                store.list_sessions(limit=limit)

    def test_delete_removes_session_and_log(self, store: SessionStore, sid: str) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        assert store.delete_session(sid) is True
        assert store.find_session(sid) is None
        with pytest.raises(SessionNotFound):
            store.version(sid)
        assert store.delete_session(sid) is False

    def test_deleted_session_ids_can_be_reused(self, store: SessionStore, sid: str) -> None:
        events = turn(sid, 1)
        store.append_events(sid, events, 0)
        store.delete_session(sid)
        store.create_session(session_at(sid))
        assert store.append_events(sid, events, 0) == 2

    def test_delete_expired_deletes_only_expired_sessions(self, store: SessionStore) -> None:
        store.create_session(session_at("old", expires_at=T0 + timedelta(minutes=1)))
        store.create_session(session_at("edge", expires_at=T0 + timedelta(minutes=5)))
        store.create_session(session_at("new", expires_at=T0 + timedelta(hours=1)))
        store.create_session(session_at("forever"))
        store.append_events("old", turn("old", 1), 0)
        assert store.delete_expired(T0 + timedelta(minutes=5)) == 2
        assert {s.id for s in store.list_sessions()} == {"new", "forever"}
        with pytest.raises(SessionNotFound):
            store.events("old")

    def test_extended_ttl_is_kept_by_delete_expired(self, store: SessionStore) -> None:
        store.create_session(session_at("a", expires_at=T0 + timedelta(minutes=1)))
        store.save_session(session_at("a", expires_at=T0 + timedelta(hours=2)))
        assert store.delete_expired(T0 + timedelta(hours=1)) == 0
        assert store.find_session("a") is not None

    def test_find_by_metadata_matches_value_and_type(self, store: SessionStore) -> None:
        store.create_session(session_at("a", metadata={"owner": "ann", "tier": 1, "vip": True}))
        store.create_session(session_at("b", metadata={"owner": "bob", "tier": "1", "vip": False}))
        assert [s.id for s in store.find_by_metadata("owner", "ann")] == ["a"]
        assert [s.id for s in store.find_by_metadata("tier", 1)] == ["a"]
        assert [s.id for s in store.find_by_metadata("tier", "1")] == ["b"]
        assert [s.id for s in store.find_by_metadata("vip", False)] == ["b"]
        assert store.find_by_metadata("owner", "carl") == []

    def test_find_by_metadata_treats_special_characters_literally(
        self, store: SessionStore
    ) -> None:
        store.create_session(session_at("a", metadata={"o'wn%er*": 'x"{y}\n%'}))
        store.create_session(session_at("b", metadata={"owner": "anything"}))
        assert [s.id for s in store.find_by_metadata("o'wn%er*", 'x"{y}\n%')] == ["a"]
        assert store.find_by_metadata("o%", "%") == []

    # -- appends and versions -----------------------------------------------------------------

    def test_new_session_is_at_version_zero(self, store: SessionStore, sid: str) -> None:
        assert store.version(sid) == 0
        assert store.events(sid) == []
        assert store.view(sid) == []

    def test_events_after_reads_one_page_of_the_log(self, store: SessionStore, sid: str) -> None:
        for n in range(1, 6):
            store.append_events(sid, turn(sid, n), 2 * (n - 1))
        log = store.events(sid)
        assert store.events_after(sid, 0, 3) == log[:3]
        assert store.events_after(sid, 3, 4) == log[3:7]
        assert store.events_after(sid, 8, 100) == log[8:]
        assert store.events_after(sid, 10, 5) == []
        assert store.events_after(sid, 99, 5) == []
        for after, limit in ((-1, 5), (0, 0), (True, 5), (0, "5")):
            with pytest.raises(InvalidInput):
                store.events_after(sid, after, limit)  # type: ignore[arg-type]
        with pytest.raises(SessionNotFound):
            store.events_after("nope", 0, 5)

    def test_append_returns_the_new_version_and_assigns_seqs(
        self, store: SessionStore, sid: str
    ) -> None:
        assert store.append_events(sid, turn(sid, 1), 0) == 2
        assert store.append_events(sid, turn(sid, 2), 2) == 4
        stored = store.events(sid)
        assert [e.seq for e in stored] == [1, 2, 3, 4]
        assert all(
            e.timestamp is not None and e.timestamp.utcoffset() == timedelta(0) for e in stored
        )

    def test_stale_expected_version_raises_and_writes_nothing(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        with pytest.raises(VersionConflict) as info:
            store.append_events(sid, turn(sid, 2), 1)
        assert (info.value.session_id, info.value.expected, info.value.actual) == (sid, 1, 2)
        with pytest.raises(VersionConflict):
            store.append_events(sid, turn(sid, 3), 5)
        assert store.version(sid) == 2

    def test_append_event_always_appends_at_the_end(self, store: SessionStore, sid: str) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        stored = store.append_event(msg(sid, Message.user("more")))
        assert stored.seq == 3
        assert store.version(sid) == 3

    def test_reappending_an_id_is_a_no_op(self, store: SessionStore, sid: str) -> None:
        events = turn(sid, 1)
        store.append_events(sid, events, 0)
        assert store.append_events(sid, events, 0) == 2
        assert store.append_events(sid, events, 2) == 2
        again = store.append_event(events[0])
        assert again.seq == 1
        assert [e.id for e in store.events(sid)] == [e.id for e in events]

    def test_an_id_of_another_session_is_refused(self, store: SessionStore, sid: str) -> None:
        store.create_session(session_at("other"))
        store.append_events("other", [msg("other", Message.user("hi"), "shared-id")], 0)
        with pytest.raises(InvalidInput):
            store.append_events(sid, [msg(sid, Message.user("hi"), "shared-id")], 0)
        assert store.version(sid) == 0

    def test_batches_are_all_or_nothing(self, store: SessionStore, sid: str) -> None:
        store.create_session(session_at("other"))
        store.append_events("other", [msg("other", Message.user("x"), "taken")], 0)
        batch = [*turn(sid, 1), msg(sid, Message.user("y"), "taken")]
        with pytest.raises(InvalidInput):
            store.append_events(sid, batch, 0)
        assert store.version(sid) == 0
        bad_boundary = SessionEvent.for_payload(sid, EventType.COMPACTION, {"nonsense": 1})
        with pytest.raises(InvalidInput):
            store.append_events(sid, [*turn(sid, 2), bad_boundary], 0)
        assert store.version(sid) == 0

    def test_a_batch_with_a_repeated_id_is_refused(self, store: SessionStore, sid: str) -> None:
        event = msg(sid, Message.user("hi"))
        with pytest.raises(InvalidInput):
            store.append_events(sid, [event, event], 0)
        assert store.version(sid) == 0

    def test_an_event_of_another_session_is_refused(self, store: SessionStore, sid: str) -> None:
        store.create_session(session_at("other"))
        with pytest.raises(InvalidInput):
            store.append_events(sid, [msg("other", Message.user("hi"))], 0)
        assert store.version(sid) == 0 and store.version("other") == 0

    def test_unknown_session_raises_session_not_found(self, store: SessionStore) -> None:
        with pytest.raises(SessionNotFound):
            store.append_events("ghost", turn("ghost", 1), 0)
        with pytest.raises(SessionNotFound):
            store.append_event(msg("ghost", Message.user("hi")))
        for read in (store.version, store.events, store.view):
            with pytest.raises(SessionNotFound):
                read("ghost")

    def test_negative_expected_version_is_invalid(self, store: SessionStore, sid: str) -> None:
        with pytest.raises(InvalidInput):
            store.append_events(sid, turn(sid, 1), -1)

    def test_events_round_trip_exactly(self, store: SessionStore, sid: str) -> None:
        call = ToolCall("call_1", "get_weather", '{"city": "Zürich"}')
        events = [
            msg(sid, Message.system("be brief")),
            SessionEvent.for_message(
                sid, Message("user", "¿qué tal? 🌦", metadata={"lang": "es"}), metadata={"k": [1]}
            ),
            msg(sid, Message.assistant("checking", [call, ToolCall("c2", "t", "{}")])),
            msg(
                sid,
                Message.tool(
                    [
                        ToolResult("call_1", "get_weather", "12°C"),
                        ToolResult("c2", "t", "", is_error=True),  # a failed call keeps its flag
                    ]
                ),
            ),
            SessionEvent.for_payload(sid, AUDIT, {"who": "ann", "n": [1, 2.5, None, True]}),
            msg(sid, Message.assistant("12°C in Zürich")),
        ]
        store.append_events(sid, events, 0)
        stored = store.events(sid)
        for before, after in zip(events, stored, strict=True):
            assert (after.id, after.type, after.message, after.payload, after.metadata) == (
                before.id,
                before.type,
                before.message,
                before.payload,
                before.metadata,
            )

    def test_tuples_come_back_as_lists(self, store: SessionStore, sid: str) -> None:
        event = SessionEvent.for_payload(
            sid, AUDIT, {"pair": (1, (2, 3))}, metadata={"tags": ("a", "b")}
        )
        store.append_events(sid, [event], 0)
        stored = store.events(sid)[0]
        assert stored.payload == {"pair": [1, [2, 3]]}
        assert stored.metadata == {"tags": ["a", "b"]}

    def test_a_given_timestamp_is_kept(self, store: SessionStore, sid: str) -> None:
        when = datetime(2025, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
        store.append_events(
            sid, [SessionEvent.for_message(sid, Message.user("x"), timestamp=when)], 0
        )
        assert store.events(sid)[0].timestamp == when

    # -- views --------------------------------------------------------------------------------

    def test_a_log_without_boundary_is_its_own_view(self, store: SessionStore, sid: str) -> None:
        events = [*turn(sid, 1), SessionEvent.for_payload(sid, AUDIT, {"x": 1}), *turn(sid, 2)]
        store.append_events(sid, events, 0)
        assert [e.id for e in store.view(sid)] == [e.id for e in events if e.is_message]

    def test_view_follows_the_newest_boundary(self, store: SessionStore, sid: str) -> None:
        system = msg(sid, Message.system("sys"))
        t1, t2, t3 = turn(sid, 1), turn(sid, 2), turn(sid, 3)
        store.append_events(sid, [system, *t1, *t2], 0)
        first = CompactionBoundary("b1", (system.id,), (), tuple(e.id for e in t2), 2, 10, "t")
        store.append_events(sid, [first.to_event(sid), *t3], 5)
        assert [e.id for e in store.view(sid)] == [system.id, *(e.id for e in t2 + t3)]
        summary = msg(sid, Message.user("summary"))  # a summary turn starts with a user message
        summary = SessionEvent.for_message(sid, summary.message or Message.user(""), synthetic=True)
        second = CompactionBoundary(
            "b2", (system.id,), (summary.id,), tuple(e.id for e in t3), 2, 5, "t"
        )
        store.append_events(sid, [second.to_event(sid), summary], 8)
        tail = turn(sid, 4)
        store.append_events(sid, tail, 10)
        view = store.view(sid)
        assert [e.id for e in view] == [system.id, summary.id, *(e.id for e in t3 + tail)]
        assert view == CompactionBoundary.project(store.events(sid))
        assert view[1].synthetic

    def test_a_boundary_naming_unknown_events_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        boundary = CompactionBoundary("b", ("nope",), (), (), 0, 0, "t")
        with pytest.raises(InvalidInput):
            store.append_events(sid, [boundary.to_event(sid)], 2)
        assert store.version(sid) == 2

    def test_a_boundary_may_not_name_a_custom_event(self, store: SessionStore, sid: str) -> None:
        audit = SessionEvent.for_payload(sid, AUDIT, {"x": 1})
        store.append_events(sid, [*turn(sid, 1), audit], 0)
        boundary = CompactionBoundary("b", (audit.id,), (), (), 0, 0, "t")
        with pytest.raises(InvalidInput):
            store.append_events(sid, [boundary.to_event(sid)], 3)

    # -- filters ------------------------------------------------------------------------------

    def test_filter_by_type_role_and_synthetic(self, store: SessionStore, sid: str) -> None:
        audit = SessionEvent.for_payload(sid, AUDIT, {"x": 1})
        shadow = SessionEvent.for_message(sid, Message.user("recap?"), synthetic=True)
        # a synthetic event outside a compaction breaks the view rules: stored on purpose
        store.append_events(
            sid, [*turn(sid, 1), audit, shadow, *turn(sid, 2)], 0, check_rules=False
        )
        assert [e.id for e in store.events(sid, EventFilter(event_types={AUDIT}))] == [audit.id]
        users = store.events(sid, EventFilter(roles={"user"}))
        assert [e.message.text for e in users if e.message] == [
            "question 1",
            "recap?",
            "question 2",
        ]
        plain = store.events(sid, EventFilter(roles={"user"}, exclude_synthetic=True))
        assert shadow.id not in {e.id for e in plain} and len(plain) == 2

    def test_last_n_extends_back_to_the_turn_start(self, store: SessionStore, sid: str) -> None:
        events = [
            msg(sid, Message.user("u1")),
            msg(sid, Message.assistant("a1")),
            msg(sid, Message.user("u2")),
            msg(sid, Message.assistant(None, [ToolCall("c", "f", "{}")])),
            msg(sid, Message.tool(ToolResult("c", "f", "ok"))),
            msg(sid, Message.assistant("a2")),
        ]
        store.append_events(sid, events, 0)
        got = store.events(sid, EventFilter.last_n(2))
        assert [e.id for e in got] == [e.id for e in events[2:]]
        assert len(store.events(sid, EventFilter.last_n(10))) == 6

    def test_active_filter_reads_the_view(self, store: SessionStore, sid: str) -> None:
        t1, t2 = turn(sid, 1), turn(sid, 2)
        store.append_events(sid, [*t1, *t2], 0)
        boundary = CompactionBoundary("b", (), (), tuple(e.id for e in t2), 2, 1, "t")
        store.append_events(sid, [boundary.to_event(sid)], 4)
        assert [e.id for e in store.events(sid, EventFilter.active())] == [e.id for e in t2]
        assert len(store.events(sid, EventFilter.all())) == 5

    # -- isolation and concurrency ------------------------------------------------------------

    def test_sessions_with_hostile_ids_stay_apart(self, store: SessionStore) -> None:
        ids = ["a'b", 'a"b', "a%", "%", "{a}", "a*", "a\\b", "ünï €", "a b", "a_"]
        for i, session_id in enumerate(ids):
            store.create_session(session_at(session_id))
            store.append_events(session_id, turn(session_id, i), 0)
        for i, session_id in enumerate(ids):
            texts = [e.message.text for e in store.events(session_id) if e.message]
            assert texts == [f"question {i}", f"answer {i}"]

    def test_racing_writers_with_one_version_have_one_winner(
        self, store: SessionStore, sid: str, tmp_path: Path
    ) -> None:
        other = self.open_again(store, tmp_path)
        store.append_events(sid, turn(sid, 0), 0)
        outcomes: list[str] = []
        barrier = threading.Barrier(2)

        def write(handle: SessionStore, n: int) -> None:
            barrier.wait()
            try:
                handle.append_events(sid, turn(sid, n), 2)
                outcomes.append("won")
            except VersionConflict:
                outcomes.append("conflict")

        threads = [threading.Thread(target=write, args=(h, n)) for n, h in ((1, store), (2, other))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if other is not store:
            other.close()
        assert sorted(outcomes) == ["conflict", "won"]
        assert [e.seq for e in store.events(sid)] == [1, 2, 3, 4]

    def test_retrying_writers_lose_and_double_nothing(
        self, store: SessionStore, sid: str, tmp_path: Path
    ) -> None:
        handles = [store, self.open_again(store, tmp_path)]
        per_writer = 25

        def write(w: int) -> None:
            handle = handles[w % 2]
            for i in range(per_writer):
                event = msg(sid, Message.user(f"w{w}-{i}"), event_id=f"w{w}-{i}")
                while True:
                    try:
                        handle.append_events(sid, [event], handle.version(sid))
                        break
                    except VersionConflict:
                        continue

        threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if handles[1] is not store:
            handles[1].close()
        log = store.events(sid)
        assert [e.seq for e in log] == list(range(1, 4 * per_writer + 1))
        assert len({e.id for e in log}) == len(log)
        for w in range(4):
            mine = [e.id for e in log if e.id.startswith(f"w{w}-")]
            assert mine == [f"w{w}-{i}" for i in range(per_writer)]
