"""Stored bodies of every released format stay readable forever (fixtures never change)."""

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec.structs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnlog.events
from turnlog import (
    CompactionBoundary,
    CorruptData,
    EventType,
    InvalidInput,
    Message,
    SessionEvent,
    TokenCount,
    ToolCall,
    ToolResult,
)
from turnlog.codec import decode_event, encode_body, events_from_rows, from_micros, to_micros
from turnlog.events import MAX_TIMESTAMP, MIN_TIMESTAMP
from turnlog.payloads import ToolsDiscovered
from turnlog.toolsearch.discovery import MAX_QUERY_CHARS, discovered_names

FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "bodies_v1.json").read_text("utf-8"))


def _decode(name):
    row = FIXTURES[name]
    return decode_event(
        event_id=name,
        session_id="s",
        seq=1,
        type_name=row["type"],
        timestamp_micros=1_700_000_000_000_000,
        synthetic=row["synthetic"],
        body=row["body"].encode(),
    )


def test_format_1_messages_decode():
    assert _decode("user").message == Message.user("héllo 🌍")
    tools = _decode("assistant_tools")
    assert tools.message == Message.assistant(
        "checking",
        [ToolCall("c1", "get_weather", '{"city":"Oslo"}'), ToolCall("c2", "get_time", "{}")],
    )
    assert tools.metadata == {"model": "gpt-4o", "usage": {"in": 12, "out": 3}}
    assert _decode("tool_parallel").message == Message.tool(
        [ToolResult("c1", "get_weather", "3°C"), ToolResult("c2", "get_time", "09:00")]
    )
    assert _decode("synthetic_summary").synthetic


def test_format_1_payloads_and_boundaries_decode():
    assert _decode("custom").payload == {"who": "ann", "n": [1, 2.5, None, True]}
    boundary = CompactionBoundary.from_event(_decode("boundary"))
    assert boundary.preserved_event_ids == ("u9", "a9")
    assert (boundary.covered_event_count, boundary.tokens_estimated_saved) == (7, 120)


def test_encoding_is_stable_for_the_fixtures():
    for name in FIXTURES:
        event = _decode(name)
        assert encode_body(event).decode() == FIXTURES[name]["body"]


def test_timestamps_round_trip_to_the_microsecond():
    moment = from_micros(1_764_000_000_123_456)
    assert to_micros(moment) == 1_764_000_000_123_456


@pytest.mark.parametrize(
    "body", [b"{", b'{"v": 99}', b'{"v": 1, "message": {"role": "wizard"}}', b"[]"]
)
def test_a_damaged_body_is_corrupt_data_naming_session_and_seq(body):
    with pytest.raises(CorruptData, match=r"seq 7 .*session 'sx'"):
        decode_event(
            event_id="e",
            session_id="sx",
            seq=7,
            type_name="MESSAGE",
            timestamp_micros=0,
            synthetic=False,
            body=body,
        )


ERROR_FIXTURES = json.loads(
    (Path(__file__).parent / "fixtures" / "bodies_v1_tool_error.json").read_text("utf-8")
)


def _decode_error_fixture(name):
    return _decode_row(ERROR_FIXTURES, name)


def _decode_row(fixtures, name):
    row = fixtures[name]
    return decode_event(
        event_id=name,
        session_id="s",
        seq=1,
        type_name=row["type"],
        timestamp_micros=1_700_000_000_000_000,
        synthetic=row["synthetic"],
        body=row["body"].encode(),
    )


def test_a_failed_tool_result_carries_its_error_flag():
    event = _decode_error_fixture("tool_error")
    assert event.message == Message.tool(
        [
            ToolResult("c1", "get_weather", "city not found", is_error=True),
            ToolResult("c2", "get_time", "09:00"),
        ]
    )
    assert encode_body(event).decode() == ERROR_FIXTURES["tool_error"]["body"]


def test_old_tool_results_read_as_not_failed():
    results = _decode("tool_parallel").message.tool_results
    assert [r.is_error for r in results] == [False, False]


def test_is_error_must_be_a_bool():
    with pytest.raises(InvalidInput):
        ToolResult("c1", "f", "x", is_error="yes")


