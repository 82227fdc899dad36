"""turnlog messages <-> the Gemini API wire format (plain JSON, camelCase), both ways.

Pure: no `google` import, no I/O; shared by `AsyncGeminiChatModel` and `GeminiChatModel`.
Content parts and reasoning are read and written by `turnlog.models.gemini_parts`.

Sent (`to_gemini`), one message after another into the request's `contents`:

- system messages -> the `systemInstruction` (one text part each, in order; a part that is not
  text goes as its note, `turnlog.text.part_note`), wherever they stand;
- a user message -> `{"role": "user", "parts": [...]}`: its text, or its parts in order
  (`gemini_parts.media_item`: text, `inlineData`, `fileData`, Gemini provider parts);
- an assistant message -> `{"role": "model", "parts": [...]}`: its parts in order, then its
  tool calls. A text part `{"text"}`; a Gemini thought part as it came; a Gemini signature part
  puts its signature back on the part after it (on the first call when only calls follow);
  a Gemini `ProviderPart` as its stored part; each call `{"functionCall": {"name", "args",
  "id"?}}`, its arguments parsed back from the JSON text stored (an id is sent only when Gemini
  gave it). A call goes where its place marker is (`ProviderPart("gemini", "functionCall",
  {"id": <call id>})`, which the reader adds only when a part followed the call), else after
  the parts. Reasoning and provider parts of another provider are never sent, and a message
  left with nothing to send (an empty reply, another provider's reasoning alone) is left out;
- consecutive tool messages -> one `{"role": "user", "parts": [...]}` of `functionResponse`
  parts, one per result, in order: `{"name", "response": {"output": <text>}, "id"?}`, or
  `{"error": <text>}` for a failed result; images and files of a result go as its `parts`
  (`inlineData`, `fileData`), the rest of its text in `output`.

Read (`response_from_gemini`, `GeminiStream`): the first candidate's `content.parts` in order
become one assistant message: text parts `TextPart`s, `functionCall` parts tool calls (the
arguments as JSON text; the call's `id`, or when Gemini gave none one made here, starting with
`GENERATED_ID_PREFIX`), thought parts and signatures reasoning parts (see
`turnlog.models.gemini_parts`), and any other part `ProviderPart("gemini", <its kind>, <the
part as sent>)`. The reply's `usageMetadata`, as reported, is kept in the message's metadata
under `USAGE_KEY`.

A part with an attachment reference (`ref`) carries no bytes: the turn runner puts them back
first (`SessionService.with_bytes`); here it is an `InvalidInput`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

from turnlog.errors import InvalidInput
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
from turnlog.models.gemini_parts import (
    PROVIDER,
    SIGNATURE_KEY,
    media_item,
    part_kind,
    provider_item,
    signature_of,
    signature_part,
    thought_item,
    thought_part,
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
    "GENERATED_ID_PREFIX",
    "MARKER_KIND",
    "PROVIDER",
    "USAGE_KEY",
    "GeminiRequest",
    "GeminiStream",
    "PromptBlocked",
    "gemini_tools",
    "response_from_gemini",
    "to_gemini",
    "whole_summary",
    "wire_json",
]

USAGE_KEY: Final = "gemini.usage"
"""Message metadata key: the reply's `usageMetadata` exactly as reported
(`promptTokenCount`, `candidatesTokenCount`, `thoughtsTokenCount`, `cachedContentTokenCount`,
...)."""

MARKER_KIND: Final = "functionCall"
"""The kind of the `ProviderPart` that marks where a tool call stood among a reply's parts, its
data `{"id": <the call's id>}`. Only a call that a part followed gets one; the marker itself is
never sent."""

GENERATED_ID_PREFIX: Final = "gemini-call-"
"""How the id made for a function call Gemini gave no id starts; such an id is never sent."""

CAP_REASON: Final = "MAX_TOKENS"
"""The `finishReason` of a reply the model stopped at its token cap."""


class PromptBlocked(Exception):
    """A reply without candidates: Gemini blocked the prompt (`promptFeedback.blockReason`)
    (internal: the adapters turn it into `ModelError`)."""


class GeminiRequest(NamedTuple):
    """What one request sends, as the client takes it (see `to_gemini`)."""

    contents: list[dict[str, Any]]
    """The conversation: user and model contents."""
    system_instruction: dict[str, Any] | None
    """The system messages as one content of text parts; None when there is none."""


def wire_json(reply: object) -> object:
    """A reply object of the `google-genai` client (a pydantic model) as the wire format's
    JSON: the fields Gemini sent, under their camelCase names, bytes as base64; a dict as it
    is.

    Raises:
        MalformedReply: the client returned something else.
    """
    dump = getattr(reply, "model_dump", None)
    if callable(dump):
        body = dump(
            mode="json",
            by_alias=True,
            exclude_unset=True,
            exclude_none=True,
            exclude={"sdk_http_response", "automatic_function_calling_history", "parsed"},
            warnings=False,
        )
        return body
    if isinstance(reply, dict):
        return reply
    raise MalformedReply(f"the client returned {type(reply).__name__}, not a JSON object")


# -- messages to contents ------------------------------------------------------------------------


def _noted_text(m: Message) -> str:
    if not m.parts:
        return m.text or ""
    pieces = []
    for part in m.parts:
        if type(part) is TextPart:
            pieces.append(part.text)
        elif type(part) in (ImagePart, FilePart, AudioPart):
            pieces.append(f"\n{part_note(part)}\n")
    return "".join(pieces).strip("\n")


def _user_parts(m: Message) -> list[dict[str, Any]]:
    if not m.parts:
        return [{"text": m.text or ""}]
    items = [c for c in (media_item(p) for p in m.parts) if c is not None]
    return items or [{"text": ""}]


def _args(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the object Gemini sent (the JSON text stored, parsed back)."""
    try:
        args = json.loads(call.arguments)
    except ValueError:
        args = None
    if isinstance(args, dict):
        return args
    return {"arguments": call.arguments}  # not an object (a call read elsewhere): kept whole


