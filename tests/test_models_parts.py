"""Content parts over the wire: Claude's thinking blocks kept and sent back within a tool loop
(against a server that enforces the Messages API's rule), images, documents and audio sent to
both providers, another provider's reasoning never sent."""

import base64
import json

import pytest

from chat_harness import KINDS, Harness
from model_servers import (
    ScriptedServer,
    Twin,
    anthropic_events,
    anthropic_message,
    openai_completion,
    redacted_block,
    thinking_block,
    tool_use_block,
)
from turnlog import Message, ModelError, ToolCall, ToolResult
from turnlog.models import (
    AnthropicChatModel,
    AsyncAnthropicChatModel,
    AsyncOpenAIChatModel,
    OpenAIChatModel,
)
from turnlog.models.anthropic_parts import call_marker
from turnlog.models.openai_format import NOT_SENT
from turnlog.parts import AudioPart, FilePart, ImagePart, ProviderPart, ReasoningPart, TextPart

THINKING = {"type": "enabled", "budget_tokens": 1024}
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f01f00050001ff89993d1d"
    "0000000049454e44ae426082"
)
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
WAV = b"RIFF$\x00\x00\x00WAVEfmt " + bytes(28)
B64 = base64.b64encode

CALL = ToolCall("toolu_1", "get_weather", '{"city":"Oslo"}')
THOUGHT = thinking_block("The user wants Oslo's weather: call the tool.", "sig-Eo8BCkYIBxgCKkA")
HIDDEN = redacted_block("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw")


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city.
    """
    return f"{city}: 18C, clear"


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


def anthropic_twin(kind, server, **settings):
    return Twin(
        kind,
        AnthropicChatModel,
        AsyncAnthropicChatModel,
        model="claude-test",
        base_url=server.url,
        api_key="sk-ant-test",
        max_retries=0,
        timeout=5.0,
        max_tokens=2048,
        **settings,
    )


def openai_twin(kind, server):
    return Twin(
        kind,
        OpenAIChatModel,
        AsyncOpenAIChatModel,
        model="gpt-test",
        base_url=server.url + "/v1",
        api_key="sk-test",
        max_retries=0,
        timeout=5.0,
    )


# -- thinking through a real tool loop of the runner ----------------------------------------


@pytest.fixture(params=[(k, m) for k in KINDS for m in ("send", "stream")], ids="-".join)
def runner(request, tmp_path, server):
    kind, mode = request.param
    h = Harness(kind, tmp_path)
    adapter = AnthropicChatModel if kind == "sync" else AsyncAnthropicChatModel
    model = adapter(
        "claude-test",
        base_url=server.url,
        api_key="sk-ant-test",
        max_retries=0,
        timeout=5.0,
        max_tokens=2048,
        options={"thinking": THINKING},
    )
    yield h, mode, model
    if kind == "sync":
        model.close()
    else:
        h.loop.run(model.close())
    h.close()


def script(server, mode, text, tool_uses, thinking):
    if mode == "send":
        server.reply_json(anthropic_message(text, tool_uses, thinking=thinking))
    else:
        pieces = [(i, n, [json.dumps(a)]) for i, n, a in tool_uses]
        server.reply_sse(anthropic_events([text] if text else [], pieces, thinking=thinking))


def test_a_thinking_tool_loop_sends_the_thinking_back_and_passes(runner, server):
    h, mode, model = runner
    script(server, mode, None, [("toolu_1", "get_weather", {"city": "Oslo"})], [THOUGHT, HIDDEN])
    script(server, mode, "Oslo is clear, 18C.", [], [thinking_block("Answer.", "sig-2")])
    chat = h.make(model, tools=[get_weather])

    if mode == "send":
        assert chat.send("s", "Weather in Oslo?").text == "Oslo is clear, 18C."
    else:
        events = chat.stream("s", "Weather in Oslo?")
        assert "Oslo is clear, 18C." in "".join(e for e in events if isinstance(e, str))

    # two requests, both answered 200: the server refuses (400) a tool loop whose thinking
    # blocks do not come back as it issued them
    first, second = (r.body for r in server.requests)
    assert first["thinking"] == THINKING and second["thinking"] == THINKING
    assistant = second["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == [
        THOUGHT,
        HIDDEN,
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    stored = [e.message for e in h.service.events("s") if e.message]
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].parts == (
        ReasoningPart("anthropic", text=THOUGHT["thinking"], signature=THOUGHT["signature"]),
        ReasoningPart("anthropic", encrypted=HIDDEN["data"], redacted=True),
    )
    assert stored[1].tool_calls == (CALL,)
    assert stored[3].text == "Oslo is clear, 18C."
    assert stored[3].parts[0] == ReasoningPart("anthropic", text="Answer.", signature="sig-2")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "sent",
    [
        pytest.param([HIDDEN], id="thinking-dropped"),
        pytest.param([], id="all-reasoning-dropped"),
        pytest.param([dict(THOUGHT, signature="sig-forged"), HIDDEN], id="signature-changed"),
        pytest.param([dict(THOUGHT, thinking="Edited."), HIDDEN], id="text-changed"),
    ],
)
def test_the_server_refuses_thinking_not_passed_back_as_issued(kind, server, sent):
    """The test server is honest: what the real API refuses, it refuses."""
    model = anthropic_twin(kind, server, options={"thinking": THINKING})
    server.reply_json(
        anthropic_message(None, [("toolu_1", "get_weather", {})], thinking=[THOUGHT, HIDDEN])
    )
    server.reply_json(anthropic_message("done"))
    question = Message.user("Weather?")
    reply = model.respond([question]).message
    parts = [
        ReasoningPart("anthropic", text=b["thinking"], signature=b["signature"])
        if b["type"] == "thinking"
        else ReasoningPart("anthropic", encrypted=b["data"], redacted=True)
        for b in sent
    ]
    changed = Message.assistant(parts=parts, tool_calls=reply.tool_calls)
    result = Message.tool(ToolResult("toolu_1", "get_weather", "18C"))
    with pytest.raises(ModelError) as caught:
        model.respond([question, changed, result])
    assert caught.value.status == 400
    # passed back as received, the same request passes
    assert model.respond([question, reply, result]).message.text == "done"


# -- reading thinking and unknown blocks -------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_streamed_thinking_becomes_reasoning_parts_in_order(kind, server):
    model = anthropic_twin(kind, server)
    server.reply_sse(
        anthropic_events(
            ["It is ", "18C."],
            [("toolu_1", "get_weather", ['{"city":', '"Oslo"}'])],
            thinking=[THOUGHT, HIDDEN],
        )
    )
    events = model.stream([Message.user("Weather?")])
    assert [e for e in events if isinstance(e, str)] == ["It is ", "18C."]
    message = events[-1].message
    assert message.parts == (
        ReasoningPart("anthropic", text=THOUGHT["thinking"], signature=THOUGHT["signature"]),
        ReasoningPart("anthropic", encrypted=HIDDEN["data"], redacted=True),
        TextPart("It is 18C."),
    )
    assert message.text == "It is 18C." and message.tool_calls == (CALL,)


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_block_is_a_provider_part_sent_back_to_anthropic_only(kind, server):
    model = anthropic_twin(kind, server)
    search = {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "Oslo"},
    }
    found = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    body = anthropic_message("Oslo is clear.")
    body["content"] = [THOUGHT, search, found, *body["content"]]
    server.reply_json(body)
    message = model.respond([Message.user("Weather?")]).message
    assert message.parts[1:] == (
        ProviderPart("anthropic", "server_tool_use", search),
        ProviderPart("anthropic", "web_search_tool_result", found),
        TextPart("Oslo is clear."),
    )
    assert message.text == "Oslo is clear."

    server.reply_json(anthropic_message("ok"))
    model.respond([Message.user("Weather?"), message, Message.user("thanks")])
    assert server.last_body()["messages"][1]["content"] == [
        THOUGHT,
        search,
        found,
        {"type": "text", "text": "Oslo is clear."},
    ]
    server.reply_json(openai_completion("ok"))
    openai_twin(kind, server).respond([Message.user("Weather?"), message, Message.user("thanks")])
    assert server.last_body()["messages"][1] == {"role": "assistant", "content": "Oslo is clear."}


# -- sending parts ---------------------------------------------------------------------------


def foreign_reply():
    """An assistant message holding reasoning and blocks of both providers."""
    return Message.assistant(
        parts=[
            ReasoningPart("openai", text="summary", encrypted="gAAAAB-openai"),
            ReasoningPart("anthropic", text="Thinking.", signature="sig-a"),
            ReasoningPart("anthropic", text="No signature."),
            ProviderPart("openai", "annotation", {"type": "url_citation"}),
            ProviderPart("unknown", "future", {"type": "future"}),
            "Here.",
        ],
        tool_calls=[CALL],
    )


@pytest.mark.parametrize("kind", KINDS)
def test_images_documents_and_tool_result_images_reach_anthropic(kind, server):
    model = anthropic_twin(kind, server)
    server.reply_json(anthropic_message("A dot."))
    tool_image = ToolResult(
        "toolu_1", "get_weather", "", parts=(TextPart("The map:"), ImagePart("image/png", data=PNG))
    )
    model.respond(
        [
            Message.system("Use the handbook.", FilePart("text/csv", data=b"a,b\n", name="t.csv")),
            Message.user(
                "What are these?",
                ImagePart("image/png", data=PNG, detail="high", filename="dot.png"),
                ImagePart("image/jpeg", url="https://example.com/cat.jpg"),
                FilePart("application/pdf", data=PDF, name="report.pdf"),
                FilePart("application/pdf", url="https://example.com/r.pdf"),
                AudioPart("audio/wav", data=WAV),
                ImagePart("image/png", ref="sha256:" + "a" * 64, size=70),
            ),
            foreign_reply(),
            Message.tool(tool_image),
        ]
    )
    body = server.last_body()
    assert body["system"] == "Use the handbook.\n[file: text/csv, t.csv, 4 bytes]"
    user, assistant, results = body["messages"]
    assert user["content"] == [
        {"type": "text", "text": "What are these?"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": B64(PNG).decode()},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {
            "type": "document",
            "source": {
                "type": "base64",
                "media_type": "application/pdf",
                "data": B64(PDF).decode(),
            },
            "title": "report.pdf",
        },
        {"type": "document", "source": {"type": "url", "url": "https://example.com/r.pdf"}},
        {"type": "text", "text": f"[audio: audio/wav, {len(WAV)} bytes]"},
        {"type": "text", "text": "[image: image/png, 70 bytes, sha256:aaaaaaaaaaaa]"},
    ]
    # only Anthropic's own signed reasoning goes back: never OpenAI's, nor another's blocks
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "Thinking.", "signature": "sig-a"},
        {"type": "text", "text": "Here."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    assert "gAAAAB" not in json.dumps(body)
    assert results["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [
                {"type": "text", "text": "The map:"},
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": "image/png",
                        "data": B64(PNG).decode(),
                    },
                },
            ],
        }
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_images_audio_and_files_reach_openai_chat_completions(kind, server):
    model = openai_twin(kind, server)
    server.reply_json(openai_completion("A dot."))
    tool_image = ToolResult(
        "toolu_1", "get_weather", "", parts=(TextPart("The map:"), ImagePart("image/png", data=PNG))
    )
    model.respond(
        [
            Message.user(
                "What are these?",
                ImagePart("image/png", data=PNG, detail="low"),
                ImagePart("image/jpeg", url="https://example.com/cat.jpg"),
                AudioPart("audio/wav", data=WAV),
                AudioPart("audio/mpeg", data=b"ID3"),
                AudioPart("audio/ogg", data=b"OggS"),
                FilePart("application/pdf", data=PDF, name="report.pdf"),
                FilePart("application/pdf", url="https://example.com/r.pdf"),
            ),
            foreign_reply(),
            Message.tool(tool_image),
        ]
    )
    user, assistant, tool, attachments = server.last_body()["messages"]
    assert user["content"] == [
        {"type": "text", "text": "What are these?"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + B64(PNG).decode(), "detail": "low"},
        },
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "input_audio", "input_audio": {"data": B64(WAV).decode(), "format": "wav"}},
        {"type": "input_audio", "input_audio": {"data": B64(b"ID3").decode(), "format": "mp3"}},
        {"type": "text", "text": "[audio: audio/ogg, 4 bytes]"},
        {
            "type": "file",
            "file": {
                "file_data": "data:application/pdf;base64," + B64(PDF).decode(),
                "filename": "report.pdf",
            },
        },
        {"type": "text", "text": "[file: application/pdf]"},
    ]
    # Chat Completions has no field for reasoning: none is sent, of either provider
    assert assistant["content"] == "Here."
    assert "sig-a" not in json.dumps(assistant) and "gAAAAB" not in json.dumps(assistant)
    # a tool message carries text only: the image goes in a user message right after it
    assert tool == {
        "role": "tool",
        "tool_call_id": "toolu_1",
        "content": "The map:\n[attachment 1 of 1: in the next user message]",
    }
    assert attachments == {
        "role": "user",
        "content": [
            {"type": "text", "text": "[the attachments of the tool result for call toolu_1: 1]"},
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64," + B64(PNG).decode()},
            },
        ],
    }


def test_the_thinking_example_of_the_docs_sends_its_options(server, monkeypatch):
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "models.md").read_text("utf-8")
    section = doc[doc.index("## Reasoning and images") :]
    [example] = [b for b in section.split("```python\n")[1:2]]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    namespace = {"AnthropicChatModel": AnthropicChatModel}
    exec(example.split("```")[0], namespace)
    server.reply_json(anthropic_message("Hi.", thinking=[THOUGHT]))
    with namespace["thinking_model"] as model:
        reply = model.respond([Message.user("hi")])
    assert server.last_body()["thinking"] == {"type": "enabled", "budget_tokens": 8_000}
    assert reply.message.parts[0].signature == THOUGHT["signature"]


def test_anthropic_messages_with_parts_read_back_from_the_wire():
    from turnlog.models.anthropic_format import from_anthropic_messages, to_anthropic_messages

    messages = [
        Message.user("What is this?", ImagePart("image/png", data=PNG)),
        Message.assistant(
            parts=[
                ReasoningPart("anthropic", text="Look.", signature="s1"),
                ReasoningPart("anthropic", encrypted="e1", redacted=True),
                "A map; checking.",
            ],
            tool_calls=[CALL],
        ),
        Message.tool(
            ToolResult("toolu_1", "get_weather", "", parts=(ImagePart("image/png", data=PNG),))
        ),
        Message.user("And the report?", FilePart("application/pdf", data=PDF, name="r.pdf")),
    ]
    assert from_anthropic_messages(*to_anthropic_messages(messages)) == messages


# -- interleaved thinking: thinking between tool calls, sent back in its order ----------------

T1 = thinking_block("Oslo first.", "sig-i1")
T2 = thinking_block("Now Bergen.", "sig-i2")
OSLO = tool_use_block("toolu_1", "get_weather", {"city": "Oslo"})
BERGEN = tool_use_block("toolu_2", "get_weather", {"city": "Bergen"})
INTERLEAVED = [T1, OSLO, T2, BERGEN]
CALLS = (
    ToolCall("toolu_1", "get_weather", '{"city":"Oslo"}'),
    ToolCall("toolu_2", "get_weather", '{"city":"Bergen"}'),
)


def reasoning(block):
    if block["type"] == "thinking":
        return ReasoningPart("anthropic", text=block["thinking"], signature=block["signature"])
    return ReasoningPart("anthropic", encrypted=block["data"], redacted=True)


def script_content(server, mode, content):
    if mode == "send":
        server.reply_json(anthropic_message(content=content))
    else:
        server.reply_sse(anthropic_events([], content=content))


def test_an_interleaved_tool_loop_goes_back_in_its_order_and_passes(runner, server):
    h, mode, model = runner
    script_content(server, mode, INTERLEAVED)
    final = thinking_block("Both looked up.", "sig-i3")
    script_content(server, mode, [final, {"type": "text", "text": "Both clear."}])
    chat = h.make(model, tools=[get_weather])

    if mode == "send":
        assert chat.send("s", "Oslo and Bergen?").text == "Both clear."
    else:
        assert "Both clear." in "".join(
            e for e in chat.stream("s", "Oslo and Bergen?") if isinstance(e, str)
        )

    # both requests answered 200: the server refuses thinking moved among the calls
    _, second = (r.body for r in server.requests)
    assert second["messages"][1] == {"role": "assistant", "content": INTERLEAVED}
    assert [b["type"] for b in second["messages"][2]["content"]] == ["tool_result"] * 2
    stored = [e.message for e in h.service.events("s") if e.message]
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].parts == (reasoning(T1), call_marker("toolu_1"), reasoning(T2))
    assert stored[1].tool_calls == CALLS
    assert stored[3].parts == (reasoning(final), TextPart("Both clear."))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "parts",
    [
        pytest.param([reasoning(T1), reasoning(T2)], id="thinking-ahead-of-the-calls"),
        pytest.param([reasoning(T1), call_marker("toolu_1")], id="second-thinking-dropped"),
        pytest.param([call_marker("toolu_1"), reasoning(T2)], id="first-thinking-dropped"),
        pytest.param([reasoning(T2), call_marker("toolu_1"), reasoning(T1)], id="thinking-swapped"),
    ],
)
def test_the_server_refuses_interleaved_thinking_not_in_its_order(kind, server, parts):
    """What the API refuses, the test server refuses: the final assistant message must hold
    the reply's thinking blocks where the reply had them among its tool_use blocks."""
    model = anthropic_twin(kind, server, options={"thinking": THINKING})
    server.reply_json(anthropic_message(content=INTERLEAVED))
    server.reply_json(anthropic_message("done"))
    question = Message.user("Oslo and Bergen?")
    reply = model.respond([question]).message
    results = Message.tool(
        [ToolResult("toolu_1", "get_weather", "18C"), ToolResult("toolu_2", "get_weather", "9C")]
    )
    changed = Message.assistant(parts=parts, tool_calls=CALLS)
    with pytest.raises(ModelError) as caught:
        model.respond([question, changed, results])
    assert caught.value.status == 400
    assert "cannot be modified" in str(caught.value) or "Expected `thinking`" in str(caught.value)
    # as received, the same request passes
    assert model.respond([question, reply, results]).message.text == "done"


