"""GeminiChatModel and AsyncGeminiChatModel against a real local server speaking the Gemini API
(tests/gemini_server.py, which enforces its thought-signature and function-response rules),
through the official google-genai client; and through the turn runner, over a real SQLite file."""

import base64
import json

import pytest

from chat_harness import KINDS, Harness
from gemini_server import (
    GeminiServer,
    call,
    gemini_error,
    gemini_events,
    gemini_reply,
    signature,
    text,
    thought,
    usage_metadata,
)
from model_servers import Twin
from turnlog import InvalidInput, Message, ModelError, ToolCall, ToolResult
from turnlog.compaction.reported import USAGE_KEY as REPORTED
from turnlog.models import (
    AsyncChatModelAdapter,
    AsyncGeminiChatModel,
    ChatModelAdapter,
    ChatResponse,
    GeminiChatModel,
    Usage,
)
from turnlog.models.gemini_format import GENERATED_ID_PREFIX, MARKER_KIND, USAGE_KEY
from turnlog.parts import AudioPart, FilePart, ImagePart, ProviderPart, ReasoningPart, TextPart
from turnlog.toolsearch import ToolReference

WEATHER_TOOL = ToolReference(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city.
    """
    return f"{city}: 18C, clear"


def get_time(zone: str = "UTC") -> str:
    """The time in a time zone."""
    return f"09:30 {zone}"


def raw(sig):
    """A signature's bytes (the client writes base64 in the URL-safe alphabet)."""
    return base64.urlsafe_b64decode(sig.replace("+", "-").replace("/", "_"))


def decoded(parts):
    """Parts with their signatures as bytes, to compare what was sent with what was issued."""
    out = []
    for part in parts:
        part = dict(part)
        if "thoughtSignature" in part:
            part["thoughtSignature"] = raw(part["thoughtSignature"])
        out.append(part)
    return out


def stored_sig(n):
    """A signature as the adapter stores it: the issued bytes, base64 as the client writes it."""
    return base64.urlsafe_b64encode(raw(signature(n))).decode()


@pytest.fixture
def server():
    s = GeminiServer()
    yield s
    s.close()


def settings(server, **more):
    return {
        "model": "gemini-test-001",
        "base_url": server.url,
        "api_key": "g-test-key",
        "max_retries": 0,
        "timeout": 5.0,
        **more,
    }


@pytest.fixture(params=["sync", "async"])
def model(request, server):
    return Twin(request.param, GeminiChatModel, AsyncGeminiChatModel, **settings(server))


@pytest.fixture(params=KINDS)
def runner(request, tmp_path, server):
    """A function building (a turn runner, its harness) over a Gemini model."""
    built = []

    def make(model_settings=None, **chat_settings):
        h = Harness(request.param, tmp_path)
        adapter = GeminiChatModel if request.param == "sync" else AsyncGeminiChatModel
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


def test_the_adapters_implement_the_protocols(server):
    with GeminiChatModel(**settings(server)) as blocking:
        assert isinstance(blocking, ChatModelAdapter)
        assert blocking.provider == "gemini"
    assert isinstance(AsyncGeminiChatModel(**settings(server)), AsyncChatModelAdapter)


def test_a_text_reply_with_usage_model_and_stop_reason(server, model):
    usage = usage_metadata(prompt=5120, candidates=145, thoughts=768, cached=4096)
    server.reply_json(gemini_reply([text("Hello!")], usage=usage, model="gemini-test-001-0925"))

    response = model.respond([Message.system("Be terse."), Message.user("hi")])

    assert response.message == Message("assistant", "Hello!", metadata={USAGE_KEY: usage})
    assert response.usage == Usage(5120, 145 + 768, 4096, 768)
    assert (response.model, response.stop_reason) == ("gemini-test-001-0925", "STOP")
    (request,) = server.requests
    assert request.path.endswith("/models/gemini-test-001:generateContent")
    assert request.headers["x-goog-api-key"] == "g-test-key"
    assert request.body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert request.body["systemInstruction"] == {"parts": [{"text": "Be terse."}]}
    assert "tools" not in request.body


def test_function_calls_and_the_tool_definitions_sent(server, model):
    server.reply_json(
        gemini_reply(
            [
                text("Looking both up."),
                call("get_weather", {"city": "Oslo", "days": [1, 2]}, call_id="fc_1"),
                call("get_weather", {"city": "Rome"}),
            ]
        )
    )

    response = model.respond([Message.user("Weather in Oslo and Rome?")], [WEATHER_TOOL])

    first, second = response.message.tool_calls
    assert first == ToolCall("fc_1", "get_weather", '{"city": "Oslo", "days": [1, 2]}')
    assert second.id.startswith(GENERATED_ID_PREFIX) and second.id != first.id
    assert json.loads(second.arguments) == {"city": "Rome"}
    assert response.message.text == "Looking both up."
    assert server.last_body()["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "The weather in a city.",
                    "parametersJsonSchema": WEATHER_TOOL.parameters,
                }
            ]
        }
    ]
    # sent back: Gemini's id goes with its call and its response, the made-up id never
    model_content = {"role": "model", "parts": []}
    server.reply_json(gemini_reply([text("Both clear.")]))
    results = Message.tool(
        [
            ToolResult("fc_1", "get_weather", "Oslo: clear"),
            ToolResult(second.id, "get_weather", "Rome: clear"),
        ]
    )
    model.respond([Message.user("Weather in Oslo and Rome?"), response.message, results])
    sent = server.last_body()["contents"]
    model_content = sent[1]
    assert model_content == {
        "role": "model",
        "parts": [
            {"text": "Looking both up."},
            {
                "functionCall": {
                    "name": "get_weather",
                    "args": {"city": "Oslo", "days": [1, 2]},
                    "id": "fc_1",
                }
            },
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
        ],
    }
    assert sent[2] == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "name": "get_weather",
                    "response": {"output": "Oslo: clear"},
                    "id": "fc_1",
                }
            },
            {"functionResponse": {"name": "get_weather", "response": {"output": "Rome: clear"}}},
        ],
    }


