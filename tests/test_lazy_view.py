"""Lazy views: a compaction pass plans from the outline of a store's view and decodes only the
events it keeps; what it decides is what a pass over the decoded view decides."""

import sqlite3

import pytest

from turnlog import (
    CharCounter,
    CompactionRequest,
    CompactionWindow,
    CorruptData,
    Message,
    SessionEvent,
    SessionService,
    SqliteStore,
    TokenCountTrigger,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.compaction import sent_events
from turnlog.compaction.reported import usage_metadata
from turnlog.lazy import LazyEvents


def always(request):
    return True


def never(request):
    return False


def talk(service, sid, turns):
    """A system prompt, then `turns` turns, every third with a tool call."""
    service.append_message(sid, Message.system("You answer briefly."))
    for i in range(turns):
        service.append_message(sid, Message.user(f"question {i} " + "word " * (i % 7)))
        if i % 3 == 0:
            call = ToolCall(f"c{i}", "lookup", f'{{"q": {i}}}')
            service.append_message(sid, Message.assistant(None, [call]))
            service.append_message(sid, Message.tool(ToolResult(call.id, "lookup", f"r{i}")))
        service.append_message(sid, Message.assistant(f"answer {i}"))


@pytest.fixture
def service(tmp_path):
    with SessionService(SqliteStore(tmp_path / "lazy.db"), token_counter=CharCounter()) as s:
        yield s


def decoded_pass(service, sid, strategy):
    """The oracle: the same strategy over the view decoded whole, as a tuple."""
    session = service.get(sid)
    return strategy.compact(CompactionRequest.of(session, tuple(service.store.view(sid))))


@pytest.mark.parametrize(
    "window",
    [
        CompactionWindow.last_turns(3),
        CompactionWindow.last_events(7),
        CompactionWindow.token_budget(90),
    ],
    ids=str,
)
def test_a_pass_decodes_only_what_it_keeps_and_decides_as_a_decoded_pass(service, window):
    sid = service.create().id
    talk(service, sid, 40)
    strategy = WindowCompactionStrategy(window, token_counter=CharCounter())
    expected = decoded_pass(service, sid, strategy)

    result = service.compact(sid, always, strategy)

    assert isinstance(result.covered_events, LazyEvents)
    assert result.covered_events.decoded == 0  # none of the covered events was decoded
    assert result.boundary is not None and expected.boundary is not None
    for field in ("pinned_event_ids", "preserved_event_ids", "covered_event_count"):
        assert getattr(result.boundary, field) == getattr(expected.boundary, field)
    assert result.tokens_estimated_saved == expected.tokens_estimated_saved > 0
    assert result.pinned_events == expected.pinned_events
    assert result.preserved_events == expected.preserved_events
    assert result.covered_events == expected.covered_events  # decodes them, as they were
    assert result.covered_events.decoded == len(result.covered_events)
    assert [e.id for e in service.view(sid)] == [e.id for e in expected.view]


def test_counts_by_another_counter_are_made_from_the_decoded_events(service, tmp_path):
    sid = service.create().id
    talk(service, sid, 30)  # counted at append by the service's CharCounter

    class Words:
        identity = "words/1"

        def count(self, text):
            return len(text.split())

    strategy = WindowCompactionStrategy(CompactionWindow.token_budget(40), token_counter=Words())
    expected = decoded_pass(service, sid, strategy)
    result = service.compact(sid, always, strategy)
    assert result.tokens_estimated_saved == expected.tokens_estimated_saved > 0
    assert result.boundary.preserved_event_ids == expected.boundary.preserved_event_ids
    assert result.covered_events.decoded == len(result.covered_events)  # each one counted


def test_a_pass_that_does_not_fire_decodes_nothing(service):
    sid = service.create().id
    talk(service, sid, 10)
    result = service.compact(sid, never, WindowCompactionStrategy(CompactionWindow.last_turns(1)))
    assert result.unchanged and isinstance(result.view, LazyEvents)
    assert result.view.decoded == 0 and len(result.view) == len(service.view(sid))


def test_a_summarizer_is_given_the_covered_events_decoded(service):
    sid = service.create().id
    talk(service, sid, 12)
    seen = []

    def summarize(request):
        seen.append(request)
        return [Message.user("summary"), Message.assistant("noted")]

    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(2), summarizer=summarize)
    expected = decoded_pass(service, sid, strategy)
    result = service.compact(sid, always, strategy)
    assert not result.unchanged
    lazy_request, decoded_request = seen[1], seen[0]
    assert lazy_request.covered == decoded_request.covered and len(lazy_request.covered) > 10
    assert all(type(e) is SessionEvent for e in lazy_request.covered)
    assert lazy_request.preserved == decoded_request.preserved
    assert result.covered_events == expected.covered_events


def damage(path, sid, seq, body):
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE turnlog_events SET body = ? WHERE session_id = ? AND seq = ?", (body, sid, seq)
        )


def test_a_body_that_is_not_json_fails_the_lazy_read_naming_its_row(service, tmp_path):
    sid = service.create().id
    talk(service, sid, 5)
    damage(tmp_path / "lazy.db", sid, 4, b'{"v": 1, "message": {"role": "us')
    with pytest.raises(CorruptData, match=rf"seq 4 .* of session '{sid}'"):
        service.store.view_lazy(sid)
    with pytest.raises(CorruptData, match="seq 4"):
        service.compact(sid, always, WindowCompactionStrategy(CompactionWindow.last_turns(1)))
    assert service.store.version(sid) == 15  # nothing was written


def test_a_message_row_without_a_message_fails_the_lazy_read(service, tmp_path):
    sid = service.create().id
    talk(service, sid, 3)
    damage(tmp_path / "lazy.db", sid, 3, b'{"v": 1, "payload": 5}')
    with pytest.raises(CorruptData, match="seq 3"):
        service.store.view_lazy(sid)


