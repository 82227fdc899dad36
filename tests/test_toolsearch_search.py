"""ToolSearch: the per-request flow, re-indexing only on change, eviction, the search tool."""

import json
import threading

import pytest

from turnlog import InvalidInput
from turnlog.toolsearch import (
    MAX_RESULTS_LIMIT,
    SEARCH_TOOL_NAME,
    AlwaysEvict,
    Bm25ToolIndex,
    CompositeEvictionStrategy,
    LruEvictionStrategy,
    NeverEvict,
    RegexToolIndex,
    ToolReference,
    ToolSearch,
    TtlEvictionStrategy,
    as_anthropic_tool,
    as_openai_tool,
    as_tool_dict,
    tool_from_dict,
)


def tool(name, description, **properties):
    schema = {
        "type": "object",
        "properties": {k: {"type": "string", "description": v} for k, v in properties.items()},
    }
    return ToolReference(name, description, schema if properties else None)


WEATHER = tool("get_weather", "Current weather for a city.", city="City name")
FORECAST = tool("getWeatherForecast", "Weather forecast for the next days.", city="City name")
EMAIL = tool("send_email", "Send an email to a recipient.", to="Recipient address")
STOCK = tool("stock_quote", "Latest stock price for a ticker.")
TOOLS = [WEATHER, FORECAST, EMAIL, STOCK]


class Counting:
    """A real index, wrapped to count what ToolSearch asks of it."""

    def __init__(self, inner=None):
        self.inner = inner or Bm25ToolIndex()
        self.indexed = []
        self.cleared = []

    def index_tools(self, session_id, tools):
        self.indexed.append(session_id)
        self.inner.index_tools(session_id, tools)

    def search(self, session_id, query, *, max_results=None):
        return self.inner.search(session_id, query, max_results=max_results)

    def clear(self, session_id):
        self.cleared.append(session_id)
        self.inner.clear(session_id)

    def size(self, session_id):
        return self.inner.size(session_id)


class Seconds:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def index():
    return Counting()


def test_an_unchanged_tool_set_is_indexed_once(index):
    search = ToolSearch(index)
    assert search.prepare("s", TOOLS) is True
    assert search.prepare("s", TOOLS) is False
    assert search.prepare("s", list(reversed(TOOLS))) is False  # order does not matter
    assert search.prepare("s", [tool(t.name, t.description) for t in TOOLS]) is True  # params
    assert index.indexed == ["s", "s"]


def test_a_changed_tool_set_is_indexed_again(index):
    search = ToolSearch(index)
    search.prepare("s", TOOLS)
    assert search.run_search("s", "weather").names[:2] == ["get_weather", "getWeatherForecast"]
    changed = [*TOOLS[:3], ToolReference("stock_quote", "Latest weather report, oddly.")]
    assert search.prepare("s", changed) is True
    assert "stock_quote" in search.run_search("s", "report").names
    assert search.prepare("s", TOOLS[:2]) is True
    assert index.size("s") == 2
    assert index.indexed == ["s", "s", "s"]


def test_the_lru_bound_evicts_the_oldest_sessions_index(index):
    lru = LruEvictionStrategy(2)
    search = ToolSearch(index, eviction=lru)
    search.prepare("a", TOOLS)
    search.prepare("b", TOOLS)
    search.prepare("a", TOOLS)  # a is now the most recent
    search.prepare("c", TOOLS)
    assert index.size("b") == 0 and index.cleared == ["b"]
    assert index.size("a") == 4 and index.size("c") == 4
    assert search.sessions() == 2 and len(lru) == 2
    assert search.run_search("b", "weather").names == []
    assert search.prepare("b", TOOLS) is True  # its fingerprint went with it
    assert index.size("a") == 0


def test_the_ttl_evicts_idle_sessions():
    clock = Seconds()
    index = Counting()
    search = ToolSearch(index, eviction=TtlEvictionStrategy(60, clock=clock))
    search.prepare("a", TOOLS)
    clock.now = 30
    search.prepare("b", TOOLS)
    clock.now = 60
    search.prepare("b", TOOLS)
    assert index.size("a") == 0 and index.size("b") == 4
    assert index.indexed == ["a", "b"]


def test_always_evict_re_indexes_every_request_and_keeps_discoveries(index):
    search = ToolSearch(index, eviction=AlwaysEvict())
    search.prepare("s", TOOLS)
    search.run_search("s", "email")
    assert search.prepare("s", TOOLS) is True
    assert search.prepare("s", TOOLS) is True
    assert index.indexed == ["s", "s", "s"]
    assert [t.name for t in search.offered_tools("s")] == [SEARCH_TOOL_NAME, "send_email"]


