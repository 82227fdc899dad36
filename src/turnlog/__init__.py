"""turnlog: conversation memory for LLM applications.

An append-only log of events per session, a view of it for the prompt, compaction that never
changes the log, and stores that never lose or double an event.
"""

from turnlog.compaction import (
    ChatModel,
    ChatModelSummarizer,
    CompactionBoundary,
    CompactionRequest,
    CompactionResult,
    CompactionSummarizer,
    CompactionTrigger,
    CompactionWindow,
    CompositeCompactionTrigger,
    ExtractiveSummarizer,
    FileOperations,
    FilesTouched,
    SummaryRequest,
    TokenCountTrigger,
    ToolOutputCompactionStrategy,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.errors import (
    AttachmentNotFound,
    CorruptData,
    InvalidInput,
    ModelError,
    SessionAlreadyExists,
    SessionNotFound,
    StoreError,
    ToolRoundsExceeded,
    TurnlogError,
    VersionConflict,
)
from turnlog.events import (
    EventType,
    Message,
    Session,
    SessionEvent,
    TokenCount,
    ToolCall,
    ToolResult,
)
from turnlog.lazy import LazyEvents
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
)
from turnlog.service import SessionService
from turnlog.service_async import AsyncSessionService
from turnlog.stores import (
    EventFilter,
    MemoryStore,
    SessionStore,
    SqliteStore,
    open_store,
    open_store_async,
)
from turnlog.stores.attachments import AttachmentLimits
from turnlog.stores.protocol_async import AsyncSessionStore
from turnlog.text import event_text
from turnlog.tokens import CharCounter, O200kCounter, TiktokenCounter, TokenCounter

__version__ = "0.1.0"


_LAZY_STORES = frozenset(
    {
        "AsyncMemoryStore",
        "AsyncPostgresStore",
        "AsyncRedisClusterStore",
        "AsyncRedisStore",
        "AsyncSqliteStore",
        "PostgresStore",
        "RedisClusterStore",
        "RedisStore",
    }
)


# The turn runner and its records: loaded on first use (the runner brings the tools module,
# which runs async tools, and so asyncio).
_LAZY_CHAT = {
    "SessionChat": "turnlog.chat",
    "AsyncSessionChat": "turnlog.chat_async",
    "Tool": "turnlog.tools",
    "ChatTurn": "turnlog.turns",
    "ToolRun": "turnlog.turns",
}


def __getattr__(name: str) -> object:
    # The server stores load their drivers only when asked for, and the async stores asyncio.
    # They stay out of __all__, so that `from turnlog import *` works on an install without
    # their extras (and `import turnlog` stays quick).
    if name in _LAZY_STORES:
        from turnlog import stores

        return getattr(stores, name)
    if name in _LAZY_CHAT:
        import importlib

        return getattr(importlib.import_module(_LAZY_CHAT[name]), name)
    raise AttributeError(f"module 'turnlog' has no attribute {name!r}")


__all__ = [
    "AsyncSessionService",
    "AsyncSessionStore",
    "AttachmentLimits",
    "AttachmentNotFound",
    "AudioPart",
    "CharCounter",
    "ChatModel",
    "ChatModelSummarizer",
    "CompactionBoundary",
    "CompactionRequest",
    "CompactionResult",
    "CompactionSummarizer",
    "CompactionTrigger",
    "CompactionWindow",
    "CompositeCompactionTrigger",
    "CorruptData",
    "EventFilter",
    "EventType",
    "ExtractiveSummarizer",
    "FileOperations",
    "FilePart",
    "FilesTouched",
    "ImagePart",
    "InvalidInput",
    "LazyEvents",
    "MemoryStore",
    "Message",
    "ModelError",
    "O200kCounter",
    "Part",
    "ProviderPart",
    "ReasoningPart",
    "Session",
    "SessionAlreadyExists",
    "SessionEvent",
    "SessionNotFound",
    "SessionService",
    "SessionStore",
    "SqliteStore",
    "StoreError",
    "SummaryRequest",
    "TextPart",
    "TiktokenCounter",
    "TokenCount",
    "TokenCountTrigger",
    "TokenCounter",
    "ToolCall",
    "ToolOutputCompactionStrategy",
    "ToolResult",
    "ToolRoundsExceeded",
    "TurnCountTrigger",
    "TurnlogError",
    "VersionConflict",
    "WindowCompactionStrategy",
    "__version__",
    "event_text",
    "open_store",
    "open_store_async",
]