def test_a_damaged_covered_event_raises_when_it_is_read(service, tmp_path):
    """Its outline intact, a row damaged inside its message is covered like any other; the
    pass writes its boundary, and the damage shows when the covered event is read."""
    sid = service.create().id
    talk(service, sid, 8)
    damage(
        tmp_path / "lazy.db",
        sid,
        2,
        b'{"v":1,"message":{"role":"user","text":17},"tokens":["chars/1",3]}',
    )
    lazy = service.store.view_lazy(sid)
    assert lazy.roles[1] == "user" and lazy.stored_counts("chars/1")[1] == 3
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(2), token_counter=CharCounter())
    result = service.compact(sid, always, strategy)
    assert not result.unchanged and result.covered_events.ids[0] != result.covered_events.ids[1]
    with pytest.raises(CorruptData, match=rf"seq 2 .* of session '{sid}'"):
        list(result.covered_events)
    with pytest.raises(CorruptData, match="seq 2"):
        service.events(sid)
    assert result.covered_events[2].seq == 4  # the rows around it stay readable


def test_lazy_events_behave_as_a_tuple():
    events = [SessionEvent.for_message("s", Message.user(f"m{i}")) for i in range(6)]
    lazy = LazyEvents.of(events)
    assert len(lazy) == 6 and lazy == tuple(events) and tuple(events) == lazy and lazy == events
    assert lazy[-1] is events[-1] and lazy[1:4] == events[1:4] and lazy[::2] == events[::2]
    assert lazy[1:4][1] is events[2] and lazy.select([5, 0]) == [events[5], events[0]]
    assert events[3] in lazy and "m3" not in lazy
    assert lazy != events[:5] and lazy != [*events[:5], events[0]] and lazy != "abc"
    assert lazy.roles == ("user",) * 6 and lazy.ids == tuple(e.id for e in events)
    with pytest.raises(IndexError):
        lazy[6]
    with pytest.raises(TypeError):
        hash(lazy)
    assert repr(lazy) == "<LazyEvents: 6 events, 6 decoded>"


def test_lazy_events_decode_each_row_once_and_in_batches():
    events = [SessionEvent.for_message("s", Message.user(f"m{i}")) for i in range(5)]
    calls = []

    def decode(positions):
        calls.append(list(positions))
        return [events[p] for p in positions]

    lazy = LazyEvents.of_rows([e.id for e in events], ["user"] * 5, [False] * 5, [None] * 5, decode)
    assert lazy.decoded == 0 and repr(lazy) == "<LazyEvents: 5 events, 0 decoded>"
    assert lazy[3] is events[3] and lazy[3] is events[3]
    tail = lazy[2:]
    assert tail.decoded == 1 and list(tail) == events[2:]
    assert list(lazy) == events
    assert calls == [[3], [2, 4], [0, 1]]  # one batch per access, never a row twice


def test_a_token_trigger_reads_the_outline(service):
    sid = service.create().id
    talk(service, sid, 20)
    session = service.get(sid)
    estimated = TokenCountTrigger(100, CharCounter(), reported=False)
    reported = TokenCountTrigger(100, CharCounter())
    decoded = tuple(service.store.view(sid))

    lazy = service.store.view_lazy(sid)
    tokens = estimated.tokens(CompactionRequest.of(session, lazy))
    assert tokens == estimated.tokens(CompactionRequest.of(session, decoded)) > 100
    assert lazy.decoded == 0

    # no report in the view: the walk back reads the assistant events, and only those
    lazy = service.store.view_lazy(sid)
    assert reported.tokens(CompactionRequest.of(session, lazy)) == tokens
    assert lazy.decoded == sum(1 for e in decoded if e.role == "assistant")

    # a report: the newest assistant event alone is decoded; the prompt is matched by ids
    service.append_message(sid, Message.user("one more"))
    prompt = sent_events(service.view(sid))
    usage = usage_metadata(
        input_tokens=5_000,
        output_tokens=3,
        cached_input_tokens=None,
        model="m",
        stop_reason="stop",
        prompt=prompt,
    )
    service.append_events(
        sid,
        [SessionEvent.for_message(sid, Message.assistant("ok"), metadata=usage)],
        service.store.version(sid),
    )
    lazy = service.store.view_lazy(sid)
    expected = reported.tokens(CompactionRequest.of(session, tuple(service.store.view(sid))))
    assert reported.tokens(CompactionRequest.of(session, lazy)) == expected
    assert 5_000 < expected < 5_000 + tokens
    assert lazy.decoded == 1


def test_turn_starts_and_select_bounds():
    events = [
        SessionEvent.for_message("s", Message.system("sys")),
        SessionEvent.for_message("s", Message.user("q1")),
        SessionEvent.for_message("s", Message.assistant("a1")),
        SessionEvent.for_message("s", Message.user("summary"), synthetic=True),
        SessionEvent.for_message("s", Message.user("q2")),
    ]
    lazy = LazyEvents.of(events)
    assert lazy.turn_starts == (1, 4) and lazy.turn_starts is lazy.turn_starts  # kept once found
    assert lazy[1:].turn_starts == (0, 3) and lazy.select([4, 3, 1]).turn_starts == (0, 2)
    with pytest.raises(IndexError):
        lazy.select([0, 5])
    with pytest.raises(IndexError):
        lazy.select([-1])
    with pytest.raises(IndexError):
        lazy[1:].select([4])
    assert lazy.select([]) == [] and lazy.select([2]) == [events[2]]
    with pytest.raises(IndexError):
        lazy[1:].select([-1])  # not from the end: positions are 0 to len - 1