def test_always_evict_with_an_lru_bound_still_bounds(index):
    lru = LruEvictionStrategy(2)
    search = ToolSearch(index, eviction=CompositeEvictionStrategy(AlwaysEvict(), lru))
    for name in "abcde":
        search.prepare(name, TOOLS)
    assert search.sessions() == 2 and len(lru) == 2
    assert [index.size(n) for n in "abcde"] == [0, 0, 0, 4, 4]


def test_evict_releases_the_session(index):
    lru = LruEvictionStrategy(10)
    search = ToolSearch(index, eviction=lru)
    search.prepare("s", TOOLS)
    search.run_search("s", "email")
    assert search.evict("s") is True
    assert search.evict("s") is False
    assert index.size("s") == 0 and len(lru) == 0
    assert search.discovered("s") == []  # in memory: gone with the index
    assert search.prepare("s", TOOLS) is True
    assert [t.name for t in search.offered_tools("s")] == [SEARCH_TOOL_NAME]


def test_evicted_sessions_lose_their_in_memory_discoveries(index):
    search = ToolSearch(index, eviction=LruEvictionStrategy(1))
    search.prepare("a", TOOLS)
    search.run_search("a", "email")
    search.prepare("b", TOOLS)
    search.prepare("a", TOOLS)
    assert search.discovered("a") == []


def test_offered_tools_grow_with_discoveries_in_discovery_order():
    search = ToolSearch()
    search.prepare("s", TOOLS)
    assert [t.name for t in search.offered_tools("s")] == [SEARCH_TOOL_NAME]
    first = search.run_search("s", "send an email")
    assert first.names[0] == "send_email" and first.new[0] == "send_email"
    again = search.run_search("s", "email")
    assert again.new == ()
    search.run_search("s", "stock price", max_results=1)
    offered = search.offered_tools("s")
    assert [t.name for t in offered][:3] == [SEARCH_TOOL_NAME, "send_email", "stock_quote"]
    assert offered[1] is EMAIL  # the definitions given to prepare
    assert search.discovered("s")[:2] == ["send_email", "stock_quote"]


def test_offered_tools_leave_out_tools_no_longer_offered():
    search = ToolSearch()
    search.prepare("s", TOOLS)
    search.run_search("s", "email", max_results=1)
    search.run_search("s", "stock", max_results=1)
    search.prepare("s", [WEATHER, STOCK])
    assert [t.name for t in search.offered_tools("s")] == [SEARCH_TOOL_NAME, "stock_quote"]
    search.prepare("s", TOOLS)
    assert [t.name for t in search.offered_tools("s")][1:] == ["send_email", "stock_quote"]


def test_an_unprepared_session_gets_the_search_tool_only():
    search = ToolSearch()
    assert search.run_search("nobody", "weather").names == []
    assert [t.name for t in search.offered_tools("nobody")] == [SEARCH_TOOL_NAME]


def test_sessions_are_isolated():
    search = ToolSearch()
    search.prepare("a", TOOLS)
    search.prepare("b", [STOCK])
    search.run_search("a", "email")
    assert search.run_search("b", "email").names == []
    assert [t.name for t in search.offered_tools("b")] == [SEARCH_TOOL_NAME]


def test_max_results():
    search = ToolSearch(max_results=1)
    search.prepare("s", TOOLS)
    assert len(search.run_search("s", "weather email stock").hits) == 1
    assert len(search.run_search("s", "weather email stock", max_results=3).hits) == 3
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(InvalidInput):
            search.run_search("s", "weather", max_results=bad)
    with pytest.raises(InvalidInput):
        search.run_search("s", None)


def test_max_results_are_capped():
    many = [tool(f"weather_tool_{i}", "weather") for i in range(40)]
    search = ToolSearch()
    search.prepare("s", many)
    assert len(search.run_search("s", "weather", max_results=1000).hits) == MAX_RESULTS_LIMIT


def test_the_search_tool_definition():
    definition = ToolSearch(max_results=7).search_tool_definition()
    assert definition.name == "tool_search"
    assert "search" in definition.description.lower()
    schema = definition.parameters
    assert schema["type"] == "object" and schema["required"] == ["query"]
    assert schema["properties"]["query"]["type"] == "string"
    limit = schema["properties"]["max_results"]
    assert limit["type"] == "integer" and limit["minimum"] == 1 and limit["default"] == 7

    neutral = as_tool_dict(definition)
    assert set(neutral) == {"name", "description", "parameters"}
    openai = as_openai_tool(definition)
    assert openai == {"type": "function", "function": neutral}
    anthropic = as_anthropic_tool(definition)
    assert anthropic == {
        "name": "tool_search",
        "description": definition.description,
        "input_schema": neutral["parameters"],
    }
    json.dumps([neutral, openai, anthropic])  # plain JSON
    assert definition.as_dict() == neutral
    assert definition.as_openai_tool() == openai
    assert definition.as_anthropic_tool() == anthropic
    neutral["parameters"]["properties"].clear()  # a copy: the next definition is intact
    assert "query" in ToolSearch().search_tool_definition().parameters["properties"]