@pytest.mark.parametrize("kind", KINDS)
def test_the_latest_reply_out_of_a_tool_loop_may_lose_its_thinking_but_not_its_order(kind, server):
    model = anthropic_twin(kind, server, options={"thinking": THINKING})
    answer = {"type": "text", "text": "Two cities."}
    server.reply_json(anthropic_message(content=[T1, answer, T2]))
    question, follow_up = Message.user("Which cities?"), Message.user("Thanks.")
    reply = model.respond([question]).message
    assert reply.parts == (reasoning(T1), TextPart("Two cities."), reasoning(T2))
    swapped = Message.assistant(parts=[reasoning(T2), "Two cities.", reasoning(T1)])
    server.reply_json(anthropic_message("ok"))
    with pytest.raises(ModelError) as caught:
        model.respond([question, swapped, follow_up])
    assert caught.value.status == 400
    # left out whole (what the reasoning policy does to finished turns), or as received: 200
    assert model.respond([question, Message.assistant("Two cities."), follow_up])
    server.reply_json(anthropic_message("ok"))
    assert model.respond([question, reply, follow_up]).message.text == "ok"


@pytest.mark.parametrize("kind", KINDS)
def test_a_streamed_interleaved_reply_reads_as_the_same_message(kind, server):
    model = anthropic_twin(kind, server)
    text = {"type": "text", "text": "Looking both up."}
    content = [T1, text, OSLO, T2, BERGEN]
    server.reply_sse(anthropic_events([], content=content))
    server.reply_json(anthropic_message(content=content))
    streamed = model.stream([Message.user("Oslo and Bergen?")])
    whole = model.respond([Message.user("Oslo and Bergen?")])
    assert streamed[-1] == whole
    assert whole.message.parts == (
        reasoning(T1),
        TextPart("Looking both up."),
        call_marker("toolu_1"),
        reasoning(T2),
    )
    assert whole.message.text == "Looking both up." and whole.message.tool_calls == CALLS


