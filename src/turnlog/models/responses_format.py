"""turnlog messages <-> the OpenAI Responses API wire format (plain JSON), both ways.

Pure: no `openai` import, no I/O; shared by `AsyncOpenAIResponsesModel` and
`OpenAIResponsesModel`. Content items and reasoning items are read and written by
`turnlog.models.responses_parts`.

Sent (`to_responses_input`), one message after another into the request's `input` items:

- a system message -> `{"type": "message", "role": "system", "content": text}` (a part that is
  not text goes as its note, `turnlog.text.part_note`, on a line of its own);
- a user message -> `{"type": "message", "role": "user", "content": text}`, or, with parts, a
  content list in order: `input_text`; an image `input_image` (`image_url`: a `data:` URL for
  inline bytes, or the URL; `detail` when set); a file `input_file` (`file_data`: a `data:` URL
  and `filename`, or `file_url`); an OpenAI `ProviderPart` as its stored object; audio (the
  API takes none in a message) as its note;
- an assistant message -> its parts in order, then its tool calls: a run of text parts as one
  `{"type": "message", "role": "assistant", "content": text}`; an OpenAI `ReasoningPart` as
  the `reasoning` item it was read from, exactly (see `reasoning_item`); an OpenAI
  `ProviderPart` as its stored item; each call `{"type": "function_call", "call_id", "name",
  "arguments"}` (the arguments exactly as stored). A call goes where its place marker is
  (`ProviderPart("openai", "function_call", {"call_id": ...})`, which the reader adds only when
  an item followed the call in the reply), else after the parts. Reasoning and provider parts
  of another provider are never sent;
- a tool message with N results -> N `{"type": "function_call_output", "call_id", "output"}`
  items: the text, or a content list (`input_text`, `input_image`, `input_file`) for a result
  with parts. The wire has no error flag: a failed result is sent prefixed with
  `ERROR_PREFIX` (as in Chat Completions), and reading it back sets `is_error` again.

Message and function-call items go without their `id`: an id makes the API look for the
reasoning item that preceded it, which the reasoning policy may have left out of a finished
turn; the reasoning items themselves go as they came, their id included.

Read (`response_from_responses`, `ResponsesStream`): a reply's `output` items in order become
one assistant message: `message` items their text (`output_text` and `refusal` content; their
annotations are not kept), `function_call` items tool calls (`call_id` as the call's id),
`reasoning` items `ReasoningPart("openai", text=<the summary texts joined by a blank line>,
encrypted=<encrypted_content>, signature=<see reasoning_part>)`, and any other item
`ProviderPart("openai", <its type>, <the item as sent>)`. The reply's usage, as the provider
reported it (cached and reasoning tokens included), is kept in the message's metadata under
`USAGE_KEY`; with `previous_response_id` the response's id under `RESPONSE_ID_KEY`.

A part with an attachment reference (`ref`) carries no bytes: the turn runner puts them back
first (`SessionService.with_bytes`); here it is an `InvalidInput`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from turnlog.events import Message, ToolCall, ToolResult
from turnlog.models.base import (
    CappedReply,
    ChatResponse,
    IncompleteReply,
    MalformedReply,
    Usage,
    count,
    field_of,
    whole_reply,
)
from turnlog.models.openai_format import ERROR_PREFIX
from turnlog.models.responses_parts import (
    PROVIDER,
    content_item,
    content_part,
    provider_item,
    reasoning_item,
    reasoning_part,
)
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    JsonValue,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
)
from turnlog.text import part_note
from turnlog.toolsearch.base import ToolReference

__all__ = [
    "CAP_REASON",
    "ERROR_PREFIX",
    "MARKER_KIND",
    "PROVIDER",
    "RESPONSE_ID_KEY",
    "USAGE_KEY",
    "ChainStart",
    "ResponseFailed",
    "ResponsesStream",
    "chain_start",
    "from_responses_input",
    "output_message",
    "response_from_responses",
    "responses_tools",
    "to_responses_input",
    "whole_summary",
]

RESPONSE_ID_KEY: Final = "openai_responses.response_id"
"""Message metadata key: the id of the stored response a reply came from (set only with
`previous_response_id`, whose next request names it)."""

USAGE_KEY: Final = "openai_responses.usage"
"""Message metadata key: the reply's `usage` object exactly as the provider reported it
(`input_tokens_details.cached_tokens`, `output_tokens_details.reasoning_tokens`, ...)."""

MARKER_KIND: Final = "function_call"
"""The kind of the `ProviderPart` that marks where a tool call stood among a reply's items,
its data `{"call_id": <the call's id>}`. Only a call that another item followed gets one; the
marker itself is never sent."""

CAP_REASON: Final = "max_output_tokens"
"""The `incomplete_details.reason` of a reply the model stopped at its token cap."""


class ResponseFailed(Exception):
    """A response the provider reports as failed or cancelled, or an `error` event of a
    stream (internal: the adapters turn it into `ModelError`)."""


# -- messages to input items ---------------------------------------------------------------------


def _noted_text(parts: Sequence[Part]) -> str:
    pieces = []
    for part in parts:
        if type(part) is TextPart:
            pieces.append(part.text)
        elif type(part) in (ImagePart, FilePart, AudioPart):
            pieces.append(f"\n{part_note(part)}\n")
    return "".join(pieces).strip("\n")


def _message(role: str, content: str | list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content}


def _user_content(m: Message) -> str | list[dict[str, Any]]:
    if not m.parts:
        return m.text or ""
    return [c for c in (content_item(p) for p in m.parts) if c is not None]


def _result_item(r: ToolResult) -> dict[str, Any]:
    output: str | list[dict[str, Any]]
    if r.parts:
        output = [c for c in (content_item(p) for p in r.parts) if c is not None]
        if r.is_error:
            output.insert(0, {"type": "input_text", "text": ERROR_PREFIX})
    else:
        output = ERROR_PREFIX + r.content if r.is_error else r.content
    return {"type": "function_call_output", "call_id": r.call_id, "output": output}


def _call_item(call: ToolCall) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
    }


def _marked(part: Part) -> str | None:
    """The call id of a place marker; None for any other part."""
    if type(part) is ProviderPart and part.provider == PROVIDER and part.kind == MARKER_KIND:
        data = part.data
        if isinstance(data, dict) and isinstance(data.get("call_id"), str):
            return str(data["call_id"])
    return None


def _assistant_items(m: Message) -> list[dict[str, Any]]:
    if not m.parts:
        items = [_message("assistant", m.text)] if m.text else []
        return items + [_call_item(c) for c in m.tool_calls]
    calls = {c.id: c for c in m.tool_calls}
    sent: set[str] = set()
    items = []
    run: list[str] = []
    for part in m.parts:
        if type(part) is TextPart:
            run.append(part.text)
            continue
        if run and "".join(run):
            items.append(_message("assistant", "".join(run)))
        run = []
        marked = _marked(part)
        if marked is not None:
            if marked in calls and marked not in sent:
                items.append(_call_item(calls[marked]))
                sent.add(marked)
        elif type(part) is ReasoningPart:
            item = reasoning_item(part)
            if item is not None:
                items.append(item)
        elif (stored := provider_item(part)) is not None:
            items.append(stored)
        # media in an assistant message, another provider's part: not sent
    if run and "".join(run):
        items.append(_message("assistant", "".join(run)))
    return items + [_call_item(c) for c in m.tool_calls if c.id not in sent]


def to_responses_input(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """`messages` as Responses `input` items (see the module docstring).

    Returns:
        A new list of plain JSON objects.

    Raises:
        InvalidInput: a media part holds an attachment reference instead of its bytes.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.extend(_result_item(r) for r in m.tool_results)
        elif m.role == "assistant":
            out.extend(_assistant_items(m))
        elif m.role == "user":
            out.append(_message("user", _user_content(m)))
        else:
            text = _noted_text(m.parts) if m.parts else m.text or ""
            out.append(_message(m.role, text))
    return out


