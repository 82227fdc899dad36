"""The asyncio side of `turnlog.mcp`: one session per MCP server, the tools' names and
calls, and what an MCP result becomes. Runs on the event loop of an `MCPTools` (or
`AsyncioMCPTools`); the `mcp` SDK is imported on first use."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
import sys
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final

from turnlog.errors import InvalidInput
from turnlog.events import ToolCall, ToolResult
from turnlog.parts import AudioPart, FilePart, ImagePart, Part, ProviderPart, TextPart
from turnlog.toolsearch.base import ToolReference

if TYPE_CHECKING:
    import mcp_types
    from mcp import Client
    from mcp.client._transport import Transport

    from turnlog.mcp import MCPServer

logger: Final = logging.getLogger("turnlog.mcp")

PROVIDER: Final = "mcp"
"""The provider of the `ProviderPart`s an MCP result holds (blocks kept as they came)."""

_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


# -- results ----------------------------------------------------------------------------------


def _bytes(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _dump(block: Any) -> Any:
    return block.model_dump(mode="json", by_alias=True, exclude_none=True)


def _block_parts(block: Any) -> list[Part]:
    """The parts one content block becomes (see the module docstring).

    Raises:
        InvalidInput: a media type or payload no part can hold (the caller keeps the block).
    """
    kind = getattr(block, "type", None)
    if kind == "text":
        return [TextPart(block.text)]
    if kind in ("image", "audio"):
        data = _bytes(block.data)
        if data is None:
            raise InvalidInput("not base64")
        built = ImagePart if kind == "image" else AudioPart
        return [built(block.mime_type, data=data)]
    if kind == "resource":
        resource = block.resource
        uri = str(resource.uri)
        if getattr(resource, "text", None) is not None:
            return [TextPart(f"[resource {uri}]\n{resource.text}")]
        data = _bytes(resource.blob)
        if data is None:
            raise InvalidInput("not base64")
        media_type = resource.mime_type or "application/octet-stream"
        filename = uri.rstrip("/").rsplit("/", 1)[-1][:255] or None
        if media_type.lower().startswith("image/"):
            return [ImagePart(media_type, data=data, filename=filename)]
        return [FilePart(media_type, data=data, name=filename)]
    if kind == "resource_link":
        about = [f"[resource link {block.uri}: {block.title or block.name}"]
        if block.description:
            about.append(f" - {block.description}")
        if block.mime_type:
            about.append(f" ({block.mime_type})")
        return [TextPart("".join(about) + "]"), ProviderPart(PROVIDER, kind, _dump(block))]
    raise InvalidInput(f"content of type {kind!r}")


def tool_result(call: ToolCall, result: mcp_types.CallToolResult) -> ToolResult:
    """The `ToolResult` answering `call` for an MCP `CallToolResult`.

    Text blocks become text (one line break between two of them), media and resources parts
    (see the module docstring); a block no part can hold is kept as
    `ProviderPart("mcp", <its type>, <the block>)`. A result without content but with
    structured content reads as that content's JSON. `isError` gives `is_error=True`.
    """
    parts: list[Part] = []
    texts = 0
    for block in result.content:
        kind = str(getattr(block, "type", "unknown"))
        try:
            made = _block_parts(block)
        except InvalidInput:
            try:
                made = [ProviderPart(PROVIDER, kind, _dump(block))]
            except InvalidInput:  # not even JSON turnlog can store (a lone surrogate, say)
                made = [TextPart(f"[an MCP {kind} block that could not be stored]")]
        for part in made:
            if isinstance(part, TextPart):
                if texts:
                    part = TextPart("\n" + part.text)
                texts += 1
            parts.append(part)
    if not result.content and result.structured_content is not None:
        parts.append(TextPart(json.dumps(result.structured_content, ensure_ascii=False)))
    if result.is_error and not texts:
        parts.insert(0, TextPart(f"{call.name} failed (the MCP server gave no message)"))
    return ToolResult(call.id, call.name, "", is_error=bool(result.is_error), parts=tuple(parts))


def _failure(call: ToolCall, text: str) -> ToolResult:
    return ToolResult(call.id, call.name, text, is_error=True)


def _arguments(call: ToolCall) -> dict[str, Any] | ToolResult:
    try:
        value = json.loads(call.arguments.strip() or "{}")
    except ValueError as exc:
        return _failure(call, f"{call.name}: the arguments are not valid JSON: {exc}")
    if not isinstance(value, dict):
        return _failure(call, f"{call.name}: the arguments must be a JSON object")
    return value


# -- one server's session ---------------------------------------------------------------------


class _ConnectFailed(Exception):
    pass


def _errlog() -> Any:
    """Where a stdio server's stderr goes: ours, when it is a real file (not under a capture)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        import subprocess

        return subprocess.DEVNULL
    return sys.stderr


