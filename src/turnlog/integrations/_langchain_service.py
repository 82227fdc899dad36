"""The service calls of `turnlog.integrations.langchain`, in a blocking and an async form.

Private: the history and the middleware share it. It does not import LangChain.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Final

from turnlog.compaction import (
    CompactionResult,
    CompactionStrategy,
    CompactionTrigger,
)
from turnlog.compaction.base import warn_if_refires
from turnlog.errors import InvalidInput, SessionNotFound, VersionConflict
from turnlog.events import Message, SessionEvent
from turnlog.service import SessionService
from turnlog.service_async import AsyncSessionService

__all__ = ["CLEAR_STRATEGY", "Backend", "Service"]

CLEAR_STRATEGY: Final = "clear"
"""The `strategy` named by the boundary that a `clear()` appends: "clear", as every adapter's
clearing boundary is named, so they read alike in a log."""
_TRIES: Final = 8

Service = SessionService | AsyncSessionService
"""A turnlog service: the blocking one, or the async one."""


class Backend:
    """The few service calls the adapters make, in a blocking and an async form.

    Over a `SessionService`, the async forms run the blocking calls in a worker thread; over an
    `AsyncSessionService`, the blocking forms raise `InvalidInput` (a blocking call in an event
    loop is what an async service is there to avoid).
    """

    def __init__(
        self,
        service: Service,
        trigger: CompactionTrigger | None,
        strategy: CompactionStrategy | None,
        retries: int,
        owner: str,
    ) -> None:
        if not isinstance(service, (SessionService, AsyncSessionService)):
            raise InvalidInput(
                f"{owner} needs a SessionService or an AsyncSessionService, "
                f"got {type(service).__name__}"
            )
        if (trigger is None) != (strategy is None):
            raise InvalidInput(
                f"{owner} compacts with a trigger and a strategy: pass both (e.g. "
                "trigger=TurnCountTrigger(20), strategy=WindowCompactionStrategy(...)) or neither"
            )
        self.service = service
        self.trigger = trigger
        self.strategy = strategy
        self.retries = retries
        self.owner = owner

    def _sync(self, what: str) -> SessionService:
        if isinstance(self.service, SessionService):
            return self.service
        raise InvalidInput(
            f"{self.owner} is over an AsyncSessionService: use the async form ({what}), or "
            "give it a SessionService"
        )

    # blocking

    def append(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        service = self._sync("aadd_messages / ainvoke")
        if not events:
            return
        conflict = None
        for _ in range(_TRIES):
            try:
                service.append_events(session_id, events, service.version(session_id))
                return
            except SessionNotFound:
                service.get_or_create(session_id)
            except VersionConflict as exc:
                conflict = exc
        raise _gave_up(session_id, conflict)

    def view(self, session_id: str) -> list[Message]:
        service = self._sync("aget_messages / ainvoke")
        try:
            return service.with_bytes(session_id, service.view_messages(session_id))
        except SessionNotFound:
            return []

    def compact(self, session_id: str) -> CompactionResult | None:
        if self.trigger is None or self.strategy is None:
            return None
        service = self._sync("aadd_messages / ainvoke")
        result = service.compact(session_id, self.trigger, self.strategy, retries=self.retries)
        warn_if_refires(session_id, result)
        return result

    def clear(self, session_id: str) -> None:
        service = self._sync("aclear")
        with contextlib.suppress(SessionNotFound):
            service.clear_view(session_id, retries=_TRIES - 1)

    # async

    async def aappend(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        service = self.service
        if not isinstance(service, AsyncSessionService):
            await asyncio.to_thread(self.append, session_id, events)
            return
        if not events:
            return
        conflict = None
        for _ in range(_TRIES):
            try:
                await service.append_events(session_id, events, await service.version(session_id))
                return
            except SessionNotFound:
                await service.get_or_create(session_id)
            except VersionConflict as exc:
                conflict = exc
        raise _gave_up(session_id, conflict)

    async def aview(self, session_id: str) -> list[Message]:
        service = self.service
        if not isinstance(service, AsyncSessionService):
            return await asyncio.to_thread(self.view, session_id)
        try:
            return await service.with_bytes(session_id, await service.view_messages(session_id))
        except SessionNotFound:
            return []

    async def acompact(self, session_id: str) -> CompactionResult | None:
        service = self.service
        if not isinstance(service, AsyncSessionService):
            return await asyncio.to_thread(self.compact, session_id)
        if self.trigger is None or self.strategy is None:
            return None
        result = await service.compact(
            session_id, self.trigger, self.strategy, retries=self.retries
        )
        warn_if_refires(session_id, result)
        return result

    async def aclear(self, session_id: str) -> None:
        service = self.service
        if not isinstance(service, AsyncSessionService):
            await asyncio.to_thread(self.clear, session_id)
            return
        with contextlib.suppress(SessionNotFound):
            await service.clear_view(session_id, retries=_TRIES - 1)


def _gave_up(session_id: str, conflict: VersionConflict | None) -> Exception:
    """The error to raise when every try lost the race (or the session kept vanishing)."""
    if conflict is not None:
        return conflict
    return SessionNotFound(session_id)
