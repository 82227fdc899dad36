"""How full a session's view is against its model's context window (`SessionChat.context_usage`).

Pure: no I/O, no clock. The turn runner reads the view and hands it here; the tokens are
counted as `TokenCountTrigger` counts them (the provider's last report while it still applies,
plus turnlog's estimate of what came after it, never below the estimate of everything), so the
share shown is the share at which `TokenCountTrigger.fraction` fires.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from turnlog.compaction.reported import USAGE_KEY
from turnlog.compaction.triggers import TokenCountTrigger
from turnlog.errors import InvalidInput
from turnlog.events import SessionEvent
from turnlog.lazy import LazyEvents
from turnlog.models.windows import ModelLimits, context_window
from turnlog.reasoning import ReasoningPolicy

__all__ = ["DEFAULT_CONTEXT_WARNING", "ContextMeter", "ContextUsage", "model_limits", "model_name"]

logger: Final = logging.getLogger("turnlog.chat")

DEFAULT_CONTEXT_WARNING: Final = 0.9
"""The share of the window above which the runner logs a WARNING, once per session."""


@dataclass(frozen=True, slots=True)
class ContextUsage:
    """How much of its model's context window a session's view takes."""

    session_id: str
    """The session."""
    tokens: int
    """The view's tokens as `TokenCountTrigger` counts them: the provider's report for the
    last prompt plus the estimate of what came after it while the report still describes the
    view, and never less than `estimated_tokens`."""
    estimated_tokens: int
    """turnlog's estimate of what the view sends (the runner's reasoning policy applied)."""
    reported_input_tokens: int | None
    """The input tokens the provider reported for the newest reply in the view (its stored
    usage); None when no reply there carries one. After a compaction it describes the prompt
    before it, and `tokens` no longer uses it."""
    window: int | None
    """The model's prompt window (`ModelLimits.prompt_window`); None when unknown."""
    share: float | None
    """`tokens / window`; None when the window is unknown."""


def model_name(model: object) -> str | None:
    """The name an adapter was built with (its `model` attribute), if it has one."""
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else None


def model_limits(model: object, limits: ModelLimits | None) -> ModelLimits | None:
    """The limits the runner uses: `limits` when given, else the table's for the model's
    name (`turnlog.models.windows.context_window`), else None.

    Raises:
        InvalidInput: `limits` is not a `ModelLimits`.
    """
    if limits is not None:
        if not isinstance(limits, ModelLimits):
            raise InvalidInput(
                "limits must be a ModelLimits (e.g. ModelLimits(context=128_000, "
                f"output=16_384)), got {type(limits).__name__}"
            )
        return limits
    name = model_name(model)
    return None if name is None else context_window(name)


def _last_reported(view: Sequence[SessionEvent]) -> int | None:
    """The input tokens of the newest assistant event of `view` that carries a report."""
    roles = view.roles if isinstance(view, LazyEvents) else None  # skip without decoding
    for index in range(len(view) - 1, -1, -1):
        if roles is not None and roles[index] != "assistant":
            continue
        event = view[index]
        if event.role != "assistant":
            continue
        entry = event.metadata.get(USAGE_KEY)
        if not isinstance(entry, dict):
            continue
        tokens = entry.get("input_tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0:
            return tokens
    return None


class ContextMeter:
    """Measures a runner's views against its model's window, and warns once per session.

    Args:
        limits: the model's limits; None when unknown (no share, no warning).
        reasoning: the runner's reasoning policy (what its estimate counts).
        warn_at: the share above which `measure` logs a WARNING on the "turnlog.chat" logger,
            the first time a session goes over it; None never warns.
        model: the model's name, for the warning.

    Raises:
        InvalidInput: `warn_at` is not above 0 and at most 1, nor None.
    """

    def __init__(
        self,
        limits: ModelLimits | None,
        reasoning: ReasoningPolicy,
        warn_at: float | None,
        model: str | None = None,
    ) -> None:
        if warn_at is not None and (
            isinstance(warn_at, bool)
            or not isinstance(warn_at, (int, float))
            or not 0 < warn_at <= 1
        ):
            raise InvalidInput(
                f"context_warning must be a share above 0 and at most 1, or None, got {warn_at!r}"
            )
        self.limits = limits
        self.warn_at = warn_at
        self.model = model
        self._reasoning: ReasoningPolicy = reasoning
        self._counter: TokenCountTrigger | None = None  # on first use: no tokenizer before
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def measure(self, session_id: str, view: Sequence[SessionEvent]) -> ContextUsage:
        """The usage of `view`, the view of `session_id`; logs the session's one WARNING when
        its share first exceeds `warn_at`."""
        if self._counter is None:
            self._counter = TokenCountTrigger(1, reasoning=self._reasoning)
        count = self._counter.count(view)
        window = None if self.limits is None else self.limits.prompt_window
        share = None if window is None else count.tokens / window
        usage = ContextUsage(
            session_id, count.tokens, count.estimated, _last_reported(view), window, share
        )
        if share is not None and self.warn_at is not None and share > self.warn_at:
            self._warn_once(usage)
        return usage

    def _warn_once(self, usage: ContextUsage) -> None:
        with self._lock:
            if usage.session_id in self._warned:
                return
            self._warned.add(usage.session_id)
        named = "" if self.model is None else f" of model {self.model!r}"
        logger.warning(
            "session %r holds %s tokens, %.0f%% of the %s-token context window%s: compact it "
            "(a trigger such as TokenCountTrigger.fraction(0.8)) or the next requests may not fit",
            usage.session_id,
            f"{usage.tokens:,}",
            100 * (usage.share or 0.0),
            f"{usage.window:,}",
            named,
        )
