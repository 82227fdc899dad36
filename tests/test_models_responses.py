"""OpenAIResponsesModel and AsyncOpenAIResponsesModel against a real local server speaking the
Responses API (tests/model_servers.py, which enforces the API's item rules), through the
official openai client; and through the turn runner, over a real SQLite file."""

import io
import json

import pytest

from chat_harness import KINDS, Harness
from model_servers import (
    RESPONSES_USAGE,
    ScriptedServer,
    Twin,
    openai_error,
    out_call,
    out_message,
    out_reasoning,
    responses_events,
    responses_reply,
)
from turnlog import InvalidInput, Message, ModelError, ToolCall, ToolResult
from turnlog.compaction.reported import USAGE_KEY as REPORTED
from turnlog.models import (
    AsyncChatModelAdapter,
    AsyncOpenAIChatModel,
    AsyncOpenAIResponsesModel,
    ChatModelAdapter,
    ChatResponse,
    OpenAIChatModel,
    OpenAIResponsesModel,
    Usage,
)
from turnlog.models.responses_format import ERROR_PREFIX, RESPONSE_ID_KEY, USAGE_KEY
from turnlog.parts import FilePart, ImagePart, ProviderPart, ReasoningPart, TextPart, data_url
from turnlog.toolsearch import ToolReference

