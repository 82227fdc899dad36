"""Triggers: when to compact. And the per-event token cache they share with strategies."""

import pytest

from turnlog import (
    CharCounter,
    CompactionRequest,
    CompactionWindow,
    CompositeCompactionTrigger,
    InvalidInput,
    Message,
    TokenCountTrigger,
    TurnCountTrigger,
    WindowCompactionStrategy,
    event_text,
)
from turnlog.compaction import count_turns, sent_events


def add(service, sid, *messages):
    return [service.append_message(sid, m) for m in messages]


def turns(*numbers):
    out = []
    for n in numbers:
        out += [Message.user(f"u{n}"), Message.assistant(f"a{n}")]
    return out


def request_for(service, sid):
    return CompactionRequest.of(service.get(sid), service.view(sid))


def summarize(request):
    return [Message.user("summarize"), Message.assistant("summary")]


class CountingCounter:
    """A TokenCounter that counts characters and records every text it tokenizes."""

    def __init__(self):
        self.texts = []

    def count(self, text):
        self.texts.append(text)
        return len(text)


# -- TurnCountTrigger ---------------------------------------------------------------------------


def test_turn_count_fires_above_n(service):
    sid = service.create().id
    add(service, sid, Message.system("sys"), *turns(1, 2))
    trigger = TurnCountTrigger(2)
    assert request_for(service, sid).turn_count == 2
    assert not trigger(request_for(service, sid))
    add(service, sid, Message.assistant("a2b"))  # more events, not more turns
    assert not trigger(request_for(service, sid))
    add(service, sid, Message.user("u3"))
    assert request_for(service, sid).turn_count == 3
    assert trigger(request_for(service, sid))


def test_turn_count_ignores_synthetic_summary_user_messages(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2, 3))
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(2), summarizer=summarize)
    service.compact(sid, lambda r: True, strategy)
    view = service.view(sid)
    assert [e.message.role for e in view] == ["user", "assistant"] * 3
    assert view[0].synthetic

    request = request_for(service, sid)
    assert request.turn_count == 2 == count_turns(view)
    assert not TurnCountTrigger(2)(request)
    assert TurnCountTrigger(1)(request)


# -- TokenCountTrigger ---------------------------------------------------------------------------


def test_token_count_measures_what_is_sent(service):
    sid = service.create().id
    add(service, sid, Message.system("old system prompt"), *turns(1, 2, 3))
    service.compact(
        sid,
        lambda r: True,
        WindowCompactionStrategy(CompactionWindow.last_turns(2), summarizer=summarize),
    )
    add(service, sid, Message.system("new"), *turns(4))
    view = service.view(sid)
    # the view holds the pinned old prompt, the summary, the conversation and the new prompt
    assert [e.message.text for e in view] == [
        "old system prompt",
        "summarize",
        "summary",
        "u2",
        "a2",
        "u3",
        "a3",
        "new",
        "u4",
        "a4",
    ]
    sent = ["System: new", "User: summarize", "Assistant: summary"]
    sent += ["User: u2", "Assistant: a2", "User: u3", "Assistant: a3", "User: u4", "Assistant: a4"]
    expected = sum(len(t) for t in sent)
    assert [event_text(e) for e in sent_events(view)] == sent

    trigger = TokenCountTrigger(expected, CharCounter())
    request = request_for(service, sid)
    assert trigger.tokens(request) == expected
    assert trigger(request)  # fires at the threshold
    assert not TokenCountTrigger(expected + 1, CharCounter())(request)
    assert TokenCountTrigger(expected - 1, CharCounter())(request)


def test_token_count_of_an_empty_view_is_zero(service):
    sid = service.create().id
    request = request_for(service, sid)
    assert TokenCountTrigger(1, CharCounter()).tokens(request) == 0
    assert not TokenCountTrigger(1, CharCounter())(request)


# -- composition and plain callables -------------------------------------------------------------


class Fixed:
    def __init__(self, answer, calls):
        self.answer, self.calls = answer, calls

    def __call__(self, request):
        self.calls.append(self)
        return self.answer


def test_any_of_and_all_of(service):
    sid = service.create().id
    request = request_for(service, sid)
    calls = []
    yes, no = Fixed(True, calls), Fixed(False, calls)

    assert CompositeCompactionTrigger.any_of(no, yes)(request)
    assert not CompositeCompactionTrigger.any_of(no, no)(request)
    assert CompositeCompactionTrigger.all_of(yes, yes)(request)
    assert not CompositeCompactionTrigger.all_of(yes, no)(request)
    calls.clear()
    assert CompositeCompactionTrigger.any_of(yes, no)(request)
    assert calls == [yes]  # stops at the first that fires
    calls.clear()
    assert not CompositeCompactionTrigger.all_of(no, yes)(request)
    assert calls == [no]  # stops at the first that does not


