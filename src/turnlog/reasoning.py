"""Which reasoning the model is sent back: the reasoning policy of the view.

The log keeps every `ReasoningPart` a provider returned. What is sent depends on the policy:

- "current_turn" (the default): the reasoning of the turn in progress is sent, that of finished
  turns is left out. Providers need only the current tool loop's reasoning: Anthropic refuses a
  tool result sent without the thinking blocks of the call it answers, and lets the thinking of
  earlier turns be left out.
- "all": every reasoning part in the view is sent.
- "none": no reasoning part is sent, not even the turn in progress's. For providers without
  reasoning round trips only: Anthropic with thinking enabled answers 400 to a tool loop whose
  thinking blocks are left out.

A turn is a user message and what follows it up to the next user message; the turn in progress
is the last one (the whole conversation when it has no user message). Over messages, a
summary's shadow prompt is a user message like any other: what it follows is compacted away.

Pure: no I/O.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final, Literal, TypeAlias, get_args

import msgspec

from turnlog.errors import InvalidInput
from turnlog.events import Message, SessionEvent
from turnlog.parts import Part, ReasoningPart, TextPart, only_text, part_text

__all__ = [
    "DEFAULT_REASONING",
    "REASONING_POLICIES",
    "ReasoningPolicy",
    "SentReasoning",
    "check_counted_reasoning",
    "check_reasoning_policy",
    "reasoning_end",
    "strip_foreign_reasoning",
    "strip_reasoning",
    "without_reasoning",
]

ReasoningPolicy: TypeAlias = Literal["all", "current_turn", "none"]
"""Which reasoning parts are sent: every one, the turn in progress's, or none."""

REASONING_POLICIES: Final[tuple[str, ...]] = get_args(ReasoningPolicy)
"""The policies, in the order of `ReasoningPolicy`."""

DEFAULT_REASONING: Final[ReasoningPolicy] = "current_turn"
"""The policy when none is given."""


def check_reasoning_policy(policy: object, what: str = "reasoning") -> ReasoningPolicy:
    """`policy`, checked.

    Returns:
        The policy.

    Raises:
        InvalidInput: it is not one of "all", "current_turn", "none".
    """
    if not isinstance(policy, str) or policy not in REASONING_POLICIES:
        raise InvalidInput(
            f"{what} must be one of {', '.join(repr(p) for p in REASONING_POLICIES)}, got "
            f"{policy!r}: 'current_turn' sends the reasoning of the turn in progress only, 'all' "
            "sends every reasoning part, 'none' sends none (for providers without reasoning "
            "round trips)"
        )
    return policy  # type: ignore[return-value]  # one of REASONING_POLICIES


_SENT_RANK: dict[str, int] = {"none": 0, "current_turn": 1, "all": 2}
"""Policies by how much reasoning they send: each sends all that the ones before it send."""


def check_counted_reasoning(sent: ReasoningPolicy, *measures: object) -> None:
    """Refuse a strategy or trigger that counts less reasoning than the turn runner sends.

    A measure's `reasoning` attribute (`WindowCompactionStrategy`, `ToolOutputCompactionStrategy`,
    `TokenCountTrigger`; the triggers of a `CompositeCompactionTrigger` are looked into) says
    which reasoning its counts include. Counting less than is sent would let a token budget or
    a trigger undercount the prompt; counting more only overestimates it, and is allowed. A
    measure without the attribute (one of your own) is not checked.

    Raises:
        InvalidInput: a measure counts less reasoning than `sent`.
    """
    for measure in measures:
        inner = getattr(measure, "triggers", None)
        if isinstance(inner, tuple):
            check_counted_reasoning(sent, *inner)
        counted = getattr(measure, "reasoning", None)
        if _SENT_RANK.get(counted if isinstance(counted, str) else "", 2) < _SENT_RANK[sent]:
            raise InvalidInput(
                f"{measure!r} counts reasoning={counted!r} but the runner sends "
                f"reasoning={sent!r}: its token counts would leave out reasoning that is "
                f"sent; build it with reasoning={sent!r} too"
            )


def strip_reasoning(messages: Sequence[Message], policy: ReasoningPolicy) -> list[Message]:
    """`messages` with the reasoning parts `policy` leaves out removed.

    A message that loses reasoning parts is rebuilt from the parts that remain (its text derived
    from them again; its role, tool calls and metadata kept). Only assistant messages carry
    reasoning; the others are returned as they are. A message whose parts were nothing but
    reasoning (and blank text), with no tool call, is returned unchanged, so the list keeps its
    length and the view its pairs: such a message breaks the view rules either way, and
    `repair_messages` leaves it out.

    Args:
        messages: a view's messages, oldest first.
        policy: "current_turn" removes the reasoning before the last user message, "none" all of
            it, "all" none of it.

    Returns:
        A new list, one message for each of `messages`.

    Raises:
        InvalidInput: `policy` is not a reasoning policy.
    """
    out = list(messages)
    for at in range(reasoning_end([m.role for m in messages], policy)):
        out[at] = without_reasoning(out[at])
    return out


