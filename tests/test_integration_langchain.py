"""turnlog.integrations.langchain: the chat message history and the create_agent middleware.

Real parts only: LangChain's own message types, `create_agent`'s real loop (LangGraph) with a
scripted `BaseChatModel` written here, LangGraph's `InMemorySaver`, a real SQLite file and the
memory store. There are no standard tests for `BaseChatMessageHistory` in `langchain-tests`
(its suites are for chat models, embeddings, tools, retrievers, key-value stores, caches,
indexers, vector stores and sandboxes); the history's behaviours are checked here one by one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from msgspec.structs import replace
from pydantic import Field

from model_servers import ScriptedServer, openai_completion
from turnlog import (
    CompactionWindow,
    EventType,
    FilePart,
    ImagePart,
    InvalidInput,
    MemoryStore,
    Message,
    ReasoningPart,
    SessionNotFound,
    SessionService,
    SqliteStore,
    TextPart,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.compaction import ChatModelSummarizer, ExtractiveSummarizer
from turnlog.compaction.summary import DEFAULT_SHADOW_PROMPT
from turnlog.integrations.langchain import (
    CLEAR_STRATEGY,
    EMPTY_REPLY,
    PARTS_KEY,
    AsyncLangChainChatModel,
    LangChainChatModel,
    TurnlogChatMessageHistory,
    TurnlogMiddleware,
    from_turnlog,
)
from turnlog.media import anthropic_image_tokens, openai_image_tokens
from turnlog.service_async import AsyncSessionService
from turnlog.stores.memory_async import AsyncMemoryStore
from turnlog.stores.sqlite_async import AsyncSqliteStore
from turnlog.testing.contract_async import LoopThread
from turnlog.text import event_text
from turnlog.tokens import default_counter, part_tokens

# -- helpers ---------------------------------------------------------------------------------------


def assert_paired(messages: list[BaseMessage]) -> None:
    """What a provider needs: a user message first (after system ones), every ToolMessage
    answering an open call of the AIMessage before it, no message while calls are open."""
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    assert rest, "an empty prompt"
    assert isinstance(rest[0], HumanMessage), f"the prompt starts with {rest[0].type}"
    open_calls: set[str] = set()
    for m in rest:
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in open_calls, f"orphan tool result {m.tool_call_id}"
            open_calls.discard(m.tool_call_id)
            continue
        assert not open_calls, f"{m.type} message while calls {open_calls} are unanswered"
        if isinstance(m, AIMessage):
            open_calls = {c["id"] for c in m.tool_calls if c["id"]}


def logged_messages(service: SessionService, session_id: str) -> list[BaseMessage]:
    """Every message of the log (not the view), as LangChain messages."""
    return [
        lc
        for e in service.events(session_id)
        if e.message is not None and not e.synthetic
        for lc in from_turnlog(e.message)
    ]


def every_kind() -> list[BaseMessage]:
    """One of each message kind, with every field LangChain carries set."""
    return [
        SystemMessage("Be brief.", id="s1", additional_kwargs={"cache": True}),
        HumanMessage(
            [{"type": "text", "text": "What is in"}, {"type": "image", "url": "https://x/y.png"}],
            id="h1",
            name="ann",
            additional_kwargs={"k": [1, 2]},
            response_metadata={"r": "x"},
        ),
        AIMessage(
            [{"type": "text", "text": "Let me look."}],
            id="a1",
            name="bot",
            tool_calls=[
                {
                    "name": "look",
                    "args": {"what": "image", "n": 2},
                    "id": "c1",
                    "type": "tool_call",
                },
                {"name": "size", "args": {}, "id": "c2", "type": "tool_call"},
            ],
            additional_kwargs={"refusal": None},
            response_metadata={"model_name": "m-1", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 10, "output_tokens": 3, "total_tokens": 13},
        ),
        ToolMessage("a cat", tool_call_id="c1", name="look", id="t1", artifact={"box": [1, 2]}),
        ToolMessage("failed", tool_call_id="c2", name="size", id="t2", status="error"),
        AIMessage("A cat.", id="a2", response_metadata={"finish_reason": "stop"}),
        ChatMessage("and now?", role="user", id="u2"),
        AIMessage("Still a cat.", id="a3"),
    ]


def turn(n: int, call: bool = True, result: str = "") -> list[BaseMessage]:
    """One user turn: a question, a call and its result (`result {n}`, then `result`), and the
    answer."""
    messages: list[BaseMessage] = [HumanMessage(f"question {n}", id=f"h{n}")]
    if call:
        messages += [
            AIMessage("", id=f"c{n}", tool_calls=[{"name": "f", "args": {"n": n}, "id": f"k{n}"}]),
            ToolMessage(f"result {n}{result}", tool_call_id=f"k{n}", name="f", id=f"t{n}"),
        ]
    return [*messages, AIMessage(f"answer {n}", id=f"a{n}")]


# -- the history, in every mode ----------------------------------------------------------------

MODES = ["memory", "sqlite", "async-memory", "async-sqlite", "sqlite-async-api"]


class Driver:
    """A history driven through its blocking methods, or through its async ones on a loop."""

    def __init__(self, history: TurnlogChatMessageHistory, loop: LoopThread | None) -> None:
        self.history = history
        self.loop = loop

    def add(self, messages: list[BaseMessage]) -> None:
        if self.loop is None:
            self.history.add_messages(messages)
        else:
            self.loop.run(self.history.aadd_messages(messages))

    def get(self) -> list[BaseMessage]:
        if self.loop is None:
            return self.history.messages
        return self.loop.run(self.history.aget_messages())

    def clear(self) -> None:
        if self.loop is None:
            self.history.clear()
        else:
            self.loop.run(self.history.aclear())

    def log(self) -> list[Any]:
        """The session's whole log; empty when the session was never created."""
        service = self.history._backend.service
        try:
            if isinstance(service, AsyncSessionService):
                assert self.loop is not None
                return self.loop.run(service.events(self.history.session_id))
            return service.events(self.history.session_id)
        except SessionNotFound:
            return []