def _row(body, *, type_name="MESSAGE", micros=1_700_000_000_000_001, synthetic=False):
    return decode_event(
        event_id="e",
        session_id="sx",
        seq=7,
        type_name=type_name,
        timestamp_micros=micros,
        synthetic=synthetic,
        body=body,
    )


def test_decoded_events_equal_the_events_built_by_hand():
    # The decode builds records without their checks: each must equal the checked one.
    events = [
        SessionEvent.for_message("sx", Message.user("hi"), event_id="e", metadata={"k": [1]}),
        SessionEvent.for_message(
            "sx",
            Message.assistant("looking", [ToolCall("c1", "f", '{"a": 1}'), ToolCall("c2", "g")]),
            event_id="e",
        ),
        SessionEvent.for_message(
            "sx",
            Message.tool([ToolResult("c1", "f", "boom", is_error=True), ToolResult("c2", "g", "")]),
            event_id="e",
        ),
        SessionEvent.for_message(
            "sx", Message("assistant", "sum", metadata={"m": None}), event_id="e", synthetic=True
        ),
        SessionEvent.for_payload("sx", EventType.of("ACME.NOTE"), {"n": [1, 2.5]}, event_id="e"),
    ]
    for event in events:
        got = _row(
            encode_body(event),
            type_name=event.type.name,
            micros=1_700_000_000_000_001,
            synthetic=event.synthetic,
        )
        stamp = from_micros(1_700_000_000_000_001)
        assert got == msgspec.structs.replace(event, seq=7, timestamp=stamp)
        assert (type(got.synthetic) is bool and got.type is event.type) or got.type == event.type
        if got.message is not None:
            assert type(got.message.tool_calls) is tuple
            assert type(got.message.tool_results) is tuple
    assert _row(b'{"v":1,"message":{"role":"user","text":"x"}}', synthetic=1).synthetic is True


@pytest.mark.parametrize(
    ("body", "type_name", "micros", "why"),
    [
        (b'{"v": 1, "payload": 1}', "MESSAGE", 0, "without a message"),
        (b'{"v": 1, "message": {"role": "user"}}', "COMPACTION", 0, "with a message"),
        (b'{"v": 1, "message": {"role": "user"}}', "MESSAGE", True, "integer microseconds"),
        (b'{"v": 1, "message": {"role": "user"}}', "MESSAGE", "12", "integer microseconds"),
        (b'{"v": 1, "message": {"role": "user"}}', "MESSAGE", 2**62, ""),
        (b'{"v": 1, "message": {"role": "user", "tool_calls": [["c"]]}}', "MESSAGE", 0, ""),
        (b'{"v": 1, "message": {"role": "wizard"}}', "MESSAGE", 0, "wizard"),
        (b'{"v": 1, "message": {"role": "user", "text": 5}}', "MESSAGE", 0, "text"),
        (
            b'{"v": 1, "message": {"role": "tool", "tool_results": [[1, "f", "x"]]}}',
            "MESSAGE",
            0,
            "",
        ),
    ],
)
def test_a_damaged_row_is_corrupt_data(body, type_name, micros, why):
    with pytest.raises(
        CorruptData, match=rf"seq 7 \('e'\) of session 'sx' cannot be read: .*{why}"
    ):
        _row(body, type_name=type_name, micros=micros)


TOKEN_FIXTURES = json.loads(
    (Path(__file__).parent / "fixtures" / "bodies_v1_tokens.json").read_text("utf-8")
)


def _decode_tokens_fixture(name):
    return _decode_row(TOKEN_FIXTURES, name)


def test_a_stored_token_count_reads_back_with_its_counter():
    user = _decode_tokens_fixture("counted_user")
    assert user.message == Message.user("What's the weather in Oslo?")
    assert user.tokens == TokenCount("o200k_base toktok-rs/0.3.0", 9)
    tool = _decode_tokens_fixture("counted_tool")
    assert tool.tokens == TokenCount("chars/1", 27)
    assert tool.metadata == {"k": 1}
    for name in TOKEN_FIXTURES:
        event = _decode_tokens_fixture(name)
        assert encode_body(event).decode() == TOKEN_FIXTURES[name]["body"]


