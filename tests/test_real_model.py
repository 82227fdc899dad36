"""The turn runner and the framework adapters against real model servers (tests/real_model.py):
llama.cpp's llama-server with a small instruct model (Chat Completions), and LiteLLM's proxy in
front of it (the Anthropic Messages format).

What is asserted does not depend on the model's wording: every request that reached a server
was answered 200; every request, read from the wire JSON alone, keeps the prompt rules
(tests/prompt_rules.py); the usage stored on each assistant event is what the server reported
for that call; tool calls the server returned as structured calls were run and answered; a
compaction by `ChatModelSummarizer` on the real model was stored and sent. The model runs at
temperature 0 with a fixed seed and small token caps, so each test costs a few seconds.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from prompt_rules import breaks
from real_model import MODEL_NAME, Exchange, RealModel, reported_usage, start, wire_messages
from server_procs import ServerUnavailable
from turnlog import (
    ChatModelSummarizer,
    CompactionWindow,
    SessionService,
    SqliteStore,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.chat import SessionChat
from turnlog.chat_async import AsyncSessionChat
from turnlog.compaction.reported import USAGE_KEY
from turnlog.errors import ModelError
from turnlog.models import (
    AnthropicChatModel,
    AsyncAnthropicChatModel,
    AsyncOpenAIChatModel,
    OpenAIChatModel,
)
from turnlog.service_async import AsyncSessionService
from turnlog.stores.sqlite_async import AsyncSqliteStore
from turnlog.turns import ChatTurn, ToolRun

pytestmark = pytest.mark.real_model

MAX_TOKENS = 48
"""The cap on each reply: enough for a short sentence or a tool call."""
SYSTEM = (
    "You are a terse assistant. Call a tool when you need data; once a tool has answered, "
    "reply to the user in one short sentence without calling it again."
)
WEATHER = "What is the weather in Oslo right now? Call the get_weather tool to find out."


def get_weather(city: str) -> str:
    """The current weather in a city.

    Args:
        city: the city's name, e.g. Paris.
    """
    return f"{city}: 18C, clear sky"


@pytest.fixture(scope="module")
def real() -> RealModel:
    try:
        with start() as servers:
            yield servers
    except ServerUnavailable as exc:
        pytest.fail(f"could not start the real model servers: {exc}", pytrace=False)


@pytest.fixture
def service(tmp_path):
    with SessionService(SqliteStore(tmp_path / "chat.db")) as service:
        yield service


def openai_model(real: RealModel, kind: str = "sync"):
    adapter = OpenAIChatModel if kind == "sync" else AsyncOpenAIChatModel
    return adapter(
        MODEL_NAME,
        base_url=real.openai_url,
        api_key="unused",
        max_retries=0,
        timeout=300,
        options={"max_tokens": MAX_TOKENS, "temperature": 0, "seed": 7},
    )


def anthropic_model(real: RealModel, kind: str = "sync"):
    adapter = AnthropicChatModel if kind == "sync" else AsyncAnthropicChatModel
    return adapter(
        MODEL_NAME,
        base_url=real.anthropic_url,
        api_key="unused",
        max_retries=0,
        timeout=300,
        max_tokens=MAX_TOKENS,
        options={"temperature": 0},
    )


def check_wire(exchanges: list[Exchange]) -> None:
    """Every exchange answered 200 and every request keeps the prompt rules."""
    assert exchanges, "no request reached the server"
    for n, exchange in enumerate(exchanges):
        assert exchange.status == 200, f"request {n} to {exchange.path}: {exchange.reply}"
        assert breaks(wire_messages(exchange.body)) == [], f"request {n}: {exchange.body}"


def check_usage(service, session_id: str, exchanges: list[Exchange]) -> None:
    """Each assistant event's stored usage is what the server reported for its call, in order."""
    stored = [
        e.metadata[USAGE_KEY]
        for e in service.events(session_id)
        if e.message is not None and e.message.role == "assistant" and USAGE_KEY in e.metadata
    ]
    answered = [x for x in exchanges if not x.injected]
    assert len(stored) == len(answered)
    for usage, exchange in zip(stored, answered, strict=True):
        reported = reported_usage(exchange)
        assert reported["input_tokens"] and reported["output_tokens"]  # the server counted
        assert {k: usage.get(k) for k in reported} == reported


