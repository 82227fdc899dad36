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

from collections.abc import Sequence
from typing import Final, Literal, TypeAlias, get_args

from turnlog.errors import InvalidInput
from turnlog.events import Message
from turnlog.parts import ReasoningPart, TextPart

__all__ = [
    "DEFAULT_REASONING",
    "REASONING_POLICIES",
    "ReasoningPolicy",
    "check_reasoning_policy",
    "strip_reasoning",
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
    policy = check_reasoning_policy(policy)
    if policy == "all":
        return list(messages)
    end = len(messages)
    if policy == "current_turn":
        end = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), 0)
    out = list(messages)
    for at in range(end):
        out[at] = _without_reasoning(out[at])
    return out


def _without_reasoning(message: Message) -> Message:
    """`message` rebuilt without its reasoning parts; itself when it has none, or when nothing
    but blank text would be left and it calls no tool."""
    if message.role != "assistant" or not any(type(p) is ReasoningPart for p in message.parts):
        return message
    kept = tuple(p for p in message.parts if type(p) is not ReasoningPart)
    if not message.tool_calls and all(type(p) is TextPart and not p.text.strip() for p in kept):
        return message
    return Message(message.role, None, message.tool_calls, metadata=message.metadata, parts=kept)