@pytest.fixture(params=MODES)
def make_history(request, tmp_path):
    opened: list[Any] = []
    loop = LoopThread() if request.param != "memory" and request.param != "sqlite" else None

    def make(session_id: str = "s", **options: Any) -> Driver:
        service: SessionService | AsyncSessionService
        if request.param == "memory":
            service = opened[0] if opened else SessionService(MemoryStore())
        elif request.param in ("sqlite", "sqlite-async-api"):
            service = SessionService(SqliteStore(tmp_path / "h.db"))
        elif request.param == "async-memory":
            service = opened[0] if opened else AsyncSessionService(AsyncMemoryStore())
        else:
            service = AsyncSessionService(AsyncSqliteStore(tmp_path / "h.db"))
        opened.append(service)
        return Driver(TurnlogChatMessageHistory(session_id, service, **options), loop)

    yield make
    for service in opened:
        if isinstance(service, AsyncSessionService):
            assert loop is not None
            loop.run(service.close())
        else:
            service.close()
    if loop is not None:
        loop.stop()


def test_every_message_field_comes_back_equal(make_history):
    history = make_history()
    sent = every_kind()
    history.add(sent)
    assert history.get() == sent
    again = make_history()  # a new service: for SQLite, the file opened afresh
    got = again.get()
    assert got == sent
    assert [type(m) for m in got] == [type(m) for m in sent]
    assert got[2].usage_metadata == sent[2].usage_metadata
    assert got[3].artifact == {"box": [1, 2]}


def test_the_turnlog_form_is_what_turnlog_and_other_readers_see(make_history):
    history = make_history()
    history.add(every_kind())
    stored = [e.message for e in history.log()]
    assert [m.role for m in stored] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert [m.text for m in stored] == [
        "Be brief.",
        "What is in",
        "Let me look.",
        None,
        None,
        "A cat.",
        "and now?",
        "Still a cat.",
    ]
    calls = stored[2].tool_calls
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("c1", "look", {"what": "image", "n": 2}),
        ("c2", "size", {}),
    ]
    results = [r for m in stored[3:5] for r in m.tool_results]
    assert [(r.call_id, r.name, r.content, r.is_error) for r in results] == [
        ("c1", "look", "a cat", False),
        ("c2", "size", "failed", True),
    ]
    # and read back without the LangChain form, they still make a valid conversation
    plain = [m for message in stored for m in from_turnlog(replace(message, metadata={}))]
    assert_paired(plain)
    assert [type(m) for m in plain] == [type(m) for m in every_kind()[:6]] + [
        HumanMessage,
        AIMessage,
    ]
    assert plain[4].status == "error" and plain[2].tool_calls[0]["args"] == {
        "what": "image",
        "n": 2,
    }


def test_a_session_not_created_yet_has_no_messages_and_clears_to_nothing(make_history):
    history = make_history("never")
    assert history.get() == []
    history.clear()
    assert history.get() == []
    assert history.log() == []


def test_compaction_after_adds_keeps_calls_and_results_paired(make_history):
    history = make_history(
        trigger=TurnCountTrigger(2),
        strategy=WindowCompactionStrategy(CompactionWindow.last_events(3)),
    )
    everything: list[BaseMessage] = []
    for n in range(1, 7):
        for message in turn(n):  # one add per message, as a chat loop adds them
            history.add([message])
            everything.append(message)
            view = history.get()
            if view:
                assert_paired(view)
    view = history.get()
    assert len(view) < len(everything)
    assert view[-1] == everything[-1]
    log = history.log()
    assert sum(e.type == EventType.COMPACTION for e in log) >= 2
    assert [e.message.metadata["langchain"]["data"]["id"] for e in log if e.message] == [
        m.id for m in everything
    ]


def test_a_summary_comes_back_as_plain_messages(make_history):
    history = make_history(
        trigger=TurnCountTrigger(2),
        strategy=WindowCompactionStrategy(
            CompactionWindow.last_turns(1), summarizer=ExtractiveSummarizer()
        ),
    )
    data = ": " + "rows of data " * 30  # results long enough for the summary to be smaller
    for n in range(1, 4):
        history.add(turn(n, result=data))
    view = history.get()
    assert_paired(view)
    assert isinstance(view[0], HumanMessage) and view[0].id is None  # the shadow prompt
    assert isinstance(view[1], AIMessage) and "question 1" in view[1].text
    assert view[2:] == turn(3, result=data)


