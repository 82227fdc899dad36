"""The tricky cases of the compaction guide, run through SessionService.compact on real stores.

S is a stored system message, U and A user and assistant messages, Σ a summary turn (synthetic
events). Counts use CharCounter over event_text.
"""

import pytest

from turnlog import (
    CharCounter,
    CompactionBoundary,
    CompactionWindow,
    EventType,
    InvalidInput,
    Message,
    WindowCompactionStrategy,
    event_text,
)
from turnlog.compaction import SummaryRequest

_ROLES = {"s": Message.system, "u": Message.user, "a": Message.assistant}


def add(service, sid, *texts, check_rules=True):
    """Append one message per text; its first letter picks the role (s, u or a)."""
    return {t: service.append_message(sid, _ROLES[t[0]](t), check_rules=check_rules) for t in texts}


def texts(events):
    return [e.message.text for e in events]


class Summarizer:
    """Records each request; answers with a shadow prompt and a numbered summary."""

    def __init__(self):
        self.requests: list[SummaryRequest] = []

    def __call__(self, request):
        self.requests.append(request)
        n = len(self.requests)
        return [Message.user("summarize"), Message.assistant(f"summary {n}")]


def compact(service, sid, window, summarizer=None):
    strategy = WindowCompactionStrategy(window, summarizer=summarizer, token_counter=CharCounter())
    return service.compact(sid, lambda r: True, strategy)


def assert_unchanged(service, sid, result, log_before):
    assert result.unchanged
    assert not result.conflict
    assert result.covered_events == ()
    assert result.boundary is None
    assert service.version(sid) == len(log_before)
    assert service.events(sid) == log_before


def assert_appended(service, sid, result, log_before, n_summary=0):
    """The pass appended exactly one boundary and n_summary summary events; nothing else moved."""
    log = service.events(sid)
    assert len(log) == len(log_before) + 1 + n_summary
    assert log[: len(log_before)] == log_before
    boundary_event = log[len(log_before)]
    assert boundary_event.type == EventType.COMPACTION
    assert CompactionBoundary.from_event(boundary_event) == result.boundary
    summary = log[len(log_before) + 1 :]
    assert all(e.synthetic for e in summary)
    assert [e.message for e in summary] == list(result.summary)
    assert CompactionBoundary.project(log) == service.view(sid)
    # the result's view is the new view (its summary events before the store numbered them)
    assert [e.id for e in result.view] == [e.id for e in service.view(sid)]
    return boundary_event, summary


def test_1_cut_lands_mid_turn(service):
    sid = service.create().id
    ev = add(service, sid, "u1", "a1", "u2", "a2a", "a2b", "u3", "a3")
    before = service.events(sid)

    result = compact(service, sid, CompactionWindow.last_events(3))

    assert texts(service.view(sid)) == ["u3", "a3"]
    assert texts(result.covered_events) == ["u1", "a1", "u2", "a2a", "a2b"]
    assert result.covered_events == tuple(ev[t] for t in ("u1", "a1", "u2", "a2a", "a2b"))
    assert result.preserved_events == (ev["u3"], ev["a3"])
    assert result.pinned_events == ()
    assert result.summary == ()
    _, summary = assert_appended(service, sid, result, before)
    assert summary == []
    assert result.boundary.preserved_event_ids == (ev["u3"].id, ev["a3"].id)
    assert result.boundary.covered_event_count == 5


def test_2_newest_turn_alone_over_the_window(service):
    sid = service.create().id
    ev = add(service, sid, "u1", "a1", "u2", "a2", "a3", "a4")
    before = service.events(sid)

    result = compact(service, sid, CompactionWindow.last_events(2))

    assert texts(service.view(sid)) == ["u2", "a2", "a3", "a4"]
    assert result.covered_events == (ev["u1"], ev["a1"])
    assert texts(result.preserved_events) == ["u2", "a2", "a3", "a4"]
    assert_appended(service, sid, result, before)