@asynccontextmanager
async def _watched(
    transport: Transport, http: Any, ended: Callable[[], None]
) -> AsyncIterator[tuple[Any, Any]]:
    """`transport`'s streams, with `ended` called when the server's side ends (a stdio server
    exited, say), so a dead connection is replaced before the next call instead of failing it."""
    import anyio

    async with AsyncExitStack() as stack:
        if http is not None:
            await stack.enter_async_context(http)
        read, write = await stack.enter_async_context(transport)
        send, receive = anyio.create_memory_object_stream[Any](0)

        async def relay() -> None:
            try:
                async with send:
                    async for item in read:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                ended()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(relay)
            try:
                yield receive, write
            finally:
                tasks.cancel_scope.cancel()


class _Connection:
    """One server's session, held open by a task on the tools' event loop."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.tools: list[mcp_types.Tool] | None = None
        self.stale = False
        self.down = False  # the last listing failed (warned once until one succeeds)
        self._lock = asyncio.Lock()
        self._holder: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[Client] | None = None
        self._stop = asyncio.Event()

    def _transport(self) -> tuple[Transport, Any]:
        server = self.server
        if server.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            assert server.command is not None
            params = StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=dict(server.env) if server.env else None,
                cwd=server.cwd,
            )
            return stdio_client(params, errlog=_errlog()), None
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert server.url is not None
        http = httpx2.AsyncClient(
            headers=dict(server.headers or {}), timeout=httpx2.Timeout(30.0, read=300.0)
        )
        return streamable_http_client(server.url, http_client=http), http

    async def _on_message(self, message: object) -> None:
        from mcp_types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self.stale = True

    async def _listen(self, client: Client) -> None:
        """Keep a 2026-07-28 `subscriptions/listen` stream open: the server sends its change
        notifications on it, and the session hands each to `_on_message` as well."""
        try:
            async with client.listen(tools_list_changed=True) as events:
                async for _ in events:
                    pass
        except Exception as exc:  # the stream is a convenience: a lost one only logs
            logger.debug("MCP server %s: the change subscription ended: %r", self.server.name, exc)

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        from mcp import Client, Implementation
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        from turnlog import __version__

        listener: asyncio.Task[None] | None = None
        try:
            transport, http = self._transport()
            client = Client(
                _watched(transport, http, stop.set),
                message_handler=self._on_message,
                client_info=Implementation(name="turnlog", version=__version__),
                cache=None,
            )
            async with client:
                tools = client.server_capabilities.tools
                if (
                    client.protocol_version in MODERN_PROTOCOL_VERSIONS
                    and tools
                    and tools.list_changed
                ):
                    listener = asyncio.create_task(self._listen(client))
                if not ready.done():
                    ready.set_result(client)
                try:
                    await stop.wait()
                finally:
                    if listener is not None:
                        listener.cancel()
                        with suppress(asyncio.CancelledError):
                            await listener
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                logger.debug("MCP server %s: the session ended: %r", self.server.name, exc)
        finally:
            stop.set()
            self.tools = None
            if not ready.done():
                ready.set_exception(_ConnectFailed("the connection was closed while it opened"))

    def _usable(self) -> bool:
        return self._holder is not None and not self._holder.done() and not self._stop.is_set()

    async def client(self) -> Client:
        """The open session, started or reconnected first when there is none.

        Raises:
            _ConnectFailed: the server could not be started or reached, or did not answer in
                `connect_timeout` seconds.
        """
        async with self._lock:
            if not self._usable():
                await self.close()
                loop = asyncio.get_running_loop()
                fresh: asyncio.Future[Client] = loop.create_future()
                fresh.add_done_callback(lambda f: f.cancelled() or f.exception())
                self._ready = fresh
                self._stop = asyncio.Event()
                self._holder = asyncio.create_task(self._hold(fresh, self._stop))
            ready, holder = self._ready, self._holder
            assert ready is not None and holder is not None
            try:
                return await asyncio.wait_for(asyncio.shield(ready), self.server.connect_timeout)
            except TimeoutError:
                holder.cancel()
                with suppress(asyncio.CancelledError):
                    await holder
                raise _ConnectFailed(
                    f"it did not answer within {self.server.connect_timeout:g} s (connect_timeout)"
                ) from None
            except _ConnectFailed:
                raise
            except Exception as exc:
                raise _ConnectFailed(_describe(exc)) from exc

    async def listed(self) -> list[mcp_types.Tool]:
        """The server's tools: cached, listed again after it said they changed."""
        client = await self.client()
        if self.tools is None or self.stale:
            self.stale = False  # before the listing: a change during it marks it stale again
            tools: list[mcp_types.Tool] = []
            cursor: str | None = None
            for _ in range(100):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            self.tools = tools
        return self.tools

    def lost(self) -> None:
        """Drop the session (it failed): the next call reconnects."""
        self._stop.set()

    async def close(self) -> None:
        holder = self._holder
        self._holder = None
        if holder is not None:
            self._stop.set()
            with suppress(asyncio.CancelledError, Exception):
                await holder


