"""Fakes for tests: a scripted chat model and a fake clock. Shipped in the wheel."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta

from turnlog.errors import InvalidInput
from turnlog.events import Message

__all__ = ["AsyncScriptedChatModel", "FakeClock", "ScriptedChatModel"]


class ScriptedChatModel:
    """A `ChatModel` that answers from a script and records every call.

    Each entry of `replies` is used once, in order: a string becomes an assistant message, a
    `Message` is returned as is, an exception is raised, and a callable is called with the
    messages. When the script runs out, the last entry repeats.

    Raises:
        InvalidInput: `replies` is empty.
    """

    def __init__(
        self,
        replies: Iterable[str | Message | BaseException | Callable[[Sequence[Message]], Message]],
    ) -> None:
        self.replies = list(replies)
        if not self.replies:
            raise InvalidInput(
                "a scripted chat model needs at least one reply: ScriptedChatModel(['...'])"
            )
        self.calls: list[list[Message]] = []
        self._lock = threading.Lock()

    def complete(self, messages: Sequence[Message]) -> Message:
        with self._lock:
            self.calls.append(list(messages))
            at = min(len(self.calls), len(self.replies)) - 1
            reply = self.replies[at]
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Message):
            return reply
        if isinstance(reply, str):
            return Message.assistant(reply)
        return reply(messages)


class AsyncScriptedChatModel(ScriptedChatModel):
    """`ScriptedChatModel` with `async def complete`: a stand-in for an async model client."""

    async def complete(self, messages: Sequence[Message]) -> Message:  # type: ignore[override]
        await asyncio.sleep(0)  # a real client gives the loop away while it waits
        return super().complete(messages)


class FakeClock:
    """A clock that only moves when told to. Call it for the time; `advance` moves it."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta | float) -> datetime:
        """Move the clock forward by `delta` (a timedelta or seconds); returns the new time."""
        self.now += delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        return self.now
