"""The reasoning policy of the view: `turnlog.reasoning.strip_reasoning` and the runners'
`reasoning=` ("current_turn" by default, "all", "none"). The log keeps every reasoning part."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_harness import KINDS, Harness
from turnlog import MemoryStore, Message, SessionService, ToolCall, ToolResult
from turnlog.errors import InvalidInput
from turnlog.parts import ProviderPart, ReasoningPart, TextPart
from turnlog.reasoning import SentReasoning, strip_foreign_reasoning, strip_reasoning
from turnlog.rules import check_messages, repair_messages

POLICIES = ["all", "current_turn", "none"]


# -- the pure function, against an oracle over roles -------------------------------------------


def reasoning_of(message):
    return [p for p in message.parts if isinstance(p, ReasoningPart)]


def others_of(message):
    return [p for p in message.parts if not isinstance(p, (ReasoningPart, TextPart))]


def oracle(messages, policy):
    """The reasoning each message should keep: written from the rule, by turns over roles."""
    turn_of = []
    turn = 0
    for m in messages:
        if m.role == "user":
            turn += 1
        turn_of.append(turn)
    last = turn_of[-1] if turn_of else 0
    expected = []
    for m, t in zip(messages, turn_of, strict=True):
        keep = policy == "all" or (policy == "current_turn" and t == last)
        visible = (m.text or "").strip() or m.tool_calls or others_of(m)
        if not visible:  # nothing but reasoning: the message stays as it is
            keep = True
        expected.append(reasoning_of(m) if keep else [])
    return expected


reasoning_parts = st.builds(
    ReasoningPart,
    provider=st.sampled_from(["anthropic", "openai"]),
    text=st.one_of(st.none(), st.text(min_size=1, max_size=8)),
    signature=st.one_of(st.none(), st.just("sig")),
    redacted=st.booleans(),
)
visible_parts = st.one_of(
    st.builds(TextPart, st.sampled_from(["ok", " ", "the answer", "x"])),
    st.just(ProviderPart("anthropic", "citation", {"n": 1})),
)


@st.composite
def assistant(draw, call_ids):
    parts = draw(st.lists(st.one_of(reasoning_parts, visible_parts), max_size=4))
    calls = [ToolCall(i, "f") for i in call_ids]
    if not parts and not calls:
        parts = ["done"]
    return Message.assistant(None, calls, parts=parts) if parts else Message.assistant(None, calls)


@st.composite
def conversations(draw):
    """Turns of a user message, tool rounds (assistant calls with reasoning, tool results) and a
    reply; the last turn may stop mid-loop; sometimes a system prompt first, or an assistant
    message of nothing but reasoning (stored with the rules off)."""
    messages = []
    if draw(st.booleans()):
        messages.append(Message.system("Be brief."))
    counter = 0
    for n in range(draw(st.integers(0, 4))):
        messages.append(Message.user(f"question {n}"))
        for _ in range(draw(st.integers(0, 2))):
            ids = [f"c{counter + k}" for k in range(draw(st.integers(1, 2)))]
            counter += len(ids)
            messages.append(draw(assistant(ids)))
            messages.append(Message.tool([ToolResult(i, "f", "result") for i in ids]))
        if draw(st.integers(0, 9)) == 0:
            messages.append(Message.assistant(parts=[draw(reasoning_parts)]))
        if draw(st.booleans()) or n < 3:
            messages.append(draw(assistant([])))
    return messages


@settings(max_examples=300, deadline=None)
@given(conversations(), st.sampled_from(POLICIES))
def test_strip_reasoning_keeps_what_the_oracle_keeps_and_everything_else(messages, policy):
    before = list(messages)
    out = strip_reasoning(messages, policy)
    assert messages == before  # the input is not changed
    assert len(out) == len(messages)
    for got, m, want in zip(out, messages, oracle(messages, policy), strict=True):
        assert reasoning_of(got) == want
        assert (got.role, got.text, got.tool_calls, got.tool_results, got.metadata) == (
            m.role,
            m.text,
            m.tool_calls,
            m.tool_results,
            m.metadata,
        )
        assert others_of(got) == others_of(m)
        assert [p for p in got.parts if not isinstance(p, ReasoningPart)] in (
            [],
            [p for p in m.parts if not isinstance(p, ReasoningPart)],
        )
        if not reasoning_of(m):
            assert got is m
    try:
        check_messages(messages)
    except InvalidInput:
        pass
    else:
        check_messages(out)  # a valid view stays valid
        assert repair_messages(out) == out


def test_a_reply_of_reasoning_and_text_is_rebuilt_with_its_text_and_metadata():
    reply = Message(
        "assistant",
        metadata={"k": 1},
        parts=(ReasoningPart("anthropic", "hmm", "sig"), TextPart("It is "), TextPart("3 C.")),
    )
    messages = [Message.user("weather?"), reply, Message.user("thanks")]
    got = strip_reasoning(messages, "current_turn")[1]
    assert got == Message("assistant", "It is 3 C.", metadata={"k": 1})
    assert got.parts == ()
    assert strip_reasoning(messages, "all")[1] is reply


@pytest.mark.parametrize("policy", ["", "current", "ALL", None, 1, "none "])
def test_an_unknown_policy_is_invalid_input(policy):
    with pytest.raises(InvalidInput, match="current_turn"):
        strip_reasoning([Message.user("hi")], policy)


@settings(max_examples=300, deadline=None)
@given(conversations(), st.sampled_from(["anthropic", "openai", "gemini"]))
def test_strip_foreign_reasoning_keeps_only_the_providers_own(messages, provider):
    out, others = strip_foreign_reasoning(messages, provider)
    assert len(out) == len(messages)
    expected_others = set()
    for got, m in zip(out, messages, strict=True):
        foreign = [p for p in reasoning_of(m) if p.provider != provider]
        expected_others |= {p.provider for p in foreign}
        visible = (m.text or "").strip() or m.tool_calls or others_of(m)
        if not foreign or (
            m.role == "assistant"
            and not visible
            and not [p for p in reasoning_of(m) if p.provider == provider]
        ):
            # untouched: nothing foreign, or nothing but reasoning (left to repair_messages)
            assert got.parts == m.parts
        else:
            assert reasoning_of(got) == [p for p in reasoning_of(m) if p.provider == provider]
        assert (got.role, got.tool_calls, got.tool_results, got.metadata) == (
            m.role,
            m.tool_calls,
            m.tool_results,
            m.metadata,
        )
        assert others_of(got) == others_of(m)
    assert others == expected_others


def stored(session_id, messages):
    service = SessionService(MemoryStore())
    service.create(session_id)
    for m in messages:
        service.append_message(session_id, m, check_rules=False)
    return service.events(session_id)


@settings(max_examples=100, deadline=None)
@given(conversations(), st.sampled_from(POLICIES))
def test_sent_reasoning_strips_as_strip_reasoning_does_and_reuses_what_it_rebuilt(messages, policy):
    events = stored("s", messages)
    sent = SentReasoning(policy)
    first = sent.strip(events, [e.message for e in events])
    assert first == strip_reasoning(messages, policy)
    again = sent.strip(events, [e.message for e in events])
    assert again == first
    for a, b, m in zip(first, again, messages, strict=True):
        if a != m:  # rebuilt: the second call takes the kept message back
            assert b is a
    other = stored("t", messages)  # another session's events are not taken for these
    assert sent.strip(other, [e.message for e in other]) == first


def test_sent_reasoning_keeps_at_most_maxsize_messages():
    messages = [Message.user("q")]
    for n in range(10):
        messages += [Message.assistant(parts=[thinking(n), f"a{n}"]), Message.user(f"q{n}")]
    events = stored("s", messages)
    sent = SentReasoning("current_turn", maxsize=4)
    assert sent.strip(events, [e.message for e in events]) == strip_reasoning(
        messages, "current_turn"
    )
    assert len(sent._cache) == 4


# -- the runners: what the model was sent --------------------------------------------------------


@pytest.fixture(params=KINDS)
def harness(request, tmp_path):
    h = Harness(request.param, tmp_path)
    yield h
    h.close()


def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"21 C in {city}"


def thinking(label):
    return ReasoningPart("anthropic", f"thinking {label}", signature=f"sig {label}")


def calling(label, call_id):
    call = ToolCall(call_id, "weather", json.dumps({"city": "Oslo"}))
    return Message.assistant(None, [call], parts=[thinking(label)])


def answering(label):
    return Message.assistant(parts=[thinking(label), f"answer {label}"])


SCRIPT = [calling("1a", "c1"), answering("1b"), calling("2a", "c2"), answering("2b")]


def sent_thinking(messages):
    return [p.text for m in messages for p in reasoning_of(m)]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            "current_turn",
            [[], ["thinking 1a"], [], ["thinking 2a"]],
        ),
        (
            "all",
            [
                [],
                ["thinking 1a"],
                ["thinking 1a", "thinking 1b"],
                ["thinking 1a", "thinking 1b", "thinking 2a"],
            ],
        ),
        ("none", [[], [], [], []]),
    ],
)
def test_the_runner_sends_the_reasoning_its_policy_keeps_and_the_log_keeps_all(
    harness, policy, expected
):
    model = harness.model(SCRIPT, provider="anthropic")
    settings = {} if policy == "current_turn" else {"reasoning": policy}
    chat = harness.make(model, tools=[weather], **settings)
    first = chat.send("s1", "weather in Oslo?")
    second = chat.send("s1", "and tomorrow?")
    assert (first.text, second.text) == ("answer 1b", "answer 2b")
    assert [sent_thinking(c) for c in model.calls] == expected
    for c in model.calls:  # the text and the calls are sent whatever the policy
        assert check_messages(c) is None
    texts = [m.text for m in model.calls[3] if m.role == "assistant"]
    assert texts == [None, "answer 1b", None]
    stored = [e.message for e in harness.service.events("s1") if e.message is not None]
    assert sent_thinking(stored) == [f"thinking {n}" for n in ("1a", "1b", "2a", "2b")]
    assert [p.signature for m in stored for p in reasoning_of(m)] == [
        f"sig {n}" for n in ("1a", "1b", "2a", "2b")
    ]


@pytest.mark.parametrize("policy", ["current", "", None, "All"])
def test_the_runner_refuses_an_unknown_policy(harness, policy):
    with pytest.raises(InvalidInput, match="reasoning must be one of"):
        harness.make(harness.model(["hi"]), reasoning=policy)


def test_a_session_that_changes_provider_sends_none_of_the_old_ones_reasoning_and_says_so_once(
    harness, caplog
):
    first = harness.model(SCRIPT[:2], provider="anthropic")
    chat = harness.make(first, tools=[weather], reasoning="all")
    chat.send("s1", "weather in Oslo?")
    second = harness.model(["fine", "still fine"], provider="openai")
    chat = harness.make(second, tools=[weather], reasoning="all")
    with caplog.at_level("WARNING", logger="turnlog.chat"):
        chat.send("s1", "and tomorrow?")
        chat.send("s1", "and the day after?")
    assert [sent_thinking(c) for c in second.calls] == [[], []]  # "all", yet none of anthropic's
    assert [m.role for m in second.calls[0]] == ["user", "assistant", "tool", "assistant", "user"]
    for c in second.calls:
        assert check_messages(c) is None
    warned = [r for r in caplog.records if "holds reasoning from anthropic" in r.getMessage()]
    assert len(warned) == 1 and "'s1'" in warned[0].getMessage()
    stored = [e.message for e in harness.service.events("s1") if e.message is not None]
    assert sent_thinking(stored) == ["thinking 1a", "thinking 1b"]  # the log keeps them
    back = harness.model(["again"], provider="anthropic")
    harness.make(back, tools=[weather], reasoning="all").send("s1", "one more?")
    assert sent_thinking(back.calls[0]) == ["thinking 1a", "thinking 1b"]  # its own, sent again