class ChainStart(NamedTuple):
    """What a request with `previous_response_id` sends (see `chain_start`)."""

    instructions: str | None
    """The system messages' text, joined by a blank line; None when there is none."""
    previous: str | None
    """The id of the last stored response; None when there is none (a new chain)."""
    messages: list[Message]
    """The messages to send as input: those after that response, system messages aside."""


def chain_start(messages: Sequence[Message]) -> ChainStart:
    """Where a request with `previous_response_id` starts.

    The system messages go as `instructions`, in every request: the API does not carry them
    over from the previous response, so a changed system prompt takes effect at once. Of the
    other messages, those after the last stored response (an assistant message whose metadata
    holds `RESPONSE_ID_KEY`) are sent; every one when there is none.
    """
    system = [m for m in messages if m.role == "system"]
    others = [m for m in messages if m.role != "system"]
    texts = [_noted_text(m.parts) if m.parts else m.text or "" for m in system]
    instructions = "\n\n".join(texts) if system else None
    for i in range(len(others) - 1, -1, -1):
        found = others[i].metadata.get(RESPONSE_ID_KEY)
        if others[i].role == "assistant" and isinstance(found, str) and found:
            return ChainStart(instructions, found, others[i + 1 :])
    return ChainStart(instructions, None, others)


def responses_tools(tools: Sequence[ToolReference] | None) -> list[dict[str, Any]]:
    """The `tools` parameter for `tools` (empty when None): function tools, with `strict`
    False said explicitly (strict mode refuses a schema with optional parameters, which a
    tool made from a function with defaults has)."""
    out = []
    for tool in tools or ():
        neutral = tool.as_dict()
        out.append(
            {
                "type": "function",
                "name": neutral["name"],
                "description": neutral["description"],
                "parameters": neutral["parameters"],
                "strict": False,
            }
        )
    return out