ISSUED = [
    thought("**Plan**: look the weather up.", signature(1)),
    call("get_weather", {"city": "Oslo"}, signature(2)),
    call("get_time", {"zone": "CET"}),
]


def test_signatures_are_kept_as_reasoning_parts_and_sent_back_on_their_parts(server, model):
    server.reply_json(gemini_reply(ISSUED))

    reply = model.respond([Message.user("Weather and time in Oslo?")], [WEATHER_TOOL])

    assert reply.message.parts == (
        ReasoningPart("gemini", text="**Plan**: look the weather up.", signature=stored_sig(1)),
        ReasoningPart("gemini", signature=stored_sig(2)),
    )
    weather, clock = reply.message.tool_calls
    results = Message.tool(
        [
            ToolResult(weather.id, "get_weather", "Oslo: 18C"),
            ToolResult(clock.id, "get_time", "09:30"),
        ]
    )
    server.reply_json(gemini_reply([text("18C at 09:30.", signature(3))]))
    answer = model.respond([Message.user("Weather and time in Oslo?"), reply.message, results])

    assert server.refusals == []
    sent = server.last_body()["contents"][1]
    assert sent["role"] == "model"
    assert decoded(sent["parts"]) == decoded(ISSUED)  # every part, every signature, in place
    # a signature on a text part comes back on that text
    assert answer.message.parts == (
        ReasoningPart("gemini", signature=stored_sig(3)),
        TextPart("18C at 09:30."),
    )


def test_a_signature_left_out_or_changed_is_refused_by_the_server(server, model):
    server.reply_json(gemini_reply(ISSUED))
    reply = model.respond([Message.user("Weather?")], [WEATHER_TOOL])
    weather, clock = reply.message.tool_calls
    results = Message.tool(
        [
            ToolResult(weather.id, "get_weather", "Oslo: 18C"),
            ToolResult(clock.id, "get_time", "09:30"),
        ]
    )
    without = Message("assistant", None, reply.message.tool_calls, parts=reply.message.parts[:1])
    changed_sig = base64.urlsafe_b64encode(b"not-a-signature-it-issued").decode()
    changed = Message(
        "assistant",
        None,
        reply.message.tool_calls,
        parts=(reply.message.parts[0], ReasoningPart("gemini", signature=changed_sig)),
    )
    for sent, refusal in ((without, "missing a thought_signature"), (changed, "Corrupted")):
        server.reply_json(gemini_reply([text("ok")]))
        with pytest.raises(ModelError, match=refusal) as caught:
            model.respond([Message.user("Weather?"), sent, results])
        assert caught.value.status == 400
        server.replies.clear()
    # and the function responses must answer the calls
    server.reply_json(gemini_reply([text("ok")]))
    with pytest.raises(ModelError, match="number of function response parts") as caught:
        one = Message.tool(ToolResult(weather.id, "get_weather", "Oslo: 18C"))
        model.respond([Message.user("Weather?"), reply.message, one])
    assert caught.value.status == 400