def test_a_reply_without_interleaving_is_stored_byte_for_byte_as_before():
    """No marker when the calls come last: the body is the one stored before markers existed
    (the fixture of format 1)."""
    from pathlib import Path

    from turnlog.codec import encode_body
    from turnlog.events import SessionEvent
    from turnlog.models.anthropic_format import response_from_anthropic

    fixture = json.loads(
        (Path(__file__).parent / "fixtures" / "bodies_v1_parts.json").read_text("utf-8")
    )["assistant_reasoning_tools"]
    content = [
        thinking_block("The user wants the weather; call the tool.", "EqQBCkYIBxgCKkBsig=="),
        redacted_block("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"),
        {"type": "text", "text": "Checking."},
        {"type": "text", "text": ""},
        tool_use_block("toolu_1", "get_weather", {"city": "Oslo"}),
        {"type": "text", "text": ""},  # an empty block after the call carries nothing
    ]
    message = response_from_anthropic(anthropic_message(content=content)).message
    event = SessionEvent.for_message("s", message, metadata={"model": "claude-sonnet-4-5"})
    assert encode_body(event).decode() == fixture["body"]


def test_a_tool_result_part_no_user_message_takes_goes_as_its_note():
    from turnlog.models.openai_format import to_openai_messages

    clip = ToolResult(
        "c1", "record", "", parts=(TextPart("clip:"), AudioPart("audio/ogg", data=b"OggS"))
    )
    assert to_openai_messages([Message.tool(clip)]) == [
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": f"clip:\n[audio: audio/ogg, 4 bytes] {NOT_SENT}",
        }
    ]  # and no user message after it: nothing to attach
