"""Compaction with content parts (issue 25 item 4): counts of what is sent under the reasoning
policy, attachments named by both summarizers and by tool-output clearing, and reasoning kept
out of summarizer prompts."""

import base64
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_reasoning_policy import conversations
from turnlog import (
    AudioPart,
    CharCounter,
    ChatModelSummarizer,
    CompactionWindow,
    CompositeCompactionTrigger,
    ExtractiveSummarizer,
    FilePart,
    ImagePart,
    InvalidInput,
    Message,
    ProviderPart,
    ReasoningPart,
    SessionService,
    SqliteStore,
    TextPart,
    TokenCountTrigger,
    ToolCall,
    ToolOutputCompactionStrategy,
    ToolResult,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.codec import encode_body
from turnlog.compaction import CompactionRequest, SummaryRequest
from turnlog.compaction._attachments import attachment_note
from turnlog.compaction._sent import SentTokens
from turnlog.compaction.clearing import ATTACHMENTS_NOTE, STAND_IN_KEY
from turnlog.events import Session, SessionEvent
from turnlog.lazy import LazyEvents
from turnlog.reasoning import check_counted_reasoning, without_reasoning
from turnlog.testing import ScriptedChatModel
from turnlog.tokens import EventTokens

THOUGHT = "weighing the options carefully " * 20  # 620 characters of reasoning
SESSION = Session(id="s-h2", created_at=datetime(2025, 1, 1, tzinfo=UTC))


def question(n):
    return f"question {n}: which of the two plans costs less over a year?"


def answer(n):
    return f"answer {n}: the second plan, by about a tenth."


def thinking_turn(n, *, reasoning=True):
    """A turn whose reply carries reasoning (or the same turn without it)."""
    reply = (
        Message.assistant(
            parts=[ReasoningPart("anthropic", THOUGHT + str(n), signature=f"sig-{n}"), answer(n)]
        )
        if reasoning
        else Message.assistant(answer(n))
    )
    return [Message.user(question(n)), reply]


def events_of(messages):
    return tuple(SessionEvent.for_message(SESSION.id, m) for m in messages)


def count(messages):
    """The oracle's count: the messages as given, by a counter of its own (no cache shared)."""
    return EventTokens(CharCounter()).total(events_of(messages))


def oracle_turn_sizes(n_turns, policy):
    """Each turn's tokens as the runner sends it: built without the reasoning that `policy`
    leaves out, rather than stripped."""
    sizes = []
    for n in range(1, n_turns + 1):
        last = n == n_turns
        sent = policy == "all" or (policy == "current_turn" and last)
        sizes.append(count(thinking_turn(n, reasoning=sent)))
    return sizes


def oracle_kept(sizes, budget):
    """The most newest whole turns whose tokens fit `budget`; the newest one always."""
    kept, used = 0, 0
    for size in reversed(sizes):
        if used + size > budget:
            break
        kept, used = kept + 1, used + size
    return max(kept, 1)


def conversation(n_turns):
    out = []
    for n in range(1, n_turns + 1):
        out += thinking_turn(n)
    return out


def request_of(messages):
    return CompactionRequest.of(SESSION, events_of(messages))


# -- the counts of what is sent --------------------------------------------------------------


@pytest.mark.parametrize("policy", ["current_turn", "all", "none"])
def test_a_token_budget_counts_the_reasoning_that_is_sent(policy):
    turns, budget = 16, 1_400
    sizes = oracle_turn_sizes(turns, policy)
    expected = oracle_kept(sizes, budget)
    strategy = WindowCompactionStrategy(
        CompactionWindow.token_budget(budget), token_counter=CharCounter(), reasoning=policy
    )
    result = strategy.compact(request_of(conversation(turns)))
    assert not result.unchanged
    assert len(result.preserved_events) == 2 * expected
    # the view keeps every part: only the counts changed
    kept = [e.message for e in result.preserved_events]
    assert kept == conversation(turns)[-2 * expected :]
    assert result.tokens_estimated_saved == sum(sizes[: turns - expected])


def test_the_default_keeps_more_turns_than_counting_every_reasoning_part():
    turns, budget = 16, 1_400
    by_policy = {}
    for policy in ("all", "current_turn", "none"):
        kw = {} if policy == "current_turn" else {"reasoning": policy}
        strategy = WindowCompactionStrategy(
            CompactionWindow.token_budget(budget), token_counter=CharCounter(), **kw
        )
        result = strategy.compact(request_of(conversation(turns)))
        by_policy[policy] = len(result.preserved_events) // 2
    assert by_policy["all"] < by_policy["current_turn"] < by_policy["none"]


def test_a_stored_lazy_view_counts_what_is_sent_and_the_log_keeps_the_reasoning(tmp_path):
    turns, budget = 16, 1_400
    counter = CharCounter()
    with SessionService(SqliteStore(tmp_path / "h2.db"), token_counter=counter) as service:
        sid = service.create().id
        for m in conversation(turns):
            service.append_message(sid, m)
        strategy = WindowCompactionStrategy(
            CompactionWindow.token_budget(budget), token_counter=counter
        )
        result = service.compact(sid, lambda request: True, strategy)
        expected = oracle_kept(oracle_turn_sizes(turns, "current_turn"), budget)
        assert len(result.preserved_events) == 2 * expected
        assert result.tokens_estimated_saved == sum(
            oracle_turn_sizes(turns, "current_turn")[: turns - expected]
        )
        log = [e.message for e in service.events(sid) if e.message is not None]
        assert log == conversation(turns)  # every reasoning part stays in the log
        view = [e.message for e in service.view(sid)]
        assert view == conversation(turns)[-2 * expected :]  # and in the view


def test_a_message_of_nothing_but_reasoning_counts_as_it_is_sent():
    # strip_reasoning sends such a message as it is (the repair then leaves it out): counted whole
    alone = Message("assistant", parts=(ReasoningPart("anthropic", THOUGHT),))
    messages = [Message.user("q"), alone, Message.assistant("a"), *thinking_turn(2)]
    events = events_of(messages)
    strategy = WindowCompactionStrategy(
        CompactionWindow.token_budget(10_000), token_counter=CharCounter()
    )
    whole = EventTokens(CharCounter()).of(events[1])
    assert strategy._sent.counts(events, [1]) == [whole]


@pytest.mark.parametrize("policy", ["current_turn", "all", "none"])
def test_the_token_trigger_counts_what_is_sent(policy):
    turns = 6
    total = sum(oracle_turn_sizes(turns, policy))
    trigger = TokenCountTrigger(total, CharCounter(), reported=False, reasoning=policy)
    request = request_of(conversation(turns))
    assert trigger.tokens(request) == total
    assert trigger(request)
    assert not TokenCountTrigger(total + 1, CharCounter(), reported=False, reasoning=policy)(
        request
    )


def test_clearing_measures_then_at_on_what_is_sent():
    turns = 6
    sent = sum(oracle_turn_sizes(turns, "current_turn"))
    window = WindowCompactionStrategy(CompactionWindow.last_turns(2), token_counter=CharCounter())
    cut = ToolOutputCompactionStrategy(then=window, then_at=sent, token_counter=CharCounter())
    wait = ToolOutputCompactionStrategy(then=window, then_at=sent + 1, token_counter=CharCounter())
    request = request_of(conversation(turns))
    assert not cut.compact(request).unchanged
    assert wait.compact(request).unchanged


@pytest.mark.parametrize("bad", ["", "ALL", None, 1])
def test_a_reasoning_policy_is_checked(bad):
    with pytest.raises(InvalidInput, match="current_turn"):
        WindowCompactionStrategy(reasoning=bad)
    with pytest.raises(InvalidInput, match="current_turn"):
        TokenCountTrigger(10, reasoning=bad)
    with pytest.raises(InvalidInput, match="current_turn"):
        ToolOutputCompactionStrategy(reasoning=bad)


def test_clearing_and_its_window_count_the_same_reasoning():
    with pytest.raises(InvalidInput, match="same reasoning"):
        ToolOutputCompactionStrategy(then=WindowCompactionStrategy(reasoning="all"))
    both = ToolOutputCompactionStrategy(
        then=WindowCompactionStrategy(reasoning="all"), reasoning="all"
    )
    assert both.reasoning == both.then.reasoning == "all"


def test_the_runner_and_the_built_in_measures_share_one_default(tmp_path):
    from turnlog.chat import SessionChat

    with SessionService(SqliteStore(tmp_path / "h2.db")) as service:
        chat = SessionChat(
            service,
            ScriptedChatModel(["ok"]),
            trigger=TokenCountTrigger(1000),
            strategy=WindowCompactionStrategy(),
        )
    assert chat.reasoning == "current_turn"
    assert WindowCompactionStrategy().reasoning == "current_turn"
    assert TokenCountTrigger(10).reasoning == "current_turn"
    assert ToolOutputCompactionStrategy().reasoning == "current_turn"


@pytest.mark.parametrize(
    ("sent", "counted", "refused"),
    [
        ("all", "current_turn", True),
        ("all", "none", True),
        ("current_turn", "none", True),
        ("all", "all", False),
        ("current_turn", "all", False),  # counting more only overestimates
        ("none", "current_turn", False),
        ("none", "none", False),
    ],
)
def test_the_runner_refuses_a_measure_that_counts_less_than_it_sends(
    tmp_path, sent, counted, refused
):
    from turnlog.chat import SessionChat

    window = WindowCompactionStrategy(CompactionWindow.last_turns(4), reasoning=counted)
    trigger = CompositeCompactionTrigger.any_of(
        TurnCountTrigger(8), TokenCountTrigger(9_000, reasoning=counted)
    )
    with SessionService(SqliteStore(tmp_path / "h2.db")) as service:
        for strategy, trig in [
            (window, TurnCountTrigger(8)),
            (WindowCompactionStrategy(reasoning=sent), trigger),  # inside a composite
        ]:
            settings = {"trigger": trig, "strategy": strategy, "reasoning": sent}
            if refused:
                with pytest.raises(InvalidInput, match=f"reasoning={sent!r} too"):
                    SessionChat(service, ScriptedChatModel(["ok"]), **settings)
            else:
                assert SessionChat(service, ScriptedChatModel(["ok"]), **settings).reasoning == sent


def test_a_measure_of_your_own_is_not_checked():
    class Mine:
        reasoning = "whatever"

    check_counted_reasoning("all", Mine(), lambda request: True, None)


# -- attachments: one note for both summarizers and for clearing -----------------------------

REF = "sha256:" + "ab" * 32
LONG_URL = "https://cdn.example.com/reports/" + "x" * 200 + ".pdf"


def test_an_attachment_note_names_the_part_and_never_its_bytes():
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 40
    cases = [
        (
            ImagePart("image/jpeg", ref=REF, size=48_213, filename="cat.jpg"),
            "[image: image/jpeg, cat.jpg, 48,213 bytes, sha256:abababababab]",
        ),
        (ImagePart("image/png", data=png), "[image: image/png, 48 bytes]"),
        (
            FilePart("application/pdf", url="https://example.com/r.pdf", name="r.pdf", pages=3),
            "[file: application/pdf, r.pdf, 3 pages, https://example.com/r.pdf]",
        ),
        (
            FilePart("application/pdf", url=LONG_URL),
            "[file: application/pdf, " + LONG_URL[:119] + "…]",
        ),
        (
            ImagePart("image/png", url="data:image/png;base64," + base64.b64encode(png).decode()),
            "[image: image/png, data: URL]",
        ),
        (
            AudioPart("audio/wav", ref=REF, size=64_000, seconds=2.0),
            "[audio: audio/wav, 2.0 s, 64,000 bytes, sha256:abababababab]",
        ),
        (
            ProviderPart("anthropic", "web_search_tool_result", {"n": 1}),
            "[provider: anthropic, web_search_tool_result]",
        ),
        (TextPart("hello"), None),
        (ReasoningPart("anthropic", "secret", signature="sig"), None),
    ]
    for part, expected in cases:
        assert attachment_note(part) == expected


def attached_turn():
    """A turn whose user message and tool result hold attachments, with reasoning between."""
    shot = ToolResult(
        "c1",
        "screenshot",
        "",
        parts=(TextPart("the page"), ImagePart("image/png", url="https://example.com/p.png")),
    )
    return [
        Message.user(
            "Compare the report with the photo.",
            FilePart("application/pdf", ref=REF, size=48_213, name="report.pdf", pages=12),
            ImagePart("image/jpeg", ref="sha256:" + "cd" * 32, size=9_000, filename="cat.jpg"),
        ),
        Message.assistant(
            parts=[ReasoningPart("anthropic", "SECRET-THOUGHT", signature="SIG-XYZ")],
            tool_calls=[ToolCall("c1", "screenshot", "{}")],
        ),
        Message.tool(shot),
        Message.assistant("The report matches the photo."),
    ]


NOTES = [
    "[file: application/pdf, report.pdf, 12 pages, 48,213 bytes, sha256:abababababab]",
    "[image: image/jpeg, cat.jpg, 9,000 bytes, sha256:cdcdcdcdcdcd]",
    "[image: image/png, https://example.com/p.png]",
]


def summary_request(covered, preserved=()):
    return SummaryRequest(
        session=SESSION,
        prior_summary=(),
        covered=events_of(covered),
        preserved=events_of(preserved),
        token_counter=CharCounter(),
    )


def prompt_text(messages):
    return "\n".join(m.text or "" for m in messages)


def test_the_chat_model_summarizer_names_the_attachments_the_extractive_one_lists():
    request = summary_request(attached_turn(), thinking_turn(2))
    prompt = prompt_text(ChatModelSummarizer(ScriptedChatModel(["s"])).prompt(request))
    section = prompt.split("<attachments>\n")[1].split("\n</attachments>")[0]
    assert section.split("\n") == [
        f"- {NOTES[0]} (from the user)",
        f"- {NOTES[1]} (from the user)",
        f"- {NOTES[2]} (returned by screenshot)",
    ]
    extractive = ExtractiveSummarizer()(request)[1].text
    listed = extractive.split("Attachments:\n")[1].split("\n")[:3]
    assert listed == [f"- T1: {n}" for n in NOTES]


def test_no_attachments_section_without_attachments():
    request = summary_request(thinking_turn(1, reasoning=False) + thinking_turn(2))
    prompt = prompt_text(ChatModelSummarizer(ScriptedChatModel(["s"])).prompt(request))
    assert "<attachments>" not in prompt


SECRETS = ("SECRET-THOUGHT", "SIG-XYZ", "ENC-123", "sig-1", "weighing the options")


def reasoning_heavy():
    only = Message("assistant", parts=(ReasoningPart("openai", encrypted="ENC-123"),))
    return [*attached_turn(), Message.user("and then?"), only, *thinking_turn(1)[1:]]


@pytest.mark.parametrize("formatter", ["default", "repr"])
def test_no_reasoning_reaches_a_summarizer_prompt(formatter):
    kw = {} if formatter == "default" else {"event_formatter": lambda e: repr(e.message)}
    summarizer = ChatModelSummarizer(ScriptedChatModel(["s"]), overlap_size=4, **kw)
    request = summary_request(reasoning_heavy(), thinking_turn(3))
    prompt = prompt_text(summarizer.prompt(request))
    for secret in SECRETS:
        assert secret not in prompt
    assert "ReasoningPart" not in prompt and "[reasoning" not in prompt
    assert "The report matches the photo." in prompt and "answer 1" in prompt  # the rest is there
    assert "answer 3" in prompt  # the continuation, without its reasoning


def test_no_reasoning_reaches_an_extractive_summary():
    summary = ExtractiveSummarizer()(summary_request(reasoning_heavy()))[1]
    for secret in SECRETS:
        assert secret not in summary.text
        assert secret not in str(summary.metadata)


# -- clearing a tool result that holds attachments ------------------------------------------


def big_gif(width=1024, height=1024):
    """A GIF whose header says `width` x `height` (enough for a count; it need not decode)."""
    return b"GIF89a" + width.to_bytes(2, "little") + height.to_bytes(2, "little") + b"\0" * 20


def attachment_loop(n):
    """Turns whose tool returns a screenshot and a CSV file."""
    out = []
    for i in range(n):
        result = ToolResult(
            f"c{i}",
            "capture",
            "",
            parts=(
                TextPart(f"capture {i}"),
                ImagePart("image/gif", data=big_gif(), filename=f"shot{i}.gif"),
                FilePart("text/csv", data=b"a,b\n" * 500, name=f"rows{i}.csv"),
            ),
        )
        out += [
            Message.user(f"capture {i}"),
            Message.assistant(tool_calls=[ToolCall(f"c{i}", "capture", "{}")]),
            Message.tool(result),
            Message.assistant(f"done {i}"),
        ]
    return out


def test_a_cleared_result_with_attachments_names_them_and_holds_no_bytes():
    strategy = ToolOutputCompactionStrategy(keep_last=1, token_counter=CharCounter())
    result = strategy.compact(request_of(attachment_loop(3)))
    assert not result.unchanged
    assert len(result.stand_in_events) == 2
    gif_b64 = base64.b64encode(big_gif()).decode()
    for i, stand_in in enumerate(result.stand_in_events):
        m = stand_in.message
        assert STAND_IN_KEY in m.metadata
        (cleared,) = m.tool_results
        assert cleared.parts == () and cleared.call_id == f"c{i}"
        assert cleared.content.splitlines()[-1] == (
            ATTACHMENTS_NOTE + f"[image: image/gif, shot{i}.gif, 30 bytes], "
            f"[file: text/csv, rows{i}.csv, 2,000 bytes]"
        )
        body = encode_body(stand_in)
        assert gif_b64.encode() not in body and b"a,b\\n" not in body and b"YSxi" not in body
    # the newest result stays whole, parts and all
    kept = [e for e in result.view if e.role == "tool"][-1].message.tool_results[0]
    assert len(kept.parts) == 3
    assert result.tokens_estimated_saved > 2 * 1_000  # the image and the file no longer counted


def test_a_result_of_nothing_but_an_image_is_cleared_by_its_image_tokens():
    shot = ToolResult("c1", "look", "", parts=(ImagePart("image/png", ref=REF, size=90_000),))
    messages = [
        Message.user("look"),
        Message.assistant(tool_calls=[ToolCall("c1", "look", "{}")]),
        Message.tool(shot),
        Message.assistant("seen"),
        *thinking_turn(2, reasoning=False),
    ]
    strategy = ToolOutputCompactionStrategy(keep_last=0, token_counter=CharCounter())
    result = strategy.compact(request_of(messages))
    (stand_in,) = result.stand_in_events
    content = stand_in.message.tool_results[0].content
    assert content.startswith("[output of look cleared from the prompt: 0 characters")
    assert content.endswith(
        ATTACHMENTS_NOTE + "[image: image/png, 90,000 bytes, sha256:abababababab]"
    )
    assert stand_in.message.tool_results[0].parts == ()


def test_a_text_result_is_cleared_as_before():
    out = ToolResult("c1", "search", "x" * 400)
    messages = [
        Message.user("find"),
        Message.assistant(tool_calls=[ToolCall("c1", "search", "{}")]),
        Message.tool(out),
        Message.assistant("found"),
    ]
    strategy = ToolOutputCompactionStrategy(keep_last=0, token_counter=CharCounter())
    (stand_in,) = strategy.compact(request_of(messages)).stand_in_events
    content = stand_in.message.tool_results[0].content
    assert ATTACHMENTS_NOTE not in content and "400 characters" in content


def test_the_docs_give_the_counts_this_module_measures():
    from pathlib import Path

    page = (Path(__file__).parent.parent / "docs" / "compaction.md").read_text("utf-8")
    kept = {
        policy: oracle_kept(oracle_turn_sizes(16, policy), 1_400)
        for policy in ("all", "current_turn", "none")
    }
    sizes = oracle_turn_sizes(16, "all")[0], oracle_turn_sizes(16, "none")[0]
    text = " ".join(page.split())
    assert (
        f'({sizes[1]} characters a turn without it, {sizes[0]} with it): `"all"` keeps '
        f'{kept["all"]} turn, `"current_turn"` {kept["current_turn"]}, `"none"` '
        f"{kept['none']}." in text
    )


# -- the counts against an oracle, over random conversations --------------------------------


def oracle_sent_message(message, keep):
    """The message as sent: itself when its reasoning is kept (or it holds nothing else),
    else built anew, through the checking constructor, from its other parts."""
    others = tuple(p for p in message.parts if not isinstance(p, ReasoningPart))
    if keep or len(others) == len(message.parts):
        return message
    visible = message.tool_calls or any(
        not isinstance(p, TextPart) or p.text.strip() for p in others
    )
    if not visible:
        return message
    return Message(message.role, None, message.tool_calls, metadata=message.metadata, parts=others)


def oracle_keeps(messages, policy):
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=0)
    return [
        policy == "all" or (policy == "current_turn" and i >= last_user)
        for i in range(len(messages))
    ]


