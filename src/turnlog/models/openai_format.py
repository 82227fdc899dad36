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
  the call failed, and reading it back sets `is_error` again. A tool message's content is text
  only: a result's image, audio, file or OpenAI provider part that a user message can carry
  stands in its text as a placeholder (`ATTACHED`, "[attachment 1 of 2: in the next user
  message]") and goes in one user message right after the tool messages, each result's
  attachments after a header naming its call (`ATTACHMENTS`). When the next message is a user
  message, they lead its content instead (strict servers refuse two user messages in a row).

Parts (`turnlog.parts`):

- a user message with parts -> `content` as a list of content parts, in order: text
  `{"type": "text"}`; an image `{"type": "image_url", "image_url": {"url", "detail"}}` (inline
  bytes as a `data:` URL); a WAV or MP3 clip inline `{"type": "input_audio", "input_audio":
  {"data", "format"}}`; a file inline `{"type": "file", "file": {"file_data": <data: URL>,
  "filename"}}`; an OpenAI `ProviderPart` as its stored object;
- what Chat Completions cannot take (an attachment reference, a file or clip by URL, audio of
  another format), and every part of a system message but text (system messages carry text
  only), is sent as its note (`turnlog.text.part_note`) in the text, a note on a tool result
  saying it was not sent (`NOT_SENT`);
- an assistant message sends its text alone: Chat Completions has no field for reasoning, and
  parts of other providers are never sent.

Back from the wire, consecutive tool messages become one turnlog tool message (parallel
calls), the attachments of the user message after them go back into their results, and a user
message's content parts become parts again (an image by URL gets the media type its extension
names; a content part of a kind not known here becomes `ProviderPart("openai", <its type>,
<the part>)`). A reply's content parts of a kind not known here are kept the same way. Message
metadata is turnlog's own and is not sent.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
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
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    TextPart,
    data_url,
    read_data_url,
)
from turnlog.text import part_note
from turnlog.toolsearch.base import ToolReference

