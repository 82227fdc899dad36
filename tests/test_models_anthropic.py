"""AnthropicChatModel and AsyncAnthropicChatModel against a real local server speaking the
Messages API (tests/model_servers.py), through the official anthropic client."""

import pytest

from model_servers import (
    ScriptedServer,
    Twin,
    anthropic_error,
    anthropic_events,
    anthropic_message,
)
from turnlog import InvalidInput, Message, ModelError, ToolCall, ToolResult
from turnlog.models import AnthropicChatModel, AsyncAnthropicChatModel, ChatResponse, Usage
from turnlog.toolsearch import ToolReference

WEATHER_TOOL = ToolReference(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


@pytest.fixture(params=["sync", "async"])
def model(request, server):
    return Twin(
        request.param,
        AnthropicChatModel,
        AsyncAnthropicChatModel,
        model="claude-test",
        base_url=server.url,
        api_key="sk-ant-test",
        max_retries=0,
        timeout=2.0,
        max_tokens=512,
    )


def test_a_text_reply_with_usage_model_and_stop_reason(server, model):
    server.reply_json(anthropic_message("Hello there."))

    response = model.respond([Message.system("Be kind."), Message.user("hi")])

    # input tokens: 10 uncached + 32 read from the cache + 0 written to it
    assert response == ChatResponse(
        Message.assistant("Hello there."),
        Usage(input_tokens=42, output_tokens=7, cached_input_tokens=32),
        "claude-test-2025",
        "end_turn",
    )
    request = server.requests[-1]
    assert request.path == "/v1/messages"
    # the key travels as x-api-key (older clients) or as a bearer token (newer ones)
    assert "sk-ant-test" in (
        request.headers.get("x-api-key"),
        request.headers.get("authorization", "")[7:],
    )
    assert "anthropic-version" in request.headers
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 512,
        "system": "Be kind.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


def test_parallel_tool_uses_and_the_tool_definitions_sent(server, model):
    server.reply_json(
        anthropic_message(
            "Looking.",
            [("toolu_a", "get_weather", {"city": "Oslo"}), ("toolu_b", "get_weather", {})],
        )
    )

    response = model.respond([Message.user("weather?")], [WEATHER_TOOL])

    assert response.message == Message.assistant(
        "Looking.",
        [
            ToolCall("toolu_a", "get_weather", '{"city":"Oslo"}'),
            ToolCall("toolu_b", "get_weather", "{}"),
        ],
    )
    assert response.stop_reason == "tool_use"
    assert server.last_body()["tools"] == [
        {
            "name": "get_weather",
            "description": "The weather in a city.",
            "input_schema": WEATHER_TOOL.parameters,
        }
    ]
    assert "system" not in server.last_body()


def test_a_conversation_is_sent_merged_with_tool_results_and_their_error_flag(server, model):
    server.reply_json(anthropic_message("Oslo is cold."))

    model.respond(
        [
            Message.system("Be kind."),
            Message.user("weather?"),
            Message.assistant(
                None,
                [
                    ToolCall("toolu_a", "get_weather", '{"city":"Oslo"}'),
                    ToolCall("toolu_b", "get_weather", "{}"),
                ],
            ),
            Message.tool(
                [
                    ToolResult("toolu_a", "get_weather", "3°C"),
                    ToolResult("toolu_b", "get_weather", "city missing", is_error=True),
                ]
            ),
            Message.user("and tomorrow?"),
        ]
    )

    body = server.last_body()
    assert body["system"] == "Be kind."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
                {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "3°C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "city missing",
                    "is_error": True,
                },
                {"type": "text", "text": "and tomorrow?"},
            ],
        },
    ]