WEATHER_TOOL = ToolReference(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
THINKING = out_reasoning("rs_1", ["**Weather**\n\nLook both cities up."], "gAAAAB-enc-1")


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city.
    """
    return f"{city}: 18C, clear"


def get_time(zone: str = "UTC") -> str:
    """The time in a time zone."""
    return f"09:30 {zone}"


def png(width=40, height=30):
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


def settings(server, **more):
    return {
        "model": "gpt-test",
        "base_url": server.url + "/v1",
        "api_key": "sk-test",
        "max_retries": 0,
        "timeout": 5.0,
        **more,
    }


@pytest.fixture(params=["sync", "async"])
def model(request, server):
    return Twin(request.param, OpenAIResponsesModel, AsyncOpenAIResponsesModel, **settings(server))


@pytest.fixture(params=KINDS)
def runner(request, tmp_path, server):
    """A function building (a turn runner, its harness) over a Responses model."""
    built = []

    def make(model_settings=None, **chat_settings):
        h = Harness(request.param, tmp_path)
        adapter = OpenAIResponsesModel if request.param == "sync" else AsyncOpenAIResponsesModel
        model = adapter(**settings(server, **(model_settings or {})))
        built.append((h, model))
        return h.make(model, **chat_settings), h

    yield make
    for h, model in built:
        if request.param == "sync":
            model.close()
        else:
            h.loop.run(model.close())
        h.close()


def stored(h, session_id="s"):
    return [e.message for e in h.service.events(session_id) if e.message is not None]


# -- one call ------------------------------------------------------------------------------------


def test_a_text_reply_with_usage_model_and_stop_reason(server, model):
    server.reply_json(responses_reply([out_message("Hello there.")]))

    response = model.respond([Message.system("Be kind."), Message.user("hi")])

    assert response == ChatResponse(
        Message("assistant", "Hello there.", metadata={USAGE_KEY: RESPONSES_USAGE}),
        Usage(input_tokens=42, output_tokens=17, cached_input_tokens=32, reasoning_tokens=10),
        "gpt-test-2025",
        "completed",
    )
    request = server.requests[-1]
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body == {
        "model": "gpt-test",
        "input": [
            {"type": "message", "role": "system", "content": "Be kind."},
            {"type": "message", "role": "user", "content": "hi"},
        ],
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }


def test_function_calls_and_the_tool_definitions_sent(server, model):
    server.reply_json(
        responses_reply(
            [
                THINKING,
                out_call("call_a", "get_weather", '{"city": "Oslo"}'),
                out_call("call_b", "get_weather", ""),
            ]
        )
    )

    response = model.respond([Message.user("weather?")], [WEATHER_TOOL])

    assert response.message.tool_calls == (
        ToolCall("call_a", "get_weather", '{"city": "Oslo"}'),
        ToolCall("call_b", "get_weather", "{}"),
    )
    assert response.message.parts == (
        ReasoningPart(
            "openai",
            text="**Weather**\n\nLook both cities up.",
            signature="rs_1",
            encrypted="gAAAAB-enc-1",
        ),
    )
    assert server.last_body()["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": WEATHER_TOOL.parameters,
            "strict": False,
        }
    ]


def test_models_without_reasoning_are_not_asked_for_its_encrypted_content(server):
    server.reply_json(responses_reply([out_message("ok")]))
    with OpenAIResponsesModel(**settings(server, encrypted_reasoning=False)) as model:
        model.respond([Message.user("hi")])
    assert "include" not in server.last_body() and server.last_body()["store"] is False
    with pytest.raises(InvalidInput, match="encrypted_reasoning must be True or False"):
        OpenAIResponsesModel("m", api_key="k", encrypted_reasoning="no")
    with pytest.raises(InvalidInput, match="previous_response_id must be True or False"):
        OpenAIResponsesModel("m", api_key="k", previous_response_id="resp_1")
    with pytest.raises(InvalidInput, match="either client or base_url"):
        import openai

        OpenAIResponsesModel("m", client=openai.OpenAI(api_key="k"), base_url="http://x")
    assert isinstance(OpenAIResponsesModel("m", api_key="k"), ChatModelAdapter)
    assert isinstance(AsyncOpenAIResponsesModel("m", api_key="k"), AsyncChatModelAdapter)


def test_reasoning_items_are_sent_back_in_their_place(server, model):
    first = [
        out_reasoning("rs_a", ["Plan."], "ENC-A"),
        out_call("c1", "get_weather", '{"city":"Oslo"}'),
        out_reasoning("rs_b", [], "ENC-B", status="completed"),
        out_message("Meanwhile, the time:", "msg_2"),
        out_call("c2", "get_time", "{}"),
    ]
    server.reply_json(responses_reply(first))
    server.reply_json(responses_reply([out_message("Done.")], response_id="resp_2"))
    reply = model.respond([Message.user("weather and time?")]).message
    results = Message.tool(
        [ToolResult("c1", "get_weather", "3C"), ToolResult("c2", "get_time", "9")]
    )

    model.respond([Message.user("weather and time?"), reply, results])

    sent = server.last_body()["input"]
    assert sent[1:6] == [
        first[0],
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "get_weather",
            "arguments": '{"city":"Oslo"}',
        },
        first[2],
        {"type": "message", "role": "assistant", "content": "Meanwhile, the time:"},
        {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
    ]
    assert len(server.requests) == 2  # the server's rules held: no request was refused


def test_a_reasoning_item_changed_or_left_out_is_refused_by_the_server(server, model):
    """The test server's rules, checked on their own (the adapter never breaks them)."""
    server.reply_json(responses_reply([THINKING, out_call("c1", "get_weather", "{}")]))
    reply = model.respond([Message.user("weather?")]).message
    result = Message.tool(ToolResult("c1", "get_weather", "3C"))
    (part,) = reply.parts
    changed = Message.assistant(
        parts=[ReasoningPart("openai", text="edited", signature="rs_1", encrypted=part.encrypted)],
        tool_calls=reply.tool_calls,
    )
    bare = Message.assistant(None, reply.tool_calls)
    orphan = Message.assistant(parts=[part])
    cases = [
        ([Message.user("q"), changed, result], "could not be verified"),
        ([Message.user("q"), bare, result], "without its required 'reasoning' item: 'rs_1'"),
        ([Message.user("q"), orphan, Message.user("and?")], "without its required following item"),
        (
            [Message.user("q"), result],
            "No tool call found for function call output with call_id c1",
        ),
    ]
    for messages, refusal in cases:
        server.reply_json(responses_reply([out_message("never sent")]))
        with pytest.raises(ModelError, match=refusal) as caught:
            model.respond(messages)
        assert caught.value.status == 400
        server.replies.clear()


def test_streaming_yields_the_text_deltas_then_the_same_response(server, model):
    reply = responses_reply(
        [
            THINKING,
            out_message("Let me look that up."),
            out_call("call_a", "get_weather", '{"city":"Oslo"}'),
        ]
    )
    server.reply_sse(responses_events(reply, chunk=5))
    server.reply_json(reply)

    events = model.stream([Message.user("weather?")], [WEATHER_TOOL])
    whole = model.respond([Message.user("weather?")], [WEATHER_TOOL])

    assert events[:-1] == ["Let m", "e loo", "k tha", "t up."]
    assert events[-1] == whole
    assert whole.message.tool_calls == (ToolCall("call_a", "get_weather", '{"city":"Oslo"}'),)
    stream_request, respond_request = (r.body for r in server.requests)
    assert stream_request.pop("stream") is True
    assert stream_request == respond_request


def test_a_stream_is_assembled_from_its_argument_deltas(server, model):
    reply = responses_reply(
        [out_message("Checking."), out_call("call_a", "get_weather", '{"city": "Reykjavik"}')]
    )
    server.reply_sse(responses_events(reply, chunk=3, items_done=False, completed_output=False))

    events = model.stream([Message.user("weather?")], [WEATHER_TOOL])

    assert events[:-1] == ["Che", "cki", "ng."]
    assert events[-1].message == Message(
        "assistant",
        "Checking.",
        (ToolCall("call_a", "get_weather", '{"city": "Reykjavik"}'),),
        metadata={USAGE_KEY: RESPONSES_USAGE},
    )


def test_a_stream_that_fails_or_ends_early_is_one_model_error(server, model):
    reply = responses_reply([out_message("Hello")])
    events = responses_events(reply)
    server.reply_sse(events[:-1])  # a proxy closed it before response.completed
    with pytest.raises(ModelError, match="ended before it was complete") as caught:
        model.stream([Message.user("hi")])
    assert caught.value.status == 200
    failed = dict(reply, status="failed", error={"code": "server_error", "message": "boom"})
    server.reply_sse(
        [*events[:3], ("response.failed", {"type": "response.failed", "response": failed})]
    )
    with pytest.raises(ModelError, match="server_error: boom"):
        model.stream([Message.user("hi")])
    server.reply_sse(
        [("error", {"type": "error", "code": "rate_limit_exceeded", "message": "slow down"})]
    )
    with pytest.raises(ModelError, match="rate_limit_exceeded: slow down"):
        model.stream([Message.user("hi")])
    server.reply_json(openai_error(401, "Incorrect API key"), 401)
    with pytest.raises(ModelError) as caught:
        model.stream([Message.user("hi")])
    assert caught.value.status == 401


@pytest.mark.parametrize(
    ("script", "status"),
    [
        (lambda s: s.reply_json(openai_error(401, "Incorrect API key"), 401), 401),
        (lambda s: s.reply_json(openai_error(403, "Forbidden"), 403), 403),
        (lambda s: s.reply_json(openai_error(404, "The model does not exist"), 404), 404),
        (lambda s: s.reply_json(openai_error(429, "Rate limit"), 429, **{"retry-after": "0"}), 429),
        (lambda s: s.reply_raw(b"upstream exploded", 500, "text/plain"), 500),
        (lambda s: s.reply_json(openai_error(503, "overloaded"), 503), 503),
        (lambda s: s.reply_raw(b'{"output": [ {"ty'), 200),
        (lambda s: s.reply_json({"id": "x", "object": "response", "status": "completed"}), 200),
        (lambda s: s.reply_slow(5), None),
        (
            lambda s: s.reply_json(
                dict(responses_reply([]), status="failed", error={"code": "c", "message": "m"})
            ),
            None,
        ),
    ],
    ids=["401", "403", "404", "429", "500", "503", "malformed", "no-output", "timeout", "failed"],
)
def test_every_failure_is_one_model_error(server, model, script, status):
    model.settings["timeout"] = 0.3
    script(server)
    with pytest.raises(ModelError) as caught:
        model.respond([Message.user("hi")])
    assert (caught.value.provider, caught.value.status) == ("openai", status)
    assert "nothing was appended" in str(caught.value)


def test_calls_or_a_summary_cut_at_the_token_cap_are_refused(server, model):
    capped = responses_reply(
        [out_call("c1", "get_weather", '{"ci')],
        status="incomplete",
        incomplete_reason="max_output_tokens",
    )
    server.reply_json(capped)
    with pytest.raises(ModelError, match=r"token cap \(stop reason 'max_output_tokens'\)") as e:
        model.respond([Message.user("weather?")], [WEATHER_TOOL])
    assert "options={'max_output_tokens': N}" in str(e.value)  # not Chat Completions' cap
    assert "max_completion_tokens" not in str(e.value)
    text = responses_reply(
        [out_message("A long sum")], status="incomplete", incomplete_reason="max_output_tokens"
    )
    server.reply_json(text)
    assert model.respond([Message.user("sum up")]).stop_reason == "max_output_tokens"
    server.reply_json(text)
    with pytest.raises(ModelError, match="cut the summary short"):
        model.complete([Message.user("sum up")])
    server.reply_json(responses_reply([out_message("a summary")]))
    assert model.complete([Message.user("sum up")]).text == "a summary"


def test_images_and_files_go_as_inputs(server, model):
    image = png(1024, 1024)
    pdf = b"%PDF-1.4\n1 0 obj <<>> endobj\n%%EOF\n"
    server.reply_json(responses_reply([out_call("c1", "render", "{}")]))
    server.reply_json(
        responses_reply([out_message("A red square and a handbook.")], response_id="r2")
    )
    question = Message.user(
        "What are these?",
        ImagePart("image/png", data=image, detail="high"),
        ImagePart("image/jpeg", url="https://example.com/cat.jpg", detail="low"),
        FilePart("application/pdf", data=pdf, name="handbook.pdf"),
        FilePart("application/pdf", url="https://example.com/guide.pdf"),
    )
    call = model.respond([question]).message
    result = ToolResult(
        "c1", "render", "", parts=(TextPart("rendered:"), ImagePart("image/png", data=image))
    )

    reply = model.respond([question, call, Message.tool(result)])

    first, second = (r.body["input"] for r in server.requests)
    assert first[0]["content"] == [
        {"type": "input_text", "text": "What are these?"},
        {"type": "input_image", "image_url": data_url("image/png", image), "detail": "high"},
        {"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "low"},
        {
            "type": "input_file",
            "file_data": data_url("application/pdf", pdf),
            "filename": "handbook.pdf",
        },
        {"type": "input_file", "file_url": "https://example.com/guide.pdf"},
    ]
    assert second[-1] == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [
            {"type": "input_text", "text": "rendered:"},
            {"type": "input_image", "image_url": data_url("image/png", image)},
        ],
    }
    # the server billed both inline images (1024 x 1024 at high or auto detail: 765 tokens
    # each; it fetches no URL), so the reported input tokens are what OpenAI would bill
    assert [i.tokens for i in server.requests[1].images] == [765, 0, 765]
    assert reply.usage.input_tokens == 42 + 765 + 765


def test_a_part_held_as_an_attachment_reference_is_refused(server, model):
    ref = ImagePart("image/png", ref="sha256:" + "0" * 64, size=100)
    with pytest.raises(InvalidInput, match=r"service\.with_bytes"):
        model.respond([Message.user("see", ref)])
    assert server.requests == []


# -- through the turn runner ---------------------------------------------------------------------


def test_a_tool_loop_sends_the_reasoning_back_and_stores_it(runner, server):
    server.reply_json(
        responses_reply(
            [
                THINKING,
                out_call("call_1", "get_weather", '{"city": "Oslo"}'),
                out_call("call_2", "get_time", "{}"),
            ]
        )
    )
    server.reply_json(
        responses_reply(
            [out_reasoning("rs_2", [], "gAAAAB-enc-2"), out_message("Oslo: clear, 18C at 09:30.")],
            response_id="resp_2",
        )
    )
    chat, h = runner(system="You are terse.", tools=[get_weather, get_time])

    turn = chat.send("s", "Weather and time in Oslo?")

    assert turn.text == "Oslo: clear, 18C at 09:30."
    second = server.requests[1].body["input"]
    assert second == [
        {"type": "message", "role": "system", "content": "You are terse."},
        {"type": "message", "role": "user", "content": "Weather and time in Oslo?"},
        THINKING,
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Oslo"}',
        },
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Oslo: 18C, clear"},
        {"type": "function_call_output", "call_id": "call_2", "output": "09:30 UTC"},
    ]
    messages = stored(h)
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2].parts[0] == ReasoningPart(
        "openai",
        text="**Weather**\n\nLook both cities up.",
        signature="rs_1",
        encrypted="gAAAAB-enc-1",
    )
    # the next turn: the finished turn's reasoning stays in the log and is not sent
    server.reply_json(responses_reply([out_message("You're welcome.")], response_id="resp_3"))
    chat.send("s", "Thanks!")
    third = server.requests[2].body["input"]
    assert [i.get("type") for i in third].count("reasoning") == 0
    assert [i.get("call_id") for i in third if i["type"] == "function_call"] == ["call_1", "call_2"]
    assert len(server.requests) == 3


