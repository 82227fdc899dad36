"""What every chat-model adapter returns, and the protocols a turn runner calls.

Pure: plain records and protocols, no provider package, no I/O.

Streaming shape: `stream(messages, tools)` is an iterator (an async iterator for the async
adapters) of events. Each event before the last is a `str`, a piece of the reply's text as the
provider sent it; the last event is always the `ChatResponse`, the same one `respond` would have
returned (its text is the deltas joined). Tool calls arrive whole, in that final response::

    for event in model.stream(messages):
        if isinstance(event, ChatResponse):
            response = event
        else:
            print(event, end="", flush=True)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeAlias, runtime_checkable

from msgspec.structs import replace

from turnlog.errors import InvalidInput
from turnlog.events import Message
from turnlog.toolsearch.base import ToolReference

__all__ = [
    "CACHE_BREAKPOINT_KEY",
    "AsyncChatModelAdapter",
    "ChatModelAdapter",
    "ChatResponse",
    "StreamEvent",
    "Usage",
    "with_cache_breakpoint",
]

CACHE_BREAKPOINT_KEY: Final = "turnlog.cache_breakpoint"
"""Message metadata key: True on the message that ends the prompt's stable prefix (the system
prompt, the pinned events and the summary). The turn runner sets it on the copy it sends; an
adapter that supports prompt caching marks a cache breakpoint there
(`AnthropicChatModel(cache_prompt=True)`). Metadata is never sent, so the key itself never
reaches the provider."""


def client_settings(client: object, **settings: Any) -> dict[str, Any]:
    """The provider-client settings an adapter was given (those not None), to build its client.

    Raises:
        InvalidInput: a client of the caller's came with settings too (they would be ignored).
    """
    given = {k: v for k, v in settings.items() if v is not None}
    if client is not None and given:
        raise InvalidInput(
            f"pass either client or {', '.join(given)}, not both: configure your own "
            "client fully, or let turnlog build one"
        )
    return given


def with_cache_breakpoint(message: Message) -> Message:
    """A copy of `message` whose metadata marks it as the end of the stable prefix
    (`CACHE_BREAKPOINT_KEY` set to True); the stored message is left as it was."""
    return replace(message, metadata={**message.metadata, CACHE_BREAKPOINT_KEY: True})


@dataclass(frozen=True, slots=True)
class Usage:
    """The tokens the provider reports for one call; None where it reports nothing."""

    input_tokens: int | None = None
    """Every prompt token the provider counted, cached ones included (Anthropic reports the
    uncached, cache-read and cache-written tokens apart; this is their sum)."""
    output_tokens: int | None = None
    """The tokens of the reply."""
    cached_input_tokens: int | None = None
    """How many of `input_tokens` were read from the provider's prompt cache."""
    reasoning_tokens: int | None = None
    """How many of `output_tokens` the model spent reasoning (OpenAI's reasoning tokens,
    Gemini's thought tokens); None where the provider does not report them apart (Anthropic
    counts thinking in `output_tokens` alone)."""


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """One reply of a chat model."""

    message: Message
    """The assistant message: text, tool calls, or both."""
    usage: Usage
    """The tokens the provider reported."""
    model: str
    """The model that answered, as the provider names it (may differ from the one asked)."""
    stop_reason: str | None
    """Why the model stopped, in the provider's words: OpenAI's finish_reason ("stop",
    "tool_calls", "length", ...) or Anthropic's stop_reason ("end_turn", "tool_use",
    "max_tokens", ...); None when the provider gave none."""


StreamEvent: TypeAlias = str | ChatResponse
"""What `stream` yields: text deltas (`str`), then the `ChatResponse` last."""


@runtime_checkable
class ChatModelAdapter(Protocol):
    """A blocking chat model: what a turn runner and `ChatModelSummarizer` call.

    `OpenAIChatModel` and `AnthropicChatModel` implement it.
    """

    def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> ChatResponse:
        """The model's reply to `messages`, offered `tools`.

        Raises:
            ModelError: the provider failed the call.
        """
        ...

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> Iterator[StreamEvent]:
        """The reply as it arrives: text deltas, then the `ChatResponse`.

        Raises:
            ModelError: the provider failed the call (also while streaming).
        """
        ...

    def complete(self, messages: Sequence[Message]) -> Message:
        """The reply's message (the `turnlog.compaction.ChatModel` protocol).

        Raises:
            ModelError: the provider failed the call.
        """
        ...