def tool_calls(exchange: Exchange) -> list[str]:
    """The names of the tools a reply called, from the wire (a JSON reply or a stream)."""
    if exchange.path.endswith("/messages"):
        if exchange.streamed:
            return [
                e["content_block"]["name"]
                for e in exchange.events
                if e.get("type") == "content_block_start"
                and e["content_block"].get("type") == "tool_use"
            ]
        return [b["name"] for b in exchange.reply["content"] if b["type"] == "tool_use"]
    if exchange.streamed:
        return [
            c["function"]["name"]
            for e in exchange.events
            for choice in e.get("choices", [])
            for c in (choice.get("delta") or {}).get("tool_calls") or []
            if (c.get("function") or {}).get("name")
        ]
    return [
        c["function"]["name"]
        for c in exchange.reply["choices"][0]["message"].get("tool_calls") or []
    ]


# -- the runner on Chat Completions (llama-server) --------------------------------------------


def test_a_text_turn(real, service):
    mark = real.llama.mark()
    with openai_model(real) as model:
        turn = SessionChat(service, model, system=SYSTEM).send("s", "Say hello to Ann.")
    exchanges = real.llama.since(mark)
    check_wire(exchanges)
    assert [x.path for x in exchanges] == ["/v1/chat/completions"]
    assert turn.text.strip()
    assert [m.role for m in service.view_messages("s")] == ["system", "user", "assistant"]
    check_usage(service, "s", exchanges)


def test_a_streamed_turn(real, service):
    mark = real.llama.mark()
    with openai_model(real) as model:
        chat = SessionChat(service, model, system=SYSTEM)
        events = list(chat.stream("s", "Count from one to five."))
    exchanges = real.llama.since(mark)
    check_wire(exchanges)
    assert all(x.streamed and x.body["stream"] for x in exchanges)
    deltas = [e for e in events if isinstance(e, str)]
    sent = [
        choice["delta"]["content"]
        for e in exchanges[0].events
        for choice in e.get("choices", [])
        if (choice.get("delta") or {}).get("content")
    ]
    assert deltas == sent and len(deltas) > 1  # each chunk passed on as it came
    assert isinstance(events[-1], ChatTurn)
    assert "".join(deltas) == events[-1].text == service.view_messages("s")[-1].text
    check_usage(service, "s", exchanges)


def test_a_tool_turn(real, service):
    mark = real.llama.mark()
    with openai_model(real) as model:
        turn = SessionChat(service, model, system=SYSTEM, tools=[get_weather]).send("s", WEATHER)
    exchanges = real.llama.since(mark)
    check_wire(exchanges)
    assert tool_calls(exchanges[0]) == ["get_weather"]  # a structured call, not text
    assert [r.call.name for r in turn.tool_runs] == ["get_weather"]
    assert turn.tool_runs[0].result.content.endswith("18C, clear sky")
    sent = exchanges[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[3]["tool_call_id"] == sent[2]["tool_calls"][0]["id"]
    assert len(exchanges) == 2 and not tool_calls(exchanges[1])
    assert breaks(service.view_messages("s")) == []
    check_usage(service, "s", exchanges)


def test_a_streamed_tool_turn_on_the_async_runner(real, tmp_path):
    async def run():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "chat.db")) as service:
            model = openai_model(real, "async")
            try:
                chat = AsyncSessionChat(service, model, system=SYSTEM, tools=[get_weather])
                events = [e async for e in chat.stream("s", WEATHER)]
            finally:
                await model.close()
            return events, await service.events("s"), await service.view_messages("s")

    mark = real.llama.mark()
    events, stored, view = asyncio.run(run())
    exchanges = real.llama.since(mark)
    check_wire(exchanges)
    assert tool_calls(exchanges[0]) == ["get_weather"]
    assert [e.call.name for e in events if isinstance(e, ToolRun)] == ["get_weather"]
    assert isinstance(events[-1], ChatTurn) and events[-1].text.strip()
    assert breaks(view) == []
    usages = [e.metadata[USAGE_KEY] for e in stored if USAGE_KEY in e.metadata]
    assert [{k: u.get(k) for k in ("input_tokens", "output_tokens")} for u in usages] == [
        {k: reported_usage(x)[k] for k in ("input_tokens", "output_tokens")} for x in exchanges
    ]


FACTS = [
    "Ann is a marine biologist from Bergen who studies cod in the North Sea. She sails a small "
    "red boat called Mette, drinks black coffee, and keeps a diary of every fish she counts.",
    "Ann's brother Per builds wooden chairs in Trondheim. He has two dogs, Rex and Bo, and "
    "visits Ann each summer, when they walk the coast path from Bergen to Stavanger together.",
]


