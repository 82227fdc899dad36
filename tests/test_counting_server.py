"""The counting test server: its recipe, by hand arithmetic with one token per character, and
its reported counts reaching both adapters over real sockets."""

from pathlib import Path

import pytest

from counting_server import CountingServer, anthropic_prompt_tokens, openai_prompt_tokens
from model_servers import anthropic_message, openai_completion
from turnlog import (
    CharCounter,
    CompactionRequest,
    CompactionWindow,
    MemoryStore,
    Message,
    SessionService,
    TokenCountTrigger,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.compaction import sent_events
from turnlog.compaction.reported import Reported, latest_report
from turnlog.models import AnthropicChatModel, OpenAIChatModel
from turnlog.toolsearch import ToolReference

CHARS = CharCounter()

WEATHER = ToolReference(
    "get_weather",
    "Weather now.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City."},
            "unit": {"type": "string", "enum": ["c", "f"]},
        },
    },
)
# 7 + len("get_weather:Weather now") + 3
#   + (3 + len("city:string:City"))
#   + (3 - 3 + (3 + 1) + (3 + 1) + len("unit:string:"))  + 12
TOOL = 7 + 23 + 3 + (3 + 16) + (3 - 3 + 4 + 4 + 12) + 12

CONVERSATION = [
    Message.system("Be brief."),  # 3 + len("system") + 9 = 18
    Message.user("hi"),  # 3 + len("user") + 2 = 9
    Message.assistant(tool_calls=[ToolCall("c1", "get_weather", '{"city":"Paris"}')]),
    Message.tool(ToolResult("c1", "get_weather", "sunny")),  # 3 + 4 + 5 = 12
    Message.user("thanks"),
]
CALL = 3 + len("assistant") + (3 + len("get_weather") + len('{"city":"Paris"}'))  # 42
PRIMING = 3


def test_the_openai_recipe_by_hand():
    body = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi", "name": "ann"},
        ],
        "tools": [WEATHER.as_openai_tool()],
    }
    assert openai_prompt_tokens(body, CHARS) == PRIMING + 18 + (9 + 1 + 3) + TOOL
    assert TOOL == 84


def test_the_anthropic_recipe_by_hand():
    body = {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "ok"},
                    {"type": "text", "text": "and?"},
                ],
            },
        ],
        "tools": [WEATHER.as_anthropic_tool()],
    }
    tool_use = 3 + len("assistant") + (3 + 1 + len('{"a":1}'))
    results = 3 + len("user") + 2 + 4  # one turn: the result and the text
    assert anthropic_prompt_tokens(body, CHARS) == PRIMING + 18 + 9 + tool_use + results + TOOL


@pytest.fixture
def server():
    s = CountingServer(CHARS)
    yield s
    s.close()


def test_openai_adapter_reads_the_counted_usage(server):
    server.reply_json(openai_completion("Hello!"))
    with OpenAIChatModel("m", base_url=server.url + "/v1", api_key="k", max_retries=0) as model:
        response = model.respond(CONVERSATION, [WEATHER])
    # one tool message per result, then the user's
    expected = PRIMING + 18 + 9 + CALL + 12 + (3 + 4 + 6) + TOOL
    assert server.counts == [expected]
    assert response.usage.input_tokens == expected
    assert response.usage.output_tokens == len("Hello!")


def test_anthropic_adapter_reads_the_counted_usage(server):
    server.reply_json(anthropic_message("Hello!"))
    with AnthropicChatModel("m", base_url=server.url, api_key="k", max_retries=0) as model:
        response = model.respond(CONVERSATION, [WEATHER])
    # the tool result and "thanks" travel as one user turn: one message overhead less
    expected = PRIMING + 18 + 9 + CALL + (3 + 4 + 5 + 6) + TOOL
    assert server.counts == [expected]
    assert response.usage.input_tokens == expected
    assert response.usage.output_tokens == len("Hello!")


def test_the_default_counter_is_o200k():
    s = CountingServer()
    try:
        assert type(s.counter).__name__ == "O200kCounter"
    finally:
        s.close()


# -- the docs' loop stores what the trigger uses -------------------------------------------------

DOCS = Path(__file__).parent.parent / "docs" / "compaction.md"


def test_the_docs_loop_stores_a_report_the_trigger_uses(server):
    block = DOCS.read_text().split("metadata with `usage_metadata`:")[1]
    code = block.split("```python\n")[1].split("```")[0]
    service = SessionService(MemoryStore())
    sid = service.create().id
    service.append_message(sid, Message.system("Be brief."))
    service.append_message(sid, Message.user("hi"))
    server.reply_json(openai_completion("Hello!"))
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    with OpenAIChatModel("m", base_url=server.url + "/v1", api_key="k", max_retries=0) as model:
        exec(
            code,
            {
                "service": service,
                "sid": sid,
                "model": model,
                "tools": [WEATHER],
                "strategy": strategy,
            },
        )

    view = service.view(sid)
    assert latest_report(sent_events(view)) == Reported(2, PRIMING + 18 + 9 + TOOL)
    trigger = TokenCountTrigger(1, CHARS)
    request = CompactionRequest.of(service.get(sid), view)
    assert trigger.tokens(request) == PRIMING + 18 + 9 + TOOL + len("Assistant: Hello!")
