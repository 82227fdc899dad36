"""`WindowCompactionStrategy`: keep the recent conversation, cover (or summarize) the rest."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from turnlog.compaction._checks import check_function
from turnlog.compaction._sent import SentTokens
from turnlog.compaction.base import (
    CompactionRequest,
    CompactionResult,
    CompactionSummarizer,
    SummaryRequest,
    not_smaller,
)
from turnlog.compaction.boundary import CompactionBoundary
from turnlog.errors import InvalidInput
from turnlog.events import Message, SessionEvent, new_id
from turnlog.lazy import outline_of, pick, turn_starts
from turnlog.reasoning import DEFAULT_REASONING, ReasoningPolicy
from turnlog.rules import check_summary
from turnlog.tokens import EventTokens, TokenCounter, event_tokens

__all__ = ["CompactionWindow", "WindowCompactionStrategy"]

WindowKind = Literal["last_events", "last_turns", "token_budget"]
_KINDS: Final = frozenset(get_args(WindowKind))


@dataclass(frozen=True, slots=True)
class CompactionWindow:
    """How much of the conversation stays in the view.

    Build one with `last_events(n)`, `last_turns(n)` or `token_budget(n)`.
    """

    kind: WindowKind
    """Which measure `size` is in."""
    size: int
    """Events, turns or tokens."""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise InvalidInput(
                f"unknown window kind {self.kind!r}: build a window with "
                "CompactionWindow.last_events(n), last_turns(n) or token_budget(n)"
            )
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size <= 0:
            raise InvalidInput(f"a {self.kind} window needs a positive size, got {self.size!r}")

    @classmethod
    def last_events(cls, n: int = 20) -> CompactionWindow:
        """The last `n` events of the conversation (the default window, n=20)."""
        return cls("last_events", n)

    @classmethod
    def last_turns(cls, n: int) -> CompactionWindow:
        """The last `n` turns."""
        return cls("last_turns", n)

    @classmethod
    def token_budget(cls, n: int) -> CompactionWindow:
        """The newest events whose tokens fit in `n`, after the pinned events' tokens."""
        return cls("token_budget", n)

    def __str__(self) -> str:
        return f"{self.kind}({self.size})"


