"""Tools from MCP servers for the turn runner, over the official `mcp` SDK (`turnlog[mcp]`).

`MCPServer.stdio(command, args)` starts a server as a subprocess and talks to it over its stdin
and stdout; `MCPServer.http(url)` reaches one over streamable HTTP. Give them to the runner,
`SessionChat(service, model, mcp=[server, ...])`, and the tools they list join the runner's own:

- **Listing.** Each server's tool list is read once and cached; when the server says its list
  changed (`notifications/tools/list_changed`, or a `subscriptions/listen` event on a 2026-07-28
  connection) the next request lists it again. A server is started (or connected to) on first
  use, not when the runner is built.
- **Names.** A tool is offered under its server's `prefix` followed by its own name (no prefix by
  default). The runner's own tools (and tool search's `tool_search`) always keep their names:
  an MCP tool whose offered name is taken by one of them, or by an earlier server of the list,
  or is not 1-128 letters, digits, '_', '.' or '-', is left out, with a WARNING on the
  `turnlog.mcp` logger naming it (give the server a `prefix`).
- **Calls.** A call runs under the runner's `tool_timeout` (the server's own `timeout` comes
  first). Its result becomes a `ToolResult`: text content as text, an image as an `ImagePart`,
  audio as an `AudioPart`, an embedded resource as text (text contents) or an `ImagePart` /
  `FilePart` (binary contents), a resource link as a line of text naming it beside
  `ProviderPart("mcp", "resource_link", <the block>)`, and `isError` as `is_error=True`.
  A call that times out (the server is asked to cancel it), a server that cannot be started,
  that dies during the call or answers with a protocol error gives an error result the model
  reads, never an exception; the next call starts or reconnects to the server again.
- **Closing.** `chat.close()` (or leaving `with SessionChat(...) as chat:`) closes the sessions
  and stops the stdio servers.

The SDK's sessions are asyncio code that must stay on one event loop, so each `MCPTools` (for
blocking code) and `AsyncioMCPTools` (for asyncio) runs them on an event loop of its own, in a
daemon thread started on first use; their methods wait for it (block, or await).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import os
import re
import threading
from collections.abc import Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

from turnlog._mcp_core import PROVIDER, Core, tool_result
from turnlog.errors import InvalidInput
from turnlog.events import ToolCall, ToolResult
from turnlog.toolsearch.base import ToolReference

__all__ = ["PROVIDER", "AsyncioMCPTools", "MCPServer", "MCPTools", "tool_result"]

_PREFIX: Final = re.compile(r"[A-Za-z0-9_.\-]{0,64}")
_T = TypeVar("_T")


def _positive(value: object, what: str, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        allowed = " or None" if optional else ""
        raise InvalidInput(f"{what} must be a positive number of seconds{allowed}, got {value!r}")


def _strings(value: object, what: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidInput(f"{what} must be a mapping of strings to strings, got {value!r}")
    return dict(value)


@dataclass(frozen=True, slots=True)
class MCPServer:
    """An MCP server to take tools from. Build one with `MCPServer.stdio` or `MCPServer.http`.

    Raises:
        InvalidInput: a field of the wrong kind (see the constructors).
    """

    transport: Literal["stdio", "http"]
    """How it is reached: a subprocess over stdin/stdout, or streamable HTTP."""
    command: str | None = None
    """stdio: the executable to start."""
    args: tuple[str, ...] = ()
    """stdio: its arguments."""
    env: Mapping[str, str] | None = field(default=None, repr=False)
    """stdio: environment variables for it, set over the SDK's small inherited set (HOME, PATH,
    SHELL, TERM, USER, ...); the rest of this process's environment is not passed on."""
    cwd: str | None = None
    """stdio: its working directory (this process's when None)."""
    url: str | None = None
    """http: the endpoint, e.g. `http://127.0.0.1:8000/mcp`."""
    headers: Mapping[str, str] | None = field(default=None, repr=False)
    """http: headers sent with every request (an `Authorization` token, say)."""
    name: str = ""
    """What messages and logs call it; the command line or the URL when not given."""
    prefix: str = ""
    """Put before each of its tools' names, as offered to the model (e.g. "time_")."""
    timeout: float | None = None
    """Seconds a call of its tools may take; None: the runner's `tool_timeout`."""
    connect_timeout: float = 30.0
    """Seconds starting (or connecting to) it and listing its tools may take."""

    def __post_init__(self) -> None:
        if self.transport == "stdio":
            if not isinstance(self.command, str) or not self.command.strip():
                raise InvalidInput(f"an MCP stdio server needs a command, got {self.command!r}")
            if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
                raise InvalidInput(
                    f"an MCP server's args must be a list of strings, got {self.args!r}"
                )
            object.__setattr__(self, "args", tuple(self.args))
            object.__setattr__(self, "env", _strings(self.env, "an MCP server's env"))
            if self.cwd is not None and not isinstance(self.cwd, str):
                object.__setattr__(self, "cwd", str(self.cwd))
            label = " ".join([os.path.basename(self.command), *self.args])
        elif self.transport == "http":
            url = self.url
            if not isinstance(url, str) or not re.match(r"https?://\S+$", url):
                raise InvalidInput(f"an MCP server's url must be an http(s) URL, got {url!r}")
            object.__setattr__(self, "headers", _strings(self.headers, "an MCP server's headers"))
            label = url.split("?", 1)[0]
        else:
            raise InvalidInput(
                f"an MCP server's transport is 'stdio' or 'http', got {self.transport!r}"
            )
        if not isinstance(self.name, str):
            raise InvalidInput(f"an MCP server's name must be a string, got {self.name!r}")
        if not self.name.strip():
            object.__setattr__(self, "name", label if len(label) <= 80 else label[:77] + "...")
        if not isinstance(self.prefix, str) or not _PREFIX.fullmatch(self.prefix):
            raise InvalidInput(
                "an MCP server's prefix must be up to 64 letters, digits, '_', '.' or '-', got "
                f"{self.prefix!r}"
            )
        _positive(self.timeout, "an MCP server's timeout", optional=True)
        _positive(self.connect_timeout, "an MCP server's connect_timeout", optional=False)

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        name: str = "",
        prefix: str = "",
        timeout: float | None = None,
        connect_timeout: float = 30.0,
    ) -> MCPServer:
        """A server started as `command args...`, spoken to over its stdin and stdout.

        It starts on first use and stops when the runner (or `MCPTools`) is closed; one that
        exits is started again by the next call. Its stderr goes to this process's stderr.

        Raises:
            InvalidInput: a blank command, args that are not strings, env not str -> str, a
                prefix of other characters, a timeout that is not a positive number.
        """
        if isinstance(args, str):
            raise InvalidInput(f"an MCP server's args must be a list of strings, got {args!r}")
        return cls(
            "stdio",
            command=command,
            args=tuple(args),
            env=env,
            cwd=cwd,
            name=name,
            prefix=prefix,
            timeout=timeout,
            connect_timeout=connect_timeout,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str = "",
        prefix: str = "",
        timeout: float | None = None,
        connect_timeout: float = 30.0,
    ) -> MCPServer:
        """A server reached over streamable HTTP at `url`.

        Raises:
            InvalidInput: a URL that is not http(s), headers not str -> str, a bad prefix or
                timeout.
        """
        return cls(
            "http",
            url=url,
            headers=headers,
            name=name,
            prefix=prefix,
            timeout=timeout,
            connect_timeout=connect_timeout,
        )


