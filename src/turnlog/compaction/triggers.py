"""Triggers: when to compact. Any callable `(CompactionRequest) -> bool` is a trigger."""

from __future__ import annotations

from collections.abc import Sequence

from turnlog.compaction._sent import SentTokens
from turnlog.compaction.base import CompactionRequest, CompactionTrigger
from turnlog.compaction.reported import latest_report
from turnlog.errors import InvalidInput
from turnlog.events import SessionEvent
from turnlog.lazy import LazyEvents
from turnlog.reasoning import DEFAULT_REASONING, ReasoningPolicy
from turnlog.tokens import TokenCounter, event_tokens

__all__ = ["CompositeCompactionTrigger", "TokenCountTrigger", "TurnCountTrigger", "sent_events"]


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
        self.threshold = _positive(threshold, "a token-count trigger's threshold")
        if not isinstance(reported, bool):
            raise InvalidInput(f"reported must be True or False, got {reported!r}")
        self.reported = reported
        self._tokens = event_tokens(token_counter)
        self._sent = SentTokens(self._tokens, reasoning)

    @property
    def reasoning(self) -> ReasoningPolicy:
        """Which reasoning parts the estimate counts: "current_turn", "all" or "none"."""
        return self._sent.policy

    def tokens(self, request: CompactionRequest) -> int:
        """The tokens of what `request`'s view sends: the larger of reported (plus the estimate
        of what came after the report) and estimated, or estimated."""
        sent = _sent_outlined(request.view)
        report = latest_report(sent) if self.reported else None
        counts = self._sent.counts(sent)
        estimate = sum(counts)
        if report is None:
            return estimate
        return max(report.input_tokens + sum(counts[report.index :]), estimate)

    def __call__(self, request: CompactionRequest) -> bool:
        return self.tokens(request) >= self.threshold

    def __repr__(self) -> str:
        flag = "" if self.reported else ", reported=False"
        if self.reasoning != DEFAULT_REASONING:
            flag += f", reasoning={self.reasoning!r}"
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
