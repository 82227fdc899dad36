"""TurnlogSession, the Agents SDK `Session` over turnlog, with the SDK's own types and run loop.

Part one ports the SDK's session test cases to the adapter. Their origin, in
openai/openai-agents-python: tests/memory/test_session.py (commit 063581f5) and
tests/memory/test_session_limit.py (commit 4ab9228b). Their `SQLiteSession` becomes a
`TurnlogSession` over a real SQLite file or the memory store, and their `FakeModel` (which the SDK
keeps in its test folder) becomes the scripted model the SDK ships, `agents.testing.ScriptedModel`.
SDK cases about SQLiteSession's own internals (its connection pool, its file lock) have nothing to
port. Part two covers what turnlog adds: byte-for-byte round trips of every item kind, pops and
clears that never delete, compaction after add_items, and a real run with tools and a compaction.
"""

import asyncio
import json
import re
import uuid
from pathlib import Path

import pytest
from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call

from turnlog import (
    CompactionWindow,
    FilePart,
    ImagePart,
    InvalidInput,
    Message,
    ProviderPart,
    ReasoningPart,
    TextPart,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.integrations.openai_agents import PARTS_KEY, TurnlogSession, stored_items
from turnlog.service_async import AsyncSessionService
from turnlog.stores.memory_async import AsyncMemoryStore
from turnlog.stores.sqlite_async import AsyncSqliteStore

set_tracing_disabled(True)

STORES = ["sqlite", "memory"]
RUNNERS = ["run", "run_sync", "run_streamed"]


@pytest.fixture(params=STORES)
def service(request, tmp_path):
    store = AsyncSqliteStore(tmp_path / "t.db") if request.param == "sqlite" else AsyncMemoryStore()
    service = AsyncSessionService(store)
    yield service
    asyncio.run(service.close())


def run(coro):
    return asyncio.run(coro)


def run_agent(runner_method, agent, input_data, **kwargs):
    """The SDK tests' `run_agent_async`, from a plain test: each method on its own loop."""
    if runner_method == "run":
        return run(Runner.run(agent, input_data, **kwargs))
    if runner_method == "run_sync":  # as the SDK's test does: a loop of its own, closed after
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            return Runner.run_sync(agent, input_data, **kwargs)
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    async def streamed():
        result = Runner.run_streamed(agent, input_data, **kwargs)
        async for _ in result.stream_events():
            pass
        return result

    return run(streamed())


def text(step):
    return [assistant_message(step)]


# -- part one: the SDK's session tests, ported -----------------------------------------------


def test_it_is_an_sdk_session(service):
    assert isinstance(TurnlogSession("s", service), Session)


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_memory_basic_functionality(service, runner_method):
    session = TurnlogSession("test_session_123", service)
    model = ScriptedModel([text("San Francisco"), text("California")])
    agent = Agent(name="test", model=model)
    result1 = run_agent(
        runner_method, agent, "What city is the Golden Gate Bridge in?", session=session
    )
    assert result1.final_output == "San Francisco"
    result2 = run_agent(runner_method, agent, "What state is it in?", session=session)
    assert result2.final_output == "California"
    assert len(model.last_call.input) > 1


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_memory_different_sessions(service, runner_method):
    model = ScriptedModel([text("I like cats"), text("I like dogs"), text("Yes, cats")])
    agent = Agent(name="test", model=model)
    session_1 = TurnlogSession("session_1", service)
    session_2 = TurnlogSession("session_2", service)
    run_agent(runner_method, agent, "I like cats", session=session_1)
    run_agent(runner_method, agent, "I like dogs", session=session_2)
    result3 = run_agent(runner_method, agent, "What did I say I like?", session=session_1)
    assert result3.final_output == "Yes, cats"
    sent = json.dumps(model.last_call.input)
    assert "I like cats" in sent and "I like dogs" not in sent


def test_session_memory_direct(service):
    session = TurnlogSession("direct_test", service)
    items = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}]
    run(session.add_items(items))
    assert run(session.get_items()) == items
    run(session.clear_session())
    assert run(session.get_items()) == []


def test_session_memory_pop_item(service):
    session = TurnlogSession("pop_test", service)
    assert run(session.pop_item()) is None
    items = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
        {"role": "user", "content": "How are you?"},
    ]
    run(session.add_items(items))
    assert len(run(session.get_items())) == 3
    assert run(session.pop_item()) == items[2]
    after = run(session.get_items())
    assert len(after) == 2 and after[-1]["content"] == "Hi there!"
    assert run(session.pop_item()) == items[1]
    assert run(session.pop_item()) == items[0]
    assert run(session.pop_item()) is None
    assert run(session.get_items()) == []


