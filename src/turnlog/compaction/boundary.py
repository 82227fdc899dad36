"""`CompactionBoundary`: the record of one compaction, and the projection of a log to its view.

It lives in the core beside the events (`turnlog.payloads`), where the codec reads it; this
module keeps the import path `turnlog.compaction.boundary.CompactionBoundary` working.
"""

from __future__ import annotations

from turnlog.payloads import CompactionBoundary

__all__ = ["CompactionBoundary"]
