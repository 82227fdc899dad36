"""Chat Completions content parts through OpenAIChatModel, against the local server
(tests/model_servers.py): a tool result's image goes in the user message after the tool
messages (and the server bills it, as OpenAI does for what the model sees), merged into the next
user message when one follows; a reply's content part of an unknown kind is stored as a
provider part, and the turn goes on."""

import base64
import json

import pytest

from chat_harness import KINDS, Harness, alternation_breaks, enforce_alternation
from model_servers import ScriptedServer, Twin, openai_completion
from turnlog import Message, ToolCall, ToolResult
from turnlog.models import AsyncOpenAIChatModel, OpenAIChatModel
from turnlog.models.openai_format import from_openai_messages, to_openai_messages
from turnlog.parts import AudioPart, FilePart, ImagePart, ProviderPart, TextPart

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f01f00050001ff89993d1d"
    "0000000049454e44ae426082"
)
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
B64 = base64.b64encode
CALL = ToolCall("call_1", "get_map", '{"city":"Oslo"}')
MAP = ToolResult(
    "call_1",
    "get_map",
    "",
    parts=(
        TextPart("Oslo:"),
        ImagePart("image/png", data=PNG, detail="low"),
        TextPart("and its legend"),
        FilePart("application/pdf", data=PDF, name="legend.pdf"),
    ),
)


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


def twin(kind, server):
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


def conversation(*after):
    return [
        Message.user("Show me Oslo."),
        Message.assistant(None, [CALL]),
        Message.tool(MAP),
        *after,
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_a_tool_results_image_reaches_the_model_in_a_user_message_after_it(kind, server):
    model = twin(kind, server)
    enforce_alternation(server, "openai")
    server.reply_json(openai_completion("A map of Oslo."))

    model.respond(conversation())

    request = server.requests[-1]
    _, _, tool, attachments = request.body["messages"]
    assert tool == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Oslo:\n[attachment 1 of 2: in the next user message]\nand its legend\n"
        "[attachment 2 of 2: in the next user message]",
    }
    assert attachments["role"] == "user"
    assert attachments["content"] == [
        {"type": "text", "text": "[the attachments of the tool result for call call_1: 2]"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + B64(PNG).decode(), "detail": "low"},
        },
        {
            "type": "file",
            "file": {
                "file_data": "data:application/pdf;base64," + B64(PDF).decode(),
                "filename": "legend.pdf",
            },
        },
    ]
    # the server billed the image as input: the model was shown it
    assert [(i.width, i.height) for i in request.images] == [(1, 1)]
    assert from_openai_messages(request.body["messages"]) == conversation()


@pytest.mark.parametrize("kind", KINDS)
def test_the_attachments_lead_a_user_message_that_follows_so_roles_alternate(kind, server):
    model = twin(kind, server)
    enforce_alternation(server, "openai")  # 400 to two user messages in a row
    server.reply_json(openai_completion("It is a map."))
    after = Message.user("What is it?")

    model.respond(conversation(after))

    messages = server.requests[-1].body["messages"]
    assert alternation_breaks(server.requests[-1].body) == []
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[3]["content"][-1] == {"type": "text", "text": "What is it?"}
    assert len(messages[3]["content"]) == 4
    assert from_openai_messages(messages) == conversation(after)


def test_results_of_parallel_calls_keep_their_own_attachments():
    second = ToolResult(
        "call_2", "get_map", "", parts=(ImagePart("image/png", url="https://x.org/b.png"),)
    )
    plain = ToolResult("call_3", "get_time", "12:00")
    messages = [
        Message.user("Maps?"),
        Message.assistant(
            None, [CALL, ToolCall("call_2", "get_map", "{}"), ToolCall("call_3", "get_time", "{}")]
        ),
        Message.tool([MAP, second, plain]),
        Message.assistant("Here."),
    ]
    wire = to_openai_messages(messages)
    assert [m["role"] for m in wire] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "user",
        "assistant",
    ]
    headers = [p["text"] for p in wire[5]["content"] if p["type"] == "text"]
    assert headers == [
        "[the attachments of the tool result for call call_1: 2]",
        "[the attachments of the tool result for call call_2: 1]",
    ]
    assert wire[4] == {"role": "tool", "tool_call_id": "call_3", "content": "12:00"}
    assert from_openai_messages(wire) == messages


