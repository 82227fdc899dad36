"""Property tests: random logs, compacted again and again, on real stores.

Whatever is appended and however it is compacted: the log is never changed, the view is a
projection of the log, a turn is never split, the newest turn always stays, a tool result never
loses the call it answers, and custom events never reach the view. Every pass is also checked
against `expected_pass`, an oracle written from the compaction guide's rules (not from the
strategy's code): which events it pins, covers and preserves, or that it leaves the view alone.
"""

import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from turnlog import (
    CharCounter,
    CompactionBoundary,
    CompactionRequest,
    CompactionWindow,
    EventType,
    MemoryStore,
    Message,
    SessionEvent,
    SessionService,
    SqliteStore,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
    event_text,
)
from turnlog.text import message_text

AUDIT = EventType.of("ACME.AUDIT")

words = st.text(alphabet="abcdefghij xyz→é", min_size=0, max_size=12)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)

said = words.map(lambda w: "a:" + w)  # an assistant reply has text (an empty one is refused)
assistant_op = st.tuples(st.just("assistant"), said)
system_op = st.tuples(st.just("system"), words)
custom_op = st.tuples(st.just("custom"), json_values)
tool_op = st.tuples(
    st.just("tools"),
    st.lists(st.sampled_from(["search", "read", "calc"]), min_size=1, max_size=3),
    st.booleans(),  # True: parallel results in one tool message
    st.one_of(st.none(), said),  # an assistant reply after the results, or none
)
# what may follow a user message, or stand alone (a preamble, a turn-less session)
loose_op = st.one_of(assistant_op, assistant_op, tool_op, system_op, custom_op)
turn_op = st.tuples(st.just("turn"), words, st.lists(loose_op, max_size=4))
compact_op = st.tuples(
    st.just("compact"),
    st.one_of(
        st.builds(CompactionWindow.last_events, st.integers(1, 6)),
        st.builds(CompactionWindow.last_turns, st.integers(1, 2)),
        st.builds(CompactionWindow.token_budget, st.integers(1, 200)),
    ),
    st.sampled_from([None, "summarize", "decline"]),
)
# each step appends a turn (or a loose event), then maybe compacts
operations = st.lists(
    st.tuples(st.one_of(turn_op, turn_op, turn_op, loose_op), st.one_of(st.none(), compact_op)),
    min_size=4,
    max_size=16,
).map(lambda steps: [op for step in steps for op in step if op is not None])


def uid():
    return uuid.uuid4().hex


class Summarizer:
    """Deterministic: a shadow prompt and "summary N" for the N-th request; `declining`
    returns []."""

    def __init__(self, declining=False):
        self.declining = declining
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        return self.reply(len(self.requests))

    def reply(self, n):
        """The summary turn of the `n`-th request."""
        if self.declining:
            return []
        return [Message.user("summarize"), Message.assistant(f"summary {n}")]

    def next_reply(self):
        """The summary turn this summarizer gives when it is asked next."""
        return self.reply(len(self.requests) + 1)


def apply(service, sid, op, summarizers, check_rules=True):
    """Apply `op`; `check_rules=False` for a preamble (events before the first turn), which
    breaks the view rules and is stored on purpose."""
    kind = op[0]

    def append(message):
        service.append_message(sid, message, event_id=uid(), check_rules=check_rules)

    if kind == "turn":
        append(Message.user(op[1]))
        for inner in op[2]:
            apply(service, sid, inner, summarizers)
    elif kind == "assistant":
        append(Message.assistant(op[1]))
    elif kind == "system":
        append(Message.system(op[1]))
    elif kind == "custom":
        service.append_event(SessionEvent.for_payload(sid, AUDIT, op[1], event_id=uid()))
    elif kind == "tools":
        _, names, parallel, reply = op
        calls = [ToolCall(uid(), name, '{"q":1}') for name in names]
        append(Message.assistant(tool_calls=calls))
        results = [ToolResult(c.id, c.name, f"result of {c.name}") for c in calls]
        if parallel:
            append(Message.tool(results))
        else:
            for result in results:
                append(Message.tool(result))
        if reply is not None:
            append(Message.assistant(reply))
    else:
        _, window, which = op
        summarizer = None if which is None else summarizers[which]
        strategy = WindowCompactionStrategy(
            window, summarizer=summarizer, token_counter=CharCounter()
        )
        return service.compact(sid, lambda request: True, strategy)
    return None


