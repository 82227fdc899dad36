"""docs/toolsearch.md: its request-flow example runs, against a scripted model and a real file."""

import asyncio
import json
import re
from pathlib import Path

from turnlog import EventFilter, Message, ToolCall
from turnlog.toolsearch import SEARCH_TOOL_NAME, TOOLS_DISCOVERED, ToolReference

DOC = Path(__file__).resolve().parent.parent / "docs" / "toolsearch.md"


def first_python_block(after=""):
    text = DOC.read_text(encoding="utf-8")
    start = text.index(after) if after else 0
    match = re.search(r"```python\n(.*?)```", text[start:], re.DOTALL)
    assert match, "docs/toolsearch.md has no python example"
    return match.group(1)


def test_the_request_flow_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    offered = []
    replies = iter(
        [
            Message.assistant(
                tool_calls=[ToolCall("c1", SEARCH_TOOL_NAME, '{"query": "weather in a city"}')]
            ),
            Message.assistant(tool_calls=[ToolCall("c2", "get_weather", '{"city": "Paris"}')]),
            Message.assistant("Sunny in Paris."),
            Message.assistant("Anything else?"),
        ]
    )

    def call_model(messages, tools):
        offered.append([t["function"]["name"] for t in tools])
        return next(replies)

    def run_tool(name, arguments):
        assert name == "get_weather" and arguments == {"city": "Paris"}
        return "sunny"

    namespace = {"call_model": call_model, "run_tool": run_tool}
    exec(compile(first_python_block(), str(DOC), "exec"), namespace)
    try:
        assert namespace["handle"]("s1", "What's the weather in Paris?") == "Sunny in Paris."
        assert offered == [
            [SEARCH_TOOL_NAME],
            [SEARCH_TOOL_NAME, "get_weather"],
            [SEARCH_TOOL_NAME, "get_weather"],
        ]
        assert namespace["handle"]("s1", "Thanks") == "Anything else?"
        assert offered[-1] == [SEARCH_TOOL_NAME, "get_weather"]  # next request: still offered
        service = namespace["service"]
        found = service.events("s1", EventFilter(event_types=[TOOLS_DISCOVERED]))
        assert [e.payload["names"] for e in found] == [["get_weather"]]
        answer = next(e for e in service.view("s1") if e.role == "tool")
        assert json.loads(answer.message.tool_results[0].content)["tools"][0] == "get_weather"
    finally:
        namespace["service"].close()
    assert (tmp_path / "sessions.db").exists()


def test_the_async_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    offered = []
    replies = iter(
        [
            Message.assistant(tool_calls=[ToolCall("c1", SEARCH_TOOL_NAME, '{"query": "email"}')]),
            Message.assistant(tool_calls=[ToolCall("c2", "send_email", '{"to": "bob"}')]),
            Message.assistant("Sent."),
        ]
    )

    async def call_model(messages, tools):
        offered.append([t["function"]["name"] for t in tools])
        return next(replies)

    async def run_tool(name, arguments):
        assert name == "send_email" and arguments == {"to": "bob"}
        return "sent"

    namespace = {
        "call_model": call_model,
        "run_tool": run_tool,
        "ALL_TOOLS": [
            ToolReference("get_weather", "Current weather for a city."),
            ToolReference("send_email", "Send an email to a recipient."),
        ],
    }
    exec(compile(first_python_block(after="## Async"), str(DOC), "exec"), namespace)

    async def main():
        service = namespace["service"]
        try:
            assert await namespace["handle"]("s1", "Mail bob") == "Sent."
            found = await service.events("s1", EventFilter(event_types=[TOOLS_DISCOVERED]))
            assert [e.payload["names"] for e in found] == [["send_email"]]
        finally:
            await service.close()

    asyncio.run(main())
    assert offered == [
        [SEARCH_TOOL_NAME],
        [SEARCH_TOOL_NAME, "send_email"],
        [SEARCH_TOOL_NAME, "send_email"],
    ]
    assert (tmp_path / "sessions.db").exists()