def test_bodies_without_a_count_read_as_uncounted_and_are_written_without_one():
    for name in FIXTURES:
        event = _decode(name)
        assert event.tokens is None
        assert b'"tokens"' not in encode_body(event), name


@pytest.mark.parametrize(
    "tokens",
    ['["c", -1]', '["", 3]', '["c"]', '"c"', '["c", 1.5]', '["c", true]'],
)
def test_a_damaged_token_count_is_corrupt_data(tokens):
    body = '{"v":1,"message":{"role":"user","text":"hi"},"tokens":' + tokens + "}"
    with pytest.raises(CorruptData):
        _row(body.encode())


def test_a_count_on_a_non_message_body_is_corrupt_data():
    body = b'{"v":1,"payload":{"a":1},"tokens":["c",3]}'
    with pytest.raises(CorruptData):
        _row(body, type_name="ACME.AUDIT")


def test_decoded_counts_are_shared_per_counter_and_value_and_never_mixed_up(monkeypatch):
    # an empty table of shared counts: the counters other tests of this process used take no slot
    monkeypatch.setattr(turnlog.events, "_shared_counts", {})

    def counted(counter, count):
        body = json.dumps(
            {"v": 1, "message": {"role": "user", "text": "hi"}, "tokens": [counter, count]}
        )
        return _row(body.encode()).tokens

    first, again = counted("codec-test/a", 12), counted("codec-test/a", 12)
    assert first == TokenCount("codec-test/a", 12)
    assert again is first  # one record per distinct count, not one per event
    assert counted("codec-test/a", 13) == TokenCount("codec-test/a", 13)
    assert counted("codec-test/b", 12) == TokenCount("codec-test/b", 12)  # another counter
    big = counted("codec-test/a", 1 << 20)  # beyond the shared range: made, not kept
    assert big == TokenCount("codec-test/a", 1 << 20)
    assert counted("codec-test/a", 1 << 20) is not big
    for n in range(40):  # more counters than are shared: each still reads its own count
        assert counted(f"codec-test/many-{n}", n) == TokenCount(f"codec-test/many-{n}", n)


_BODY = b'{"v": 1, "message": {"role": "user", "text": "t"}}'
_MICROS = st.one_of(
    st.integers(to_micros(MIN_TIMESTAMP), to_micros(MAX_TIMESTAMP)),
    st.integers(0, 5_000_000_000_000_000),  # around the float path's limit (4e15)
    st.integers(1_600_000_000_000_000, 1_900_000_000_000_000),  # the years of real logs
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_MICROS, min_size=16, max_size=40))
def test_decoded_timestamps_are_exact_to_the_microsecond(stamps):
    # One batch (from 16 rows, its timestamps are converted all at once) and each row alone.
    # Oracle: integer arithmetic on a timedelta, never a float.
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    want = [epoch + timedelta(microseconds=m) for m in stamps]
    rows = [(i, f"e{i}", "MESSAGE", m, 0, _BODY) for i, m in enumerate(stamps, 1)]
    got = [e.timestamp for e in events_from_rows("sx", rows)]
    assert got == want
    assert all(t.tzinfo is UTC for t in got)
    assert [_row(_BODY, micros=m).timestamp for m in stamps] == want


def test_a_damaged_timestamp_in_a_batch_names_its_row():
    for bad in (2**62, -(2**62), "12", 1.5, True):
        rows = [(i, f"e{i}", "MESSAGE", 1_764_000_000_000_000 + i, 0, _BODY) for i in range(1, 31)]
        rows[20] = (21, "e21", "MESSAGE", bad, 0, _BODY)
        with pytest.raises(CorruptData, match=r"seq 21 \('e21'\) of session 'sx'"):
            events_from_rows("sx", rows)


def test_timestamps_at_the_edges_of_the_float_path_are_exact():
    edges = [0, 1, 999_999, 1_000_000, 3_999_999_999_999_999, 4_000_000_000_000_000]
    edges += [3_999_999_999_000_000 + k for k in range(0, 1_000_000, 997)]
    edges += [1_764_633_600_000_000 + k for k in range(0, 2_000_000, 7)]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    rows = [
        (i, f"e{i}", "MESSAGE", m, 0, b'{"v": 1, "message": {"role": "user", "text": "t"}}')
        for i, m in enumerate(edges, 1)
    ]
    got = [e.timestamp for e in events_from_rows("sx", rows)]
    assert got == [epoch + timedelta(microseconds=m) for m in edges]


