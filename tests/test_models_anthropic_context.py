"""The Messages API's own context management through AnthropicChatModel, against the local
Messages server (tests/model_servers.py): thinking options and beta headers passed through
untouched, context editing's applied edits kept, server-side compaction's blocks kept and sent
back as the API reads them; and a reply block of an unknown kind stored, the turn going on."""

import anthropic
import pytest

from chat_harness import KINDS, Harness
from model_servers import (
    ScriptedServer,
    Twin,
    anthropic_events,
    anthropic_message,
    thinking_block,
    tool_use_block,
)
from turnlog import InvalidInput, Message, ModelError, ToolCall, ToolResult
from turnlog.models import AnthropicChatModel, AsyncAnthropicChatModel
from turnlog.models.anthropic_format import CONTEXT_MANAGEMENT_KEY, USAGE_KEY
from turnlog.parts import ProviderPart, ReasoningPart, TextPart

INTERLEAVED = "interleaved-thinking-2025-05-14"
EDITING = "context-management-2025-06-27"
COMPACTING = "compact-2026-01-12"
CLEAR_TOOL_USES = {
    "type": "clear_tool_uses_20250919",
    "trigger": {"type": "input_tokens", "value": 30_000},
    "keep": {"type": "tool_uses", "value": 3},
    "clear_at_least": {"type": "input_tokens", "value": 5_000},
    "exclude_tools": ["web_search"],
}
APPLIED = {
    "applied_edits": [
        {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 8, "cleared_input_tokens": 50_000}
    ]
}
COMPACT = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 150_000}}


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city.
    """
    return f"{city}: 18C, clear"


def compaction_block(summary, signature="sig-compact-1"):
    return {
        "type": "compaction",
        "content": summary,
        "encrypted_content": "EncQ" + signature,
        "signature": signature,
    }


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


def twin(kind, server, **settings):
    return Twin(
        kind,
        AnthropicChatModel,
        AsyncAnthropicChatModel,
        model="claude-test",
        base_url=server.url,
        api_key="sk-ant-test",
        max_retries=0,
        timeout=5.0,
        max_tokens=16_000,
        **settings,
    )


# -- thinking options and beta headers pass through untouched ---------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "thinking",
    [
        pytest.param({"type": "enabled", "budget_tokens": 10_000}, id="budgeted"),
        pytest.param({"type": "adaptive"}, id="adaptive"),
    ],
)
def test_thinking_options_and_the_interleaved_beta_reach_the_server_untouched(
    kind, server, thinking
):
    options = {"thinking": thinking, "output_config": {"effort": "high"}}
    model = twin(kind, server, options=options, betas=[INTERLEAVED])
    server.reply_json(anthropic_message("Hi.", thinking=[thinking_block("Hm.", "sig-1")]))
    server.reply_sse(anthropic_events(["Hi."], thinking=[thinking_block("Hm.", "sig-2")]))

    model.respond([Message.user("hi")])
    model.stream([Message.user("hi")])

    for request in server.requests:
        assert request.body["thinking"] == thinking  # as given, not a copy with defaults
        assert request.body["output_config"] == {"effort": "high"}
        assert request.body["max_tokens"] == 16_000
        assert request.headers["anthropic-beta"] == INTERLEAVED


def test_betas_are_joined_into_one_header_and_none_sends_none(server):
    with AnthropicChatModel(
        "claude-test", base_url=server.url, api_key="k", betas=[EDITING, COMPACTING]
    ) as model:
        server.reply_json(anthropic_message("ok"))
        model.respond([Message.user("hi")])
    with AnthropicChatModel("claude-test", base_url=server.url, api_key="k") as model:
        server.reply_json(anthropic_message("ok"))
        model.respond([Message.user("hi")])
    assert server.requests[0].headers["anthropic-beta"] == f"{EDITING},{COMPACTING}"
    assert "anthropic-beta" not in server.requests[1].headers


def test_a_client_of_your_own_keeps_its_beta_header(server):
    client = anthropic.Anthropic(
        base_url=server.url,
        api_key="k",
        max_retries=0,
        default_headers={"anthropic-beta": INTERLEAVED},
    )
    with client:
        model = AnthropicChatModel("claude-test", client=client)
        server.reply_json(anthropic_message("ok"))
        model.respond([Message.user("hi")])
    assert server.requests[0].headers["anthropic-beta"] == INTERLEAVED


@pytest.mark.parametrize("betas", ["interleaved", [""], ["a,b"], [3]])
def test_betas_are_checked(betas):
    with pytest.raises(InvalidInput, match="betas"):
        AnthropicChatModel("claude-test", api_key="k", betas=betas)


# -- context editing -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["send", "stream"])
def test_context_editing_is_sent_and_its_applied_edits_are_kept(tmp_path, server, kind, mode):
    h = Harness(kind, tmp_path)
    adapter = AnthropicChatModel if kind == "sync" else AsyncAnthropicChatModel
    model = adapter(
        "claude-test",
        base_url=server.url,
        api_key="k",
        max_retries=0,
        options={"context_management": {"edits": [CLEAR_TOOL_USES]}},
        betas=[EDITING],
    )
    if mode == "send":
        body = anthropic_message("Oslo: clear.")
        body["context_management"] = APPLIED
        server.reply_json(body)
    else:
        text = [{"type": "text", "text": "Oslo: clear."}]
        server.reply_sse(anthropic_events([], content=text, context_management=APPLIED))
    try:
        chat = h.make(model)
        if mode == "send":
            chat.send("s", "Weather?")
        else:
            list(chat.stream("s", "Weather?"))
        request = server.requests[-1]
        assert request.body["context_management"] == {"edits": [CLEAR_TOOL_USES]}
        assert request.headers["anthropic-beta"] == EDITING
        reply = h.service.events("s")[-1].message
        assert reply.text == "Oslo: clear."
        assert reply.metadata[CONTEXT_MANAGEMENT_KEY] == APPLIED
        assert not reply.parts  # nothing else changed: a text reply
    finally:
        if kind == "sync":
            model.close()
        else:
            h.loop.run(model.close())
        h.close()


@pytest.mark.parametrize("kind", KINDS)
def test_without_its_beta_context_management_is_refused_as_the_api_does(kind, server):
    model = twin(kind, server, options={"context_management": {"edits": [CLEAR_TOOL_USES]}})
    server.reply_json(anthropic_message("ok"))
    with pytest.raises(ModelError) as caught:
        model.respond([Message.user("hi")])
    assert caught.value.status == 400
    assert EDITING in str(caught.value)


def test_a_reply_without_context_management_keeps_no_such_metadata(server):
    with AnthropicChatModel("claude-test", base_url=server.url, api_key="k") as model:
        server.reply_json(anthropic_message("ok"))
        assert model.respond([Message.user("hi")]).message == Message.assistant("ok")


# -- server-side compaction ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["send", "stream"])
def test_compaction_blocks_are_kept_and_sent_from_the_last_one_on(tmp_path, server, kind, mode):
    h = Harness(kind, tmp_path)
    adapter = AnthropicChatModel if kind == "sync" else AsyncAnthropicChatModel
    model = adapter(
        "claude-test",
        base_url=server.url,
        api_key="k",
        max_retries=0,
        options={"context_management": {"edits": [COMPACT]}},
        betas=[COMPACTING],
    )
    first = compaction_block("The user asked about Oslo.", "sig-c1")
    second = compaction_block("Oslo, then Bergen.", "sig-c2")
    iterations = {
        "input_tokens": 2_300,
        "output_tokens": 100,
        "iterations": [
            {
                "type": "compaction",
                "input_tokens": 180_000,
                "output_tokens": 3_500,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            },
            {"type": "message", "input_tokens": 2_300, "output_tokens": 100},
        ],
    }

    def script(content, usage=None):
        if mode == "send":
            server.reply_json(anthropic_message(content=content, usage=usage))
        else:
            server.reply_sse(anthropic_events([], content=content, end_usage=usage))

    script([first, {"type": "text", "text": "Oslo: clear."}], iterations)
    script([{"type": "text", "text": "Bergen: rain."}])
    script([second, {"type": "text", "text": "Both noted."}])
    script([{"type": "text", "text": "You're welcome."}])
    try:
        chat = h.make(model)
        for text in ("Oslo?", "Bergen?", "Remember both.", "Thanks."):
            if mode == "send":
                chat.send("s", text)
            else:
                list(chat.stream("s", text))

        # every request answered 200: the server refuses a compaction block changed, two of
        # them, or one that is not the first block
        bodies = [r.body for r in server.requests]
        assert len(bodies) == 4
        assert bodies[0]["context_management"] == {"edits": [COMPACT]}
        assert bodies[1]["messages"] == [
            {"role": "assistant", "content": [first, {"type": "text", "text": "Oslo: clear."}]},
            {"role": "user", "content": [{"type": "text", "text": "Bergen?"}]},
        ]
        assert bodies[3]["messages"][0]["content"][0] == second
        assert len(bodies[3]["messages"]) == 2
        assert all(r.headers["anthropic-beta"] == COMPACTING for r in server.requests)

        # the log keeps every message, the compaction blocks as provider parts
        stored = [e.message for e in h.service.events("s")]
        assert [m.role for m in stored] == ["user", "assistant"] * 4
        assert stored[1].parts == (
            ProviderPart("anthropic", "compaction", first),
            TextPart("Oslo: clear."),
        )
        assert stored[1].text == "Oslo: clear."
        kept = stored[1].metadata[USAGE_KEY]  # a stream's: message_start's counts, then the end's
        assert kept["iterations"] == iterations["iterations"]
        assert kept["input_tokens"] == 2_300
        assert USAGE_KEY not in stored[3].metadata
        assert stored[5].parts[0] == ProviderPart("anthropic", "compaction", second)
    finally:
        if kind == "sync":
            model.close()
        else:
            h.loop.run(model.close())
        h.close()


def test_a_failed_compaction_block_is_kept_and_changes_nothing_sent():
    from turnlog.models.anthropic_format import from_last_compaction, to_anthropic_messages

    failed = {"type": "compaction", "content": None}
    summary = compaction_block("Earlier: Oslo.")
    messages = [
        Message.user("Oslo?"),
        Message.assistant(parts=[ProviderPart("anthropic", "compaction", summary), "Clear."]),
        Message.user("Bergen?"),
        Message.assistant(parts=[ProviderPart("anthropic", "compaction", failed), "Rain."]),
        Message.user("Thanks."),
    ]
    _, turns = to_anthropic_messages(messages)
    assert len(turns) == 5  # the wire format itself keeps everything (an export, say)
    sent = from_last_compaction(turns)
    assert sent == turns[1:]
    assert sent[0]["content"][0] == summary
    assert from_last_compaction(turns[2:]) == turns[2:]  # no summary: nothing left out


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        pytest.param(
            lambda c: [{"role": "assistant", "content": [dict(c, content="Forged.")]}],
            "compaction_content_mismatch",
            id="changed",
        ),
        pytest.param(
            lambda c: [
                {"role": "user", "content": "Oslo?"},
                {"role": "assistant", "content": [c, {"type": "text", "text": "Clear."}]},
                {"role": "user", "content": "Bergen?"},
            ],
            "compaction_block_misplaced",
            id="not-first",
        ),
        pytest.param(
            lambda c: [
                {"role": "assistant", "content": [c]},
                {"role": "user", "content": "Bergen?"},
                {"role": "assistant", "content": [c]},
                {"role": "user", "content": "And?"},
            ],
            "compaction_block_ambiguous",
            id="two",
        ),
    ],
)
def test_the_server_refuses_compaction_blocks_as_the_api_does(server, messages, error):
    """The test server is honest: the raw requests the API refuses, it refuses."""
    block = compaction_block("Earlier: Oslo.")
    server.reply_json(anthropic_message(content=[block, {"type": "text", "text": "Clear."}]))
    client = anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)
    with client:
        client.messages.create(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "Oslo?"}]
        )
        server.reply_json(anthropic_message("ok"))
        with pytest.raises(anthropic.BadRequestError, match=error):
            client.messages.create(model="claude-test", max_tokens=64, messages=messages(block))
        first = [{"role": "assistant", "content": [block]}, {"role": "user", "content": "More?"}]
        client.messages.create(model="claude-test", max_tokens=64, messages=first)  # 200


# -- a block of a kind newer than turnlog --------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["send", "stream"])
def test_an_unknown_block_is_stored_as_a_provider_part_and_the_turn_goes_on(
    tmp_path, server, kind, mode
):
    h = Harness(kind, tmp_path)
    adapter = AnthropicChatModel if kind == "sync" else AsyncAnthropicChatModel
    model = adapter("claude-test", base_url=server.url, api_key="k", max_retries=0)
    future = {"type": "hologram_2031", "frames": [1, 2], "label": "Oslo"}
    call = tool_use_block("toolu_1", "get_weather", {"city": "Oslo"})
    if mode == "send":
        server.reply_json(anthropic_message(content=[future, call]))
        server.reply_json(anthropic_message("Oslo: 18C, clear."))
    else:
        server.reply_sse(anthropic_events([], content=[future, call]))
        server.reply_sse(anthropic_events(["Oslo: 18C, ", "clear."]))
    try:
        chat = h.make(model, tools=[get_weather])
        if mode == "send":
            assert chat.send("s", "Weather?").text == "Oslo: 18C, clear."
        else:
            list(chat.stream("s", "Weather?"))
        stored = [e.message for e in h.service.events("s")]
        assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[1].parts == (ProviderPart("anthropic", "hologram_2031", future),)
        assert stored[1].tool_calls == (ToolCall("toolu_1", "get_weather", '{"city":"Oslo"}'),)
        assert stored[2].tool_results[0] == ToolResult("toolu_1", "get_weather", "Oslo: 18C, clear")
        assert stored[3].text == "Oslo: 18C, clear."
        # and it went back as it came, before its call
        assert server.requests[1].body["messages"][1]["content"] == [future, call]
    finally:
        if kind == "sync":
            model.close()
        else:
            h.loop.run(model.close())
        h.close()


def test_reasoning_of_the_reply_is_left_alone_by_compaction_blocks():
    """A compaction block leads a reply; the thinking after it is still the reply's."""
    from turnlog.models.anthropic_format import response_from_anthropic

    block = compaction_block("Earlier: Oslo.")
    thought = thinking_block("Now Bergen.", "sig-t")
    call = tool_use_block("toolu_2", "get_weather", {"city": "Bergen"})
    message = response_from_anthropic(anthropic_message(content=[block, thought, call])).message
    assert message.parts == (
        ProviderPart("anthropic", "compaction", block),
        ReasoningPart("anthropic", text="Now Bergen.", signature="sig-t"),
    )


