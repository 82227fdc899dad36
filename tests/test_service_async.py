"""AsyncSessionService: what only the async service does (async summarizers and triggers,
cancellation, closing, sharing a file with a blocking process). The behaviours both services
share run in both modes in tests/test_service.py and the other service tests."""

import asyncio
import subprocess
import sys
import textwrap
import threading

import pytest

from turnlog import (
    ChatModelSummarizer,
    CompactionWindow,
    EventType,
    InvalidInput,
    Message,
    SessionEvent,
    SessionService,
    SqliteStore,
    StoreError,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.service_async import AsyncSessionService
from turnlog.stores.memory_async import AsyncMemoryStore
from turnlog.stores.sqlite_async import AsyncSqliteStore
from turnlog.testing import AsyncScriptedChatModel


@pytest.fixture(params=["async-memory", "async-sqlite"])
def make_service(request, tmp_path):
    """A function that makes an AsyncSessionService (inside the running loop)."""

    def make():
        if request.param == "async-memory":
            return AsyncSessionService(AsyncMemoryStore())
        return AsyncSessionService(AsyncSqliteStore(tmp_path / "a.db"))

    return make


async def chat(service, sid, turns):
    for i in range(turns):
        await service.append_message(sid, Message.user(f"u{i}"))
        await service.append_message(sid, Message.assistant(f"a{i}"))


def run(coro):
    return asyncio.run(coro)


# -- async summarizers and triggers -------------------------------------------------------------


def test_an_async_summarizer_is_awaited(make_service):
    awaited = []

    async def summarize(request):
        await asyncio.sleep(0)
        awaited.append([e.message.text for e in request.covered])
        return [Message.user("recap?"), Message.assistant("they talked")]

    async def main():
        async with make_service() as service:
            sid = (await service.create()).id
            await chat(service, sid, 3)
            strategy = WindowCompactionStrategy(
                CompactionWindow.last_turns(1), summarizer=summarize
            )
            result = await service.compact(sid, TurnCountTrigger(2), strategy)
            return result, await service.view_messages(sid)

    result, messages = run(main())
    assert not result.unchanged and awaited == [["u0", "a0", "u1", "a1"]]
    assert [m.text for m in messages] == ["recap?", "they talked", "u2", "a2"]


def test_a_chat_model_summarizer_awaits_an_async_model(make_service):
    model = AsyncScriptedChatModel(["the gist"])

    async def main():
        async with make_service() as service:
            sid = (await service.create()).id
            for n in range(3):  # turns long enough for the summary to be the smaller
                await service.append_message(sid, Message.user(f"question {n}: " + "why? " * 40))
                await service.append_message(sid, Message.assistant(f"answer {n}: " + "so. " * 40))
            summarizer = ChatModelSummarizer(model)
            strategy = WindowCompactionStrategy(
                CompactionWindow.last_turns(1), summarizer=summarizer
            )
            await service.compact(sid, lambda r: True, strategy)
            return await service.view_messages(sid)

    messages = run(main())
    assert len(model.calls) == 1
    assert messages[1] == Message.assistant("the gist")


def test_an_async_summarizer_that_fails_writes_nothing(make_service):
    async def failing(request):
        await asyncio.sleep(0)
        raise TimeoutError("the model timed out")

    async def main():
        async with make_service() as service:
            sid = (await service.create()).id
            await chat(service, sid, 3)
            strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1), summarizer=failing)
            with pytest.raises(TimeoutError):
                await service.compact(sid, lambda r: True, strategy)
            return await service.events(sid)

    log = run(main())
    assert len(log) == 6 and not any(e.type == EventType.COMPACTION for e in log)


def test_an_async_trigger_is_awaited(make_service):
    asked = []

    async def trigger(request):
        await asyncio.sleep(0)
        asked.append(request.turn_count)
        return request.turn_count > 2

    async def main():
        async with make_service() as service:
            sid = (await service.create()).id
            strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
            await chat(service, sid, 2)
            first = await service.compact(sid, trigger, strategy)
            await chat(service, sid, 1)
            second = await service.compact(sid, trigger, strategy)
            return first, second

    first, second = run(main())
    # the third ask is the service's, on the view the second pass wrote (it stops firing)
    assert asked == [2, 3, 1]
    assert first.unchanged and not second.unchanged and not second.refires


def test_the_blocking_service_refuses_async_summarizers_and_triggers(tmp_path):
    async def summarize(request):
        return [Message.user("recap?"), Message.assistant("s")]

    async def trigger(request):
        return True

    with SessionService(SqliteStore(tmp_path / "s.db")) as service:
        sid = service.create().id
        for i in range(3):
            service.append_message(sid, Message.user(f"u{i}"))
            service.append_message(sid, Message.assistant(f"a{i}"))
        window = CompactionWindow.last_turns(1)
        with pytest.raises(InvalidInput, match=r"summarizer is async.*AsyncSessionService"):
            service.compact(
                sid, lambda r: True, WindowCompactionStrategy(window, summarizer=summarize)
            )
        model = ChatModelSummarizer(AsyncScriptedChatModel(["s"]))
        with pytest.raises(InvalidInput, match="AsyncSessionService"):
            service.compact(sid, lambda r: True, WindowCompactionStrategy(window, summarizer=model))
        with pytest.raises(InvalidInput, match=r"trigger is async.*AsyncSessionService"):
            service.compact(sid, trigger, WindowCompactionStrategy(window))
        assert service.version(sid) == 6  # nothing written; no coroutine left unawaited


# -- races whose other writer is an async callback (the blocking twins: tests/test_service.py) --