def test_clear_empties_the_view_and_keeps_the_log(make_history):
    history = make_history()
    history.add(turn(1) + turn(2))
    history.clear()
    assert history.get() == []
    log = history.log()
    assert len([e for e in log if e.message]) == 8
    assert log[-1].type == EventType.COMPACTION
    assert log[-1].payload["strategy"] == CLEAR_STRATEGY
    assert log[-1].payload["covered_event_count"] == 8
    history.clear()  # nothing left to clear: nothing appended
    assert len(history.log()) == len(log)
    history.add(turn(3))
    assert history.get() == turn(3)


def test_a_message_with_an_id_is_stored_once(make_history):
    history = make_history()
    history.add(turn(1, call=False))
    history.add(turn(1, call=False))
    assert history.get() == turn(1, call=False)
    history.add([HumanMessage("no id"), AIMessage("first")])
    history.add([HumanMessage("no id"), AIMessage("second")])
    assert [m.text for m in history.get()[2:]] == ["no id", "first", "no id", "second"]


def test_an_orphan_tool_message_is_refused_and_nothing_is_written(make_history):
    history = make_history()
    history.add(turn(1, call=False))
    with pytest.raises(InvalidInput, match="not an open call"):
        history.add([HumanMessage("again"), ToolMessage("x", tool_call_id="nope")])
    assert history.get() == turn(1, call=False)


def test_a_message_while_calls_are_open_is_refused(make_history):
    history = make_history()
    history.add(turn(1)[:2])  # the question and the call
    with pytest.raises(InvalidInput, match="unanswered"):
        history.add([HumanMessage("never mind")])
    history.add(turn(1)[2:])
    assert history.get() == turn(1)


def test_an_empty_reply_is_logged_and_left_out_of_the_view(make_history):
    history = make_history()
    empty = AIMessage("", id="e1", response_metadata={"finish_reason": "length"})
    history.add([HumanMessage("hi", id="h"), empty])
    assert history.get() == [HumanMessage("hi", id="h")]
    stored = [e for e in history.log() if e.type == EMPTY_REPLY]
    assert len(stored) == 1 and stored[0].payload["data"]["response_metadata"] == {
        "finish_reason": "length"
    }


def test_a_message_turnlog_cannot_store_is_refused(make_history):
    history = make_history()
    with pytest.raises(InvalidInput, match="RemoveMessage"):
        history.add([RemoveMessage(id="x")])
    with pytest.raises(InvalidInput, match="not JSON"):
        history.add([HumanMessage("hi", additional_kwargs={"when": object()})])
    assert history.log() == []


def test_the_blocking_methods_over_an_async_service_say_what_to_use():
    history = TurnlogChatMessageHistory("s", AsyncSessionService(AsyncMemoryStore()))
    with pytest.raises(InvalidInput, match="aget_messages"):
        _ = history.messages
    with pytest.raises(InvalidInput, match="aadd_messages"):
        history.add_messages([HumanMessage("hi")])
    with pytest.raises(InvalidInput, match="aclear"):
        history.clear()


def test_options_are_checked_up_front():
    service = SessionService(MemoryStore())
    with pytest.raises(InvalidInput, match="pass both"):
        TurnlogChatMessageHistory("s", service, trigger=TurnCountTrigger(2))
    with pytest.raises(InvalidInput, match="SessionService"):
        TurnlogChatMessageHistory("s", object())  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="session id"):
        TurnlogChatMessageHistory(" ", service)


# -- the middleware, in a real create_agent loop -----------------------------------------------


class ScriptedChat(BaseChatModel):
    """A chat model that answers from a script and records every prompt it was sent."""

    replies: list[AIMessage]
    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.prompts.append(list(messages))
        reply = self.replies[len(self.prompts) - 1]
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, tools, **kwargs) -> ScriptedChat:
        return self


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


CITIES = ["Oslo", "Lima", "Pune", "Kyiv"]


def weather_script() -> list[AIMessage]:
    """For each city: a call of get_weather, then the answer."""
    replies = []
    for n, city in enumerate(CITIES):
        call = {"name": "get_weather", "args": {"city": city}, "id": f"w{n}", "type": "tool_call"}
        replies += [AIMessage("", tool_calls=[call]), AIMessage(f"It is sunny in {city}.")]
    return replies


def compacting() -> dict[str, Any]:
    return {
        "trigger": TurnCountTrigger(2),
        "strategy": WindowCompactionStrategy(CompactionWindow.last_turns(1)),
    }


def texts(messages: list[BaseMessage]) -> list[str]:
    return [f"{m.type}:{m.text}" for m in messages if not isinstance(m, SystemMessage)]


def check_weather_run(model: ScriptedChat, results: list[dict[str, Any]]) -> None:
    """What the model saw over the four runs of one thread, compacted after three turns."""
    prompts = model.prompts
    assert len(prompts) == 8
    for prompt in prompts:
        assert isinstance(prompt[0], SystemMessage) and prompt[0].text == "Be terse."
        assert_paired(prompt)
    assert texts(prompts[0]) == ["human:Weather in Oslo?"]
    assert texts(prompts[1]) == ["human:Weather in Oslo?", "ai:", "tool:sunny in Oslo"]
    # the second run's state holds only its own input: the rest comes from the session
    assert texts(prompts[2]) == [
        "human:Weather in Oslo?",
        "ai:",
        "tool:sunny in Oslo",
        "ai:It is sunny in Oslo.",
        "human:Weather in Lima?",
    ]
    # a third turn fires the trigger: the model sees the last turn only
    assert texts(prompts[4]) == ["human:Weather in Pune?"]
    assert texts(prompts[6])[0] == "human:Weather in Pune?"
    assert texts(prompts[7])[-1] == "tool:sunny in Kyiv"
    assert [r["messages"][-1].text for r in results] == [f"It is sunny in {c}." for c in CITIES]


