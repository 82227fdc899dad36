"""AsyncToolSearch: the discovery behaviours of ToolSearch, on AsyncSessionService, and what
asyncio adds (many tasks searching one session, a blocking and an async process sharing a file).

The discovery tests of tests/test_toolsearch_discovery.py run here again, unchanged: their
`service` is an AsyncSessionService behind the blocking bridge of tests/service_modes.py, and the
`ToolSearch` they build is an AsyncToolSearch behind the same bridge.
"""

import asyncio
import inspect
from collections import Counter
from pathlib import Path

import pytest

import test_toolsearch_discovery as discovery
from service_modes import BlockingService, open_service
from turnlog import (
    EventFilter,
    InvalidInput,
    Message,
    SessionNotFound,
    SessionService,
    SqliteStore,
)
from turnlog.service_async import AsyncSessionService
from turnlog.stores.base import utc_now
from turnlog.stores.memory_async import AsyncMemoryStore
from turnlog.stores.sqlite_async import AsyncSqliteStore
from turnlog.toolsearch import (
    SEARCH_TOOL_NAME,
    TOOLS_DISCOVERED,
    AsyncToolSearch,
    ToolSearch,
    discovery_event,
)
from turnlog.toolsearch.search_async import CHECKED_ATTEMPTS

TOOLS = discovery.TOOLS
DOC = Path(__file__).resolve().parent.parent / "docs" / "toolsearch.md"
QUERIES = {"weather": "get_weather", "email": "send_email", "stock price": "stock_quote"}


# -- the discovery tests, on AsyncToolSearch ---------------------------------------------------


@pytest.fixture(params=["async-memory", "async-sqlite"])
def service(request, tmp_path):
    """An AsyncSessionService on AsyncMemoryStore / AsyncSqliteStore, behind a blocking bridge."""
    svc, close = open_service(request.param, tmp_path, utc_now)
    try:
        yield svc
    finally:
        close()


@pytest.fixture(autouse=True)
def bridged_tool_search(monkeypatch):
    """Inside the discovery tests, `ToolSearch(service=s)` builds an AsyncToolSearch on the
    AsyncSessionService behind `s`, driven through the same blocking bridge."""

    def make(*args, service, **kwargs):
        assert isinstance(service, BlockingService)
        search = AsyncToolSearch(*args, service=service.async_service, **kwargs)
        return BlockingService(search, service._loop)

    monkeypatch.setattr(discovery, "ToolSearch", make)


SHARED = sorted(
    name
    for name, test in vars(discovery).items()
    if name.startswith("test_") and "service" in inspect.signature(test).parameters
)
globals().update({name: getattr(discovery, name) for name in SHARED})


def test_every_discovery_test_on_a_service_runs_here_too():
    assert len(SHARED) >= 9
    assert "test_discoveries_are_written_as_custom_events" in SHARED
    # not shadowed by a test of this module with the same name
    assert all(globals()[name] is getattr(discovery, name) for name in SHARED)


# -- asyncio ------------------------------------------------------------------------------------


def async_store(kind, tmp_path):
    return AsyncMemoryStore() if kind == "memory" else AsyncSqliteStore(tmp_path / "t.db")


def discovery_payloads(events):
    return [e.payload["names"] for e in events if e.type == TOOLS_DISCOVERED]


async def discovered_events(service, session_id):
    return await service.events(session_id, EventFilter(event_types=[TOOLS_DISCOVERED]))


class YieldingService(AsyncSessionService):
    """Lets other tasks run before each read and write, as a networked store would:
    AsyncMemoryStore runs on the event loop itself and never suspends a task."""

    async def version(self, session_id):
        await asyncio.sleep(0)
        return await super().version(session_id)

    async def events(self, session_id, filter=None):
        await asyncio.sleep(0)
        return await super().events(session_id, filter)

    async def append_events(self, *args, **kwargs):
        await asyncio.sleep(0)
        return await super().append_events(*args, **kwargs)

    async def append_event(self, *args, **kwargs):
        await asyncio.sleep(0)
        return await super().append_event(*args, **kwargs)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_many_tasks_searching_one_session_record_each_tool_once(kind, tmp_path):
    async def main():
        service_type = YieldingService if kind == "memory" else AsyncSessionService
        async with service_type(async_store(kind, tmp_path)) as service:
            await service.create("s")
            searches = [AsyncToolSearch(service=service) for _ in range(3)]
            for search in searches:
                search.prepare("s", TOOLS)

            async def chat(n):  # another writer of the same log, racing the searches
                await service.append_message("s", Message.user(f"hello {n}"))
                await service.append_message("s", Message.assistant(f"hi {n}"))

            queries = list(QUERIES) * 20
            results = await asyncio.gather(
                *(searches[n % 3].run_search("s", q) for n, q in enumerate(queries)),
                *(chat(n) for n in range(10)),
            )
            found = [r for r in results if r is not None]
            names = [
                name
                for payload in discovery_payloads(await discovered_events(service, "s"))
                for name in payload
            ]
            assert Counter(names) == Counter(QUERIES.values())  # each tool once in the log
            reported = [name for r in found for name in r.new]
            assert Counter(reported) == Counter(QUERIES.values())  # and reported new once
            assert all(r.names == [QUERIES[r.query]] for r in found)
            for search in searches:
                assert set(await search.discovered("s")) == set(QUERIES.values())
                offered = [t.name for t in await search.offered_tools("s")]
                assert offered[0] == SEARCH_TOOL_NAME and set(offered[1:]) == set(QUERIES.values())
            assert await service.version("s") == 20 + 3

    asyncio.run(main())


