"""Tool search: the model searches the tools it needs instead of being sent all of them.

`ToolSearch` is the entry point: per request, `prepare` the session's tools, offer the model
`offered_tools`, and answer its `tool_search` calls with `answer_call`. `AsyncToolSearch` is its
asyncio twin, recording discoveries through an `AsyncSessionService`.

See docs/toolsearch.md. `EmbeddingToolIndex` and `HybridToolIndex` need the `embeddings` extra
(`pip install 'turnlog[embeddings]'`) and are imported only when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

from turnlog.toolsearch.base import ToolHit, ToolIndex, ToolIndexEvictionStrategy, ToolReference
from turnlog.toolsearch.bm25 import Bm25ToolIndex
from turnlog.toolsearch.discovery import TOOLS_DISCOVERED, discovered_names, discovery_event
from turnlog.toolsearch.eviction import (
    AlwaysEvict,
    CompositeEvictionStrategy,
    LruEvictionStrategy,
    MonotonicClock,
    NeverEvict,
    TtlEvictionStrategy,
)
from turnlog.toolsearch.regex import RegexToolIndex
from turnlog.toolsearch.search import ToolSearch
from turnlog.toolsearch.search_async import AsyncToolSearch
from turnlog.toolsearch.shapes import (
    MAX_RESULTS_LIMIT,
    SEARCH_TOOL_NAME,
    SearchResult,
    as_anthropic_tool,
    as_openai_tool,
    as_tool_dict,
    tool_from_dict,
)

# -- lazy exports: the embedding indexes (turnlog.toolsearch.embedding, extra "embeddings") -----
# Resolved by __getattr__ on first use, so importing turnlog.toolsearch never needs numpy or
# onnxruntime. Add further names of that module here. They are left out of __all__ so that
# `from turnlog.toolsearch import *` works without the extra.
if TYPE_CHECKING:
    from turnlog.toolsearch.embedding import EmbeddingToolIndex as EmbeddingToolIndex
    from turnlog.toolsearch.embedding import HybridToolIndex as HybridToolIndex

_LAZY: Final = {
    "EmbeddingToolIndex": "turnlog.toolsearch.embedding",
    "HybridToolIndex": "turnlog.toolsearch.embedding",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise ImportError(
            f"{name} needs the embeddings extra: pip install 'turnlog[embeddings]' ({exc})"
        ) from exc


# -- end of lazy exports -------------------------------------------------------------------------

__all__ = [
    "MAX_RESULTS_LIMIT",
    "SEARCH_TOOL_NAME",
    "TOOLS_DISCOVERED",
    "AlwaysEvict",
    "AsyncToolSearch",
    "Bm25ToolIndex",
    "CompositeEvictionStrategy",
    "LruEvictionStrategy",
    "MonotonicClock",
    "NeverEvict",
    "RegexToolIndex",
    "SearchResult",
    "ToolHit",
    "ToolIndex",
    "ToolIndexEvictionStrategy",
    "ToolReference",
    "ToolSearch",
    "TtlEvictionStrategy",
    "as_anthropic_tool",
    "as_openai_tool",
    "as_tool_dict",
    "discovered_names",
    "discovery_event",
    "tool_from_dict",
]