def check_weather_log(service: SessionService, session_id: str, stored: list[BaseMessage]):
    """Each message of the runs in the log once, equal to the one in the agent's state."""
    logged = logged_messages(service, session_id)
    assert logged == stored
    assert len({m.id for m in logged}) == len(logged) == 16
    events = service.events(session_id)
    assert sum(e.type == EventType.COMPACTION for e in events) == 1


def test_the_middleware_remembers_across_runs_and_compacts(tmp_path):
    service = SessionService(SqliteStore(tmp_path / "agent.db"))
    model = ScriptedChat(replies=weather_script())
    agent = create_agent(
        model,
        tools=[get_weather],
        system_prompt="Be terse.",
        middleware=[TurnlogMiddleware(service, **compacting())],
    )
    config = {"configurable": {"thread_id": "t-1"}}
    results = [
        agent.invoke({"messages": [HumanMessage(f"Weather in {city}?")]}, config) for city in CITIES
    ]
    check_weather_run(model, results)
    check_weather_log(service, "t-1", [m for r in results for m in r["messages"]])
    service.close()


def test_the_middleware_beside_a_checkpointer_stores_each_message_once():
    service = SessionService(MemoryStore())
    model = ScriptedChat(replies=weather_script())
    agent = create_agent(
        model,
        tools=[get_weather],
        system_prompt="Be terse.",
        middleware=[TurnlogMiddleware(service, session_id="chat-9", **compacting())],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "thread-x"}}
    result: dict[str, Any] = {}
    results = []
    for city in CITIES:
        result = agent.invoke({"messages": [HumanMessage(f"Weather in {city}?")]}, config)
        results.append(result)
    check_weather_run(model, results)
    assert len(result["messages"]) == 16  # the state keeps everything; the model saw less
    check_weather_log(service, "chat-9", result["messages"])
    assert service.find("thread-x") is None


def test_the_middleware_in_async_runs_over_an_async_service(tmp_path):
    async def main() -> None:
        service = AsyncSessionService(AsyncSqliteStore(tmp_path / "agent.db"))
        model = ScriptedChat(replies=weather_script())
        agent = create_agent(
            model,
            tools=[get_weather],
            system_prompt="Be terse.",
            middleware=[TurnlogMiddleware(service, **compacting())],
        )
        config = {"configurable": {"thread_id": "t-a"}}
        results = [
            await agent.ainvoke({"messages": [HumanMessage(f"Weather in {city}?")]}, config)
            for city in CITIES
        ]
        check_weather_run(model, results)
        await service.close()
        blocking = SessionService(SqliteStore(tmp_path / "agent.db"))
        check_weather_log(blocking, "t-a", [m for r in results for m in r["messages"]])
        blocking.close()

    asyncio.run(main())


def test_the_middleware_in_async_runs_over_a_blocking_service(tmp_path):
    service = SessionService(SqliteStore(tmp_path / "agent.db"))
    model = ScriptedChat(replies=weather_script())
    agent = create_agent(
        model,
        tools=[get_weather],
        system_prompt="Be terse.",
        middleware=[TurnlogMiddleware(service, **compacting())],
    )
    config = {"configurable": {"thread_id": "t-b"}}

    async def main() -> list[dict[str, Any]]:
        return [
            await agent.ainvoke({"messages": [HumanMessage(f"Weather in {city}?")]}, config)
            for city in CITIES
        ]

    results = asyncio.run(main())
    check_weather_run(model, results)
    check_weather_log(service, "t-b", [m for r in results for m in r["messages"]])
    service.close()


def test_a_run_that_ends_on_a_tool_is_stored_whole():
    @tool(return_direct=True)
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    service = SessionService(MemoryStore())
    call = {"name": "lookup", "args": {"key": "k"}, "id": "l1", "type": "tool_call"}
    model = ScriptedChat(replies=[AIMessage("", tool_calls=[call])])
    agent = create_agent(model, tools=[lookup], middleware=[TurnlogMiddleware(service)])
    result = agent.invoke(
        {"messages": [HumanMessage("Look k up")]}, {"configurable": {"thread_id": "d"}}
    )
    assert result["messages"][-1].text == "value of k"
    assert logged_messages(service, "d") == result["messages"]


def test_the_middleware_needs_a_session():
    service = SessionService(MemoryStore())
    model = ScriptedChat(replies=[AIMessage("hi")])
    agent = create_agent(model, middleware=[TurnlogMiddleware(service)])
    with pytest.raises(InvalidInput, match="thread_id"):
        agent.invoke({"messages": [HumanMessage("hello")]})
    assert model.prompts == []


def test_a_blocking_run_over_an_async_service_says_what_to_use():
    agent = create_agent(
        ScriptedChat(replies=[AIMessage("hi")]),
        middleware=[TurnlogMiddleware(AsyncSessionService(AsyncMemoryStore()), session_id="s")],
    )
    with pytest.raises(InvalidInput, match="ainvoke"):
        agent.invoke({"messages": [HumanMessage("hello")]})