def test_a_call_followed_by_a_part_keeps_its_place(server, model):
    issued = [
        call("get_weather", {"city": "Oslo"}, signature(4)),
        text("Checking the clock too."),
        call("get_time", {}),
    ]
    server.reply_json(gemini_reply(issued))
    reply = model.respond([Message.user("Oslo?")])
    weather, clock = reply.message.tool_calls
    assert reply.message.parts == (
        ReasoningPart("gemini", signature=stored_sig(4)),
        ProviderPart("gemini", MARKER_KIND, {"id": weather.id}),
        TextPart("Checking the clock too."),
    )
    results = Message.tool(
        [ToolResult(weather.id, "get_weather", "18C"), ToolResult(clock.id, "get_time", "09:30")]
    )
    server.reply_json(gemini_reply([text("Done.")]))
    model.respond([Message.user("Oslo?"), reply.message, results])
    assert decoded(server.last_body()["contents"][1]["parts"]) == decoded(issued)


def test_streaming_yields_the_text_deltas_then_the_response(server, model):
    usage = usage_metadata(prompt=12, candidates=3, thoughts=20)
    chunks = [
        [thought("Think")],
        [thought("ing.", signature(5))],
        [text("Hel")],
        [text("lo!")],
        [text("", signature(6))],
    ]
    server.reply_sse(gemini_events(chunks, usage=usage))

    events = model.stream([Message.user("hi")])

    assert events[:-1] == ["Hel", "lo!"]
    response = events[-1]
    assert isinstance(response, ChatResponse)
    assert response.message.parts == (
        ReasoningPart("gemini", text="Thinking.", signature=stored_sig(5)),
        ReasoningPart("gemini", signature=stored_sig(6)),
        TextPart("Hello!"),
    )
    assert response.usage == Usage(12, 23, None, 20)
    assert response.stop_reason == "STOP"
    assert server.requests[0].path.endswith(":streamGenerateContent?alt=sse")


def test_streamed_function_calls_come_whole_with_their_signatures(server, model):
    chunks = [[call("get_weather", {"city": "Oslo"}, signature(7))], [call("get_time", {})]]
    server.reply_sse(gemini_events(chunks))

    response = model.stream([Message.user("Oslo?")], [WEATHER_TOOL])[-1]

    assert [(c.name, json.loads(c.arguments)) for c in response.message.tool_calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_time", {}),
    ]
    assert response.message.parts == (ReasoningPart("gemini", signature=stored_sig(7)),)