def test_a_blocking_and_an_async_tool_search_share_one_sqlite_file(tmp_path):
    path = tmp_path / "shared.db"
    blocking = SessionService(SqliteStore(path))
    try:
        blocking.create("s")
        sync_search = ToolSearch(service=blocking)
        sync_search.prepare("s", TOOLS)
        assert sync_search.run_search("s", "weather").new == ("get_weather",)

        async def main():
            async with AsyncSessionService(AsyncSqliteStore(path)) as service:
                search = AsyncToolSearch(service=service)
                search.prepare("s", TOOLS)
                assert [t.name for t in await search.offered_tools("s")] == [
                    SEARCH_TOOL_NAME,
                    "get_weather",
                ]
                assert (await search.run_search("s", "weather")).new == ()  # known: not written
                assert (await search.run_search("s", "email")).new == ("send_email",)
                # the blocking side discovers meanwhile, from a thread of its own
                stock = await asyncio.to_thread(sync_search.run_search, "s", "stock price")
                assert stock.new == ("stock_quote",)
                assert await search.discovered("s") == ["get_weather", "send_email", "stock_quote"]

        asyncio.run(main())
        assert sync_search.discovered("s") == ["get_weather", "send_email", "stock_quote"]
        assert sync_search.run_search("s", "email").new == ()
        payloads = discovery_payloads(blocking.events("s"))
        assert payloads == [["get_weather"], ["send_email"], ["stock_quote"]]
    finally:
        blocking.close()


def test_discoveries_survive_reopening_the_database(tmp_path):
    path = tmp_path / "sessions.db"

    async def first():
        async with AsyncSessionService(AsyncSqliteStore(path)) as service:
            await service.create("s")
            search = AsyncToolSearch(service=service)
            search.prepare("s", TOOLS)
            await search.answer_call("s", '{"query": "weather"}')
            await search.answer_call("s", {"query": "stock price", "max_results": "1"})

    async def reopened():
        async with AsyncSessionService(AsyncSqliteStore(path)) as service:
            search = AsyncToolSearch(service=service)
            search.prepare("s", TOOLS)
            offered = [t.name for t in await search.offered_tools("s")]
            assert offered == [SEARCH_TOOL_NAME, "get_weather", "stock_quote"]
            assert len(await discovered_events(service, "s")) == 2

    asyncio.run(first())
    asyncio.run(reopened())


class RacedService(AsyncSessionService):
    """An AsyncSessionService whose version-checked appends always lose a race: just before
    each, another writer appends `rival(session_id)` (a real append to the same store)."""

    def __init__(self, store, rival):
        super().__init__(store)
        self.rival = rival
        self.checked = 0

    async def append_events(self, session_id, events, expected_version, **kwargs):
        self.checked += 1
        rival = self.rival(session_id)
        if rival is not None:
            await super().append_event(rival)
        return await super().append_events(session_id, events, expected_version, **kwargs)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_search_that_loses_the_race_to_the_same_discovery_writes_nothing(kind, tmp_path):
    async def main():
        rivals = [discovery_event("s", ["send_email"], "mail")]

        def rival(session_id):
            return rivals.pop() if rivals else None

        async with RacedService(async_store(kind, tmp_path), rival) as service:
            await service.create("s")
            search = AsyncToolSearch(service=service)
            search.prepare("s", TOOLS)
            assert (await search.run_search("s", "email")).new == ()
            assert service.checked == 1  # read again after the conflict: nothing left to write
            assert discovery_payloads(await discovered_events(service, "s")) == [["send_email"]]
            assert await search.discovered("s") == ["send_email"]

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_log_too_busy_for_a_checked_append_still_gets_the_discovery(kind, tmp_path):
    async def main():
        def rival(session_id):
            return discovery_event(session_id, [], "someone else")  # names nothing

        async with RacedService(async_store(kind, tmp_path), rival) as service:
            await service.create("s")
            search = AsyncToolSearch(service=service)
            search.prepare("s", TOOLS)
            assert (await search.run_search("s", "weather")).new == ("get_weather",)
            assert service.checked == CHECKED_ATTEMPTS
            payloads = discovery_payloads(await discovered_events(service, "s"))
            assert payloads == [[]] * CHECKED_ATTEMPTS + [["get_weather"]]
            assert await search.discovered("s") == ["get_weather"]
            assert (await search.run_search("s", "weather")).new == ()

    asyncio.run(main())
    assert f"that {CHECKED_ATTEMPTS} such attempts" in DOC.read_text(encoding="utf-8")


