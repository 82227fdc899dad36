"""Concurrency on one event loop: the race cases of the contract, written with asyncio tasks.

Part of `AsyncStoreContract`. Each case awaits many tasks on the test's event loop against the
async store itself (not through the blocking bridge): 100 tasks appending to one session with
expected versions lose and double nothing; compaction passes racing appends land whole or
conflict, and never hide or repeat an appended event.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from turnlog.compaction import (
    CompactionBoundary,
    CompactionWindow,
    TurnCountTrigger,
    WindowCompactionStrategy,
    sent_events,
)
from turnlog.errors import VersionConflict
from turnlog.events import EventType, Message, SessionEvent
from turnlog.rules import check_messages
from turnlog.service_async import AsyncSessionService
from turnlog.stores.protocol import SessionStore
from turnlog.stores.protocol_async import AsyncSessionStore
from turnlog.testing._base import msg, session_at

__all__ = ["AsyncioContract"]

_TASKS = 100


def _view_of(log: Sequence[SessionEvent]) -> list[SessionEvent]:
    """The view of a log, read off it here (an oracle independent of the stores' code)."""
    at = max((i for i, e in enumerate(log) if e.type == EventType.COMPACTION), default=None)
    if at is None:
        return list(log)
    boundary = CompactionBoundary.from_event(log[at])
    by_id = {e.id: e for e in log}
    head = (
        *boundary.pinned_event_ids,
        *boundary.summary_event_ids,
        *boundary.preserved_event_ids,
    )
    after = [e for e in log[at + 1 :] if e.id not in set(boundary.summary_event_ids)]
    return [by_id[i] for i in head] + after


class AsyncioContract:
    """Part of `AsyncStoreContract`; see the module docstring."""

    _run_on_loop: Callable[[Coroutine[Any, Any, Any]], Any]

    def _async_store(self, store: SessionStore) -> AsyncSessionStore:
        raise NotImplementedError

    def test_tasks_appending_with_expected_versions_lose_and_double_nothing(
        self, store: SessionStore
    ) -> None:
        astore = self._async_store(store)

        async def writer(n: int, conflicts: list[int]) -> None:
            event = msg("busy", Message.user(f"task {n}"), event_id=f"t{n}")
            version = await astore.version("busy")
            await asyncio.sleep(0)  # the application does something else: others run
            while True:
                try:
                    await astore.append_events("busy", [event], version)
                    return
                except VersionConflict as exc:
                    conflicts.append(n)
                    version = exc.actual

        async def race() -> int:
            await astore.create_session(session_at("busy"))
            conflicts: list[int] = []
            await asyncio.gather(*(writer(n, conflicts) for n in range(_TASKS)))
            return len(conflicts)

        conflicts = self._run_on_loop(race())
        events = store.events("busy")
        assert sorted(e.id for e in events) == sorted(f"t{n}" for n in range(_TASKS))
        assert [e.seq for e in events] == list(range(1, _TASKS + 1))
        assert store.version("busy") == _TASKS
        # the tasks did interleave: most of them lost a race at least once
        assert conflicts > 0

    def test_tasks_appending_at_the_end_get_one_seq_each(self, store: SessionStore) -> None:
        astore = self._async_store(store)

        async def race() -> list[int | None]:
            await astore.create_session(session_at("end"))
            stored = await asyncio.gather(
                *(
                    astore.append_event(msg("end", Message.user(f"m{n}"), event_id=f"e{n}"))
                    for n in range(_TASKS)
                )
            )
            return [e.seq for e in stored]

        seqs = self._run_on_loop(race())
        assert sorted(seqs) == list(range(1, _TASKS + 1))
        events = store.events("end")
        assert Counter(e.id for e in events) == Counter(f"e{n}" for n in range(_TASKS))

    def test_compactions_racing_appends_hide_and_repeat_nothing(self, store: SessionStore) -> None:
        astore = self._async_store(store)
        service = AsyncSessionService(astore)  # not closed: the fixture closes the store
        strategy = WindowCompactionStrategy(CompactionWindow.last_turns(2))
        appended: list[str] = []

        async def talker(n: int) -> None:
            for k in range(10):
                for message in (Message.user(f"{n}.{k}?"), Message.assistant(f"{n}.{k}!")):
                    eid = f"{n}-{k}-{message.role}"
                    event = await service.append_message("chat", message, event_id=eid)
                    appended.append(event.id)
                await asyncio.sleep(0)

        talking = True

        async def compactor() -> None:
            while talking:
                await service.compact("chat", TurnCountTrigger(3), strategy, retries=3)
                await asyncio.sleep(0)

        async def talk() -> None:
            nonlocal talking
            await asyncio.gather(*(talker(n) for n in range(4)))
            talking = False

        async def race() -> None:
            await service.create("chat")
            await asyncio.gather(talk(), *(compactor() for _ in range(3)))
            await service.compact("chat", TurnCountTrigger(3), strategy)  # one more, alone

        self._run_on_loop(race())
        log = store.events("chat")
        messages = [e for e in log if e.type == EventType.MESSAGE and not e.synthetic]
        assert Counter(e.id for e in messages) == Counter(appended), "an event lost or doubled"
        # every boundary landed whole: its own ids name events of the log
        ids = {e.id for e in log}
        view = store.view("chat")
        assert {e.id for e in view} <= ids
        assert len({e.id for e in view}) == len(view), "an event shows twice in the view"
        # what came after the newest boundary is all in the view, the newest event last
        last_boundary = max(
            (i for i, e in enumerate(log) if e.type == EventType.COMPACTION), default=-1
        )
        after = [e.id for e in log[last_boundary + 1 :] if not e.synthetic]
        view_ids = [e.id for e in view]
        if after:
            assert view_ids[-len(after) :] == after
        # every pass saw the whole view it replaced: none wrote at a version it had not read
        for p, event in enumerate(log):
            if event.type == EventType.COMPACTION:
                boundary = CompactionBoundary.from_event(event)
                named = {*boundary.pinned_event_ids, *boundary.preserved_event_ids}
                before = _view_of(log[:p])
                left = [e for e in before if e.id not in named]
                assert len(left) == boundary.covered_event_count, (
                    f"the boundary at seq {event.seq} covers events its pass never saw"
                )
        # and the view keeps the rules: it is a conversation a model accepts
        check_messages([e.message for e in sent_events(view) if e.message is not None], "view")
        assert any(e.type == EventType.COMPACTION for e in log), "no compaction ever landed"