def test_session_memory_pop_different_sessions(service):
    session_1 = TurnlogSession("session_1", service)
    session_2 = TurnlogSession("session_2", service)
    run(session_1.add_items([{"role": "user", "content": "Session 1 message"}]))
    run(
        session_2.add_items(
            [
                {"role": "user", "content": "Session 2 message 1"},
                {"role": "user", "content": "Session 2 message 2"},
            ]
        )
    )
    assert run(session_2.pop_item())["content"] == "Session 2 message 2"
    assert [i["content"] for i in run(session_1.get_items())] == ["Session 1 message"]
    assert [i["content"] for i in run(session_2.get_items())] == ["Session 2 message 1"]


def test_session_get_items_with_limit(service):
    session = TurnlogSession("count_test", service)
    items = []
    for n in (1, 2, 3):
        items += [
            {"role": "user", "content": f"Message {n}"},
            {"role": "assistant", "content": f"Response {n}"},
        ]
    run(session.add_items(items))
    assert run(session.get_items()) == items
    assert run(session.get_items(limit=2)) == items[-2:]
    assert run(session.get_items(limit=4)) == items[-4:]
    assert run(session.get_items(limit=10)) == items
    assert run(session.get_items(limit=0)) == []
    assert run(session.get_items(limit=-1)) == []  # test_session_limit_negative_returns_empty
    assert len(run(session.get_items(limit=1))) == 1


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_memory_appends_list_input_by_default(service, runner_method):
    session = TurnlogSession("test_validation", service)
    model = ScriptedModel([text("This should run")])
    agent = Agent(name="test", model=model)
    initial_history = [
        {"role": "user", "content": "Earlier message"},
        {"role": "assistant", "content": "Saved reply"},
    ]
    run(session.add_items(initial_history))
    list_input = [{"role": "user", "content": "Test message"}]
    run_agent(runner_method, agent, list_input, session=session)
    assert model.last_call.input == initial_history + list_input


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_callback_prepared_input(service, runner_method):
    session = TurnlogSession("session_1", service)
    model = ScriptedModel([text("I'm gpt-4o")])
    agent = Agent(name="test", model=model)
    initial_history = [
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hi, I'm here to assist you."},
    ]
    run(session.add_items(initial_history))

    def filter_assistant_messages(history, new_input):
        return [item for item in history if item["role"] == "user"] + new_input

    new_turn_input = [{"role": "user", "content": "What your name?"}]
    run_agent(
        runner_method,
        agent,
        new_turn_input,
        session=session,
        run_config=RunConfig(session_input_callback=filter_assistant_messages),
    )
    assert model.last_call.input == [initial_history[0], new_turn_input[0]]


def test_session_unicode_content_and_sql_keywords(service):
    session = TurnlogSession("unicode_test", service)
    items = [
        {"role": "user", "content": "こんにちは"},
        {"role": "assistant", "content": "😊👍"},
        {"role": "user", "content": "Привет O'Reilly"},
        {"role": "assistant", "content": "Robert'); DROP TABLE students;--"},
        {"role": "user", "content": '"SELECT * FROM users WHERE name = "admin";"'},
    ]
    run(session.add_items(items))
    assert run(session.get_items()) == items


def test_session_concurrent_access(service):
    session = TurnlogSession("concurrent_test", service)

    async def main():
        await asyncio.gather(
            *(session.add_items([{"role": "user", "content": f"Message {i}"}]) for i in range(10))
        )
        return await session.get_items()

    contents = {i["content"] for i in run(main())}
    assert contents == {f"Message {i}" for i in range(10)}


def test_session_settings_default_and_constructor(service):
    assert isinstance(TurnlogSession("a", service).session_settings, SessionSettings)
    assert TurnlogSession("a", service).session_settings.limit is None
    assert (
        TurnlogSession(
            "b", service, session_settings=SessionSettings(limit=5)
        ).session_settings.limit
        == 5
    )
    assert TurnlogSession("c", service, session_settings={"limit": 4}).session_settings.limit == 4


def test_get_items_uses_session_settings_limit_and_an_explicit_limit_wins(service):
    session = TurnlogSession("s", service, session_settings=SessionSettings(limit=3))
    run(session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(10)]))
    assert [i["content"] for i in run(session.get_items())] == [
        "Message 7",
        "Message 8",
        "Message 9",
    ]
    assert [i["content"] for i in run(session.get_items(limit=2))] == ["Message 8", "Message 9"]


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_limit_parameter(service, runner_method):
    session = TurnlogSession("limit_test", service)
    model = ScriptedModel([text(f"Reply {n}") for n in range(1, 5)])
    agent = Agent(name="test", model=model)
    for n in (1, 2, 3):
        run_agent(runner_method, agent, f"Message {n}", session=session)
    assert len(run(session.get_items())) == 6
    run_agent(
        runner_method,
        agent,
        "Message 4",
        session=session,
        run_config=RunConfig(session_settings=SessionSettings(limit=2)),
    )
    last_input = model.last_call.input
    assert len(last_input) == 3
    assert last_input[0]["content"] == "Message 3"
    assert last_input[1]["content"][0]["text"] == "Reply 3"
    assert last_input[2]["content"] == "Message 4"


