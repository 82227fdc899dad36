"""`AsyncMemoryStore`: the in-memory store for asyncio programs and their tests."""

from __future__ import annotations

from turnlog.stores.attachments import DEFAULT_LIMITS, AttachmentLimits
from turnlog.stores.base import Clock, utc_now
from turnlog.stores.memory import MemoryStore
from turnlog.stores.threaded import ThreadedAsyncStore

__all__ = ["AsyncMemoryStore"]


class AsyncMemoryStore(ThreadedAsyncStore):
    """Keeps everything in memory, like `MemoryStore` (which it runs: its calls never block, so
    they run on the event loop itself, with no thread hop).

    Args:
        clock: stamps events appended without a timestamp.
        attachments: as `MemoryStore`.
    """

    def __init__(
        self, *, clock: Clock = utc_now, attachments: AttachmentLimits = DEFAULT_LIMITS
    ) -> None:
        self.attachment_limits = attachments
        super().__init__(
            lambda: MemoryStore(clock=clock, attachments=attachments), workers=0, name="memory"
        )

    async def open(self) -> AsyncMemoryStore:
        """Nothing to open; returns the store."""
        await super().open()
        return self

    async def __aenter__(self) -> AsyncMemoryStore:
        return await self.open()