class _LoopThread:
    """An event loop in a daemon thread, started on first use, stopped by `stop`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, coroutine: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    try:
                        loop.run_forever()
                        loop.run_until_complete(loop.shutdown_asyncgens())
                    finally:
                        loop.close()

                self._thread = threading.Thread(target=run, name="turnlog-mcp", daemon=True)
                self._thread.start()
                started.wait()
                self._loop = loop
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    @property
    def running(self) -> bool:
        return self._loop is not None

    def stop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


def _check_servers(servers: object) -> list[MCPServer]:
    if isinstance(servers, (str, bytes)) or not isinstance(servers, Sequence):
        raise InvalidInput(f"mcp must be a list of MCPServer, got {type(servers).__name__}")
    for server in servers:
        if not isinstance(server, MCPServer):
            raise InvalidInput(
                "mcp takes MCPServer.stdio(...) or MCPServer.http(...), got "
                f"{type(server).__name__}"
            )
    if servers:
        try:
            found = importlib.util.find_spec("mcp") is not None
        except ImportError:
            found = False
        if not found:
            raise ImportError("tools from MCP servers need the MCP SDK: pip install 'turnlog[mcp]'")
    return list(servers)


class MCPTools:
    """The tools of MCP servers, for blocking code (the blocking runner's `mcp=`).

    Args:
        servers: the servers, in order (an earlier one keeps a tool name both offer).
        reserved: names that are taken (the runner's own tools): an MCP tool offered under one
            is left out.

    Raises:
        InvalidInput: an item that is not an `MCPServer`.
        ImportError: the `mcp` SDK is not installed.
    """

    def __init__(self, servers: Sequence[MCPServer], *, reserved: Collection[str] = ()) -> None:
        self._core = Core(_check_servers(servers), reserved)
        self._loop = _LoopThread()

    @property
    def servers(self) -> tuple[MCPServer, ...]:
        return self._core.servers

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        future = self._loop.submit(coroutine)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def references(self) -> list[ToolReference]:
        """The tools to offer, as named to the model: each server's, listed when first asked
        for and again after it said they changed. A server that cannot be reached is left out
        (a WARNING on the `turnlog.mcp` logger) and tried again on the next call."""
        return self._run(self._core.references()) if self._core.servers else []

    def call(
        self, call: ToolCall, timeout: float | None = None, *, others: Collection[str] = ()
    ) -> ToolResult:
        """Run `call` on the server whose tool it names.

        Args:
            call: the model's call, naming a tool as `references` offers it.
            timeout: seconds it may take when its server has no `timeout` of its own; None
                waits as long as it runs.
            others: names of tools outside these servers, listed in the message for an
                unknown name.

        Returns:
            The result (see `tool_result`); an error result for an unknown tool, arguments
            that are not a JSON object, a timeout, a server that cannot be reached, that
            failed or closed the connection during the call.
        """
        return self._run(self._core.call(call, timeout, others))

    def close(self) -> None:
        """Close the sessions (stdio servers stop) and the event loop's thread. Using these
        tools afterwards starts them again."""
        if self._loop.running:
            self._run(self._core.close())
        self._loop.stop()

    def __enter__(self) -> MCPTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MCPTools({[s.name for s in self.servers]})"


class AsyncioMCPTools:
    """`MCPTools` for asyncio code (the asyncio runner's `mcp=`): the same tools, awaited.

    The sessions run on an event loop of their own (in a thread), so one `AsyncioMCPTools`
    serves any loop; cancelling a call cancels it on the server. Arguments as for `MCPTools`.
    """

    def __init__(self, servers: Sequence[MCPServer], *, reserved: Collection[str] = ()) -> None:
        self._core = Core(_check_servers(servers), reserved)
        self._loop = _LoopThread()

    @property
    def servers(self) -> tuple[MCPServer, ...]:
        return self._core.servers

    async def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return await asyncio.wrap_future(self._loop.submit(coroutine))

    async def references(self) -> list[ToolReference]:
        """As `MCPTools.references`."""
        return await self._run(self._core.references()) if self._core.servers else []

    async def call(
        self, call: ToolCall, timeout: float | None = None, *, others: Collection[str] = ()
    ) -> ToolResult:
        """As `MCPTools.call`."""
        return await self._run(self._core.call(call, timeout, others))

    async def aclose(self) -> None:
        """As `MCPTools.close`."""
        if self._loop.running:
            await self._run(self._core.close())
        await asyncio.to_thread(self._loop.stop)

    async def __aenter__(self) -> AsyncioMCPTools:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncioMCPTools({[s.name for s in self.servers]})"