@pytest.mark.parametrize("limit", [0, None, 100])
def test_session_limit_zero_none_and_larger_than_history(service, limit):
    session = TurnlogSession("limit", service)
    model = ScriptedModel([text(f"Reply {n}") for n in range(1, 4)])
    agent = Agent(name="test", model=model)
    run_agent("run", agent, "Message 1", session=session)
    run_agent("run", agent, "Message 2", session=session)
    config = RunConfig(session_settings=SessionSettings(limit=limit))
    run_agent("run", agent, "Message 3", session=session, run_config=config)
    contents = [i["content"] for i in model.last_call.input if i.get("role") == "user"]
    assert contents == (["Message 3"] if limit == 0 else ["Message 1", "Message 2", "Message 3"])


def test_runner_with_session_settings_override(service):
    session = TurnlogSession("s", service, session_settings=SessionSettings(limit=100))
    run(session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)]))
    model = ScriptedModel([text("Got it")])
    config = RunConfig(session_settings=SessionSettings(limit=2))
    run(
        Runner.run(
            Agent(name="test", model=model), "New question", session=session, run_config=config
        )
    )
    history = [i for i in model.last_call.input if i.get("content") != "New question"]
    assert len(history) == 2


# -- part two: what turnlog adds -------------------------------------------------------------

IMAGE = "data:image/png;base64,iVBORw0KGgo="
EVERY_KIND = [
    {"role": "developer", "content": "Answer briefly."},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is on this picture? ü €"},
            {"type": "input_image", "image_url": IMAGE, "detail": "auto"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Look, then search."}],
        "encrypted_content": "gAAAAABo-opaque==",
    },
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "cat breeds"},
    },
    {
        "type": "file_search_call",
        "id": "fs_1",
        "queries": ["cats"],
        "status": "completed",
        "results": None,
    },
    {
        "id": "msg_1",
        "content": [
            {"annotations": [], "text": "Let me check.", "type": "output_text", "logprobs": []}
        ],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
    {
        "arguments": '{"breed": "tabby", "weight": 4.25}',
        "call_id": "call_1",
        "name": "lookup",
        "type": "function_call",
        "id": "fc_1",
        "status": "completed",
    },
    {
        "type": "custom_tool_call",
        "id": "ctc_1",
        "call_id": "call_2",
        "name": "grep",
        "input": "cat*",
    },
    {
        "type": "computer_call",
        "id": "cc_1",
        "call_id": "call_3",
        "action": {"type": "click", "x": 10, "y": 20, "button": "left"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "call_id": "call_1",
        "output": [{"type": "input_text", "text": "a tabby"}],
        "type": "function_call_output",
    },
    {"type": "custom_tool_call_output", "call_id": "call_2", "output": "cat.txt"},
    {
        "type": "computer_call_output",
        "call_id": "call_3",
        "output": {"type": "computer_screenshot", "image_url": IMAGE},
    },
    {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs", "tools": []},
    {"type": "item_reference", "id": "msg_0"},
    {"z_last": 1, "a_first": [1, 2.5, None, True, "ß"], "type": "acme_item_of_the_future"},
    {
        "id": "msg_2",
        "content": [{"type": "refusal", "refusal": "I cannot say."}],
        "role": "assistant",
        "type": "message",
    },
    {"role": "user", "content": "Thanks."},
]


def test_every_item_kind_round_trips_byte_for_byte(tmp_path):
    async def main():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "rt.db")) as service:
            session = TurnlogSession("rt", service)
            await session.add_items(EVERY_KIND[:9])
            await session.add_items(EVERY_KIND[9:])
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "rt.db")) as service:
            reopened = TurnlogSession("rt", service)
            return await reopened.get_items(), await service.view_messages("rt")

    items, messages = run(main())
    assert json.dumps(items) == json.dumps(EVERY_KIND)
    assert [m.role for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assistant = messages[2]
    assert assistant.text == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in assistant.tool_calls] == [
        ("call_1", "lookup", '{"breed": "tabby", "weight": 4.25}'),
        ("call_2", "grep", "cat*"),
    ]
    assert [(r.call_id, r.name) for r in messages[3].tool_results] == [
        ("call_1", "lookup"),
        ("call_2", "grep"),
    ]
    assert messages[4].text == "I cannot say."  # with computer_call_output, mcp_list_tools, ...


