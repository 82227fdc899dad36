"""turnlog messages <-> provider JSON: lossless round trips and the exact wire shapes."""

import pytest

from turnlog import Message, ToolCall, ToolResult
from turnlog.models.anthropic_format import (
    AnthropicStream,
    from_anthropic_messages,
    response_from_anthropic,
    to_anthropic_messages,
)
from turnlog.models.base import MalformedReply
from turnlog.models.openai_format import (
    ERROR_PREFIX,
    OpenAIStream,
    from_openai_messages,
    response_from_openai,
    to_openai_messages,
)

WEATHER = ToolCall("c1", "get_weather", '{"city":"Oslo"}')
TIME = ToolCall("c2", "get_time", "{}")

# every message kind turnlog stores: system, user, assistant text, assistant with one call,
# text and parallel calls, calls only, tool results (parallel, one failed), a unicode text
CONVERSATION = [
    Message.system("You are terse."),
    Message.user("Weather in Oslo? 🌍"),
    Message.assistant("Checking.", [WEATHER]),
    Message.tool(ToolResult("c1", "get_weather", "3°C")),
    Message.assistant("And the time:", [WEATHER.__class__("c3", "get_time", '{"tz":"CET"}')]),
    Message.tool(ToolResult("c3", "get_time", "no such zone", is_error=True)),
    Message.assistant(None, [ToolCall("c4", "get_weather", '{"city":"Bergen"}'), TIME]),
    Message.tool(
        [
            ToolResult("c4", "get_weather", "rain", is_error=False),
            ToolResult("c2", "get_time", "timeout", is_error=True),
        ]
    ),
    Message.assistant("Oslo 3°C, Bergen rain."),
    Message.user("thanks"),
    Message.assistant("You're welcome."),
]


def test_openai_round_trip_is_lossless():
    assert from_openai_messages(to_openai_messages(CONVERSATION)) == CONVERSATION


def test_anthropic_round_trip_is_lossless():
    system, turns = to_anthropic_messages(CONVERSATION)
    assert from_anthropic_messages(system, turns) == CONVERSATION


@pytest.mark.parametrize(
    "messages",
    [
        [Message.user("a"), Message.user("b")],
        [Message.user("q"), Message.assistant("a"), Message.assistant("b", [TIME])],
        [
            Message.assistant(None, [WEATHER]),
            Message.tool(ToolResult("c1", "get_weather", "x")),
            Message.user("and now?"),
        ],
    ],
)
def test_anthropic_round_trip_survives_merged_turns(messages):
    assert from_anthropic_messages(*to_anthropic_messages(messages)) == messages


def test_openai_wire_shape():
    wire = to_openai_messages(CONVERSATION[:8])
    assert wire[0] == {"role": "system", "content": "You are terse."}
    assert wire[2] == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
            }
        ],
    }
    assert wire[3] == {"role": "tool", "tool_call_id": "c1", "content": "3°C"}
    assert wire[5] == {
        "role": "tool",
        "tool_call_id": "c3",
        "content": ERROR_PREFIX + "no such zone",
    }
    # "" and never null beside tool calls: llama-cpp-python's server answers 500 to null
    assert wire[6]["content"] == "" and len(wire[6]["tool_calls"]) == 2
    # one tool message with two results: two wire messages, in order
    assert [w["tool_call_id"] for w in wire[7:9]] == ["c4", "c2"]


def test_anthropic_wire_shape_system_on_top_and_roles_merged():
    system, turns = to_anthropic_messages(CONVERSATION)
    assert system == "You are terse."
    assert [t["role"] for t in turns] == ["user", "assistant"] * 5
    assert turns[1]["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    assert turns[4]["content"] == [
        {"type": "tool_result", "tool_use_id": "c3", "content": "no such zone", "is_error": True}
    ]
    # parallel results in one user turn, only the failed one flagged
    assert turns[6]["content"][1] == {
        "type": "tool_result",
        "tool_use_id": "c2",
        "content": "timeout",
        "is_error": True,
    }
    assert "is_error" not in turns[6]["content"][0]


def test_anthropic_merges_a_tool_result_and_the_next_user_message():
    _, turns = to_anthropic_messages(
        [
            Message.user("q"),
            Message.assistant(None, [WEATHER]),
            Message.tool(ToolResult("c1", "get_weather", "x")),
            Message.user("and?"),
            Message.user("hello?"),
        ]
    )
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert [b["type"] for b in turns[2]["content"]] == ["tool_result", "text", "text"]


def test_anthropic_joins_several_system_messages_and_drops_empty_assistants():
    system, turns = to_anthropic_messages(
        [Message.system("a"), Message.user("q"), Message("assistant"), Message.system("b")]
    )
    assert system == "a\n\nb"
    assert turns == [{"role": "user", "content": [{"type": "text", "text": "q"}]}]
    assert to_anthropic_messages([Message.user("q")])[0] is None


def test_arguments_that_are_not_a_json_object_reach_anthropic_whole():
    _, turns = to_anthropic_messages([Message.assistant(None, [ToolCall("c", "f", "[1,")])])
    assert turns[0]["content"][0]["input"] == {"arguments": "[1,"}


def test_reading_replies_refuses_malformed_bodies():
    for body in ({}, {"choices": []}, {"choices": [{"finish_reason": "stop"}]}, [], "x"):
        with pytest.raises(MalformedReply):
            response_from_openai(body)
    for body in ({}, {"content": "text"}, {"content": [{"type": "tool_use"}]}):
        with pytest.raises(MalformedReply):
            response_from_anthropic(body)
    with pytest.raises(MalformedReply):
        OpenAIStream().response()
    with pytest.raises(MalformedReply):
        AnthropicStream().response()
    stream = AnthropicStream()
    with pytest.raises(MalformedReply, match="overloaded"):
        stream.feed(
            {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}}
        )


def test_anthropic_stream_usage_keeps_the_latest_of_each_count():
    stream = AnthropicStream()
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 32, "output_tokens": 1},
    }
    stream.feed({"type": "message_start", "message": start})
    # a newer API repeats input_tokens in message_delta, without the cache counts
    stream.feed(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"input_tokens": 10, "output_tokens": 7},
        }
    )
    stream.feed({"type": "message_stop"})
    response = stream.response()
    assert (response.usage.input_tokens, response.usage.output_tokens) == (42, 7)
    assert response.usage.cached_input_tokens == 32
    assert response.stop_reason == "end_turn"
    assert response.message == Message.assistant("")  # an empty reply: no content blocks
