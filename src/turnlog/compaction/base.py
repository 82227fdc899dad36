"""The shapes compaction is made of: requests, results, and the strategy, trigger and summarizer
types."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Protocol, TypeAlias

from turnlog.compaction.boundary import CompactionBoundary
from turnlog.events import Message, Session, SessionEvent
from turnlog.lazy import LazyEvents
from turnlog.tokens import TokenCounter

__all__ = [
    "NOT_FIRED",
    "NOT_SMALLER",
    "CompactionRequest",
    "CompactionResult",
    "CompactionStrategy",
    "CompactionSummarizer",
    "CompactionTrigger",
    "SummaryRequest",
    "count_turns",
    "not_smaller",
    "warn_if_refires",
]


def count_turns(view: Sequence[SessionEvent]) -> int:
    """The turns of a view: its non-synthetic user messages (read from the outline of a
    `LazyEvents`, decoding nothing)."""
    if isinstance(view, LazyEvents):
        return len(view.turn_starts)
    # `SessionEvent.starts_turn`, spelled out: a view of 10,000 events is walked in 1 ms
    return sum(
        1 for e in view if not e.synthetic and (m := e.message) is not None and m.role == "user"
    )


@dataclass(frozen=True, slots=True)
class CompactionRequest:
    """What a trigger and a strategy decide on."""

    session: Session
    """The session."""
    view: Sequence[SessionEvent]
    """Its active view, in view order: a tuple, or a `LazyEvents` when the service read it
    from a store that reads lazily (it behaves as a tuple; its events are decoded when
    read)."""
    turn_count: int
    """The view's turns (non-synthetic user messages)."""

    @classmethod
    def of(cls, session: Session, view: Sequence[SessionEvent]) -> CompactionRequest:
        """A request for `view`, with its turns counted (a `LazyEvents` is kept as it is)."""
        return cls(session, _frozen(view), count_turns(view))


CompactionTrigger: TypeAlias = Callable[[CompactionRequest], bool | Awaitable[bool]]
"""Decides whether to compact: any callable taking a `CompactionRequest` and returning a bool.

`AsyncSessionService` also awaits a trigger that returns an awaitable (an async function)."""


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What a summarizer is given."""

    session: Session
    """The session."""
    prior_summary: Sequence[SessionEvent]
    """The summary a previous pass left, to build on; empty when there is none."""
    covered: Sequence[SessionEvent]
    """The events leaving the view, oldest first (without the prior summary)."""
    preserved: Sequence[SessionEvent]
    """The recent events that stay, for continuity."""
    token_counter: TokenCounter | None = None
    """The strategy's token counter, for a summary's token cap; None for the default counter."""


CompactionSummarizer: TypeAlias = Callable[
    [SummaryRequest], list[Message] | Awaitable[list[Message]]
]
"""Condenses what leaves the view into the messages of a summary turn; `[]` declines.

An async summarizer (one that returns an awaitable) is awaited by `AsyncSessionService`; the
blocking `SessionService` refuses it with `InvalidInput`."""


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a compaction pass decided. `unchanged` results wrote nothing."""

    unchanged: bool
    """True when nothing left the view and nothing was (or is to be) written."""
    conflict: bool = False
    """True when another writer appended first; nothing was written. Retry if you like."""
    covered_events: Sequence[SessionEvent] = ()
    """The events that left the view (a cleared one too: its stand-in took its place); they
    stay in the log. A tuple, or a `LazyEvents` (decoded when read) when the pass read its
    view lazily."""
    pinned_events: tuple[SessionEvent, ...] = ()
    """Kept at the front of the view: the system prompt, a preamble, a carried-forward summary."""
    preserved_events: tuple[SessionEvent, ...] = ()
    """The recent events kept verbatim."""
    summary: tuple[Message, ...] = ()
    """The summary turn, as messages; empty for a plain window."""
    summary_events: tuple[SessionEvent, ...] = ()
    """The synthetic events that record the summary."""
    stand_in_events: tuple[SessionEvent, ...] = ()
    """The synthetic events that take the place of cleared ones in the view (the boundary's
    `replaced` maps each to its original); appended after the summary events."""
    tokens_estimated_saved: int = 0
    """Tokens of the covered events minus tokens of the summary, by the strategy's counter."""
    boundary: CompactionBoundary | None = None
    """The boundary to append; None when unchanged."""
    view: Sequence[SessionEvent] = field(default=(), repr=False)
    """The active view after this pass (the view before it when unchanged: then a
    `LazyEvents` when the pass read it lazily)."""
    reason: str = ""
    """Why nothing was written, for an unchanged result ("the trigger did not fire", "the turns fit
    the window last_turns(10)", "the summarizer declined", "the result would not be smaller
    than the view: ..."); "" when the pass wrote."""
    refires: bool = False
    """True when the pass wrote and the trigger still fires on the view it wrote: the next
    check compacts again at once (the turn runner and the framework adapters log a WARNING;
    see "Sizing a trigger and a window" in docs/compaction.md). Set by the service, which asks
    the trigger once more."""

    @classmethod
    def nothing(cls, view: Sequence[SessionEvent] = (), reason: str = "") -> CompactionResult:
        """A result that changes nothing, and why."""
        return cls(unchanged=True, view=_frozen(view), reason=reason)

    def as_conflict(self) -> CompactionResult:
        """This pass lost the race: unchanged, `conflict=True`, nothing to write."""
        nothing = CompactionResult.nothing(reason="another writer appended first")
        return replace(nothing, conflict=True)

    def events_to_append(self, session_id: str) -> list[SessionEvent]:
        """The boundary event followed by the summary events and the stand-ins; empty when
        unchanged."""
        if self.unchanged or self.boundary is None:
            return []
        return [self.boundary.to_event(session_id), *self.summary_events, *self.stand_in_events]


NOT_FIRED: Final = "the trigger did not fire"
"""The `reason` of a compaction whose trigger did not fire."""


def warn_if_refires(session_id: str, result: CompactionResult) -> None:
    """Log a WARNING when `result.refires` and the pass wrote a summary: for the loops that
    compact on every turn (the turn runner, the framework adapters), where it means a new
    summary, a model call, each turn. (A plain window that cuts every turn costs no call.)"""
    if result.refires and result.boundary is not None and result.summary_events:
        import logging

        logging.getLogger("turnlog.compaction").warning(
            "session %r: the trigger still fires on the view %s just wrote, so the next turn "
            "compacts again (a new summary each turn defeats the prompt cache); keep the "
            "window and the summary well under the trigger (docs/compaction.md, sizing)",
            session_id,
            result.boundary.strategy,
        )


NOT_SMALLER: Final = "the result would not be smaller than the view"
"""How the `reason` of a pass that would not shrink the view starts."""


def not_smaller(removed: int, added: int) -> str:
    """The reason of a pass that would not shrink the view: `added` tokens for `removed`."""
    return f"{NOT_SMALLER} ({added:,} tokens would stand in for {removed:,})"


def _frozen(view: Sequence[SessionEvent]) -> Sequence[SessionEvent]:
    """`view` as a tuple; a `LazyEvents` (read-only already) is kept, nothing decoded."""
    return view if isinstance(view, LazyEvents) else tuple(view)


class CompactionStrategy(Protocol):
    """Decides what leaves the view. Pure: no I/O, no clock."""

    @property
    def name(self) -> str:
        """A short name, recorded in the boundary."""
        ...

    def compact(self, request: CompactionRequest) -> CompactionResult:
        """The pass over `request.view`. Never changes the log; the service writes the result."""
        ...