def test_items_the_view_rules_refuse_are_kept_but_an_orphan_output_is_not_handed_out(
    service, caplog
):
    session = TurnlogSession("odd", service)
    odd = [
        {"role": "user", "content": "hi"},
        {"type": "function_call_output", "call_id": "nobody", "output": "orphan"},
        {"type": "reasoning", "id": "rs_9", "summary": []},
    ]
    run(session.add_items(odd))
    assert _log_items(service, "odd") == odd  # the log keeps what the SDK gave, as it gave it
    with caplog.at_level("WARNING", "turnlog.integrations.openai_agents"):
        assert json.dumps(run(session.get_items())) == json.dumps([odd[0], odd[2]])
    assert "'nobody'" in caplog.text and "the log keeps them" in caplog.text
    assert run(session.pop_item()) == odd[2]  # a pop takes the newest item get_items shows
    assert run(session.pop_item()) == odd[0]
    assert run(session.get_items()) == []


def test_a_call_output_gets_its_tool_name_from_an_earlier_batch(service):
    session = TurnlogSession("names", service)
    run(session.add_items([{"role": "user", "content": "hi"}]))
    run(
        session.add_items(
            [{"type": "function_call", "call_id": "c", "name": "clock", "arguments": "{}"}]
        )
    )
    run(session.add_items([{"type": "function_call_output", "call_id": "c", "output": "noon"}]))
    tool = run(service.view_messages("names"))[-1]
    assert [(r.call_id, r.name, r.content) for r in tool.tool_results] == [("c", "clock", "noon")]


def _log_items(service, sid):
    return [i for e in run(service.events(sid)) for i in stored_items(e)]


def test_pop_and_clear_never_delete_from_the_log(service):
    session = TurnlogSession("keep", service)
    first = [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "a", "name": "w", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "sun"},
        {"type": "function_call_output", "call_id": "b", "output": "rain"},
    ]
    run(session.add_items(first))
    assert run(session.pop_item()) == first[4]  # one item out of a run of two outputs
    assert run(session.get_items()) == first[:4]
    assert run(session.pop_item()) == first[3]
    assert run(session.pop_item()) == first[2]
    assert run(session.get_items()) == first[:2]
    run(session.add_items([{"type": "function_call_output", "call_id": "a", "output": "fog"}]))
    assert run(session.get_items())[-1]["output"] == "fog"
    run(session.clear_session())
    assert run(session.get_items()) == []
    assert run(session.pop_item()) is None
    logged = _log_items(service, "keep")
    for item in first:
        assert item in logged  # everything the SDK ever gave is still in the log
    assert {"type": "function_call_output", "call_id": "a", "output": "fog"} in logged
    run(session.add_items([{"role": "user", "content": "again"}]))
    assert run(session.get_items()) == [{"role": "user", "content": "again"}]


def test_a_limit_is_the_exact_tail_the_sdk_rewinds_with(service):
    from agents.run_internal.session_persistence import rewind_session_items

    session = TurnlogSession("limit", service)
    items = [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "a", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "sun"},
        {"role": "assistant", "content": "Sunny."},
    ]
    run(session.add_items(items))
    assert run(session.get_items(limit=2)) == items[2:]
    run(rewind_session_items(session, items[2:]))  # the SDK's retry path: pops what it added
    assert run(session.get_items()) == items[:2]
    assert _log_items(service, "limit") == items


def test_compaction_runs_after_add_items_with_the_given_trigger_and_strategy(service):
    session = TurnlogSession(
        "c",
        service,
        trigger=TurnCountTrigger(2),
        strategy=WindowCompactionStrategy(CompactionWindow.last_turns(1)),
    )
    turns = [
        [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]
        for n in range(3)
    ]
    run(session.add_items(turns[0] + turns[1]))
    assert session.last_compaction is not None and session.last_compaction.unchanged
    run(session.add_items(turns[2]))
    assert not session.last_compaction.unchanged
    assert run(session.get_items()) == turns[2]
    assert _log_items(service, "c") == turns[0] + turns[1] + turns[2]


def test_trigger_and_strategy_come_together(service):
    with pytest.raises(InvalidInput, match="both a trigger and a strategy"):
        TurnlogSession("x", service, trigger=TurnCountTrigger(2))


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _summarize(request):
    from turnlog import Message

    covered = " ".join(e.message.text or "" for e in request.covered if e.message)
    return [
        Message.user("Summarize the conversation so far."),
        Message.assistant(f"Earlier: {covered[:60]}"),
    ]