def test_3_whole_history_is_one_oversize_turn(service):
    sid = service.create().id
    add(service, sid, "u1", "a1", "a2", "a3")
    before = service.events(sid)

    result = compact(service, sid, CompactionWindow.last_events(2))

    assert_unchanged(service, sid, result, before)
    assert texts(service.view(sid)) == ["u1", "a1", "a2", "a3"]


def test_3_oversize_turn_never_calls_the_summarizer(service):
    sid = service.create().id
    add(service, sid, "u1", "a1", "a2", "a3")
    before = service.events(sid)
    summarizer = Summarizer()

    result = compact(service, sid, CompactionWindow.last_events(1), summarizer)

    assert_unchanged(service, sid, result, before)
    assert summarizer.requests == []


def test_4_system_message_updated_mid_session_no_cut_needed(service):
    sid = service.create().id
    add(service, sid, "sys v1", "u1", "a1", "sys v2", "u2", "a2")
    before = service.events(sid)

    result = compact(service, sid, CompactionWindow.last_events(20))

    assert_unchanged(service, sid, result, before)
    assert texts(service.view(sid)) == ["sys v1", "u1", "a1", "sys v2", "u2", "a2"]
    sent = service.view_messages(sid)
    assert sent == [
        Message.system("sys v2"),
        Message.user("u1"),
        Message.assistant("a1"),
        Message.user("u2"),
        Message.assistant("a2"),
    ]
    assert Message.system("sys v1") not in sent


def test_5_system_prompt_stored_in_an_old_turn(service):
    sid = service.create().id
    ev = add(service, sid, "u1", "sys", "a1", "u2", "a2", "u3", "a3")
    before = service.events(sid)

    result = compact(service, sid, CompactionWindow.last_events(2))

    assert texts(service.view(sid)) == ["sys", "u3", "a3"]
    assert service.view(sid)[0] == ev["sys"]
    assert texts(result.covered_events) == ["u1", "a1", "u2", "a2"]
    assert result.pinned_events == (ev["sys"],)
    assert result.boundary.pinned_event_ids == (ev["sys"].id,)
    assert_appended(service, sid, result, before)


def test_6_token_budget_with_a_system_prompt(service):
    sid = service.create().id
    ev = add(service, sid, "sys", "u1", "a1", "u2", "a2")
    counter = CharCounter()
    # the worked numbers of the guide: 11 for the system prompt, turns of 8 + 13
    assert [counter.count(event_text(e)) for e in ev.values()] == [11, 8, 13, 8, 13]
    before = service.events(sid)

    result = compact(service, sid, CompactionWindow.token_budget(45))

    assert texts(service.view(sid)) == ["sys", "u2", "a2"]
    assert texts(result.covered_events) == ["u1", "a1"]
    assert result.tokens_estimated_saved == 21
    assert result.boundary.tokens_estimated_saved == 21
    assert_appended(service, sid, result, before)


def test_6_token_budget_without_a_system_prompt_both_turns_fit(service):
    sid = service.create().id
    add(service, sid, "u1", "a1", "u2", "a2")
    before = service.events(sid)

    result = compact(service, sid, CompactionWindow.token_budget(45))

    assert_unchanged(service, sid, result, before)
    assert texts(service.view(sid)) == ["u1", "a1", "u2", "a2"]


def test_6_token_budget_an_exact_fit_is_kept(service):
    sid = service.create().id
    add(service, sid, "u1", "a1", "u2", "a2")  # 42 tokens
    before = service.events(sid)

    result = compact(service, sid, CompactionWindow.token_budget(42))

    assert_unchanged(service, sid, result, before)


def test_6_token_budget_one_token_short_cuts_the_older_turn(service):
    sid = service.create().id
    add(service, sid, "u1", "a1", "u2", "a2")  # 42 tokens

    result = compact(service, sid, CompactionWindow.token_budget(41))

    assert texts(service.view(sid)) == ["u2", "a2"]
    assert texts(result.covered_events) == ["u1", "a1"]


