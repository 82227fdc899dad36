"""The wire-format test servers bill images as the providers do (tests/model_servers.py).

The expected numbers are worked by hand from the providers' guides (OpenAI's "Calculating
costs", Anthropic's "Evaluate image size"), not from turnlog.media: these servers are the oracle
the image-token benchmark checks turnlog's estimates against.
"""

from __future__ import annotations

import base64
import io
import json
import urllib.request

import pytest
from PIL import Image

from model_servers import (
    ScriptedServer,
    anthropic_billed_tokens,
    anthropic_events,
    anthropic_message,
    anthropic_scaled_size,
    openai_billed_tokens,
    openai_chunks,
    openai_completion,
)
from turnlog import ImagePart, Message, ToolCall, ToolResult
from turnlog.models import AnthropicChatModel, OpenAIChatModel

SCRIPTED_PROMPT = 42  # openai_completion's prompt_tokens; anthropic_message's 10 + 32 cached


def picture(width: int, height: int, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    mode = "P" if fmt == "GIF" else "RGB"
    Image.new(mode, (width, height), 7).save(out, fmt)
    return out.getvalue()


# -- the rules, by hand --------------------------------------------------------------------------

# (width, height, detail, tokens, how)
OPENAI_CASES = [
    (1024, 1024, "high", 765, "the guide: 768x768, 4 tiles"),
    (2048, 4096, "high", 1105, "the guide: 1024x2048, then 768x1536, 6 tiles"),
    (4096, 8192, "low", 85, "the guide: low detail is 85 whatever the size"),
    (512, 512, "high", 255, "not scaled up: 1 tile"),
    (513, 513, "high", 765, "2 x 2 tiles"),
    (100, 100, None, 255, "no detail is auto, billed as high: 1 tile"),
    (4000, 3000, "high", 765, "2048x1536, then 1024x768: 4 tiles"),
    (1920, 1080, "auto", 1105, "1365.33x768 -> 1365x768: 3 x 2 tiles"),
    (2001, 1500, "high", 1105, "1024.51x768 -> 1025x768 (nearest pixel): 3 x 2 tiles"),
    (3000, 100, "high", 765, "no side over 768 after the box: 2048x68, 4 x 1 tiles"),
]

# (width, height, scaled, tokens, how)
ANTHROPIC_CASES = [
    (200, 200, (200, 200), 54, "the guide: ~54"),
    (1000, 1000, (1000, 1000), 1334, "the guide: ~1334"),
    (1092, 1092, (1092, 1092), 1590, "the guide: ~1590, under 1,200,000 px"),
    (4000, 3000, (1264, 948), 1598, "the area binds: isqrt(1,600,000) x isqrt(900,000)"),
    (3000, 200, (1568, 104), 218, "the long edge binds: 200 x 1568 / 3000 = 104.5 -> 104"),
    (784, 1568, (774, 1549), 1599, "1,229,312 px is over 1,200,000: scaled by the area"),
    (1, 1, (1, 1), 1, "rounded up"),
]


@pytest.mark.parametrize(("width", "height", "detail", "tokens", "how"), OPENAI_CASES)
def test_openai_bills_an_image_by_the_tile_rule(width, height, detail, tokens, how):
    assert openai_billed_tokens(width, height, detail) == tokens, how
    assert openai_billed_tokens(height, width, detail) == tokens, "the rule has no orientation"


@pytest.mark.parametrize(("width", "height", "scaled", "tokens", "how"), ANTHROPIC_CASES)
def test_anthropic_bills_an_image_by_its_area_after_the_resize(width, height, scaled, tokens, how):
    assert anthropic_scaled_size(width, height) == scaled, how
    assert anthropic_billed_tokens(width, height) == tokens, how


def test_the_anthropic_area_limit_is_a_setting():
    # The guide's table of sizes not resized ends at 784x1568: 1,229,312 px, 1640 tokens.
    assert anthropic_billed_tokens(784, 1568, max_pixels=784 * 1568) == 1640
    # "no more than 1.15 megapixels": 1000x1150 stays, 1000x1151 is scaled (999x1150).
    assert anthropic_scaled_size(1000, 1150, max_pixels=1_150_000) == (1000, 1150)
    assert anthropic_scaled_size(1000, 1151, max_pixels=1_150_000) == (999, 1150)


# -- the servers, over real sockets ----------------------------------------------------------------


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


def openai_model(server):
    return OpenAIChatModel("gpt-test", base_url=server.url + "/v1", api_key="k", max_retries=0)


def anthropic_model(server):
    return AnthropicChatModel("claude-test", base_url=server.url, api_key="k", max_retries=0)


def test_chat_completions_adds_each_image_to_the_prompt_tokens(server):
    server.reply_json(openai_completion("A chart."))
    question = Message.user(
        "Compare these.",
        ImagePart("image/png", data=picture(1920, 1080), detail="auto"),
        ImagePart("image/jpeg", data=picture(4000, 3000, "JPEG"), detail="low"),
        ImagePart("image/webp", data=picture(512, 512, "WEBP")),
    )
    with openai_model(server) as model:
        response = model.respond([question])
    assert response.usage.input_tokens == SCRIPTED_PROMPT + 1105 + 85 + 255
    images = server.requests[-1].images
    assert [(i.width, i.height, i.detail, i.tokens) for i in images] == [
        (1920, 1080, "auto", 1105),
        (4000, 3000, "low", 85),
        (512, 512, None, 255),
    ]
    assert images[0].where == "messages.0.content.1"


def test_a_chat_completions_stream_bills_its_images_in_the_last_chunk(server):
    server.reply_sse(openai_chunks(["A ", "dot."]))
    question = Message.user("And this?", ImagePart("image/gif", data=picture(513, 513, "GIF")))
    with openai_model(server) as model:
        response = list(model.stream([question]))[-1]
    assert response.usage.input_tokens == SCRIPTED_PROMPT + 765


def test_messages_adds_each_image_to_the_input_tokens_tool_results_included(server):
    server.reply_json(anthropic_message("Two maps."))
    messages = [
        Message.user("Where?", ImagePart("image/jpeg", data=picture(4000, 3000, "JPEG"))),
        Message.assistant(tool_calls=[ToolCall("toolu_1", "map", "{}")]),
        Message.tool(
            ToolResult(
                "toolu_1", "map", "", parts=(ImagePart("image/png", data=picture(3000, 200)),)
            )
        ),
    ]
    with anthropic_model(server) as model:
        response = model.respond(messages)
    assert response.usage.input_tokens == SCRIPTED_PROMPT + 1598 + 218
    images = server.requests[-1].images
    assert [(i.width, i.height, i.tokens) for i in images] == [(4000, 3000, 1598), (3000, 200, 218)]
    assert images[1].where.startswith("messages.2.content.0.content")


def test_a_messages_stream_bills_its_images_in_message_start(server):
    server.reply_sse(anthropic_events(["Small."]))
    question = Message.user("Tiny?", ImagePart("image/png", data=picture(200, 200)))
    with anthropic_model(server) as model:
        response = list(model.stream([question]))[-1]
    assert response.usage.input_tokens == SCRIPTED_PROMPT + 54


def test_the_area_limit_of_a_server_is_its_own(server):
    server.anthropic_max_pixels = 784 * 1568
    server.reply_json(anthropic_message("Tall."))
    question = Message.user("Tall?", ImagePart("image/png", data=picture(784, 1568)))
    with anthropic_model(server) as model:
        assert model.respond([question]).usage.input_tokens == SCRIPTED_PROMPT + 1640


def post(server, path, body):
    request = urllib.request.Request(
        server.url + path, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def test_the_responses_api_adds_its_input_images_to_the_input_tokens(server):
    server.reply_json({"id": "resp_1", "usage": {"input_tokens": 12, "total_tokens": 20}})
    item = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is it?"},
            {"type": "input_image", "image_url": data_url(picture(1024, 1024)), "detail": "high"},
        ],
    }
    body = post(server, "/v1/responses", {"model": "gpt-test", "input": [item]})
    assert body["usage"] == {"input_tokens": 12 + 765, "total_tokens": 20 + 765}


def test_an_image_not_decoded_is_listed_and_bills_nothing(server):
    server.reply_json(openai_completion("?"))
    content = [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}},
        {"type": "image_url", "image_url": {"url": data_url(b"\x89PNG\r\n\x1a\nnot an image")}},
    ]
    body = post(
        server, "/v1/chat/completions", {"messages": [{"role": "user", "content": content}]}
    )
    assert body["usage"]["prompt_tokens"] == SCRIPTED_PROMPT
    images = server.requests[-1].images
    assert [(i.width, i.height, i.tokens) for i in images] == [(None, None, 0)] * 3


def test_billing_can_be_turned_off(server):
    server.bill_images = False
    server.reply_json(openai_completion("A square."))
    question = Message.user("?", ImagePart("image/png", data=picture(1024, 1024)))
    with openai_model(server) as model:
        assert model.respond([question]).usage.input_tokens == SCRIPTED_PROMPT
    assert server.requests[-1].images[0].tokens == 765


def test_a_request_without_images_keeps_the_scripted_usage_byte_for_byte(server):
    scripted = json.dumps(openai_completion("Hi")).encode()
    server.reply_raw(scripted)
    answer = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
    assert json.dumps(answer).encode() == scripted
    assert server.requests[-1].images == []
