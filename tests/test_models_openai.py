"""OpenAIChatModel and AsyncOpenAIChatModel against a real local server speaking Chat
Completions (tests/model_servers.py), through the official openai client."""

import pytest

from model_servers import ScriptedServer, Twin, openai_chunks, openai_completion, openai_error
from turnlog import InvalidInput, Message, ModelError, ToolCall, ToolResult
from turnlog.models import AsyncOpenAIChatModel, ChatResponse, OpenAIChatModel, Usage
from turnlog.models.openai_format import ERROR_PREFIX
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
        OpenAIChatModel,
        AsyncOpenAIChatModel,
        model="gpt-test",
        base_url=server.url + "/v1",
        api_key="sk-test",
        max_retries=0,
        timeout=2.0,
    )


def test_a_text_reply_with_usage_model_and_stop_reason(server, model):
    server.reply_json(openai_completion("Hello there."))

    response = model.respond([Message.system("Be kind."), Message.user("hi")])

    assert response == ChatResponse(
        Message.assistant("Hello there."),
        Usage(input_tokens=42, output_tokens=7, cached_input_tokens=32),
        "gpt-test-2025",
        "stop",
    )
    request = server.requests[-1]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "hi"},
        ],
    }


def test_parallel_tool_calls_and_the_tool_definitions_sent(server, model):
    server.reply_json(
        openai_completion(
            None,
            [("call_a", "get_weather", '{"city": "Oslo"}'), ("call_b", "get_weather", "{}")],
        )
    )

    response = model.respond([Message.user("weather?")], [WEATHER_TOOL])

    assert response.message == Message.assistant(
        None,
        [ToolCall("call_a", "get_weather", '{"city": "Oslo"}'), ToolCall("call_b", "get_weather")],
    )
    assert response.stop_reason == "tool_calls"
    assert server.last_body()["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER_TOOL.parameters,
            },
        }
    ]


def test_a_conversation_with_tool_results_is_sent_as_chat_completions(server, model):
    server.reply_json(openai_completion("Oslo is cold."))
    call = ToolCall("call_a", "get_weather", '{"city":"Oslo"}')

    model.respond(
        [
            Message.user("weather?"),
            Message.assistant(None, [call, ToolCall("call_b", "get_weather", "{}")]),
            Message.tool(
                [
                    ToolResult("call_a", "get_weather", "3°C"),
                    ToolResult("call_b", "get_weather", "city missing", is_error=True),
                ]
            ),
        ]
    )

    sent = server.last_body()["messages"]
    assert sent[1]["tool_calls"][0] == {
        "id": "call_a",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
    }
    assert sent[2:] == [
        {"role": "tool", "tool_call_id": "call_a", "content": "3°C"},
        {"role": "tool", "tool_call_id": "call_b", "content": ERROR_PREFIX + "city missing"},
    ]


