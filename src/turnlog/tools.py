"""Tools for the turn runner: plain Python functions, and what running them gives the model.

A tool is a function the model may call. `Tool.from_function` reads its JSON schema from the
signature (msgspec builds it from the type hints, so `int`, `str | None`, `Literal[...]`,
`list[str]`, dataclasses and `msgspec.Struct`s all work) and its description from the docstring
(the text before the sections; each parameter's line under `Args:`). The runner validates the
model's arguments against the same types before the call: a call with bad arguments, an unknown
tool or a tool that raises becomes an error `ToolResult` the model reads, never a crash of the
turn::

    def read_file(path: str, limit: int = 200) -> str:
        \"\"\"Read a text file.

        Args:
            path: the file, relative to the project.
            limit: at most this many lines.
        \"\"\"
        ...

    chat = SessionChat(service, model, tools=[read_file])
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import re
import threading
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from msgspec.structs import replace

from turnlog.errors import InvalidInput, TurnlogError
from turnlog.events import ToolCall, ToolResult
from turnlog.toolsearch.base import ToolReference

__all__ = [
    "DEFAULT_MAX_TOOL_RESULT_TOKENS",
    "Tool",
    "ToolInterrupted",
    "as_tools",
    "preview_result",
    "run_tool",
    "run_tool_async",
    "tool_content",
]

_SECTION: Final = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Returns?|Yields?|Raises|Examples?|Notes?|Attributes)"
    r"\s*:\s*$"
)
_ARG_LINE: Final = re.compile(r"^(\s*)\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM: Final = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def _describe(doc: str | None) -> tuple[str, dict[str, str]]:
    """The summary of a docstring, and each parameter's description (Google or Sphinx style)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    base_indent = 0
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section = header.group(1).lower()
            current = None
            continue
        sphinx = _SPHINX_PARAM.match(line)
        if sphinx:
            section, current = "sphinx", sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            continue
        if section is None:
            summary.append(line)
        elif section in ("args", "arguments", "parameters", "params"):
            arg = _ARG_LINE.match(line)
            indent = len(line) - len(line.lstrip())
            if arg and (current is None or indent <= base_indent):
                current, base_indent = arg.group(2), indent
                params[current] = arg.group(3).strip()
            elif current is not None and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
        elif section == "sphinx" and current is not None and line.strip():
            if line.lstrip().startswith(":"):
                current = None
            else:
                params[current] = f"{params[current]} {line.strip()}".strip()
    paragraphs = re.split(r"\n\s*\n", "\n".join(summary).strip())
    text = "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)
    return text, params


