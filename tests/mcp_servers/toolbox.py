"""An MCP server for the tests, written with the SDK's server API (`MCPServer`).

Run it over stdio: `python tests/mcp_servers/toolbox.py`; the tests serve the app that `build()`
returns over streamable HTTP themselves. Its tools return text, an image, embedded resources,
a resource link and an error; one sleeps, one exits its own process mid-call, one adds a tool
and says the list changed.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import time
import zlib
from contextlib import suppress

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import (
    BlobResourceContents,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

NOTES = "Kickoff moved to Thursday 10:00."
PDF = b"%PDF-1.4\n1 0 obj << /Type /Pages /Count 1 /Kids [] >> endobj\n%%EOF\n"


def png(width: int, height: int) -> bytes:
    """A valid RGB PNG of one colour, built by hand (no imaging library)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\xcc\x22\x11" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG = png(3, 2)


def build() -> MCPServer:
    server = MCPServer("toolbox", log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool()
    def picture() -> list[TextContent | Image]:
        """A caption and a 3x2 PNG."""
        return [TextContent(text="a red rectangle"), Image(data=PNG, format="png")]

    @server.tool()
    def documents() -> list[EmbeddedResource]:
        """The meeting notes (text) and the agenda (a PDF), embedded."""
        notes = TextResourceContents(uri="file:///notes.txt", mime_type="text/plain", text=NOTES)
        agenda = BlobResourceContents(
            uri="file:///docs/agenda.pdf",
            mime_type="application/pdf",
            blob=base64.b64encode(PDF).decode(),
        )
        return [EmbeddedResource(resource=notes), EmbeddedResource(resource=agenda)]

    @server.tool()
    def link() -> list[ResourceLink]:
        """A link to a resource the client may read."""
        return [
            ResourceLink(
                uri="file:///reports/q3.csv",
                name="q3.csv",
                description="Q3 figures",
                mime_type="text/csv",
            )
        ]

    @server.tool()
    def fail() -> str:
        """Always fails, as a tool reports a failure."""
        raise ToolError("the disk is full")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep; say when it started and ended (time.monotonic)."""
        started = time.monotonic()
        await anyio.sleep(seconds)
        return json.dumps({"start": started, "end": time.monotonic()})

    @server.tool()
    def pid() -> int:
        """This server's process id."""
        return os.getpid()

    @server.tool()
    def crash() -> str:
        """Exit this server's process in the middle of the call."""
        os._exit(3)

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool `extra` and tell the client the tool list changed."""

        def extra(x: int) -> int:
            """Twice x."""
            return 2 * x

        server.add_tool(extra)
        await ctx.notify_tools_changed()  # 2026-07-28: subscriptions/listen streams
        with suppress(Exception):  # earlier versions: a notification on the session
            await ctx.session.send_tool_list_changed()
        return "added extra"

    return server


if __name__ == "__main__":
    build().run()
