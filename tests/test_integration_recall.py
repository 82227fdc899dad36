"""The recall tools of the framework adapters, in real runs of each framework.

Each framework talks Chat Completions to a `ScriptedServer` over a real socket, over a real
SQLite file. The session holds a fact that a compaction took out of the view; the scripted model
calls `search_history`, then `read_events` with the id of the first hit (the server builds that
reply from the search result it was sent), then answers. The tool results the framework sent
back must hold the original event; ids of another session give nothing; bad arguments give an
error result, and the run goes on.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from model_servers import Reply, ScriptedServer, openai_completion
from turnlog import (
    CompactionWindow,
    Message,
    SessionService,
    SqliteStore,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.recall_tools import recall_tool_references
from turnlog.service_async import AsyncSessionService
from turnlog.stores.sqlite_async import AsyncSqliteStore

FACT = "My parking spot is B-42 on level three."
LATER = [
    ("Book a table for Friday.", "Booked."),
    ("What is the weather?", "Sunny."),
    ("Thanks.", "You are welcome."),
]
QUESTION = "Where did I park my car? Look it up."
TRIGGER = TurnCountTrigger(2)
STRATEGY = WindowCompactionStrategy(CompactionWindow.last_turns(1))
CLOSE = {"connection": "close"}  # no client keeps a socket past its test


@pytest.fixture
def server():
    s = ScriptedServer()
    s.refuse_null_content = False  # some frameworks send null content beside tool calls
    yield s
    s.close()


def tool_messages(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def script_recall(server: ScriptedServer, search: dict | str, *, read: bool = True) -> None:
    """search_history with `search`; then read_events with the first hit's id (built from the
    search result the server is sent); then a final answer."""
    arguments = search if isinstance(search, str) else json.dumps(search)
    server.reply_json(openai_completion(None, [("call_s", "search_history", arguments)]), **CLOSE)
    server.reply_json(openai_completion("placeholder"), **CLOSE)
    server.reply_json(openai_completion("You parked at B-42."), **CLOSE)

    def follow(request, reply: Reply) -> Reply:
        if read and len(server.requests) == 2:
            hits = json.loads(tool_messages(request.body)[-1]["content"])["hits"]
            ids = json.dumps({"ids": [hits[0]["event_id"]] if hits else ["none"]})
            body = openai_completion(None, [("call_r", "read_events", ids)])
            return Reply(200, json.dumps(body).encode(), headers=CLOSE)
        return reply

    server.rewrite = follow


def fact_id(service: SessionService, session_id: str) -> str:
    [event] = [
        e for e in service.events(session_id) if e.message is not None and e.message.text == FACT
    ]
    return event.id


def check_recalled(server: ScriptedServer, path, session_id: str) -> None:
    """The fact was out of the view, the search found it first, read_events gave it whole."""
    first, _, last = server.requests[:3]
    assert "B-42" not in json.dumps(first.body["messages"])  # compacted out of the view
    assert {t["function"]["name"] for t in first.body["tools"]} == {
        "search_history",
        "read_events",
    }
    with SessionService(SqliteStore(path)) as service:
        wanted = fact_id(service, session_id)
    search, read = tool_messages(last.body)[-2:]
    hits = json.loads(search["content"])["hits"]
    assert hits[0]["event_id"] == wanted and "B-42" in hits[0]["snippet"]
    assert all(h["snippet"] != QUESTION for h in hits)  # the turn in progress is left out
    [event] = json.loads(read["content"])["events"]
    assert event["id"] == wanted and event["text"] == FACT
    assert event["role"] == "user" and event["turn"] == 1


def schemas(tools: list[tuple[str, str, dict]]) -> None:
    """The framework's tools are the runner's: names, descriptions, JSON schemas."""
    runner = {(r.name, r.description, json.dumps(r.parameters)) for r in recall_tool_references()}
    assert {(n, d, json.dumps(p)) for n, d, p in tools} == runner


# -- the OpenAI Agents SDK ---------------------------------------------------------------------


def other_session(path) -> str:
    """Another session of the same store; the id of its one event."""
    with SessionService(SqliteStore(path)) as service:
        service.get_or_create("other")
        return service.append_message("other", Message.user("Other: my spot is B-42 too.")).id


def agents_run(server, path, session_id, script):
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    from turnlog.integrations.openai_agents import TurnlogSession, recall_tools

    set_tracing_disabled(True)

    async def main():
        service = AsyncSessionService(AsyncSqliteStore(path))
        client = AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        try:
            session = TurnlogSession(session_id, service, trigger=TRIGGER, strategy=STRATEGY)
            items: list[Any] = []
            for asked, said in [(FACT, "Noted."), *LATER]:
                items.append({"role": "user", "content": asked})
                items.append({"role": "assistant", "content": said})
            await session.add_items(items)
            tools = recall_tools(session)
            schemas([(t.name, t.description, t.params_json_schema) for t in tools])
            model = OpenAIChatCompletionsModel("gpt-test", openai_client=client)
            agent = Agent(name="a", model=model, tools=tools)
            script()
            return await Runner.run(agent, QUESTION, session=session)
        finally:
            await client.close()
            await service.close()

    return asyncio.run(main())


def test_agents_sdk_recalls_a_compacted_fact(server, tmp_path):
    path = tmp_path / "t.db"
    result = agents_run(server, path, "s1", lambda: script_recall(server, {"query": "parking"}))
    assert result.final_output == "You parked at B-42."
    check_recalled(server, path, "s1")


def test_agents_sdk_other_sessions_ids_and_bad_arguments(server, tmp_path):
    path = tmp_path / "t.db"
    other = other_session(path)
    bad = {"query": "  "}
    server.reply_json(openai_completion(None, [("c1", "search_history", json.dumps(bad))]))
    server.reply_json(
        openai_completion(None, [("c2", "read_events", json.dumps({"ids": [other]}))])
    )
    server.reply_json(openai_completion(None, [("c3", "search_history", '{"quer": "x"}')]))
    server.reply_json(openai_completion("Done."))
    result = agents_run(server, path, "s1", lambda: None)
    assert result.final_output == "Done."
    blank, read, unknown = (m["content"] for m in tool_messages(server.requests[-1].body))
    assert blank.startswith("search_history:") and "blank" in blank
    assert json.loads(read) == {
        "events": [],
        "not_found": [other],
        "message": "ids under not_found are not events of this conversation's history",
    }
    assert "unknown argument 'quer'" in unknown


def script_errors(server: ScriptedServer, other: str) -> None:
    """A blank query, ids of another session, an unknown argument; then an answer."""
    calls = [
        ("c1", "search_history", json.dumps({"query": "  "})),
        ("c2", "read_events", json.dumps({"ids": [other]})),
        ("c3", "search_history", '{"quer": "x"}'),
    ]
    for call in calls:
        server.reply_json(openai_completion(None, [call]), **CLOSE)
    server.reply_json(openai_completion("Done."), **CLOSE)


def error_text(content: str) -> str:
    """An error result's text (pydantic-ai sends a failed tool result as {"error": text})."""
    if content.startswith('{"error"'):
        return json.loads(content)["error"]
    return content