def _arguments_type(function: Callable[..., Any], name: str) -> type[msgspec.Struct]:
    """A msgspec Struct with one field per parameter of `function`."""
    try:
        signature = inspect.signature(function)
        hints = typing.get_type_hints(function, include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise InvalidInput(f"tool {name!r}: cannot read the function's signature: {exc}") from exc
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise InvalidInput(
                f"tool {name!r}: parameter {param.name!r} is {param.kind.description}; a tool "
                "function takes named parameters only (the model passes them by name)"
            )
        hint = hints.get(param.name, Any)
        if param.default is param.empty:
            fields.append((param.name, hint))
        else:
            fields.append((param.name, hint, param.default))
    try:
        return msgspec.defstruct(f"{name}_arguments", fields, forbid_unknown_fields=True)
    except TypeError as exc:
        raise InvalidInput(f"tool {name!r}: {exc}") from exc


def _schema(
    arguments: type[msgspec.Struct], params: Mapping[str, str], name: str
) -> dict[str, Any]:
    """The JSON schema of the arguments struct, inlined, with the docstring's descriptions."""
    try:
        (ref,), components = msgspec.json.schema_components([arguments])
    except TypeError as exc:
        raise InvalidInput(f"tool {name!r}: a parameter's type has no JSON schema: {exc}") from exc
    key = ref["$ref"].rsplit("/", 1)[-1]
    schema = dict(components.pop(key))
    schema.pop("title", None)
    properties = {k: dict(v) for k, v in schema.get("properties", {}).items()}
    for param, text in params.items():
        if param in properties and text:
            properties[param].setdefault("description", text)
    schema["properties"] = properties
    schema.setdefault("required", [])
    if components:
        schema["$defs"] = components
    return schema


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool: what the model is told about it, and the function that runs it.

    Build one from a function with `Tool.from_function` (or pass the function itself to the
    runner), or give the definition by hand: then `function` is called with the model's
    arguments as keyword arguments, checked only to be a JSON object.

    Raises:
        InvalidInput: a blank name, parameters that are not a JSON-schema object, or a
            function that is not callable.
    """

    name: str
    """What the model calls it."""
    description: str
    """What it does, for the model."""
    parameters: Mapping[str, Any]
    """The JSON schema of its arguments (an object schema)."""
    function: Callable[..., Any]
    """What runs it: called with the arguments as keyword arguments; may be `async def`."""
    arguments_type: type[msgspec.Struct] | None = field(default=None, repr=False)
    """The type the arguments are decoded into (from the signature), or None."""
    timeout: float | None = None
    """Seconds a call may take before it becomes an error result the model reads ("timed
    out"); None: the runner's `tool_timeout`."""

    def __post_init__(self) -> None:
        check_timeout(self.timeout, f"tool {self.name!r}: timeout")
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,128}", self.name):
            raise InvalidInput(
                f"a tool name must be 1-128 letters, digits, '_', '.' or '-', got {self.name!r}"
            )
        if not isinstance(self.description, str):
            raise InvalidInput(f"tool {self.name!r}: the description must be a string")
        if not isinstance(self.parameters, Mapping) or self.parameters.get("type") != "object":
            raise InvalidInput(
                f"tool {self.name!r}: parameters must be a JSON schema of type 'object'"
            )
        if not callable(self.function):
            raise InvalidInput(f"tool {self.name!r}: function must be callable")

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
    ) -> Tool:
        """A tool from a function: its name, docstring and typed signature.

        Args:
            function: a function (or `async def`) taking named parameters.
            name: the tool's name; the function's `__name__` when None.
            description: the tool's description; the docstring's summary when None.
            timeout: seconds a call may take (see `Tool.timeout`); None: the runner's.

        Raises:
            InvalidInput: `function` is not callable, takes `*args`, `**kwargs` or
                positional-only parameters, or has a parameter type without a JSON schema.
        """
        if not callable(function):
            raise InvalidInput(f"a tool must be a function, got {type(function).__name__}")
        tool_name = name if name is not None else getattr(function, "__name__", "")
        summary, params = _describe(inspect.getdoc(function))
        arguments = _arguments_type(function, str(tool_name))
        return cls(
            name=tool_name,
            description=summary if description is None else description,
            parameters=_schema(arguments, params, str(tool_name)),
            function=function,
            arguments_type=arguments,
            timeout=timeout,
        )

    @property
    def is_async(self) -> bool:
        """True when `function` is a coroutine function."""
        return inspect.iscoroutinefunction(self.function) or inspect.iscoroutinefunction(
            getattr(self.function, "__call__", None)  # noqa: B004 - a callable object
        )

    @property
    def reference(self) -> ToolReference:
        """The definition to offer a model (or index in a `ToolSearch`)."""
        return ToolReference(self.name, self.description, dict(self.parameters))

    def arguments(self, raw: str) -> dict[str, Any]:
        """The model's arguments, decoded and checked.

        Raises:
            InvalidInput: they are not JSON, not an object, or do not fit the parameters.
        """
        text = raw.strip() or "{}"
        try:
            if self.arguments_type is not None:
                decoded = msgspec.json.decode(text, type=self.arguments_type)
                return {f: getattr(decoded, f) for f in decoded.__struct_fields__}
            value = msgspec.json.decode(text)
        except msgspec.ValidationError as exc:
            raise InvalidInput(f"invalid arguments: {exc}") from None
        except msgspec.DecodeError as exc:
            raise InvalidInput(f"the arguments are not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise InvalidInput("the arguments must be a JSON object")
        return value


def as_tools(items: Sequence[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    """Tools by name, from `Tool`s and plain functions.

    Raises:
        InvalidInput: an item that is neither, or two tools of one name.
    """
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InvalidInput(f"tools must be a list of functions or Tool, got {type(items).__name__}")
    tools: dict[str, Tool] = {}
    for item in items:
        made = item if isinstance(item, Tool) else Tool.from_function(item)
        if made.name in tools:
            raise InvalidInput(f"two tools are named {made.name!r}: give each a unique name")
        tools[made.name] = made
    return tools


DEFAULT_MAX_TOOL_RESULT_TOKENS: Final = 20_000
"""The runner's default `max_tool_result_tokens`: about 80 KB of text."""

_PREVIEW_NOTE: Final = (
    "[output of {tool} shortened in the prompt: {chars} characters, about {tokens} tokens "
    "(over max_tool_result_tokens={limit}); the session log keeps it whole as event "
    "{event_id}; above, its first {shown} characters]"
)


def preview_result(result: ToolResult, event_id: str, max_tokens: int) -> ToolResult:
    """`result` as the prompt shows it: whole when it is about `max_tokens` tokens or fewer
    (utf-8 bytes / 4), else its start and a note of its size, as a cleared output reads.

    Returns:
        `result` itself, or a copy with the shortened content.
    """
    content = result.content
    if len(content) <= max_tokens:  # bytes / 4 never exceeds the characters
        return result
    tokens = -(-len(content.encode("utf-8", "surrogatepass")) // 4)
    if tokens <= max_tokens:
        return result
    shown = max(0, max_tokens * 3 // 2)  # about half the limit, at 3 characters a token
    note = _PREVIEW_NOTE.format(
        tool=result.name,
        chars=len(content),
        tokens=tokens,
        limit=max_tokens,
        event_id=event_id,
        shown=shown,
    )
    return replace(result, content=content[:shown] + "\n" + note)


def check_timeout(value: object, what: str) -> None:
    """Refuse a timeout that is not None or a positive number of seconds.

    Raises:
        InvalidInput: anything else.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidInput(f"{what} must be a positive number of seconds or None, got {value!r}")


def _timed_out(call: ToolCall, seconds: float) -> ToolResult:
    return _failure(
        call,
        f"{call.name} timed out after {seconds:g} s and was abandoned (tool_timeout); it may "
        "still be running, so its outcome is unknown",
    )


class ToolInterrupted(TurnlogError):
    """A blocking tool run by `AsyncSessionChat` in a worker thread raised `KeyboardInterrupt`
    or `SystemExit`.

    Raised in that thread, either would stop the caller's event loop (and every other session it
    serves); the runner ends the turn with this error instead, and the loop keeps running. The
    call stays open in the log: the next turn answers it "not run", a retry with the same
    request id runs the tool again. The original exception is the `__cause__`.

    Attributes:
        tool: the tool's name.
    """

    def __init__(self, tool: str, exc: BaseException) -> None:
        self.tool = tool
        super().__init__(
            f"tool {tool!r} raised {type(exc).__name__} in its worker thread; the turn stopped "
            "(the event loop runs on): fix the tool, or raise an ordinary exception from it "
            "to give the model an error result"
        )


def _in_thread(tool: Tool, arguments: dict[str, Any]) -> Any:
    """Run a blocking tool in the worker thread, `KeyboardInterrupt`/`SystemExit` made typed."""
    try:
        return tool.function(**arguments)
    except (KeyboardInterrupt, SystemExit) as exc:
        raise ToolInterrupted(tool.name, exc) from exc


def tool_content(value: object) -> str:
    """What a tool returned, as the text the model reads: a string as it is, else JSON."""
    if isinstance(value, str):
        return value
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return str(value)


def _failure(call: ToolCall, text: str) -> ToolResult:
    return ToolResult(call.id, call.name, text, is_error=True)


def _prepare(tools: Mapping[str, Tool], call: ToolCall) -> tuple[Tool, dict[str, Any]] | ToolResult:
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return _failure(call, f"there is no tool named {call.name!r}; the tools are: {known}")
    try:
        return tool, tool.arguments(call.arguments)
    except InvalidInput as exc:
        return _failure(call, f"{call.name}: {exc}")


def _raised(call: ToolCall, exc: Exception) -> ToolResult:
    detail = str(exc)
    return _failure(call, f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__)


def run_tool(tools: Mapping[str, Tool], call: ToolCall, timeout: float | None = None) -> ToolResult:
    """Run the call's tool (blocking); an `async def` tool runs on a new event loop.

    Args:
        tools: the tools by name.
        call: the model's call.
        timeout: seconds the call may take when the tool has no `timeout` of its own; None
            waits as long as it runs. A timed tool runs in a daemon thread, abandoned (left
            running: Python cannot stop a thread) when the time is up.

    Returns:
        The result; an error result (`is_error=True`) for an unknown tool, bad arguments, a
        tool that raised (the exception's type and message are what the model reads), or one
        that timed out.
    """
    prepared = _prepare(tools, call)
    if isinstance(prepared, ToolResult):
        return prepared
    tool, arguments = prepared
    seconds = tool.timeout if tool.timeout is not None else timeout
    try:
        if seconds is None:
            value = _call(tool, arguments)
        else:
            done: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

            def work() -> None:
                try:
                    done.put((True, _call(tool, arguments)))
                except BaseException as exc:  # handed to the caller's thread
                    done.put((False, exc))

            threading.Thread(target=work, name=f"turnlog-tool-{tool.name}", daemon=True).start()
            try:
                ok, value = done.get(timeout=seconds)
            except queue.Empty:
                return _timed_out(call, seconds)
            if not ok:
                raise value
    except Exception as exc:
        return _raised(call, exc)
    return ToolResult(call.id, call.name, tool_content(value))


def _call(tool: Tool, arguments: dict[str, Any]) -> Any:
    value = tool.function(**arguments)
    if inspect.isawaitable(value):
        value = asyncio.run(_awaited(value))
    return value


async def _awaited(value: typing.Awaitable[Any]) -> Any:
    return await value


async def run_tool_async(
    tools: Mapping[str, Tool], call: ToolCall, timeout: float | None = None
) -> ToolResult:
    """Run the call's tool on the running loop; a blocking tool runs in a worker thread.

    Args:
        tools: the tools by name.
        call: the model's call.
        timeout: as for `run_tool`; an `async def` tool is cancelled when the time is up, a
            blocking one is abandoned in its thread.

    Returns:
        As `run_tool`.

    Raises:
        ToolInterrupted: the blocking tool raised `KeyboardInterrupt` or `SystemExit`.
    """
    prepared = _prepare(tools, call)
    if isinstance(prepared, ToolResult):
        return prepared
    tool, arguments = prepared
    seconds = tool.timeout if tool.timeout is not None else timeout
    try:
        async with asyncio.timeout(seconds):
            if tool.is_async:
                value = await tool.function(**arguments)
            else:
                value = await asyncio.to_thread(_in_thread, tool, arguments)
                if inspect.isawaitable(value):
                    value = await value
    except TimeoutError:
        assert seconds is not None
        return _timed_out(call, seconds)
    except ToolInterrupted:
        raise
    except Exception as exc:
        return _raised(call, exc)
    return ToolResult(call.id, call.name, tool_content(value))