def stored(events):
    """`events` as a store hands them back: numbered, stamped, with their counts recorded."""
    at = datetime(2025, 1, 2, tzinfo=UTC)
    numbered = [msgspec.structs.replace(e, seq=i + 1, timestamp=at) for i, e in enumerate(events)]
    return EventTokens(CharCounter()).counted(numbered)


@settings(max_examples=200, deadline=None)
@given(
    conversations(),
    st.sampled_from(["all", "current_turn", "none"]),
    st.sampled_from(["tuple", "lazy"]),
)
def test_sent_counts_match_an_oracle(messages, policy, shape):
    if not messages:
        return
    keeps = oracle_keeps(messages, policy)
    sent_messages = [oracle_sent_message(m, k) for m, k in zip(messages, keeps, strict=True)]
    for m, keep, want in zip(messages, keeps, sent_messages, strict=True):
        if not keep:  # rebuilt without checks, equal to the checked construction
            assert without_reasoning(m) == want
    expected = [count([m]) for m in sent_messages]
    events = events_of(messages)
    view = LazyEvents.of(stored(events)) if shape == "lazy" else events
    sent = SentTokens(EventTokens(CharCounter()), policy)
    assert sent.counts(view) == expected
    assert sent.counts(view) == expected  # the second time from the kept counts
    picked = list(range(len(messages)))[::2]
    assert sent.counts(view, picked) == [expected[i] for i in picked]
