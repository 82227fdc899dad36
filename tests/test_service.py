"""SessionService over real stores: sessions, TTLs, messages, views, and compaction races."""

from datetime import timedelta

import pytest

from turnlog import (
    CompactionWindow,
    EventFilter,
    InvalidInput,
    MemoryStore,
    Message,
    SessionAlreadyExists,
    SessionEvent,
    SessionNotFound,
    SessionService,
    SqliteStore,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.testing import FakeClock


@pytest.fixture(params=["memory", "sqlite"])
def clock_and_service(request, tmp_path):
    clock = FakeClock()
    store = (
        MemoryStore(clock=clock)
        if request.param == "memory"
        else SqliteStore(tmp_path / "t.db", clock=clock)
    )
    with SessionService(store, clock=clock) as service:
        yield clock, service


@pytest.fixture
def service(clock_and_service):
    return clock_and_service[1]


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


@pytest.mark.parametrize(
    "ttl", [timedelta(0), timedelta(seconds=-1), 5, timedelta.max, timedelta(days=3_000_000)]
)
def test_a_bad_ttl_is_refused(service, ttl):
    with pytest.raises(InvalidInput):
        service.create("s", ttl=ttl)
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


def test_compaction_that_loses_the_race_writes_nothing(service):
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


def test_compact_retries_a_lost_race_on_the_new_view(service):
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


def test_compact_gives_up_after_its_retries(service):
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
