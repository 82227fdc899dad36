"""turnlog messages <-> the Responses API's items (turnlog.models.responses_format): the exact
wire shapes, and lossless round trips both ways for every part kind (hand-worked examples, and
random conversations and replies checked against an oracle written here)."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog import InvalidInput, Message, ToolCall, ToolResult
from turnlog.models.base import MalformedReply
from turnlog.models.responses_format import (
    ERROR_PREFIX,
    MARKER_KIND,
    ResponsesStream,
    from_responses_input,
    output_message,
    response_from_responses,
    to_responses_input,
)
from turnlog.models.responses_parts import reasoning_item, reasoning_part
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    ProviderPart,
    ReasoningPart,
    TextPart,
    data_url,
)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
PDF = b"%PDF-1.4\n%\xe2\xe3\n1 0 obj <<>> endobj\n%%EOF\n"
WEATHER = ToolCall("c1", "get_weather", '{"city":"Oslo"}')
SEARCH_ITEM = {
    "id": "ws_1",
    "type": "web_search_call",
    "status": "completed",
    "action": {"type": "search", "query": "Oslo weather"},
}
TWO_SUMMARIES = {
    "id": "rs_2",
    "type": "reasoning",
    "summary": [
        {"type": "summary_text", "text": "**Plan**\n\nCheck the time."},
        {"type": "summary_text", "text": "Then the chart."},
    ],
    "encrypted_content": "gAAAAB-two",
    "status": "completed",
}

# every part kind the Responses API carries both ways, in each place it goes
CONVERSATION = [
    Message.system("You are terse."),
    Message.user(
        "What is in these?",
        ImagePart("image/png", data=PNG, detail="high"),
        ImagePart("image/jpeg", url="https://example.com/cat.jpg"),
        FilePart("application/pdf", data=PDF, name="handbook.pdf"),
        FilePart("application/pdf", url="https://example.com/a.pdf"),
        ProviderPart("openai", "input_image", {"type": "input_image", "file_id": "file-1"}),
    ),
    Message.assistant(
        parts=[
            ReasoningPart("openai", text="Looking.", signature="rs_1", encrypted="gAAAAB-one"),
            ProviderPart("openai", "web_search_call", SEARCH_ITEM),
            "Checking.",
        ],
        tool_calls=[WEATHER],
    ),
    Message.tool(ToolResult("c1", "get_weather", "3°C")),
    Message.assistant(
        parts=[reasoning_part(TWO_SUMMARIES, "a test")],
        tool_calls=[ToolCall("c3", "get_time", '{"tz":"CET"}'), ToolCall("c4", "chart", "{}")],
    ),
    Message.tool(
        [
            ToolResult("c3", "get_time", "no such zone", is_error=True),
            ToolResult(
                "c4", "chart", "", parts=(TextPart("the chart:"), ImagePart("image/png", data=PNG))
            ),
        ]
    ),
    Message.assistant(None, [ToolCall("c5", "plot", "{}")]),
    Message.tool(
        ToolResult(
            "c5",
            "plot",
            "",
            is_error=True,
            parts=(TextPart("bad axis"), FilePart("text/csv", data=b"a,b\n", name="x.csv")),
        )
    ),
    Message.assistant("Oslo 3°C."),
    Message.user("thanks"),
]

WIRE = [
    {"type": "message", "role": "system", "content": "You are terse."},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is in these?"},
            {"type": "input_image", "image_url": data_url("image/png", PNG), "detail": "high"},
            {"type": "input_image", "image_url": "https://example.com/cat.jpg"},
            {
                "type": "input_file",
                "file_data": data_url("application/pdf", PDF),
                "filename": "handbook.pdf",
            },
            {"type": "input_file", "file_url": "https://example.com/a.pdf"},
            {"type": "input_image", "file_id": "file-1"},
        ],
    },
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Looking."}],
        "encrypted_content": "gAAAAB-one",
    },
    SEARCH_ITEM,
    {"type": "message", "role": "assistant", "content": "Checking."},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": '{"city":"Oslo"}',
    },
    {"type": "function_call_output", "call_id": "c1", "output": "3°C"},
    TWO_SUMMARIES,
    {"type": "function_call", "call_id": "c3", "name": "get_time", "arguments": '{"tz":"CET"}'},
    {"type": "function_call", "call_id": "c4", "name": "chart", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c3", "output": ERROR_PREFIX + "no such zone"},
    {
        "type": "function_call_output",
        "call_id": "c4",
        "output": [
            {"type": "input_text", "text": "the chart:"},
            {"type": "input_image", "image_url": data_url("image/png", PNG)},
        ],
    },
    {"type": "function_call", "call_id": "c5", "name": "plot", "arguments": "{}"},
    {
        "type": "function_call_output",
        "call_id": "c5",
        "output": [
            {"type": "input_text", "text": ERROR_PREFIX},
            {"type": "input_text", "text": "bad axis"},
            {
                "type": "input_file",
                "file_data": data_url("text/csv", b"a,b\n"),
                "filename": "x.csv",
            },
        ],
    },
    {"type": "message", "role": "assistant", "content": "Oslo 3°C."},
    {"type": "message", "role": "user", "content": "thanks"},
]


def test_every_part_kind_goes_on_the_wire_as_the_api_names_it():
    assert to_responses_input(CONVERSATION) == WIRE


def test_the_round_trip_through_the_wire_is_lossless():
    assert from_responses_input(WIRE) == CONVERSATION
    assert from_responses_input(to_responses_input(CONVERSATION)) == CONVERSATION


def test_a_reasoning_item_comes_back_exactly_whatever_it_holds():
    for item in [
        {"id": "rs_1", "type": "reasoning", "summary": []},
        {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "e"},
        {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": None},
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": ""}]},
        TWO_SUMMARIES,
        {"type": "reasoning", "summary": [], "encrypted_content": "no id"},
        {  # an open model's reasoning text, no summary
            "id": "rs_9",
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "step 1"}],
        },
    ]:
        part = reasoning_part(item, "a test")
        assert part.provider == "openai"
        assert reasoning_item(part) == item
        assert json.dumps(reasoning_item(part)) == json.dumps(item)  # the fields' order too
    assert (
        reasoning_part(TWO_SUMMARIES, "t").text == "**Plan**\n\nCheck the time.\n\nThen the chart."
    )
    assert reasoning_part(TWO_SUMMARIES, "t").encrypted == "gAAAAB-two"
    simple = reasoning_part({"id": "rs_1", "type": "reasoning", "summary": []}, "t")
    assert simple == ReasoningPart("openai", signature="rs_1")  # the id alone, when it is all
    with pytest.raises(MalformedReply, match="encrypted_content"):
        reasoning_part({"id": "r", "type": "reasoning", "summary": [], "encrypted_content": 1}, "t")


def test_reasoning_read_elsewhere_goes_as_its_summary_and_never_to_another_provider():
    elsewhere = ReasoningPart("openai", text="a summary", encrypted="gAAAAB-agents")
    assert reasoning_item(elsewhere) == {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "a summary"}],
        "encrypted_content": "gAAAAB-agents",
    }
    assert reasoning_item(ReasoningPart("openai", text="nothing to send back")) is None
    claude = ReasoningPart("anthropic", text="thinking", signature="sig-anthropic")
    redacted = ReasoningPart("anthropic", encrypted="opaque", redacted=True)
    message = Message.assistant(
        parts=[claude, redacted, ProviderPart("anthropic", "server_tool_use", {"id": "x"}), "Hi."]
    )
    assert to_responses_input([message]) == [
        {"type": "message", "role": "assistant", "content": "Hi."}
    ]


def test_what_the_api_cannot_take_goes_as_a_note_and_a_ref_is_refused():
    wav = AudioPart("audio/wav", data=b"RIFF0000WAVE")
    message = Message.user("listen", wav)
    (item,) = to_responses_input([message])
    assert item["content"][1] == {"type": "input_text", "text": "[audio: audio/wav, 12 bytes]"}
    system = Message.system("Rules.", ImagePart("image/png", data=PNG))
    assert to_responses_input([system])[0]["content"] == "Rules.\n[image: image/png, 48 bytes]"
    nameless = Message.user("f", FilePart("application/pdf", data=PDF))
    assert to_responses_input([nameless])[0]["content"][1]["filename"] == "file"
    ref = ImagePart("image/png", ref="sha256:" + "ab" * 32, size=10)
    with pytest.raises(InvalidInput, match=r"with_bytes"):
        to_responses_input([Message.user("see", ref)])
    result = ToolResult("c1", "f", "", parts=(TextPart("x"), ref))
    with pytest.raises(InvalidInput, match="attachment reference"):
        to_responses_input([Message.assistant(None, [ToolCall("c1", "f")]), Message.tool(result)])


def test_a_reply_with_calls_between_its_items_keeps_their_order():
    output = [
        {"id": "rs_a", "type": "reasoning", "summary": [], "encrypted_content": "A"},
        {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"id": "rs_b", "type": "reasoning", "summary": [], "encrypted_content": "B"},
        {"id": "fc_2", "type": "function_call", "call_id": "c2", "name": "g", "arguments": ""},
    ]
    message = output_message(output, "a test")
    assert message.tool_calls == (ToolCall("c1", "f"), ToolCall("c2", "g"))
    assert message.parts == (
        ReasoningPart("openai", signature="rs_a", encrypted="A"),
        ProviderPart("openai", MARKER_KIND, {"call_id": "c1"}),
        ReasoningPart("openai", signature="rs_b", encrypted="B"),
    )
    assert [i.get("id") or i["call_id"] for i in to_responses_input([message])] == [
        "rs_a",
        "c1",
        "rs_b",
        "c2",
    ]
    lost = Message.assistant(parts=[ProviderPart("openai", MARKER_KIND, {"call_id": "gone"}), "x"])
    assert to_responses_input([lost]) == [{"type": "message", "role": "assistant", "content": "x"}]


def test_a_reply_is_read_with_its_usage_and_stop_reason():
    usage = {
        "input_tokens": 1200,
        "input_tokens_details": {"cached_tokens": 1024},
        "output_tokens": 300,
        "output_tokens_details": {"reasoning_tokens": 256},
        "total_tokens": 1500,
    }
    body = {
        "id": "resp_9",
        "model": "gpt-5-mini-2025",
        "status": "incomplete",
        "incomplete_details": {"reason": "content_filter"},
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hel"}],
            }
        ],
        "usage": usage,
    }
    response = response_from_responses(body, stored=True)
    assert response.message.text == "Hel"
    assert response.message.metadata == {
        "openai_responses.usage": usage,
        "openai_responses.response_id": "resp_9",
    }
    assert (response.usage.input_tokens, response.usage.output_tokens) == (1200, 300)
    assert response.usage.cached_input_tokens == 1024
    assert response.usage.reasoning_tokens == 256
    assert (response.model, response.stop_reason) == ("gpt-5-mini-2025", "content_filter")
    assert "openai_responses.response_id" not in response_from_responses(body).message.metadata
    with pytest.raises(MalformedReply, match="no valid 'output'"):
        response_from_responses({"id": "r"})


def test_a_stream_is_read_from_its_deltas_when_its_items_never_come_whole():
    stream = ResponsesStream()
    added = {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f", "arguments": ""}
    events = [
        {"type": "response.created", "response": {"id": "r", "model": "m", "output": []}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "m1", "type": "message", "role": "assistant", "content": []},
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "delta": "Let ",
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "delta": "me.",
        },
        {"type": "response.output_item.added", "output_index": 1, "item": added},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"a":'},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "1}"},
        {
            "type": "response.completed",
            "response": {"id": "r", "model": "m", "status": "completed", "output": []},
        },
    ]
    assert [stream.feed(e) for e in events] == [None, None, "Let ", "me.", None, None, None, None]
    message = stream.response().message
    assert message == Message.assistant("Let me.", [ToolCall("c1", "f", '{"a":1}')])
    cut = ResponsesStream()
    for event in events[:-1]:
        cut.feed(event)
    with pytest.raises(MalformedReply, match=r"ended before response\.completed"):
        cut.response()
    with pytest.raises(MalformedReply, match="never added"):
        ResponsesStream().feed(events[2])


# -- random conversations and replies ------------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_characters="[\x00"), min_size=1, max_size=12)
NAME = st.text("abcdefghij", min_size=1, max_size=8)


@st.composite
def user_parts(draw):
    parts = []
    for kind in draw(st.lists(st.sampled_from(range(6)), min_size=1, max_size=5)):
        if kind == 0:
            parts.append(TextPart(draw(TEXT)))
        elif kind == 1:
            detail = draw(st.sampled_from([None, "low", "high", "auto"]))
            parts.append(ImagePart("image/png", data=draw(st.binary(max_size=20)), detail=detail))
        elif kind == 2:
            ext, media = draw(st.sampled_from([(".png", "image/png"), (".jpg", "image/jpeg")]))
            parts.append(ImagePart(media, url=f"https://example.com/{draw(NAME)}{ext}"))
        elif kind == 3:
            media = draw(st.sampled_from(["application/pdf", "text/csv", "application/zip"]))
            name = draw(NAME) + ".bin"
            parts.append(FilePart(media, data=draw(st.binary(max_size=20)), name=name))
        elif kind == 4:
            parts.append(FilePart("application/pdf", url=f"https://example.com/{draw(NAME)}.pdf"))
        else:
            data = {"type": "input_image", "file_id": "file-" + draw(NAME)}
            parts.append(ProviderPart("openai", "input_image", data))
    return parts


def reasoning_output(rid, summary, enc, extra):
    return {
        "id": "rs_" + rid,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": t} for t in summary],
        **({} if enc == "absent" else {"encrypted_content": enc}),
        **extra,
    }


def other_output(kind, n):
    return {"id": f"x_{n}", "type": kind, "status": "completed", "n": n}


def message_output(texts, refusal):
    content = [{"type": "output_text", "text": t, "annotations": []} for t in texts]
    refused = [{"type": "refusal", "refusal": refusal}] if refusal else []
    item = {"id": "msg_x", "type": "message", "role": "assistant", "status": "completed"}
    return {**item, "content": content + refused}


REASONING_ITEM = st.builds(
    reasoning_output,
    NAME,
    st.lists(TEXT, max_size=3),
    st.one_of(st.just("absent"), st.none(), TEXT),
    st.sampled_from([{}, {"status": "completed"}]),
)
OTHER_ITEM = st.builds(
    other_output,
    st.sampled_from(["web_search_call", "image_generation_call", "a_kind_from_the_future"]),
    st.integers(0, 99),
)


@st.composite
def conversations(draw):
    messages = [Message.system(draw(TEXT))] if draw(st.booleans()) else []
    calls_made = 0
    for _ in range(draw(st.integers(1, 4))):
        messages.append(Message.user(*draw(user_parts())))
        parts = []
        for kind in draw(st.lists(st.sampled_from(["reasoning", "text", "other"]), max_size=4)):
            if kind == "reasoning":
                parts.append(reasoning_part(draw(REASONING_ITEM), "a test"))
            elif kind == "other":
                item = draw(OTHER_ITEM)
                parts.append(ProviderPart("openai", item["type"], item))
            elif not parts or type(parts[-1]) is not TextPart:  # the wire joins adjacent texts
                parts.append(TextPart(draw(TEXT)))
        calls = []
        for _ in range(draw(st.integers(0, 3))):
            calls_made += 1
            arguments = json.dumps({"n": draw(st.integers())})
            calls.append(ToolCall(f"call_{calls_made}", draw(NAME), arguments))
        if not parts and not calls:
            parts = [TextPart(draw(TEXT))]
        messages.append(Message.assistant(parts=parts, tool_calls=calls))
        if calls:
            results = []
            for call in calls:
                failed = draw(st.booleans())
                if draw(st.booleans()):
                    extra = draw(user_parts())
                    parts_ = (TextPart(draw(TEXT)), *extra)
                    results.append(
                        ToolResult(call.id, call.name, "", is_error=failed, parts=parts_)
                    )
                else:
                    results.append(ToolResult(call.id, call.name, draw(TEXT), is_error=failed))
            messages.append(Message.tool(results))
    return messages


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_random_conversations_come_back_from_the_wire_unchanged(messages):
    assert from_responses_input(to_responses_input(messages)) == messages


MESSAGE_ITEM = st.builds(
    message_output,
    st.lists(st.one_of(st.just(""), TEXT), min_size=1, max_size=2),
    st.one_of(st.none(), TEXT),
)


@st.composite
def outputs(draw):
    items = []
    for n, kind in enumerate(
        draw(st.lists(st.sampled_from(["reasoning", "message", "call", "other"]), max_size=7))
    ):
        if kind == "reasoning":
            items.append(draw(REASONING_ITEM))
        elif kind == "message":
            items.append(draw(MESSAGE_ITEM))
        elif kind == "other":
            items.append(draw(OTHER_ITEM))
        else:
            arguments = draw(st.sampled_from(["", "{}", '{"a": 1}', "not json"]))
            items.append(
                {
                    "id": f"fc_{n}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": f"call_{n}",
                    "name": draw(NAME),
                    "arguments": arguments,
                }
            )
    return items


def sent_back(output):
    """The oracle: what each output item must be sent back as, in the reply's order. Reasoning
    and other items as they came; message items as one assistant message of their texts
    (adjacent ones joined, empty ones left out); calls without their item id and status."""
    expected = []
    for item in output:
        if item["type"] == "message":
            text = "".join(c.get("text", c.get("refusal", "")) for c in item["content"])
            if not text:
                continue
            if expected and expected[-1].get("role") == "assistant":
                expected[-1]["content"] += text
            else:
                expected.append({"type": "message", "role": "assistant", "content": text})
        elif item["type"] == "function_call":
            expected.append(
                {
                    "type": "function_call",
                    "call_id": item["call_id"],
                    "name": item["name"],
                    "arguments": item["arguments"] or "{}",
                }
            )
        else:
            expected.append(item)
    return expected


@settings(max_examples=200, deadline=None)
@given(outputs())
def test_random_replies_are_sent_back_item_for_item(output):
    message = output_message(output, "a test")
    assert to_responses_input([message]) == sent_back(output)
    kinds = {type(p).__name__ for p in message.parts}
    assert ("ReasoningPart" in kinds) == any(i["type"] == "reasoning" for i in output)