def test_a_real_run_over_several_turns_with_tools_and_a_compaction(tmp_path):
    cities = ["Paris", "Rome", "Oslo", "Lima"]
    steps = []
    for n, city in enumerate(cities):
        steps.append([function_call("weather", {"city": city}, call_id=f"call_{n}")])
        steps.append([assistant_message(f"{city}: sunny", item_id=f"msg_{n}")])
    model = ScriptedModel(steps)
    agent = Agent(name="forecaster", model=model, tools=[weather])

    async def main():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "run.db")) as service:
            session = TurnlogSession(
                "run",
                service,
                trigger=TurnCountTrigger(2),
                strategy=WindowCompactionStrategy(
                    CompactionWindow.last_turns(2), summarizer=_summarize
                ),
            )
            outputs = []
            views = []
            for city in cities:
                views.append(await session.get_items())
                result = await Runner.run(agent, f"Weather in {city}?", session=session)
                outputs.append(result.final_output)
            return outputs, views, await service.events("run"), await session.get_items()

    outputs, views, log, final_view = run(main())
    assert outputs == [f"{c}: sunny" for c in cities]
    model.assert_complete()
    # turn 4's first request: the summary, then turns 2 and 3 exactly as stored, then the question
    first_call_of_turn_4 = model.calls[6].input
    assert json.dumps(first_call_of_turn_4[:-1]) == json.dumps(views[3])
    assert first_call_of_turn_4[0] == {
        "role": "user",
        "content": "Summarize the conversation so far.",
    }
    assert first_call_of_turn_4[1]["content"].startswith("Earlier: Weather in Paris?")
    sent = json.dumps(first_call_of_turn_4[2:])
    assert "Paris" not in sent and "Rome" in sent and "Oslo" in sent
    # what turn 3 sent for turn 2 is byte for byte what turn 4 sends for it
    turn_2 = model.calls[5].input[-7:-3]
    assert json.dumps(turn_2) == json.dumps(first_call_of_turn_4[2:6])
    assert [i.get("type") for i in turn_2] == [
        None,
        "function_call",
        "function_call_output",
        "message",
    ]
    # the log still holds every turn and the compactions
    logged = json.dumps([i for e in log for i in stored_items(e)])
    assert all(f"Weather in {c}?" in logged for c in cities)
    assert sum(e.type.name == "COMPACTION" for e in log) >= 1
    assert final_view[-1]["content"][0]["text"] == "Lima: sunny"


DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations" / "openai-agents.md"
OLLAMA = "http://localhost:11434/v1"


def doc_blocks():
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_the_local_model_example_runs_on_a_local_chat_completions_server(
    tmp_path, monkeypatch, capsys
):
    from model_servers import ScriptedServer, openai_completion
    from turnlog import SessionService, SqliteStore

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    [block] = [b for b in doc_blocks() if OLLAMA in b]
    server = ScriptedServer()
    try:
        code = block.replace(OLLAMA, server.url + "/v1")
        assert server.url in code
        server.reply_json(openai_completion("A warm coat."), connection="close")
        exec(compile(code, str(DOC), "exec"), {"__name__": "__main__"})
        assert capsys.readouterr().out.strip() == "A warm coat."
        assert [r.path for r in server.requests] == ["/v1/chat/completions"]
        sent = server.requests[0].body
        assert sent["model"] == "qwen2.5:1.5b"
        assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    finally:
        server.close()
    with SessionService(SqliteStore(tmp_path / "local.db")) as service:
        texts = [m.text for m in service.view_messages("user-42")]
    assert texts == ["What should I pack for Oslo?", "A warm coat."]


def test_the_docs_examples_run_in_a_real_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    for block in doc_blocks():
        if OLLAMA in block:
            continue  # the local model's example: below
        exec(compile(block, str(DOC), "exec"), namespace)
    session, service = namespace["session"], namespace["service"]
    assert session.strategy is not None  # the compaction example's session
    model = ScriptedModel([text("Sunny.")])
    result = run(Runner.run(Agent(name="a", model=model), "Weather in Paris?", session=session))
    assert result.final_output == "Sunny."
    run(service.close())
    assert (tmp_path / "conversations.db").exists()


@pytest.fixture
def server_store(request):
    """A factory of async stores on the real PostgreSQL or Redis server, cleaned up after."""
    if request.param == "postgres":
        import psycopg
        from psycopg import sql

        from turnlog import AsyncPostgresStore

        dsn = request.getfixturevalue("postgres_dsn")
        schema = f"tl_agents_{uuid.uuid4().hex[:12]}"
        yield lambda: AsyncPostgresStore(dsn, schema=schema)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    else:
        from turnlog import AsyncRedisStore, RedisStore

        url = request.getfixturevalue("redis_url")
        prefix = f"tlagents-{uuid.uuid4().hex[:12]}"
        yield lambda: AsyncRedisStore(url, prefix=prefix)
        with RedisStore(url, prefix=prefix) as store:
            for key in store.client.scan_iter(f"{prefix}*"):
                store.client.delete(key)