def check_log_and_view(service, sid, log_before):
    """The invariants that hold after every step."""
    log = service.events(sid)
    # the log is never changed: every earlier event identical and in place
    assert log[: len(log_before)] == log_before
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    view = service.view(sid)
    assert CompactionBoundary.project(log) == view

    custom_ids = {e.id for e in log if e.type == AUDIT}
    assert all(e.type == EventType.MESSAGE for e in view)
    for e in log:
        if e.type == EventType.COMPACTION:
            named = set(CompactionBoundary.from_event(e).view_event_ids)
            assert not named & custom_ids

    view_ids = [e.id for e in view]
    assert len(view_ids) == len(set(view_ids))
    in_view = set(view_ids)

    # the newest turn is wholly in the view (superseded system messages may leave it)
    starts = [i for i, e in enumerate(log) if e.starts_turn]
    if starts:
        for e in log[starts[-1] :]:
            if e.is_message and not e.synthetic and e.role != "system":
                assert e.id in in_view

    # the latest stored system message is in the view, and is what a model is sent first
    systems = [e for e in log if e.role == "system"]
    if systems:
        assert systems[-1].id in in_view
        assert service.view_messages(sid)[0] == systems[-1].message

    # no tool result without the assistant message that called it, earlier in the view
    called = set()
    for e in view:
        if e.role == "assistant":
            called |= {c.id for c in e.message.tool_calls}
        if e.role == "tool":
            assert {r.call_id for r in e.message.tool_results} <= called

    # before the first turn the view holds only system messages, the preamble and summaries;
    # the preamble (what preceded the first turn of the log) is never cut
    first_turn = starts[0] if starts else len(log)
    preamble = {e.id for e in log[:first_turn] if e.is_message and e.role != "system"}
    assert preamble <= in_view
    for e in view:
        if e.starts_turn:
            break
        assert e.role == "system" or e.synthetic or e.id in preamble
    # synthetic events are the newest summary: one contiguous run
    synthetic_at = [i for i, e in enumerate(view) if e.synthetic]
    if synthetic_at:
        assert synthetic_at == list(range(synthetic_at[0], synthetic_at[-1] + 1))
    return log, view


def check_pass(op, result, log_before, view_before, log, view, summarizers):
    """The invariants of one compaction pass."""
    which = op[2]
    if result.unchanged:
        assert log == log_before  # nothing written
        assert view == view_before
        return
    assert which != "decline"
    assert not result.conflict
    appended = log[len(log_before) :]
    assert appended[0].type == EventType.COMPACTION
    assert CompactionBoundary.from_event(appended[0]) == result.boundary
    assert all(e.synthetic and e.type == EventType.MESSAGE for e in appended[1:])
    assert len(appended) == 1 + (2 if which == "summarize" else 0)

    # the view is pinned, then the summary, then the preserved events, from a turn start
    pinned, preserved = list(result.pinned_events), list(result.preserved_events)
    assert view == [*pinned, *appended[1:], *preserved]
    assert [e.id for e in result.view] == [e.id for e in view]
    assert preserved and preserved[0].starts_turn
    assert list(result.boundary.view_event_ids) == [e.id for e in view]

    # pinned, covered and preserved split the old view; covered events stay in the log
    ids_before = [e.id for e in view_before]
    kept = [e.id for e in pinned] + [e.id for e in preserved]
    covered = [e.id for e in result.covered_events]
    assert sorted(kept + covered) == sorted(ids_before)
    assert result.boundary.covered_event_count == len(covered) > 0
    assert set(covered) <= {e.id for e in log}
    # the kept conversation is the end of the old view, in log order
    conversation_before = [
        e for e in view_before if e.role != "system" and e.id not in {p.id for p in pinned}
    ]
    assert [e.id for e in preserved] == [e.id for e in conversation_before[-len(preserved) :]]

    # after a cut only the latest system message remains, and it is first
    systems_before = [e for e in view_before if e.role == "system"]
    systems_after = [e for e in view if e.role == "system"]
    assert systems_after == systems_before[-1:]
    if systems_after:
        assert view[0] == systems_after[0]
    # a prior summary is carried forward without a summarizer, covered with one
    prior = [e for e in view_before if e.synthetic]
    if which is None:
        assert all(e in pinned for e in prior)
    else:
        assert all(e in result.covered_events for e in prior)
        request = summarizers[which].requests[-1]
        assert list(request.prior_summary) == prior
        assert list(request.preserved) == preserved


