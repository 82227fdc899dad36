"""What a turn of the runner gives back, and the ids of the events it writes.

Pure records and helpers shared by `SessionChat` and `AsyncSessionChat` (turnlog.chat,
turnlog.chat_async).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from turnlog.compaction.base import CompactionResult
from turnlog.events import Message, SessionEvent, ToolCall, ToolResult, new_id
from turnlog.models.base import ChatResponse, Usage

__all__ = ["ChatEvent", "ChatTurn", "ToolRun", "TurnIds", "total_usage"]


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool call the runner ran, and the result the model reads."""

    call: ToolCall
    """The call, as the model made it."""
    result: ToolResult
    """What the tool returned (`is_error` when it raised, was unknown, or got bad arguments)."""


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """One finished turn: the reply, and everything the runner did for it."""

    session_id: str
    """The session."""
    reply: Message
    """The model's final assistant message (text, no tool calls)."""
    events: tuple[SessionEvent, ...]
    """The turn's events as stored, oldest first: the system prompt when it changed, the user
    message, each assistant message and tool message."""
    responses: tuple[ChatResponse, ...]
    """Each model call of this `send`, in order (none when `replayed`)."""
    tool_runs: tuple[ToolRun, ...]
    """Each tool call run by this `send`, in order."""
    usage: Usage
    """The provider's counts summed over `responses` (None where a provider gave none)."""
    compaction: CompactionResult | None
    """The compaction that ran after the turn (possibly unchanged), or None: no trigger was
    configured, or it failed (`compaction_error`)."""
    compaction_error: Exception | None = None
    """What the compaction after the turn raised; the turn itself stands (it was logged)."""
    replayed: bool = False
    """True when the request id named a turn already finished in the log: nothing was asked
    of the model, and the stored reply is returned."""

    @property
    def text(self) -> str:
        """The reply's text ("" when it has none)."""
        return self.reply.text or ""


ChatEvent: TypeAlias = str | ToolRun | ChatTurn
"""What `stream` yields: text deltas (`str`) as they arrive, a `ToolRun` per tool call run, and
the `ChatTurn` last."""


def total_usage(responses: Sequence[ChatResponse]) -> Usage:
    """The counts of several calls summed; a field is None when no call reported it."""

    def add(values: list[int | None]) -> int | None:
        given = [v for v in values if v is not None]
        return sum(given) if given else None

    return Usage(
        input_tokens=add([r.usage.input_tokens for r in responses]),
        output_tokens=add([r.usage.output_tokens for r in responses]),
        cached_input_tokens=add([r.usage.cached_input_tokens for r in responses]),
        reasoning_tokens=add([r.usage.reasoning_tokens for r in responses]),
    )


class TurnIds:
    """The ids of a turn's events: one prefix, then a suffix per step.

    With a request id the prefix is derived from the session and the request (`rq-` and 24 hex
    digits of a hash), so a `send` retried with the same request id writes the same ids, and the
    store's rule that a stored id is not appended twice makes the retry a no-op; without one,
    the prefix is random. Suffixes: `-x` the results closing calls an earlier, interrupted turn
    left open, `-n` the note closing an earlier turn left without a reply, `-s` the system
    prompt, `-u` the user message, `-a{n}` the assistant message of model call n (from 0),
    `-t{n}` the tool results answering it, `-c{n}` the claim before they run (`at_most_once`).
    """

    __slots__ = ("prefix",)

    def __init__(self, session_id: str, request_id: str | None) -> None:
        if request_id is None:
            self.prefix = new_id()
        else:
            digest = hashlib.blake2b(digest_size=12)
            digest.update(session_id.encode("utf-8", "surrogatepass"))
            digest.update(b"\0")
            digest.update(request_id.encode("utf-8", "surrogatepass"))
            self.prefix = f"rq-{digest.hexdigest()}"

    @property
    def system(self) -> str:
        """The system prompt's event id."""
        return f"{self.prefix}-s"

    @property
    def closing(self) -> str:
        """The id of the tool message that closes calls an interrupted turn left open."""
        return f"{self.prefix}-x"

    @property
    def no_reply(self) -> str:
        """The id of the assistant message that closes an earlier turn left without a reply."""
        return f"{self.prefix}-n"

    @property
    def user(self) -> str:
        """The user message's event id."""
        return f"{self.prefix}-u"

    def assistant(self, call: int) -> str:
        """The event id of the assistant message of model call `call`."""
        return f"{self.prefix}-a{call}"

    def claim(self, call: int) -> str:
        """The id of the claim appended before the tools of model call `call` run."""
        return f"{self.prefix}-c{call}"

    def tools(self, call: int) -> str:
        """The event id of the tool message answering model call `call`."""
        return f"{self.prefix}-t{call}"

    def mine(self, view: Sequence[SessionEvent]) -> list[SessionEvent]:
        """The events of `view` this turn wrote, oldest first."""
        head = f"{self.prefix}-"
        return [e for e in view if e.id.startswith(head)]

    def step(self, event: SessionEvent) -> int:
        """The model call an `-a{n}` or `-t{n}` event belongs to (0 for the others)."""
        tail = event.id[len(self.prefix) + 2 :]
        return int(tail) if tail.isdigit() else 0