def test_decoding_skips_the_checks_of_no_other_record():
    # Records decode without their Python checks; records built meanwhile on another thread,
    # and afterwards on this one (after a damaged row too), are checked as always.
    body = b'{"v": 1, "message": {"role": "user", "text": "t"}}'
    started, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow_rows():
        yield (1, "a", "MESSAGE", 0, 0, body)
        started.set()
        release.wait(10)
        yield (2, "b", "MESSAGE", 0, 0, body)

    def decode():
        try:
            events_from_rows("sx", slow_rows())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    reader = threading.Thread(target=decode)
    reader.start()
    assert started.wait(10)
    try:
        with pytest.raises(InvalidInput, match="unknown role"):
            Message("wizard", "hi")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="event id"):
            SessionEvent.for_message("sx", Message.user("hi"), event_id="")
    finally:
        release.set()
        reader.join(10)
    assert not errors
    with pytest.raises(CorruptData):
        events_from_rows("sx", [(1, "a", "MESSAGE", 0, 0, body), (2, "b", "MESSAGE", 0, 0, b"{")])
    with pytest.raises(InvalidInput, match="unknown role"):
        Message("wizard", "hi")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="a tool call's id"):
        ToolCall(5, "f")  # type: ignore[arg-type]


def test_decoded_records_are_the_public_types_and_frozen():
    body = encode_body(
        SessionEvent.for_message(
            "sx", Message.assistant("x", [ToolCall("c1", "f")]), event_id="e", metadata={"k": 1}
        )
    )
    event = _row(body)
    assert type(event) is SessionEvent and type(event.message) is Message
    assert type(event.message.tool_calls) is tuple
    assert type(event.message.tool_calls[0]) is ToolCall
    with pytest.raises(AttributeError):
        event.message.text = "y"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        event.seq = 8  # type: ignore[misc]


# -- the payload records: boundaries and discoveries, typed once per read ------------------------

PAYLOAD_FIXTURES = json.loads(
    (Path(__file__).parent / "fixtures" / "bodies_v1_payloads.json").read_text("utf-8")
)
"""COMPACTION and TURNLOG.TOOLS_DISCOVERED bodies as turnlog wrote them before their payloads
became typed records, each with what that version decoded it to (`decoded`, and for a boundary
what `from_event` gave): they must read back as the same events, forever."""


def _decode_payload_fixture(name):
    row = PAYLOAD_FIXTURES[name]
    return decode_event(
        event_id=row["id"],
        session_id="s",
        seq=5,
        type_name=row["type"],
        timestamp_micros=1_700_000_000_000_000,
        synthetic=row["synthetic"],
        body=row["body"].encode(),
    )


@pytest.mark.parametrize("name", sorted(PAYLOAD_FIXTURES))
def test_payload_fixtures_decode_to_the_same_events_and_bytes(name):
    row = PAYLOAD_FIXTURES[name]
    event = _decode_payload_fixture(name)
    assert (event.id, event.type.name, event.seq) == (row["id"], row["type"], 5)
    assert event.payload == row["decoded"]["payload"]
    assert dict(event.metadata) == row["decoded"]["metadata"]
    built = SessionEvent.for_payload(
        "s",
        EventType.of(row["type"]),
        row["decoded"]["payload"],
        event_id=row["id"],
        metadata=row["decoded"]["metadata"],
        timestamp=from_micros(1_700_000_000_000_000),
    )
    assert event == msgspec.structs.replace(built, seq=5)
    assert encode_body(event).decode() == row["body"]  # the format did not change