def reasoning_end(roles: Sequence[str | None], policy: ReasoningPolicy) -> int:
    """Where `policy` stops leaving reasoning out, in a sequence of messages with these roles.

    The reasoning of the messages before the returned position is not sent; that of the others
    is. The same rule as `strip_reasoning`, on roles alone (so a compaction pass can apply it
    to a view's outline without decoding its events).

    Args:
        roles: the messages' roles, oldest first (None for an event that is no message).
        policy: the reasoning policy.

    Returns:
        0 for "all"; `len(roles)` for "none"; for "current_turn", the position of the last
        user message (0 when there is none: the whole sequence is the turn in progress).

    Raises:
        InvalidInput: `policy` is not a reasoning policy.
    """
    policy = check_reasoning_policy(policy)
    if policy == "all":
        return 0
    if policy == "none":
        return len(roles)
    return next((i for i in range(len(roles) - 1, -1, -1) if roles[i] == "user"), 0)


def without_reasoning(message: Message) -> Message:
    """`message` rebuilt without its reasoning parts, as `strip_reasoning` sends it.

    Returns:
        A new message, its text derived from the parts that remain and its role, tool calls
        and metadata kept; `message` itself when it holds no reasoning, or when nothing but
        blank text would be left and it calls no tool (see `strip_reasoning`).
    """
    if message.role != "assistant" or not any(type(p) is ReasoningPart for p in message.parts):
        return message
    return _rebuilt(message, tuple(p for p in message.parts if type(p) is not ReasoningPart))


def strip_foreign_reasoning(
    messages: Sequence[Message], provider: str
) -> tuple[list[Message], frozenset[str]]:
    """`messages` without the reasoning parts of every provider but `provider`.

    A provider's reasoning means nothing to another one, and its signatures or encrypted
    content are refused there: when a session changes providers, the reasoning the old one
    returned stays in the log and is not sent to the new one. Messages are rebuilt as by
    `without_reasoning`.

    Returns:
        A new list, one message for each of `messages`, and the providers whose reasoning was
        left out (empty when there was none).
    """
    out = list(messages)
    found: set[str] = set()
    for at, message in enumerate(out):
        if message.role != "assistant" or not message.parts:
            continue
        others = {
            p.provider for p in message.parts if type(p) is ReasoningPart and p.provider != provider
        }
        if others:
            found |= others
            out[at] = _rebuilt(
                message,
                tuple(
                    p
                    for p in message.parts
                    if type(p) is not ReasoningPart or p.provider == provider
                ),
            )
    return out, frozenset(found)


def _rebuilt(message: Message, kept: tuple[Part, ...]) -> Message:
    """`message` with only the parts `kept` (see `without_reasoning`)."""
    if not message.tool_calls and all(type(p) is TextPart and not p.text.strip() for p in kept):
        return message
    # The rest of `message` was checked when it was built, and taking parts away breaks none of
    # its rules: derive the text and the parts as `Message` does (a message of text alone has no
    # parts), without checking it all again (a compaction pass rebuilds thousands of these).
    parts = () if only_text(kept) else kept
    return msgspec.structs.replace(message, text=part_text(kept), parts=parts)


class SentReasoning:
    """`strip_reasoning` over the messages of stored events, remembering what it rebuilt.

    A turn runner strips the view's reasoning before every model call, and a tool loop sends
    the same finished turns again each round: a stored event never changes, so the message
    rebuilt without its reasoning is kept (by session, id and seq, least recently used first
    out, at most `maxsize`) and the next call takes it back instead of rebuilding it.

    Args:
        policy: the reasoning policy.
        maxsize: the most rebuilt messages kept.

    Raises:
        InvalidInput: `policy` is not a reasoning policy.
    """

    __slots__ = ("_cache", "_lock", "maxsize", "policy")

    def __init__(self, policy: ReasoningPolicy, maxsize: int = 4_096) -> None:
        self.policy: ReasoningPolicy = check_reasoning_policy(policy)
        self.maxsize = maxsize
        self._cache: OrderedDict[tuple[str, str, int], Message] = OrderedDict()
        self._lock = threading.Lock()

    def strip(self, events: Sequence[SessionEvent], messages: Sequence[Message]) -> list[Message]:
        """`strip_reasoning(messages, policy)`, `messages[i]` being the message of
        `events[i]` as it is sent (an assistant message exactly as stored)."""
        out = list(messages)
        cache, lock = self._cache, self._lock
        for at in range(reasoning_end([m.role for m in messages], self.policy)):
            message = out[at]
            if message.role != "assistant" or not message.parts:
                continue
            event = events[at]
            key = None if event.seq is None else (event.session_id, event.id, event.seq)
            if key is not None:
                with lock:
                    kept = cache.get(key)
                    if kept is not None:
                        cache.move_to_end(key)
                if kept is not None:
                    out[at] = kept
                    continue
            stripped = without_reasoning(message)
            if key is not None and stripped is not message:
                with lock:
                    cache[key] = stripped
                    if len(cache) > self.maxsize:
                        cache.popitem(last=False)
            out[at] = stripped
        return out