def test_a_stream_cut_short_is_one_model_error(server, model):
    server.reply_sse(gemini_events([[text("Hel")], [text("lo")]], finish=None))
    with pytest.raises(ModelError, match="ended before it was complete") as caught:
        model.stream([Message.user("hi")])
    assert caught.value.status == 200
    server.reply_json(gemini_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded"), 429)
    with pytest.raises(ModelError, match="rate limited") as caught:
        model.stream([Message.user("hi")])
    assert caught.value.status == 429


@pytest.mark.parametrize(
    ("script", "status", "says"),
    [
        (
            lambda s: s.reply_json(gemini_error(400, "INVALID_ARGUMENT", "bad thing"), 400),
            400,
            "bad thing",
        ),
        (
            lambda s: s.reply_json(gemini_error(401, "UNAUTHENTICATED", "no key"), 401),
            401,
            r"refused the credentials.*GEMINI_API_KEY \(or GOOGLE_API_KEY\)",
        ),
        (
            lambda s: s.reply_json(
                gemini_error(403, "PERMISSION_DENIED", "API key not valid"), 403
            ),
            403,
            "refused the credentials",
        ),
        (
            lambda s: s.reply_json(gemini_error(404, "NOT_FOUND", "models/x is not found"), 404),
            404,
            "was not found",
        ),
        (
            lambda s: s.reply_json(gemini_error(429, "RESOURCE_EXHAUSTED", "quota"), 429),
            429,
            "rate limited",
        ),
        (
            lambda s: s.reply_json(gemini_error(500, "INTERNAL", "boom"), 500),
            500,
            "provider's side",
        ),
        (
            lambda s: s.reply_json(gemini_error(503, "UNAVAILABLE", "overloaded"), 503),
            503,
            "provider's side",
        ),
        (lambda s: s.reply_json({"modelVersion": "x"}), 200, "not in the gemini wire format"),
        (
            lambda s: s.reply_json({"promptFeedback": {"blockReason": "SAFETY"}}),
            None,
            "blocked the prompt",
        ),
        (lambda s: s.reply_slow(5), None, "did not answer in time"),
    ],
    ids=["400", "401", "403", "404", "429", "500", "503", "no-candidates", "blocked", "timeout"],
)
def test_every_failure_is_one_model_error(server, model, script, status, says):
    model.settings["timeout"] = 0.5
    script(server)
    with pytest.raises(ModelError, match=says) as caught:
        model.respond([Message.user("hi")])
    assert (caught.value.provider, caught.value.status) == ("gemini", status)
    assert "nothing was appended" in str(caught.value)


def test_calls_or_a_summary_cut_at_the_token_cap_are_refused(server, model):
    server.reply_json(gemini_reply([call("get_weather", {"city": "Os"})], finish="MAX_TOKENS"))
    with pytest.raises(ModelError, match="token cap") as e:
        model.respond([Message.user("Oslo?")], [WEATHER_TOOL])
    assert "options={'max_output_tokens': N}" in str(e.value)
    server.reply_json(gemini_reply([text("The conversation was about")], finish="MAX_TOKENS"))
    with pytest.raises(ModelError, match="token cap"):
        model.complete([Message.user("Summarize.")])
    server.reply_json(gemini_reply([text("A chat about Oslo.")]))
    assert model.complete([Message.user("Summarize.")]).text == "A chat about Oslo."


def test_images_files_and_audio_go_as_inline_data_and_file_data(server, model):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
    pdf = b"%PDF-1.7 a small document"
    wav = b"RIFF\x00\x00\x00\x00WAVE"
    server.reply_json(gemini_reply([text("A red square and a report.")]))
    user = Message.user(
        "What are these?",
        ImagePart("image/png", data=png),
        ImagePart("image/jpeg", url="https://example.com/cat.jpg"),
        FilePart("application/pdf", data=pdf, name="report.pdf"),
        FilePart("application/pdf", url="gs://bucket/report.pdf"),
        AudioPart("audio/wav", data=wav),
    )
    model.respond([user])

    assert server.last_body()["contents"][0]["parts"] == [
        {"text": "What are these?"},
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(png).decode()}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
        {"inlineData": {"mimeType": "application/pdf", "data": base64.b64encode(pdf).decode()}},
        {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://bucket/report.pdf"}},
        {"inlineData": {"mimeType": "audio/wav", "data": base64.b64encode(wav).decode()}},
    ]
    # a tool's image goes in its function response's parts
    server.reply_json(gemini_reply([text("A chart.")]))
    asked = Message.assistant(tool_calls=[ToolCall("fc_9", "plot", "{}")])
    result = ToolResult(
        "fc_9", "plot", "", parts=(TextPart("the plot"), ImagePart("image/png", data=png))
    )
    model.respond([Message.user("Plot it."), asked, Message.tool(result)])
    assert server.last_body()["contents"][2]["parts"] == [
        {
            "functionResponse": {
                "name": "plot",
                "response": {"output": "the plot"},
                "id": "fc_9",
                "parts": [
                    {
                        "inlineData": {
                            "mimeType": "image/png",
                            "data": base64.b64encode(png).decode(),
                        }
                    }
                ],
            }
        }
    ]


def test_a_part_held_as_an_attachment_reference_is_refused(server, model):
    ref = ImagePart("image/png", ref="sha256:" + "0" * 64, size=10)
    with pytest.raises(InvalidInput, match=r"service\.with_bytes"):
        model.respond([Message.user("see", ref)])
    assert server.requests == []


def test_a_failed_tool_result_is_sent_as_an_error(server, model):
    server.reply_json(gemini_reply([text("Which city?")]))
    asked = Message.assistant(tool_calls=[ToolCall("fc_1", "get_weather", "{}")])
    failed = ToolResult("fc_1", "get_weather", "city missing", is_error=True)
    model.respond([Message.user("Weather?"), asked, Message.tool(failed)])
    assert server.last_body()["contents"][2]["parts"] == [
        {
            "functionResponse": {
                "name": "get_weather",
                "response": {"error": "city missing"},
                "id": "fc_1",
            }
        }
    ]


# -- through the turn runner ---------------------------------------------------------------------


def test_a_tool_loop_of_three_rounds_returns_each_signature_in_place(runner, server):
    rounds = [
        [
            thought("Weather first.", signature(11)),
            call("get_weather", {"city": "Oslo"}, signature(12)),
        ],
        [call("get_weather", {"city": "Rome"}, signature(13)), call("get_time", {"zone": "CET"})],
        [text("Comparing."), call("get_time", {"zone": "UTC"}, signature(14))],
    ]
    for parts in rounds:
        server.reply_json(gemini_reply(parts))
    server.reply_json(gemini_reply([text("Oslo and Rome: clear, 18C.", signature(15))]))
    chat, h = runner(system="You are terse.", tools=[get_weather, get_time])

    turn = chat.send("s", "Weather in Oslo and Rome, and the time?")

    assert turn.text == "Oslo and Rome: clear, 18C."
    assert server.refusals == []
    assert len(server.requests) == 4
    last = server.body(3)["contents"]
    assert [c["role"] for c in last] == ["user", "model", "user", "model", "user", "model", "user"]
    for i, parts in enumerate(rounds):
        assert decoded(last[1 + 2 * i]["parts"]) == decoded(parts)  # each round in place
    assert last[6]["parts"] == [
        {"functionResponse": {"name": "get_time", "response": {"output": "09:30 UTC"}}}
    ]
    messages = stored(h)
    assert [m.role for m in messages] == ["system", "user"] + ["assistant", "tool"] * 3 + [
        "assistant"
    ]
    assert messages[2].parts[1] == ReasoningPart("gemini", signature=stored_sig(12))
    # the next turn: the finished turn's signatures stay in the log and are not sent, which
    # Gemini accepts (it checks the signatures of the turn in progress)
    server.reply_json(gemini_reply([text("You're welcome.")]))
    chat.send("s", "Thanks!")
    assert server.refusals == []
    assert "thoughtSignature" not in json.dumps(server.body(4))
    assert stored(h)[2].parts[0].signature == stored_sig(11)


def test_the_runner_streams_a_tool_loop(runner, server):
    server.reply_sse(
        gemini_events([[thought("Hm.", signature(21))], [call("get_time", {}, signature(22))]])
    )
    server.reply_sse(gemini_events([[text("It is ")], [text("09:30.")]]))
    chat, _h = runner(tools=[get_time])

    events = list(chat.stream("s", "Time?"))

    assert [e for e in events if isinstance(e, str)] == ["It is ", "09:30."]
    assert server.refusals == []
    sent = server.body(1)["contents"][1]["parts"]
    assert decoded(sent) == decoded(
        [thought("Hm.", signature(21)), call("get_time", {}, signature(22))]
    )


def test_usage_with_cached_and_thought_tokens_is_stored_exactly(runner, server):
    usage = usage_metadata(prompt=5120, candidates=145, thoughts=768, cached=4096)
    server.reply_sse(gemini_events([[text("Fine")], [text(".")]], usage=usage))
    chat, h = runner()

    events = list(chat.stream("s", "How are you?"))

    assert [e for e in events if isinstance(e, str)] == ["Fine", "."]
    (event,) = [e for e in h.service.events("s") if e.role == "assistant"]
    assert event.message.metadata[USAGE_KEY] == usage
    reported = event.metadata[REPORTED]
    assert (reported["input_tokens"], reported["output_tokens"]) == (5120, 145 + 768)
    assert reported["cached_input_tokens"] == 4096
    assert reported["reasoning_tokens"] == 768
    assert reported["stop_reason"] == "STOP"


def test_an_unknown_part_is_kept_and_the_turn_goes_on(runner, server):
    code = {"executableCode": {"language": "PYTHON", "code": "print(6 * 7)"}}
    result = {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "42\n"}}
    future = {"aPartFromTheFuture": {"payload": [1, 2]}}  # the client drops what it does not know
    server.reply_json(gemini_reply([code, result, future, text("It is 42.")]))
    server.reply_json(gemini_reply([text("Sure.")]))
    chat, h = runner()

    assert chat.send("s", "What is 6 * 7?").text == "It is 42."
    chat.send("s", "Thanks")

    answer = stored(h)[1]
    assert answer.parts == (
        ProviderPart("gemini", "executableCode", code),
        ProviderPart("gemini", "codeExecutionResult", result),
        TextPart("It is 42."),
    )
    sent = server.body(1)["contents"][1]
    assert sent == {"role": "model", "parts": [code, result, {"text": "It is 42."}]}