def test_a_run_that_fails_in_a_tool_leaves_no_unanswered_call():
    @tool
    def explode(what: str) -> str:
        """Fail."""
        raise RuntimeError(f"{what} blew up")

    service = SessionService(MemoryStore())
    call = {"name": "explode", "args": {"what": "it"}, "id": "x1", "type": "tool_call"}
    model = ScriptedChat(replies=[AIMessage("", tool_calls=[call]), AIMessage("Hello again.")])
    agent = create_agent(model, tools=[explode], middleware=[TurnlogMiddleware(service)])
    config = {"configurable": {"thread_id": "boom"}}
    with pytest.raises(RuntimeError, match="blew up"):
        agent.invoke({"messages": [HumanMessage("Try it", id="h1")]}, config)
    result = agent.invoke({"messages": [HumanMessage("Hi", id="h2")]}, config)
    assert result["messages"][-1].text == "Hello again."
    assert texts(model.prompts[1]) == ["human:Try it", "human:Hi"]
    assert texts(logged_messages(service, "boom")) == [
        "human:Try it",
        "human:Hi",
        "ai:Hello again.",
    ]


# -- the history under RunnableWithMessageHistory (deprecated in LangChain, still in use) ------

DEPRECATED = "ignore:RunnableWithMessageHistory is deprecated"


@pytest.mark.filterwarnings(DEPRECATED)
def test_runnable_with_message_history_sends_the_compacted_view(tmp_path):
    service = SessionService(SqliteStore(tmp_path / "chain.db"))
    model = ScriptedChat(replies=[AIMessage(f"reply {n}") for n in range(1, 5)])
    chain = RunnableWithMessageHistory(
        model,
        lambda session_id: TurnlogChatMessageHistory(session_id, service, **compacting()),
    )
    config = {"configurable": {"session_id": "c-1"}}
    for n in range(1, 5):
        chain.invoke([HumanMessage(f"question {n}")], config)
    assert texts(model.prompts[1]) == ["human:question 1", "ai:reply 1", "human:question 2"]
    assert texts(model.prompts[3]) == ["human:question 3", "ai:reply 3", "human:question 4"]
    assert len(logged_messages(service, "c-1")) == 8
    service.close()


@pytest.mark.filterwarnings(DEPRECATED)
def test_runnable_with_message_history_awaits_an_async_service(tmp_path):
    async def main() -> None:
        service = AsyncSessionService(AsyncSqliteStore(tmp_path / "chain.db"))
        model = ScriptedChat(replies=[AIMessage(f"reply {n}") for n in range(1, 5)])
        chain = RunnableWithMessageHistory(
            model,
            lambda session_id: TurnlogChatMessageHistory(session_id, service, **compacting()),
        )
        config = {"configurable": {"session_id": "c-2"}}
        for n in range(1, 5):
            await chain.ainvoke([HumanMessage(f"question {n}")], config)
        assert texts(model.prompts[3]) == ["human:question 3", "ai:reply 3", "human:question 4"]
        history = TurnlogChatMessageHistory("c-2", service)
        assert texts(await history.aget_messages()) == [*texts(model.prompts[3]), "ai:reply 4"]
        await service.close()

    asyncio.run(main())


# -- docs/integrations/langchain.md: its examples run ------------------------------------------

DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations" / "langchain.md"


def doc_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def doc_block(text: str) -> str:
    [found] = [b for b in doc_blocks() if text in b]
    return found


OLLAMA = "http://localhost:11434/v1"


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


def test_the_agent_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    replies = weather_script()[:4]
    model = ScriptedChat(replies=replies)
    code = doc_block("create_agent(model")
    exec(compile(code, str(DOC), "exec"), {"__name__": "__main__", "model": model})
    assert texts(model.prompts[2])[:4] == [*texts(model.prompts[1]), "ai:It is sunny in Oslo."]
    with SessionService(SqliteStore(tmp_path / "agent.db")) as service:
        assert len(logged_messages(service, "user-42")) == 8