def test_usage_with_cached_and_reasoning_tokens_is_stored_exactly(runner, server):
    usage = {
        "input_tokens": 5120,
        "input_tokens_details": {"cached_tokens": 4096},
        "output_tokens": 913,
        "output_tokens_details": {"reasoning_tokens": 768},
        "total_tokens": 6033,
    }
    server.reply_sse(responses_events(responses_reply([out_message("Fine.")], usage=usage)))
    chat, h = runner()

    events = list(chat.stream("s", "How are you?"))

    assert [e for e in events if isinstance(e, str)] == ["Fine", "."]
    (event,) = [e for e in h.service.events("s") if e.role == "assistant"]
    assert event.message.metadata[USAGE_KEY] == usage
    assert event.message.metadata[USAGE_KEY]["output_tokens_details"]["reasoning_tokens"] == 768
    reported = event.metadata[REPORTED]
    assert (reported["input_tokens"], reported["output_tokens"]) == (5120, 913)
    assert reported["cached_input_tokens"] == 4096
    assert reported["reasoning_tokens"] == 768
    assert reported["stop_reason"] == "completed"


def test_an_unknown_output_item_is_kept_and_the_turn_goes_on(runner, server):
    future = {
        "id": "fx_1",
        "type": "a_kind_from_the_future",
        "status": "completed",
        "payload": [1, 2],
    }
    search = {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "Oslo weather"},
    }
    server.reply_json(responses_reply([search, future, out_message("Found it: clear.")]))
    server.reply_json(responses_reply([out_message("Sure.")], response_id="resp_2"))
    chat, h = runner()

    assert chat.send("s", "Weather in Oslo?").text == "Found it: clear."
    chat.send("s", "Thanks")

    answer = stored(h)[1]
    assert answer.parts == (
        ProviderPart("openai", "web_search_call", search),
        ProviderPart("openai", "a_kind_from_the_future", future),
        TextPart("Found it: clear."),
    )
    sent = server.requests[1].body["input"]
    assert sent[1:3] == [search, future]  # sent back to OpenAI as they came


