"""The token cap of a summary turn, shared by the summarizers.

A summary turn's tokens are those of its two messages as the view sends them (`message_text`
of the shadow prompt and of the summary, counted by the strategy's `TokenCounter`), the same
measure a token-budget window and `TokenCountTrigger` use. So with a `token_budget(W)` window and
a summary capped at C, the view after a pass holds at most W + C tokens (unless the newest turn
alone is over W, which is always kept).
"""

from __future__ import annotations

from typing import Final

from turnlog.compaction._checks import describe
from turnlog.compaction.base import SummaryRequest
from turnlog.errors import InvalidInput
from turnlog.events import Message
from turnlog.text import message_text
from turnlog.tokens import TokenCounter, default_counter

__all__ = ["CUT_MARK", "check_cap", "counter_of", "cut_to_fit", "room_error", "turn_tokens"]

CUT_MARK: Final = "\n[... summary cut to fit its token cap]"
"""Ends a summary that was cut to its cap."""


def check_cap(value: object, what: str = "max_tokens") -> int | None:
    """`value` if it is None or a positive integer.

    Raises:
        InvalidInput: anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"{what} must be a positive integer or None, got {describe(value)}")
    return value


def counter_of(request: SummaryRequest) -> TokenCounter:
    """The token counter of `request` (the strategy's), else the default counter."""
    return request.token_counter if request.token_counter is not None else default_counter()


def turn_tokens(counter: TokenCounter, shadow_prompt: str, text: str) -> int:
    """The tokens of the summary turn `[user shadow_prompt, assistant text]`."""
    return counter.count(message_text(Message.user(shadow_prompt))) + counter.count(
        message_text(Message.assistant(text))
    )


def room_error(cap: int, counter: TokenCounter, shadow_prompt: str) -> InvalidInput | None:
    """The error to raise when a cap of `cap` cannot hold the shadow prompt and the cut mark."""
    least = turn_tokens(counter, shadow_prompt, CUT_MARK.strip())
    if least <= cap:
        return None
    return InvalidInput(
        f"max_tokens={cap} cannot hold a summary turn: the shadow prompt and the cut mark alone "
        f"take {least} tokens by {counter!r}; raise max_tokens; nothing was written"
    )


def cut_to_fit(counter: TokenCounter, shadow_prompt: str, text: str, cap: int) -> str:
    """`text`, or its longest prefix (cut at a line or word break when there is one) followed by
    `CUT_MARK`, such that the summary turn fits in `cap` tokens.

    Raises:
        InvalidInput: not even the shadow prompt and the cut mark fit (see `room_error`).
    """
    if turn_tokens(counter, shadow_prompt, text) <= cap:
        return text
    error = room_error(cap, counter, shadow_prompt)
    if error is not None:
        raise error

    def fits(n: int) -> bool:
        return turn_tokens(counter, shadow_prompt, _cut(text, n)) <= cap

    lo, hi = 0, len(text)  # fits(0) holds (checked above); find the largest n that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    n = lo
    brk = max(text.rfind("\n", 0, n), text.rfind(" ", 0, n))
    if brk > n // 2 and fits(brk):
        n = brk
    while n > 0 and not fits(n):  # a counter that is not monotonic in the prefix
        n -= 1
    return _cut(text, n)


def _cut(text: str, n: int) -> str:
    head = text[:n].rstrip()
    return (head + CUT_MARK) if head else CUT_MARK.strip()
