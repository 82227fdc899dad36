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

Parts (`turnlog.parts`):

- a user message with parts -> `content` as a list of content parts, in order: text
  `{"type": "text"}`; an image `{"type": "image_url", "image_url": {"url", "detail"}}` (inline
  bytes as a `data:` URL); a WAV or MP3 clip inline `{"type": "input_audio", "input_audio":
  {"data", "format"}}`; a file inline `{"type": "file", "file": {"file_data": <data: URL>,
  "filename"}}`; an OpenAI `ProviderPart` as its stored object;
- what Chat Completions cannot take (an attachment reference, a file or clip by URL, audio of
  another format), and every part of a system message or a tool result but text (system and
  tool messages carry text only), is sent as its note (`turnlog.text.part_note`) in the text,
  a note on a tool result saying it was not sent (`NOT_SENT`);
- an assistant message sends its text alone: Chat Completions has no field for reasoning, and
  parts of other providers are never sent.

Back from the wire, consecutive tool messages become one turnlog tool message (parallel
calls). Message metadata is turnlog's own and is not sent.
"""

from __future__ import annotations

import base64
import copy
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
from turnlog.parts import AudioPart, FilePart, ImagePart, Part, ProviderPart, TextPart, data_url
from turnlog.text import part_note
from turnlog.toolsearch.base import ToolReference

__all__ = [
    "ERROR_PREFIX",
    "NOT_SENT",
    "OpenAIStream",
    "from_openai_messages",
    "openai_tools",
    "response_from_openai",
    "to_openai_messages",
]

ERROR_PREFIX: Final = "[tool error] "
"""Put before a failed tool result's content: Chat Completions has no error flag."""


NOT_SENT: Final = "(not sent: a Chat Completions tool result carries text only)"
"""Put after the note of a tool result's part that is not text (an image a tool returned)."""

PROVIDER: Final = "openai"

_AUDIO_FORMATS: Final = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/vnd.wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


def _content_part(part: Part) -> dict[str, Any] | None:
    """The content part a user message's `part` is sent as (a note when the wire cannot carry
    it); None when it is not sent (another provider's part, an empty text)."""
    if type(part) is TextPart:
        return {"type": "text", "text": part.text} if part.text else None
    if type(part) is ImagePart:
        url = part.url if part.data is None else data_url(part.media_type, part.data)
        if url is not None:
            image: dict[str, Any] = {"url": url}
            if part.detail is not None:
                image["detail"] = part.detail
            return {"type": "image_url", "image_url": image}
    elif type(part) is AudioPart:
        audio_format = _AUDIO_FORMATS.get(part.media_type.lower())
        if part.data is not None and audio_format is not None:
            data = base64.b64encode(part.data).decode("ascii")
            return {"type": "input_audio", "input_audio": {"data": data, "format": audio_format}}
    elif type(part) is FilePart:
        if part.data is not None:
            file = {
                "file_data": data_url(part.media_type, part.data),
                "filename": part.name or "file",
            }
            return {"type": "file", "file": file}
    elif type(part) is ProviderPart:
        if part.provider == PROVIDER and isinstance(part.data, dict):
            data_part: dict[str, Any] = copy.deepcopy(part.data)
            return data_part
        return None
    else:  # reasoning: never in a user message
        return None
    return {"type": "text", "text": part_note(part)}


def _user_content(m: Message) -> str | list[dict[str, Any]]:
    if not m.parts:
        return m.text or ""
    return [c for c in (_content_part(p) for p in m.parts) if c is not None]


def _noted_text(parts: Sequence[Part], after: str) -> str:
    """Parts as text alone: the text parts, and a note (then `after`) on a line of its own for
    each part that is not text, save reasoning and provider parts."""
    pieces = []
    for part in parts:
        if type(part) is TextPart:
            pieces.append(part.text)
        elif type(part) in (ImagePart, FilePart, AudioPart):
            pieces.append(f"\n{part_note(part)}{after}\n")
    return "".join(pieces).strip("\n")


def _result_content(r: ToolResult) -> str:
    content = _noted_text(r.parts, " " + NOT_SENT) if r.parts else r.content
    return ERROR_PREFIX + content if r.is_error else content


def to_openai_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """`messages` as Chat Completions `messages` (see the module docstring).

    Returns:
        A new list of plain JSON objects.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            for r in m.tool_results:
                content = _result_content(r)
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
        elif m.role == "user":
            out.append({"role": "user", "content": _user_content(m)})
        else:
            text = _noted_text(m.parts, "") if m.parts else m.text or ""
            out.append({"role": m.role, "content": text})
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
