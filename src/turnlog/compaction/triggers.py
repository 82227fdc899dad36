"""Triggers: when to compact. Any callable `(CompactionRequest) -> bool` is a trigger."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from turnlog.compaction._sent import SentTokens
from turnlog.compaction.base import CompactionRequest, CompactionTrigger
from turnlog.compaction.reported import latest_report
from turnlog.errors import InvalidInput
from turnlog.events import SessionEvent
from turnlog.lazy import LazyEvents
from turnlog.reasoning import DEFAULT_REASONING, ReasoningPolicy
from turnlog.tokens import TokenCounter, event_tokens

if TYPE_CHECKING:
    from fractions import Fraction

__all__ = [
    "CompositeCompactionTrigger",
    "SentCount",
    "TokenCountTrigger",
    "TurnCountTrigger",
    "bind_context_window",
    "sent_events",
]


def _positive(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"{what} must be a positive integer, got {value!r}")
    return value


def sent_events(view: Sequence[SessionEvent]) -> list[SessionEvent]:
    """What a model is sent of a view: the latest system message first, then the rest.

    Earlier (superseded) system messages are not sent.
    """
    latest = None
    for event in view:
        if event.role == "system":
            latest = event
    rest = [e for e in view if e.role != "system"]
    return rest if latest is None else [latest, *rest]


def _sent_outlined(view: Sequence[SessionEvent]) -> Sequence[SessionEvent]:
    """`sent_events`; of a `LazyEvents` view, picked by its outline and left lazy."""
    if not isinstance(view, LazyEvents):
        return sent_events(view)
    roles = view.roles
    systems = [i for i, role in enumerate(roles) if role == "system"]
    return view.select(systems[-1:] + [i for i, role in enumerate(roles) if role != "system"])


class TurnCountTrigger:
    """Fires when the view holds more than `n` turns (non-synthetic user messages).

    Raises:
        InvalidInput: `n` is not a positive integer.
    """

    def __init__(self, n: int) -> None:
        self.n = _positive(n, "a turn-count trigger's n")

    def __call__(self, request: CompactionRequest) -> bool:
        return request.turn_count > self.n

    def __repr__(self) -> str:
        return f"TurnCountTrigger({self.n})"


@dataclass(frozen=True, slots=True)
class SentCount:
    """The tokens of what a view sends, as `TokenCountTrigger` counts them."""

    tokens: int
    """The figure the trigger compares: `estimated`, or the provider's report plus the
    estimate of what came after it when that is larger."""
    estimated: int
    """turnlog's estimate of every event sent."""
    reported: int | None
    """The input tokens of the provider's report that still describes the start of the view
    (`turnlog.compaction.reported`); None when none does, or with `reported=False`."""


def _share(value: object) -> Fraction:
    """`value` as an exact fraction in (0, 1], read as written (0.8 is 4/5, not the float
    just above it), so `share * window` is the threshold a reader computes by hand."""
    from fractions import Fraction  # on first use: fractions is not part of `import turnlog`

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise InvalidInput(
            f"a token-count trigger's share must be above 0 and at most 1, got {value!r}"
        )
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


