"""Tool search at scale: per-tool digests, the unchanged-set fast path, one table per tool set,
memory that follows the sets held, and sessions in use under concurrent threads and tasks."""

import asyncio
import random
import threading
import time
import types

import pytest

from turnlog.errors import InvalidInput
from turnlog.service_async import AsyncSessionService
from turnlog.stores.memory_async import AsyncMemoryStore
from turnlog.toolsearch import (
    AsyncToolSearch,
    Bm25ToolIndex,
    LruEvictionStrategy,
    RegexToolIndex,
    ToolReference,
    ToolSearch,
    words,
)
from turnlog.toolsearch import bm25 as bm25_module

WEATHER = ToolReference(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}},
)
EMAIL = ToolReference("send_email", "Send an email to a recipient.")
STOCK = ToolReference("stock_quote", "The latest price of a stock.")
TOOLS = [WEATHER, EMAIL, STOCK]


class Counting:
    """A real Bm25ToolIndex that counts how often it indexes."""

    def __init__(self):
        self.inner = Bm25ToolIndex()
        self.indexed = 0

    def index_tools(self, session_id, tools):
        self.indexed += 1
        self.inner.index_tools(session_id, tools)

    def search(self, session_id, query, *, max_results=None):
        return self.inner.search(session_id, query, max_results=max_results)

    def clear(self, session_id):
        self.inner.clear(session_id)

    def size(self, session_id):
        return self.inner.size(session_id)


def fresh(tools):
    return [ToolReference(t.name, t.description, t.parameters) for t in tools]


# -- digests ------------------------------------------------------------------------------------


def test_a_tools_digest_is_computed_once_and_kept_on_the_object(monkeypatch):
    tool = ToolReference("a", "x", {"type": "object"})
    digest = words.tool_digest(tool)
    assert tool._digest == digest and len(digest) == 32
    # A second digest, and a fingerprint of the tool, serialize nothing.
    monkeypatch.setattr(words, "marshal", types.SimpleNamespace(dumps=None))
    assert words.tool_digest(tool) == digest
    words.tools_fingerprint([tool], ordered=True)


def test_equal_tools_have_equal_digests_and_different_tools_differ():
    a = ToolReference("a", "x", {"type": "object", "properties": {"p": {"type": "string"}}})
    same = ToolReference("a", "x", {"type": "object", "properties": {"p": {"type": "string"}}})
    assert words.tool_digest(a) == words.tool_digest(same)
    others = [
        ToolReference("b", "x", a.parameters),
        ToolReference("a", "y", a.parameters),
        ToolReference("a", "x", {"type": "object", "properties": {"p": {"type": "number"}}}),
        ToolReference(
            "a", "x", {"type": "object", "properties": {"p": {"type": "string"}}, "x": 1}
        ),
        ToolReference("a", "x", {"default": True}),
        ToolReference("a", "x", {"default": 1}),
        ToolReference("a", "x", None),
    ]
    digests = {words.tool_digest(t) for t in [a, *others]}
    assert len(digests) == len(others) + 1


def test_set_fingerprints_count_order_only_when_asked():
    fwd = words.tools_fingerprint([WEATHER, EMAIL], ordered=True)
    back = words.tools_fingerprint([EMAIL, WEATHER], ordered=True)
    assert fwd != back
    assert words.tools_fingerprint([WEATHER, EMAIL], ordered=False) == words.tools_fingerprint(
        [EMAIL, WEATHER], ordered=False
    )


@pytest.mark.parametrize(
    "parameters",
    [{"enum": {"a", "b"}}, {"default": b"bytes"}, {"default": 1j}, {"x": object()}],
)
def test_parameters_json_cannot_carry_raise_even_where_marshal_could(parameters):
    with pytest.raises(InvalidInput, match="not a JSON schema"):
        words.tool_digest(ToolReference("a", "x", parameters))