__all__ = [
    "ATTACHED",
    "ATTACHMENTS",
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

ATTACHED: Final = "[attachment {n} of {count}: in the next user message]"
"""Stands in a tool result's text for its n-th attachment, sent in the user message after the
tool messages (a tool message carries text only)."""

ATTACHMENTS: Final = "[the attachments of the tool result for call {call_id}: {count}]"
"""The text part that opens a tool result's attachments in the user message after the tool
messages; its `count` attachments follow it."""

_ATTACHED: Final = re.compile(r"\[attachment (\d+) of (\d+): in the next user message\]")
_ATTACHMENTS: Final = re.compile(
    r"\[the attachments of the tool result for call (.+): (\d+)\]", re.DOTALL
)

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


def _attachable(part: Part) -> dict[str, Any] | None:
    """The content part a tool result's `part` goes as in the user message after the tool
    messages; None when it goes in the tool message's text (text, or what a user message
    cannot carry either: its note)."""
    if type(part) is TextPart:
        return None
    wire = _content_part(part)
    return None if wire is None or wire.get("type") == "text" else wire


def _result_content(r: ToolResult) -> tuple[str, list[dict[str, Any]]]:
    """A result's tool-message text, and the attachments that go after the tool messages."""
    if not r.parts:
        return (ERROR_PREFIX + r.content if r.is_error else r.content), []
    attached = [_attachable(p) for p in r.parts]
    sent = [a for a in attached if a is not None]
    pieces: list[str] = []
    noted = False
    n = 0
    after = False  # the last piece is a placeholder
    for part, wire in zip(r.parts, attached, strict=True):
        if wire is not None:  # a placeholder on a line of its own: one newline each side
            n += 1
            pieces += (
                ["\n", ATTACHED.format(n=n, count=len(sent))]
                if pieces
                else [ATTACHED.format(n=n, count=len(sent))]
            )
            after = True
            continue
        if type(part) is TextPart:
            text = part.text
        elif type(part) in (ImagePart, FilePart, AudioPart):
            text = f"\n{part_note(part)} {NOT_SENT}\n"
            noted = True
        else:
            continue
        pieces += ["\n", text] if after else [text]
        after = False
    content = "".join(pieces)
    if noted:
        content = content.strip("\n")
    return (ERROR_PREFIX + content if r.is_error else content), sent


def to_openai_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """`messages` as Chat Completions `messages` (see the module docstring).

    Returns:
        A new list of plain JSON objects.
    """
    out: list[dict[str, Any]] = []
    follow: list[dict[str, Any]] = []  # the attachments of the tool results just sent
    for m in messages:
        if follow and m.role != "user":
            out.append({"role": "user", "content": follow})
            follow = []
        if m.role == "tool":
            for r in m.tool_results:
                content, attached = _result_content(r)
                out.append({"role": "tool", "tool_call_id": r.call_id, "content": content})
                if attached:
                    header = ATTACHMENTS.format(call_id=r.call_id, count=len(attached))
                    follow += [{"type": "text", "text": header}, *attached]
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
            asked: str | list[dict[str, Any]] = _user_content(m)
            if follow:  # the tool results' attachments lead this user message
                own = [{"type": "text", "text": asked}] if isinstance(asked, str) else asked
                asked, follow = [*follow, *own], []
            out.append({"role": "user", "content": asked})
        else:
            text = _noted_text(m.parts, "") if m.parts else m.text or ""
            out.append({"role": m.role, "content": text})
    if follow:
        out.append({"role": "user", "content": follow})
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


_AUDIO_TYPES: Final = {"wav": "audio/wav", "mp3": "audio/mpeg"}
_EXTENSIONS: Final = {".png": "image/png", ".gif": "image/gif", ".webp": "image/webp"}


def _image_type(url: str) -> str:
    """The media type of an image the wire names by URL alone, from its extension (the wire
    carries none): image/jpeg unless the path ends in .png, .gif or .webp."""
    path = url.split("?", 1)[0].split("#", 1)[0].lower()
    return next((t for ext, t in _EXTENSIONS.items() if path.endswith(ext)), "image/jpeg")


def _b64(text: object, what: str) -> bytes:
    try:
        return base64.b64decode(str(text), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedReply(f"{what} has data that is not base64") from exc


def _wire_part(entry: object, what: str) -> Part:
    """A content part of a message as its part (the inverse of `_content_part`); a kind not
    known here, or a file given by id, as `ProviderPart("openai", <its type>, <the part>)`.

    Raises:
        MalformedReply: a part that is no JSON object, or inline data that is not base64.
    """
    kind = str(field_of(entry, "type", str, what))
    assert isinstance(entry, dict)
    inner = entry.get(kind)
    if kind == "text":
        return TextPart(str(field_of(entry, "text", str, what)))
    if kind == "image_url" and isinstance(inner, dict) and isinstance(inner.get("url"), str):
        url = inner["url"]
        detail = inner.get("detail") if isinstance(inner.get("detail"), str) else None
        inline = read_data_url(url)
        if inline is not None:
            return ImagePart(inline[0], data=inline[1], detail=detail)
        return ImagePart(_image_type(url), url=url, detail=detail)
    if kind == "input_audio" and isinstance(inner, dict) and inner.get("format") in _AUDIO_TYPES:
        data = _b64(field_of(inner, "data", str, what), what)
        return AudioPart(_AUDIO_TYPES[str(inner["format"])], data=data)
    if kind == "file" and isinstance(inner, dict) and isinstance(inner.get("file_data"), str):
        name = inner.get("filename")
        inline = read_data_url(inner["file_data"])
        if inline is None:
            raise MalformedReply(f"{what} has a file whose file_data is not a base64 data: URL")
        return FilePart(inline[0], data=inline[1], name=name if isinstance(name, str) else None)
    return ProviderPart(PROVIDER, kind, entry)


def _wire_content(content: object, what: str) -> tuple[str | None, tuple[Part, ...]]:
    """A message's `content` as (its text, ()) when it is text alone, else (None, its parts)."""
    if not isinstance(content, list):
        return _text(content, what), ()
    parts = tuple(_wire_part(entry, what) for entry in content)
    if all(type(p) is TextPart for p in parts):
        return "".join(p.text for p in parts if type(p) is TextPart), ()
    return None, parts


def _with_attachments(result: ToolResult, attached: list[Part]) -> ToolResult:
    """`result`, read from a tool message's text, with its attachments back in their places
    (the inverse of `_result_content`); as it is when its placeholders do not match them."""
    pieces = _ATTACHED.split(result.content)
    # split keeps both groups of each placeholder: text, n, count, text, n, count, ..., text
    slots = [(int(pieces[k]), int(pieces[k + 1])) for k in range(1, len(pieces), 3)]
    if slots != [(n, len(attached)) for n in range(1, len(attached) + 1)]:
        return result
    parts: list[Part] = []
    texts = pieces[::3]
    for k, text in enumerate(texts):
        if k > 0:  # after placeholder k: the newline put after it
            text = text.removeprefix("\n")
        if k < len(attached) and (k > 0 or text):  # the newline put before placeholder k + 1
            text = text.removesuffix("\n")
        if text:
            parts.append(TextPart(text))
        if k < len(attached):
            parts.append(attached[k])
    return ToolResult(result.call_id, result.name, "", is_error=result.is_error, parts=tuple(parts))


def _take_attachments(content: list[Any], results: list[ToolResult], what: str) -> list[Any]:
    """Put the tool results' attachments that lead a user message's `content` back into
    `results` (replacing them in place).

    Returns:
        The rest of the content: the user's own.
    """
    at = 0
    while at < len(content):
        entry = content[at]
        text = (
            entry.get("text") if isinstance(entry, dict) and entry.get("type") == "text" else None
        )
        found = _ATTACHMENTS.fullmatch(text) if isinstance(text, str) else None
        if found is None:
            break
        count = int(found.group(2))
        k = next((k for k, r in enumerate(results) if r.call_id == found.group(1)), None)
        if k is None or at + 1 + count > len(content):
            break
        attached = [_wire_part(e, what) for e in content[at + 1 : at + 1 + count]]
        results[k] = _with_attachments(results[k], attached)
        at += 1 + count
    return content[at:]


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
        elif role == "user":
            given: object = item.get("content")
            if isinstance(given, list) and out and out[-1].role == "tool":
                results = list(out[-1].tool_results)
                mine = _take_attachments(given, results, what)
                out[-1] = Message.tool(results)
                if not mine and given:
                    continue  # the tool results' attachments alone
                given = mine
            text, parts = _wire_content(given, what)
            out.append(Message("user", parts=parts) if parts else Message.user(text or ""))
        elif role in ("system", "developer"):
            out.append(Message.system(_text(item.get("content"), what) or ""))
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
    """A Chat Completions reply (the JSON object) as a `ChatResponse`: its text and tool calls;
    a content list with a part that is not text gives the message its parts in order (a part
    of a kind not known here as `ProviderPart("openai", <its type>, <the part>)`); a refusal
    (`refusal` instead of content) is the reply's text.

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
    text, parts = _wire_content(message.get("content"), "the reply")
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal and not text and not parts:
        text = refusal  # a refusal is the reply's text (as the Responses adapter reads it)
    reason = choice.get("finish_reason")
    model = body.get("model")
    reply = (
        Message("assistant", None, calls, parts=parts)
        if parts
        else Message.assistant(None if text == "" and calls else text, calls)
    )
    response = ChatResponse(
        message=reply,
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
            if isinstance(delta.get("refusal"), str) and delta["refusal"]:
                added.append(delta["refusal"])  # a refusal is the reply's text
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
