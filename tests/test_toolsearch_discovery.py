"""Discovered tools live in the session log: they survive compaction, restarts and instances."""

import json
import threading
from collections import Counter

import pytest

from turnlog import (
    CompactionWindow,
    EventFilter,
    EventType,
    Message,
    SessionEvent,
    SessionNotFound,
    SessionService,
    SqliteStore,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.toolsearch import (
    SEARCH_TOOL_NAME,
    TOOLS_DISCOVERED,
    LruEvictionStrategy,
    ToolReference,
    ToolSearch,
    discovered_names,
)

WEATHER = ToolReference("get_weather", "Current weather for a city.")
EMAIL = ToolReference("send_email", "Send an email to a recipient.")
STOCK = ToolReference("stock_quote", "Latest stock price for a ticker.")
TOOLS = [WEATHER, EMAIL, STOCK]


@pytest.fixture
def service(sync_service):
    """ToolSearch records discoveries through the blocking SessionService."""
    return sync_service


def offered(search, session_id):
    return [t.name for t in search.offered_tools(session_id)]


def discovery_events(service, session_id):
    return service.events(session_id, EventFilter(event_types=[TOOLS_DISCOVERED]))


def turn_with_search(service, search, session_id, user_text, query, n):
    """One turn in which the model searches for a tool, as an application would log it."""
    service.append_message(session_id, Message.user(user_text))
    call = ToolCall(f"call{n}", SEARCH_TOOL_NAME, json.dumps({"query": query}))
    service.append_message(session_id, Message.assistant(tool_calls=[call]))
    answer = search.answer_call(session_id, call.arguments)
    service.append_message(session_id, Message.tool(ToolResult(call.id, SEARCH_TOOL_NAME, answer)))
    service.append_message(session_id, Message.assistant(f"done {n}"))
    return json.loads(answer)


def test_discoveries_are_written_as_custom_events(service):
    service.create("s")
    search = ToolSearch(service=service)
    search.prepare("s", TOOLS)
    found = search.run_search("s", "send an email")
    assert found.new == ("send_email",)
    events = discovery_events(service, "s")
    assert len(events) == 1
    assert events[0].type == EventType.of("TURNLOG.TOOLS_DISCOVERED")
    assert events[0].payload == {"names": ["send_email"], "query": "send an email"}
    search.run_search("s", "email")  # nothing new: nothing written
    assert len(discovery_events(service, "s")) == 1
    search.run_search("s", "stock price")
    assert discovery_events(service, "s")[1].payload["names"] == ["stock_quote"]
    assert offered(search, "s") == [SEARCH_TOOL_NAME, "send_email", "stock_quote"]


def test_a_search_that_finds_nothing_writes_nothing(service):
    service.create("s")
    search = ToolSearch(service=service)
    search.prepare("s", TOOLS)
    assert search.run_search("s", "zebra crossing").names == []
    assert service.version("s") == 0


def test_discovered_tools_survive_a_compaction_and_never_enter_the_view(service):
    service.create("s")
    search = ToolSearch(service=service)
    search.prepare("s", TOOLS)
    assert turn_with_search(service, search, "s", "mail bob", "send email", 1)["tools"][0] == (
        "send_email"
    )
    search.prepare("s", TOOLS)
    service.append_message("s", Message.user("and now?"))
    service.append_message("s", Message.assistant("nothing else"))

    result = service.compact(
        "s", lambda request: True, WindowCompactionStrategy(CompactionWindow.last_turns(1))
    )
    assert not result.unchanged
    view = service.view("s")
    texts = [e.message.text for e in view if e.message]
    assert texts == ["and now?", "nothing else"]  # the turn with the search is covered
    assert all(e.type == EventType.MESSAGE for e in view)

    search.prepare("s", TOOLS)
    assert offered(search, "s") == [SEARCH_TOOL_NAME, "send_email"]
    fresh = ToolSearch(service=service)  # nothing in memory: read from the log
    fresh.prepare("s", TOOLS)
    assert offered(fresh, "s") == [SEARCH_TOOL_NAME, "send_email"]


def test_discoveries_survive_reopening_the_database(tmp_path):
    path = tmp_path / "sessions.db"
    with SessionService(SqliteStore(path)) as service:
        service.create("s")
        search = ToolSearch(service=service)
        search.prepare("s", TOOLS)
        turn_with_search(service, search, "s", "what's the weather", "weather", 1)
        turn_with_search(service, search, "s", "quote ACME", "stock price", 2)

    with SessionService(SqliteStore(path)) as reopened:
        search = ToolSearch(service=reopened)
        search.prepare("s", TOOLS)
        assert offered(search, "s") == [SEARCH_TOOL_NAME, "get_weather", "stock_quote"]
        assert all(e.type == EventType.MESSAGE for e in reopened.view("s"))
        assert len(discovery_events(reopened, "s")) == 2


def test_instances_sharing_a_store_see_each_others_discoveries(service):
    service.create("s")
    first, second = ToolSearch(service=service), ToolSearch(service=service)
    first.prepare("s", TOOLS)
    second.prepare("s", TOOLS)
    assert offered(second, "s") == [SEARCH_TOOL_NAME]  # read (and cached) before
    first.run_search("s", "weather")
    assert offered(second, "s") == [SEARCH_TOOL_NAME, "get_weather"]
    second.run_search("s", "email")
    assert offered(first, "s") == [SEARCH_TOOL_NAME, "get_weather", "send_email"]
    assert offered(second, "s") == [SEARCH_TOOL_NAME, "get_weather", "send_email"]


def test_other_events_do_not_stale_the_cache(service):
    service.create("s")
    search = ToolSearch(service=service)
    search.prepare("s", TOOLS)
    search.run_search("s", "weather")
    service.append_message("s", Message.user("hello"))
    other = ToolSearch(service=service)
    other.prepare("s", TOOLS)
    other.run_search("s", "stock")
    search.run_search("s", "email")  # appends at a version the cache did not see
    assert search.discovered("s") == ["get_weather", "stock_quote", "send_email"]


def test_eviction_keeps_the_logs_discoveries(service):
    service.create("a")
    service.create("b")
    search = ToolSearch(service=service, eviction=LruEvictionStrategy(1))
    search.prepare("a", TOOLS)
    search.run_search("a", "email")
    search.prepare("b", TOOLS)  # a's index is released
    assert offered(search, "a") == [SEARCH_TOOL_NAME]  # not prepared now
    search.prepare("a", TOOLS)
    assert offered(search, "a") == [SEARCH_TOOL_NAME, "send_email"]
    search.evict("a")
    search.prepare("a", TOOLS)
    assert offered(search, "a") == [SEARCH_TOOL_NAME, "send_email"]


def test_only_tools_still_offered_are_offered(service):
    service.create("s")
    search = ToolSearch(service=service)
    search.prepare("s", TOOLS)
    search.run_search("s", "email")
    search.run_search("s", "weather")
    search.prepare("s", [WEATHER, STOCK])
    assert offered(search, "s") == [SEARCH_TOOL_NAME, "get_weather"]
    assert search.discovered("s") == ["send_email", "get_weather"]
    # rediscovering a tool the log knows already writes nothing
    search.prepare("s", TOOLS)
    before = service.version("s")
    search.run_search("s", "email")
    assert service.version("s") == before


def test_threads_searching_one_session_record_each_tool_once(service):
    service.create("s")
    searches = [ToolSearch(service=service) for _ in range(2)]
    for search in searches:
        search.prepare("s", TOOLS)
    queries = ["weather", "email", "stock price"] * 8
    start = threading.Barrier(len(queries))
    results, errors = [], []

    def run(n, query):
        try:
            start.wait()
            results.append(searches[n % 2].run_search("s", query))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=item) for item in enumerate(queries)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    names = [name for event in discovery_events(service, "s") for name in event.payload["names"]]
    everything = Counter(t.name for t in TOOLS)
    assert Counter(names) == everything  # each tool once in the log
    assert Counter(name for result in results for name in result.new) == everything