def test_a_mapping_that_is_not_a_dict_is_digested_through_json():
    proxy = types.MappingProxyType({"type": "object"})
    tool = ToolReference("a", "x", proxy)
    assert words.tool_digest(tool) == words.tool_digest(ToolReference("a", "x", proxy))
    assert words.tool_digest(tool) != words.tool_digest(ToolReference("a", "x", {}))


# -- prepare on an unchanged set ----------------------------------------------------------------


def test_an_unchanged_set_is_not_indexed_again_however_it_is_passed():
    index = Counting()
    search = ToolSearch(index)
    listed = list(TOOLS)
    assert search.prepare("s", listed) is True
    assert search.prepare("s", listed) is False  # the same list
    assert search.prepare("s", tuple(TOOLS)) is False  # the same objects
    assert search.prepare("s", fresh(TOOLS)) is False  # new, equal objects
    assert search.prepare("s", list(reversed(TOOLS))) is False  # another order
    assert index.indexed == 1


def test_a_list_changed_in_place_is_seen():
    index = Counting()
    search = ToolSearch(index)
    listed = [WEATHER, EMAIL]
    search.prepare("s", listed)
    listed.append(STOCK)
    assert search.prepare("s", listed) is True
    listed[0] = ToolReference("get_weather", "Weather, now with forecasts.")
    assert search.prepare("s", listed) is True
    assert search.run_search("s", "forecasts").names == ["get_weather"]
    assert search.offered_tools("s")[1:] == [listed[0]]
    assert index.indexed == 3


def test_bad_tools_still_raise_when_the_last_prepare_was_fine():
    search = ToolSearch()
    search.prepare("s", TOOLS)
    for bad in ([WEATHER, WEATHER], [WEATHER, {"name": "x"}], "get_weather"):
        with pytest.raises(InvalidInput):
            search.prepare("s", bad)
    assert search.prepare("s", TOOLS) is False


# -- one table per tool set ---------------------------------------------------------------------


def tool_set(i, size=5):
    return [ToolReference(f"t{i}_{j}", f"report number {j} of kind {i % 7}") for j in range(size)]


def tables(index):
    rows = index._conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND sql LIKE '%fts5%'"
    ).fetchone()
    return rows[0]


def test_scores_do_not_depend_on_the_other_sessions():
    alone, crowded = Bm25ToolIndex(), Bm25ToolIndex()
    mine = [*tool_set(0), ToolReference("weather_now", "report the weather")]
    alone.index_tools("me", mine)
    for i in range(1, 60):
        crowded.index_tools(f"o{i}", [*tool_set(i), ToolReference("w", "weather weather")])
    crowded.index_tools("me", mine)
    for query in ("weather report", "report kind", "number 3"):
        assert crowded.search("me", query) == alone.search("me", query)


def test_a_released_set_leaves_nothing_behind_in_its_reused_table():
    index = Bm25ToolIndex()
    for i in range(40):
        index.index_tools("s", [*tool_set(i), ToolReference(f"only_{i}", "unique marker")])
        hits = index.search("s", "unique marker report", max_results=25)
        assert {h.name for h in hits} == {f"only_{i}", *(t.name for t in tool_set(i))}
    assert tables(index) <= 1 + bm25_module.SPARE_TABLES


def test_churn_does_not_grow_the_database():
    index = Bm25ToolIndex()
    search = ToolSearch(index, eviction=LruEvictionStrategy(20))

    def churn(start, stop):
        for i in range(start, stop):
            search.prepare(f"s{i}", tool_set(i, 10))

    churn(0, 100)
    pages = index._conn.execute("PRAGMA page_count").fetchone()[0]
    churn(100, 600)
    assert index._conn.execute("PRAGMA page_count").fetchone()[0] <= pages * 1.1
    assert tables(index) <= 20 + bm25_module.SPARE_TABLES
    assert index.sessions() == 20 and index.tool_sets() == 20


def test_sets_sharing_tools_share_their_text():
    index = RegexToolIndex()
    index.index_tools("a", [WEATHER, EMAIL])
    index.index_tools("b", fresh([EMAIL, STOCK]))
    assert index._sets.get("a")[1] is index._sets.get("b")[0]