class TokenCountTrigger:
    """Fires when the tokens of what is sent reach `threshold`.

    What is sent: the latest system message, the summaries and the conversation. Each event is
    tokenized once; later calls hit the cache.

    With `reported=True` (the default), when the view holds an assistant message that the turn
    runner stored with the provider's token count (`turnlog.compaction.reported`) and the view
    still starts with the very prompt that count was made for, the tokens are the larger of two
    figures: that count plus the estimate of the events from that message on (what the model
    really counted, tool definitions and the provider's formatting included), and the estimate
    of every event. The estimate is a floor because some servers under-report: LiteLLM's
    streamed Messages API leaves cached tokens out of `input_tokens` (about 20 reported for a
    265-token prompt), and a trigger that believed it would never fire. Otherwise, and with
    `reported=False`, every event is estimated, in the same units as a token budget.

    An estimate counts what is sent: with `reasoning="current_turn"` (the default, the turn
    runner's too) the reasoning parts of finished turns are not counted, with "all" every one
    is, with "none" none is (see `turnlog.reasoning`); give it the runner's and the window's.

    `TokenCountTrigger.fraction(share)` fires at a share of a model's context window instead.

    Raises:
        InvalidInput: `threshold` is not a positive integer, `reasoning` not "current_turn",
            "all" or "none".
    """

    def __init__(
        self,
        threshold: int,
        token_counter: TokenCounter | None = None,
        *,
        reported: bool = True,
        reasoning: ReasoningPolicy = DEFAULT_REASONING,
    ) -> None:
        self.threshold: int | None = _positive(threshold, "a token-count trigger's threshold")
        """The tokens at which it fires; None for a fraction not yet given its window."""
        self.share: Fraction | None = None
        """Of a fraction trigger: the share of the window at which it fires; else None."""
        self.window: int | None = None
        """Of a fraction trigger: the window its threshold is a share of, once known."""
        if not isinstance(reported, bool):
            raise InvalidInput(f"reported must be True or False, got {reported!r}")
        self.reported = reported
        self._tokens = event_tokens(token_counter)
        self._sent = SentTokens(self._tokens, reasoning)

    @classmethod
    def fraction(
        cls,
        share: float,
        token_counter: TokenCounter | None = None,
        *,
        window: int | None = None,
        reported: bool = True,
        reasoning: ReasoningPolicy = DEFAULT_REASONING,
    ) -> TokenCountTrigger:
        """A trigger that fires when the tokens sent reach `share` of a context window.

        The threshold is `share * window` rounded up, `share` read as written: `fraction(0.8,
        window=200_000)` fires at 160,000 tokens. Without `window`, the turn runner binds it to
        its model's window when it is built (`SessionChat(..., trigger=...)`: the model's entry
        in `turnlog.models.windows`, or the runner's `limits=`); a trigger still without one
        raises `InvalidInput` when asked. The other arguments are `TokenCountTrigger`'s.

        Raises:
            InvalidInput: `share` is not above 0 and at most 1, `window` not a positive
                integer, or a bad `reported` or `reasoning`.
        """
        trigger = cls(1, token_counter, reported=reported, reasoning=reasoning)
        trigger.share = _share(share)
        trigger.threshold = None
        return trigger if window is None else trigger.bound(window)

    def bound(self, window: int) -> TokenCountTrigger:
        """A fraction trigger's copy with its threshold taken of `window` (this trigger
        unchanged); a trigger that is no fraction is returned as it is.

        Raises:
            InvalidInput: `window` is not a positive integer.
        """
        if self.share is None:
            return self
        window = _positive(window, "a token-count trigger's window")
        trigger = copy.copy(self)  # shares the counts' caches
        trigger.window = window
        trigger.threshold = max(1, -(-self.share.numerator * window // self.share.denominator))
        return trigger

    @property
    def reasoning(self) -> ReasoningPolicy:
        """Which reasoning parts the estimate counts: "current_turn", "all" or "none"."""
        return self._sent.policy

    def count(self, view: Sequence[SessionEvent]) -> SentCount:
        """The tokens of what `view` sends, with the figures they come from."""
        sent = _sent_outlined(view)
        report = latest_report(sent) if self.reported else None
        counts = self._sent.counts(sent)
        estimate = sum(counts)
        if report is None:
            return SentCount(estimate, estimate, None)
        tokens = max(report.input_tokens + sum(counts[report.index :]), estimate)
        return SentCount(tokens, estimate, report.input_tokens)

    def tokens(self, request: CompactionRequest) -> int:
        """The tokens of what `request`'s view sends: the larger of reported (plus the estimate
        of what came after the report) and estimated, or estimated."""
        return self.count(request.view).tokens

    def __call__(self, request: CompactionRequest) -> bool:
        if self.threshold is None:
            raise InvalidInput(
                f"{self!r} has no window to take its share of: pass window= to it, or give it "
                "to SessionChat, which binds it to its model's context window"
            )
        return self.tokens(request) >= self.threshold

    def __repr__(self) -> str:
        flag = "" if self.reported else ", reported=False"
        if self.reasoning != DEFAULT_REASONING:
            flag += f", reasoning={self.reasoning!r}"
        if self.share is not None:
            window = "" if self.window is None else f", window={self.window}"
            return f"TokenCountTrigger.fraction({float(self.share)!r}{window}{flag})"
        return f"TokenCountTrigger({self.threshold}{flag})"


class CompositeCompactionTrigger:
    """Combines triggers: `any_of(...)` fires when one fires, `all_of(...)` when all do."""

    def __init__(self, triggers: Sequence[CompactionTrigger], *, require_all: bool) -> None:
        if not triggers:
            raise InvalidInput("a composite trigger needs at least one trigger")
        for trigger in triggers:
            if not callable(trigger):
                raise InvalidInput(f"a trigger must be callable, got {trigger!r}")
        self.triggers = tuple(triggers)
        self.require_all = require_all

    @classmethod
    def any_of(cls, *triggers: CompactionTrigger) -> CompositeCompactionTrigger:
        """Fires when any of `triggers` fires (evaluated in order, stopping at the first)."""
        return cls(triggers, require_all=False)

    @classmethod
    def all_of(cls, *triggers: CompactionTrigger) -> CompositeCompactionTrigger:
        """Fires when all of `triggers` fire (evaluated in order, stopping at the first no)."""
        return cls(triggers, require_all=True)

    def __call__(self, request: CompactionRequest) -> bool:
        if self.require_all:
            return all(t(request) for t in self.triggers)
        return any(t(request) for t in self.triggers)

    def __repr__(self) -> str:
        kind = "all_of" if self.require_all else "any_of"
        return f"CompositeCompactionTrigger.{kind}{self.triggers!r}"


def bind_context_window(
    trigger: CompactionTrigger, window: int | None, model_name: str | None = None
) -> CompactionTrigger:
    """`trigger` with every `TokenCountTrigger.fraction` that has no window yet (inside a
    `CompositeCompactionTrigger` too) bound to `window`; the triggers given are not changed,
    and one with nothing to bind is returned as it is. A fraction given its own `window=`
    keeps it.

    Args:
        trigger: the trigger.
        window: the model's prompt window (`ModelLimits.prompt_window`); None when unknown.
        model_name: the model's name, for the error message.

    Raises:
        InvalidInput: a fraction trigger needs a window and `window` is None.
    """
    if isinstance(trigger, TokenCountTrigger):
        if trigger.share is None or trigger.threshold is not None:
            return trigger
        if window is None:
            named = "" if model_name is None else f" of model {model_name!r}"
            raise InvalidInput(
                f"{trigger!r} needs the context window{named}, which turnlog.models.windows "
                "does not know: pass limits=ModelLimits(context=...) to the runner, or window= "
                "to the trigger"
            )
        return trigger.bound(window)
    if isinstance(trigger, CompositeCompactionTrigger):
        inner = tuple(bind_context_window(t, window, model_name) for t in trigger.triggers)
        if all(a is b for a, b in zip(inner, trigger.triggers, strict=True)):
            return trigger
        return CompositeCompactionTrigger(inner, require_all=trigger.require_all)
    return trigger
