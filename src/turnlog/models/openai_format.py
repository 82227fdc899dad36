"""turnlog messages <-> the OpenAI Chat Completions wire format (plain JSON), both ways.

Pure: no `openai` import, no I/O; shared by `AsyncOpenAIChatModel` and `OpenAIChatModel`.

The mapping:

- a system message -> `{"role": "system", "content": text}`; a user message likewise;
- an assistant message -> `{"role": "assistant", "content": text or "", "tool_calls":
  [{"id", "type": "function", "function": {"name", "arguments"}}]}`, the arguments string
  sent exactly as stored (the content is never null: llama-cpp-python's server answers 500
  to a null content beside tool calls, and every server takes "");
- a tool message with N results -> N `{"role": "tool", "tool_call_id", "content"}` messages.
  The wire carries no tool name (it is read back from the call with that id) and no error
  flag: a failed result's content is sent prefixed with `ERROR_PREFIX`, so the model sees that
  the call failed, and reading it back sets `is_error` again.

Back from the wire, consecutive tool messages become one turnlog tool message (parallel
calls). Message metadata is turnlog's own and is not sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from turnlog.events import Message, ToolCall, ToolResult
from turnlog.models.base import (
    ChatResponse,
    IncompleteReply,
    MalformedReply,
    Usage,
    count,
    field_of,
    whole_reply,
)
from turnlog.toolsearch.base import ToolReference

__all__ = [
    "ERROR_PREFIX",
    "OpenAIStream",
    "from_openai_messages",
    "openai_tools",
    "response_from_openai",
    "to_openai_messages",
]

ERROR_PREFIX: Final = "[tool error] "
"""Put before a failed tool result's content: Chat Completions has no error flag."""


def to_openai_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """`messages` as Chat Completions `messages` (see the module docstring).

    Returns:
        A new list of plain JSON objects.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            for r in m.tool_results:
                content = ERROR_PREFIX + r.content if r.is_error else r.content
                out.append({"role": "tool", "tool_call_id": r.call_id, "content": content})
        elif m.role == "assistant":
            # "" and never null: llama-cpp-python's server fails (500) on a null content
            wire: dict[str, Any] = {"role": "assistant", "content": m.text or ""}
            if m.tool_calls:
                wire["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in m.tool_calls
                ]
            out.append(wire)
        else:
            out.append({"role": m.role, "content": m.text or ""})
    return out


def openai_tools(tools: Sequence[ToolReference] | None) -> list[dict[str, Any]]:
    """The `tools` parameter for `tools` (empty when None)."""
    return [t.as_openai_tool() for t in tools or ()]


def _text(content: object, what: str) -> str | None:
    """A message's `content`: a string, None, or a list of text parts (joined)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(field_of(part, "text", str, what)))
        return "".join(parts)
    raise MalformedReply(f"{what} has a content that is neither text nor a list of parts")


def _arguments(raw: object, what: str) -> str:
    """A call's `arguments` as stored: the string exactly as sent, even when it is not JSON
    (running the call then gives the model an error result to read); "" (a call without
    arguments, by a server that sends nothing for none) is "{}". Missing arguments, or a value
    of another kind, make the reply malformed: they never become "{}"."""
    if isinstance(raw, str):
        return raw if raw.strip() else "{}"
    raise MalformedReply(f"a tool call of {what} has no arguments string")


def _calls(raw: object, what: str) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise MalformedReply(f"{what}'s tool_calls is not a list")
    calls = []
    for item in raw:
        function = field_of(item, "function", dict, f"a tool call of {what}")
        assert isinstance(function, dict)
        calls.append(
            ToolCall(
                str(field_of(item, "id", str, f"a tool call of {what}")),
                str(field_of(function, "name", str, f"a tool call of {what}")),
                _arguments(function.get("arguments"), what),
            )
        )
    return tuple(calls)