# the first turn of test 7 outweighs the summary turn that replaces it (69 tokens for 35): a
# pass whose summary would not be smaller writes nothing (test_a_summary_turn_bigger_...)
U0 = "u0 what did we decide?"
A0 = "a0 to keep the log append-only"


def test_7_summarizer_with_a_prior_summary(service):
    sid = service.create().id
    ev = add(service, sid, U0, A0, "u1", "a1", "u2", "a2", "u3", "a3")
    summarizer = Summarizer()
    first = compact(service, sid, CompactionWindow.last_events(6), summarizer)
    assert texts(first.covered_events) == [U0, A0]
    old = service.view(sid)[:2]  # Σold: the synthetic summary turn of the first pass
    assert [e.synthetic for e in old] == [True, True]
    assert texts(old) == ["summarize", "summary 1"]
    assert texts(service.view(sid)[2:]) == ["u1", "a1", "u2", "a2", "u3", "a3"]
    before = service.events(sid)

    result = compact(service, sid, CompactionWindow.last_events(2), summarizer)

    view = service.view(sid)
    assert texts(view) == ["summarize", "summary 2", "u3", "a3"]
    assert [e.synthetic for e in view] == [True, True, False, False]
    assert result.covered_events == (*old, ev["u1"], ev["a1"], ev["u2"], ev["a2"])
    request = summarizer.requests[-1]
    assert tuple(request.prior_summary) == tuple(old)
    assert tuple(request.covered) == (ev["u1"], ev["a1"], ev["u2"], ev["a2"])
    assert tuple(request.preserved) == (ev["u3"], ev["a3"])
    assert request.session.id == sid
    _, summary = assert_appended(service, sid, result, before, n_summary=2)
    assert view[:2] == summary
    assert result.boundary.summary_event_ids == tuple(e.id for e in summary)
    assert result.boundary.strategy == "window:last_events(2)+summary"


class FixedSummarizer:
    """Answers every request with the same summary turn."""

    def __init__(self, shadow, reply):
        self.turn = [Message.user(shadow), Message.assistant(reply)]
        self.requests: list[SummaryRequest] = []

    def __call__(self, request):
        self.requests.append(request)
        return list(self.turn)


def test_a_summary_turn_bigger_than_what_it_covers_writes_nothing(service):
    sid = service.create().id
    add(service, sid, "u1", "a1", "u2", "a2")  # the covered turn: 8 + 13 = 21 tokens
    before = service.events(sid)
    # "User: summarize" (15) + "Assistant: summary 1" (20): 35 tokens for 21
    summarizer = FixedSummarizer("summarize", "summary 1")

    result = compact(service, sid, CompactionWindow.last_turns(1), summarizer)

    assert len(summarizer.requests) == 1  # the summarizer was asked; its turn was refused
    assert_unchanged(service, sid, result, before)
    assert result.summary == ()
    assert result.summary_events == ()
    assert result.tokens_estimated_saved == 0
    assert result.reason == (
        "the result would not be smaller than the view (35 tokens would stand in for 21)"
    )


def test_a_summary_turn_as_big_as_what_it_covers_writes_nothing(service):
    sid = service.create().id
    add(service, sid, "u1", "a1", "u2", "a2")  # the covered turn: 8 + 13 = 21 tokens
    before = service.events(sid)
    # "User: s" (7) + "Assistant: abc" (14): 21 tokens for 21 saves nothing
    equal = FixedSummarizer("s", "abc")

    result = compact(service, sid, CompactionWindow.last_turns(1), equal)

    assert_unchanged(service, sid, result, before)
    assert "21 tokens would stand in for 21" in result.reason
    # one token less is smaller: the pass writes and saves that one token
    result = compact(service, sid, CompactionWindow.last_turns(1), FixedSummarizer("s", "ab"))
    assert not result.unchanged
    assert result.tokens_estimated_saved == 1
    assert result.reason == ""
    assert texts(service.view(sid)) == ["s", "ab", "u2", "a2"]


