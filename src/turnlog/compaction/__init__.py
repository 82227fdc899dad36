"""Compaction: pure functions from a log to a new view. No I/O, no clock."""

from turnlog.compaction.base import (
    CompactionRequest,
    CompactionResult,
    CompactionStrategy,
    CompactionSummarizer,
    CompactionTrigger,
    SummaryRequest,
    count_turns,
)
from turnlog.compaction.boundary import CompactionBoundary
from turnlog.compaction.clearing import STAND_IN_KEY, ToolOutputCompactionStrategy, stand_ins
from turnlog.compaction.extractive import ExtractiveSummarizer
from turnlog.compaction.files import FileOperations, FilesTouched
from turnlog.compaction.summary import ChatModel, ChatModelSummarizer
from turnlog.compaction.triggers import (
    CompositeCompactionTrigger,
    TokenCountTrigger,
    TurnCountTrigger,
    sent_events,
)
from turnlog.compaction.window import CompactionWindow, WindowCompactionStrategy

__all__ = [
    "STAND_IN_KEY",
    "ChatModel",
    "ChatModelSummarizer",
    "CompactionBoundary",
    "CompactionRequest",
    "CompactionResult",
    "CompactionStrategy",
    "CompactionSummarizer",
    "CompactionTrigger",
    "CompactionWindow",
    "CompositeCompactionTrigger",
    "ExtractiveSummarizer",
    "FileOperations",
    "FilesTouched",
    "SummaryRequest",
    "TokenCountTrigger",
    "ToolOutputCompactionStrategy",
    "TurnCountTrigger",
    "WindowCompactionStrategy",
    "count_turns",
    "sent_events",
    "stand_ins",
]
