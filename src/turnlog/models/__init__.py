"""Chat models: one adapter per provider wire format, each behind its own extra.

`OpenAIChatModel` / `AsyncOpenAIChatModel` speak Chat Completions and `OpenAIResponsesModel` /
`AsyncOpenAIResponsesModel` the Responses API (both `pip install 'turnlog[openai]'`);
`AnthropicChatModel` / `AsyncAnthropicChatModel` speak the Messages API (`pip install
'turnlog[anthropic]'`); `GeminiChatModel` / `AsyncGeminiChatModel` the Gemini API (`pip install
'turnlog[gemini]'`). They are imported on first use, so `import turnlog` and
`import turnlog.models` never need any of those packages. See docs/models.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

from turnlog.models.base import (
    CACHE_BREAKPOINT_KEY,
    AsyncChatModelAdapter,
    ChatModelAdapter,
    ChatResponse,
    StreamEvent,
    Usage,
    with_cache_breakpoint,
)
from turnlog.models.windows import MODEL_WINDOWS, ModelLimits, ModelWindow, context_window

if TYPE_CHECKING:
    from turnlog.models.anthropic import AnthropicChatModel as AnthropicChatModel
    from turnlog.models.anthropic_async import (
        AsyncAnthropicChatModel as AsyncAnthropicChatModel,
    )
    from turnlog.models.gemini import GeminiChatModel as GeminiChatModel
    from turnlog.models.gemini_async import AsyncGeminiChatModel as AsyncGeminiChatModel
    from turnlog.models.openai import OpenAIChatModel as OpenAIChatModel
    from turnlog.models.openai_async import AsyncOpenAIChatModel as AsyncOpenAIChatModel
    from turnlog.models.openai_responses import (
        OpenAIResponsesModel as OpenAIResponsesModel,
    )
    from turnlog.models.openai_responses_async import (
        AsyncOpenAIResponsesModel as AsyncOpenAIResponsesModel,
    )

    def _conforms(
        a: OpenAIChatModel,
        b: AnthropicChatModel,
        c: AsyncOpenAIChatModel,
        d: AsyncAnthropicChatModel,
    ) -> tuple[ChatModelAdapter, ChatModelAdapter, AsyncChatModelAdapter, AsyncChatModelAdapter]:
        """Never called: mypy checks here that each adapter implements its protocol."""
        return a, b, c, d

    def _conforms_responses(
        a: OpenAIResponsesModel, b: AsyncOpenAIResponsesModel
    ) -> tuple[ChatModelAdapter, AsyncChatModelAdapter]:
        """Never called: mypy checks that the Responses adapters implement the protocols."""
        return a, b

    def _conforms_gemini(
        a: GeminiChatModel, b: AsyncGeminiChatModel
    ) -> tuple[ChatModelAdapter, AsyncChatModelAdapter]:
        """Never called: mypy checks that the Gemini adapters implement the protocols."""
        return a, b


# name -> (module, the extra that installs its provider package)
_LAZY: Final = {
    "OpenAIChatModel": ("turnlog.models.openai", "openai"),
    "AsyncOpenAIChatModel": ("turnlog.models.openai_async", "openai"),
    "OpenAIResponsesModel": ("turnlog.models.openai_responses", "openai"),
    "AsyncOpenAIResponsesModel": ("turnlog.models.openai_responses_async", "openai"),
    "AnthropicChatModel": ("turnlog.models.anthropic", "anthropic"),
    "AsyncAnthropicChatModel": ("turnlog.models.anthropic_async", "anthropic"),
    "GeminiChatModel": ("turnlog.models.gemini", "gemini"),
    "AsyncGeminiChatModel": ("turnlog.models.gemini_async", "gemini"),
}


def __getattr__(name: str) -> Any:
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, extra = found
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise ImportError(
            f"{name} needs the {extra} package, which is not installed: "
            f"pip install 'turnlog[{extra}]'",
            name=extra,
        ) from exc


__all__ = [
    "CACHE_BREAKPOINT_KEY",
    "MODEL_WINDOWS",
    "AsyncChatModelAdapter",
    "ChatModelAdapter",
    "ChatResponse",
    "ModelLimits",
    "ModelWindow",
    "StreamEvent",
    "Usage",
    "context_window",
    "with_cache_breakpoint",
]
