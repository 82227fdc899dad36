"""The view rules against an oracle: random valid and broken sequences, appended and compacted.

The oracle is not the code under test: `breaks` below states R1-R4 (and "no empty assistant
message") directly over the messages a provider would receive, position by position, where
`turnlog.rules` folds the log into a running state. Properties, on MemoryStore and SqliteStore:

- an append is refused exactly when the log's messages plus the new ones would break a rule;
  a refused append writes nothing;
- whatever was accepted, after any compaction, `view_messages` obeys the rules and is sent
  unrepaired (no message carries "turnlog.repair");
- the same moves stored with `check_rules=False` give a `view_messages` that obeys the rules
  too (repaired), after any compaction.
"""

import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prompt_rules import breaks
from turnlog import (
    CharCounter,
    CompactionWindow,
    EventType,
    InvalidInput,
    MemoryStore,
    Message,
    SessionEvent,
    SessionService,
    SqliteStore,
    ToolCall,
    ToolOutputCompactionStrategy,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.compaction import STAND_IN_KEY, sent_events, stand_ins

AUDIT = EventType.of("ACME.AUDIT")


def uid():
    return uuid.uuid4().hex


text = st.sampled_from(["hi", "ok", "", "  ", "the answer"])
move = st.one_of(
    st.tuples(st.just("user"), text),
    st.tuples(st.just("assistant"), text),
    st.tuples(st.just("calls"), st.integers(1, 3)),
    # answer the k-th newest call ids made so far (or an unknown id when there are none)
    st.tuples(st.just("results"), st.lists(st.integers(0, 4), min_size=1, max_size=3)),
    st.tuples(st.just("system"), text.filter(str.strip)),
    st.tuples(st.just("custom"), st.integers()),
    st.tuples(
        st.just("compact"),
        st.one_of(
            st.builds(CompactionWindow.last_events, st.integers(1, 5)),
            st.builds(CompactionWindow.last_turns, st.integers(1, 2)),
        ),
        st.booleans(),  # with a summarizer
    ),
    # a call round: calls, then the results of all of them (two moves)
    st.tuples(st.just("exchange"), st.integers(1, 3)),
    # clear old tool outputs: keep_last, keep_turns, clear the arguments, then cut (or not)
    st.tuples(
        st.just("clear"),
        st.integers(0, 3),
        st.integers(0, 2),
        st.booleans(),
        st.one_of(
            st.none(),
            st.builds(CompactionWindow.last_turns, st.integers(1, 2)),
            st.builds(CompactionWindow.last_events, st.integers(1, 5)),
        ),
        st.booleans(),  # the cut with a summarizer
    ),
)


def summarize(request):
    return [Message.user("summarize"), Message.assistant(f"summary of {len(request.covered)}")]


class Moves:
    """Turns moves into messages; call ids are remembered so results can answer them."""

    def __init__(self):
        self.calls = []

    def message(self, m):
        kind = m[0]
        if kind == "user":
            return Message.user(m[1])
        if kind == "assistant":
            return Message.assistant(m[1])
        if kind == "system":
            return Message.system(m[1])
        if kind == "calls":
            calls = [ToolCall(uid(), "f", '{"a": "' + "x" * 40 + '"}') for _ in range(m[1])]
            self.calls += calls
            return Message.assistant(None, calls)
        picked = [self.calls[-1 - k] for k in m[1] if k < len(self.calls)]
        picked = picked or [ToolCall("never-made", "f", "{}")]
        return Message.tool([ToolResult(c.id, c.name, "result " * len(c.id)) for c in picked])


def log_prompt(service, sid, *more):
    """What the log (and `more` messages after it) would send without compaction: its
    non-synthetic messages, the latest system message first and the other system messages
    left out."""
    messages = [e.message for e in service.events(sid) if e.message and not e.synthetic]
    messages += more
    systems = [m for m in messages if m.role == "system"]
    return systems[-1:] + [m for m in messages if m.role != "system"]


def expand(moves):
    """The moves, each call round made two moves: its calls, then all their results."""
    for m in moves:
        if m[0] == "exchange":
            yield ("calls", m[1])
            yield ("results", list(range(m[1])))
        else:
            yield m


def check_stand_ins(service, sid):
    """Each stand-in of the view answers and makes the calls its original did."""
    originals = stand_ins(service.events(sid))
    for event in service.view(sid):
        if event.message is not None and STAND_IN_KEY in event.message.metadata:
            original = originals[event.id].message
            assert (
                event.synthetic and event.message.metadata[STAND_IN_KEY] == originals[event.id].id
            )
            assert [(r.call_id, r.name) for r in event.message.tool_results] == [
                (r.call_id, r.name) for r in original.tool_results
            ]
            assert [(c.id, c.name) for c in event.message.tool_calls] == [
                (c.id, c.name) for c in original.tool_calls
            ]


def compact(service, sid, m):
    if m[0] == "clear":
        then = None
        if m[4] is not None:
            then = WindowCompactionStrategy(
                m[4], summarizer=summarize if m[5] else None, token_counter=CharCounter()
            )
        strategy = ToolOutputCompactionStrategy(
            keep_last=m[1],
            keep_turns=m[2],
            clear_arguments=m[3],
            min_tokens=1,
            placeholder="-",
            then=then,
            token_counter=CharCounter(),
        )
    else:
        strategy = WindowCompactionStrategy(
            m[1], summarizer=summarize if m[2] else None, token_counter=CharCounter()
        )
    service.compact(sid, lambda request: True, strategy)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moves=st.lists(move, min_size=1, max_size=24), batched=st.booleans())