def test_composites_of_real_triggers(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2, 3))
    request = request_for(service, sid)  # 3 turns, 36 characters
    many_turns, many_tokens = TurnCountTrigger(2), TokenCountTrigger(1000, CharCounter())
    assert CompositeCompactionTrigger.any_of(many_turns, many_tokens)(request)
    assert not CompositeCompactionTrigger.all_of(many_turns, many_tokens)(request)
    nested = CompositeCompactionTrigger.all_of(
        CompositeCompactionTrigger.any_of(many_tokens, many_turns), lambda r: r.turn_count == 3
    )
    assert nested(request)


def test_a_plain_lambda_is_a_trigger(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))

    result = service.compact(sid, lambda r: r.turn_count > 2, strategy)
    assert result.unchanged and service.version(sid) == 4

    add(service, sid, *turns(3))
    result = service.compact(sid, lambda r: r.turn_count > 2, strategy)
    assert not result.unchanged
    assert [e.message.text for e in service.view(sid)] == ["u3", "a3"]


@pytest.mark.parametrize("n", [0, -1, True, 2.0, "3"])
def test_turn_count_needs_a_positive_integer(n):
    with pytest.raises(InvalidInput):
        TurnCountTrigger(n)


@pytest.mark.parametrize("threshold", [0, -5, False, 1.5])
def test_token_count_needs_a_positive_threshold(threshold):
    with pytest.raises(InvalidInput):
        TokenCountTrigger(threshold, CharCounter())


def test_a_composite_needs_callable_triggers():
    with pytest.raises(InvalidInput):
        CompositeCompactionTrigger.any_of()
    with pytest.raises(InvalidInput):
        CompositeCompactionTrigger.all_of(TurnCountTrigger(1), 3)


def test_nothing_is_written_when_the_trigger_does_not_fire(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2, 3, 4))
    log = service.events(sid)
    seen = []

    def never(request):
        seen.append(request)
        return False

    summarized = []
    strategy = WindowCompactionStrategy(
        CompactionWindow.last_turns(1), summarizer=lambda r: summarized.append(r) or []
    )
    result = service.compact(sid, never, strategy)

    assert result.unchanged and result.boundary is None
    assert service.events(sid) == log and service.version(sid) == 8
    assert list(result.view) == service.view(sid)
    assert summarized == []  # the strategy did not run
    assert len(seen) == 1 and seen[0].turn_count == 4 and seen[0].session.id == sid


# -- the token cache -----------------------------------------------------------------------------


def test_measuring_the_same_stored_view_twice_tokenizes_each_event_once(service):
    sid = service.create().id
    add(service, sid, Message.system("sys"), *turns(1, 2, 3))
    counter = CountingCounter()
    trigger = TokenCountTrigger(10_000, counter)

    first = trigger.tokens(request_for(service, sid))
    assert len(counter.texts) == 7
    second = trigger.tokens(request_for(service, sid))  # a fresh read of the same events

    assert first == second == sum(len(t) for t in counter.texts)
    assert len(counter.texts) == 7
    assert sorted(counter.texts) == sorted(event_text(e) for e in service.view(sid))


def test_a_trigger_and_a_strategy_on_one_counter_share_the_cache(service):
    sid = service.create().id
    add(service, sid, Message.system("sys"), *turns(1, 2, 3))
    counter = CountingCounter()
    trigger = TokenCountTrigger(1, counter)
    strategy = WindowCompactionStrategy(CompactionWindow.token_budget(32), token_counter=counter)

    result = service.compact(sid, trigger, strategy)

    assert not result.unchanged
    assert [e.message.text for e in service.view(sid)] == ["sys", "u3", "a3"]
    assert len(counter.texts) == 7  # each stored event once, for the trigger and the strategy


def test_events_appended_later_are_tokenized_once_more_each(service):
    sid = service.create().id
    add(service, sid, *turns(1))
    counter = CountingCounter()
    trigger = TokenCountTrigger(10_000, counter)
    trigger(request_for(service, sid))
    add(service, sid, *turns(2))
    trigger(request_for(service, sid))
    assert counter.texts == ["User: u1", "Assistant: a1", "User: u2", "Assistant: a2"]