# -- output items to a message -------------------------------------------------------------------


def _arguments(raw: object, what: str) -> str:
    """A call's arguments as stored: the string exactly as sent; "" (no arguments) is "{}"."""
    if isinstance(raw, str):
        return raw if raw.strip() else "{}"
    raise MalformedReply(f"a function_call of {what} has no arguments string")


def _call(item: dict[str, Any], what: str) -> ToolCall:
    where = f"a function_call of {what}"
    return ToolCall(
        str(field_of(item, "call_id", str, where)),
        str(field_of(item, "name", str, where)),
        _arguments(item.get("arguments"), what),
    )


def _message_text(item: dict[str, Any], what: str) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MalformedReply(f"a message item of {what} has no content list")
    texts = []
    for entry in content:
        kind = field_of(entry, "type", str, f"a message item of {what}")
        if kind in ("output_text", "input_text"):
            texts.append(str(field_of(entry, "text", str, f"an {kind} of {what}")))
        elif kind == "refusal":
            texts.append(str(field_of(entry, "refusal", str, f"a refusal of {what}")))
    return "".join(texts)


def output_message(
    output: Iterable[object], what: str, metadata: Mapping[str, JsonValue] | None = None
) -> Message:
    """A reply's `output` items as one assistant message (see the module docstring).

    A call another item follows gets a place marker at its place among the parts, so that
    `to_responses_input` sends the items back in their order.

    Raises:
        MalformedReply: an item that is no JSON object, or one without its fields.
    """
    read: list[Part | ToolCall] = []
    for item in output:
        kind = field_of(item, "type", str, f"an output item of {what}")
        assert isinstance(item, dict)
        if kind == "message":
            text = _message_text(item, what)
            if text:
                read.append(TextPart(text))
        elif kind == "function_call":
            read.append(_call(item, what))
        elif kind == "reasoning":
            read.append(reasoning_part(item, f"a reasoning item of {what}"))
        else:
            read.append(ProviderPart(PROVIDER, str(kind), item))
    last_part = max((i for i, x in enumerate(read) if not isinstance(x, ToolCall)), default=-1)
    parts: list[Part] = []
    calls: list[ToolCall] = []
    for i, x in enumerate(read):
        if isinstance(x, ToolCall):
            calls.append(x)
            if i < last_part:
                parts.append(ProviderPart(PROVIDER, MARKER_KIND, {"call_id": x.id}))
        else:
            parts.append(x)
    meta = dict(metadata or {})
    return Message("assistant", None, tuple(calls), metadata=meta, parts=tuple(parts))


def _usage(raw: object) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    details = raw.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    out_details = raw.get("output_tokens_details")
    reasoning = out_details.get("reasoning_tokens") if isinstance(out_details, dict) else None
    return Usage(
        count(raw.get("input_tokens")),
        count(raw.get("output_tokens")),
        count(cached),
        count(reasoning),
    )


def _failure(error: object, status: str) -> ResponseFailed:
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        return ResponseFailed(f"the response {status}: {code}: {message}")
    return ResponseFailed(f"the response {status}")


def _stop_reason(body: dict[str, Any]) -> str | None:
    """The reply's `status`, or for an incomplete one the reason it gives (`CAP_REASON`,
    "content_filter").

    Raises:
        ResponseFailed: the response failed or was cancelled.
        MalformedReply: the response is not finished (a background response, still queued).
    """
    status = body.get("status")
    if status is None or status == "completed":
        return status
    if status == "incomplete":
        details = body.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return reason if isinstance(reason, str) else "incomplete"
    if status in ("failed", "cancelled"):
        raise _failure(body.get("error"), str(status))
    raise MalformedReply(f"the response is {status!r}, not finished")