def test_the_openai_model_example_builds_with_the_extra_alone(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    namespace: dict[str, Any] = {}
    exec(compile(doc_block('init_chat_model("openai:gpt-6.1-sol")'), str(DOC), "exec"), namespace)
    assert type(namespace["model"]).__name__ == "ChatOpenAI"  # langchain-openai is installed


def test_the_agent_example_runs_on_a_local_openai_compatible_server(server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    local = doc_block(OLLAMA).replace(OLLAMA, server.url + "/v1")
    assert server.url in local
    server.refuse_null_content = False  # langchain-openai sends null content beside tool calls
    server.reply_json(openai_completion(None, [("call_1", "get_weather", '{"city": "Oslo"}')]))
    server.reply_json(openai_completion("It is sunny in Oslo."))
    server.reply_json(openai_completion("Sunny in Lima too."))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(local, str(DOC), "exec"), namespace)
    exec(compile(doc_block("create_agent(model"), str(DOC), "exec"), namespace)
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 3
    sent = server.requests[2].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[-1]["content"] == "And in Lima?"
    namespace["service"].close()


def test_the_summary_example_summarizes_with_the_model_it_names(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    namespace: dict[str, Any] = {}
    exec(compile(doc_block("ChatModelSummarizer(LangChainChatModel("), str(DOC), "exec"), namespace)
    server.reply_json(openai_completion("Ann asked about the weather."))
    with SessionService(MemoryStore()) as service:
        history = TurnlogChatMessageHistory(
            "s", service, trigger=TurnCountTrigger(9), strategy=namespace["strategy"]
        )
        for n in range(10):
            reply = f"reply {n}: " + "it rains in Oslo. " * 10  # longer than a summary
            history.add_messages([HumanMessage(f"question {n}"), AIMessage(reply)])
        assert history.messages[1].content == "Ann asked about the weather."
    assert server.requests[0].body["model"] == "gpt-6.1-terra"


def test_the_history_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(
        compile(doc_block("TurnlogChatMessageHistory("), str(DOC), "exec"), {"__name__": "__main__"}
    )
    assert "Hello Ann!" in capsys.readouterr().out
    with SessionService(SqliteStore(tmp_path / "chat.db")) as service:
        assert len(logged_messages(service, "user-42")) == 2


# -- a summary written by a LangChain model ----------------------------------------------------


def summarizing(summary_model: ScriptedChat, use_async: bool = False) -> dict[str, Any]:
    chat = (
        AsyncLangChainChatModel(summary_model) if use_async else LangChainChatModel(summary_model)
    )
    return {
        "trigger": TurnCountTrigger(2),
        "strategy": WindowCompactionStrategy(
            CompactionWindow.last_turns(1), summarizer=ChatModelSummarizer(chat)
        ),
    }


def check_summarized_run(model: ScriptedChat, summary_model: ScriptedChat) -> None:
    assert len(summary_model.prompts) == 1
    asked = "\n".join(m.text for m in summary_model.prompts[0])
    assert "Weather in Oslo?" in asked and "sunny in Lima" in asked
    summary = texts(model.prompts[4])
    assert summary[1:] == ["ai:Oslo and Lima were sunny.", "human:Weather in Pune?"]
    assert summary[0] == f"human:{DEFAULT_SHADOW_PROMPT}"
    for prompt in model.prompts:
        assert_paired(prompt)


def test_the_middleware_compacts_with_a_summary_by_a_langchain_model():
    service = SessionService(MemoryStore())
    model = ScriptedChat(replies=weather_script())
    summary_model = ScriptedChat(replies=[AIMessage("Oslo and Lima were sunny.")])
    agent = create_agent(
        model,
        tools=[get_weather],
        middleware=[TurnlogMiddleware(service, **summarizing(summary_model))],
    )
    config = {"configurable": {"thread_id": "sum"}}
    for city in CITIES:
        agent.invoke({"messages": [HumanMessage(f"Weather in {city}?")]}, config)
    check_summarized_run(model, summary_model)


def test_an_async_run_summarizes_with_an_async_langchain_model(tmp_path):
    async def main() -> None:
        service = AsyncSessionService(AsyncSqliteStore(tmp_path / "sum.db"))
        model = ScriptedChat(replies=weather_script())
        summary_model = ScriptedChat(replies=[AIMessage("Oslo and Lima were sunny.")])
        agent = create_agent(
            model,
            tools=[get_weather],
            middleware=[TurnlogMiddleware(service, **summarizing(summary_model, True))],
        )
        config = {"configurable": {"thread_id": "sum"}}
        for city in CITIES:
            await agent.ainvoke({"messages": [HumanMessage(f"Weather in {city}?")]}, config)
        check_summarized_run(model, summary_model)
        await service.close()

    asyncio.run(main())


def test_a_summary_reply_without_text_fails_the_compaction_after_the_add():
    service = SessionService(MemoryStore())
    summary_model = ScriptedChat(replies=[AIMessage("")])
    history = TurnlogChatMessageHistory("s", service, **summarizing(summary_model))
    history.add_messages(turn(1) + turn(2))
    with pytest.raises(InvalidInput, match="no text"):
        history.add_messages(turn(3))
    # the messages were stored first; the view is not compacted, and nothing else was written
    assert [m.id for m in history.messages] == [m.id for m in turn(1) + turn(2) + turn(3)]
    assert all(e.type == EventType.MESSAGE for e in service.events("s"))


def test_a_human_in_the_loop_pause_and_rejection_are_stored_in_order():
    service = SessionService(MemoryStore())
    calls = [
        {"name": "get_weather", "args": {"city": "Oslo"}, "id": "w1", "type": "tool_call"},
        {"name": "get_weather", "args": {"city": "Lima"}, "id": "w2", "type": "tool_call"},
    ]
    model = ScriptedChat(replies=[AIMessage("", tool_calls=calls), AIMessage("Oslo is sunny.")])
    agent = create_agent(
        model,
        tools=[get_weather],
        middleware=[
            TurnlogMiddleware(service),
            HumanInTheLoopMiddleware(interrupt_on={"get_weather": True}),
        ],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "hitl"}}
    paused = agent.invoke({"messages": [HumanMessage("Weather in Oslo and Lima?")]}, config)
    assert "__interrupt__" in paused
    assert texts(logged_messages(service, "hitl")) == ["human:Weather in Oslo and Lima?"]
    decisions = [{"type": "approve"}, {"type": "reject", "message": "Not Lima."}]
    result = agent.invoke(Command(resume={"decisions": decisions}), config)
    assert result["messages"][-1].text == "Oslo is sunny."
    assert_paired(model.prompts[1])
    logged = logged_messages(service, "hitl")
    assert logged == result["messages"]
    assert [m.type for m in logged] == ["human", "ai", "tool", "tool", "ai"]


def test_the_base_class_conveniences_go_through_add_messages():
    history = TurnlogChatMessageHistory("conv", SessionService(MemoryStore()))
    history.add_user_message("Hi, I'm Ann.")
    history.add_ai_message("Hello Ann!")
    history.add_message(HumanMessage("Bye"))
    assert texts(history.messages) == ["human:Hi, I'm Ann.", "ai:Hello Ann!", "human:Bye"]
    assert str(history) == "Human: Hi, I'm Ann.\nAI: Hello Ann!\nHuman: Bye"


def test_without_the_extra_the_import_error_says_what_to_install():
    child = textwrap.dedent(
        """
        import sys
        from importlib.abc import MetaPathFinder

        class NoLangChain(MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("langchain", "langchain_core", "langgraph"):
                    raise ImportError(f"No module named {name!r}")

        sys.meta_path.insert(0, NoLangChain())
        import turnlog  # the base import never needs the extra
        try:
            import turnlog.integrations.langchain
        except ImportError as exc:
            print(exc)
        """
    )
    src = Path(__file__).resolve().parent.parent / "src"
    done = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(src)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'turnlog[langchain]'" in done.stdout


# -- content blocks as parts -----------------------------------------------------------------------


def png_bytes(width: int = 320, height: int = 240) -> bytes:
    """A real PNG (noise, so it does not compress to nothing), made by Pillow."""
    import io

    from PIL import Image

    image = Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def wav_bytes(seconds: float = 1.5, rate: int = 8000) -> bytes:
    import io
    import wave

    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x00\x01" * int(seconds * rate))
    return out.getvalue()


def holds(part, data: bytes) -> bool:
    """True when `part` holds `data`: inline (under 16 KiB), or as the attachment of its bytes."""
    if part.data is not None:
        return part.data == data
    return part.ref == "sha256:" + hashlib.sha256(data).hexdigest() and part.size == len(data)


def b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def test_an_image_block_is_stored_as_an_image_part_counted_by_the_image_rule(make_history):
    png = png_bytes()
    sent = HumanMessage(
        [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image", "base64": b64(png), "mime_type": "image/png"},
        ],
        id="h1",
    )
    history = make_history()
    history.add([sent, AIMessage("Noise.", id="a1")])
    event = history.log()[0]
    assert event.message.text == "What is in this picture?"
    text_part, image = event.message.parts
    assert text_part == TextPart("What is in this picture?")
    assert isinstance(image, ImagePart)
    # over 16 KiB: the bytes are stored apart, once, and the part holds their reference
    assert (image.media_type, image.data, image.size) == ("image/png", None, len(png))
    assert image.ref == "sha256:" + hashlib.sha256(png).hexdigest()
    # counted by the image rule: by default the larger of OpenAI's and Anthropic's, from the
    # size in the PNG header
    counter = default_counter()
    text_tokens = counter.count(event_text(event))
    rule = max(openai_image_tokens(320, 240), anthropic_image_tokens(320, 240))
    assert event.tokens.count == text_tokens + part_tokens(image, counter) == text_tokens + rule
    assert event.tokens.count > text_tokens + 200
    # stored once: the LangChain form keeps a pointer, not a second copy of the base64
    assert b64(png)[:200] not in json.dumps(dict(event.message.metadata))
    assert event.message.metadata[PARTS_KEY] == [[1, ["base64"], 1, "base64"]]
    # and read back as LangChain gave it, byte for byte
    assert history.get() == [sent, AIMessage("Noise.", id="a1")]
    got = make_history().get()[0]  # a new service: for SQLite, the file opened afresh
    assert got == sent and got.content[1]["base64"] == b64(png)


def test_every_image_file_and_audio_shape_round_trips_as_parts(make_history):
    png, wav = png_bytes(64, 32), wav_bytes()
    pdf = b"%PDF-1.4\n1 0 obj<</Type/Pages/Count 2>>endobj\n%%EOF\n"
    shapes = [
        {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{b64(png)}", "detail": "low"},
        },
        {"type": "image", "url": "https://example.com/cat.jpg"},
        {"type": "image", "source_type": "base64", "data": b64(png), "mime_type": "image/png"},
        {
            "type": "file",
            "base64": b64(pdf),
            "mime_type": "application/pdf",
            "extras": {"filename": "a.pdf"},
        },
        {
            "type": "file",
            "file": {"file_data": f"data:application/pdf;base64,{b64(pdf)}", "filename": "b.pdf"},
        },
        {"type": "audio", "base64": b64(wav), "mime_type": "audio/wav"},
        {"type": "input_audio", "input_audio": {"data": b64(wav), "format": "wav"}},
        {"type": "image", "base64": b64(png)},  # no mime type: read from the header
    ]
    sent = [
        HumanMessage(["Look:", *shapes], id="h1"),
        AIMessage("", id="a1", tool_calls=[{"name": "shot", "args": {}, "id": "c1"}]),
        ToolMessage(
            [{"type": "image", "base64": b64(png), "mime_type": "image/png"}],
            tool_call_id="c1",
            name="shot",
            id="t1",
        ),
        AIMessage("Done.", id="a2"),
    ]
    history = make_history()
    history.add(sent)
    log = history.log()
    parts = log[0].message.parts
    assert [type(p).__name__ for p in parts] == [
        "TextPart",
        "ImagePart",
        "ImagePart",
        "ImagePart",
        "FilePart",
        "FilePart",
        "AudioPart",
        "AudioPart",
        "ImagePart",
    ]
    assert holds(parts[1], png) and parts[1].detail == "low"
    assert (parts[2].url, parts[2].media_type) == ("https://example.com/cat.jpg", "image/jpeg")
    assert holds(parts[4], pdf) and (parts[4].name, parts[5].name) == ("a.pdf", "b.pdf")
    assert (parts[6].media_type, parts[7].media_type) == ("audio/wav",) * 2
    assert holds(parts[7], wav)  # over 16 KiB: stored apart, the part names it
    assert parts[8].media_type == "image/png"
    (result,) = log[2].message.tool_results
    assert [type(p) for p in result.parts] == [ImagePart] and holds(result.parts[0], png)
    assert b64(png)[:100] not in json.dumps([dict(e.message.metadata) for e in log])
    assert history.get() == sent
    assert make_history().get() == sent


def test_an_ai_message_with_reasoning_round_trips(make_history):
    sent = [
        HumanMessage("Is 91 prime?", id="h1"),
        AIMessage(
            [
                {"type": "reasoning", "reasoning": "91 = 7 x 13."},
                {"type": "text", "text": "No: 7 x 13."},
            ],
            id="a1",
            response_metadata={"model_provider": "openai"},
        ),
        HumanMessage("And 97?", id="h2"),
        AIMessage(
            [
                {"type": "thinking", "thinking": "No divisor up to 9.", "signature": "c2ln" * 40},
                {"type": "redacted_thinking", "data": "ZW5j" * 30},
                {"type": "text", "text": "Yes."},
            ],
            id="a2",
        ),
        HumanMessage("Thanks", id="h3"),
        AIMessage([{"type": "thinking", "thinking": "Nothing to say.", "signature": "s"}], id="a3"),
    ]
    history = make_history()
    history.add(sent)
    log = history.log()
    assert log[1].message.parts == (
        ReasoningPart("openai", text="91 = 7 x 13."),
        TextPart("No: 7 x 13."),
    )
    assert log[1].message.text == "No: 7 x 13."
    assert log[3].message.parts == (
        ReasoningPart("anthropic", text="No divisor up to 9.", signature="c2ln" * 40),
        ReasoningPart("anthropic", encrypted="ZW5j" * 30, redacted=True),
        TextPart("Yes."),
    )
    assert "c2ln" * 40 not in json.dumps(dict(log[3].message.metadata))
    assert log[5].type == EMPTY_REPLY  # reasoning alone: logged, never in the view
    assert history.get() == sent[:5]
    assert make_history().get() == sent[:5]


def test_a_block_turnlog_cannot_rebuild_is_kept_whole_in_the_langchain_form(make_history):
    png = png_bytes(8, 8)
    wrapped = "\n".join(b64(png)[i : i + 76] for i in range(0, len(b64(png)), 76))
    sent = [
        HumanMessage(
            [
                {"type": "image", "base64": wrapped, "mime_type": "image/png"},  # not canonical
                {"type": "image", "base64": "not base64!", "mime_type": "image/png"},
                {"type": "image", "base64": b64(png), "mime_type": "not a type"},
                {"type": "video", "url": "https://example.com/v.mp4"},
            ],
            id="h1",
        )
    ]
    history = make_history()
    history.add(sent)
    (event,) = history.log()
    assert [type(p) for p in event.message.parts] == [ImagePart]  # the wrapped one, decoded
    assert event.message.parts[0].data == png
    assert PARTS_KEY not in event.message.metadata
    assert history.get() == sent


def test_a_turnlog_message_with_parts_reads_back_as_standard_blocks():
    png = png_bytes(8, 8)
    message = Message.user(
        "See:", ImagePart("image/png", data=png), FilePart("text/csv", url="https://e.com/a.csv")
    )
    assert from_turnlog(message) == [
        HumanMessage(
            [
                {"type": "text", "text": "See:"},
                {"type": "image", "base64": b64(png), "mime_type": "image/png"},
                {"type": "file", "url": "https://e.com/a.csv", "mime_type": "text/csv"},
            ]
        )
    ]


def test_a_message_whose_parts_no_longer_fit_its_pointers_reads_from_its_turnlog_form():
    png = png_bytes(8, 8)
    sent = HumanMessage(["Here:", {"type": "image", "base64": b64(png), "mime_type": "image/png"}])
    with SessionService(MemoryStore()) as service:
        history = TurnlogChatMessageHistory("s", service)
        history.add_messages([sent])
        stored = service.events("s")[0].message
    assert from_turnlog(stored) == [sent]
    cleared = replace(stored, parts=(TextPart("Here:"), TextPart(" [image cleared]")))
    assert from_turnlog(cleared) == [
        HumanMessage(
            [{"type": "text", "text": "Here:"}, {"type": "text", "text": " [image cleared]"}]
        )
    ]