LATER = [
    {"role": "assistant", "content": "Welcome."},
    {"role": "user", "content": "Bye."},
    {"role": "user", "content": "Again."},
]


@pytest.mark.parametrize("server_store", ["postgres", "redis"], indirect=True)
def test_the_server_stores_keep_items_through_pops_clears_and_compaction(server_store):
    async def main():
        async with AsyncSessionService(server_store()) as service:
            session = TurnlogSession(
                "srv",
                service,
                trigger=TurnCountTrigger(2),
                strategy=WindowCompactionStrategy(CompactionWindow.last_turns(1)),
            )
            await session.add_items(EVERY_KIND)  # two turns: the trigger does not fire
            stored = await session.get_items()
            popped = await session.pop_item()
            await session.add_items(LATER[:1])
            await session.add_items(LATER[1:2])
            await session.add_items(LATER[2:])  # a third turn: compacts to the last one
            compacted = await session.get_items()
            await session.clear_session()
            cleared = await session.get_items()
            log = [i for e in await service.events("srv") for i in stored_items(e)]
            return stored, popped, compacted, cleared, log

    stored, popped, compacted, cleared, log = run(main())
    assert json.dumps(stored) == json.dumps(EVERY_KIND)
    assert popped == EVERY_KIND[-1]
    assert compacted == [EVERY_KIND[0], *LATER[2:]]  # the developer message stays pinned
    assert cleared == []
    assert json.dumps(log) == json.dumps([*EVERY_KIND, *LATER])


@function_tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def test_an_approval_interruption_resumes_on_the_session_with_compaction(tmp_path):
    model = ScriptedModel(
        [
            [assistant_message("Hello.")],
            [function_call("delete_file", {"path": "a.txt"}, call_id="c1")],
            [assistant_message("Done.")],
        ]
    )
    agent = Agent(name="a", model=model, tools=[delete_file])

    async def main():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "h.db")) as service:
            session = TurnlogSession(
                "h",
                service,
                trigger=TurnCountTrigger(1),
                strategy=WindowCompactionStrategy(CompactionWindow.last_turns(1)),
            )
            await Runner.run(agent, "Hi.", session=session)
            paused = await Runner.run(agent, "Delete a.txt.", session=session)
            open_call = await session.get_items()
            state = paused.to_state()
            for item in paused.interruptions:
                state.approve(item)
            resumed = await Runner.run(agent, state, session=session)
            return paused, open_call, resumed, await session.get_items(), await service.events("h")

    paused, open_call, resumed, view, log = run(main())
    assert len(paused.interruptions) == 1
    assert [i.get("type") for i in open_call] == [None, "function_call"]  # turn 1 compacted away
    assert resumed.final_output == "Done."
    assert [i.get("type") for i in view] == [
        None,
        "function_call",
        "function_call_output",
        "message",
    ]
    assert view[2] == {"call_id": "c1", "output": "deleted a.txt", "type": "function_call_output"}
    assert "Hi." in json.dumps([i for e in log for i in stored_items(e)])


def test_a_call_without_a_call_id_is_kept_as_an_item_of_its_own_kind(service):
    session = TurnlogSession("bad", service)
    items = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": None, "output": "x"},
    ]
    run(session.add_items(items))
    assert run(session.get_items()) == items
    assert [m.role for m in run(service.view_messages("bad"))] == ["user", "assistant"]


# -- pops and clears under concurrency, and the items handed to the SDK -----------------------