# -- more of the one-pass rules ----------------------------------------------------------------


def test_superseded_system_message_leaves_even_inside_the_kept_window(service):
    sid = service.create().id
    ev = add(service, sid, "u1", "a1", "u2", "sys v1", "a2", "sys v2", "u3", "a3")

    result = compact(service, sid, CompactionWindow.last_turns(2))

    assert texts(service.view(sid)) == ["sys v2", "u2", "a2", "u3", "a3"]
    assert texts(result.covered_events) == ["u1", "a1", "sys v1"]
    assert ev["sys v1"] in result.covered_events


def test_preamble_is_pinned_and_never_cut(service):
    sid = service.create().id
    # an assistant greeting first breaks R3 (the view rules): it is stored on purpose
    ev = add(service, sid, "a0 hello, how can I help?", check_rules=False)
    ev |= add(service, sid, "u1", "a1", "u2", "a2")

    result = compact(service, sid, CompactionWindow.last_turns(1))

    assert result.pinned_events == (ev["a0 hello, how can I help?"],)
    assert texts(service.view(sid)) == ["a0 hello, how can I help?", "u2", "a2"]
    add(service, sid, "u3", "a3")
    compact(service, sid, CompactionWindow.last_turns(1))
    assert texts(service.view(sid)) == ["a0 hello, how can I help?", "u3", "a3"]
    sent = service.view_messages(sid)  # repaired: a placeholder user message comes first
    assert [m.text for m in sent[1:]] == ["a0 hello, how can I help?", "u3", "a3"]
    assert sent[0].role == "user"
    assert sent[0].metadata == {"turnlog.repair": "placeholder user message"}


def test_a_view_without_any_turn_is_left_alone(service):
    sid = service.create().id
    add(service, sid, "sys", "a0", "a1", check_rules=False)
    before = service.events(sid)
    summarizer = Summarizer()

    result = compact(service, sid, CompactionWindow.last_events(1), summarizer)

    assert_unchanged(service, sid, result, before)
    assert summarizer.requests == []


def test_last_turns_keeps_exactly_n_turns(service):
    sid = service.create().id
    add(service, sid, "u1", "a1", "u2", "a2", "a2b", "u3", "a3")

    compact(service, sid, CompactionWindow.last_turns(2))

    assert texts(service.view(sid)) == ["u2", "a2", "a2b", "u3", "a3"]


def test_pinned_events_take_no_slot_of_an_event_window(service):
    sid = service.create().id
    add(service, sid, "sys", "u1", "a1", "u2", "a2")

    result = compact(service, sid, CompactionWindow.last_events(4))

    assert result.unchanged  # the four conversation events fit; the system prompt is extra


def test_pinned_tokens_exceeding_the_budget_keep_only_the_newest_turn(service):
    sid = service.create().id
    add(service, sid, "s" + "y" * 100, "u1", "a1", "u2", "a2")

    compact(service, sid, CompactionWindow.token_budget(50))

    assert texts(service.view(sid))[1:] == ["u2", "a2"]


@pytest.mark.parametrize(
    "build",
    [
        lambda: CompactionWindow.last_events(0),
        lambda: CompactionWindow.last_events(-3),
        lambda: CompactionWindow.last_turns(0),
        lambda: CompactionWindow.token_budget(0),
        lambda: CompactionWindow.token_budget(-1),
        lambda: CompactionWindow.last_turns(True),
        lambda: CompactionWindow.last_events(2.5),
        lambda: CompactionWindow("last_event", 3),
    ],
)
def test_bad_windows_are_refused(build):
    with pytest.raises(InvalidInput):
        build()


def test_strategy_refuses_a_window_that_is_not_a_window():
    with pytest.raises(InvalidInput):
        WindowCompactionStrategy(20)
