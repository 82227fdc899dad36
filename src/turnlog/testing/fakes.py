"""Fakes for tests: a scripted chat model and a fake clock. Shipped in the wheel."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

from turnlog.errors import InvalidInput
from turnlog.events import Message
from turnlog.models.base import ChatResponse, StreamEvent, Usage
from turnlog.toolsearch.base import ToolReference

UsageOf = Callable[[Sequence[Message], Sequence[ToolReference] | None], Usage]
"""What a scripted model reports for a call: a function of the messages and tools sent."""

__all__ = ["AsyncScriptedChatModel", "FakeClock", "ScriptedChatModel"]


class ScriptedChatModel:
    """A chat model that answers from a script and records every call.

    It is both a summarizer's `ChatModel` (`complete`) and a turn runner's `ChatModelAdapter`
    (`respond`, `stream`). Each entry of `replies` is used once, in order: a string becomes an
    assistant message, a `Message` is returned as is, an exception is raised, and a callable is
    called with the messages. When the script runs out, the last entry repeats.

    Args:
        replies: the script.
        usage: what each `respond` reports; no counts by default.
        model: the model name responses carry.
        chunk: the size of the text deltas `stream` yields.
        provider: the provider it stands in for. A turn runner sends a model only its own
            provider's reasoning parts: give the provider of the `ReasoningPart`s the script
            returns ("anthropic", "openai", ...) to have them sent back.

    Raises:
        InvalidInput: `replies` is empty.
    """

    def __init__(
        self,
        replies: Iterable[str | Message | BaseException | Callable[[Sequence[Message]], Message]],
        *,
        usage: UsageOf | None = None,
        model: str = "scripted",
        chunk: int = 4,
        provider: str = "scripted",
    ) -> None:
        self.provider = provider
        self.replies = list(replies)
        if not self.replies:
            raise InvalidInput(
                "a scripted chat model needs at least one reply: ScriptedChatModel(['...'])"
            )
        self.calls: list[list[Message]] = []
        self.tools: list[list[ToolReference] | None] = []
        self.model = model
        self._usage = usage
        self._chunk = max(1, chunk)
        self._lock = threading.Lock()

    def complete(self, messages: Sequence[Message]) -> Message:
        return self._next(messages, None)

    def _next(self, messages: Sequence[Message], tools: Sequence[ToolReference] | None) -> Message:
        with self._lock:
            self.calls.append(list(messages))
            self.tools.append(None if tools is None else list(tools))
            at = min(len(self.calls), len(self.replies)) - 1
            reply = self.replies[at]
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Message):
            return reply
        if isinstance(reply, str):
            return Message.assistant(reply)
        return reply(messages)

    def _response(
        self,
        message: Message,
        messages: Sequence[Message],
        tools: Sequence[ToolReference] | None,
    ) -> ChatResponse:
        usage = Usage() if self._usage is None else self._usage(messages, tools)
        stop = "tool_calls" if message.tool_calls else "stop"
        return ChatResponse(message, usage, self.model, stop)

    def _deltas(self, message: Message) -> list[str]:
        text = message.text or ""
        return [text[i : i + self._chunk] for i in range(0, len(text), self._chunk)]

    def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> ChatResponse:
        return self._response(self._next(messages, tools), messages, tools)

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> Iterator[StreamEvent]:
        response = self.respond(messages, tools)
        yield from self._deltas(response.message)
        yield response


class AsyncScriptedChatModel(ScriptedChatModel):
    """`ScriptedChatModel` with coroutines: a stand-in for an asyncio model client."""

    async def complete(self, messages: Sequence[Message]) -> Message:  # type: ignore[override]
        await asyncio.sleep(0)  # a real client gives the loop away while it waits
        return super().complete(messages)

    async def respond(  # type: ignore[override]
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> ChatResponse:
        await asyncio.sleep(0)
        return super().respond(messages, tools)

    async def stream(  # type: ignore[override]
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> AsyncIterator[StreamEvent]:
        response = await self.respond(messages, tools)
        for delta in self._deltas(response.message):
            await asyncio.sleep(0)
            yield delta
        yield response


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