def _sent_id(call_id: str) -> bool:
    return not call_id.startswith(GENERATED_ID_PREFIX)


def _call_item(call: ToolCall) -> dict[str, Any]:
    body: dict[str, Any] = {"name": call.name, "args": _args(call)}
    if _sent_id(call.id):
        body["id"] = call.id
    return {"functionCall": body}


def _marked(part: Part) -> str | None:
    """The call id of a place marker; None for any other part."""
    if type(part) is ProviderPart and part.provider == PROVIDER and part.kind == MARKER_KIND:
        data = part.data
        if isinstance(data, dict) and isinstance(data.get("id"), str):
            return str(data["id"])
    return None


def _model_parts(m: Message) -> list[dict[str, Any]]:
    calls = {c.id: c for c in m.tool_calls}
    sent: set[str] = set()
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # the signature for the next part

    def emit(item: dict[str, Any]) -> None:
        if pending:
            item[SIGNATURE_KEY] = pending.pop()
        out.append(item)

    if not m.parts and m.text:
        emit({"text": m.text})
    for part in m.parts:
        signature = signature_of(part)
        marked = _marked(part)
        if signature is not None:
            if pending:  # a signature whose part is gone: kept on an empty text
                emit({"text": ""})
            pending.append(signature)
        elif type(part) is TextPart:
            if part.text or pending:
                emit({"text": part.text})
        elif marked is not None:
            if marked in calls and marked not in sent:
                emit(_call_item(calls[marked]))
                sent.add(marked)
        elif type(part) is ReasoningPart:
            item = thought_item(part)
            if item is not None:
                out.append(item)
        elif (stored := provider_item(part)) is not None:
            out.append(stored)
        # media in an assistant message, another provider's part: not sent
    for call in m.tool_calls:
        if call.id not in sent:
            emit(_call_item(call))
    if pending:
        emit({"text": ""})
    return out


def _response_item(r: ToolResult) -> dict[str, Any]:
    media = [c for c in (media_item(p) for p in r.parts if type(p) is not TextPart) if c]
    body: dict[str, Any] = {
        "name": r.name,
        "response": {"error" if r.is_error else "output": r.content},
    }
    if _sent_id(r.call_id):
        body["id"] = r.call_id
    if media:
        body["parts"] = media
    return {"functionResponse": body}


def to_gemini(messages: Iterable[Message]) -> GeminiRequest:
    """`messages` as Gemini `contents` and `systemInstruction` (see the module docstring).

    Returns:
        New plain JSON objects.

    Raises:
        InvalidInput: a media part holds an attachment reference instead of its bytes.
    """
    contents: list[dict[str, Any]] = []
    system: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the parts of the tool messages in a row
    for m in messages:
        if m.role == "tool":
            if results is None:
                results = []
                contents.append({"role": "user", "parts": results})
            results.extend(_response_item(r) for r in m.tool_results)
            continue
        results = None
        if m.role == "system":
            system.append({"text": _noted_text(m)})
        elif m.role == "assistant":
            parts = _model_parts(m)
            if parts:  # an empty reply: Gemini refuses a content without parts
                contents.append({"role": "model", "parts": parts})
        elif m.role == "user":
            contents.append({"role": "user", "parts": _user_parts(m)})
        else:
            raise InvalidInput(f"a message of role {m.role!r} has no Gemini counterpart")
    instruction = {"parts": system} if system else None
    return GeminiRequest(contents, instruction)


