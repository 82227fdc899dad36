"""The local, read-only web viewer (`turnlog serve`; extra `turnlog[viewer]`)."""

from __future__ import annotations

from turnlog.viewer.app import create_app

__all__ = ["create_app"]