# -- a content part of a kind newer than turnlog -------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_reply_part_is_stored_as_a_provider_part_and_the_turn_goes_on(
    tmp_path, server, kind
):
    h = Harness(kind, tmp_path)
    adapter = OpenAIChatModel if kind == "sync" else AsyncOpenAIChatModel
    model = adapter("gpt-test", base_url=server.url + "/v1", api_key="k", max_retries=0)
    future = {"type": "hologram_2031", "frames": [1, 2]}
    calling = openai_completion(None, [("call_1", "get_weather", '{"city":"Oslo"}')])
    calling["choices"][0]["message"]["content"] = [{"type": "text", "text": "Checking."}, future]
    answer = openai_completion(None)
    answer["choices"][0]["message"]["content"] = [future, {"type": "text", "text": "Oslo: clear."}]
    server.reply_json(calling)
    server.reply_json(answer)
    try:
        chat = h.make(model, tools=[get_weather])
        assert chat.send("s", "Weather?").text == "Oslo: clear."
        stored = [e.message for e in h.service.events("s")]
        assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[1].parts == (
            TextPart("Checking."),
            ProviderPart("openai", "hologram_2031", future),
        )
        assert stored[1].tool_calls == (ToolCall("call_1", "get_weather", '{"city":"Oslo"}'),)
        assert stored[3].parts == (
            ProviderPart("openai", "hologram_2031", future),
            TextPart("Oslo: clear."),
        )
        # an assistant message goes back as its text and calls: Chat Completions takes no more
        sent = server.requests[1].body["messages"][1]
        assert sent["content"] == "Checking." and "hologram" not in json.dumps(sent)
    finally:
        if kind == "sync":
            model.close()
        else:
            h.loop.run(model.close())
        h.close()


# -- parts stored as attachments reach the wire with their bytes ---------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_attachments_of_a_user_message_and_a_tool_result_reach_chat_completions(
    tmp_path, server, kind
):
    """Bytes of 16 KiB and more are stored apart (a reference in the event); the runner puts
    them back, and they go as data (data: URLs, input_audio) to the wire."""
    import io
    import wave

    clip = io.BytesIO()
    with wave.open(clip, "wb") as w:  # 2.5 s of 8 kHz 8-bit silence
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(8_000)
        w.writeframes(bytes(20_000))
    wav = clip.getvalue()
    pdf = b"%PDF-1.4\n1 0 obj<</Type /Page>>endobj\n%" + b"x" * 20_000 + b"\n%%EOF\n"
    photo = PNG + bytes(20_000)  # a PNG's header, then padding standing for its pixels
    h = Harness(kind, tmp_path)
    adapter = OpenAIChatModel if kind == "sync" else AsyncOpenAIChatModel
    model = adapter("gpt-test", base_url=server.url + "/v1", api_key="k", max_retries=0)
    shot = ToolResult("call_1", "get_map", "", parts=(ImagePart("image/png", data=photo),))
    h.service.create("s")
    for message in (
        Message.user("Map of Oslo?"),
        Message.assistant(None, [CALL]),
        Message.tool(shot),
        Message.assistant("A map of Oslo."),
    ):
        h.service.append_message("s", message)
    server.reply_json(openai_completion("A clip and a report."))
    try:
        chat = h.make(model)
        question = Message.user(
            "And these?",
            AudioPart("audio/wav", data=wav),
            FilePart("application/pdf", data=pdf, name="report.pdf"),
        )
        chat.send("s", question)
        stored = [e.message for e in h.service.events("s") if e.message]
        roles_stored = ["user", "assistant", "tool", "assistant", "user", "assistant"]
        assert [m.role for m in stored] == roles_stored
        assert stored[2].tool_results[0].parts[0].ref is not None  # stored apart
        assert stored[4].parts[1].ref is not None and stored[4].parts[2].ref is not None
        messages = server.requests[-1].body["messages"]
        roles = ["user", "assistant", "tool", "user", "assistant", "user"]
        assert [m["role"] for m in messages] == roles
        attached = messages[3]["content"]
        assert attached[0]["text"] == "[the attachments of the tool result for call call_1: 1]"
        assert attached[1]["image_url"]["url"] == "data:image/png;base64," + B64(photo).decode()
        asked = messages[5]["content"]
        assert asked[0] == {"type": "text", "text": "And these?"}
        assert asked[1] == {
            "type": "input_audio",
            "input_audio": {"data": B64(wav).decode(), "format": "wav"},
        }
        assert asked[2]["file"] == {
            "file_data": "data:application/pdf;base64," + B64(pdf).decode(),
            "filename": "report.pdf",
        }
    finally:
        if kind == "sync":
            model.close()
        else:
            h.loop.run(model.close())
        h.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["send", "stream"])
def test_a_refusal_is_the_replys_text_and_the_turn_ends_with_it(tmp_path, server, kind, mode):
    from model_servers import openai_chunks

    h = Harness(kind, tmp_path)
    adapter = OpenAIChatModel if kind == "sync" else AsyncOpenAIChatModel
    model = adapter("gpt-test", base_url=server.url + "/v1", api_key="k", max_retries=0)
    words = "I can't help with that."
    if mode == "send":
        refused = openai_completion(None)
        refused["choices"][0]["message"]["refusal"] = words
        server.reply_json(refused)
    else:
        chunks = openai_chunks([])
        chunks.insert(
            1,
            (
                None,
                dict(
                    chunks[1][1],
                    choices=[{"index": 0, "delta": {"refusal": words}, "finish_reason": None}],
                ),
            ),
        )
        server.reply_sse(chunks)
    try:
        chat = h.make(model)
        if mode == "send":
            assert chat.send("s", "Help me with that.").text == words
        else:
            assert (
                "".join(e for e in chat.stream("s", "Help me with that.") if isinstance(e, str))
                == words
            )
        assert h.service.events("s")[-1].message == Message.assistant(words)
    finally:
        if kind == "sync":
            model.close()
        else:
            h.loop.run(model.close())
        h.close()
