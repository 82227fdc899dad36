"""Stored bodies of every released format stay readable forever (fixtures never change)."""

import json
from pathlib import Path

import pytest

from turnlog import CompactionBoundary, CorruptData, InvalidInput, Message, ToolCall, ToolResult
from turnlog.codec import decode_event, encode_body, from_micros, to_micros

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
    row = ERROR_FIXTURES[name]
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