def test_a_compaction_summarized_by_the_real_model(real, service):
    mark = real.llama.mark()
    with openai_model(real) as model:
        strategy = WindowCompactionStrategy(
            CompactionWindow.last_turns(1),
            summarizer=ChatModelSummarizer(model, max_tokens=80, overlap_size=0),
        )
        chat = SessionChat(
            service, model, system=SYSTEM, trigger=TurnCountTrigger(2), strategy=strategy
        )
        turns = [chat.send("s", f"Remember this: {fact}") for fact in FACTS]
        turns.append(chat.send("s", "Who is Per?"))  # a third turn: the trigger fires after it
        turns.append(chat.send("s", "Thanks."))
    exchanges = real.llama.since(mark)
    check_wire(exchanges)
    assert [t.compaction_error for t in turns] == [None] * 4
    compacted = [t for t in turns if t.compaction is not None and not t.compaction.unchanged]
    assert len(compacted) == 1 and compacted[0] is turns[2], "no compaction ran"
    summary = compacted[0].compaction.summary
    assert summary and summary[-1].role == "assistant" and summary[-1].text.strip()
    # the summarizer's call is one of the exchanges (it has no tools and no system prompt of
    # the chat's), and the next turn's request carries the summary in place of what it covers
    asked = [x for x in exchanges if x.body["messages"][0]["content"] != SYSTEM]
    assert len(asked) == 1 and len(exchanges) == 5 and exchanges[3] is asked[0]
    last = json.dumps(exchanges[-1].body["messages"])
    assert json.dumps(summary[-1].text)[1:-1] in last
    assert FACTS[0] not in last
    assert breaks(service.view_messages("s")) == []


def test_a_turn_whose_second_call_failed_resumes_with_its_request_id(real, service):
    mark = real.llama.mark()
    real.llama.fail_request(2)  # the call after the tool's result gets a 500 from the recorder
    with openai_model(real) as model:
        chat = SessionChat(service, model, system=SYSTEM, tools=[get_weather])
        with pytest.raises(ModelError) as caught:
            chat.send("s", WEATHER, request_id="r1")
        assert caught.value.status == 500
        roles = [e.message.role for e in service.events("s") if e.message]
        assert roles == ["system", "user", "assistant", "tool"]
        turn = chat.send("s", WEATHER, request_id="r1")  # the retry resumes the turn
        again = chat.send("s", WEATHER, request_id="r1")  # and a finished one is replayed
    exchanges = real.llama.since(mark)
    assert [x.injected for x in exchanges] == [False, True, False]
    check_wire([x for x in exchanges if not x.injected])
    assert turn.text.strip() and not turn.replayed
    assert again.replayed and again.text == turn.text
    roles = [e.message.role for e in service.events("s") if e.message]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert breaks(service.view_messages("s")) == []
    check_usage(service, "s", exchanges)


# -- the runner on the Messages format (LiteLLM in front of llama-server) ----------------------


def test_a_text_turn_through_litellm(real, service):
    mark = real.anthropic.mark()
    with anthropic_model(real) as model:
        turn = SessionChat(service, model, system=SYSTEM).send("s", "Say hello to Ann.")
    exchanges = real.anthropic.since(mark)
    check_wire(exchanges)
    assert [x.path for x in exchanges] == ["/v1/messages"]
    assert exchanges[0].reply["type"] == "message" and turn.text.strip()
    check_usage(service, "s", exchanges)


def test_a_streamed_turn_through_litellm(real, service):
    mark = real.anthropic.mark()
    with anthropic_model(real) as model:
        chat = SessionChat(service, model, system=SYSTEM)
        events = list(chat.stream("s", "Count from one to five."))
    exchanges = real.anthropic.since(mark)
    check_wire(exchanges)
    assert all(x.streamed for x in exchanges)
    deltas = [e for e in events if isinstance(e, str)]
    sent = [
        e["delta"]["text"]
        for e in exchanges[0].events
        if e.get("type") == "content_block_delta" and e["delta"].get("type") == "text_delta"
    ]
    assert deltas == sent and len(deltas) > 1
    assert isinstance(events[-1], ChatTurn) and events[-1].text == "".join(deltas)
    check_usage(service, "s", exchanges)


