"""Prompt caching in the Anthropic adapter: the `cache_control` breakpoints a real local server
receives (tests/model_servers.py, through the official client), and the cache counts read
back from its usage."""

import json
import random

import pytest

from model_servers import ScriptedServer, Twin, anthropic_events, anthropic_message
from turnlog import InvalidInput, MemoryStore, Message, ToolCall, ToolResult
from turnlog.models import (
    CACHE_BREAKPOINT_KEY,
    AnthropicChatModel,
    AsyncAnthropicChatModel,
    Usage,
    with_cache_breakpoint,
)
from turnlog.models.anthropic_format import to_anthropic_cached, to_anthropic_messages
from turnlog.toolsearch import ToolReference

EPHEMERAL = {"type": "ephemeral"}
WEATHER_TOOL = ToolReference(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CALL = ToolCall("toolu_1", "get_weather", '{"city":"Oslo"}')

# a view as the turn runner sends it: the system prompt, the summary turn (its assistant message
# marked as the end of the stable prefix), then the recent turns, one with a tool call
CONVERSATION = [
    Message.system("You are a support agent."),
    Message.user("Summarize the conversation so far."),
    with_cache_breakpoint(Message.assistant("Earlier: the user asked about Oslo.")),
    Message.user("weather?"),
    Message.assistant("Looking.", [CALL]),
    Message.tool(ToolResult("toolu_1", "get_weather", "3°C")),
    Message.assistant("3°C in Oslo."),
    Message.user("and tomorrow?"),
]


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
        timeout=2.0,
        max_tokens=512,
        **settings,
    )


@pytest.fixture(params=["sync", "async"])
def cached(request, server):
    return twin(request.param, server, cache_prompt=True)


@pytest.fixture(params=["sync", "async"])
def plain(request, server):
    return twin(request.param, server)


def markers(value):
    """Every `cache_control` value anywhere in a JSON body, in document order."""
    if isinstance(value, dict):
        found = [value["cache_control"]] if "cache_control" in value else []
        return found + [m for v in value.values() for m in markers(v)]
    if isinstance(value, list):
        return [m for v in value for m in markers(v)]
    return []


def test_breakpoints_on_the_system_prompt_the_marked_summary_and_the_last_block(server, cached):
    server.reply_json(anthropic_message("Rain."))

    cached.respond(CONVERSATION, [WEATHER_TOOL])

    body = server.last_body()
    assert body["system"] == [
        {"type": "text", "text": "You are a support agent.", "cache_control": EPHEMERAL}
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Summarize the conversation so far."}],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "text",
                    "text": "Earlier: the user asked about Oslo.",
                    "cache_control": EPHEMERAL,
                }
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "3°C"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "3°C in Oslo."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "and tomorrow?", "cache_control": EPHEMERAL}],
        },
    ]
    # the tools are cached by the system prompt's breakpoint, which comes after them
    assert markers(body["tools"]) == []
    assert len(markers(body)) == 3


def test_streaming_sends_the_same_breakpoints(server, cached):
    server.reply_sse(anthropic_events(["Rain."]))
    server.reply_json(anthropic_message("Rain."))

    cached.stream(CONVERSATION)
    cached.respond(CONVERSATION)

    streamed, responded = (r.body for r in server.requests)
    assert streamed.pop("stream") is True
    assert streamed == responded
    assert len(markers(streamed)) == 3


def test_without_the_option_no_marker_and_the_system_prompt_stays_a_string(server, plain):
    server.reply_json(anthropic_message("Rain."))
    server.reply_sse(anthropic_events(["Rain."]))

    plain.respond(CONVERSATION, [WEATHER_TOOL])
    plain.stream(CONVERSATION)

    for request in server.requests:
        assert markers(request.body) == []
        assert request.body["system"] == "You are a support agent."
    assert server.requests[0].body["messages"] == to_anthropic_messages(CONVERSATION)[1]


def test_the_metadata_key_never_reaches_the_wire(server, cached, plain):
    server.reply_json(anthropic_message("Rain."))
    server.reply_json(anthropic_message("Rain."))

    cached.respond(CONVERSATION)
    plain.respond(CONVERSATION)

    for request in server.requests:
        raw = json.dumps(request.body)
        assert CACHE_BREAKPOINT_KEY not in raw
        assert "metadata" not in raw