def test_shapes_of_a_tool_without_parameters_and_back():
    assert as_anthropic_tool(STOCK)["input_schema"] == {"type": "object", "properties": {}}
    for shape in (as_tool_dict, as_openai_tool, as_anthropic_tool):
        back = tool_from_dict(shape(EMAIL))
        assert back == EMAIL
    with pytest.raises(InvalidInput):
        tool_from_dict({"description": "no name"})
    with pytest.raises(InvalidInput):
        tool_from_dict({"name": "x", "parameters": "nope"})


def test_run_search_result_as_json():
    search = ToolSearch()
    search.prepare("s", TOOLS)
    payload = json.loads(search.run_search("s", "email").to_json())
    assert payload["tools"][0] == "send_email" and "available" in payload["message"]
    assert json.loads(search.run_search("s", "zebra").to_json())["tools"] == []


@pytest.mark.parametrize(
    ("arguments", "expect"),
    [
        ('{"query": "email"}', ["send_email"]),
        ({"query": "weather", "max_results": "1"}, ["get_weather"]),
        ({"query": "weather", "max_results": 1.0}, ["get_weather"]),
        ({"query": "weather", "max_results": "lots"}, ["get_weather", "getWeatherForecast"]),
        ({"query": "weather", "max_results": -2}, ["get_weather", "getWeatherForecast"]),
        ('{"query": ', None),
        ("", None),
        ("[1, 2]", None),
        ({"query": "   "}, None),
        ({"max_results": 2}, None),
    ],
)
def test_answer_call_forgives_the_model(arguments, expect):
    search = ToolSearch()
    search.prepare("s", TOOLS)
    payload = json.loads(search.answer_call("s", arguments))
    if expect is None:
        assert payload["tools"] == [] and payload["error"]
    else:
        assert payload["tools"][: len(expect)] == expect


def test_bad_arguments_raise_invalid_input():
    with pytest.raises(InvalidInput):
        ToolSearch("index")
    with pytest.raises(InvalidInput):
        ToolSearch(eviction="lru")
    with pytest.raises(InvalidInput):
        ToolSearch(max_results=0)
    with pytest.raises(InvalidInput):
        ToolSearch(service="db")
    search = ToolSearch()
    with pytest.raises(InvalidInput):
        search.prepare("", TOOLS)
    with pytest.raises(InvalidInput):
        search.prepare("s", [WEATHER, WEATHER])
    with pytest.raises(InvalidInput):
        search.prepare("s", [{"name": "x"}])
    assert search.sessions() == 0


def test_the_regex_index_works_behind_tool_search():
    search = ToolSearch(RegexToolIndex(), eviction=NeverEvict())
    search.prepare("s", TOOLS)
    assert search.run_search("s", "email").names == ["send_email"]


def test_tool_search_is_thread_safe():
    index = Bm25ToolIndex()
    search = ToolSearch(index, eviction=LruEvictionStrategy(10))
    errors = []
    variants = [TOOLS, TOOLS[:2], TOOLS[1:]]

    def run(t):
        try:
            for i in range(150):
                sid = f"s{(t * 5 + i) % 25}"
                search.prepare(sid, variants[(t + i) % 3])
                search.run_search(sid, "weather email")
                offered = search.offered_tools(sid)
                assert offered[0].name == SEARCH_TOOL_NAME
                if i % 17 == 0:
                    search.evict(sid)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    workers = [threading.Thread(target=run, args=(t,)) for t in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert search.sessions() <= 10
    assert index.sessions() <= 10


def test_every_public_name_is_exported():
    import turnlog.toolsearch as package

    for name in package.__all__:
        assert getattr(package, name) is not None
    with pytest.raises(AttributeError):
        package.NoSuchName  # noqa: B018


def test_the_embedding_indexes_are_imported_lazily():
    import subprocess
    import sys

    code = (
        "import sys, turnlog.toolsearch as t\n"
        "assert 'turnlog.toolsearch.embedding' not in sys.modules\n"
        "assert 'numpy' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    pytest.importorskip("numpy")
    pytest.importorskip("onnxruntime")
    import turnlog.toolsearch as package
    from turnlog.toolsearch.embedding import EmbeddingToolIndex, HybridToolIndex

    assert package.EmbeddingToolIndex is EmbeddingToolIndex
    assert package.HybridToolIndex is HybridToolIndex