def _describe(exc: BaseException) -> str:
    """`Type: message`, with a task group's lone exception unwrapped."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    detail = str(exc)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


# -- the servers' tools -----------------------------------------------------------------------


class Core:
    """The tools of a list of servers, on one event loop: names, listings, calls."""

    def __init__(self, servers: Sequence[MCPServer], reserved: Collection[str]) -> None:
        self.servers = tuple(servers)
        self.reserved = frozenset(reserved)
        self._connections: list[_Connection] | None = None  # made on the loop, on first use
        self._routes: dict[str, tuple[_Connection, str]] = {}
        self._references: list[ToolReference] = []
        self._listings: list[object] = []
        self._warned: set[tuple[str, str]] = set()

    def _all(self) -> list[_Connection]:
        if self._connections is None:
            self._connections = [_Connection(s) for s in self.servers]
        return self._connections

    async def _listing(self, connection: _Connection) -> list[mcp_types.Tool] | None:
        server = connection.server
        try:
            async with asyncio.timeout(server.connect_timeout):
                tools = await connection.listed()
        except Exception as exc:
            if not connection.down:
                logger.warning(
                    "MCP server %s cannot be reached; its tools are left out until it can: %s",
                    server.name,
                    exc if isinstance(exc, _ConnectFailed) else _describe(exc),
                )
            connection.down = True
            return None
        connection.down = False
        return tools

    def _leave_out(self, server: MCPServer, name: str, why: str) -> None:
        if (server.name, name) not in self._warned:
            self._warned.add((server.name, name))
            logger.warning("MCP server %s: tool %r is left out: %s", server.name, name, why)

    async def references(self) -> list[ToolReference]:
        connections = self._all()
        listings = await asyncio.gather(*(self._listing(c) for c in connections))
        if len(listings) == len(self._listings) and all(
            a is b for a, b in zip(listings, self._listings, strict=True)
        ):
            return self._references  # unchanged: the same objects (tool search caches by them)
        routes: dict[str, tuple[_Connection, str]] = {}
        references: list[ToolReference] = []
        for connection, tools in zip(connections, listings, strict=True):
            server = connection.server
            for tool in tools or ():
                offered = server.prefix + tool.name
                if not _NAME.fullmatch(offered):
                    why = "a tool name is 1-128 letters, digits, '_', '.' or '-'"
                elif offered in self.reserved:
                    why = "a tool of the runner has that name: give the server a prefix"
                elif offered in routes:
                    first = routes[offered][0].server.name
                    why = f"server {first} offers a tool of that name first: give one a prefix"
                else:
                    routes[offered] = (connection, tool.name)
                    description = tool.description or tool.title or ""
                    references.append(ToolReference(offered, description, dict(tool.input_schema)))
                    continue
                self._leave_out(server, offered, why)
        self._routes, self._references, self._listings = routes, references, list(listings)
        return references

    async def call(
        self, call: ToolCall, timeout: float | None, others: Collection[str]
    ) -> ToolResult:
        route = self._routes.get(call.name)
        if route is None:  # not listed yet (a resumed turn), or since changed
            await self.references()
            route = self._routes.get(call.name)
        if route is None:
            known = ", ".join(sorted({*others, *self._routes})) or "none"
            return _failure(call, f"there is no tool named {call.name!r}; the tools are: {known}")
        arguments = _arguments(call)
        if isinstance(arguments, ToolResult):
            return arguments
        connection, name = route
        server = connection.server
        seconds = server.timeout if server.timeout is not None else timeout
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        try:
            async with asyncio.timeout(seconds):
                client = await connection.client()
                result = await client.call_tool(name, arguments)
        except TimeoutError:
            after = "" if seconds is None else f" after {seconds:g} s (tool_timeout)"
            return _failure(
                call,
                f"{call.name} timed out{after}; the MCP server {server.name} was asked to "
                "cancel it, so its outcome is unknown",
            )
        except _ConnectFailed as exc:
            return _failure(
                call, f"{call.name}: the MCP server {server.name} cannot be reached: {exc}"
            )
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                return _failure(
                    call,
                    f"{call.name}: the MCP server {server.name} refused the call: {exc.message} "
                    f"(error {exc.code})",
                )
            connection.lost()
            return _failure(
                call,
                f"{call.name}: the MCP server {server.name} closed the connection during the "
                "call (it may have crashed), so its outcome is unknown; the next call starts "
                "it again",
            )
        except Exception as exc:  # a transport failure, a reply that is not MCP
            connection.lost()
            return _failure(
                call,
                f"{call.name}: the call to the MCP server {server.name} failed: {_describe(exc)}",
            )
        return tool_result(call, result)

    async def close(self) -> None:
        for connection in self._connections or ():
            await connection.close()
        self._connections = None
        self._routes, self._references, self._listings = {}, [], []