@runtime_checkable
class AsyncChatModelAdapter(Protocol):
    """The asyncio twin of `ChatModelAdapter` (`AsyncOpenAIChatModel`, `AsyncAnthropicChatModel`).

    `complete` is a coroutine, which `ChatModelSummarizer` awaits under `AsyncSessionService`.
    """

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> ChatResponse:
        """The model's reply to `messages`, offered `tools`.

        Raises:
            ModelError: the provider failed the call.
        """
        ...

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> AsyncIterator[StreamEvent]:
        """The reply as it arrives: text deltas, then the `ChatResponse`.

        Raises:
            ModelError: the provider failed the call (also while streaming).
        """
        ...

    async def complete(self, messages: Sequence[Message]) -> Message:
        """The reply's message (the `turnlog.compaction.ChatModel` protocol).

        Raises:
            ModelError: the provider failed the call.
        """
        ...


class MalformedReply(ValueError):
    """A provider's reply that does not have the shape of its wire format (internal: the
    adapters turn it into `ModelError`)."""


class IncompleteReply(MalformedReply):
    """A streamed reply that ended before the provider's end marker (OpenAI's finish_reason,
    Anthropic's message_stop): a proxy or the server closed the body early, so the text and
    the tool calls read so far may be cut anywhere (internal, as `MalformedReply`)."""


class CappedReply(MalformedReply):
    """A reply the model stopped at its token cap where a cut is not acceptable: tool calls
    (the last one's arguments may be cut) or a summary (internal, as `MalformedReply`)."""

    def __init__(self, what: str, reason: str, outcome: str) -> None:
        self.what = what
        """What was cut: "its tool calls", "the summary"."""
        self.reason = reason
        """The stop reason as the provider named it ("length", "max_tokens")."""
        self.outcome = outcome
        """Why the cut reply is not used, and what became of it."""
        super().__init__(f"{what} cut at the token cap (stop reason {reason!r})")


class DuplicateCallId(MalformedReply):
    """A reply that gives two of its tool calls the same id (internal, as `MalformedReply`)."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        """The id used twice."""
        super().__init__(f"the reply calls the tool call id {call_id!r} twice")


CAP_REASONS: Final = frozenset({"length", "max_tokens"})
"""The stop reasons that mean the model hit the reply's token cap (OpenAI's finish_reason
"length", Anthropic's stop_reason "max_tokens")."""


def whole_reply(response: ChatResponse) -> ChatResponse:
    """`response`, checked to be a reply a turn can use: its call ids distinct, and no tool
    call cut at the token cap.

    Raises:
        DuplicateCallId: two calls share an id.
        CappedReply: the model stopped at its token cap while it was making tool calls.
    """
    seen: set[str] = set()
    for call in response.message.tool_calls:
        if call.id in seen:
            raise DuplicateCallId(call.id)
        seen.add(call.id)
    reason = response.stop_reason
    if response.message.tool_calls and reason is not None and reason in CAP_REASONS:
        outcome = "the last call's arguments may be cut, so no tool was run"
        raise CappedReply("its tool calls", reason, outcome)
    return response


def whole_summary(response: ChatResponse) -> ChatResponse:
    """`response`, a reply asked for its text alone (a summary), checked not to be cut short.

    Raises:
        CappedReply: the model stopped at its token cap, so the text is cut.
    """
    reason = response.stop_reason
    if reason is not None and reason in CAP_REASONS:
        outcome = "a summary cut short loses what it leaves out, so it was not kept"
        raise CappedReply("the summary", reason, outcome)
    return response


def reply_json(reply: object) -> object:
    """A reply object of a provider's SDK (a pydantic model, or a dict) as plain JSON: the
    fields the provider sent, as it sent them (none the SDK's model adds with a default, so a
    block kept verbatim, a `ProviderPart`, goes back as it came).

    Raises:
        MalformedReply: the client returned something else.
    """
    dump = getattr(reply, "model_dump", None)
    if callable(dump):
        return dump(mode="json", warnings=False, exclude_unset=True)
    if isinstance(reply, dict):
        return reply
    raise MalformedReply(f"the client returned {type(reply).__name__}, not a JSON object")


def field_of(body: object, key: str, kind: type | tuple[type, ...], what: str) -> object:
    """`body[key]` when `body` is a mapping and the value is of `kind`.

    Raises:
        MalformedReply: `body` is no mapping, or the value is missing or of another kind.
    """
    if not isinstance(body, dict):
        raise MalformedReply(f"{what} is not a JSON object")
    value = body.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise MalformedReply(f"{what} has no valid {key!r}")
    return value


def count(value: object) -> int | None:
    """A token count from a reply: a non-negative int, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None