# -- sessions in use, under threads and tasks ---------------------------------------------------

SESSIONS = 48
BOUND = 8  # smaller than the 16 threads, and than the working set


def session_tools(i):
    marker = ToolReference(f"only_s{i}", f"marker tool of session {i}: zebra")
    common = [ToolReference(f"common_{j}", f"shared helper {j} for zebra work") for j in range(4)]
    return [marker, *common[: 1 + i % 4]]


def check_hits(names, i, must_find):
    markers = [n for n in names if n.startswith("only_")]
    assert markers in ([f"only_s{i}"], []), (i, names)  # never another session's tool
    assert all(n.startswith(("only_", "common_")) for n in names)
    if must_find:
        assert markers == [f"only_s{i}"], (i, names)


def test_sixteen_threads_with_a_small_lru_bound_never_lose_a_session_in_use():
    index = Bm25ToolIndex()
    search = ToolSearch(index, eviction=LruEvictionStrategy(BOUND))
    tools = {i: session_tools(i) for i in range(SESSIONS)}
    errors, most_held = [], [0]
    start = threading.Barrier(16)

    def run(t):
        rng = random.Random(t)
        try:
            start.wait()
            for n in range(250):
                i = rng.randrange(SESSIONS)
                sid = f"s{i}"
                if n % 3:
                    with search.prepared(sid, tools[i]):
                        names = search.run_search(sid, "zebra marker", max_results=10).names
                        check_hits(names, i, must_find=True)
                        offered = [x.name for x in search.offered_tools(sid)][1:]
                        assert f"only_s{i}" in offered
                        most_held[0] = max(most_held[0], index.sessions())
                else:  # without a block, the session may go between calls, never half-way
                    search.prepare(sid, tools[i])
                    check_hits(search.run_search(sid, "zebra marker").names, i, must_find=False)
                if n % 50 == 0:
                    search.evict(sid)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    workers = [threading.Thread(target=run, args=(t,)) for t in range(16)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert most_held[0] <= BOUND + 16
    # Every use has ended: the bound holds again, and the index agrees with the search.
    assert search.sessions() <= BOUND
    assert index.sessions() == search.sessions()
    assert search._holds == {} and search._doomed == set()
    for i in range(SESSIONS):
        size = index.size(f"s{i}")
        assert size in (0, len(tools[i]))


def test_sixteen_tasks_with_a_small_lru_bound_never_lose_a_session_in_use():
    async def main():
        service = AsyncSessionService(AsyncMemoryStore())
        for i in range(SESSIONS):
            await service.get_or_create(f"s{i}")
        index = Bm25ToolIndex()
        search = AsyncToolSearch(index, eviction=LruEvictionStrategy(BOUND), service=service)
        tools = {i: session_tools(i) for i in range(SESSIONS)}

        async def run(t):
            rng = random.Random(t)
            for _ in range(60):
                i = rng.randrange(SESSIONS)
                sid = f"s{i}"
                with search.prepared(sid, tools[i]):
                    await asyncio.sleep(0)  # others prepare meanwhile
                    names = (await search.run_search(sid, "zebra marker", 10)).names
                    check_hits(names, i, must_find=True)
                    offered = [x.name for x in await search.offered_tools(sid)]
                    assert f"only_s{i}" in offered

        await asyncio.gather(*(run(t) for t in range(16)))
        assert search.sessions() <= BOUND
        assert index.sessions() == search.sessions()
        for i in range(SESSIONS):
            # Each session's log records each tool it found once.
            found = await search.discovered(f"s{i}")
            assert len(found) == len(set(found))

    asyncio.run(main())


def test_a_session_evicted_while_in_use_goes_when_its_use_ends():
    index = Bm25ToolIndex()
    lru = LruEvictionStrategy(1)
    search = ToolSearch(index, eviction=lru)
    with search.prepared("a", TOOLS):
        search.prepare("b", TOOLS)  # the bound names a, which is in use
        assert search.run_search("a", "weather").names == ["get_weather"]
        assert search.evict("a") is True  # deferred as well
        assert index.size("a") == 3
    assert index.size("a") == 0 and search.sessions() == 1


def test_a_session_prepared_again_while_doomed_stays():
    index = Bm25ToolIndex()
    search = ToolSearch(index, eviction=LruEvictionStrategy(1))
    with search.prepared("a", TOOLS):
        search.prepare("b", TOOLS)  # a doomed
        search.prepare("a", TOOLS)  # a accessed again: the bound names b now
    assert index.size("a") == 3 and index.size("b") == 0
    assert search.sessions() == 1


def test_a_search_of_a_session_not_prepared_says_so_in_the_log(caplog):
    search = ToolSearch(eviction=LruEvictionStrategy(1))
    search.prepare("a", TOOLS)
    search.prepare("b", TOOLS)  # a is released
    with caplog.at_level("WARNING", logger="turnlog.toolsearch"):
        assert search.run_search("a", "weather").names == []
        assert search.run_search("b", "weather").names == ["get_weather"]
    assert [r.getMessage() for r in caplog.records] == [
        "tool search in session 'a', which is not prepared (never, or released since): "
        "nothing found; call prepare first, and see ToolSearch.prepared"
    ]


class Blocking(Counting):
    """Indexing session "slow" waits until told to go on."""

    def __init__(self):
        super().__init__()
        self.entered, self.go = threading.Event(), threading.Event()

    def index_tools(self, session_id, tools):
        if session_id == "slow":
            self.entered.set()
            assert self.go.wait(10)
        super().index_tools(session_id, tools)


def test_indexing_one_session_does_not_stop_the_others():
    index = Blocking()
    search = ToolSearch(index)
    search.prepare("b", TOOLS)
    slow = threading.Thread(target=search.prepare, args=("slow", TOOLS))
    slow.start()
    assert index.entered.wait(10)
    done = []

    def others():
        search.prepare("b", TOOLS)
        search.prepare("c", [STOCK])
        done.append(search.run_search("b", "weather").names + search.run_search("c", "stock").names)

    other = threading.Thread(target=others)
    other.start()
    other.join(5)
    try:
        assert done == [["get_weather", "stock_quote"]]
        assert search.run_search("slow", "weather").names == []  # not indexed yet
    finally:
        index.go.set()
        slow.join()
    assert search.run_search("slow", "weather").names == ["get_weather"]


class Jittery(Counting):
    """Returns from indexing after a random pause, so racing prepares finish out of order."""

    def index_tools(self, session_id, tools):
        super().index_tools(session_id, tools)
        time.sleep(random.random() / 1000)


def test_concurrent_prepares_of_one_session_leave_it_consistent():
    index = Jittery()
    search = ToolSearch(index)
    variants = [TOOLS, [WEATHER], [EMAIL, STOCK], [STOCK], [WEATHER, EMAIL], fresh(TOOLS)]
    for round_ in range(60):
        start = threading.Barrier(6)

        def run(variant, start=start):
            start.wait()
            search.prepare("s", variant)

        order = variants[round_ % 6 :] + variants[: round_ % 6]
        workers = [threading.Thread(target=run, args=(v,)) for v in order]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        # Whichever prepare came last, the index and the offered tools agree with it.
        last = {t.name for t in search._snapshots["s"]}
        assert set(search._toolsets.get("s")) == last
        hits = search.run_search("s", "weather email stock", max_results=5).names
        assert set(hits) == last, round_


def test_a_tool_digested_on_its_own_was_checked_too():
    with pytest.raises(InvalidInput):
        words.tool_digest(ToolReference("  ", "blank name"))
    tool = ToolReference("ok", "fine")
    words.tool_digest(tool)
    with pytest.raises(InvalidInput, match="unique"):
        words.check_tools([tool, ToolReference("ok", "again")])