def from_openai_messages(wire: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Chat Completions `messages` back as turnlog messages (the inverse of
    `to_openai_messages`).

    Raises:
        MalformedReply: a message of an unknown role or shape.
    """
    out: list[Message] = []
    names: dict[str, str] = {}
    for i, item in enumerate(wire):
        what = f"message {i}"
        role = field_of(dict(item), "role", str, what)
        if role == "tool":
            content = _text(item.get("content"), what) or ""
            failed = content.startswith(ERROR_PREFIX)
            call_id = str(field_of(dict(item), "tool_call_id", str, what))
            result = ToolResult(
                call_id,
                names.get(call_id, ""),
                content[len(ERROR_PREFIX) :] if failed else content,
                is_error=failed,
            )
            if out and out[-1].role == "tool":
                out[-1] = Message.tool((*out[-1].tool_results, result))
            else:
                out.append(Message.tool(result))
        elif role == "assistant":
            calls = _calls(item.get("tool_calls"), what)
            names.update((c.id, c.name) for c in calls)
            text = _text(item.get("content"), what)
            out.append(Message.assistant(None if text == "" and calls else text, calls))
        elif role in ("system", "developer", "user"):
            text = _text(item.get("content"), what) or ""
            out.append(Message.user(text) if role == "user" else Message.system(text))
        else:
            raise MalformedReply(f"{what} has an unknown role {role!r}")
    return out


def _usage(raw: object) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    return Usage(count(prompt), count(completion), count(cached))


def response_from_openai(body: object) -> ChatResponse:
    """A Chat Completions reply (the JSON object) as a `ChatResponse`.

    Raises:
        MalformedReply: no choices, or a choice without a message.
        DuplicateCallId: two tool calls share an id.
        CappedReply: the reply stopped at the token cap ("length") inside its tool calls.
    """
    choices = field_of(body, "choices", list, "the reply")
    if not choices:
        raise MalformedReply("the reply has no choices")
    choice = choices[0]  # type: ignore[index]
    message = field_of(choice, "message", dict, "the reply's first choice")
    assert isinstance(message, dict) and isinstance(body, dict) and isinstance(choice, dict)
    calls = _calls(message.get("tool_calls"), "the reply")
    text = _text(message.get("content"), "the reply")
    reason = choice.get("finish_reason")
    model = body.get("model")
    response = ChatResponse(
        message=Message.assistant(None if text == "" and calls else text, calls),
        usage=_usage(body.get("usage")),
        model=model if isinstance(model, str) else "",
        stop_reason=reason if isinstance(reason, str) else None,
    )
    return whole_reply(response)


class OpenAIStream:
    """Reads a streamed Chat Completions reply chunk by chunk (the JSON of each SSE event)."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._usage = Usage()
        self._model = ""
        self._stop: str | None = None
        self._chunks = 0

    def feed(self, chunk: object) -> str | None:
        """Take one chunk.

        Returns:
            The text it adds, or None when it adds none.

        Raises:
            MalformedReply: the chunk is no JSON object, or its choices are no list.
        """
        if not isinstance(chunk, dict):
            raise MalformedReply("a streamed chunk is not a JSON object")
        self._chunks += 1
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self._model = chunk["model"]
        if chunk.get("usage") is not None:
            self._usage = _usage(chunk["usage"])
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise MalformedReply("a streamed chunk's choices is not a list")
        added: list[str] = []
        for choice in choices[:1]:
            if not isinstance(choice, dict):
                raise MalformedReply("a streamed choice is not a JSON object")
            if isinstance(choice.get("finish_reason"), str):
                self._stop = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                added.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                self._add_call(call)
        self._text.extend(added)
        return "".join(added) if added else None

    def _add_call(self, call: object) -> None:
        index = field_of(call, "index", int, "a streamed tool call")
        assert isinstance(call, dict) and isinstance(index, int)
        slot = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if isinstance(call.get("id"), str):
            slot["id"] = call["id"]
        function = call.get("function") or {}
        if isinstance(function.get("name"), str):
            slot["name"] += function["name"]
        if isinstance(function.get("arguments"), str):
            slot["arguments"] += function["arguments"]

    def response(self) -> ChatResponse:
        """The whole reply, once the stream has ended.

        A stream is whole once a chunk carried the choice's `finish_reason`, which servers
        send after the last text and tool-call delta. The `[DONE]` line after it is the
        client's to read and never reaches here; a stream cut after the finish_reason loses
        only the usage chunk (the usage is then unknown, as from servers that send none).

        Raises:
            IncompleteReply: the stream ended before any finish_reason (cut short).
            MalformedReply: a tool call without an id or name.
            DuplicateCallId: two tool calls share an id.
            CappedReply: the reply stopped at the token cap ("length") inside its tool calls.
        """
        if not self._chunks:
            raise IncompleteReply("the stream ended before any chunk")
        if self._stop is None:
            got = f"{len(self._text)} text and {len(self._calls)} tool-call pieces"
            raise IncompleteReply(f"the stream ended with no finish_reason, after {got}")
        calls = []
        for _, slot in sorted(self._calls.items()):
            if not slot["id"] or not slot["name"]:
                raise MalformedReply("a streamed tool call has no id or no name")
            calls.append(ToolCall(slot["id"], slot["name"], _arguments(slot["arguments"], "")))
        text = "".join(self._text)
        return whole_reply(
            ChatResponse(
                message=Message.assistant(text if text or not calls else None, calls),
                usage=self._usage,
                model=self._model,
                stop_reason=self._stop,
            )
        )