def test_no_lock_is_held_while_a_search_awaits_the_service(tmp_path):
    class SlowService(AsyncSessionService):
        """Holds every version-checked append until `go` is set."""

        def __init__(self, store):
            super().__init__(store)
            self.waiting = asyncio.Event()
            self.go = asyncio.Event()

        async def append_events(self, *args, **kwargs):
            self.waiting.set()
            await self.go.wait()
            return await super().append_events(*args, **kwargs)

    async def main():
        async with SlowService(AsyncMemoryStore()) as service:
            await service.create("s")
            search = AsyncToolSearch(service=service)
            search.prepare("s", TOOLS)
            pending = asyncio.create_task(search.run_search("s", "weather"))
            await asyncio.wait_for(service.waiting.wait(), timeout=5)
            # from another thread, as another event loop or a blocking caller would
            try:
                prepared = await asyncio.wait_for(
                    asyncio.to_thread(search.prepare, "t", TOOLS), timeout=5
                )
                assert prepared
                assert await asyncio.wait_for(asyncio.to_thread(search.sessions), 5) == 2
            finally:
                service.go.set()
            assert (await pending).new == ("get_weather",)

    asyncio.run(main())


def test_without_a_service_discoveries_are_kept_in_memory():
    async def main():
        search = AsyncToolSearch()
        search.prepare("s", TOOLS)
        assert [t.name for t in await search.offered_tools("s")] == [SEARCH_TOOL_NAME]
        results = await asyncio.gather(*(search.run_search("s", "email") for _ in range(5)))
        assert [r.new for r in results].count(("send_email",)) == 1
        assert await search.discovered("s") == ["send_email"]
        assert [t.name for t in await search.offered_tools("s")] == [SEARCH_TOOL_NAME, "send_email"]
        answer = await search.answer_call("s", "not json")
        assert '"error"' in answer
        search.evict("s")
        assert await search.discovered("s") == []

    asyncio.run(main())


def test_the_session_must_exist_to_search_or_offer_tools():
    async def main():
        async with AsyncSessionService(AsyncMemoryStore()) as service:
            search = AsyncToolSearch(service=service)
            search.prepare("ghost", TOOLS)
            with pytest.raises(SessionNotFound):
                await search.run_search("ghost", "email")
            with pytest.raises(SessionNotFound):
                await search.offered_tools("ghost")

    asyncio.run(main())


def test_each_twin_takes_its_own_service(tmp_path):
    blocking = SessionService(SqliteStore(tmp_path / "t.db"))
    try:
        with pytest.raises(InvalidInput, match="AsyncSessionService"):
            AsyncToolSearch(service=blocking)
    finally:
        blocking.close()
    service = AsyncSessionService(AsyncMemoryStore())
    with pytest.raises(InvalidInput, match="must be a SessionService, got AsyncSessionService"):
        ToolSearch(service=service)
    search = AsyncToolSearch(max_results=3, service=service)
    assert search.service is service
    assert search.search_tool_definition().parameters["properties"]["max_results"]["default"] == 3
    assert repr(search).startswith("AsyncToolSearch(index=Bm25ToolIndex")


def test_searches_cancelled_midway_leave_whole_discoveries(tmp_path):
    async def main():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "t.db")) as service:
            search = AsyncToolSearch(service=service)
            recorded = 0
            for n, delay in enumerate([0, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016]):
                session_id = f"s{n}"
                await service.create(session_id)
                search.prepare(session_id, TOOLS)
                tasks = [
                    asyncio.create_task(search.run_search(session_id, query))
                    for query in list(QUERIES) * 3
                ]
                await asyncio.sleep(delay)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                payloads = discovery_payloads(await discovered_events(service, session_id))
                assert all(payload for payload in payloads)  # no empty or partial event
                names = [name for payload in payloads for name in payload]
                assert len(names) == len(set(names))  # cut or not, each tool once
                recorded += len(names)
                # whatever was cut, the store and the search still work
                for query, name in QUERIES.items():
                    assert (await search.run_search(session_id, query)).names == [name]
                assert set(await search.discovered(session_id)) == set(QUERIES.values())
            return recorded

    assert asyncio.run(main()) > 0  # some searches got as far as recording before the cut