# -- the examples of docs/models.md ------------------------------------------------------------


def doc_block(text):
    import re
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "models.md").read_text("utf-8")
    [found] = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if text in b]
    return found


def test_the_docs_interleaved_thinking_example_sends_its_beta(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    namespace = {"AnthropicChatModel": AnthropicChatModel}
    exec(doc_block(INTERLEAVED), namespace)
    server.reply_json(anthropic_message("Hi.", thinking=[thinking_block("Hm.", "sig-d")]))
    with namespace["interleaved"] as model:
        model.respond([Message.user("hi")])
    request = server.requests[-1]
    assert request.headers["anthropic-beta"] == INTERLEAVED
    assert request.body["thinking"] == {"type": "enabled", "budget_tokens": 24_000}


def test_the_docs_context_management_examples_pass_the_servers_checks(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    namespace = {}
    exec(doc_block("clear_tool_uses_20250919"), namespace)
    for name in ("edited", "compacted"):
        server.reply_json(anthropic_message("ok"))
        with namespace[name] as model:
            assert model.respond([Message.user("hi")]).message.text == "ok"  # 200
    edited, compacted = (r.body for r in server.requests)
    assert edited["context_management"]["edits"][0]["type"] == "clear_tool_uses_20250919"
    assert compacted["context_management"] == {"edits": [{"type": "compact_20260112"}]}


@pytest.mark.parametrize("kind", KINDS)
def test_a_compaction_inside_a_thinking_tool_loop_passes_both_rules(tmp_path, server, kind):
    """The API compacts mid-loop: the reply that calls the tool leads with the compaction
    block, then its thinking; the next request starts at that block and the thinking rule
    holds (the final assistant message's thinking comes right after the compaction)."""
    h = Harness(kind, tmp_path)
    adapter = AnthropicChatModel if kind == "sync" else AsyncAnthropicChatModel
    model = adapter(
        "claude-test",
        base_url=server.url,
        api_key="k",
        max_retries=0,
        max_tokens=16_000,
        options={
            "thinking": {"type": "enabled", "budget_tokens": 8_000},
            "context_management": {"edits": [COMPACT]},
        },
        betas=[INTERLEAVED, COMPACTING],
    )
    block = compaction_block("The user wants Oslo's weather.", "sig-loop")
    thought = thinking_block("Call the tool.", "sig-th-1")
    call = tool_use_block("toolu_1", "get_weather", {"city": "Oslo"})
    server.reply_json(anthropic_message(content=[block, thought, call]))
    done = thinking_block("Answer.", "sig-th-2")
    server.reply_json(anthropic_message(content=[done, {"type": "text", "text": "18C, clear."}]))
    try:
        chat = h.make(model, tools=[get_weather])
        assert chat.send("s", "Weather in Oslo?").text == "18C, clear."
        second = server.requests[1].body["messages"]
        assert second[0] == {"role": "assistant", "content": [block, thought, call]}
        assert [b["type"] for b in second[1]["content"]] == ["tool_result"]
        assert len(server.requests) == 2  # both answered 200
    finally:
        if kind == "sync":
            model.close()
        else:
            h.loop.run(model.close())
        h.close()
