"""Messages, events and sessions: the plain, immutable records of a conversation.

A leaf module: it imports nothing from turnlog but the errors and the content parts
(`turnlog.parts`, the leaf below it, which also holds the text and JSON checks used here), never
reads the clock and does no I/O. Timestamps are assigned by the store when an event is appended
(or passed by the caller).

Each record checks what it is given when it is built, raising `InvalidInput`; the codec, whose
values msgspec has typed in C, builds them without those checks (`trusted`), and so does a
store's copy of an event it has checked (`trusted_copy`). The typed payloads of turnlog's own
event types, `CompactionBoundary` and `ToolsDiscovered`, are beside this module, in
`turnlog.payloads`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Final,
    Literal,
    Protocol,
    TypeAlias,
    TypeVar,
    runtime_checkable,
)

import msgspec
from msgspec.structs import force_setattr

from turnlog.errors import InvalidInput
from turnlog.parts import (
    JsonValue,
    Part,
    TextPart,
    _check_text,
    _Checked,
    check_json,
    check_parts,
    only_text,
    part_text,
    plain_json,
)

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "EventType",
    "JsonValue",
    "Message",
    "Role",
    "Session",
    "SessionEvent",
    "TokenCount",
    "ToolCall",
    "ToolResult",
    "check_id",
    "check_json",
    "check_timestamp",
    "new_id",
    "plain_json",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]

ROLES: Final = frozenset({"system", "user", "assistant", "tool"})
MAX_ID_LENGTH: Final = 255
_EMPTY: Final[Mapping[str, JsonValue]] = {}
_CONTROL: Final = re.compile("[\\x00-\\x1f\\x7f-\\x9f]")
MIN_TIMESTAMP: Final = datetime(1, 1, 2, tzinfo=UTC)
"""The earliest timestamp a store accepts: every store reads it back in any time zone."""
MAX_TIMESTAMP: Final = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
"""The latest timestamp a store accepts (one day inside what Python's datetime can hold)."""

_R = TypeVar("_R")


@runtime_checkable
class PayloadRecord(Protocol):
    """The typed record of a payload (`SessionEvent.record`): `CompactionBoundary` and
    `ToolsDiscovered` (`turnlog.payloads`)."""

    def to_payload(self) -> dict[str, JsonValue]:
        """The payload, as plain JSON."""
        ...


if TYPE_CHECKING:

    def trusted(cls: type[_R], /, *args: Any, **kwargs: Any) -> _R:
        """A record of `cls` built from `args` and `kwargs` without its checks."""

else:
    trusted = msgspec.StructMeta.__call__
    """A record of a checked class (`_Checked`: the content parts, `ToolCall`, `ToolResult`,
    `Message`, `TokenCount`, `SessionEvent`, the payload records) built without its checks:
    the trusted path, for values that are checked already (the codec's, which msgspec typed in
    C; a store's copy of an event it has checked, `trusted_copy`). It is what the classes' own
    construction calls before it checks, so it costs less than a checked build, and it is
    thread-safe: records built meanwhile anywhere else are checked as always."""


def new_id() -> str:
    """A fresh random event or session id (32 hex characters)."""
    return uuid.uuid4().hex


def check_id(value: object, what: str) -> str:
    """Return `value` if it is a usable id, else raise `InvalidInput`.

    An id is a non-blank string of at most 255 characters, without control characters (C0,
    DEL or C1: U+0000-U+001F, U+007F-U+009F) or lone surrogates.

    Returns:
        `value`, unchanged.

    Raises:
        InvalidInput: `value` is not such a string.
    """
    text = _check_text(value, what)
    if not text.strip():
        raise InvalidInput(f"{what} must not be blank")
    if len(text) > MAX_ID_LENGTH:
        raise InvalidInput(f"{what} is {len(text)} characters long; the limit is {MAX_ID_LENGTH}")
    if _CONTROL.search(text):
        raise InvalidInput(f"{what} {text!r} contains a control character")
    return text


def check_timestamp(value: object, what: str) -> datetime:
    """`value` as a UTC datetime, if it is a timezone-aware datetime every store can hold.

    Returns:
        `value` converted to UTC (the same instant).

    Raises:
        InvalidInput: `value` is not a datetime, is naive, or lies outside
            `MIN_TIMESTAMP`..`MAX_TIMESTAMP` once converted to UTC.
    """
    if not isinstance(value, datetime):
        raise InvalidInput(f"{what} must be a timezone-aware datetime, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise InvalidInput(
            f"{what} must be timezone-aware: pass tzinfo (for example datetime.now(UTC))"
        )
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not MIN_TIMESTAMP <= utc <= MAX_TIMESTAMP:
        raise InvalidInput(
            f"{what} {value.isoformat()} is outside the range every store can hold "
            f"({MIN_TIMESTAMP.isoformat()} to {MAX_TIMESTAMP.isoformat()} in UTC): "
            "pass a time inside it"
        )
    return utc


def _metadata(value: Mapping[str, JsonValue] | None, what: str) -> Mapping[str, JsonValue]:
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{what} must be a mapping, got {type(value).__name__}")
    as_dict = dict(value)
    if check_json(as_dict, what):
        as_dict = plain_json(as_dict)
    return as_dict


class ToolCall(msgspec.Struct, frozen=True, array_like=True, gc=False, metaclass=_Checked):
    """A call the assistant asks the application to make."""

    id: str
    """The provider's call id; the matching `ToolResult.call_id` refers to it."""
    name: str
    """The tool's name."""
    arguments: str = "{}"
    """The arguments as a JSON string, exactly as the model produced them."""

    def _check(self) -> None:
        _check_text(self.id, "a tool call's id")
        _check_text(self.name, "a tool call's name")
        _check_text(self.arguments, "a tool call's arguments")


class ToolResult(msgspec.Struct, frozen=True, array_like=True, gc=False, metaclass=_Checked):
    """The application's answer to one `ToolCall`.

    A result that is more than text (an image a tool returns) carries `parts`; its `content` is
    then the text of its text parts (the same rule as `Message.text`).
    """

    call_id: str
    """The id of the call this answers."""
    name: str
    """The tool's name."""
    content: str
    """What the tool returned, as text (for a failed call: what went wrong). With `parts`: the
    texts of its text parts joined with "" (pass "" to have it derived)."""
    is_error: bool = False
    """True when the tool failed and `content` describes the failure."""
    parts: tuple[Part, ...] = ()
    """The result's parts in order, text parts included, when it holds more than text (images,
    files, audio, provider parts; never reasoning); empty for a result of text alone."""

    def _check(self) -> None:
        _check_text(self.call_id, "a tool result's call_id")
        _check_text(self.name, "a tool result's name")
        _check_text(self.content, "a tool result's content")
        if not isinstance(self.is_error, bool):
            raise InvalidInput(
                f"a tool result's is_error must be a bool, got {type(self.is_error).__name__}"
            )
        if not self.parts and isinstance(self.parts, tuple):
            return
        parts = check_parts(self.parts, "a tool result's parts", reasoning=False)
        if not parts:
            force_setattr(self, "parts", ())
            return
        derived = part_text(parts) or ""
        if self.content not in ("", derived):
            raise InvalidInput(
                f"a tool result's content {_clip(self.content)} differs from the text of its "
                f"parts {_clip(derived)}: pass content='' and put the text in the parts as "
                "TextParts"
            )
        force_setattr(self, "content", derived)
        force_setattr(self, "parts", () if only_text(parts) else parts)


class Message(msgspec.Struct, frozen=True, metaclass=_Checked):
    """One chat message. Use the constructors `system`, `user`, `assistant` and `tool`.

    A message is text, or parts. One that holds more than text (an image, a file, audio,
    reasoning, a provider's block) keeps all its parts in order in `parts`, text parts
    included, and its `text` is derived from them: their texts joined with "", or None when
    there is no text part. A message of text alone keeps `parts` empty however it was built,
    so that it is stored and compared exactly as before parts existed. Equality is field by
    field (parts part by part, bytes by value).
    """

    role: Role
    """Who speaks: "system", "user", "assistant" or "tool"."""
    text: str | None = None
    """The text; None for an assistant message that only calls tools, for a tool message, and
    for a message whose parts hold no text. With `parts`: derived from them."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls an assistant message makes."""
    tool_results: tuple[ToolResult, ...] = ()
    """The results a tool message carries; several for parallel calls."""
    metadata: Mapping[str, JsonValue] = {}
    """Free-form JSON the application attaches."""
    parts: tuple[Part, ...] = ()
    """The message's parts in order, text parts included, when it holds more than text; empty
    for a message of text alone. A tool message carries its parts in its results."""

    def _check(self) -> None:
        if self.role not in ROLES:
            raise InvalidInput(
                f"unknown role {self.role!r}: use one of system, user, assistant, tool"
            )
        if self.text is not None:
            _check_text(self.text, "message text")
        force_setattr(self, "tool_calls", tuple(self.tool_calls))
        force_setattr(self, "tool_results", tuple(self.tool_results))
        if self.tool_calls and self.role != "assistant":
            raise InvalidInput(f"only an assistant message carries tool calls, not {self.role!r}")
        if self.tool_results and self.role != "tool":
            raise InvalidInput(f"only a tool message carries tool results, not {self.role!r}")
        if self.role == "tool" and not self.tool_results:
            raise InvalidInput("a tool message needs at least one ToolResult")
        for call in self.tool_calls:
            if not isinstance(call, ToolCall):
                raise InvalidInput(f"tool_calls must hold ToolCall, got {type(call).__name__}")
        for result in self.tool_results:
            if not isinstance(result, ToolResult):
                raise InvalidInput(
                    f"tool_results must hold ToolResult, got {type(result).__name__}"
                )
        if self.parts or not isinstance(self.parts, tuple):
            self._check_parts()
        force_setattr(self, "metadata", _metadata(self.metadata, "message metadata"))

    def _check_parts(self) -> None:
        parts = check_parts(self.parts, "message parts", reasoning=self.role == "assistant")
        if not parts:
            force_setattr(self, "parts", ())
            return
        if self.role == "tool":
            raise InvalidInput(
                "a tool message carries its parts in its results: ToolResult(..., parts=...)"
            )
        derived = part_text(parts)
        if self.text is not None and self.text != derived:
            raise InvalidInput(
                f"message text {_clip(self.text)} differs from the text of its parts "
                f"{_clip(derived)}: leave text out and put it in the parts as a TextPart (a "
                "str given to Message.user, Message.system or Message.assistant(parts=...) "
                "becomes one)"
            )
        force_setattr(self, "text", derived)
        force_setattr(self, "parts", () if only_text(parts) else parts)

    @classmethod
    def system(cls, *content: str | Part) -> Message:
        """A system prompt, `Message.system("Be brief.")`; or text and parts in order (a str
        becomes a `TextPart`).

        Raises:
            InvalidInput: no content, or an item that is neither a str nor a part.
        """
        return cls._of("system", content)

    @classmethod
    def user(cls, *content: str | Part) -> Message:
        """A user message, `Message.user("hi")`; or text and parts in order (a str becomes a
        `TextPart`): `Message.user("What is this?", ImagePart("image/png", data=png))`.

        Raises:
            InvalidInput: no content, or an item that is neither a str nor a part.
        """
        return cls._of("user", content)

    @classmethod
    def assistant(
        cls,
        text: str | None = None,
        tool_calls: Sequence[ToolCall] = (),
        *,
        parts: Sequence[str | Part] = (),
    ) -> Message:
        """An assistant reply: text, tool calls, or both; or, instead of `text`, `parts` in
        order (a str becomes a `TextPart`) for a reply holding reasoning, images or a
        provider's blocks: `Message.assistant(parts=[ReasoningPart(...), "It is 3 C."])`.

        Raises:
            InvalidInput: both `text` and `parts`, or an item that is not a part.
        """
        if parts:
            if text is not None:
                raise InvalidInput(
                    "give the assistant's text as text or among its parts, not both: "
                    "Message.assistant(parts=[..., 'the text'])"
                )
            return cls("assistant", None, tuple(tool_calls), parts=_as_parts(parts))
        return cls("assistant", text, tuple(tool_calls))

    @classmethod
    def tool(cls, results: Sequence[ToolResult] | ToolResult) -> Message:
        """A tool message carrying one or several results."""
        if isinstance(results, ToolResult):
            results = (results,)
        return cls("tool", None, tool_results=tuple(results))

    @classmethod
    def _of(cls, role: Role, content: tuple[str | Part, ...]) -> Message:
        if len(content) == 1 and isinstance(content[0], str):
            return cls(role, content[0])  # text alone, as before parts
        if not content:
            raise InvalidInput(
                f"Message.{role}() needs content: text, parts, or both (Message.{role}('hello'))"
            )
        return cls(role, parts=_as_parts(content))


def _as_parts(content: Sequence[str | Part]) -> tuple[Part, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    return tuple(TextPart(c) if isinstance(c, str) else c for c in content)


def _clip(value: str | None) -> str:
    """`value` for an error message: at most 40 characters of it."""
    if value is None:
        return "(no text)"
    return repr(value if len(value) <= 40 else value[:40] + "...")


_TYPE_NAME: Final = re.compile(r"[A-Z][A-Z0-9_.]{0,63}")


@dataclass(frozen=True, slots=True)
class EventType:
    """The type of an event: `EventType.MESSAGE`, `EventType.COMPACTION`, or your own.

    Build your own with `EventType.of("ACME.AUDIT")`. An event of your own type carries a JSON
    payload: it is stored and returned by `EventFilter.all()`, but it is never part of the view
    and compaction never reads or covers it.
    """

    name: str
    """The name: 1-64 upper-case letters, digits, `_` or `.`, starting with a letter."""

    MESSAGE: ClassVar[EventType]
    COMPACTION: ClassVar[EventType]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _TYPE_NAME.fullmatch(self.name):
            raise InvalidInput(
                f"invalid event type name {self.name!r}: use 1-64 upper-case letters, digits, "
                "'_' and '.', starting with a letter (for example 'ACME.AUDIT')"
            )

    @classmethod
    def of(cls, name: str) -> EventType:
        """The event type called `name`.

        Raises:
            InvalidInput: unless `name` is 1-64 upper-case letters, digits, `_` or `.`,
                starting with a letter.
        """
        return cls(name)

    def __str__(self) -> str:
        return self.name


EventType.MESSAGE = EventType("MESSAGE")
EventType.COMPACTION = EventType("COMPACTION")


MAX_COUNTER_NAME: Final = 255


class TokenCount(msgspec.Struct, frozen=True, gc=False, metaclass=_Checked):
    """A message event's token count, as one named counter measured it.

    Stored with the event (`SessionEvent.tokens`) so that compaction and triggers read it
    instead of tokenizing the event again. A count is only used by the counter that made it:
    `counter` names the encoding and the version of the code that counted (for example
    `"o200k_base toktok-rs/0.3.0"`), and a counter with another name counts afresh.

    Not to be confused with the token usage a provider reports for a whole request, which the
    turn runner keeps in the assistant event's metadata (`turnlog.usage`).
    """

    counter: str
    """The identity of the counter that counted (`TokenCounter.identity`)."""
    count: int
    """The tokens of the event's `event_text`, by that counter."""

    def _check(self) -> None:
        if not isinstance(self.counter, str) or not 0 < len(self.counter) <= MAX_COUNTER_NAME:
            raise InvalidInput(
                f"a token count's counter must be a name of 1-{MAX_COUNTER_NAME} characters, "
                f"got {self.counter!r}"
            )
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise InvalidInput(f"a token count must be an integer >= 0, got {self.count!r}")


# Token counts, shared: `TokenCount` is immutable and a log's counts repeat (a few thousand
# distinct values in 10,000 events), so appends and whole-log reads use one record per distinct
# count instead of allocating one per event (fewer objects to make, keep and for the cyclic
# collector to visit). Bounded: at most _SHARED_COUNTERS counters, counts below _SHARED_BELOW.
_SHARED_COUNTERS: Final = 16
_SHARED_BELOW: Final = 1 << 16
_shared_counts: dict[str, dict[int, TokenCount]] = {}


def shared_token_count(counter: str, count: int) -> TokenCount:
    """`TokenCount(counter, count)` without its checks (the caller made them), shared when it
    can be."""
    by_count = _shared_counts.get(counter)
    if by_count is not None:
        shared = by_count.get(count)
        if shared is not None:
            return shared
    made = trusted(TokenCount, counter, count)
    if count < _SHARED_BELOW:
        if by_count is None:
            if len(_shared_counts) >= _SHARED_COUNTERS:
                return made
            by_count = _shared_counts.setdefault(counter, {})
        by_count[count] = made  # a race only makes an extra equal record: both are correct
    return made


class SessionEvent(msgspec.Struct, frozen=True, metaclass=_Checked):
    """One entry of a session's log. Build it with `for_message` or `for_payload`."""

    id: str
    """Unique across all sessions of a store. Appending an id again is a no-op."""
    session_id: str
    """The session whose log holds the event."""
    type: EventType
    """MESSAGE, COMPACTION, or a type of the application's."""
    message: Message | None = None
    """The message, for a MESSAGE event."""
    payload: JsonValue = None
    """The JSON payload, for every other type."""
    metadata: Mapping[str, JsonValue] = {}
    """Free-form JSON the application attaches."""
    synthetic: bool = False
    """True for the summary events a compaction writes."""
    seq: int | None = None
    """1-based position in the session's log, assigned by the store; None before it is stored."""
    timestamp: datetime | None = None
    """When it was stored (UTC), assigned by the store unless the caller gave one."""
    tokens: TokenCount | None = None
    """The message's token count, recorded at append by the service's counter (None when not
    counted yet, and for non-message events). Derived data: it takes no part in equality."""
    record: PayloadRecord | None = None
    """The payload as its typed record (`turnlog.payloads`), decoded once: a
    `CompactionBoundary` on a COMPACTION event, a `ToolsDiscovered` on a discovery, as the codec
    reads them and as `to_event` builds them; None for other types, and for an event built from
    a bare payload (`CompactionBoundary.from_event` then reads the payload). The same data as
    `payload`: it takes no part in equality."""

    def _check(self) -> None:
        check_id(self.id, "event id")
        check_id(self.session_id, "session id")
        if not isinstance(self.type, EventType):
            raise InvalidInput(f"event type must be an EventType, got {type(self.type).__name__}")
        if self.type == EventType.MESSAGE:
            if not isinstance(self.message, Message):
                raise InvalidInput("a MESSAGE event needs a Message")
            if self.payload is not None:
                raise InvalidInput("a MESSAGE event carries a message, not a payload")
        else:
            if self.message is not None:
                raise InvalidInput(f"a {self.type.name} event carries a payload, not a message")
            if check_json(self.payload, f"the payload of event {self.id!r}"):
                force_setattr(self, "payload", plain_json(self.payload))
            record = self.record
            if record is not None and (
                not isinstance(record, PayloadRecord) or record.to_payload() != self.payload
            ):
                raise InvalidInput(
                    f"the record of event {self.id!r} is not its payload: leave record out, or "
                    "build the event from the record (CompactionBoundary.to_event)"
                )
        if self.record is not None and self.message is not None:
            raise InvalidInput("a MESSAGE event carries no payload record")
        if self.synthetic and self.type != EventType.MESSAGE:
            raise InvalidInput("only message events can be synthetic")
        if self.tokens is not None:
            if not isinstance(self.tokens, TokenCount):
                raise InvalidInput(
                    f"tokens must be a TokenCount or None, got {type(self.tokens).__name__}"
                )
            if self.message is None:  # a MESSAGE event holds a Message (checked above)
                raise InvalidInput("only message events carry a token count")
        force_setattr(self, "metadata", _metadata(self.metadata, "event metadata"))
        if self.timestamp is not None:
            force_setattr(
                self, "timestamp", check_timestamp(self.timestamp, f"the timestamp of {self.id!r}")
            )

    def __eq__(self, other: object) -> bool:
        if type(other) is not SessionEvent:
            return NotImplemented
        return (
            self.id == other.id
            and self.session_id == other.session_id
            and self.type == other.type
            and self.seq == other.seq
            and self.synthetic == other.synthetic
            and self.timestamp == other.timestamp
            and self.message == other.message
            and self.payload == other.payload
            and self.metadata == other.metadata
        )

    __hash__ = None  # type: ignore[assignment]  # it holds a dict (metadata), as a dataclass would

    def __repr__(self) -> str:
        return (
            f"SessionEvent(id={self.id!r}, session_id={self.session_id!r}, type={self.type!r}, "
            f"message={self.message!r}, payload={self.payload!r}, metadata={self.metadata!r}, "
            f"synthetic={self.synthetic!r}, seq={self.seq!r}, timestamp={self.timestamp!r})"
        )

    @classmethod
    def for_message(
        cls,
        session_id: str,
        message: Message,
        *,
        event_id: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        synthetic: bool = False,
        timestamp: datetime | None = None,
        tokens: TokenCount | None = None,
    ) -> SessionEvent:
        """A MESSAGE event, with a fresh id unless `event_id` is given.

        Raises:
            InvalidInput: a field the event cannot hold (as the constructor checks them).
        """
        event = trusted(  # then checked: `cls(...)` does the same with keywords, more slowly
            cls,
            new_id() if event_id is None else event_id,
            session_id,
            EventType.MESSAGE,
            message,
            None,
            metadata or _EMPTY,
            synthetic,
            None,
            timestamp,
            tokens,
        )
        event._check()
        return event

    @classmethod
    def for_payload(
        cls,
        session_id: str,
        event_type: EventType,
        payload: JsonValue,
        *,
        event_id: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        timestamp: datetime | None = None,
    ) -> SessionEvent:
        """An event of a non-message type carrying a JSON payload."""
        if event_type == EventType.MESSAGE:
            raise InvalidInput("use SessionEvent.for_message for MESSAGE events")
        return cls(
            id=new_id() if event_id is None else event_id,
            session_id=session_id,
            type=event_type,
            payload=payload,
            metadata=metadata or _EMPTY,
            timestamp=timestamp,
        )

    def with_tokens(self, tokens: TokenCount | None) -> SessionEvent:
        """A copy of this event carrying `tokens` (the event is otherwise the same).

        Raises:
            InvalidInput: `tokens` is not a TokenCount, or this is not a message event.
        """
        if tokens is not None:
            if not isinstance(tokens, TokenCount):
                raise InvalidInput(f"tokens must be a TokenCount, got {type(tokens).__name__}")
            if self.message is None:
                raise InvalidInput("only message events carry a token count")
        return trusted_copy(self, tokens=tokens)

    @property
    def is_message(self) -> bool:
        """True for a MESSAGE event."""
        return self.message is not None

    @property
    def role(self) -> Role | None:
        """The message's role, or None for a non-message event."""
        return None if self.message is None else self.message.role

    @property
    def starts_turn(self) -> bool:
        """True for a non-synthetic user message: the start of a turn."""
        return not self.synthetic and self.message is not None and self.message.role == "user"


def trusted_copy(event: SessionEvent, **changes: Any) -> SessionEvent:
    """A copy of a checked `event` with `changes` (values the caller checked), not checked again.

    `msgspec.structs.replace` runs no check of a `_Checked` record: this is it, named for what
    the caller vouches for. A change of `payload` must come with its `record`.
    """
    return _replace(event, **changes)


_replace: Final = msgspec.structs.replace


@dataclass(frozen=True, slots=True)
class Session:
    """A conversation: its id, when it was created, when it expires, and metadata."""

    id: str
    """The session id."""
    created_at: datetime
    """When it was created (UTC)."""
    expires_at: datetime | None = None
    """When `delete_expired` may delete it; None to keep it."""
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)
    """Free-form JSON; stores can find sessions by a metadata key (`find_by_metadata`)."""

    def __post_init__(self) -> None:
        check_id(self.id, "session id")
        object.__setattr__(self, "metadata", _metadata(self.metadata, "session metadata"))
        for name in ("created_at", "expires_at"):
            value = getattr(self, name)
            if value is not None or name == "created_at":
                object.__setattr__(self, name, check_timestamp(value, f"session {name}"))
