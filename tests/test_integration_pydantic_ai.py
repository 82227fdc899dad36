"""turnlog.integrations.pydantic_ai: real `agent.run` calls with pydantic-ai's own FunctionModel and
TestModel, real SQLite files and the memory store; nothing of turnlog or pydantic-ai is mocked."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from turnlog import (
    AsyncSessionService,
    CompactionWindow,
    InvalidInput,
    MemoryStore,
    Message,
    SessionService,
    SqliteStore,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.compaction import SummaryRequest
from turnlog.events import EventType
from turnlog.integrations.pydantic_ai import (
    TurnlogHistory,
    history_processor,
    load_history,
    load_history_async,
    save_history,
    save_history_async,
)
from turnlog.stores.memory_async import AsyncMemoryStore
from turnlog.stores.sqlite_async import AsyncSqliteStore

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def as_json(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


def every_part_kind() -> list[ModelMessage]:
    """A conversation with each kind of part a model or an agent writes, timestamps fixed."""
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("be brief", timestamp=T0),
                UserPromptPart(["look:", ImageUrl("https://example.test/a.png")], timestamp=T0),
            ],
            timestamp=T0,
            instructions="answer in French",
            run_id="run-1",
            metadata={"app": [1, 2]},
        ),
        ModelResponse(
            parts=[
                ThinkingPart("let me think", signature="sig"),
                TextPart("looking"),
                NativeToolCallPart("web_search", {"q": "x"}, tool_call_id="n1"),
                NativeToolReturnPart("web_search", {"hits": 1}, tool_call_id="n1"),
                ToolCallPart("add", {"a": 1, "b": 2}, tool_call_id="c1"),
                ToolCallPart("add", '{"a": 3}', tool_call_id="c2"),
            ],
            model_name="m",
            timestamp=T0,
            provider_details={"x": 1},
            finish_reason="tool_call",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("add", 3, tool_call_id="c1", timestamp=T0),
                ToolReturnPart(
                    "add", "b is missing", tool_call_id="c2", outcome="retried", timestamp=T0
                ),
            ],
            timestamp=T0,
        ),
        ModelResponse(parts=[ThinkingPart("only thinking")], timestamp=T0),
        ModelRequest(
            parts=[
                RetryFeedbackPart(
                    "please answer with text",
                    retry=RetryInfo("model_retry", attempt=1, max_retries=3),
                    timestamp=T0,
                )
            ]
        ),
        ModelResponse(parts=[TextPart("bonjour")], timestamp=T0),
    ]


def test_every_part_kind_round_trips_byte_for_byte(tmp_path: Path) -> None:
    messages = every_part_kind()
    with SessionService(SqliteStore(str(tmp_path / "log.db"))) as service:
        assert save_history(service, "s1", messages) == len(messages)
        events = service.events("s1")
        assert [e.message.role for e in events if e.message] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
        ]
        (tool,) = [e.message for e in events if e.message and e.message.role == "tool"]
        assert [(r.call_id, r.is_error) for r in tool.tool_results] == [
            ("c1", False),
            ("c2", True),
        ]
    # Read back by a fresh service: what comes back is what was stored, not objects in memory.
    with SessionService(SqliteStore(str(tmp_path / "log.db"))) as service:
        loaded = load_history(service, "s1")
    assert as_json(loaded) == as_json(messages)


def test_saving_again_is_a_no_op_even_after_a_json_round_trip() -> None:
    messages = every_part_kind()
    with SessionService(MemoryStore()) as service:
        save_history(service, "s1", messages)
        version = service.version("s1")
        assert save_history(service, "s1", messages) == 0  # the same objects: marked as stored
        copies = ModelMessagesTypeAdapter.validate_json(as_json(messages))
        assert save_history(service, "s1", copies) == len(copies)  # new objects ...
        assert service.version("s1") == version  # ... whose events are stored already
        assert save_history(service, "other", copies) == len(copies)
        assert service.version("other") == version  # another session stores its own


def test_load_of_a_missing_session_is_empty() -> None:
    with SessionService(MemoryStore()) as service:
        assert load_history(service, "nobody") == []
        assert service.find("nobody") is None


def tool_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls `lookup` for every user prompt, then answers with what it returned."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"it is {returns[0].content}")])
    (prompt,) = [p for p in last.parts if isinstance(p, UserPromptPart)]
    return ModelResponse(
        parts=[
            TextPart("checking"),
            ToolCallPart("lookup", {"key": prompt.content}),
            ToolCallPart("lookup", {"key": f"{prompt.content}!"}),
        ]
    )


def check_prompt(messages: list[ModelMessage]) -> None:
    """What a model must be able to read: a user request first, no return without its call, no
    call without its return (but for the newest response's)."""
    first = messages[0]
    assert isinstance(first, ModelRequest)
    assert any(isinstance(p, UserPromptPart) for p in first.parts) or all(
        isinstance(p, SystemPromptPart) for p in first.parts
    )
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, ModelResponse):
            assert not open_calls, f"unanswered calls {open_calls}"
            open_calls = {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
        else:
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    assert part.tool_call_id in open_calls, "a tool return without its call"
                    open_calls.discard(part.tool_call_id)
    assert not open_calls


def summarize(request: SummaryRequest) -> list[Message]:
    said = [e.message.text for e in request.covered if e.message and e.message.role == "user"]
    return [Message.user("What happened so far?"), Message.assistant(f"You asked {said}.")]


def test_agent_runs_with_tools_and_a_compaction_between_them(tmp_path: Path) -> None:
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        check_prompt(messages)
        return tool_model(messages, info)

    async def main() -> None:
        service = AsyncSessionService(AsyncSqliteStore(str(tmp_path / "log.db")))
        memory = TurnlogHistory(
            service,
            "chat",
            trigger=TurnCountTrigger(2),
            strategy=WindowCompactionStrategy(CompactionWindow.last_turns(1), summarizer=summarize),
        )
        agent = Agent(FunctionModel(model), system_prompt="be brief", capabilities=[memory])

        @agent.tool_plain
        def lookup(key: str) -> str:
            return key.upper()

        outputs = []
        for question in ["alpha", "beta", "gamma", "delta"]:
            history = await load_history_async(service, "chat")
            result = await agent.run(question, message_history=history)
            outputs.append(result.output)
        assert outputs == ["it is ALPHA", "it is BETA", "it is GAMMA", "it is DELTA"]

        # The log holds everything, in order: 4 runs x (user, assistant+calls, tool, assistant).
        log = [e.message for e in await service.events("chat") if e.message and not e.synthetic]
        assert [m.text for m in log if m.role == "user"] == ["alpha", "beta", "gamma", "delta"]
        assert len([m for m in log if m.role == "tool"]) == 4
        assert any(e.type == EventType.COMPACTION for e in await service.events("chat"))

        # The model saw a compacted view: the summary, never more than the window allows.
        last_prompt = seen[-1]
        texts = [
            p.content
            for m in last_prompt
            for p in m.parts
            if isinstance(p, (UserPromptPart, TextPart)) and isinstance(p.content, str)
        ]
        assert "alpha" not in texts
        assert any(t.startswith("You asked") for t in texts)
        assert "delta" in texts
        assert isinstance(last_prompt[0].parts[0], SystemPromptPart)

        # The view given back is the run's history, field for field.
        assert as_json(await load_history_async(service, "chat")) == as_json(result.all_messages())
        await service.close()

    asyncio.run(main())
    assert len(seen) == 8


def test_capability_without_history_sends_the_view() -> None:
    async def main() -> None:
        service = AsyncSessionService(AsyncMemoryStore())
        agent = Agent(
            FunctionModel(tool_model),
            system_prompt="be brief",
            capabilities=[TurnlogHistory(service, "s")],
        )

        @agent.tool_plain
        def lookup(key: str) -> str:
            return key * 2

        await agent.run("ab")
        result = await agent.run("cd")  # no message_history: the capability sends the view
        assert result.output == "it is cdcd"
        users = [
            p.content
            for m in result.all_messages()
            for p in m.parts
            if isinstance(p, UserPromptPart)
        ]
        assert users == ["ab", "cd"]
        systems = [e for e in await service.view_messages("s") if e.role == "system"]
        assert [m.text for m in systems] == ["be brief"]
        await service.close()

    asyncio.run(main())


def test_history_processor_with_process_history_and_save() -> None:
    async def main() -> None:
        service = AsyncSessionService(AsyncMemoryStore())
        processor = history_processor(service, "p")
        agent = Agent(TestModel(), capabilities=[ProcessHistory(processor)])

        @agent.tool_plain
        def echo(text: str) -> str:
            return text

        for prompt in ["one", "two", "three"]:
            history = await load_history_async(service, "p")
            result = await agent.run(prompt, message_history=history)
            await save_history_async(service, "p", result.new_messages())
            assert as_json(await load_history_async(service, "p")) == as_json(result.all_messages())
        check_prompt(await load_history_async(service, "p"))
        roles = [m.role for m in await service.view_messages("p")]
        assert roles.count("user") == 3 and "tool" in roles
        await service.close()

    asyncio.run(main())


def test_sync_helpers_around_a_run(tmp_path: Path) -> None:
    agent = Agent(FunctionModel(tool_model))

    @agent.tool_plain
    def lookup(key: str) -> int:
        return len(key)

    path = str(tmp_path / "sync.db")
    for prompt in ["a", "bb", "ccc"]:
        with SessionService(SqliteStore(path)) as service:
            history = load_history(service, "s")
            result = asyncio.run(agent.run(prompt, message_history=history))
            save_history(service, "s", result.new_messages())
            service.compact(
                "s", TurnCountTrigger(1), WindowCompactionStrategy(CompactionWindow.last_turns(1))
            )
    assert result.output == "it is 3"
    with SessionService(SqliteStore(path)) as service:
        view = load_history(service, "s")
        check_prompt(view)
        users = [p.content for m in view for p in m.parts if isinstance(p, UserPromptPart)]
        assert users == ["ccc"]
        assert len([e for e in service.events("s") if e.message]) == 12


def test_a_return_without_its_call_is_refused() -> None:
    orphan: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("hi")]),
        ModelRequest(parts=[ToolReturnPart("add", 3, tool_call_id="nope")]),
    ]
    with SessionService(MemoryStore()) as service:
        with pytest.raises(InvalidInput):
            save_history(service, "s", orphan)
        assert service.version("s") == 0
        save_history(service, "s", orphan, check_rules=False)
        view = load_history(service, "s")
        assert as_json(view) == as_json(orphan[:1])  # the view repairs it: the orphan is left out