def check_errors(server: ScriptedServer, other: str) -> None:
    blank, read, unknown = (m["content"] for m in tool_messages(server.requests[-1].body))
    blank, unknown = error_text(blank), error_text(unknown)
    assert blank.startswith("search_history:") and "blank" in blank
    assert json.loads(read)["events"] == [] and json.loads(read)["not_found"] == [other]
    assert "unknown argument 'quer'" in unknown


# -- LangChain ---------------------------------------------------------------------------------


def langchain_run(server, path, session_id, script, *, asynchronous=False):
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_openai import ChatOpenAI

    from turnlog.integrations.langchain import (
        TurnlogChatMessageHistory,
        TurnlogMiddleware,
        recall_tools,
    )

    with SessionService(SqliteStore(path)) as service:
        history = TurnlogChatMessageHistory(session_id, service)
        for asked, said in [(FACT, "Noted."), *LATER]:
            history.add_messages([HumanMessage(asked), AIMessage(said)])
        service.compact(session_id, TRIGGER, STRATEGY)
        schemas([(t.name, t.description, t.args_schema) for t in recall_tools(history)])
        middleware = TurnlogMiddleware(service, session_id=session_id, recall=True)
        model = ChatOpenAI(
            model="gpt-test", base_url=server.url + "/v1", api_key="unused", max_retries=0
        )
        agent = create_agent(model, tools=[], middleware=[middleware])
        script()
        state = {"messages": [HumanMessage(QUESTION)]}
        if asynchronous:
            return asyncio.run(agent.ainvoke(state))
        return agent.invoke(state)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_langchain_middleware_recalls_a_compacted_fact(server, tmp_path, asynchronous):
    path = tmp_path / "t.db"
    script = lambda: script_recall(server, {"query": "parking"})  # noqa: E731
    state = langchain_run(server, path, "s1", script, asynchronous=asynchronous)
    assert state["messages"][-1].content == "You parked at B-42."
    check_recalled(server, path, "s1")