def _checked(response: ChatResponse) -> ChatResponse:
    whole_reply(response)
    if response.message.tool_calls and response.stop_reason == CAP_REASON:
        outcome = "the last call's arguments may be cut, so no tool was run"
        raise CappedReply("its tool calls", CAP_REASON, outcome)
    return response


def whole_summary(response: ChatResponse) -> ChatResponse:
    """`response`, a reply asked for its text alone (a summary), checked not to be cut short.

    Raises:
        CappedReply: the model stopped at its token cap (`max_output_tokens`).
    """
    if response.stop_reason == CAP_REASON:
        outcome = "a summary cut short loses what it leaves out, so it was not kept"
        raise CappedReply("the summary", CAP_REASON, outcome)
    return response


def response_from_responses(body: object, *, stored: bool = False) -> ChatResponse:
    """A Responses reply (the JSON object) as a `ChatResponse`; `stored`: keep the response's
    id in the message's metadata (`RESPONSE_ID_KEY`), for `previous_response_id`.

    Raises:
        MalformedReply: no output list, an item without its fields, an unfinished response.
        ResponseFailed: the response failed or was cancelled.
        DuplicateCallId: two function calls share a call id.
        CappedReply: the reply stopped at the token cap inside its function calls.
    """
    output = field_of(body, "output", list, "the reply")
    assert isinstance(body, dict) and isinstance(output, list)
    reason = _stop_reason(body)
    metadata: dict[str, JsonValue] = {}
    if isinstance(body.get("usage"), dict):
        metadata[USAGE_KEY] = body["usage"]
    if stored and isinstance(body.get("id"), str):
        metadata[RESPONSE_ID_KEY] = body["id"]
    model = body.get("model")
    response = ChatResponse(
        message=output_message(output, "the reply", metadata),
        usage=_usage(body.get("usage")),
        model=model if isinstance(model, str) else "",
        stop_reason=reason,
    )
    return _checked(response)


# -- input items back to messages ----------------------------------------------------------------


def _content_parts(content: object, what: str) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(content)]
    if not isinstance(content, list):
        raise MalformedReply(f"{what} has a content that is neither text nor a list")
    return [content_part(entry, what) for entry in content]


def _output_result(item: dict[str, Any], names: Mapping[str, str], what: str) -> ToolResult:
    call_id = str(field_of(item, "call_id", str, what))
    name = names.get(call_id, "")
    output = item.get("output")
    if isinstance(output, str):
        failed = output.startswith(ERROR_PREFIX)
        content = output[len(ERROR_PREFIX) :] if failed else output
        return ToolResult(call_id, name, content, is_error=failed)
    parts = _content_parts(output, what)
    failed = bool(parts) and parts[0] == TextPart(ERROR_PREFIX)
    return ToolResult(call_id, name, "", is_error=failed, parts=tuple(parts[failed:]))


def from_responses_input(items: Iterable[object]) -> list[Message]:
    """Responses `input` items back as turnlog messages (the inverse of
    `to_responses_input`).

    The items an assistant message was sent as (its messages, reasoning, function calls and
    other items) read back as one assistant message, up to the next user, system or tool item;
    consecutive `function_call_output` items as one tool message.

    Raises:
        MalformedReply: an item of an unknown role or shape.
    """
    out: list[Message] = []
    names: dict[str, str] = {}
    assistant: list[object] = []

    def close_assistant() -> None:
        if assistant:
            message = output_message(assistant, "the input")
            names.update((c.id, c.name) for c in message.tool_calls)
            out.append(message)
            assistant.clear()

    for i, item in enumerate(items):
        what = f"input item {i}"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(kind, str):
            raise MalformedReply(f"{what} is not a JSON object with a type")
        role = item.get("role")
        if kind not in ("message", "function_call_output") or role == "assistant":
            assistant.append(dict(item, type=kind))
            continue
        close_assistant()
        if kind == "function_call_output":
            result = _output_result(item, names, what)
            if out and out[-1].role == "tool":
                out[-1] = Message.tool((*out[-1].tool_results, result))
            else:
                out.append(Message.tool(result))
        elif role == "user":
            out.append(Message.user(*_content_parts(item.get("content"), what)))
        elif role in ("system", "developer"):
            content = item.get("content")
            text = content if isinstance(content, str) else _message_text(item, what)
            out.append(Message.system(text))
        else:
            raise MalformedReply(f"{what} has an unknown role {role!r}")
    close_assistant()
    return out


