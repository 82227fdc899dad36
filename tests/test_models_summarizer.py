"""The adapters as the model of ChatModelSummarizer, under SessionService and
AsyncSessionService, against the real local provider servers."""

import asyncio

import pytest

from model_servers import (
    ScriptedServer,
    anthropic_error,
    anthropic_message,
    openai_completion,
    openai_error,
)
from test_summarizer import answer, question
from turnlog import (
    ChatModelSummarizer,
    CompactionWindow,
    Message,
    ModelError,
    SessionService,
    SqliteStore,
    WindowCompactionStrategy,
)
from turnlog.compaction.summary import DEFAULT_SUMMARY_SYSTEM_PROMPT
from turnlog.models import (
    AnthropicChatModel,
    AsyncAnthropicChatModel,
    AsyncOpenAIChatModel,
    OpenAIChatModel,
)
from turnlog.service_async import AsyncSessionService
from turnlog.stores.sqlite_async import AsyncSqliteStore

PROVIDERS = {
    "openai": (OpenAIChatModel, AsyncOpenAIChatModel, "/v1", openai_completion, openai_error),
    "anthropic": (
        AnthropicChatModel,
        AsyncAnthropicChatModel,
        "",
        anthropic_message,
        lambda status, text: anthropic_error("api_error", text),
    ),
}


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


def conversation():
    """Three turns of a realistic size: the summary turn is smaller than the two it covers."""
    out = []
    for n in range(3):
        out += [Message.user(question(n)), Message.assistant(answer(n))]
    return out


def check_summary_request(provider, body):
    if provider == "openai":
        system, prompt = body["messages"]
        assert system == {"role": "system", "content": DEFAULT_SUMMARY_SYSTEM_PROMPT}
        assert f"User: {question(0)}" in prompt["content"]
    else:
        assert body["system"] == DEFAULT_SUMMARY_SYSTEM_PROMPT
        [prompt] = body["messages"]
        assert f"User: {question(0)}" in prompt["content"][0]["text"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_blocking_adapter_summarizes_under_session_service(server, provider, tmp_path):
    blocking, _, path, reply, _ = PROVIDERS[provider]
    server.reply_json(reply("They asked three questions."))
    with (
        blocking("m", base_url=server.url + path, api_key="k", max_retries=0) as model,
        SessionService(SqliteStore(tmp_path / "s.db")) as service,
    ):
        sid = service.create().id
        for m in conversation():
            service.append_message(sid, m)
        strategy = WindowCompactionStrategy(
            CompactionWindow.last_turns(1), summarizer=ChatModelSummarizer(model)
        )
        result = service.compact(sid, lambda r: True, strategy)
        messages = service.view_messages(sid)
    assert not result.unchanged
    assert messages[1] == Message.assistant("They asked three questions.")
    assert [m.text for m in messages[2:]] == [question(2), answer(2)]
    check_summary_request(provider, server.last_body())


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_async_adapter_summarizes_under_async_session_service(server, provider, tmp_path):
    _, asynchronous, path, reply, _ = PROVIDERS[provider]
    server.reply_json(reply("They asked three questions."))

    async def main():
        async with (
            asynchronous("m", base_url=server.url + path, api_key="k", max_retries=0) as model,
            AsyncSessionService(AsyncSqliteStore(tmp_path / "a.db")) as service,
        ):
            sid = (await service.create()).id
            for m in conversation():
                await service.append_message(sid, m)
            strategy = WindowCompactionStrategy(
                CompactionWindow.last_turns(1), summarizer=ChatModelSummarizer(model)
            )
            await service.compact(sid, lambda r: True, strategy)
            return await service.view_messages(sid)

    messages = asyncio.run(main())
    assert messages[1] == Message.assistant("They asked three questions.")
    check_summary_request(provider, server.last_body())


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_failing_provider_writes_nothing(server, provider, tmp_path):
    blocking, _, path, _, error = PROVIDERS[provider]
    server.reply_json(error(500, "boom"), 500)
    with (
        blocking("m", base_url=server.url + path, api_key="k", max_retries=0) as model,
        SessionService(SqliteStore(tmp_path / "s.db")) as service,
    ):
        sid = service.create().id
        for m in conversation():
            service.append_message(sid, m)
        before = service.events(sid)
        strategy = WindowCompactionStrategy(
            CompactionWindow.last_turns(1), summarizer=ChatModelSummarizer(model)
        )
        with pytest.raises(ModelError) as caught:
            service.compact(sid, lambda r: True, strategy)
        assert service.events(sid) == before
    assert (caught.value.provider, caught.value.status) == (provider, 500)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_summary_cut_at_the_token_cap_writes_nothing(server, provider, tmp_path):
    """The model stops at the reply's cap mid-sentence: the summary is refused, not stored."""
    blocking, _, path, reply, _ = PROVIDERS[provider]
    cut = {"finish_reason": "length"} if provider == "openai" else {"stop_reason": "max_tokens"}
    server.reply_json(reply("Assistant: Light clothes and", **cut))
    failures = []
    with (
        blocking("m", base_url=server.url + path, api_key="k", max_retries=0) as model,
        SessionService(SqliteStore(tmp_path / "s.db")) as service,
    ):
        sid = service.create().id
        for m in conversation():
            service.append_message(sid, m)
        before = service.events(sid)
        summarizer = ChatModelSummarizer(model, on_failure=failures.append)
        strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1), summarizer=summarizer)
        with pytest.raises(ModelError, match="cut the summary short"):
            service.compact(sid, lambda r: True, strategy)
        assert service.events(sid) == before
    assert len(failures) == 1