def test_concurrent_pops_from_threads_over_one_sqlite_file_return_distinct_items(tmp_path):
    import threading

    path = tmp_path / "race.db"
    items = [{"role": "user", "content": f"m{n}"} for n in range(24)]

    async def fill():
        async with AsyncSessionService(AsyncSqliteStore(path)) as service:
            await TurnlogSession("race", service).add_items(items)

    run(fill())
    barrier = threading.Barrier(4)
    popped = []

    def popper():
        async def pops():
            async with AsyncSessionService(AsyncSqliteStore(path)) as service:
                session = TurnlogSession("race", service)
                barrier.wait()
                return [await session.pop_item() for _ in range(4)]

        popped.extend(run(pops()))

    threads = [threading.Thread(target=popper) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    async def left():
        async with AsyncSessionService(AsyncSqliteStore(path)) as service:
            return await TurnlogSession("race", service).get_items()

    assert sorted(p["content"] for p in popped) == sorted(i["content"] for i in items[8:])
    assert run(left()) == items[:8]


def test_concurrent_pops_as_tasks_on_one_service_return_distinct_items(service):
    items = [{"role": "user", "content": f"m{n}"} for n in range(12)]

    async def main():
        sessions = [TurnlogSession("tasks", service) for _ in range(6)]
        await sessions[0].add_items(items)
        popped = await asyncio.gather(*(s.pop_item() for s in sessions))
        return popped, await sessions[0].get_items()

    popped, left = run(main())
    assert sorted(p["content"] for p in popped) == sorted(i["content"] for i in items[6:])
    assert left == items[:6]


class WriterBetween(AsyncSessionService):
    """A service on which another writer appends once, right before the next call of the
    method `at` ("version" or "view"): a moment inside a pop."""

    def __init__(self, store, other, at):
        super().__init__(store)
        self.other, self.at, self.armed = other, at, False

    async def _maybe(self, name):
        if self.armed and name == self.at:
            self.armed = False
            await self.other()

    async def version(self, session_id):
        await self._maybe("version")
        return await super().version(session_id)

    async def view(self, session_id):
        await self._maybe("view")
        return await super().view(session_id)


GROUPED = [
    {"role": "user", "content": "weather?"},
    {"type": "function_call", "call_id": "a", "name": "w", "arguments": "{}"},
    {"type": "function_call", "call_id": "b", "name": "w", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "a", "output": "sun"},
    {"type": "function_call_output", "call_id": "b", "output": "rain"},
]


@pytest.mark.parametrize("at", ["version", "view"])
def test_popping_a_grouped_event_while_another_writer_adds_keeps_the_order(tmp_path, at):
    later = {"role": "user", "content": "later"}

    async def main():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "o.db")) as other:
            writer = TurnlogSession("order", other)
            await writer.add_items(GROUPED)
            service = WriterBetween(
                AsyncSqliteStore(tmp_path / "o.db"), lambda: writer.add_items([later]), at
            )
            async with service:
                session = TurnlogSession("order", service)
                await session.get_items()
                service.armed = True
                popped = await session.pop_item()
                return popped, await session.get_items()

    popped, left = run(main())
    # the pop comes after the other writer's add: it takes the newest item, "later"
    assert (popped, left) == (later, GROUPED)


def test_popping_one_item_of_a_group_keeps_the_rest_in_its_place(tmp_path):
    async def main():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "g.db")) as service:
            session = TurnlogSession("g", service)
            await session.add_items(GROUPED)
            popped = await session.pop_item()
            await session.add_items([{"role": "assistant", "content": "Mixed."}])
            return popped, await session.get_items(), await service.view_messages("g")

    popped, left, messages = run(main())
    assert popped == GROUPED[4]
    assert left == [*GROUPED[:4], {"role": "assistant", "content": "Mixed."}]
    assert [r.call_id for r in messages[2].tool_results] == ["a"]


@pytest.mark.parametrize("between", ["clear", "pop"])
def test_a_pop_or_clear_between_a_runs_input_and_output_never_hands_out_an_orphan_output(
    tmp_path, between, caplog
):
    model = ScriptedModel(
        [
            [function_call("delete_file", {"path": "a.txt"}, call_id="c1")],
            [assistant_message("Done.")],
            [assistant_message("Hello again.")],
        ]
    )
    agent = Agent(name="a", model=model, tools=[delete_file])

    async def main():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "h.db")) as service:
            session = TurnlogSession("h", service)
            paused = await Runner.run(agent, "Delete a.txt.", session=session)
            if between == "clear":
                await session.clear_session()
            else:
                assert (await session.pop_item())["type"] == "function_call"
            state = paused.to_state()
            for item in paused.interruptions:
                state.approve(item)
            await Runner.run(agent, state, session=session)
            with caplog.at_level("WARNING", "turnlog.integrations.openai_agents"):
                items = await session.get_items()
            await Runner.run(agent, "Hi.", session=session)
            return items, await service.events("h")

    items, log = run(main())
    assert not any(i.get("type") == "function_call_output" for i in items)
    assert "'c1'" in caplog.text
    sent = model.last_call.input
    calls = [i.get("call_id") for i in sent if i.get("type") == "function_call"]
    outputs = [i.get("call_id") for i in sent if i.get("type") == "function_call_output"]
    assert set(outputs) <= set(calls)  # what the Responses API would be sent is valid
    logged = [i for e in log for i in stored_items(e)]
    assert any(i.get("type") == "function_call_output" for i in logged)  # the log keeps it


def test_compactions_keeps_every_pass_of_a_run(service):
    session = TurnlogSession(
        "passes",
        service,
        trigger=TurnCountTrigger(2),
        strategy=WindowCompactionStrategy(CompactionWindow.last_turns(1)),
    )
    turns = [
        [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]
        for n in range(5)
    ]
    run(session.add_items(turns[0] + turns[1]))
    assert session.compactions == []  # that pass changed nothing
    run(session.add_items(turns[2][:1]))  # a run's input: compacts
    run(session.add_items(turns[2][1:]))  # its output: nothing to do
    run(session.add_items(turns[3]))
    run(session.add_items(turns[4]))
    assert session.last_compaction is not None
    assert len(session.compactions) == 2 and not any(c.unchanged for c in session.compactions)