def test_langchain_other_sessions_ids_and_bad_arguments(server, tmp_path):
    path = tmp_path / "t.db"
    other = other_session(path)
    state = langchain_run(server, path, "s1", lambda: script_errors(server, other))
    assert state["messages"][-1].content == "Done."
    check_errors(server, other)
    statuses = [m.status for m in state["messages"] if m.type == "tool"]
    assert statuses == ["error", "success", "error"]


def test_langchain_history_tools_read_the_history_session(tmp_path):
    from langchain_core.messages import AIMessage, HumanMessage

    from turnlog.integrations.langchain import TurnlogChatMessageHistory, recall_tools

    with SessionService(SqliteStore(tmp_path / "t.db")) as service:
        history = TurnlogChatMessageHistory("h", service)
        search, read = recall_tools(history)
        assert json.loads(search.invoke({"query": "parking"}))["hits"] == []  # not created yet
        history.add_messages([HumanMessage(FACT), AIMessage("Noted.")])
        history.clear()  # out of the view, in the log
        [hit] = json.loads(search.invoke({"query": "parking"}))["hits"]
        [event] = json.loads(asyncio.run(read.ainvoke({"ids": [hit["event_id"]]})))["events"]
        assert event["text"] == FACT
        call = {"name": "read_events", "args": {"ids": []}, "id": "c", "type": "tool_call"}
        refused = read.invoke(call)
        assert refused.status == "error" and refused.content.startswith("read_events: give ids")


# -- pydantic-ai -------------------------------------------------------------------------------


def pydantic_ai_run(server, path, session_id, script):
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from turnlog.integrations.pydantic_ai import (
        TurnlogHistory,
        recall_toolset,
        save_history_async,
    )

    async def main():
        service = AsyncSessionService(AsyncSqliteStore(path))
        client = AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        try:
            messages: list[Any] = []
            for asked, said in [(FACT, "Noted."), *LATER]:
                messages.append(ModelRequest(parts=[UserPromptPart(asked)]))
                messages.append(ModelResponse(parts=[TextPart(said)]))
            await save_history_async(service, session_id, messages)
            await service.compact(session_id, TRIGGER, STRATEGY)
            toolset = recall_toolset(service, session_id)
            schemas(
                [
                    (t.name, t.description, t.tool_def.parameters_json_schema)
                    for t in toolset.tools.values()
                ]
            )
            model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=client))
            history = TurnlogHistory(service, session_id, recall=True)
            agent = Agent(model, capabilities=[history])
            script()
            return await agent.run(QUESTION)
        finally:
            await client.close()
            await service.close()

    return asyncio.run(main())


def test_pydantic_ai_recalls_a_compacted_fact(server, tmp_path):
    path = tmp_path / "t.db"
    script = lambda: script_recall(server, {"query": "parking"})  # noqa: E731
    result = pydantic_ai_run(server, path, "s1", script)
    assert result.output == "You parked at B-42."
    check_recalled(server, path, "s1")