def gemini_tools(tools: Sequence[ToolReference] | None) -> list[dict[str, Any]]:
    """The `tools` parameter for `tools` (empty when None): one tool of function declarations,
    each with its JSON schema as `parametersJsonSchema` (taken as JSON Schema, unlike
    `parameters`, which takes only Gemini's subset)."""
    declarations = []
    for tool in tools or ():
        neutral = tool.as_dict()
        declarations.append(
            {
                "name": neutral["name"],
                "description": neutral["description"],
                "parametersJsonSchema": neutral["parameters"],
            }
        )
    return [{"functionDeclarations": declarations}] if declarations else []


# -- a reply to a message ------------------------------------------------------------------------


def _call(item: dict[str, Any], call_id: str, what: str) -> ToolCall:
    body = field_of(item, "functionCall", dict, f"a part of {what}")
    assert isinstance(body, dict)
    name = str(field_of(body, "name", str, f"a functionCall of {what}"))
    args = body.get("args", {})
    if not isinstance(args, dict):
        raise MalformedReply(f"a functionCall of {what} has args that are not an object")
    given = body.get("id")
    return ToolCall(given if isinstance(given, str) and given else call_id, name, json.dumps(args))


def reply_message(
    parts: Iterable[object], response_id: str | None, what: str, metadata: dict[str, JsonValue]
) -> Message:
    """A candidate's parts as one assistant message (see the module docstring).

    Raises:
        MalformedReply: a part that is no JSON object, or one without its fields.
    """
    stem = GENERATED_ID_PREFIX + (response_id or uuid.uuid4().hex)
    read: list[Part | ToolCall] = []
    for i, item in enumerate(parts):
        if not isinstance(item, dict):
            raise MalformedReply(f"a part of {what} is not a JSON object")
        kind = part_kind(item)
        if kind == "thought":
            read.append(thought_part(item, what))
            continue
        if kind not in ("text", "functionCall", "empty") or not set(item) <= {kind, SIGNATURE_KEY}:
            read.append(ProviderPart(PROVIDER, kind, item))  # its signature, if any, inside
            continue
        if SIGNATURE_KEY in item:
            read.append(signature_part(item[SIGNATURE_KEY], what))
        if kind == "text":
            text = item["text"]
            if not isinstance(text, str):
                raise MalformedReply(f"a text part of {what} has a text that is not a string")
            read.append(TextPart(text))
        elif kind == "functionCall":
            read.append(_call(item, f"{stem}-{i}", what))
        elif SIGNATURE_KEY in item:  # a signature on a part of nothing: kept on an empty text
            read.append(TextPart(""))
    last_part = max((i for i, x in enumerate(read) if not isinstance(x, ToolCall)), default=-1)
    kept: list[Part] = []
    calls: list[ToolCall] = []
    for i, x in enumerate(read):
        if isinstance(x, ToolCall):
            calls.append(x)
            if i < last_part:
                kept.append(ProviderPart(PROVIDER, MARKER_KIND, {"id": x.id}))
        else:
            kept.append(x)
    return Message("assistant", None, tuple(calls), metadata=metadata, parts=tuple(kept))


def _usage(raw: object) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt = count(raw.get("promptTokenCount"))
    reply = count(raw.get("candidatesTokenCount"))
    thoughts = count(raw.get("thoughtsTokenCount"))
    output = None if reply is None and thoughts is None else (reply or 0) + (thoughts or 0)
    cached = count(raw.get("cachedContentTokenCount"))
    return Usage(prompt, output, cached, thoughts)


def _checked(response: ChatResponse) -> ChatResponse:
    whole_reply(response)
    if response.message.tool_calls and response.stop_reason == CAP_REASON:
        outcome = "the last call's arguments may be cut, so no tool was run"
        raise CappedReply("its tool calls", CAP_REASON, outcome)
    return response


def whole_summary(response: ChatResponse) -> ChatResponse:
    """`response`, a reply asked for its text alone (a summary), checked not to be cut short.

    Raises:
        CappedReply: the model stopped at its token cap (`MAX_TOKENS`).
    """
    if response.stop_reason == CAP_REASON:
        outcome = "a summary cut short loses what it leaves out, so it was not kept"
        raise CappedReply("the summary", CAP_REASON, outcome)
    return response


def _candidate(body: dict[str, Any]) -> dict[str, Any]:
    """The reply's first candidate.

    Raises:
        PromptBlocked: there is none, and the prompt feedback says why.
        MalformedReply: there is none, with no reason given.
    """
    candidates = body.get("candidates")
    if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict):
        first: dict[str, Any] = candidates[0]
        return first
    feedback = body.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    if reason is not None:
        raise PromptBlocked(f"Gemini blocked the prompt (blockReason {reason!r})")
    raise MalformedReply("the reply has no candidates")