def test_another_providers_reasoning_is_never_sent(runner, server):
    server.reply_json(gemini_reply([text("Hi again.")]))
    chat, h = runner(reasoning="all")  # the runner would leave a finished turn's reasoning out
    claude = Message.assistant(
        parts=[
            ReasoningPart("anthropic", text="secret thinking", signature="sig-claude"),
            ReasoningPart("openai", signature="rs_1", encrypted="opaque-encrypted"),
            ProviderPart("anthropic", "server_tool_use", {"id": "srvtoolu_1", "input": {"q": "x"}}),
            "Hello from Claude.",
        ]
    )
    h.service.get_or_create("s")
    h.service.append_message("s", Message.user("hi"))
    h.service.append_message("s", claude)

    chat.send("s", "and now?")

    body = json.dumps(server.last_body())
    for leaked in ("secret thinking", "sig-claude", "opaque-encrypted", "rs_1", "srvtoolu_1"):
        assert leaked not in body
    assert server.last_body()["contents"][1] == {
        "role": "model",
        "parts": [{"text": "Hello from Claude."}],
    }


def test_the_adapter_itself_sends_no_other_providers_reasoning_or_parts(server, model):
    server.reply_json(gemini_reply([text("Hi again.")]))
    claude = Message.assistant(
        parts=[
            ReasoningPart("anthropic", text="secret thinking", signature="sig-claude"),
            ReasoningPart("openai", text="openai summary", signature="rs_1"),
            ProviderPart("openai", "web_search_call", {"id": "ws_1"}),
            "Hello.",
        ],
        tool_calls=[ToolCall("call_1", "get_time", "{}")],
    )
    results = Message.tool(ToolResult("call_1", "get_time", "09:30"))
    model.respond([Message.user("hi"), claude, results])
    body = json.dumps(server.last_body())
    for leaked in ("secret thinking", "sig-claude", "openai summary", "rs_1", "ws_1"):
        assert leaked not in body
    assert server.last_body()["contents"][1]["parts"] == [
        {"text": "Hello."},
        {"functionCall": {"name": "get_time", "args": {}, "id": "call_1"}},
    ]