def view_parts(view, summarizing):
    """(system messages, pinned, prior summary, conversation) of a view, by the guide's rules."""
    systems = [e for e in view if e.role == "system"]
    first_turn = next((i for i, e in enumerate(view) if e.starts_turn), len(view))
    head = [e for e in view[:first_turn] if e.role != "system"]
    prior = [e for e in head if e.synthetic]
    preamble = [e for e in head if not e.synthetic]
    conversation = [e for e in view[first_turn:] if e.role != "system"]
    pinned = systems[-1:] + preamble + ([] if summarizing else prior)
    return systems, pinned, prior, conversation


def tokens(texts):
    """CharCounter over the rendered texts: one token per character."""
    return sum(len(t) for t in texts)


def expected_pass(view, window, summary=None):
    """The guide's rules for one pass, written out plainly: None when the window keeps the
    whole view (before asking any summarizer); else a dict of the pinned, covered and
    preserved ids, the tokens `removed` (the covered events) and `added` (the summary turn),
    and whether the pass `writes`. `summary`: the summary turn a summarizer answers, or None
    without one.

    1. The latest system message is pinned at the front; earlier ones are covered by a cut.
    2. The events before the first turn (not system, not a summary) are a preamble: pinned.
    3. A prior summary is pinned without a summarizer, covered (and replaced) with one.
    4. The window gives a raw cut in the conversation (the rest, systems left out); it moves
       forward to the next turn start, and back to the newest turn if none is left.
    5. The pass writes only when its result is smaller: the summary turn (none without a
       summarizer) must have fewer tokens than the events it covers; an equal size is not
       smaller, and the view is left alone.
    Pinned events take no event or turn slot and come off a token budget first.
    """
    summarizing = summary is not None
    systems, pinned, prior, conversation = view_parts(view, summarizing)
    size = window.size
    if window.kind == "last_events":
        cut = max(0, len(conversation) - size)
    elif window.kind == "last_turns":
        starts = [i for i, e in enumerate(conversation) if e.starts_turn]
        cut = starts[-size] if len(starts) > size else 0
    else:
        left = size - sum(len(event_text(e)) for e in pinned)  # CharCounter: one per char
        cut = len(conversation)
        while cut > 0 and len(event_text(conversation[cut - 1])) <= left:
            left -= len(event_text(conversation[cut - 1]))
            cut -= 1
    while cut < len(conversation) and not conversation[cut].starts_turn:
        cut += 1
    if cut == len(conversation):  # everything would go: keep the newest turn
        starts = [i for i, e in enumerate(conversation) if e.starts_turn]
        cut = starts[-1] if starts else 0
    if cut == 0:
        return None
    covered = systems[:-1] + conversation[:cut] + (prior if summarizing else [])
    removed = tokens(event_text(e) for e in covered)
    added = tokens(message_text(m) for m in summary or [])
    return {
        "pinned": [e.id for e in pinned],
        "covered": sorted(e.id for e in covered),
        "preserved": [e.id for e in conversation[cut:]],
        "removed": removed,
        "added": added,
        "writes": added < removed,
    }


def check_against_oracle(op, result, view_before, summary):
    """`result` of `op` against the oracle; `summary`: the turn the summarizer was to give."""
    _, window, which = op
    expected = expected_pass(view_before, window, summary)
    if expected is None or which == "decline":
        assert result.unchanged
        return
    if not expected["writes"]:
        assert result.unchanged
        figures = f"{expected['added']:,} tokens would stand in for {expected['removed']:,}"
        assert figures in result.reason
        return
    assert not result.unchanged
    assert [e.id for e in result.pinned_events] == expected["pinned"]
    assert sorted(e.id for e in result.covered_events) == expected["covered"]
    assert [e.id for e in result.preserved_events] == expected["preserved"]
    assert result.tokens_estimated_saved == expected["removed"] - expected["added"]


def outcome(result):
    """A label for hypothesis' statistics: cut, or why the pass was unchanged."""
    if not result.unchanged:
        return "cut"
    return "unchanged, not smaller" if "not be smaller" in result.reason else "unchanged"