# -- content parts: images, files and reasoning are parts of the log -------------------------


def png_bytes(width=640, height=480):
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def data_url(media_type, data):
    import base64

    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def test_an_input_image_is_stored_as_an_image_part_counted_and_given_back_unchanged(service):
    from turnlog.tokens import default_counter

    png = png_bytes()
    url = data_url("image/png", png)
    item = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What colour is this?"},
            {"type": "input_image", "image_url": url, "detail": "high"},
        ],
    }
    session = TurnlogSession("img", service)
    run(session.add_items([item]))
    assert run(session.get_items()) == [item]
    assert json.dumps(run(session.get_items())) == json.dumps([item])
    [event] = run(service.events("img"))
    assert event.message.text == "What colour is this?"
    image = event.message.parts[1]
    assert type(image) is ImagePart
    assert (image.media_type, image.data, image.detail) == ("image/png", png, "high")
    assert stored_items(event) == [item]
    # the bytes are stored once: in the part, not again in the item's JSON
    assert url not in json.dumps(event.metadata)
    assert event.metadata[PARTS_KEY] == [[0, ["content", 1, "image_url"], 1, "data_url"]]
    counter = default_counter()
    text_alone = counter.count(Message.user("What colour is this?").text)
    assert (
        event.tokens is not None and event.tokens.count > text_alone + 300
    )  # 640x480: 444 by default


def test_image_urls_files_and_file_ids_become_parts(service):
    pdf = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
    content = [
        {"type": "input_text", "text": "Compare."},
        {"type": "input_image", "image_url": "https://example.com/cat.jpg"},
        {"type": "input_image", "file_id": "file-img", "detail": "low"},
        {"type": "input_file", "file_data": data_url("application/pdf", pdf), "filename": "a.pdf"},
        {"type": "input_file", "file_url": "https://example.com/b.pdf"},
        {"type": "input_file", "file_id": "file-doc"},
        {"type": "input_text", "text": "Briefly."},
    ]
    item = {"role": "user", "content": content}
    session = TurnlogSession("files", service)
    run(session.add_items([item]))
    assert json.dumps(run(session.get_items())) == json.dumps([item])
    [event] = run(service.events("files"))
    parts = event.message.parts
    assert parts[1] == ImagePart("image/jpeg", url="https://example.com/cat.jpg")
    assert parts[2] == ProviderPart("openai", "input_image", content[2])
    assert parts[3] == FilePart("application/pdf", data=pdf, name="a.pdf")
    assert parts[4] == FilePart("application/pdf", url="https://example.com/b.pdf")
    assert parts[5] == ProviderPart("openai", "input_file", content[5])
    assert event.message.text == "Compare.\nBriefly."


def test_a_reasoning_item_round_trips_and_is_stored_as_a_reasoning_part(service):
    reasoning = {
        "type": "reasoning",
        "id": "rs_9",
        "summary": [
            {"type": "summary_text", "text": "Check the forecast."},
            {"type": "summary_text", "text": "Then answer."},
        ],
        "encrypted_content": "gAAAAAB" + "x" * 4000,
    }
    answer = {
        "id": "msg_9",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It is 3 C.", "annotations": []}],
    }
    items = [{"role": "user", "content": "Weather?"}, reasoning, answer]
    session = TurnlogSession("rs", service)
    run(session.add_items(items))
    assert json.dumps(run(session.get_items())) == json.dumps(items)
    event = run(service.events("rs"))[1]
    assert event.message.text == "It is 3 C."
    assert event.message.parts[0] == ReasoningPart(
        "openai",
        text="Check the forecast.\n\nThen answer.",
        encrypted=reasoning["encrypted_content"],
    )
    assert reasoning["encrypted_content"] not in json.dumps(event.metadata)
    assert "rs_9" in json.dumps(event.metadata)  # the item id stays with the item
    assert stored_items(event) == [reasoning, answer]
    # a pop of the answer keeps the reasoning in a stand-in, whole
    assert run(session.pop_item()) == answer
    assert json.dumps(run(session.get_items())) == json.dumps(items[:2])


def test_reasoning_alone_keeps_a_label_and_an_unreadable_image_stays_as_text(service):
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    bad = {
        "role": "user",
        "content": [{"type": "input_image", "image_url": "data:image/png;base64,@@"}],
    }
    session = TurnlogSession("odd", service)
    run(session.add_items([bad, reasoning]))
    assert json.dumps(run(session.get_items())) == json.dumps([bad, reasoning])
    user, model = run(service.events("odd"))
    assert user.message.parts == () and user.message.text == "[input_image]"
    assert model.message.parts == (ReasoningPart("openai"), TextPart("[reasoning]"))
