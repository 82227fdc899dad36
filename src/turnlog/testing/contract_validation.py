"""Nothing accepted is unreadable; bad input is a typed error and nothing is written.

The rules every store applies the same way (docs/concepts.md, "What a store accepts"):

- ids: `check_id` on every method that takes a session id, before the store is asked;
- timestamps: timezone-aware, converted to UTC, within `MIN_TIMESTAMP`..`MAX_TIMESTAMP`;
- JSON: any size of integer round-trips; session metadata holds no U+0000;
- `list_sessions(limit=)`: None or an integer >= 0; `delete_expired(before)`: an aware datetime.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from turnlog.compaction import CompactionBoundary
from turnlog.errors import InvalidInput
from turnlog.events import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    EventType,
    Message,
    Role,
    Session,
    SessionEvent,
    ToolCall,
    ToolResult,
)
from turnlog.stores.base import EventFilter
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import AUDIT, T0, ContractBase, msg, session_at, turn

__all__ = ["ValidationContract"]

BAD_IDS: list[Any] = [
    "",
    "   ",
    "a\x00b",
    "a\nb",
    "a\x7fb",
    "a\x9bb",  # C1: CSI
    "a\x85b",  # C1: NEL
    "a\ud800b",  # a lone surrogate
    "x" * 256,
    None,
    42,
    b"bytes",
]
"""Ids that every method refuses with InvalidInput."""

GOOD_IDS = ["a" * 255, "\U0001f600 emoji", "caf\u00e9 \u00a0nbsp", "quote'\"%_*?[]{}\\"]
"""Ids at the edges of what is accepted."""


def _expect_invalid(call: Callable[[], object]) -> None:
    with pytest.raises(InvalidInput):
        call()


class ValidationContract(ContractBase):
    """Part of `StoreContract`; see the module docstring."""

    property_examples: ClassVar[int] = 100
    """Examples of the property test; server stores lower it to keep the suite fast."""

    # -- ids ----------------------------------------------------------------------------------

    @pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
    def test_every_method_refuses_an_impossible_session_id(
        self, store: SessionStore, sid: str, bad: Any
    ) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        event = msg(sid, Message.user("hi"))
        calls: dict[str, Callable[[], object]] = {
            "find_session": lambda: store.find_session(bad),
            "delete_session": lambda: store.delete_session(bad),
            "events": lambda: store.events(bad),
            "events(active)": lambda: store.events(bad, EventFilter.active()),
            "version": lambda: store.version(bad),
            "view": lambda: store.view(bad),
            "append_events": lambda: store.append_events(bad, [event], 0),
            "append_events([])": lambda: store.append_events(bad, [], 0),
        }
        for name, call in calls.items():
            with pytest.raises(InvalidInput):
                call()
                pytest.fail(f"{name}({bad!r}) did not raise InvalidInput")
        if bad is not None:  # None asks for a fresh id
            with pytest.raises(InvalidInput):
                SessionEvent.for_message(sid, Message.user("x"), event_id=bad)
        with pytest.raises(InvalidInput):
            Session(id=bad, created_at=T0)
        assert store.version(sid) == 2
        assert [s.id for s in store.list_sessions()] == [sid]

    def test_a_batch_that_is_not_a_sequence_of_events_is_refused(
        self, store: SessionStore, sid: str
    ) -> None:
        event = msg(sid, Message.user("hi"))
        for bad in (event, None, 5, "events", [event, "x"], [None]):
            with pytest.raises(InvalidInput):
                store.append_events(sid, bad, 0)  # type: ignore[arg-type]
        for bad_event in (None, "x", Message.user("hi")):
            with pytest.raises(InvalidInput):
                store.append_event(bad_event)  # type: ignore[arg-type]
        for bad_version in (-1, None, 1.0, True, "0", 2**63, 2**70):
            with pytest.raises(InvalidInput):
                store.append_events(sid, [event], bad_version)  # type: ignore[arg-type]
        assert store.version(sid) == 0

    def test_metadata_lookups_refuse_what_is_not_text_and_find_nothing_for_nul(
        self, store: SessionStore
    ) -> None:
        store.create_session(session_at("s", metadata={"k": "v"}))
        _expect_invalid(lambda: store.find_by_metadata("k\ud800", "v"))
        _expect_invalid(lambda: store.find_by_metadata("k", "v\udfff"))
        _expect_invalid(lambda: store.find_by_metadata(1, "v"))  # type: ignore[arg-type]
        _expect_invalid(lambda: store.find_by_metadata("k", 1.5))  # type: ignore[arg-type]
        _expect_invalid(lambda: store.find_by_metadata("k", None))  # type: ignore[arg-type]
        assert store.find_by_metadata("k\x00", "v") == []
        assert store.find_by_metadata("k", "v\x00") == []
        assert [s.id for s in store.find_by_metadata("k", "v")] == ["s"]

    def test_c1_control_characters_are_refused_in_ids(self) -> None:
        for ch in ("\x80", "\x9b", "\x9f"):
            with pytest.raises(InvalidInput, match="control character"):
                Session(id=f"a{ch}", created_at=T0)
        Session(id="a\xa0", created_at=T0)  # U+00A0 is the first character after C1

    @pytest.mark.parametrize("good", GOOD_IDS, ids=repr)
    def test_ids_at_the_edges_round_trip(self, store: SessionStore, good: str) -> None:
        store.create_session(session_at(good))
        event = SessionEvent.for_message(good, Message.user("hi"), event_id=good)
        assert store.append_events(good, [event], 0) == 1
        assert [e.id for e in store.events(good)] == [good]
        assert [e.id for e in store.view(good)] == [good]
        found = store.find_session(good)
        assert found is not None and found.id == good
        assert store.delete_session(good) is True

    # -- event types --------------------------------------------------------------------------

    def test_an_event_type_is_checked_when_it_is_built(self, store: SessionStore, sid: str) -> None:
        for bad in ("audit", "", "1ABC", "A" * 65, "ACME AUDIT", None):
            with pytest.raises(InvalidInput, match="event type name"):
                EventType(bad)  # type: ignore[arg-type]
        assert EventType("ACME.AUDIT") == EventType.of("ACME.AUDIT") == AUDIT
        assert EventType("MESSAGE") == EventType.MESSAGE
        assert EventType.of("COMPACTION") == EventType.COMPACTION
        store.append_events(sid, [SessionEvent.for_payload(sid, EventType("A1._"), [1])], 0)
        assert [e.type for e in store.events(sid)] == [EventType.of("A1._")]

    # -- timestamps ---------------------------------------------------------------------------

    def test_timestamps_are_stored_in_utc_and_read_back_equal(
        self, store: SessionStore, sid: str
    ) -> None:
        odd = timezone(timedelta(hours=-9, minutes=-37, seconds=-11, microseconds=-7))
        moments = [
            MIN_TIMESTAMP,
            MAX_TIMESTAMP,
            MIN_TIMESTAMP.astimezone(timezone(timedelta(hours=23, minutes=59))),
            MAX_TIMESTAMP.astimezone(odd),
            datetime(2026, 3, 1, 12, tzinfo=odd),
        ]
        events = [
            SessionEvent.for_message(sid, Message.user(f"m{i}"), timestamp=t)
            for i, t in enumerate(moments)
        ]
        assert all(e.timestamp is not None and e.timestamp.tzinfo is UTC for e in events)
        store.append_events(sid, events, 0)
        for read in (store.events(sid), store.view(sid)):
            assert [e.timestamp for e in read] == moments
            assert all(
                e.timestamp is not None and e.timestamp.utcoffset() == timedelta(0) for e in read
            )
        store.create_session(session_at("edge", created_at=MIN_TIMESTAMP, expires_at=MAX_TIMESTAMP))
        found = store.find_session("edge")
        assert found is not None
        assert (found.created_at, found.expires_at) == (MIN_TIMESTAMP, MAX_TIMESTAMP)
        assert {s.id for s in store.list_sessions()} == {sid, "edge"}

    @pytest.mark.parametrize(
        "moment",
        [
            datetime.max.replace(tzinfo=timezone(timedelta(hours=-1))),
            datetime.min.replace(tzinfo=timezone(timedelta(hours=1))),
            datetime.min.replace(tzinfo=UTC),
            datetime.max.replace(tzinfo=UTC),
            MAX_TIMESTAMP + timedelta(microseconds=1),
            MIN_TIMESTAMP - timedelta(microseconds=1),
            datetime(2026, 1, 1),  # naive
            "2026-01-01T00:00:00Z",
            0,
        ],
        ids=repr,
    )
    def test_a_time_no_store_can_read_back_is_refused(
        self, store: SessionStore, sid: str, moment: Any
    ) -> None:
        with pytest.raises(InvalidInput):
            SessionEvent.for_message(sid, Message.user("x"), timestamp=moment)
        with pytest.raises(InvalidInput):
            Session(id="late", created_at=T0, expires_at=moment)
        with pytest.raises(InvalidInput):
            Session(id="late", created_at=moment)
        assert store.list_sessions() == [store.find_session(sid)]

    # -- list_sessions and delete_expired -------------------------------------------------------

    def test_list_sessions_takes_a_limit_of_zero_or_more(self, store: SessionStore) -> None:
        for i in range(3):
            store.create_session(session_at(f"s{i}", created_at=T0 + timedelta(minutes=i)))
        assert store.list_sessions(limit=0) == []
        assert [s.id for s in store.list_sessions(limit=2)] == ["s2", "s1"]
        assert [s.id for s in store.list_sessions(limit=9)] == ["s2", "s1", "s0"]
        for bad in (-1, -100, True, 1.5, "2"):
            with pytest.raises(InvalidInput, match="limit"):
                store.list_sessions(limit=bad)  # type: ignore[arg-type]

    def test_delete_expired_needs_an_aware_datetime(self, store: SessionStore) -> None:
        store.create_session(session_at("old", expires_at=T0))
        for bad in (datetime(2030, 1, 1), "2030-01-01", 0, None):
            with pytest.raises(InvalidInput, match="timezone-aware"):
                store.delete_expired(bad)  # type: ignore[arg-type]
        assert store.find_session("old") is not None
        # any aware cutoff is fine, even one outside the range a session can hold
        assert store.delete_expired(datetime.min.replace(tzinfo=timezone(timedelta(hours=2)))) == 0
        assert store.delete_expired(datetime.max.replace(tzinfo=timezone(-timedelta(hours=2)))) == 1

    def test_delete_expired_is_exact_to_the_microsecond_over_the_whole_range(
        self, store: SessionStore
    ) -> None:
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        edges = [MIN_TIMESTAMP, epoch - timedelta(microseconds=1), epoch, T0, MAX_TIMESTAMP]
        for i, moment in enumerate(edges):
            store.create_session(session_at(f"x{i}", expires_at=moment))
        for i, moment in enumerate(edges):
            assert store.delete_expired(moment - timedelta(microseconds=1)) == 0
            assert store.find_session(f"x{i}") is not None
            assert store.delete_expired(moment) == 1
            assert store.find_session(f"x{i}") is None
        store.create_session(session_at("before 1970", expires_at=MIN_TIMESTAMP))
        store.create_session(session_at("after", expires_at=MAX_TIMESTAMP))
        assert store.delete_expired(epoch) == 1
        assert [s.id for s in store.list_sessions()] == ["after"]

    # -- JSON ---------------------------------------------------------------------------------

    def test_integers_of_any_size_round_trip_and_are_found(self, store: SessionStore) -> None:
        big = [2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**40, -(10**40)]
        for i, n in enumerate(big):
            store.create_session(session_at(f"b{i}", metadata={"n": n, "all": big}))
        for i, n in enumerate(big):
            assert [s.id for s in store.find_by_metadata("n", n)] == [f"b{i}"]
            found = store.find_session(f"b{i}")
            assert found is not None and found.metadata == {"n": n, "all": big}
        assert store.find_by_metadata("n", 2**63 + 1) == []
        event = SessionEvent.for_payload("b0", AUDIT, {"big": big}, metadata={"n": 10**40})
        store.append_events("b0", [event], 0)
        [read] = store.events("b0")
        assert (read.payload, read.metadata) == ({"big": big}, {"n": 10**40})

    def test_floats_keep_their_type(self, store: SessionStore) -> None:
        floats = [1e16, 1e308, -1e300, 5e-324, 1.0, -0.0, 123456789012345680.0, 0.1]
        store.create_session(session_at("f", metadata={"f": floats, "one": 1.0}))
        found = store.find_session("f")
        assert found is not None and found.metadata == {"f": floats, "one": 1.0}
        assert all(type(v) is float for v in found.metadata["f"])
        assert type(found.metadata["one"]) is float
        assert store.find_by_metadata("one", 1) == []

    def test_session_metadata_cannot_hold_nul_and_nothing_is_written(
        self, store: SessionStore
    ) -> None:
        for metadata in ({"k": "a\x00b"}, {"k\x00": 1}, {"k": [{"deep": "\x00"}]}):
            with pytest.raises(InvalidInput, match="U\\+0000"):
                store.create_session(session_at("n", metadata=metadata))
            assert store.find_session("n") is None
            store.create_session(session_at("n"))
            with pytest.raises(InvalidInput, match="U\\+0000"):
                store.save_session(session_at("n", metadata=metadata))
            found = store.find_session("n")
            assert found is not None and found.metadata == {}
            store.delete_session("n")
        # events carry it: their bodies are bytes on every store
        store.create_session(session_at("e"))
        event = SessionEvent.for_payload("e", AUDIT, {"\x00": "\x00"}, metadata={"k": "\x00"})
        store.append_events("e", [event], 0)
        [read] = store.events("e")
        assert (read.payload, read.metadata) == ({"\x00": "\x00"}, {"k": "\x00"})

    # -- boundaries ---------------------------------------------------------------------------

    def test_a_boundary_naming_an_event_twice_is_refused_and_nothing_written(
        self, store: SessionStore, sid: str
    ) -> None:
        t1, t2 = turn(sid, 1), turn(sid, 2)
        store.append_events(sid, t1, 0)
        twice = CompactionBoundary("b", (t1[0].id,), (), (t1[0].id, t1[1].id), 0, 0, "t")
        for batch, version in (([twice.to_event(sid)], 2), ([*t2, twice.to_event(sid)], 2)):
            with pytest.raises(InvalidInput, match="more than once"):
                store.append_events(sid, batch, version, check_rules=False)
            assert [e.id for e in store.events(sid)] == [e.id for e in t1]
        assert [e.id for e in store.view(sid)] == [e.id for e in t1]

    def test_a_boundary_naming_an_event_after_it_is_refused_and_nothing_written(
        self, store: SessionStore, sid: str
    ) -> None:
        t1, t2 = turn(sid, 1), turn(sid, 2)
        store.append_events(sid, t1, 0)
        ahead = CompactionBoundary("b", (), (), (t1[1].id, t2[0].id, t2[1].id), 1, 0, "t")
        own = CompactionBoundary("b", (), (), ("b",), 0, 0, "t")
        for bad in (ahead, own):
            with pytest.raises(InvalidInput, match="after it"):
                store.append_events(sid, [bad.to_event(sid), *t2], 2, check_rules=False)
            assert [e.id for e in store.events(sid)] == [e.id for e in t1]
        # its own summary events do come after it
        summary = SessionEvent.for_message(sid, Message.user("summary"), synthetic=True)
        good = CompactionBoundary("b", (), (summary.id,), (t1[1].id,), 1, 0, "t")
        store.append_events(sid, [good.to_event(sid), summary], 2, check_rules=False)
        assert [e.id for e in store.view(sid)] == [summary.id, t1[1].id]

    # -- the property -------------------------------------------------------------------------

    def test_what_is_accepted_reads_back_equal_and_what_is_refused_is_not_written(
        self, store: SessionStore
    ) -> None:
        @settings(
            max_examples=self.property_examples,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(data=st.data())
        def check(data: st.DataObject) -> None:
            _check_one(store, data)

        check()


# -- strategies -------------------------------------------------------------------------------

_ANY_CHAR = st.characters(codec=None, exclude_categories=())
_TEXT = st.text(_ANY_CHAR, max_size=20) | st.text(max_size=5)
_ID = st.one_of(
    st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=12),
    st.text(_ANY_CHAR, max_size=12),
    st.sampled_from(GOOD_IDS),
)
_INT = st.integers() | st.integers(min_value=-(2**80), max_value=2**80)
_FLOAT = st.floats(allow_nan=True, allow_infinity=True) | st.floats(
    allow_nan=False, allow_infinity=False
)
_SCALAR = st.none() | st.booleans() | _INT | _FLOAT | _TEXT
_JSON = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)
_META = st.dictionaries(
    st.sampled_from(["owner", "user_id", "k"]) | _TEXT, _JSON | _SCALAR, max_size=4
)
_OFFSET = st.builds(
    lambda us: timezone(timedelta(microseconds=us)),
    st.integers(min_value=-(24 * 3600 * 10**6) + 1, max_value=24 * 3600 * 10**6 - 1),
) | st.sampled_from([UTC, timezone(timedelta(hours=-12)), timezone(timedelta(hours=14))])
_MOMENT: st.SearchStrategy[datetime] = st.datetimes(
    min_value=datetime.min, max_value=datetime.max, timezones=_OFFSET
) | st.datetimes(min_value=datetime.min, max_value=datetime.max)  # naive ones are refused
_NEAR = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=_OFFSET
)
_TYPE = st.from_regex(r"[A-Z][A-Z0-9_.]{0,20}", fullmatch=True) | st.sampled_from(
    ["audit", "COMPACTION", "ACME.AUDIT"]
)


@st.composite
def _message(draw: st.DrawFn) -> Message:
    role: Role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    meta = draw(_META)
    if role == "assistant":
        calls = draw(st.lists(st.builds(ToolCall, _TEXT, _TEXT, _TEXT), max_size=2))
        text = draw(st.none() | _TEXT)
        return Message("assistant", text, tuple(calls), metadata=meta)
    if role == "tool":
        results = draw(st.lists(st.builds(ToolResult, _TEXT, _TEXT, _TEXT), min_size=1, max_size=2))
        return Message("tool", None, tool_results=tuple(results), metadata=meta)
    return Message(role, draw(_TEXT), metadata=meta)


def _build(draw: Callable[[Any], Any], session_id: str, event_id: str) -> SessionEvent:
    timestamp = draw(st.none() | _NEAR | _MOMENT)
    if draw(st.booleans()):
        return SessionEvent.for_message(
            session_id,
            draw(_message()),
            event_id=event_id,
            metadata=draw(_META),
            synthetic=draw(st.booleans()),
            timestamp=timestamp,
        )
    return SessionEvent.for_payload(
        session_id,
        EventType(draw(_TYPE)),
        draw(_JSON),
        event_id=event_id,
        metadata=draw(_META),
        timestamp=timestamp,
    )


def _check_one(store: SessionStore, data: st.DataObject) -> None:
    draw = data.draw
    session_id = draw(_ID)
    try:
        session = Session(
            id=session_id,
            created_at=draw(_NEAR | _MOMENT),
            expires_at=draw(st.none() | _NEAR | _MOMENT),
            metadata=draw(_META),
        )
    except InvalidInput:
        event("session refused when built")
        return
    events: list[SessionEvent] = []
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        event_id = draw(_ID)
        if any(e.id == event_id for e in events):
            continue
        try:
            events.append(_build(draw, session.id, event_id))
        except InvalidInput:
            event("an event refused when built")
            continue
    try:
        store.create_session(session)
    except InvalidInput:
        event("session refused by the store")
        assert store.find_session(session.id) is None
        return
    try:
        _check_log(store, session, events)
    finally:
        store.delete_session(session.id)


def _check_log(store: SessionStore, session: Session, events: list[SessionEvent]) -> None:
    assert store.find_session(session.id) == session
    assert session in store.list_sessions()
    for name, value in session.metadata.items():
        if isinstance(value, (str, int)) and not isinstance(value, float):
            assert session in store.find_by_metadata(name, value), (name, value)
    try:
        version = store.append_events(session.id, events, 0)
    except InvalidInput:
        event("batch refused by the store")
        assert store.version(session.id) == 0
        assert store.events(session.id) == []
        return
    event(f"batch of {len(events)} stored")
    assert version == len(events)
    read = store.events(session.id)
    assert len(read) == len(events)
    for seq, (want, got) in enumerate(zip(events, read, strict=True), start=1):
        assert got.seq == seq
        assert got.timestamp is not None and got.timestamp.utcoffset() == timedelta(0)
        assert got == replace(want, seq=seq, timestamp=want.timestamp or got.timestamp)
    assert store.view(session.id) == [e for e in read if e.is_message]