def test_trigger_needs_a_strategy() -> None:
    service = AsyncSessionService(AsyncMemoryStore())
    with pytest.raises(InvalidInput, match="both trigger and strategy"):
        TurnlogHistory(service, "s", trigger=TurnCountTrigger(2))
    with pytest.raises(InvalidInput, match="both trigger and strategy"):
        history_processor(service, "s", strategy=WindowCompactionStrategy())
    asyncio.run(service.close())


class Answer(BaseModel):
    value: int


def test_structured_output_with_instructions_over_runs_and_compactions() -> None:
    async def main() -> None:
        service = AsyncSessionService(AsyncMemoryStore())
        memory = TurnlogHistory(
            service,
            "o",
            trigger=TurnCountTrigger(2),
            strategy=WindowCompactionStrategy(CompactionWindow.last_turns(1), summarizer=summarize),
        )
        agent = Agent(
            TestModel(), output_type=Answer, instructions="count things", capabilities=[memory]
        )

        @agent.tool_plain
        def echo(text: str) -> str:
            return text

        for prompt in ["a", "b", "c", "d"]:
            result = await agent.run(prompt, message_history=await load_history_async(service, "o"))
            assert result.output == Answer(value=0)
            # What the next run is given is this run's history, field for field.
            history = await load_history_async(service, "o")
            assert as_json(history) == as_json(result.all_messages())
            check_prompt(history)
        calls = [c.name for m in await service.view_messages("o") for c in m.tool_calls]
        assert calls[-1] == "final_result"
        await service.close()

    asyncio.run(main())


