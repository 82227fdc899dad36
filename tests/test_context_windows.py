"""Context windows: the table of model limits and its name matching, fraction triggers, the
runner binding them to its model's window, and `context_usage` with its one-time WARNING."""

import logging
import re
from datetime import date
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from chat_harness import KINDS, Harness
from turnlog import (
    CharCounter,
    CompactionRequest,
    CompactionWindow,
    CompositeCompactionTrigger,
    Message,
    TokenCountTrigger,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.compaction.triggers import bind_context_window
from turnlog.context_usage import ContextUsage
from turnlog.errors import InvalidInput, SessionNotFound
from turnlog.models.base import Usage
from turnlog.models.windows import (
    MODEL_WINDOWS,
    ModelLimits,
    context_window,
    model_family,
)
from turnlog.text import event_text
from turnlog.tokens import default_counter


@pytest.fixture(params=KINDS)
def harness(request, tmp_path):
    h = Harness(request.param, tmp_path)
    yield h
    h.close()


def usage_of(h, chat, session_id):
    """`context_usage` on either runner kind."""
    if h.kind == "sync":
        return chat.context_usage(session_id)
    return h.loop.run(chat.chat.context_usage(session_id))


def reporting(*input_tokens):
    """A scripted model's `usage=`: the given input counts, one per call, the last repeated."""
    calls = []

    def usage(messages, tools):
        calls.append(None)
        return Usage(input_tokens[min(len(calls), len(input_tokens)) - 1], 5)

    return usage


def estimate(events):
    """The default counter's count of what `events` send, event by event (the oracle)."""
    counter = default_counter()
    return sum(counter.count(event_text(e)) for e in events)


# -- the table ----------------------------------------------------------------------------------

# (name as an API takes or echoes it, the family's context window, its output limit), written
# down from the providers' pages independently of the table
KNOWN = [
    ("gpt-4o", 128_000, 16_384),
    ("gpt-4o-2024-08-06", 128_000, 16_384),
    ("GPT-4o-mini-2024-07-18", 128_000, 16_384),
    ("openai/gpt-4.1", 1_047_576, 32_768),
    ("gpt-4.1-mini-2025-04-14", 1_047_576, 32_768),
    ("o3-2025-04-16", 200_000, 100_000),
    ("o4-mini", 200_000, 100_000),
    ("gpt-5-2025-08-07", 400_000, 128_000),
    ("gpt-5-nano", 400_000, 128_000),
    ("claude-sonnet-4-5-20250929", 200_000, 64_000),
    ("claude-sonnet-4-5", 200_000, 64_000),
    ("anthropic/claude-sonnet-4.5", 200_000, 64_000),
    ("claude-haiku-4-5@20251001", 200_000, 64_000),
    ("claude-opus-4-1-20250805", 200_000, 32_000),
    ("claude-opus-4-0", 200_000, 32_000),
    ("claude-sonnet-4-20250514", 200_000, 64_000),
    ("claude-3-7-sonnet-latest", 200_000, 64_000),
    ("claude-3-5-sonnet-20241022", 200_000, 8_192),
    ("claude-3-5-haiku-20241022", 200_000, 8_192),
    ("claude-opus-4-6", 1_000_000, 128_000),
    ("models/gemini-2.5-pro", 1_048_576, 65_535),
    ("gemini-2.5-flash-001", 1_048_576, 65_536),
]


@pytest.mark.parametrize(("name", "context", "output"), KNOWN)
def test_a_named_or_dated_model_finds_its_familys_limits(name, context, output):
    limits = context_window(name)
    assert limits is not None, name
    assert (limits.context, limits.output) == (context, output)


@pytest.mark.parametrize(
    "name",
    [
        "llama3.2",
        "gpt-4o-audio-preview",  # another model: no prefix matching
        "gpt-5-chat-latest",  # a 128,000-token window, not gpt-5's
        "gpt-4o-custom",
        "claude-sonnet",
        "gemini-2.5-flash-preview-05-20",
        "",
        "  ",
    ],
)
def test_a_name_outside_the_table_finds_nothing(name):
    assert context_window(name) is None


def test_a_name_that_is_no_string_finds_nothing():
    assert context_window(None) is None  # type: ignore[arg-type]


def test_the_family_of_a_name_drops_the_prefix_and_every_snapshot_suffix():
    assert model_family("openai/gpt-4o-2024-08-06") == "gpt-4o"
    assert model_family("claude-3-7-sonnet-20250219-latest") == "claude-3-7-sonnet"
    assert model_family("Claude-Haiku-4.5@20251001") == "claude-haiku-4-5"
    assert model_family("gpt-4.1") == "gpt-4.1"  # the dot of an OpenAI name stays


def test_every_entry_names_its_source_and_the_date_it_was_read():
    names = set()
    for window in MODEL_WINDOWS:
        assert urlsplit(window.source).scheme == "https", window
        date.fromisoformat(window.seen)
        for name in (window.name, *window.aliases):
            assert name not in names
            names.add(name)
            assert context_window(name) is window.limits
        assert window.limits.output is not None and window.limits.output < window.limits.context


def test_the_gpt5_prompt_window_is_its_input_limit():
    limits = context_window("gpt-5-mini")
    assert limits == ModelLimits(400_000, 128_000, input=272_000)
    assert limits.prompt_window == 272_000
    assert ModelLimits(200_000).prompt_window == 200_000


@pytest.mark.parametrize(
    "settings",
    [
        {"context": 0},
        {"context": -5},
        {"context": 1.5},
        {"context": True},
        {"context": 100, "output": 0},
        {"context": 100, "input": 101},
        {"context": 100, "input": "50"},
    ],
)
def test_limits_that_are_no_positive_token_counts_are_refused(settings):
    with pytest.raises(InvalidInput):
        ModelLimits(**settings)


# -- fraction triggers --------------------------------------------------------------------------


def request_of(service, sid):
    return CompactionRequest.of(service.get(sid), service.view(sid))


def test_a_fraction_trigger_fires_at_its_share_of_the_window(service):
    sid = service.create().id
    # CharCounter: one token per character of event_text ("User: " + text, "Assistant: " + text)
    service.append_message(sid, Message.user("u" * 94))  # 100 tokens
    service.append_message(sid, Message.assistant("a" * 89))  # 100 tokens
    trigger = TokenCountTrigger.fraction(0.25, CharCounter(), window=1_000, reported=False)
    assert trigger.threshold == 250
    assert not trigger(request_of(service, sid))  # 200
    service.append_message(sid, Message.user("u" * 43))  # 49: 249 in all
    assert trigger.tokens(request_of(service, sid)) == 249
    assert not trigger(request_of(service, sid))
    service.append_message(sid, Message.assistant("a"))  # 12: 261
    assert trigger(request_of(service, sid))


def test_a_share_is_read_as_written_and_the_threshold_rounds_up():
    # 0.07 * 100 is 7.000000000000001 in floats: a threshold of 8 would be wrong
    assert TokenCountTrigger.fraction(0.07, window=100).threshold == 7
    assert TokenCountTrigger.fraction(0.8, window=200_000).threshold == 160_000
    assert TokenCountTrigger.fraction(0.7, window=3).threshold == 3  # 2.1 rounds up
    assert TokenCountTrigger.fraction(1, window=64).threshold == 64
    assert TokenCountTrigger.fraction(0.001, window=10).threshold == 1


@pytest.mark.parametrize("share", [0, -0.5, 1.01, 2, True, "0.8", None])
def test_a_share_outside_0_to_1_is_refused(share):
    with pytest.raises(InvalidInput, match="share"):
        TokenCountTrigger.fraction(share)


def test_a_fraction_without_a_window_refuses_to_be_asked(service):
    sid = service.create().id
    service.append_message(sid, Message.user("hi"))
    trigger = TokenCountTrigger.fraction(0.8)
    assert trigger.threshold is None
    assert repr(trigger) == "TokenCountTrigger.fraction(0.8)"
    with pytest.raises(InvalidInput, match="no window"):
        trigger(request_of(service, sid))


def test_binding_copies_the_fractions_inside_a_composite_and_keeps_a_given_window():
    loose = TokenCountTrigger.fraction(0.5)
    fixed = TokenCountTrigger.fraction(0.5, window=40)
    turns = TurnCountTrigger(9)
    composite = CompositeCompactionTrigger.any_of(loose, fixed, turns)
    bound = bind_context_window(composite, 1_000)
    assert isinstance(bound, CompositeCompactionTrigger) and not bound.require_all
    first, second, third = bound.triggers
    assert (first.threshold, first.window) == (500, 1_000)
    assert second is fixed and second.threshold == 20
    assert third is turns
    assert loose.threshold is None  # the given trigger is left as it was
    assert repr(first) == "TokenCountTrigger.fraction(0.5, window=1000)"
    plain = TokenCountTrigger(300)
    assert bind_context_window(plain, None) is plain
    nothing_to_bind = CompositeCompactionTrigger.all_of(plain, turns)
    assert bind_context_window(nothing_to_bind, None) is nothing_to_bind
    with pytest.raises(InvalidInput, match=r"'llama3\.2'"):
        bind_context_window(composite, None, "llama3.2")


# -- the runner binds its trigger ---------------------------------------------------------------


def compacting(trigger):
    return {
        "trigger": trigger,
        "strategy": WindowCompactionStrategy(CompactionWindow.last_turns(1)),
    }


def test_the_runner_binds_a_fraction_to_its_models_window(harness):
    chat = harness.make(
        harness.model(["ok"], model="gpt-4o-2024-08-06"),
        **compacting(TokenCountTrigger.fraction(0.8)),
    )
    runner = chat if harness.kind == "sync" else chat.chat
    assert runner.limits == ModelLimits(128_000, 16_384)
    assert (runner.trigger.threshold, runner.trigger.window) == (102_400, 128_000)


def test_a_gpt5_runner_binds_to_the_input_limit(harness):
    chat = harness.make(
        harness.model(["ok"], model="gpt-5"), **compacting(TokenCountTrigger.fraction(0.5))
    )
    runner = chat if harness.kind == "sync" else chat.chat
    assert runner.trigger.threshold == 136_000  # half of 272,000, not of 400,000


def test_limits_given_to_the_runner_win_over_the_table(harness):
    chat = harness.make(
        harness.model(["ok"], model="gpt-4o"),
        limits=ModelLimits(context=1_000, output=100),
        **compacting(TokenCountTrigger.fraction(0.8)),
    )
    runner = chat if harness.kind == "sync" else chat.chat
    assert runner.trigger.threshold == 800


def test_an_unknown_window_is_refused_when_a_fraction_needs_it(harness):
    with pytest.raises(InvalidInput, match=r"'llama3\.2'.*limits=ModelLimits"):
        harness.make(
            harness.model(["ok"], model="llama3.2"), **compacting(TokenCountTrigger.fraction(0.8))
        )
    chat = harness.make(  # its own window needs none of the model's
        harness.model(["ok"], model="llama3.2"),
        **compacting(TokenCountTrigger.fraction(0.8, window=8_192)),
    )
    runner = chat if harness.kind == "sync" else chat.chat
    assert runner.trigger.threshold == 6_554 and runner.limits is None


def test_limits_of_another_kind_are_refused(harness):
    with pytest.raises(InvalidInput, match="ModelLimits"):
        harness.make(harness.model(["ok"]), limits=(128_000, 16_384))


def test_a_bound_fraction_compacts_when_the_view_reaches_its_share(harness):
    # 1,000-token window, half of it: 500 characters; each turn is 100 + 100
    trigger = TokenCountTrigger.fraction(0.5, CharCounter(), reported=False)
    chat = harness.make(
        harness.model(["a" * 89]),
        limits=ModelLimits(context=1_000),
        **compacting(trigger),
    )
    done = [chat.send("s", "u" * 94) for _ in range(3)]
    assert [t.compaction.unchanged for t in done] == [True, True, False]  # 200, 400, 600
    assert len(harness.service.view("s")) == 2  # the last turn


# -- context_usage ------------------------------------------------------------------------------


def test_context_usage_reports_tokens_window_and_share(harness):
    model = harness.model(
        ["Fine, thanks."], model="claude-sonnet-4-5-20250929", usage=reporting(5_000)
    )
    chat = harness.make(model)
    chat.send("s", "How are you?")
    usage = usage_of(harness, chat, "s")
    view = harness.service.view("s")
    assert isinstance(usage, ContextUsage)
    assert usage.session_id == "s"
    assert usage.reported_input_tokens == 5_000
    assert usage.estimated_tokens == estimate(view)
    # the report counts the prompt before the reply; the reply is estimated
    assert usage.tokens == 5_000 + estimate(view[1:])
    assert usage.window == 200_000
    assert usage.share == usage.tokens / 200_000


def test_a_session_without_replies_has_no_report(harness):
    chat = harness.make(harness.model(["ok"], model="gpt-4o"))
    harness.service.get_or_create("empty")
    assert usage_of(harness, chat, "empty") == ContextUsage("empty", 0, 0, None, 128_000, 0.0)
    harness.service.append_message("empty", Message.user("hi"))
    usage = usage_of(harness, chat, "empty")
    assert usage.reported_input_tokens is None
    assert usage.tokens == usage.estimated_tokens == estimate(harness.service.view("empty"))
    with pytest.raises(SessionNotFound):
        usage_of(harness, chat, "nobody")


def test_after_a_compaction_the_last_report_is_shown_but_not_counted(harness):
    model = harness.model(["ok"], model="gpt-4o", usage=reporting(50_000))
    chat = harness.make(model)
    chat.send("s", "one")
    chat.send("s", "two")
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    assert not harness.service.compact("s", lambda r: True, strategy).unchanged
    usage = usage_of(harness, chat, "s")
    assert usage.reported_input_tokens == 50_000  # the newest reply's, for an older prompt
    assert usage.tokens == usage.estimated_tokens == estimate(harness.service.view("s"))


def test_an_unknown_window_has_no_share_and_no_warning(harness, caplog):
    chat = harness.make(harness.model(["ok"], model="local", usage=reporting(10**9)))
    chat.send("s", "hi")
    with caplog.at_level(logging.WARNING, logger="turnlog.chat"):
        usage = usage_of(harness, chat, "s")
    assert (usage.window, usage.share) == (None, None)
    assert usage.tokens > 10**9
    assert caplog.records == []


def warnings_in(caplog):
    return [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "turnlog.chat"]


def test_the_warning_comes_once_per_session_when_the_share_first_exceeds_it(harness, caplog):
    # 128,000-token window: 0.9 of it is 115,200
    model = harness.model(["ok"], model="gpt-4o", usage=reporting(100_000, 116_000, 120_000))
    chat = harness.make(model)
    with caplog.at_level(logging.WARNING, logger="turnlog.chat"):
        chat.send("s", "one")
        assert usage_of(harness, chat, "s").share < 0.9
        assert warnings_in(caplog) == []
        chat.send("s", "two")
        assert usage_of(harness, chat, "s").share > 0.9
        assert len(warnings_in(caplog)) == 1
        message = warnings_in(caplog)[0].getMessage()
        assert "session 's'" in message and "128,000-token" in message and "'gpt-4o'" in message
        assert re.search(r"holds 116,0\d\d tokens, 91%", message), message
        chat.send("s", "three")
        usage_of(harness, chat, "s")
        usage_of(harness, chat, "s")
        assert len(warnings_in(caplog)) == 1  # once for the session
        chat.send("t", "other")  # another session: 116,000 at once
        chat.send("t", "other")
        usage_of(harness, chat, "t")
        assert len(warnings_in(caplog)) == 2


def test_the_warning_threshold_is_the_runners(harness, caplog):
    model = harness.model(["ok"], model="gpt-4o", usage=reporting(120_000))
    higher = harness.make(model, context_warning=0.95)
    never = harness.make(model, context_warning=None)
    lower = harness.make(model, context_warning=0.5)
    higher.send("s", "hi")
    with caplog.at_level(logging.WARNING, logger="turnlog.chat"):
        assert 0.9 < usage_of(harness, higher, "s").share < 0.95
        usage_of(harness, never, "s")
        assert warnings_in(caplog) == []
        usage_of(harness, lower, "s")
        assert len(warnings_in(caplog)) == 1


@pytest.mark.parametrize("share", [0, 1.5, -1, True, "0.9"])
def test_a_warning_share_outside_0_to_1_is_refused(harness, share):
    with pytest.raises(InvalidInput, match="context_warning"):
        harness.make(harness.model(["ok"]), context_warning=share)


def test_context_usage_checks_the_session_id(harness):
    chat = harness.make(harness.model(["ok"], model="gpt-4o"))
    with pytest.raises(InvalidInput):
        usage_of(harness, chat, "")


# -- the docs -----------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def doc_block(page, marker):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / page).read_text("utf-8"), re.S)
    [found] = [b for b in blocks if marker in b]
    return found


def test_the_models_page_table_is_the_table():
    page = (ROOT / "docs" / "models.md").read_text("utf-8")
    section = page.split("## Context windows", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == len(MODEL_WINDOWS)
    for row, window in zip(rows, MODEL_WINDOWS, strict=True):
        names, context, output, given, source = (c.strip() for c in row.strip("|").split("|"))
        assert re.findall(r"`([^`]+)`", names) == [window.name, *window.aliases]
        assert int(context.replace(",", "")) == window.limits.context
        assert int(output.replace(",", "")) == window.limits.output
        assert (int(given.replace(",", "")) if given else None) == window.limits.input
        assert source.endswith(f"({window.source})")
        assert window.seen in section


def test_the_models_page_lookup_example_prints_what_it_says(capsys):
    code = doc_block("models.md", 'context_window("claude-sonnet-4-5-20250929")')
    exec(code, {})
    said = [line.split("# ", 1)[1] for line in code.splitlines() if "# " in line]
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == said[0]  # the ModelLimits repr, on the line after the call
    assert printed[1] == said[1].split(":")[0] == "272000"
    assert printed[2] == "None" and said[2].startswith("None")


def test_the_models_page_override_example_binds_the_fraction(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # SessionService() opens ./turnlog.db
    namespace = {}
    exec(doc_block("models.md", "limits=ModelLimits(context=32_768"), namespace)
    chat = namespace["chat"]
    assert chat.limits == ModelLimits(32_768, 8_192)
    assert f"fires at {chat.trigger.threshold:,} tokens" in doc_block("models.md", "32_768")


def test_the_chat_page_example_and_its_warning_text(tmp_path, capsys, caplog):
    from turnlog import SessionChat, SessionService, SqliteStore
    from turnlog.testing import ScriptedChatModel

    with SessionService(SqliteStore(tmp_path / "c.db")) as service:
        chat = SessionChat(
            service, ScriptedChatModel(["ok"], model="gpt-4o", usage=reporting(116_000))
        )
        chat.send("user-42", "hi")
        with caplog.at_level(logging.WARNING, logger="turnlog.chat"):
            exec(doc_block("chat.md", 'chat.context_usage("user-42")'), {"chat": chat})
        usage = chat.context_usage("user-42")
    first, second = capsys.readouterr().out.splitlines()
    assert first == f"{usage.tokens:,} of 128,000 tokens (91%)"
    assert second == f"{usage.estimated_tokens} 116000"
    [record] = warnings_in(caplog)
    page = " ".join((ROOT / "docs" / "chat.md").read_text("utf-8").split())
    assert record.getMessage().split(": compact it")[0] in page