def _response(
    parts: list[object], body: dict[str, Any], reason: str | None, usage: object
) -> ChatResponse:
    metadata: dict[str, JsonValue] = {}
    if isinstance(usage, dict):
        metadata[USAGE_KEY] = usage
    response_id = body.get("responseId")
    model = body.get("modelVersion")
    response = ChatResponse(
        message=reply_message(
            parts, response_id if isinstance(response_id, str) else None, "the reply", metadata
        ),
        usage=_usage(usage),
        model=model if isinstance(model, str) else "",
        stop_reason=reason,
    )
    return _checked(response)


def _parts_of(candidate: dict[str, Any]) -> list[object]:
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if parts is None:
        return []
    if not isinstance(parts, list):
        raise MalformedReply("the reply's content has parts that are not a list")
    return parts


def response_from_gemini(body: object) -> ChatResponse:
    """A `generateContent` reply (the JSON object) as a `ChatResponse`.

    Raises:
        MalformedReply: no candidates, or a part without its fields.
        PromptBlocked: Gemini blocked the prompt.
        DuplicateCallId: two function calls share an id.
        CappedReply: the reply stopped at the token cap with function calls.
    """
    if not isinstance(body, dict):
        raise MalformedReply("the reply is not a JSON object")
    candidate = _candidate(body)
    reason = candidate.get("finishReason")
    reason = reason if isinstance(reason, str) else None
    return _response(_parts_of(candidate), body, reason, body.get("usageMetadata"))


# -- a streamed reply ----------------------------------------------------------------------------


def _joins(last: dict[str, Any], item: dict[str, Any]) -> bool:
    """Whether a streamed text part continues the one before it: both text of the same kind
    (thought or not), the one before without its signature yet, and nothing else in either."""
    allowed = {"text", "thought", SIGNATURE_KEY}
    return (
        isinstance(last.get("text"), str)
        and isinstance(item.get("text"), str)
        and last.get("thought") is item.get("thought")
        and SIGNATURE_KEY not in last
        and set(last) <= allowed
        and set(item) <= allowed
    )


class GeminiStream:
    """Reads a streamed reply (`streamGenerateContent`, each SSE event a `generateContent`
    reply holding the next pieces of the first candidate).

    The text pieces of a part come one event after another: a text piece continues the text
    part before it (a thought the thought before it) until that part has its signature, which
    Gemini sends on its last piece (or on an empty text after it). Function calls come whole.
    """

    def __init__(self) -> None:
        self._parts: list[dict[str, Any]] = []
        self._body: dict[str, Any] | None = None
        self._usage: object = None
        self._reason: str | None = None

    def feed(self, event: object) -> str | None:
        """Take one event.

        Returns:
            The reply text it adds (thoughts are not reply text), or None when it adds none.

        Raises:
            MalformedReply: the event is no JSON object, or a part is malformed.
            PromptBlocked: Gemini blocked the prompt.
        """
        if not isinstance(event, dict):
            raise MalformedReply("a streamed event is not a JSON object")
        self._body = event
        if isinstance(event.get("usageMetadata"), dict):
            self._usage = event["usageMetadata"]
        if not event.get("candidates"):
            if isinstance(event.get("promptFeedback"), dict):
                _candidate(event)  # raises PromptBlocked when it says so
            return None
        candidate = _candidate(event)
        if isinstance(candidate.get("finishReason"), str):
            self._reason = candidate["finishReason"]
        added = []
        for item in _parts_of(candidate):
            if not isinstance(item, dict):
                raise MalformedReply("a part of a streamed event is not a JSON object")
            last = self._parts[-1] if self._parts else None
            if last is not None and _joins(last, item):
                last["text"] += item["text"]
                if SIGNATURE_KEY in item:
                    last[SIGNATURE_KEY] = item[SIGNATURE_KEY]
            else:
                self._parts.append(dict(item))
            if isinstance(item.get("text"), str) and item.get("thought") is not True:
                added.append(item["text"])
        return "".join(added) or None

    def response(self) -> ChatResponse:
        """The whole reply, once the stream has ended.

        A stream is whole once an event gave the candidate's `finishReason`.

        Raises:
            IncompleteReply: the stream ended before a finishReason.
            MalformedReply, DuplicateCallId, CappedReply: as `response_from_gemini`.
        """
        if self._body is None or self._reason is None:
            got = f"{len(self._parts)} parts"
            raise IncompleteReply(f"the stream ended before a finishReason, after {got}")
        return _response(list(self._parts), self._body, self._reason, self._usage)