# -- a streamed reply ----------------------------------------------------------------------------


class ResponsesStream:
    """Reads a streamed Responses reply event by event (the JSON data of each SSE event).

    Args:
        stored: keep the response's id in the message's metadata (`previous_response_id`).
    """

    def __init__(self, *, stored: bool = False) -> None:
        self._stored = stored
        self._response: dict[str, Any] | None = None
        self._items: dict[int, dict[str, Any]] = {}
        self._texts: dict[int, list[str]] = {}
        self._arguments: dict[int, list[str]] = {}
        self._done: set[int] = set()
        self._ended = False

    def feed(self, event: object) -> str | None:
        """Take one event.

        Returns:
            The text it adds (an `output_text` delta), or None when it adds none.

        Raises:
            MalformedReply: the event is no JSON object, or a delta of an item never added.
            ResponseFailed: a `response.failed` or `error` event.
        """
        kind = field_of(event, "type", str, "a streamed event")
        assert isinstance(event, dict)
        if kind in ("response.created", "response.in_progress"):
            self._take_response(event)
        elif kind in ("response.completed", "response.incomplete"):
            self._take_response(event)
            self._ended = True
        elif kind == "response.failed":
            response = event.get("response")
            raise _failure(response.get("error") if isinstance(response, dict) else None, "failed")
        elif kind == "error":
            raise _failure(event, "failed")
        elif kind == "response.output_item.added":
            index, item = self._indexed_item(event)
            self._items[index] = dict(item)
            self._texts[index] = []
            self._arguments[index] = []
        elif kind == "response.output_item.done":
            index, item = self._indexed_item(event)
            self._items[index] = dict(item)
            self._done.add(index)
        elif kind == "response.output_text.delta":
            delta = str(field_of(event, "delta", str, kind))
            self._pieces(self._texts, event, kind).append(delta)
            return delta or None
        elif kind == "response.function_call_arguments.delta":
            delta = str(field_of(event, "delta", str, kind))
            self._pieces(self._arguments, event, kind).append(delta)
        return None

    def _take_response(self, event: dict[str, Any]) -> None:
        response = field_of(event, "response", dict, str(event["type"]))
        assert isinstance(response, dict)
        self._response = response

    def _indexed_item(self, event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        index = field_of(event, "output_index", int, str(event["type"]))
        item = field_of(event, "item", dict, str(event["type"]))
        assert isinstance(index, int) and isinstance(item, dict)
        return index, item

    def _pieces(self, pieces: dict[int, list[str]], event: dict[str, Any], kind: str) -> list[str]:
        index = field_of(event, "output_index", int, kind)
        assert isinstance(index, int)
        if index not in pieces:
            raise MalformedReply(f"a {kind} event for output item {index}, which was never added")
        return pieces[index]

    def _item(self, index: int) -> dict[str, Any]:
        """An output item: whole from its `output_item.done`, else as added plus its deltas."""
        item = self._items[index]
        if index in self._done:
            return item
        if item.get("type") == "message" and self._texts[index]:
            text = "".join(self._texts[index])
            return dict(item, content=[{"type": "output_text", "text": text}])
        if item.get("type") == "function_call" and self._arguments[index]:
            return dict(item, arguments="".join(self._arguments[index]))
        return item

    def response(self) -> ChatResponse:
        """The whole reply, once the stream has ended.

        A stream is whole once `response.completed` (or `response.incomplete`) came. The
        output is the streamed items in order (each whole from its `output_item.done`, or
        assembled from its deltas); when no item was streamed, the final response's `output`.

        Raises:
            IncompleteReply: the stream ended before `response.completed`.
            MalformedReply, DuplicateCallId, CappedReply: as `response_from_responses`.
        """
        if self._response is None or not self._ended:
            got = f"{len(self._items)} output items"
            raise IncompleteReply(f"the stream ended before response.completed, after {got}")
        body = dict(self._response)
        if self._items:
            body["output"] = [self._item(i) for i in sorted(self._items)]
        elif not isinstance(body.get("output"), list):
            body["output"] = []
        return response_from_responses(body, stored=self._stored)