def test_a_pass_that_loses_the_race_to_an_async_trigger_writes_nothing(make_service):
    async def main():
        async with make_service() as service:
            sid = (await service.create()).id
            await chat(service, sid, 4)

            async def racing(request):
                await service.append_message(sid, Message.user("meanwhile"))
                return True

            strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
            result = await service.compact(sid, racing, strategy)
            return result, await service.version(sid), await service.view(sid)

    result, version, view = run(main())
    assert result.unchanged and result.conflict and result.boundary is None
    assert version == 9 and len(view) == 9


def test_compact_retries_a_race_lost_to_an_async_trigger(make_service):
    async def main():
        async with make_service() as service:
            sid = (await service.create()).id
            await chat(service, sid, 4)
            raced = []

            async def racing_once(request):
                if not raced:
                    raced.append(await service.append_message(sid, Message.user("meanwhile")))
                return True

            strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
            result = await service.compact(sid, racing_once, strategy, retries=1)
            return result, await service.view_messages(sid), await service.version(sid)

    result, messages, version = run(main())
    assert not result.conflict and [m.text for m in messages] == ["meanwhile"]
    assert version == 10


def test_a_summarizer_racing_an_append_on_another_task_conflicts(make_service):
    """While an async summarizer awaits its model, another task appends: the pass conflicts
    and writes nothing; with retries it compacts the new view."""

    async def main():
        async with make_service() as service:
            sid = (await service.create()).id
            await chat(service, sid, 3)
            summarizing = asyncio.Event()
            appended = asyncio.Event()

            async def slow_summary(request):
                summarizing.set()
                await appended.wait()
                return [Message.user("recap?"), Message.assistant("s")]

            async def other_writer():
                await summarizing.wait()
                await service.append_message(sid, Message.user("while summarizing"))
                appended.set()

            window = CompactionWindow.last_turns(1)
            strategy = WindowCompactionStrategy(window, summarizer=slow_summary)
            result, _ = await asyncio.gather(
                service.compact(sid, lambda r: True, strategy), other_writer()
            )
            return result, await service.events(sid)

    result, log = run(main())
    assert result.conflict and result.unchanged
    assert log[-1].message == Message.user("while summarizing")
    assert not any(e.type == EventType.COMPACTION for e in log)


# -- lifecycle ------------------------------------------------------------------------------


def test_leaving_the_context_closes_the_store(tmp_path):
    async def main():
        store = AsyncSqliteStore(tmp_path / "c.db")
        async with AsyncSessionService(store) as service:
            await service.create("s")
        with pytest.raises(StoreError, match="closed"):
            await store.find_session("s")
        threads = [t for t in threading.enumerate() if "turnlog-sqlite" in t.name]
        return threads

    assert run(main()) == []  # the worker threads are gone


def test_the_default_store_is_turnlog_db_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    async def main():
        async with AsyncSessionService() as service:
            assert isinstance(service.store, AsyncSqliteStore)
            await service.create("here")

    run(main())
    with SqliteStore(tmp_path / "turnlog.db") as store:
        assert store.find_session("here") is not None


def test_the_async_store_opens_nothing_until_used(tmp_path):
    path = tmp_path / "lazy.db"

    async def main():
        store = AsyncSqliteStore(path)
        assert not path.exists()
        assert await store.find_session("x") is None  # the first call opens the file
        assert path.exists()
        assert await store.open() is store  # and opening again is a no-op
        await store.close()

    run(main())


def test_a_cancelled_append_lands_whole_or_not_at_all(tmp_path):
    async def main():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "x.db")) as service:
            sid = (await service.create()).id
            outcomes = []
            for round_ in range(30):
                batch = []
                for i in range(50):
                    batch += [Message.user(f"{round_}.{i}?"), Message.assistant(f"{round_}.{i}")]
                events = [SessionEvent.for_message(sid, m) for m in batch]
                version = await service.version(sid)
                task = asyncio.create_task(service.append_events(sid, events, version))
                await asyncio.sleep(0.0005 * (round_ % 5))
                task.cancel()
                try:
                    await task
                    outcomes.append("landed")
                except asyncio.CancelledError:
                    outcomes.append("cancelled")
                await asyncio.sleep(0.05)  # a cancelled call's thread finishes its operation
                now = await service.version(sid)
                assert now in (version, version + len(events)), "half a batch landed"
            return outcomes, await service.events(sid)

    outcomes, log = run(main())
    assert "cancelled" in outcomes
    texts = [e.message.text for e in log]
    assert len(texts) == len(set(texts)) and len(texts) % 100 == 0


def test_a_blocking_process_and_an_async_one_share_one_database(tmp_path):
    path = tmp_path / "shared.db"
    with SessionService(SqliteStore(path)) as service:
        service.create("shared")
    writer = textwrap.dedent(
        f"""
        from turnlog import Message, SessionService, SqliteStore
        with SessionService(SqliteStore({str(path)!r})) as service:
            for i in range(200):
                service.append_message("shared", Message.user(f"sync {{i}}"))
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", writer])

    async def main():
        async with AsyncSessionService(AsyncSqliteStore(path)) as service:
            await asyncio.gather(
                *(service.append_message("shared", Message.user(f"async {i}")) for i in range(200))
            )
            return await service.events("shared")

    try:
        mine = run(main())
    finally:
        assert proc.wait(60) == 0
    with SessionService(SqliteStore(path)) as service:
        log = service.events("shared")
    assert [e.seq for e in log] == list(range(1, 401))
    texts = {e.message.text for e in log}
    assert texts == {f"sync {i}" for i in range(200)} | {f"async {i}" for i in range(200)}
    assert len(mine) >= 200
