"""Running one compaction pass, in both flavours: the hand-written twins that the service's
generated code calls (`scripts/async_to_sync.py` turns `fires_async` into `fires`)."""

from __future__ import annotations

import inspect
from typing import cast

from turnlog.compaction.base import (
    CompactionRequest,
    CompactionResult,
    CompactionStrategy,
    CompactionTrigger,
)
from turnlog.errors import InvalidInput

__all__ = ["fires", "fires_async", "run_pass", "run_pass_async"]


def _refuse(value: object, what: str) -> None:
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: close it, so nothing warns later
        raise InvalidInput(
            f"the {what} is async (it returned an awaitable): use AsyncSessionService, which "
            "awaits it; nothing was written"
        )


def fires(trigger: CompactionTrigger, request: CompactionRequest) -> bool:
    """Whether `trigger` fires. Raises `InvalidInput` for an async trigger."""
    fired = trigger(request)
    _refuse(fired, "trigger")
    return bool(fired)


async def fires_async(trigger: CompactionTrigger, request: CompactionRequest) -> bool:
    """Whether `trigger` fires, awaiting it when it is async."""
    fired = trigger(request)
    return bool(await fired if inspect.isawaitable(fired) else fired)


def run_pass(strategy: CompactionStrategy, request: CompactionRequest) -> CompactionResult:
    """`strategy.compact(request)`. Raises `InvalidInput` for an async summarizer or strategy."""
    result = strategy.compact(request)
    _refuse(result, "strategy")
    return result


async def run_pass_async(
    strategy: CompactionStrategy, request: CompactionRequest
) -> CompactionResult:
    """The strategy's pass, awaiting an async summarizer: `compact_async(request)` where the
    strategy has one (as `WindowCompactionStrategy` does), else `compact(request)`, awaited when
    it returns an awaitable."""
    compact_async = getattr(strategy, "compact_async", None)
    if callable(compact_async):
        return cast(CompactionResult, await compact_async(request))
    result: object = strategy.compact(request)
    if inspect.isawaitable(result):
        result = await result
    return cast(CompactionResult, result)
