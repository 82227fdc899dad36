"""Replies that are not whole (issue 24, items 1, 8, 11, 15), over real sockets and the official
clients: a stream a proxy closed early, a tool call cut after its name, one call id twice, a
summary cut at the token cap, and the null content llama-cpp-python's server refuses."""

import json
import urllib.error
import urllib.request

import pytest

from chat_harness import KINDS, Harness
from model_servers import (
    ScriptedServer,
    Twin,
    anthropic_events,
    anthropic_message,
    openai_chunks,
    openai_completion,
)
from turnlog.errors import ModelError
from turnlog.events import Message, ToolCall, ToolResult
from turnlog.models import (
    AnthropicChatModel,
    AsyncAnthropicChatModel,
    AsyncOpenAIChatModel,
    OpenAIChatModel,
)

PROVIDERS = ["openai", "anthropic"]


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


def twin(kind, provider, server):
    settings = {"api_key": "k", "max_retries": 0, "timeout": 5.0}
    if provider == "openai":
        return Twin(
            kind,
            OpenAIChatModel,
            AsyncOpenAIChatModel,
            model="gpt-test",
            base_url=server.url + "/v1",
            **settings,
        )
    return Twin(
        kind,
        AnthropicChatModel,
        AsyncAnthropicChatModel,
        model="claude-test",
        base_url=server.url,
        **settings,
    )


def cut_streams(provider):
    """Streams cut at each point before the end marker: (label, events)."""
    if provider == "openai":
        whole = openai_chunks(["Wiping "], [("call_1", "wipe", ['{"target": ', '"tmp"}'])])
        finish = next(i for i, (_, d) in enumerate(whole) if _finish(d))
        cuts = {"text": 2, "after the name": 3, "mid arguments": 4, "before finish": finish}
    else:
        whole = anthropic_events(["Wiping "], [("toolu_1", "wipe", ['{"target": ', '"tmp"}'])])
        kinds = [d["type"] for _, d in whole]
        cuts = {
            "text": 4,
            "after the name": kinds.index("content_block_start", 4) + 1,
            "mid arguments": kinds.index("content_block_start", 4) + 2,
            "before message_delta": kinds.index("message_delta"),
            "before message_stop": kinds.index("message_stop"),
        }
    return [(label, whole[:n]) for label, n in cuts.items()]


def _finish(data):
    return isinstance(data, dict) and any(c.get("finish_reason") for c in data.get("choices", []))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_closed_early_is_a_model_error(server, kind, provider):
    model = twin(kind, provider, server)
    for label, events in cut_streams(provider):
        server.reply_sse(events)
        with pytest.raises(ModelError, match="ended before it was complete") as caught:
            model.stream([Message.user("wipe tmp")])
        assert caught.value.status == 200, label


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_whole_stream_is_still_a_reply(server, kind, provider):
    model = twin(kind, provider, server)
    if provider == "openai":
        server.reply_sse(openai_chunks(["Hi"])[:-2])  # cut after the finish: no usage, no [DONE]
        response = model.stream([Message.user("hi")])[-1]
        assert (response.message.text, response.stop_reason) == ("Hi", "stop")
        assert response.usage.input_tokens is None  # as from llama-cpp-python's server
    else:
        server.reply_sse(anthropic_events(["Hi"]))
        assert model.stream([Message.user("hi")])[-1].message.text == "Hi"


def wipe_tool(ran):
    def wipe(target: str = "everything") -> str:
        """Delete files.

        Args:
            target: what to delete.
        """
        ran.append(target)
        return f"wiped {target}"

    return wipe


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_cut_tool_call_is_never_run_nor_stored(server, tmp_path, kind, provider):
    """The stream ends cleanly right after the call's name: with its arguments read as {} the
    tool would run with its defaults (wipe everything)."""
    h = Harness(kind, tmp_path)
    settings = {"api_key": "k", "max_retries": 0, "timeout": 5.0}
    if provider == "openai":
        cls = OpenAIChatModel if kind == "sync" else AsyncOpenAIChatModel
        model = cls("gpt-test", base_url=server.url + "/v1", **settings)
    else:
        cls = AnthropicChatModel if kind == "sync" else AsyncAnthropicChatModel
        model = cls("claude-test", base_url=server.url, **settings)
    ran = []
    try:
        _, events = next(c for c in cut_streams(provider) if c[0] == "after the name")
        server.reply_sse(events)
        chat = h.make(model, tools=[wipe_tool(ran)])
        with pytest.raises(ModelError, match="ended before it was complete"):
            list(chat.stream("s", "wipe tmp"))
        assert ran == []
        stored = [e.message for e in h.service.events("s") if e.message]
        assert stored[0] == Message.user("wipe tmp")
        for m in stored[1:]:  # whatever the runner records for a failed turn: nothing of it
            assert not m.tool_calls and not m.tool_results
            assert "Wiping" not in (m.text or "")
    finally:
        if kind == "sync":
            model.close()
        else:
            h.loop.run(model.close())
        h.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("streamed", [False, True], ids=["respond", "stream"])
