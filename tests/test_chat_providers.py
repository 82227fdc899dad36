"""The turn runner over the real adapters and the official clients, against local servers that
speak the OpenAI and Anthropic wire formats (tests/model_servers.py): what goes over the wire,
what is stored."""

import json

import pytest

from chat_harness import KINDS, Harness, alternation_breaks, enforce_alternation
from model_servers import (
    ScriptedServer,
    anthropic_error,
    anthropic_events,
    anthropic_message,
    openai_chunks,
    openai_completion,
    openai_error,
)
from prompt_rules import breaks as violations
from turnlog.chat_async import NO_REPLY
from turnlog.compaction.reported import USAGE_KEY
from turnlog.errors import InvalidInput, ModelError
from turnlog.models import (
    AnthropicChatModel,
    AsyncAnthropicChatModel,
    AsyncOpenAIChatModel,
    OpenAIChatModel,
)
from turnlog.turns import ChatTurn, ToolRun

PROVIDERS = ["openai", "anthropic"]


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city.
    """
    return f"{city}: 18C, clear"


def get_time(zone: str = "UTC") -> str:
    """The time in a time zone."""
    return f"09:30 {zone}"


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


@pytest.fixture(params=[(k, p) for k in KINDS for p in PROVIDERS], ids=lambda kp: "-".join(kp))
def setup(request, tmp_path, server):
    kind, provider = request.param
    h = Harness(kind, tmp_path)
    settings = {"base_url": server.url, "api_key": "test-key", "max_retries": 0, "timeout": 5.0}
    if provider == "openai":
        adapter = OpenAIChatModel if kind == "sync" else AsyncOpenAIChatModel
        settings["base_url"] = server.url + "/v1"
        model = adapter("gpt-test", **settings)
    else:
        adapter = AnthropicChatModel if kind == "sync" else AsyncAnthropicChatModel
        model = adapter("claude-test", **settings)
    yield h, provider, model
    if kind == "sync":
        model.close()
    else:
        h.loop.run(model.close())
    h.close()


def tool_reply(provider):
    """Two parallel calls: get_weather(Oslo) and get_time()."""
    if provider == "openai":
        return openai_completion(
            None, [("call_1", "get_weather", '{"city": "Oslo"}'), ("call_2", "get_time", "{}")]
        )
    return anthropic_message(
        None, [("toolu_1", "get_weather", {"city": "Oslo"}), ("toolu_2", "get_time", {})]
    )


def text_reply(provider, text):
    return openai_completion(text) if provider == "openai" else anthropic_message(text)


def wire_results(provider, body):
    """The tool results of the last message of a request body, as {call id: content}."""
    if provider == "openai":
        return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
    last = body["messages"][-1]
    return {b["tool_use_id"]: b["content"] for b in last["content"] if b["type"] == "tool_result"}


def test_a_tool_turn_over_the_wire(setup, server):
    h, provider, model = setup
    server.reply_json(tool_reply(provider))
    server.reply_json(text_reply(provider, "Oslo is clear, 18C, at 09:30."))
    chat = h.make(model, system="You are terse.", tools=[get_weather, get_time])
    turn = chat.send("s", "Weather and time in Oslo?")
    assert turn.text == "Oslo is clear, 18C, at 09:30."
    first, second = (r.body for r in server.requests)
    names = (
        [t["function"]["name"] for t in first["tools"]]
        if provider == "openai"
        else [t["name"] for t in first["tools"]]
    )
    assert names == ["get_weather", "get_time"]
    if provider == "anthropic":
        assert "You are terse." in json.dumps(first["system"])
    results = wire_results(provider, second)
    ids = ["call_1", "call_2"] if provider == "openai" else ["toolu_1", "toolu_2"]
    assert sorted(results) == ids
    assert "Oslo: 18C, clear" in json.dumps(results[ids[0]])
    assert "09:30 UTC" in json.dumps(results[ids[1]])
    messages = [e.message for e in h.service.events("s") if e.message]
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert violations(messages) == []
    assert [r.content for r in messages[3].tool_results] == ["Oslo: 18C, clear", "09:30 UTC"]
    usage = h.service.events("s")[2].metadata[USAGE_KEY]
    assert usage["input_tokens"] == 42 and usage["output_tokens"] == 7
    assert usage["cached_input_tokens"] == 32


def test_a_streamed_turn_over_the_wire(setup, server):
    h, provider, model = setup
    if provider == "openai":
        server.reply_sse(openai_chunks([], [("call_1", "get_weather", ['{"ci', 'ty": "Rome"}'])]))
        server.reply_sse(openai_chunks(["Rome ", "is ", "sunny."]))
    else:
        server.reply_sse(
            anthropic_events([], [("toolu_1", "get_weather", ['{"ci', 'ty": "Rome"}'])])
        )
        server.reply_sse(anthropic_events(["Rome ", "is ", "sunny."]))
    events = list(h.make(model, tools=[get_weather]).stream("s", "Rome?"))
    assert [e for e in events if isinstance(e, str)] == ["Rome ", "is ", "sunny."]
    (run,) = [e for e in events if isinstance(e, ToolRun)]
    assert run.result.content == "Rome: 18C, clear"
    assert isinstance(events[-1], ChatTurn) and events[-1].text == "Rome is sunny."
    assert all(r.body.get("stream") for r in server.requests)
    assert [e.message.text for e in h.service.events("s")][-1] == "Rome is sunny."


def test_a_provider_failure_raises_and_stores_nothing_for_the_call(setup, server):
    h, provider, model = setup
    if provider == "openai":
        server.reply_json(openai_error(500, "boom", "server_error"), status=500)
    else:
        server.reply_json(anthropic_error("api_error", "boom"), status=500)
    chat = h.make(model)
    with pytest.raises(ModelError) as caught:
        chat.send("s", "hello", request_id="r1")
    assert caught.value.provider == provider and caught.value.status == 500
    assert [e.message.role for e in h.service.events("s")] == ["user"]
    server.reply_json(text_reply(provider, "hi!"))
    assert chat.send("s", "hello", request_id="r1").text == "hi!"  # the retry resumes
    assert [e.message.role for e in h.service.events("s")] == ["user", "assistant"]


def test_a_failed_call_closes_its_turn_so_the_next_request_alternates(setup, server):
    h, provider, model = setup
    enforce_alternation(server, provider)
    if provider == "openai":
        server.reply_json(openai_error(500, "boom", "server_error"), status=500)
    else:
        server.reply_json(anthropic_error("api_error", "boom"), status=500)
    chat = h.make(model)
    with pytest.raises(ModelError) as caught:
        chat.send("s", "first", request_id="r1")
    assert "nothing was appended" not in str(caught.value)
    assert "user message stays stored in session 's'" in str(caught.value)
    server.reply_json(text_reply(provider, "second answer"))
    assert chat.send("s", "second", request_id="r2").text == "second answer"
    assert alternation_breaks(server.requests[-1].body) == []
    messages = [e.message for e in h.service.events("s")]
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[1].text == NO_REPLY
    assert violations(messages) == []
    server.reply_json(text_reply(provider, "third"))
    with pytest.raises(InvalidInput, match="superseded"):  # r1's turn can no longer resume
        chat.send("s", "first", request_id="r1")
    assert len(server.requests) == 2


def test_a_failed_call_after_tools_closes_its_turn_too(setup, server):
    h, provider, model = setup
    enforce_alternation(server, provider)
    server.reply_json(tool_reply(provider))
    server.reply_json({}, status=500)
    chat = h.make(model, tools=[get_weather, get_time])
    with pytest.raises(ModelError):
        chat.send("s", "Weather in Oslo?")
    server.reply_json(text_reply(provider, "ok"))
    assert chat.send("s", "again").text == "ok"
    assert alternation_breaks(server.requests[-1].body) == []
    roles = [e.message.role for e in h.service.events("s")]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