def test_streaming_yields_the_deltas_then_the_same_response(server, model):
    server.reply_sse(
        openai_chunks(
            ["Let me ", "look."],
            [("call_a", "get_weather", ['{"ci', 'ty":"Oslo"}']), ("call_b", "get_time", [])],
        )
    )
    server.reply_json(
        openai_completion(
            "Let me look.",
            [("call_a", "get_weather", '{"city":"Oslo"}'), ("call_b", "get_time", "{}")],
            usage={"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49},
        )
    )

    events = model.stream([Message.user("weather?")], [WEATHER_TOOL])
    whole = model.respond([Message.user("weather?")], [WEATHER_TOOL])

    assert events[:-1] == ["Let me ", "look."]
    assert events[-1] == whole
    assert whole.message.tool_calls[1] == ToolCall("call_b", "get_time", "{}")
    stream_request, respond_request = (r.body for r in server.requests)
    assert stream_request.pop("stream") is True
    assert stream_request.pop("stream_options") == {"include_usage": True}
    assert stream_request == respond_request


def test_complete_returns_the_message(server, model):
    server.reply_json(openai_completion("a summary"))
    assert model.complete([Message.user("sum up")]) == Message.assistant("a summary")


@pytest.mark.parametrize(
    ("script", "status"),
    [
        (lambda s: s.reply_json(openai_error(401, "Incorrect API key"), 401), 401),
        (lambda s: s.reply_json(openai_error(403, "Forbidden"), 403), 403),
        (lambda s: s.reply_json(openai_error(404, "The model does not exist"), 404), 404),
        (lambda s: s.reply_json(openai_error(429, "Rate limit"), 429, **{"retry-after": "0"}), 429),
        (lambda s: s.reply_raw(b"upstream exploded", 500, "text/plain"), 500),
        (lambda s: s.reply_json(openai_error(503, "overloaded"), 503), 503),
        (lambda s: s.reply_raw(b'{"choices": [ {"mess'), 200),
        (lambda s: s.reply_json({"id": "x", "object": "chat.completion", "choices": []}), 200),
        (lambda s: s.reply_slow(5), None),
    ],
    ids=["401", "403", "404", "429", "500", "503", "malformed", "no-choices", "timeout"],
)
def test_every_failure_is_one_model_error(server, model, script, status):
    model.settings["timeout"] = 0.3
    script(server)
    with pytest.raises(ModelError) as caught:
        model.respond([Message.user("hi")])
    assert (caught.value.provider, caught.value.status) == ("openai", status)
    assert "nothing was appended" in str(caught.value)


def test_429_error_message_says_what_to_do(server, model):
    server.reply_json(openai_error(429, "Rate limit"), 429)
    with pytest.raises(ModelError, match=r"rate limited .* max_retries"):
        model.respond([Message.user("hi")])


def test_a_stream_that_fails_is_one_model_error(server, model):
    server.reply_json(openai_error(401, "Incorrect API key"), 401)
    with pytest.raises(ModelError) as caught:
        model.stream([Message.user("hi")])
    assert caught.value.status == 401
    server.reply_sse(openai_chunks(["a"])[:2])  # the stream ends before any usage or finish
    server.reply_sse([(None, {"choices": "nope"})])
    with pytest.raises(ModelError, match="ended before it was complete"):
        model.stream([Message.user("hi")])  # a stream cut short is no reply (issue 24, item 1)
    with pytest.raises(ModelError) as caught:
        model.stream([Message.user("hi")])
    assert caught.value.status == 200


def test_the_clients_own_retries_outlast_a_429(server, model):
    model.settings["max_retries"] = 1
    server.reply_json(openai_error(429, "Rate limit"), 429, **{"retry-after": "0"})
    server.reply_json(openai_completion("made it"))

    assert model.respond([Message.user("hi")]).message.text == "made it"
    assert len(server.requests) == 2


def test_a_client_of_your_own(server):
    import openai

    with openai.OpenAI(base_url=server.url + "/v1", api_key="mine", max_retries=0) as client:
        model = OpenAIChatModel("gpt-test", client=client, options={"temperature": 0})
        server.reply_json(openai_completion("ok"))
        assert model.respond([Message.user("hi")]).message.text == "ok"
        model.close()  # not ours: the client stays open
        server.reply_json(openai_completion("still ok"))
        assert model.respond([Message.user("hi")]).message.text == "still ok"
    assert server.requests[0].headers["authorization"] == "Bearer mine"
    assert server.requests[0].body["temperature"] == 0
    with pytest.raises(InvalidInput, match="either client or base_url"):
        OpenAIChatModel("gpt-test", client=client, base_url="http://x")
    with pytest.raises(InvalidInput):
        OpenAIChatModel(" ", api_key="k")


def test_no_api_key_is_invalid_input(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(InvalidInput, match="OPENAI_API_KEY"):
        OpenAIChatModel("gpt-test", base_url="http://127.0.0.1:9/v1")


def test_leaving_a_stream_early_closes_it(server):
    import asyncio
    import time
    from contextlib import aclosing, closing

    long_reply = openai_chunks(["one "] + ["more "] * 40)
    server.reply_sse(long_reply, pause=0.02)
    settings = {"base_url": server.url + "/v1", "api_key": "k", "max_retries": 0, "timeout": 2.0}
    with OpenAIChatModel("gpt-test", **settings) as model:
        with closing(model.stream([Message.user("count")])) as events:
            assert next(events) == "one "
        server.reply_json(openai_completion("next call"))
        assert model.respond([Message.user("again")]).message.text == "next call"
    server.reply_sse(long_reply, pause=0.02)

    async def main():
        async with AsyncOpenAIChatModel("gpt-test", **settings) as model:
            async with aclosing(model.stream([Message.user("count")])) as events:
                async for event in events:
                    assert event == "one "
                    break
            server.reply_json(openai_completion("next call"))
            return await model.respond([Message.user("again")])

    assert asyncio.run(main()).message.text == "next call"
    deadline = time.monotonic() + 3
    while server.aborted < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.aborted == 2  # both streams were closed, not read to their end


def test_a_stream_that_stalls_past_the_timeout_is_one_model_error(server, model):
    model.settings["timeout"] = 0.3
    server.reply_sse(openai_chunks(["a", "b", "c"]), pause=0.6)
    with pytest.raises(ModelError) as caught:
        model.stream([Message.user("hi")])
    assert (caught.value.provider, caught.value.status) == ("openai", None)
    assert "did not answer in time" in str(caught.value)