@pytest.mark.parametrize("name", sorted(n for n in PAYLOAD_FIXTURES if "boundary" in n))
def test_a_stored_boundary_is_decoded_once_with_its_event(name):
    want = PAYLOAD_FIXTURES[name]["boundary"]
    event = _decode_payload_fixture(name)
    boundary = event.record
    assert type(boundary) is CompactionBoundary
    assert boundary == CompactionBoundary(
        want["id"],
        tuple(want["pinned_event_ids"]),
        tuple(want["summary_event_ids"]),
        tuple(want["preserved_event_ids"]),
        want["covered_event_count"],
        want["tokens_estimated_saved"],
        want["strategy"],
        want.get("replaced", {}),
    )
    assert type(boundary.preserved_event_ids) is tuple
    assert CompactionBoundary.from_event(event) is boundary  # read, not parsed again
    assert boundary.to_payload() == event.payload


@pytest.mark.parametrize("name", sorted(n for n in PAYLOAD_FIXTURES if "discovered" in n))
def test_a_stored_discovery_is_decoded_once_with_its_event(name):
    payload = PAYLOAD_FIXTURES[name]["decoded"]["payload"]
    event = _decode_payload_fixture(name)
    assert event.record == ToolsDiscovered(tuple(payload["names"]), payload["query"])
    assert type(event.record.names) is tuple
    assert discovered_names([event]) == payload["names"]
    assert len(event.record.query) == min(len(payload["query"]), MAX_QUERY_CHARS)


_GOOD_BOUNDARY = {
    "pinned_event_ids": ["p1"],
    "summary_event_ids": [],
    "preserved_event_ids": ["u1", "x1"],
    "covered_event_count": 3,
    "tokens_estimated_saved": 10,
    "strategy": "t",
}


@pytest.mark.parametrize(
    "change",
    [
        {"strategy": None},
        {"covered_event_count": True},
        {"covered_event_count": 1.0},
        {"pinned_event_ids": "p1"},
        {"pinned_event_ids": [" "]},
        {"preserved_event_ids": ["u1", "x\u0085"]},
        {"preserved_event_ids": ["x" * 256]},
        {"replaced": {"x1": "x1"}},
        {"replaced": {"nope": "t1"}},
        {"replaced": {"x1": "t1", "u1": "t1"}},
        {"replaced": None},
        {"tokens_estimated_saved": None},
    ],
)
def test_a_damaged_stored_boundary_still_reads_and_from_event_says_why(change):
    payload = {k: v for k, v in {**_GOOD_BOUNDARY, **change}.items() if v is not None}
    if "replaced" in change and change["replaced"] is None:
        payload["replaced"] = None
    body = json.dumps({"v": 1, "payload": payload}).encode()
    event = _row(body, type_name="COMPACTION")  # the log stays readable (`turnlog show --log`)
    assert event.payload == payload and event.record is None
    with pytest.raises(CorruptData, match=r"compaction boundary event 'e' is damaged: \w"):
        CompactionBoundary.from_event(event)


def test_a_boundary_from_another_writer_keeps_what_it_holds_besides():
    payload = {**_GOOD_BOUNDARY, "replaced": {}, "note": {"by": "a migration"}}
    body = json.dumps({"v": 1, "payload": payload}, separators=(",", ":")).encode()
    event = _row(body, type_name="COMPACTION")
    assert event.payload == payload  # read back as stored, the unknown key included
    assert encode_body(event) == body
    assert event.record == CompactionBoundary("e", ("p1",), (), ("u1", "x1"), 3, 10, "t")


def test_an_event_built_from_a_boundary_carries_it_through_a_store(tmp_path):
    from turnlog import Session, SqliteStore

    boundary = CompactionBoundary("b", (), (), ("u",), 1, 0, "t")
    event = boundary.to_event("s")
    assert event.record is boundary and CompactionBoundary.from_event(event) is boundary
    bare = SessionEvent.for_payload("s", EventType.COMPACTION, boundary.to_payload(), event_id="b")
    assert bare == event and bare.record is None  # built from a bare payload: read on demand
    assert CompactionBoundary.from_event(bare) == boundary
    store = SqliteStore(tmp_path / "h4.db")
    store.create_session(Session("s", created_at=from_micros(1_700_000_000_000_000)))
    store.append_events("s", [SessionEvent.for_message("s", Message.user("hi"), event_id="u")], 0)
    store.append_events("s", [event], 1)
    stored = store.events("s")[1]
    assert stored.record == boundary and CompactionBoundary.from_event(stored) is stored.record
    assert [e.id for e in store.view("s")] == ["u"]
    store.close()