def test_the_session_must_exist(service):
    search = ToolSearch(service=service)
    search.prepare("ghost", TOOLS)
    with pytest.raises(SessionNotFound):
        search.run_search("ghost", "email")
    with pytest.raises(SessionNotFound):
        search.answer_call("ghost", {"query": "email"})


def test_discovered_names_skips_malformed_payloads():
    events = [
        SessionEvent.for_payload("s", TOOLS_DISCOVERED, {"names": ["a", "b"], "query": "q"}),
        SessionEvent.for_payload("s", TOOLS_DISCOVERED, {"names": "a"}),
        SessionEvent.for_payload("s", TOOLS_DISCOVERED, ["a"]),
        SessionEvent.for_payload("s", TOOLS_DISCOVERED, {"names": [1, "", "c", "a"]}),
        SessionEvent.for_payload("s", EventType.of("OTHER"), {"names": ["x"]}),
        SessionEvent.for_message("s", Message.user("hi")),
    ]
    assert discovered_names(events) == ["a", "b", "c"]


def test_a_long_query_is_stored_cut(service):
    service.create("s")
    search = ToolSearch(service=service)
    search.prepare("s", TOOLS)
    search.run_search("s", "email " + "x" * 5000)
    assert len(discovery_events(service, "s")[0].payload["query"]) == 1000