def test_another_providers_reasoning_is_never_sent(runner, server):
    server.reply_json(responses_reply([out_message("Hi again.")]))
    chat, h = runner(reasoning="all")  # the runner would leave a finished turn's reasoning out
    claude = Message.assistant(
        parts=[
            ReasoningPart("anthropic", text="secret thinking", signature="sig-claude"),
            ReasoningPart("anthropic", encrypted="opaque-redacted", redacted=True),
            ProviderPart("anthropic", "server_tool_use", {"id": "srvtoolu_1", "input": {"q": "x"}}),
            "Hello from Claude.",
        ]
    )
    h.service.get_or_create("s")
    h.service.append_message("s", Message.user("hi"))
    h.service.append_message("s", claude)

    chat.send("s", "and now?")

    body = json.dumps(server.last_body())
    for leaked in ("secret thinking", "sig-claude", "opaque-redacted", "srvtoolu_1"):
        assert leaked not in body
    assert server.last_body()["input"][1] == {
        "type": "message",
        "role": "assistant",
        "content": "Hello from Claude.",
    }


def test_previous_response_id_sends_only_what_is_new(runner, server):
    server.reply_json(
        responses_reply(
            [out_call("call_1", "get_weather", '{"city": "Oslo"}')], response_id="resp_1"
        )
    )
    server.reply_json(responses_reply([out_message("Clear, 18C.")], response_id="resp_2"))
    server.reply_json(responses_reply([out_message("Any time.")], response_id="resp_3"))
    chat, h = runner({"previous_response_id": True}, system="Be brief.", tools=[get_weather])

    assert chat.send("s", "Weather in Oslo?").text == "Clear, 18C."
    chat.send("s", "Thanks")

    first, second, third = (r.body for r in server.requests)
    assert (first["store"], "previous_response_id" in first, "include" in first) == (
        True,
        False,
        False,
    )
    assert first["input"] == [{"type": "message", "role": "user", "content": "Weather in Oslo?"}]
    # the system prompt goes as instructions, in every request (the API carries none over)
    assert [r["instructions"] for r in (first, second, third)] == ["Be brief."] * 3
    assert second["previous_response_id"] == "resp_1"
    assert second["input"] == [
        {"type": "function_call_output", "call_id": "call_1", "output": "Oslo: 18C, clear"}
    ]
    assert third["previous_response_id"] == "resp_2"
    assert third["input"] == [{"type": "message", "role": "user", "content": "Thanks"}]
    ids = [m.metadata.get(RESPONSE_ID_KEY) for m in stored(h) if m.role == "assistant"]
    assert ids == ["resp_1", "resp_2", "resp_3"]  # read back from the SQLite file