def test_a_tool_turn_through_litellm(real, service):
    # Not streamed: LiteLLM 1.82.6 drops the first piece of a streamed tool call's arguments
    # (the "{" that llama-server sends with the call's id and name) when it turns Chat
    # Completions chunks into Messages events, so the tool input it streams is not JSON.
    mark, behind = real.anthropic.mark(), real.behind_litellm.mark()
    with anthropic_model(real) as model:
        turn = SessionChat(service, model, system=SYSTEM, tools=[get_weather]).send("s", WEATHER)
    exchanges = real.anthropic.since(mark)
    check_wire(exchanges)
    check_wire(real.behind_litellm.since(behind))  # what LiteLLM sent on, in its own format
    assert tool_calls(exchanges[0]) == ["get_weather"]
    assert [r.call.name for r in turn.tool_runs] == ["get_weather"]
    last = exchanges[-1].body["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user"]
    assert last[2]["content"][0]["type"] == "tool_result"
    assert last[2]["content"][0]["tool_use_id"] == last[1]["content"][-1]["id"]
    assert breaks(service.view_messages("s")) == []
    check_usage(service, "s", exchanges)


# -- the framework adapters on llama-server ----------------------------------------------------


def test_langchain_agent_with_the_middleware(real, service):
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    from turnlog.integrations.langchain import TurnlogMiddleware

    @tool
    def weather(city: str) -> str:
        """The current weather in a city."""
        return get_weather(city)

    weather.name = "get_weather"
    model = ChatOpenAI(
        model=MODEL_NAME,
        base_url=real.openai_url,
        api_key="unused",
        temperature=0,
        max_tokens=MAX_TOKENS,
        max_retries=0,
    )
    mark = real.llama.mark()
    agent = create_agent(
        model, tools=[weather], system_prompt=SYSTEM, middleware=[TurnlogMiddleware(service)]
    )
    config = {"configurable": {"thread_id": "s"}}
    agent.invoke({"messages": [{"role": "user", "content": WEATHER}]}, config)
    exchanges = real.llama.since(mark)
    check_wire(exchanges)
    assert tool_calls(exchanges[0]) == ["get_weather"]
    messages = service.view_messages("s")
    assert [m.role for m in messages][:3] == ["user", "assistant", "tool"]
    assert messages[-1].role == "assistant" and breaks(messages) == []


def test_pydantic_ai_agent_with_the_history_capability(real, tmp_path):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel as PydanticOpenAIModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from turnlog.integrations.pydantic_ai import TurnlogHistory

    async def run():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "chat.db")) as service:
            provider = OpenAIProvider(base_url=real.openai_url, api_key="unused")
            model = PydanticOpenAIModel(MODEL_NAME, provider=provider)
            agent = Agent(
                model,
                instructions=SYSTEM,
                tools=[get_weather],
                capabilities=[TurnlogHistory(service, "s")],
                model_settings={"temperature": 0, "max_tokens": MAX_TOKENS},
            )
            await agent.run(WEATHER)
            return await service.view_messages("s")

    mark = real.llama.mark()
    messages = asyncio.run(run())
    exchanges = real.llama.since(mark)
    check_wire(exchanges)
    assert tool_calls(exchanges[0]) == ["get_weather"]
    assert [m.role for m in messages][:3] == ["user", "assistant", "tool"]
    assert messages[-1].role == "assistant" and breaks(messages) == []


def test_openai_agents_run_with_the_session(real, tmp_path):
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    from turnlog.integrations.openai_agents import TurnlogSession

    set_tracing_disabled(True)

    async def run():
        client = AsyncOpenAI(base_url=real.openai_url, api_key="unused", max_retries=0)
        model = OpenAIChatCompletionsModel(model=MODEL_NAME, openai_client=client)
        agent = Agent(
            name="assistant",
            instructions=SYSTEM,
            model=model,
            tools=[function_tool(get_weather)],
            model_settings=ModelSettings(temperature=0, max_tokens=MAX_TOKENS),
        )
        try:
            async with AsyncSessionService(AsyncSqliteStore(tmp_path / "chat.db")) as service:
                session = TurnlogSession("s", service)
                await Runner.run(agent, WEATHER, session=session)
                return await service.view_messages("s")
        finally:
            await client.close()

    mark = real.llama.mark()
    messages = asyncio.run(run())
    exchanges = real.llama.since(mark)
    check_wire(exchanges)
    assert tool_calls(exchanges[0]) == ["get_weather"]
    assert [m.role for m in messages][:3] == ["user", "assistant", "tool"]
    assert messages[-1].role == "assistant" and breaks(messages) == []