def plain_pass(service, sid, window, view):
    """What the same window does without a summarizer (pure: nothing is written)."""
    request = CompactionRequest.of(service.get(sid), view)
    return WindowCompactionStrategy(window, token_counter=CharCounter()).compact(request)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
def test_random_logs_and_compactions(kind, ops):
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore() if kind == "memory" else SqliteStore(Path(tmp) / "t.db")
        with SessionService(store) as service:
            sid = service.create(uid()).id
            summarizers = {"summarize": Summarizer(), "decline": Summarizer(declining=True)}
            log, view = [], []
            started = False  # a turn was appended: what follows keeps the view rules
            for op in ops:
                started = started or op[0] == "turn"
                version = service.version(sid)
                plain = summary = None
                if op[0] == "compact" and op[2] is not None:
                    plain = plain_pass(service, sid, op[1], view)
                    asked = len(summarizers[op[2]].requests)
                    summary = summarizers[op[2]].next_reply()
                result = apply(service, sid, op, summarizers, check_rules=started)
                new_log, new_view = check_log_and_view(service, sid, log)
                if op[0] == "compact":
                    event(f"{op[1].kind} {op[2]}: {outcome(result)}")
                    check_pass(op, result, log, view, new_log, new_view, summarizers)
                    check_against_oracle(op, result, view, summary)
                    if op[2] == "decline":
                        assert result.unchanged and service.version(sid) == version
                    if plain is not None and op[1].kind != "token_budget":
                        # pinned events take no slot: the summarizer is asked exactly when
                        # the plain window cuts, and the same events stay
                        called = len(summarizers[op[2]].requests) > asked
                        assert called == (not plain.unchanged)
                        if op[2] == "summarize" and not result.unchanged:
                            assert result.preserved_events == plain.preserved_events
                log, view = new_log, new_view


# a log built for one pass: a preamble, turns, maybe an earlier pass, more turns
pass_setup = st.tuples(
    st.lists(st.one_of(assistant_op, system_op, custom_op), max_size=2),
    st.lists(turn_op, min_size=1, max_size=8),
    st.one_of(st.none(), compact_op),
    st.lists(st.one_of(turn_op, turn_op, loose_op), max_size=6),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=pass_setup, data=st.data())
def test_one_pass_keeps_what_the_oracle_keeps(setup, data):
    """Windows sized against the view at hand, so the raw cut lands on every kind of event and
    a token budget on the exact size of a suffix (and one token either side of it)."""
    preamble, turns, earlier, more = setup
    with SessionService(MemoryStore()) as service:
        sid = service.create(uid()).id
        summarizers = {"summarize": Summarizer(), "decline": Summarizer(declining=True)}
        for op in preamble:  # events before the first turn: stored with the rules off
            apply(service, sid, op, summarizers, check_rules=False)
        for op in [*turns, *([earlier] if earlier else []), *more]:
            apply(service, sid, op, summarizers)
        view = service.view(sid)
        which = data.draw(st.sampled_from([None, "summarize", "decline"]), label="summarizer")
        kind = data.draw(st.sampled_from(["last_events", "last_turns", "token_budget"]))
        if kind == "last_events":
            window = CompactionWindow.last_events(data.draw(st.integers(1, len(view) + 1)))
        elif kind == "last_turns":
            turns_in_view = sum(e.starts_turn for e in view)
            window = CompactionWindow.last_turns(data.draw(st.integers(1, turns_in_view + 1)))
        else:
            _, pinned, _, conversation = view_parts(view, which is not None)
            # a suffix that starts a turn (where the budget's edge matters most) or anywhere
            starts = [i for i, e in enumerate(conversation) if e.starts_turn]
            at = data.draw(
                st.sampled_from(starts) | st.integers(0, len(conversation)), label="suffix"
            )
            exact = sum(len(event_text(e)) for e in pinned + conversation[at:])
            window = CompactionWindow.token_budget(max(1, exact + data.draw(st.integers(-1, 1))))
        op = ("compact", window, which)
        summary = None if which is None else summarizers[which].next_reply()
        result = apply(service, sid, op, summarizers)
        event(f"{kind} {which}: {outcome(result)}")
        check_against_oracle(op, result, view, summary)