def test_a_streamed_run_is_completed_by_saving_its_messages() -> None:
    async def main() -> None:
        service = AsyncSessionService(AsyncMemoryStore())
        agent = Agent(TestModel(), output_type=Answer, capabilities=[TurnlogHistory(service, "s")])
        async with agent.run_stream("one") as stream:
            assert await stream.get_output() == Answer(value=0)
        # A stream adds the output tool's return after the run's hooks: save it from the result.
        await save_history_async(service, "s", stream.all_messages())
        assert as_json(await load_history_async(service, "s")) == as_json(stream.all_messages())
        result = await agent.run("two", message_history=await load_history_async(service, "s"))
        check_prompt(result.all_messages())
        users = [m.text for m in await service.view_messages("s") if m.role == "user"]
        assert users == ["one", "two"]
        await service.close()

    asyncio.run(main())


def test_a_request_with_nothing_to_read_is_logged_but_not_sent() -> None:
    interrupted = ModelRequest(parts=[], state="interrupted", timestamp=T0)
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("hi", timestamp=T0)], timestamp=T0),
        ModelResponse(parts=[TextPart("hello")], timestamp=T0),
        interrupted,
    ]
    with SessionService(MemoryStore()) as service:
        save_history(service, "s", messages)
        (kept,) = [e for e in service.events("s") if e.type == EventType.of("PYDANTIC_AI.MESSAGE")]
        assert ModelMessagesTypeAdapter.validate_python([kept.payload["message"]]) == [interrupted]
        assert as_json(load_history(service, "s")) == as_json(messages[:2])


