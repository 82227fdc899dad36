"""SessionService over real stores: sessions, TTLs, messages, views, and compaction races."""

from datetime import timedelta

import pytest

from service_modes import MODES, open_service
from turnlog import (
    CompactionWindow,
    EventFilter,
    InvalidInput,
    Message,
    SessionAlreadyExists,
    SessionEvent,
    SessionNotFound,
    ToolCall,
    ToolResult,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.testing import FakeClock


@pytest.fixture(params=MODES)
def clock_and_service(request, tmp_path):
    clock = FakeClock()
    service, close = open_service(request.param, tmp_path, clock)
    try:
        yield clock, service
    finally:
        close()


def test_create_find_and_get_or_create(service):
    made = service.create("s", metadata={"owner": "ann"})
    assert service.find("s") == made
    assert service.get_or_create("s") == made
    with pytest.raises(SessionAlreadyExists, match="get_or_create"):
        service.create("s")
    other = service.get_or_create("t", metadata={"owner": "bob"})
    assert other.metadata == {"owner": "bob"}
    assert [s.id for s in service.find_by_metadata("owner", "bob")] == ["t"]


def test_create_without_id_makes_a_fresh_one(service):
    a, b = service.create(), service.create()
    assert a.id != b.id and len(a.id) == 32


def test_ttl_and_delete_expired_follow_the_clock(clock_and_service):
    clock, service = clock_and_service
    service.create("short", ttl=timedelta(minutes=5))
    service.create("long", ttl=timedelta(hours=5))
    service.create("forever")
    service.append_message("short", Message.user("hi"))
    assert service.delete_expired() == 0
    clock.advance(timedelta(minutes=5))
    assert service.delete_expired() == 1
    assert service.find("short") is None
    assert {s.id for s in service.sessions()} == {"long", "forever"}


def test_a_ttl_is_a_timedelta_or_seconds(clock_and_service):
    # Issue 7 item 10: every duration takes seconds or a timedelta (the tool-search TTL did).
    clock, service = clock_and_service
    made = service.create("int", ttl=60)
    assert made.expires_at == made.created_at + timedelta(minutes=1)
    assert service.get("int").expires_at == made.expires_at
    half = service.get_or_create("float", ttl=1.5)
    assert half.expires_at == half.created_at + timedelta(seconds=1.5)
    assert service.create("td", ttl=timedelta(seconds=60)).expires_at == made.expires_at
    clock.advance(60)
    assert service.delete_expired() == 3
    assert service.sessions() == []


@pytest.mark.parametrize(
    "ttl",
    [
        timedelta(0),
        timedelta(seconds=-1),
        0,
        -5,
        0.0,
        float("nan"),
        float("inf"),
        True,
        "60",
        [60],
        10**30,
        timedelta.max,
        timedelta(days=3_000_000),
    ],
)
def test_a_bad_ttl_is_refused(service, ttl):
    with pytest.raises(InvalidInput, match="ttl"):
        service.create("s", ttl=ttl)
    assert service.find("s") is None
    with pytest.raises(InvalidInput, match="ttl"):
        service.get_or_create("s", ttl=ttl)
    assert service.find("s") is None


@pytest.mark.parametrize("bad_id", ["", "   ", "x" * 256, "a\nb"])
def test_bad_session_ids_are_refused(service, bad_id):
    with pytest.raises(InvalidInput):
        service.create(bad_id)
    assert service.sessions() == []


def test_append_message_returns_the_stored_event(clock_and_service):
    clock, service = clock_and_service
    service.create("s")
    event = service.append_message("s", Message.user("hi"), event_id="e1", metadata={"k": 1})
    assert (event.id, event.seq, event.timestamp, event.metadata) == ("e1", 1, clock.now, {"k": 1})
    again = service.append_message("s", Message.user("hi"), event_id="e1")
    assert again.seq == 1 and service.version("s") == 1


def test_unknown_sessions_raise_session_not_found(service):
    with pytest.raises(SessionNotFound, match="create it first"):
        service.append_message("ghost", Message.user("hi"))
    with pytest.raises(SessionNotFound):
        service.view("ghost")
    with pytest.raises(SessionNotFound):
        service.compact("ghost", lambda r: True, WindowCompactionStrategy())


def test_non_json_metadata_writes_nothing(service):
    service.create("s")
    with pytest.raises(InvalidInput):
        service.append_message("s", Message.user("hi"), metadata={"when": object()})
    assert service.version("s") == 0


def test_view_messages_sends_the_latest_system_message_first(service):
    service.create("s")
    for message in [
        Message.system("v1"),
        Message.user("u1"),
        Message.assistant(None, [ToolCall("c1", "lookup", "{}")]),
        Message.tool(ToolResult("c1", "lookup", "found")),
        Message.system("v2"),
        Message.assistant("a1"),
    ]:
        service.append_message("s", message)
    sent = service.view_messages("s")
    assert [m.role for m in sent] == ["system", "user", "assistant", "tool", "assistant"]
    assert sent[0].text == "v2"


def test_events_filters_through_the_service(service):
    service.create("s")
    for i in range(3):
        service.append_message("s", Message.user(f"u{i}"))
        service.append_message("s", Message.assistant(f"a{i}"))
    last = service.events("s", EventFilter.last_n(3))
    assert [e.message.text for e in last if e.message] == ["u1", "a1", "u2", "a2"]


def test_compaction_that_loses_the_race_writes_nothing(sync_service):
    service = sync_service
    service.create("s")
    for i in range(4):
        service.append_message("s", Message.user(f"u{i}"))
        service.append_message("s", Message.assistant(f"a{i}"))

    def racing_trigger(request):
        service.append_message("s", Message.user("meanwhile"))  # another writer gets in first
        return True

    result = service.compact(
        "s", racing_trigger, WindowCompactionStrategy(CompactionWindow.last_turns(1))
    )
    assert result.unchanged and result.conflict and result.boundary is None
    assert service.version("s") == 9
    assert len(service.view("s")) == 9


def test_a_compaction_never_changes_the_log(service):
    service.create("s")
    for i in range(5):
        service.append_message("s", Message.user(f"u{i}"))
        service.append_message("s", Message.assistant(f"a{i}"))
    before = service.events("s")
    result = service.compact(
        "s", lambda r: True, WindowCompactionStrategy(CompactionWindow.last_turns(2))
    )
    assert not result.unchanged and not result.conflict
    after = service.events("s")
    assert after[: len(before)] == before
    assert len(after) == len(before) + 1
    assert [e.message.text for e in service.view("s") if e.message] == ["u3", "a3", "u4", "a4"]


def test_appended_events_must_belong_to_the_session(service):
    service.create("a")
    service.create("b")
    with pytest.raises(InvalidInput):
        service.append_events("a", [SessionEvent.for_message("b", Message.user("x"))], 0)
    assert service.version("a") == service.version("b") == 0


def test_compact_retries_a_lost_race_on_the_new_view(sync_service):
    service = sync_service
    service.create("s")
    for i in range(4):
        service.append_message("s", Message.user(f"u{i}"))
        service.append_message("s", Message.assistant(f"a{i}"))
    races = []

    def racing_once(request):
        if not races:  # another writer gets in first, once
            races.append(service.append_message("s", Message.user("meanwhile")))
        return True

    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    result = service.compact("s", racing_once, strategy, retries=1)
    assert not result.unchanged and not result.conflict
    assert [e.message.text for e in service.view("s") if e.message] == ["meanwhile"]
    assert service.version("s") == 10  # 8 + the racing append + one boundary


def test_compact_gives_up_after_its_retries(sync_service):
    service = sync_service
    service.create("s")
    for i in range(3):
        service.append_message("s", Message.user(f"u{i}"))

    def always_racing(request):
        service.append_message("s", Message.assistant("meanwhile"))
        return True

    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    result = service.compact("s", always_racing, strategy, retries=2)
    assert result.unchanged and result.conflict
    assert service.version("s") == 6  # three racing appends, no boundary
    with pytest.raises(InvalidInput):
        service.compact("s", always_racing, strategy, retries=-1)


# -- compact checks its trigger and strategy before it reads anything (issue 7 item 10) --------


@pytest.mark.parametrize(
    "trigger",
    [5, None, ..., "always", TurnCountTrigger, lambda: True, lambda a, b: True],
    ids=["int", "none", "ellipsis", "string", "class", "no-args", "two-args"],
)
def test_compact_refuses_a_trigger_it_could_not_call(service, trigger):
    sid = service.create().id
    service.append_message(sid, Message.user("hi"))
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    with pytest.raises(InvalidInput, match="trigger must be a function"):
        service.compact(sid, trigger, strategy)
    # Checked first: an unknown session is not even looked up.
    with pytest.raises(InvalidInput, match="trigger"):
        service.compact("no-such-session", trigger, strategy)
    assert service.version(sid) == 1


@pytest.mark.parametrize(
    "strategy",
    [5, None, "window", WindowCompactionStrategy, lambda request: None],
    ids=["int", "none", "string", "class", "function"],
)
def test_compact_refuses_a_strategy_without_a_compact_method(service, strategy):
    sid = service.create().id
    service.append_message(sid, Message.user("hi"))
    with pytest.raises(InvalidInput, match="strategy must be a compaction strategy"):
        service.compact(sid, TurnCountTrigger(1), strategy)
    with pytest.raises(InvalidInput, match="strategy"):
        service.compact("no-such-session", TurnCountTrigger(1), strategy)
    assert service.version(sid) == 1


def test_compact_takes_a_plain_function_as_its_trigger(service):
    sid = service.create().id
    for n in range(3):
        service.append_message(sid, Message.user(f"q{n}"))
        service.append_message(sid, Message.assistant(f"a{n}"))
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    assert service.compact(sid, lambda request: False, strategy).unchanged
    result = service.compact(sid, lambda request: len(request.view) > 2, strategy)
    assert not result.unchanged
    assert [e.message.text for e in service.view(sid)] == ["q2", "a2"]


def _texts(service, sid):
    return [e.message.text for e in service.view(sid) if e.message]


def test_hide_takes_events_out_of_the_view_and_keeps_them_in_the_log(service):
    service.create("s")
    ids = [
        service.append_message("s", m).id
        for m in (Message.system("sys"), Message.user("u1"), Message.assistant("a1"))
    ]
    last = service.append_message("s", Message.user("u2"))
    before = service.events("s")
    gone = service.hide("s", [last.id, "not-in-the-view"])
    assert [e.id for e in gone] == [last.id]
    assert _texts(service, "s") == ["sys", "u1", "a1"]
    after = service.events("s")
    assert after[: len(before)] == before
    assert len(after) == len(before) + 1  # one boundary, nothing deleted
    assert service.hide("s", [last.id]) == []  # already hidden: nothing written
    assert len(service.events("s")) == len(after)
    service.append_message("s", Message.user("u3"))
    assert _texts(service, "s") == ["sys", "u1", "a1", "u3"]
    assert [m.text for m in service.view_messages("s")] == ["sys", "u1", "a1", "u3"]
    service.hide("s", [ids[2]])
    assert _texts(service, "s") == ["sys", "u1", "u3"]


def test_clear_view_empties_the_view_and_later_messages_start_it_again(service):
    service.create("s")
    service.append_message("s", Message.user("u1"))
    service.append_message("s", Message.assistant("a1"))
    gone = service.clear_view("s")
    assert [e.message.text for e in gone] == ["u1", "a1"]
    assert service.view("s") == []
    assert service.clear_view("s") == []
    service.append_message("s", Message.user("u2"))
    assert _texts(service, "s") == ["u2"]
    assert [e.message.text for e in service.events("s") if e.message] == ["u1", "a1", "u2"]


def test_hide_keeps_a_compacted_view_and_its_summary(service):
    service.create("s")
    for i in range(4):
        service.append_message("s", Message.user(f"u{i}"))
        service.append_message("s", Message.assistant(f"a{i}"))
    service.compact("s", lambda r: True, WindowCompactionStrategy(CompactionWindow.last_turns(2)))
    view = service.view("s")
    service.hide("s", [view[-1].id])
    assert _texts(service, "s") == ["u2", "a2", "u3"]


def test_hide_and_clear_view_refuse_unknown_sessions_and_bad_retries(service):
    with pytest.raises(SessionNotFound):
        service.hide("nope", ["x"])
    with pytest.raises(SessionNotFound):
        service.clear_view("nope")
    service.create("s")
    with pytest.raises(InvalidInput):
        service.clear_view("s", retries=-1)