def test_with_previous_response_id_the_summarizers_call_stays_stateless(server):
    server.reply_json(responses_reply([out_message("hi")], response_id="resp_0"))
    server.reply_json(responses_reply([out_message("a summary")], response_id="resp_s"))
    server.reply_json(responses_reply([out_message("ok")], response_id="resp_t"))
    with OpenAIResponsesModel(**settings(server, previous_response_id=True)) as model:
        earlier = model.respond([Message.user("q")]).message
        summary = model.complete([Message.user("q"), earlier, Message.user("sum up")])
        reply = model.respond([Message.user("q"), earlier, Message.user("more")])
    assert earlier.metadata[RESPONSE_ID_KEY] == "resp_0"
    assert RESPONSE_ID_KEY not in summary.metadata
    _, summarized, chained = (r.body for r in server.requests)
    assert (summarized["store"], len(summarized["input"])) == (False, 3)
    assert "previous_response_id" not in summarized
    assert chained["store"] is True and chained["previous_response_id"] == "resp_0"
    assert chained["input"] == [{"type": "message", "role": "user", "content": "more"}]
    assert reply.message.metadata[RESPONSE_ID_KEY] == "resp_t"


def test_a_failed_tool_result_is_sent_with_the_error_prefix(server, model):
    server.reply_json(responses_reply([out_message("It failed.")]))
    call = Message.assistant(None, [ToolCall("c1", "get_weather", "{}")])
    failed = Message.tool(ToolResult("c1", "get_weather", "city missing", is_error=True))
    model.respond([Message.user("weather?"), call, failed])
    assert server.last_body()["input"][-1] == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": ERROR_PREFIX + "city missing",
    }


def test_the_responses_adapters_name_their_extra_on_a_base_install(tmp_path):
    from test_base_install import run_base

    out = run_base(
        """
        import turnlog.models, turnlog.models.responses_format
        for name in ("OpenAIResponsesModel", "AsyncOpenAIResponsesModel"):
            try:
                getattr(turnlog.models, name)
            except ImportError as exc:
                print(name, "->", str(exc).split("pip install ")[1].split()[0])
            else:
                raise SystemExit(f"{name} loaded without its extra")
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "OpenAIResponsesModel -> 'turnlog[openai]'",
        "AsyncOpenAIResponsesModel -> 'turnlog[openai]'",
    ]


@pytest.mark.parametrize(
    "make", [OpenAIChatModel, AsyncOpenAIChatModel, OpenAIResponsesModel, AsyncOpenAIResponsesModel]
)
def test_a_model_without_any_api_key_is_invalid_input_saying_where_to_give_one(make, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(InvalidInput, match=r"cannot build an OpenAI client.*pass api_key="):
        make("gpt-test")
    model = make("gpt-test", api_key="k")  # a key given: the model owns (and closes) its client
    assert model._owns_client