def test_appends_are_refused_exactly_when_the_view_would_break(kind, moves, batched):
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore() if kind == "memory" else SqliteStore(Path(tmp) / "t.db")
        with SessionService(store) as service:
            checked, free = service.create().id, service.create().id
            maker = Moves()
            refused = 0
            for m in expand(moves):
                if m[0] in ("compact", "clear"):
                    compact(service, checked, m)
                    compact(service, free, m)
                elif m[0] == "custom":
                    event = SessionEvent.for_payload(checked, AUDIT, m[1])
                    service.append_event(event)
                    service.append_event(SessionEvent.for_payload(free, AUDIT, m[1]))
                else:
                    message = maker.message(m)
                    would_break = bool(breaks(log_prompt(service, checked, message)))
                    before = service.events(checked)
                    event = SessionEvent.for_message(checked, message)
                    try:
                        if batched:
                            service.append_events(checked, [event], len(before))
                        else:
                            service.append_event(event)
                    except InvalidInput:
                        refused += 1
                        assert would_break, message
                        assert service.events(checked) == before  # nothing written
                    else:
                        assert not would_break, m
                    service.append_message(free, message, check_rules=False)
                sent = service.view_messages(checked)
                assert breaks(sent) == []
                assert all("turnlog.repair" not in x.metadata for x in sent)
                raw = [e.message for e in sent_events(service.view(checked))]
                assert sent == raw  # a checked log is sent as it is
                assert breaks(service.view_messages(free)) == []
                check_stand_ins(service, checked)
            assert breaks(log_prompt(service, checked)) == []


def test_the_oracle_sees_each_kind_of_break():
    call = ToolCall("c", "f", "{}")
    u, a = Message.user("u"), Message.assistant("a")
    asks, answer = Message.assistant(None, [call]), Message.tool(ToolResult("c", "f", "r"))
    assert breaks([Message.system("s"), u, asks, answer, a, u, asks]) == []
    assert breaks([a]) and breaks([Message.system("s"), answer])  # R3 (and R1)
    assert breaks([u, answer])  # R1: no call
    assert breaks([u, asks, answer, answer])  # R1: answered twice
    assert breaks([u, asks, u, answer])  # R1 and R2
    assert breaks([u, asks, a])  # R2
    assert breaks([u, Message.assistant(" ")])  # empty
    assert breaks([u, Message.system("s")])  # R4


clear_move = st.tuples(
    st.just("clear"),
    st.integers(0, 2),
    st.integers(0, 1),
    st.booleans(),
    st.one_of(st.none(), st.builds(CompactionWindow.last_turns, st.integers(1, 2))),
    st.booleans(),
)
agent_move = st.one_of(
    # a turn: the question, rounds of k calls each answered, the answer
    st.tuples(st.just("turn"), st.lists(st.integers(1, 3), max_size=3)),
    clear_move,
    st.tuples(st.just("system"), st.just("be brief")),
)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moves=st.lists(agent_move, min_size=1, max_size=14))
def test_tool_heavy_sessions_keep_the_rules_through_clearing(kind, moves):
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore() if kind == "memory" else SqliteStore(Path(tmp) / "t.db")
        with SessionService(store) as service:
            sid = service.create().id
            maker = Moves()
            for m in moves:
                if m[0] == "clear":
                    compact(service, sid, m)
                elif m[0] == "system":
                    service.append_message(sid, Message.system(m[1]))
                else:
                    service.append_message(sid, Message.user("q"))
                    for k in m[1]:
                        service.append_message(sid, maker.message(("calls", k)))
                        service.append_message(sid, maker.message(("results", list(range(k)))))
                    service.append_message(sid, Message.assistant("a"))
                sent = service.view_messages(sid)
                assert breaks(sent) == []
                assert sent == [e.message for e in sent_events(service.view(sid))]
                check_stand_ins(service, sid)