def test_one_call_id_twice_is_a_model_error_naming_it(server, kind, provider, streamed):
    model = twin(kind, provider, server)
    if provider == "openai":
        calls = [("call_7", "f", "{}"), ("call_7", "g", "{}")]
        if streamed:
            server.reply_sse(openai_chunks([], [(i, n, [a]) for i, n, a in calls]))
        else:
            server.reply_json(openai_completion(None, calls))
    else:
        calls = [("call_7", "f", {}), ("call_7", "g", {})]
        if streamed:
            server.reply_sse(anthropic_events([], [(i, n, ["{}"]) for i, n, _ in calls]))
        else:
            server.reply_json(anthropic_message(None, calls))
    with pytest.raises(ModelError, match="same id 'call_7'"):
        (model.stream if streamed else model.respond)([Message.user("go")])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_turn_whose_reply_calls_one_id_twice_runs_nothing(server, tmp_path, kind, provider):
    """The runner gets the adapter's ModelError naming the id, not an InvalidInput about an
    internal event id, and no tool runs."""
    h = Harness(kind, tmp_path)
    settings = {"api_key": "k", "max_retries": 0, "timeout": 5.0}
    if provider == "openai":
        cls = OpenAIChatModel if kind == "sync" else AsyncOpenAIChatModel
        model = cls("gpt-test", base_url=server.url + "/v1", **settings)
        calls = [("dup", "wipe", '{"target": "a"}'), ("dup", "wipe", '{"target": "b"}')]
        server.reply_json(openai_completion(None, calls))
    else:
        cls = AnthropicChatModel if kind == "sync" else AsyncAnthropicChatModel
        model = cls("claude-test", base_url=server.url, **settings)
        calls = [("dup", "wipe", {"target": "a"}), ("dup", "wipe", {"target": "b"})]
        server.reply_json(anthropic_message(None, calls))
    ran = []
    try:
        chat = h.make(model, tools=[wipe_tool(ran)])
        with pytest.raises(ModelError, match="same id 'dup'"):
            chat.send("s", "wipe a and b")
        assert ran == []
        stored = [e.message for e in h.service.events("s") if e.message]
        assert not any(m.tool_calls or m.tool_results for m in stored)
    finally:
        if kind == "sync":
            model.close()
        else:
            h.loop.run(model.close())
        h.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_tool_call_cut_at_the_token_cap_is_a_model_error(server, kind, provider):
    model = twin(kind, provider, server)
    if provider == "openai":
        server.reply_json(openai_completion(None, [("c1", "wipe", "")], finish_reason="length"))
    else:
        body = anthropic_message(None, [("c1", "wipe", {})], stop_reason="max_tokens")
        server.reply_json(body)
    with pytest.raises(ModelError, match=r"token cap .* no tool was run"):
        model.respond([Message.user("wipe")])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_summary_cut_at_the_token_cap_is_refused(server, kind, provider):
    model = twin(kind, provider, server)
    if provider == "openai":
        server.reply_json(openai_completion("Assistant: Light clothes and", finish_reason="length"))
        setting = "max_completion_tokens"
    else:
        server.reply_json(anthropic_message("Light clothes and", stop_reason="max_tokens"))
        setting = "max_tokens="
    with pytest.raises(ModelError, match="cut the summary short") as caught:
        model.complete([Message.user("Summarize.")])
    assert setting in str(caught.value)
    server.reply_json(
        openai_completion("A whole summary.")
        if provider == "openai"
        else anthropic_message("A whole summary.")
    )
    assert model.complete([Message.user("Summarize.")]).text == "A whole summary."


@pytest.mark.parametrize("kind", KINDS)
def test_tool_calls_go_with_empty_content_never_null(server, kind):
    """llama-cpp-python's server answers 500 to null content; the test server does the same."""
    model = twin(kind, "openai", server)
    history = [
        Message.user("Weather?"),
        Message.assistant(None, [ToolCall("c1", "get_weather", '{"city": "Oslo"}')]),
        Message.tool(ToolResult("c1", "get_weather", "sunny")),
    ]
    server.reply_json(openai_completion("Sunny."))
    assert model.respond(history).message.text == "Sunny."
    sent = server.last_body()["messages"]
    assert sent[1]["content"] == "" and sent[1]["tool_calls"][0]["id"] == "c1"


def test_the_test_server_refuses_null_content_as_llama_cpp_python_does(server):
    server.reply_json(openai_completion("kept"))
    body = {"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": []}]}
    request = urllib.request.Request(
        server.url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 500
    caught.value.close()
    assert server.replies  # the scripted reply waits for a request the server takes