def test_an_assistant_message_with_nothing_to_send_is_left_out(server, model):
    server.reply_json(gemini_reply([text("Hello?")]))
    empty = Message.assistant(parts=[ReasoningPart("anthropic", text="only thinking")])
    model.respond([Message.user("hi"), empty, Message.user("anyone?")])
    assert server.last_body()["contents"] == [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "user", "parts": [{"text": "anyone?"}]},
    ]


def test_geminis_reasoning_is_never_sent_to_another_provider():
    from model_servers import ScriptedServer, openai_completion
    from turnlog.models import OpenAIChatModel

    gemini = Message.assistant(
        parts=[
            ReasoningPart("gemini", text="gemini thinking", signature="Z2VtaW5pLXNpZw=="),
            ReasoningPart("gemini", signature="c2lnLW9uLWEtY2FsbA=="),
            ProviderPart("gemini", "executableCode", {"executableCode": {"code": "1+1"}}),
            "Hello from Gemini.",
        ]
    )
    other = ScriptedServer()
    try:
        other.reply_json(openai_completion("Hi."))
        with OpenAIChatModel("gpt-test", base_url=other.url + "/v1", api_key="k") as model:
            model.respond([Message.user("hi"), gemini, Message.user("and now?")])
        body = json.dumps(other.last_body())
    finally:
        other.close()
    for leaked in ("gemini thinking", "Z2VtaW5pLXNpZw==", "c2lnLW9uLWEtY2FsbA==", "1+1"):
        assert leaked not in body
    assert "Hello from Gemini." in body


def test_the_gemini_adapters_name_their_extra_on_a_base_install(tmp_path):
    from test_base_install import run_base

    out = run_base(
        """
        import sys

        class NoGoogle:  # google-genai is not installed in a base install either
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "google":
                    raise ImportError(f"No module named {name!r} (blocked)", name=name)

        sys.meta_path.insert(0, NoGoogle())
        import turnlog.models, turnlog.models.gemini_format
        for name in ("GeminiChatModel", "AsyncGeminiChatModel"):
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
        "GeminiChatModel -> 'turnlog[gemini]'",
        "AsyncGeminiChatModel -> 'turnlog[gemini]'",
    ]