class WindowCompactionStrategy:
    """The one compaction strategy: a window, and optionally a summarizer.

    One pass, whatever the window:

    1. The latest stored system message is pinned first and never summarized; every earlier
       stored system message is superseded and leaves the view with any pass that cuts.
    2. The events before the first turn (a preamble) are pinned.
    3. Without a summarizer a prior summary is pinned and carried forward; with one it is handed
       over as the prior summary and covered by the new one.
    4. The window gives a raw cut among the turns; the cut moves forward to the next turn start
       (a turn is never split), and back to the newest turn when it would cover everything.
    5. The turns before the cut leave the view; a summary turn stands in for them.

    Pinned events take no slot of an event or turn window and come off a token budget first.
    Nothing is written when the turns fit the window, when there is no turn to cut at, or when
    the summarizer declines. Pure: no I/O, no clock.

    Tokens (a token budget, the saved estimate) are those of what is sent: an assistant message
    whose reasoning `reasoning` leaves out counts without its reasoning parts. The view and the
    log keep every part.

    Args:
        window: how much stays; `CompactionWindow.last_events(20)` by default.
        summarizer: condenses what leaves the view: a function `(SummaryRequest) ->
            list[Message]` such as `ChatModelSummarizer(model)`; None for a plain window.
        token_counter: for a token budget and the saved estimate; the default counter when None.
        reasoning: which reasoning parts the counts include, as the turn runner sends them:
            "current_turn" (the default, the runner's too) those of the turn in progress, so
            the reasoning of finished turns takes no room in a token budget; "all" every one;
            "none" none. See `turnlog.reasoning`.

    Raises:
        InvalidInput: `window` is not a `CompactionWindow`; `summarizer` is not None and not
            a function of one argument; `reasoning` is not "current_turn", "all" or "none".
    """

    def __init__(
        self,
        window: CompactionWindow | None = None,
        *,
        summarizer: CompactionSummarizer | None = None,
        token_counter: TokenCounter | None = None,
        reasoning: ReasoningPolicy = DEFAULT_REASONING,
    ) -> None:
        self.window = CompactionWindow.last_events(20) if window is None else window
        if not isinstance(self.window, CompactionWindow):
            raise InvalidInput("window must be a CompactionWindow")
        if summarizer is not None:
            check_function(
                summarizer,
                "summarizer",
                "(SummaryRequest) -> list[Message], e.g. ChatModelSummarizer(model), or None",
            )
        self.summarizer = summarizer
        self._tokens: EventTokens = event_tokens(token_counter)
        self._sent = SentTokens(self._tokens, reasoning)

    @property
    def reasoning(self) -> ReasoningPolicy:
        """Which reasoning parts the token counts include: "current_turn", "all" or "none"."""
        return self._sent.policy

    @property
    def name(self) -> str:
        """E.g. `window:last_turns(10)+summary`."""
        return f"window:{self.window}" + ("+summary" if self.summarizer else "")

    def __repr__(self) -> str:
        shown = "" if self.reasoning == DEFAULT_REASONING else f", reasoning={self.reasoning!r}"
        return f"WindowCompactionStrategy({self.window}, summarizer={self.summarizer!r}{shown})"

    def compact(self, request: CompactionRequest) -> CompactionResult:
        """One pass over `request.view`. See the class docstring.

        Raises:
            InvalidInput: the summarizer is async (it returned an awaitable): run the pass with
                `compact_async`, as `AsyncSessionService` does.
        """
        plan = self._plan(request)
        if isinstance(plan, CompactionResult):
            return plan
        reply = self._ask(plan)
        if inspect.isawaitable(reply):
            if inspect.iscoroutine(reply):
                reply.close()
            raise InvalidInput(
                "the summarizer is async (it returned an awaitable): compact with "
                "AsyncSessionService, or call compact_async; nothing was written"
            )
        return self._finish(request, plan, reply)

    async def compact_async(self, request: CompactionRequest) -> CompactionResult:
        """`compact`, awaiting the summarizer when it is async (a plain one is called as is)."""
        plan = self._plan(request)
        if isinstance(plan, CompactionResult):
            return plan
        reply = self._ask(plan)
        return self._finish(request, plan, await reply if inspect.isawaitable(reply) else reply)

    def _ask(self, plan: _Plan) -> list[Message] | Awaitable[list[Message]]:
        """The summarizer's reply for `plan` (an awaitable when it is async); [] without one."""
        if plan.summary_request is None or self.summarizer is None:
            return []
        return self.summarizer(plan.summary_request)

    def _plan(self, request: CompactionRequest) -> _Plan | CompactionResult:
        """Everything up to the summary; an unchanged result when nothing leaves the view.

        Planned on positions in the view from its roles and synthetic flags, in one walk (a
        `LazyEvents` view gives them without decoding an event: the pass then decodes only
        the events it keeps).
        """
        view = request.view
        roles, synthetic = outline_of(view)
        starts = turn_starts(view, roles, synthetic)  # positions of the turns' first events
        if not starts:
            return CompactionResult.nothing(view, "the view holds no turn to cut at")
        first_turn = starts[0]
        systems = _positions(roles, "system")
        head = [i for i in range(first_turn) if roles[i] != "system"]
        preamble = [i for i in head if not synthetic[i]]
        prior_summary = [i for i in head if synthetic[i]]
        conversation: Sequence[int]
        if systems and systems[-1] > first_turn:  # a system message among the turns
            conversation = [i for i in range(first_turn, len(roles)) if roles[i] != "system"]
            index = {position: k for k, position in enumerate(conversation)}
            turn_indexes = [index[s] for s in starts]  # every turn start is in the conversation
        else:
            conversation = range(first_turn, len(roles))
            turn_indexes = [s - first_turn for s in starts]

        pinned = systems[-1:] + preamble
        if self.summarizer is None:
            pinned += prior_summary

        cut = self._cut(view, conversation, turn_indexes, pinned)
        if cut == 0:
            return CompactionResult.nothing(view, f"the turns fit the window {self.window}")
        preserved = conversation[cut:]
        summary_request = None
        if self.summarizer is not None:
            # the superseded system messages and the cut conversation, in view order
            covered = sorted([*systems[:-1], *conversation[:cut]])
            summary_request = SummaryRequest(
                session=request.session,
                prior_summary=tuple(pick(view, prior_summary)),
                covered=tuple(pick(view, covered)),
                preserved=tuple(pick(view, preserved)),
                token_counter=self._tokens.counter,
            )
        return _Plan(view, pinned, preserved, summary_request)

    def _finish(
        self, request: CompactionRequest, plan: _Plan, reply: Sequence[Message]
    ) -> CompactionResult:
        """The result of `plan` with the summarizer's `reply` (empty without a summarizer)."""
        view = plan.view
        summary_messages = list(reply)
        if plan.summary_request is not None:
            if not summary_messages:
                return CompactionResult.nothing(view, "the summarizer declined")
            check_summary(summary_messages, "the summarizer's summary turn")
        session_id = request.session.id
        summary_events = tuple(
            SessionEvent.for_message(session_id, m, synthetic=True) for m in summary_messages
        )
        gone = _others(len(view), [*plan.pinned, *plan.preserved])
        covered = pick(view, gone)
        pinned = tuple(pick(view, plan.pinned))
        preserved = tuple(pick(view, plan.preserved))
        left, added = self._sent.total(view, gone), self._tokens.total(summary_events)
        saved = left - added
        if saved <= 0:
            return CompactionResult.nothing(view, not_smaller(left, added))
        boundary = CompactionBoundary(
            id=new_id(),
            pinned_event_ids=tuple(e.id for e in pinned),
            summary_event_ids=tuple(e.id for e in summary_events),
            preserved_event_ids=tuple(e.id for e in preserved),
            covered_event_count=len(covered),
            tokens_estimated_saved=saved,
            strategy=self.name,
        )
        return CompactionResult(
            unchanged=False,
            covered_events=covered,
            pinned_events=pinned,
            preserved_events=preserved,
            summary=tuple(summary_messages),
            summary_events=summary_events,
            tokens_estimated_saved=saved,
            boundary=boundary,
            view=(*pinned, *summary_events, *preserved),
        )

    def _cut(
        self,
        view: Sequence[SessionEvent],
        conversation: Sequence[int],
        starts: list[int],
        pinned: list[int],
    ) -> int:
        """The index in `conversation` (positions in `view`) of the first kept event; 0 keeps
        everything. `starts`: the indexes in `conversation` of the turns' first events."""
        size = self.window.size
        if self.window.kind == "last_turns":
            return starts[-size] if len(starts) > size else 0
        if self.window.kind == "last_events":
            raw = max(0, len(conversation) - size)
        else:
            budget = size - self._sent.total(view, pinned)
            raw = len(conversation)
            if budget > 0:
                counts = self._sent.counts(view, conversation)
                used = 0
                while raw > 0 and used + counts[raw - 1] <= budget:
                    raw -= 1
                    used += counts[raw]
        # forward to the next turn start; back to the newest turn when none is left
        return next((s for s in starts if s >= raw), starts[-1])


@dataclass(frozen=True, slots=True)
class _Plan:
    """A pass decided up to its summary: positions in `view`."""

    view: Sequence[SessionEvent]
    pinned: list[int]
    preserved: Sequence[int]
    summary_request: SummaryRequest | None


def _positions(roles: Sequence[str | None], role: str) -> list[int]:
    """The positions of `role` in `roles`, found in C (few, in a long view)."""
    found: list[int] = []
    at = -1
    for _ in range(roles.count(role)):
        at = roles.index(role, at + 1)
        found.append(at)
    return found


def _others(count: int, kept: list[int]) -> list[int]:
    """The positions below `count` not in `kept`, in order: ranges between the kept ones."""
    out: list[int] = []
    start = 0
    for position in sorted(set(kept)):
        out.extend(range(start, position))
        start = position + 1
    out.extend(range(start, count))
    return out