def test_without_a_marked_message_only_the_system_prompt_and_the_last_block(server, cached):
    server.reply_json(anthropic_message("Rain."))
    unmarked = [Message(m.role, m.text, m.tool_calls, m.tool_results) for m in CONVERSATION]

    cached.respond(unmarked)

    body = server.last_body()
    assert body["system"][0]["cache_control"] == EPHEMERAL
    assert body["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert len(markers(body)) == 2


def test_a_marked_last_message_carries_one_marker_and_no_system_means_none_there(server, cached):
    server.reply_json(anthropic_message("Rain."))

    cached.respond([Message.user("hello"), with_cache_breakpoint(Message.user("again"))])

    body = server.last_body()
    assert "system" not in body
    # the two user messages merge into one turn; the marker sits on its last block only
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "text", "text": "again", "cache_control": EPHEMERAL},
            ],
        }
    ]


def test_the_marker_lands_where_a_merged_turn_ends_at_the_marked_message():
    # the marked tool message and the user message after it share one wire turn: the marker
    # goes on the tool_result block, not on the end of the turn
    messages = [
        Message.user("weather?"),
        Message.assistant(None, [CALL]),
        with_cache_breakpoint(Message.tool(ToolResult("toolu_1", "get_weather", "3°C"))),
        Message.user("thanks"),
        Message.assistant("You're welcome."),
    ]
    system, turns = to_anthropic_cached(messages)
    assert system is None
    assert turns[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": "3°C",
            "cache_control": EPHEMERAL,
        },
        {"type": "text", "text": "thanks"},
    ]
    assert turns[3]["content"] == [
        {"type": "text", "text": "You're welcome.", "cache_control": EPHEMERAL}
    ]


def test_only_the_last_marked_message_counts_and_a_marked_empty_message_ends_before_it():
    messages = [
        Message.system("s"),
        with_cache_breakpoint(Message.user("first mark")),
        Message.assistant("a"),
        Message.user("b"),
        with_cache_breakpoint(Message.assistant(None)),  # sends nothing: the prefix ends at "b"
        Message.user("c"),
    ]
    system, turns = to_anthropic_cached(messages)
    assert system == [{"type": "text", "text": "s", "cache_control": EPHEMERAL}]
    assert markers(turns) == [EPHEMERAL, EPHEMERAL]
    assert turns[2]["content"] == [
        {"type": "text", "text": "b", "cache_control": EPHEMERAL},
        {"type": "text", "text": "c", "cache_control": EPHEMERAL},
    ]
    assert "cache_control" not in turns[0]["content"][0]


def test_never_more_than_four_markers_whatever_is_marked():
    rng = random.Random(7)
    for _ in range(300):
        messages = [Message.system("s")] if rng.random() < 0.7 else []
        for i in range(rng.randint(0, 12)):
            kind = rng.choice(["user", "assistant", "call"])
            if kind == "call":
                call = ToolCall(f"c{i}", "f", "{}")
                pair = [
                    Message.assistant(None, [call]),
                    Message.tool(ToolResult(call.id, "f", "r")),
                ]
            else:
                pair = [Message(kind, f"text {i}")]
            messages += [with_cache_breakpoint(m) if rng.random() < 0.3 else m for m in pair]
        system, turns = to_anthropic_cached(messages)
        found = markers(system) + markers(turns)
        assert len(found) <= 3 < 4
        assert len(found) == (system is not None) + (1 if turns else 0) + (
            1 if _marked_elsewhere(messages, turns) else 0
        )
        # only markers were added: without them the request is the plain one
        assert _strip(turns) == to_anthropic_messages(messages)[1]


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _marked_elsewhere(messages, turns):
    """Whether the last marked non-system message ends on a block before the last one."""
    sent = [m for m in messages if m.role != "system"]
    marked = [i for i, m in enumerate(sent) if m.metadata.get(CACHE_BREAKPOINT_KEY)]
    if not marked:
        return False
    up_to = to_anthropic_messages(sent[: marked[-1] + 1])[1]
    position = sum(len(t["content"]) for t in up_to)
    return 0 < position < sum(len(t["content"]) for t in turns)


def test_with_cache_breakpoint_copies_and_the_option_is_checked():
    message = Message.user("hi")
    marked = with_cache_breakpoint(message)
    assert marked.metadata == {CACHE_BREAKPOINT_KEY: True}
    assert message.metadata == {}
    assert CACHE_BREAKPOINT_KEY == "turnlog.cache_breakpoint"
    with pytest.raises(InvalidInput, match="cache_prompt"):
        AnthropicChatModel("claude-test", api_key="k", cache_prompt="yes")
    with pytest.raises(InvalidInput, match="cache_prompt"):
        AsyncAnthropicChatModel("claude-test", api_key="k", cache_prompt=1)


CACHE_USAGE = {
    "input_tokens": 5,
    "cache_creation_input_tokens": 120,
    "cache_read_input_tokens": 900,
    "output_tokens": 3,
}