def test_pydantic_ai_other_sessions_ids_and_bad_arguments(server, tmp_path):
    path = tmp_path / "t.db"
    other = other_session(path)
    result = pydantic_ai_run(server, path, "s1", lambda: script_errors(server, other))
    assert result.output == "Done."
    check_errors(server, other)
    sent = [m["content"] for m in tool_messages(server.requests[-1].body)]
    assert [c.startswith('{"error"') for c in sent] == [True, False, True]  # failed results


# -- the docs' examples ------------------------------------------------------------------------


def recall_block(page: str) -> str:
    import re
    from pathlib import Path

    doc = Path(__file__).resolve().parent.parent / "docs" / "integrations" / page
    section = doc.read_text(encoding="utf-8").split("## Recall\n", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    return block


def test_the_agents_sdk_docs_example_recalls(server, tmp_path):
    from agents import OpenAIChatCompletionsModel, Runner
    from openai import AsyncOpenAI

    from turnlog.integrations.openai_agents import TurnlogSession

    path = tmp_path / "t.db"

    async def main():
        service = AsyncSessionService(AsyncSqliteStore(path))
        client = AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        try:
            session = TurnlogSession("user-42", service, trigger=TRIGGER, strategy=STRATEGY)
            for asked, said in [(FACT, "Noted."), *LATER]:
                await session.add_items(
                    [{"role": "user", "content": asked}, {"role": "assistant", "content": said}]
                )
            namespace: dict[str, Any] = {"session": session}
            exec(compile(recall_block("openai-agents.md"), "openai-agents.md", "exec"), namespace)
            model = OpenAIChatCompletionsModel("gpt-test", openai_client=client)
            script_recall(server, {"query": "parking"})
            agent = namespace["agent"].clone(model=model)
            return await Runner.run(agent, QUESTION, session=session)
        finally:
            await client.close()
            await service.close()

    assert asyncio.run(main()).final_output == "You parked at B-42."
    check_recalled(server, path, "user-42")


def test_the_langchain_docs_example_recalls(server, tmp_path, monkeypatch):
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_openai import ChatOpenAI

    from turnlog.integrations.langchain import TurnlogChatMessageHistory

    monkeypatch.chdir(tmp_path)
    with SessionService(SqliteStore("agent.db")) as service:
        history = TurnlogChatMessageHistory("user-42", service)
        for asked, said in [(FACT, "Noted."), *LATER]:
            history.add_messages([HumanMessage(asked), AIMessage(said)])
        service.compact("user-42", TRIGGER, STRATEGY)
    chat_model = ChatOpenAI(
        model="gpt-test", base_url=server.url + "/v1", api_key="unused", max_retries=0
    )
    script_recall(server, {"query": "parking"})
    code = recall_block("langchain.md").replace("Where did I park?", QUESTION)
    namespace: dict[str, Any] = {"__name__": "__main__", "chat_model": chat_model}
    exec(compile(code, "langchain.md", "exec"), namespace)
    namespace["service"].close()
    check_recalled(server, tmp_path / "agent.db", "user-42")


def test_the_pydantic_ai_docs_example_recalls(server, tmp_path, monkeypatch):
    from openai import AsyncOpenAI
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from turnlog.integrations.pydantic_ai import save_history_async

    monkeypatch.chdir(tmp_path)

    async def main():
        client = AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=client))
        namespace: dict[str, Any] = {"model": model}
        exec(compile(recall_block("pydantic-ai.md"), "pydantic-ai.md", "exec"), namespace)
        service = namespace["service"]
        try:
            messages: list[Any] = []
            for asked, said in [(FACT, "Noted."), *LATER]:
                messages.append(ModelRequest(parts=[UserPromptPart(asked)]))
                messages.append(ModelResponse(parts=[TextPart(said)]))
            await save_history_async(service, "user-42", messages)
            await service.compact("user-42", TRIGGER, STRATEGY)
            script_recall(server, {"query": "parking"})
            return await namespace["agent"].run(QUESTION)
        finally:
            await client.close()
            await service.close()

    assert asyncio.run(main()).output == "You parked at B-42."
    check_recalled(server, tmp_path / "chat.db", "user-42")