# -- docs/integrations/pydantic-ai.md: its examples run, against a real local server -----------

DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations" / "pydantic-ai.md"
OLLAMA = "http://localhost:11434/v1"


def doc_block(text):
    import re
    import textwrap

    found = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    [block] = [textwrap.dedent(b) for b in found if text in b]
    return block


def run_doc(code, namespace):
    """A docs example as the docs say to run it: `await` at the top level allowed."""
    import ast

    compiled = compile(code, str(DOC), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, namespace)
    if asyncio.iscoroutine(result):
        asyncio.run(result)


def responses_reply(text):
    """A reply of OpenAI's Responses API, as `POST /v1/responses` gives it."""
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_760_000_000,
        "model": "gpt-5",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 12,
            "output_tokens": 3,
            "total_tokens": 15,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


@pytest.fixture
def server():
    """The scripted server; each reply closes its connection, so the clients the examples make
    (and leave open, as an application would until it exits) keep no socket from a closed
    loop."""
    from model_servers import ScriptedServer

    s = ScriptedServer()
    yield s
    s.close()


def stored_texts(path, session_id):
    with SessionService(SqliteStore(path)) as service:
        return [m.text for m in service.view_messages(session_id)]


def test_the_switch_example_runs_with_the_extra_on_openais_api(server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    server.reply_json(responses_reply("Rain tomorrow."), connection="close")
    namespace = {"__name__": "__main__"}
    run_doc(doc_block('Agent("openai:gpt-6.1-sol"'), namespace)
    assert namespace["result"].output == "Rain tomorrow."
    assert [r.path for r in server.requests] == ["/v1/responses"]
    asyncio.run(namespace["service"].close())
    assert stored_texts(tmp_path / "chat.db", "user-42") == ["and tomorrow?", "Rain tomorrow."]


def test_the_local_model_example_runs_on_a_local_openai_compatible_server(
    server, tmp_path, monkeypatch, capsys
):
    from model_servers import openai_completion

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = doc_block(OLLAMA).replace(OLLAMA, server.url + "/v1")
    assert server.url in code
    server.reply_json(openai_completion("A warm coat."), connection="close")
    run_doc(code, {"__name__": "__main__"})
    assert capsys.readouterr().out.strip() == "A warm coat."
    assert [r.path for r in server.requests] == ["/v1/chat/completions"]
    assert server.requests[0].body["model"] == "qwen2.5:1.5b"
    assert stored_texts(tmp_path / "local.db", "user-42") == [
        "What should I pack for Oslo?",
        "A warm coat.",
    ]


def test_the_blocking_example_runs(server, tmp_path, monkeypatch):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from model_servers import openai_completion

    monkeypatch.chdir(tmp_path)
    server.reply_json(openai_completion("Hello Ann."), connection="close")
    model = OpenAIChatModel(
        "m", provider=OpenAIProvider(base_url=server.url + "/v1", api_key="unused")
    )
    namespace = {"agent": Agent(model), "prompt": "Hi, I'm Ann."}
    # run_sync runs on the main thread's current loop, creating one it never closes when there
    # is none; the test gives it one and closes it, so no loop outlives the test
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        run_doc(doc_block("agent.run_sync("), namespace)
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    assert stored_texts(tmp_path / "chat.db", "user-42") == ["Hi, I'm Ann.", "Hello Ann."]


def png_bytes(width: int, height: int) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_images_in_a_user_prompt_are_stored_as_image_parts_and_counted(tmp_path: Path) -> None:
    from pydantic_ai.messages import BinaryContent, DocumentUrl

    from turnlog import FilePart, ImagePart
    from turnlog.events import SessionEvent
    from turnlog.tokens import event_tokens

    png = png_bytes(640, 480)
    prompt = UserPromptPart(
        [
            "What is in these?",
            BinaryContent(png, media_type="image/png"),
            ImageUrl("https://example.test/b.jpg", vendor_metadata={"detail": "low"}),
            "and this:",
            DocumentUrl("https://example.test/c.pdf"),
        ],
        timestamp=T0,
    )
    messages: list[ModelMessage] = [
        ModelRequest(parts=[prompt], timestamp=T0),
        ModelResponse(parts=[TextPart("a red square")], timestamp=T0),
    ]
    with SessionService(SqliteStore(str(tmp_path / "log.db"))) as service:
        save_history(service, "s1", messages)
        user = service.events("s1")[0]
        assert user.message is not None
        assert user.message.text == "What is in these?\nand this:"
        parts = user.message.parts
        assert parts[1] == ImagePart("image/png", data=png)
        assert parts[2] == ImagePart("image/jpeg", url="https://example.test/b.jpg", detail="low")
        assert parts[4] == FilePart("application/pdf", url="https://example.test/c.pdf")
        # The bytes are stored once: the stored form of the prompt holds a pointer to the part.
        share = user.message.metadata["pydantic_ai"]
        assert share["bytes"] == [[0, 1, 1]]
        assert share["parts"][0]["content"][1]["data"] == ""
        counter = event_tokens()
        text_alone = SessionEvent.for_message("s1", Message.user(user.message.text or ""))
        assert counter.of(user) > counter.of(text_alone) + 300  # two images and a PDF page
    with SessionService(SqliteStore(str(tmp_path / "log.db"))) as service:
        loaded = load_history(service, "s1")
    assert as_json(loaded) == as_json(messages)
    assert loaded[0].parts[0].content[1].data == png  # type: ignore[union-attr,index]


def test_thinking_is_stored_as_reasoning_and_round_trips() -> None:
    from turnlog import ReasoningPart
    from turnlog import TextPart as TlTextPart

    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("hi", timestamp=T0)], timestamp=T0),
        ModelResponse(
            parts=[
                ThinkingPart("the user greets", signature="sig-1", provider_name="anthropic"),
                TextPart("hello"),
            ],
            timestamp=T0,
        ),
        ModelRequest(parts=[UserPromptPart("again", timestamp=T0)], timestamp=T0),
        ModelResponse(parts=[ThinkingPart("hmm")], timestamp=T0),
    ]
    with SessionService(MemoryStore()) as service:
        save_history(service, "s1", messages)
        replies = [
            e.message for e in service.events("s1") if e.message and e.message.role == "assistant"
        ]
        assert replies[0].parts == (
            ReasoningPart("anthropic", text="the user greets", signature="sig-1"),
            TlTextPart("hello"),
        )
        assert replies[0].text == "hello"
        assert replies[1].parts == (
            ReasoningPart("pydantic-ai", text="hmm"),
            TlTextPart("[thinking]"),
        )
    copies = ModelMessagesTypeAdapter.validate_json(as_json(messages))
    with SessionService(MemoryStore()) as fresh:
        save_history(fresh, "s1", copies)
        assert as_json(load_history(fresh, "s1")) == as_json(messages)