def test_usage_counts_cache_reads_and_writes_in_the_input(server, cached):
    server.reply_json(anthropic_message("Rain.", usage=CACHE_USAGE))
    usage = dict(CACHE_USAGE, output_tokens=1)
    server.reply_sse(anthropic_events(["Rain."], usage=usage))

    responded = cached.respond(CONVERSATION)
    streamed = cached.stream(CONVERSATION)[-1]

    # 5 uncached + 900 read from the cache + 120 written to it; 900 of them were cache reads
    assert responded.usage == Usage(input_tokens=1025, output_tokens=3, cached_input_tokens=900)
    # message_delta's output count (7) replaces message_start's
    assert streamed.usage == Usage(input_tokens=1025, output_tokens=7, cached_input_tokens=900)


def test_the_turn_runner_marks_the_summary_and_the_adapter_puts_the_breakpoint_there(server):
    from turnlog import (
        CompactionWindow,
        ExtractiveSummarizer,
        SessionService,
        TurnCountTrigger,
        WindowCompactionStrategy,
    )
    from turnlog.chat import SessionChat

    long = ": " + "it will rain all day. " * 20  # answers longer than their summary
    for text in ("one", "two", "three"):
        server.reply_json(anthropic_message(f"answer {text}{long}", usage=CACHE_USAGE))
    strategy = WindowCompactionStrategy(
        CompactionWindow.last_turns(1), summarizer=ExtractiveSummarizer()
    )
    with (
        SessionService(MemoryStore()) as service,
        AnthropicChatModel(
            "claude-test", base_url=server.url, api_key="k", max_retries=0, cache_prompt=True
        ) as model,
    ):
        chat = SessionChat(
            service,
            model,
            system="Be brief.",
            trigger=TurnCountTrigger(1),
            strategy=strategy,
        )
        turns = [chat.send("s1", text) for text in ("one", "two", "three")]

    assert turns[-1].responses[-1].usage.cached_input_tokens == 900
    # the first request: the system prompt and the last block only (no summary yet)
    assert len(markers(server.requests[0].body)) == 2
    # the third comes after a pass: system, the summary turn, turn two, then "three"
    body = server.requests[2].body
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    shadow, summary, *rest = body["messages"]
    assert markers(shadow) == []
    assert summary["role"] == "assistant"
    assert summary["content"][-1]["cache_control"] == EPHEMERAL
    assert [b["text"] for t in rest for b in t["content"]] == ["two", f"answer two{long}", "three"]
    assert markers(rest) == [EPHEMERAL]
    assert rest[-1]["content"][-1]["cache_control"] == EPHEMERAL


def test_the_docs_examples_mark_the_summary_by_hand(server, capsys, monkeypatch):
    import re
    from pathlib import Path

    from turnlog import (
        CompactionWindow,
        ExtractiveSummarizer,
        SessionService,
        TurnCountTrigger,
        WindowCompactionStrategy,
    )

    doc = (Path(__file__).parent.parent / "docs" / "models.md").read_text("utf-8")
    section = doc.split("## Prompt caching (Anthropic)")[1].split("\n## ")[0]
    option, by_hand = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    namespace = {}
    exec(option, namespace, namespace)  # builds a model: no I/O, the key from the environment
    assert namespace["model"].cache_prompt is True
    namespace["model"].close()

    server.reply_json(anthropic_message("ok", usage=CACHE_USAGE))
    strategy = WindowCompactionStrategy(
        CompactionWindow.last_turns(1), summarizer=ExtractiveSummarizer()
    )
    with (
        SessionService(MemoryStore()) as service,
        AnthropicChatModel(
            "claude-test", base_url=server.url, api_key="k", max_retries=0, cache_prompt=True
        ) as model,
    ):
        session_id = service.create().id
        service.append_message(session_id, Message.system("Be brief."))
        for text in ("one", "two"):
            service.append_message(session_id, Message.user(text))
            answer = f"answer {text}: " + "it will rain all day. " * 20  # longer than a summary
            service.append_message(session_id, Message.assistant(answer))
        service.append_message(session_id, Message.user("three"))
        assert not service.compact(session_id, TurnCountTrigger(1), strategy).unchanged
        namespace = {"service": service, "session_id": session_id, "model": model}
        exec(by_hand, namespace, namespace)

    assert capsys.readouterr().out == "1025 900\n"
    body = server.last_body()
    assert body["system"][0]["cache_control"] == EPHEMERAL
    summary = body["messages"][1]
    assert summary["role"] == "assistant"
    assert summary["content"][-1]["cache_control"] == EPHEMERAL
    assert len(markers(body)) == 3