def test_streaming_yields_the_deltas_then_the_same_response(server, model):
    server.reply_sse(
        anthropic_events(
            ["Let me ", "look."],
            [("toolu_a", "get_weather", ['{"ci', 'ty": "Oslo"}']), ("toolu_b", "get_time", [])],
        )
    )
    server.reply_json(
        anthropic_message(
            "Let me look.",
            [("toolu_a", "get_weather", {"city": "Oslo"}), ("toolu_b", "get_time", {})],
        )
    )

    events = model.stream([Message.user("weather?")], [WEATHER_TOOL])
    whole = model.respond([Message.user("weather?")], [WEATHER_TOOL])

    assert events[:-1] == ["Let me ", "look."]
    assert events[-1] == whole
    stream_request, respond_request = (r.body for r in server.requests)
    assert stream_request.pop("stream") is True
    assert stream_request == respond_request


def test_complete_returns_the_message(server, model):
    server.reply_json(anthropic_message("a summary"))
    assert model.complete([Message.user("sum up")]) == Message.assistant("a summary")


@pytest.mark.parametrize(
    ("script", "status"),
    [
        (lambda s: s.reply_json(anthropic_error("authentication_error", "bad key"), 401), 401),
        (lambda s: s.reply_json(anthropic_error("not_found_error", "model: x"), 404), 404),
        (
            lambda s: s.reply_json(
                anthropic_error("rate_limit_error", "slow down"), 429, **{"retry-after": "0"}
            ),
            429,
        ),
        (lambda s: s.reply_json(anthropic_error("api_error", "internal"), 500), 500),
        (lambda s: s.reply_json(anthropic_error("overloaded_error", "busy"), 529), 529),
        (lambda s: s.reply_raw(b'{"content": [ {"ty'), 200),
        (lambda s: s.reply_json({"id": "msg_1", "type": "message", "role": "assistant"}), 200),
        (lambda s: s.reply_slow(5), None),
    ],
    ids=["401", "404", "429", "500", "529", "malformed", "no-content", "timeout"],
)
def test_every_failure_is_one_model_error(server, model, script, status):
    model.settings["timeout"] = 0.3
    script(server)
    with pytest.raises(ModelError) as caught:
        model.respond([Message.user("hi")])
    assert (caught.value.provider, caught.value.status) == ("anthropic", status)
    assert "nothing was appended" in str(caught.value)


def test_an_error_event_mid_stream_is_one_model_error(server, model):
    events = anthropic_events(["partial "])[:3]
    events.append(("error", anthropic_error("overloaded_error", "Overloaded")))
    server.reply_sse(events)
    with pytest.raises(ModelError) as caught:
        model.stream([Message.user("hi")])
    assert caught.value.provider == "anthropic"


def test_the_clients_own_retries_outlast_a_429(server, model):
    model.settings["max_retries"] = 1
    server.reply_json(anthropic_error("rate_limit_error", "slow"), 429, **{"retry-after": "0"})
    server.reply_json(anthropic_message("made it"))

    assert model.respond([Message.user("hi")]).message.text == "made it"
    assert len(server.requests) == 2


def test_a_client_of_your_own_and_checked_arguments(server):
    import anthropic

    with anthropic.Anthropic(base_url=server.url, api_key="mine", max_retries=0) as client:
        model = AnthropicChatModel("claude-test", client=client, options={"temperature": 0})
        server.reply_json(anthropic_message("ok"))
        assert model.respond([Message.user("hi")]).message.text == "ok"
    assert "mine" in server.requests[0].headers.get("authorization", "") + server.requests[
        0
    ].headers.get("x-api-key", "")
    assert server.requests[0].body["temperature"] == 0
    with pytest.raises(InvalidInput, match="either client or api_key"):
        AnthropicChatModel("claude-test", client=client, api_key="k")
    with pytest.raises(InvalidInput, match="max_tokens"):
        AnthropicChatModel("claude-test", api_key="k", max_tokens=0)


def test_a_stream_that_stalls_past_the_timeout_is_one_model_error(server, model):
    model.settings["timeout"] = 0.3
    server.reply_sse(anthropic_events(["a", "b", "c"]), pause=0.6)
    with pytest.raises(ModelError) as caught:
        model.stream([Message.user("hi")])
    assert (caught.value.provider, caught.value.status) == ("anthropic", None)
    assert "did not answer in time" in str(caught.value)
