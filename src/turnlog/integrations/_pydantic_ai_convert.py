"""pydantic-ai messages <-> turnlog events: the pure half of `turnlog.integrations.pydantic_ai`.

No I/O. A `ModelMessage` becomes one or more turnlog messages (a request's system prompt, user
prompt and tool returns are separate turns in turnlog); every one of them carries, in
`Message.metadata["pydantic_ai"]`, the message's own fields and its share of the parts exactly as
`ModelMessagesTypeAdapter` dumps them, so the view gives back the very message that was stored.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pydantic_ai.messages import (
    AudioUrl,
    BaseToolReturnPart,
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolReturnPart,
    RetryFeedbackPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    VideoUrl,
)

from turnlog import parts as tl
from turnlog.compaction import sent_events
from turnlog.errors import CorruptData, InvalidInput
from turnlog.events import EventType, JsonValue, Message, SessionEvent, ToolCall, ToolResult
from turnlog.rules import repair_messages

__all__ = [
    "META_KEY",
    "UNSHOWN",
    "events_for",
    "message_key",
    "stored_keys",
    "to_model_messages",
]

META_KEY: Final = "pydantic_ai"
"""The `Message.metadata` key holding a pydantic-ai message's stored form."""

SYNTHETIC_KEY: Final = "turnlog"
"""The `metadata` key of a `ModelMessage` turnlog made (a summary, a repair): never stored back."""

UNSHOWN: Final = EventType.of("PYDANTIC_AI.MESSAGE")
"""A request with nothing a model reads as conversation: stored, never in the view."""

_MARK: Final = "_turnlog_stored"
"""Where a message object keeps `(session_id, key)` once stored or read from the view: in the
object's `__dict__`, outside its fields, so it is never compared, serialized or validated."""


def dump(message: ModelMessage) -> dict[str, Any]:
    """`message` as `ModelMessagesTypeAdapter` dumps it to JSON-compatible Python."""
    dumped: dict[str, Any] = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    return dumped


def load(dumped: Mapping[str, Any]) -> ModelMessage:
    """The message `dump` returned `dumped` for."""
    return ModelMessagesTypeAdapter.validate_python([dict(dumped)])[0]


def message_key(session_id: str, dumped: Mapping[str, Any]) -> str:
    """A message's key in a session: a digest of its stored form (storing it twice is a no-op)."""
    raw = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{session_id}\0{raw}".encode())
    return digest.hexdigest()[:40]


def mark(message: ModelMessage, session_id: str, *keys: str) -> None:
    """Remember on the object that `session_id` holds it, under `keys` (several for a request
    merged from several stored ones, none for one turnlog made)."""
    message.__dict__[_MARK] = (session_id, keys)


def stored_keys(message: ModelMessage, session_id: str) -> tuple[str, ...] | None:
    """The keys `session_id` holds `message` under, if the object says it holds it."""
    found = message.__dict__.get(_MARK)
    if isinstance(found, tuple) and len(found) == 2 and found[0] == session_id:
        return tuple(found[1])
    return None


def is_synthetic(message: ModelMessage) -> bool:
    """True for a message turnlog made for the view (a summary, a repair placeholder)."""
    return bool(message.metadata and SYNTHETIC_KEY in message.metadata)


# -- to turnlog ---------------------------------------------------------------------------


@dataclass
class _Turn:
    """One turnlog message being built from part of a request: its role, text, results, the
    request's parts it holds (by index), and its turnlog parts when it has any besides text."""

    role: str
    texts: list[str]
    results: list[ToolResult]
    parts: list[int]
    content: tuple[tl.Part, ...] = ()
    bytes_at: tuple[tuple[int, int, int], ...] = ()
    """Where inline bytes are held by `content` rather than the stored form: (request part
    index, index in its content, index in `content`), one per `BinaryContent`."""


def _user_text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    pieces: list[str] = []
    for item in part.content:
        if isinstance(item, str):
            pieces.append(item)
        else:
            pieces.append(f"[{getattr(item, 'kind', type(item).__name__)}]")
    return "\n".join(pieces)


def _detail(item: ImageUrl | BinaryContent) -> str | None:
    detail = (item.vendor_metadata or {}).get("detail")
    return detail if detail in tl.DETAILS else None


def _media_part(item: object) -> tl.Part | None:
    """The turnlog part of a pydantic-ai multi-modal item; None for one turnlog does not model
    (or one whose media type or URL a part refuses): it stays a note in the text."""
    try:
        if isinstance(item, BinaryContent):
            if item.is_image:
                return tl.ImagePart(item.media_type, data=item.data, detail=_detail(item))
            if item.is_audio:
                return tl.AudioPart(item.media_type, data=item.data)
            return tl.FilePart(item.media_type, data=item.data)
        if isinstance(item, ImageUrl):
            return tl.ImagePart(item.media_type, url=item.url, detail=_detail(item))
        if isinstance(item, AudioUrl):
            return tl.AudioPart(item.media_type, url=item.url)
        if isinstance(item, (DocumentUrl, VideoUrl)):
            return tl.FilePart(item.media_type, url=item.url)
    except (InvalidInput, ValueError):  # ValueError: a URL whose media type cannot be inferred
        return None
    return None


def _user_parts(
    part: UserPromptPart, index: int
) -> tuple[tuple[tl.Part, ...], tuple[tuple[int, int, int], ...]]:
    """A user prompt's content as turnlog parts (texts joined by newlines, as `_user_text`
    joins them), and where its inline bytes are; empty when it holds no image, file or audio."""
    if isinstance(part.content, str):
        return (), ()
    out: list[tl.Part] = []
    bytes_at: list[tuple[int, int, int]] = []
    texts = 0
    for j, item in enumerate(part.content):
        media = None if isinstance(item, str) else _media_part(item)
        if media is not None:
            if isinstance(item, BinaryContent):
                bytes_at.append((index, j, len(out)))
            out.append(media)
            continue
        text = item if isinstance(item, str) else f"[{getattr(item, 'kind', 'content')}]"
        out.append(tl.TextPart("\n" + text if texts else text))
        texts += 1
    if all(type(p) is tl.TextPart for p in out):
        return (), ()
    return tuple(out), tuple(bytes_at)


def _request_turns(request: ModelRequest) -> list[_Turn]:
    """Split a request into turns: system prompt, user text, tool results (several per turn)."""
    turns: list[_Turn] = []
    waiting: list[int] = []  # parts with no turn of their own, before the first turn
    for index, part in enumerate(request.parts):
        if isinstance(part, SystemPromptPart):
            turn = _Turn("system", [part.content], [], [])
        elif isinstance(part, UserPromptPart):
            content, bytes_at = _user_parts(part, index)
            turn = _Turn("user", [_user_text(part)], [], [], content, bytes_at)
        elif isinstance(part, RetryFeedbackPart):
            turn = _Turn("user", [part.model_response()], [], [])
        elif isinstance(part, BaseToolReturnPart) and not isinstance(part, NativeToolReturnPart):
            result = ToolResult(
                call_id=part.tool_call_id,
                name=part.tool_name,
                content=part.model_response_str(),
                is_error=isinstance(part, ToolReturnPart) and part.outcome != "success",
            )
            if turns and turns[-1].role == "tool" and turns[-1].parts[-1] == index - 1:
                turns[-1].results.append(result)
                turns[-1].parts.append(index)
                continue
            turn = _Turn("tool", [], [result], [])
        else:  # instructions, deltas and the like travel with the turn before them
            if turns:
                turns[-1].parts.append(index)
            else:
                waiting.append(index)
            continue
        turn.parts.extend(waiting)
        waiting.clear()
        turn.parts.append(index)
        turns.append(turn)
    return turns


def _response_message(response: ModelResponse) -> Message:
    texts = [p.content for p in response.parts if isinstance(p, TextPart)]
    calls = [
        ToolCall(p.tool_call_id, p.tool_name, p.args_as_json_str())
        for p in response.parts
        if isinstance(p, ToolCallPart)
    ]
    text = "\n\n".join(texts) if texts else None
    blank = not calls and not (text and text.strip())
    kinds = ", ".join(p.part_kind for p in response.parts) or "empty"
    if any(isinstance(p, ThinkingPart) for p in response.parts):
        # Reasoning and text in order (texts joined by blank lines, as without reasoning); a
        # reply of nothing but reasoning gets a note as its text, as a reply needs some.
        parts: list[tl.Part] = []
        joined = False
        for p in response.parts:
            if isinstance(p, ThinkingPart):
                parts.append(
                    tl.ReasoningPart(
                        p.provider_name or "pydantic-ai", text=p.content, signature=p.signature
                    )
                )
            elif isinstance(p, TextPart):
                parts.append(tl.TextPart("\n\n" + p.content if joined else p.content))
                joined = True
        if blank:
            parts.append(tl.TextPart(f"\n\n[{kinds}]" if joined else f"[{kinds}]"))
        return Message("assistant", None, tuple(calls), parts=tuple(parts))
    if blank:
        text = f"[{kinds}]"
    return Message("assistant", text, tuple(calls))


def _b64(data: bytes) -> str:
    """Bytes as `ModelMessagesTypeAdapter` dumps them to JSON (URL-safe base64)."""
    return base64.urlsafe_b64encode(data).decode()


def _without_bytes(
    shared: list[JsonValue], at: Sequence[int], turn: _Turn
) -> tuple[list[JsonValue], list[list[int]]]:
    """`shared` (the stored form of the request parts at `at`) with the inline bytes the turn's
    parts hold blanked, and pointers to put them back: [position in `shared`, index in its
    content, index in the message's parts]. Bytes whose stored form is not theirs stay."""
    out = list(shared)
    pointers: list[list[int]] = []
    for index, j, k in turn.bytes_at:
        position = list(at).index(index)
        stored = out[position]
        data = getattr(turn.content[k], "data", None)
        item = stored["content"][j]
        if data is None or item.get("data") != _b64(data):
            continue
        content = list(stored["content"])
        content[j] = {**item, "data": ""}
        out[position] = {**stored, "content": content}
        pointers.append([position, j, k])
    return out, pointers


def _with_bytes(share: Mapping[str, Any], message: Message) -> list[JsonValue]:
    """The stored form of a share's parts with the bytes `_without_bytes` took out put back."""
    parts: list[JsonValue] = list(share["parts"])
    for position, j, k in share.get("bytes", ()):
        data = getattr(message.parts[k], "data", None) if k < len(message.parts) else None
        if not isinstance(data, bytes):
            raise CorruptData(
                f"the pydantic-ai message {share['key']!r} lost the bytes of its part {k}: "
                "the event's parts do not hold them inline"
            )
        stored = parts[position]
        content = list(stored["content"])
        content[j] = {**content[j], "data": _b64(data)}
        parts[position] = {**stored, "content": content}
    return parts


def events_for(
    session_id: str, message: ModelMessage, dumped: Mapping[str, Any], key: str
) -> list[SessionEvent]:
    """The events that store `message` (dumped as `dumped`, keyed `key`) in `session_id`.

    Their ids derive from `key`: appending them again is a no-op.
    """
    envelope = {k: v for k, v in dumped.items() if k != "parts"}
    parts: list[JsonValue] = list(dumped["parts"])
    count = len(parts)

    def meta(indices: Sequence[int], turn: _Turn | None = None) -> dict[str, JsonValue]:
        shared = [parts[i] for i in indices]
        pointers: list[list[int]] = []
        if turn is not None and turn.bytes_at:
            shared, pointers = _without_bytes(shared, indices, turn)
        share: dict[str, JsonValue] = {
            "key": key,
            "message": envelope,
            "parts": shared,
            "at": list(indices),
            "count": count,
        }
        if pointers:
            share["bytes"] = pointers
        return {META_KEY: share}

    def event_id(n: int) -> str:
        return f"pyai-{key}-{n}"

    if isinstance(message, ModelResponse):
        base = _response_message(message)
        stored = Message(
            "assistant",
            None if base.parts else base.text,
            base.tool_calls,
            metadata=meta(range(count)),
            parts=base.parts,
        )
        return [SessionEvent.for_message(session_id, stored, event_id=event_id(0))]
    turns = _request_turns(message)
    if not turns:
        payload = {"key": key, "message": dict(dumped)}
        return [SessionEvent.for_payload(session_id, UNSHOWN, payload, event_id=event_id(0))]
    events: list[SessionEvent] = []
    for n, turn in enumerate(turns):
        text = "\n\n".join(turn.texts) if turn.texts else None
        stored = Message(
            turn.role,  # type: ignore[arg-type]
            None if turn.role == "tool" or turn.content else text,
            tool_results=tuple(turn.results),
            metadata=meta(turn.parts, turn),
            parts=turn.content,
        )
        events.append(SessionEvent.for_message(session_id, stored, event_id=event_id(n)))
    return events


# -- from turnlog -------------------------------------------------------------------------


def _synthetic(message: Message, timestamp: datetime) -> ModelMessage:
    """A turnlog-made message (a summary turn, a repair placeholder) as a pydantic-ai message."""
    note: dict[str, Any] = {SYNTHETIC_KEY: dict(message.metadata) or {"synthetic": True}}
    if message.role == "assistant":
        response_parts: list[Any] = [TextPart(message.text)] if message.text else []
        response_parts.extend(
            ToolCallPart(c.name, c.arguments, tool_call_id=c.id) for c in message.tool_calls
        )
        return ModelResponse(parts=response_parts, metadata=note, timestamp=timestamp)
    request_parts: list[Any]
    if message.role == "system":
        request_parts = [SystemPromptPart(message.text or "", timestamp=timestamp)]
    elif message.role == "user":
        request_parts = [UserPromptPart(message.text or "", timestamp=timestamp)]
    else:
        request_parts = [
            ToolReturnPart(
                r.name,
                r.content,
                tool_call_id=r.call_id,
                outcome="failed" if r.is_error else "success",
                timestamp=timestamp,
            )
            for r in message.tool_results
        ]
    return ModelRequest(parts=request_parts, metadata=note, timestamp=timestamp)


def to_model_messages(
    session_id: str,
    events: Sequence[SessionEvent],
    originals: Mapping[str, ModelMessage] | None = None,
) -> list[ModelMessage]:
    """The view (`events`, as `service.view` returns them) as pydantic-ai messages.

    The messages are those `view_messages` sends: the latest system prompt first, repaired by
    `turnlog.rules.repair_messages` when the log broke a rule.

    Consecutive turns of one stored message become that message again: the original object from
    `originals` (by key) when the view holds all its parts, else one rebuilt from the stored form
    (a request partly compacted away keeps the parts still in view). Turns turnlog made (a
    summary, a repair placeholder) become messages whose `metadata` holds the key "turnlog".
    """
    found = originals or {}
    sent = [e for e in sent_events(events) if e.message is not None]
    view = repair_messages([e.message for e in sent if e.message is not None])
    # A turn turnlog made is dated by its event; a repair placeholder by the event before it.
    when: dict[int, datetime] = {id(e.message): e.timestamp for e in sent if e.timestamp}
    at = datetime(1970, 1, 1, tzinfo=UTC)
    stamps: list[datetime] = []
    for message in view:
        at = when.get(id(message), at)
        stamps.append(at)
    # Each slot of `out` is a message, or the stored form of one still to validate; all those
    # are validated at once (one call for the whole view is far cheaper than one per message).
    out: list[ModelMessage | tuple[str, dict[str, Any]]] = []
    index = 0
    while index < len(view):
        share = view[index].metadata.get(META_KEY)
        if not isinstance(share, Mapping):
            made = _synthetic(view[index], stamps[index])
            mark(made, session_id)
            out.append(made)
            index += 1
            continue
        key = share["key"]
        shares: list[tuple[Mapping[str, Any], Message]] = []
        while index < len(view):
            next_share = view[index].metadata.get(META_KEY)
            if not isinstance(next_share, Mapping) or next_share["key"] != key:
                break
            shares.append((next_share, view[index]))
            index += 1
        whole = sum(len(s["at"]) for s, _ in shares) == share["count"]
        original = found.get(key)
        if whole and original is not None:
            mark(original, session_id, key)
            out.append(original)
        else:
            group: list[tuple[int, JsonValue]] = []
            for next_share, turn in shares:
                group.extend(zip(next_share["at"], _with_bytes(next_share, turn), strict=True))
            group.sort(key=lambda pair: pair[0])
            out.append((key, {**share["message"], "parts": [part for _, part in group]}))
    stored = [slot[1] for slot in out if isinstance(slot, tuple)]
    loaded = iter(ModelMessagesTypeAdapter.validate_python(stored) if stored else [])
    messages: list[ModelMessage] = []
    for slot in out:
        if isinstance(slot, tuple):
            validated = next(loaded)
            mark(validated, session_id, slot[0])
            messages.append(validated)
        else:
            messages.append(slot)
    return _merge_requests(session_id, messages)


def _merge_requests(session_id: str, messages: list[ModelMessage]) -> list[ModelMessage]:
    """Consecutive requests merged into one, tool returns first, as pydantic-ai merges a history
    it is given (so it has nothing left to merge, and the objects it keeps are these): the later
    request's timestamp and run, the earlier one's instructions, both requests' metadata."""
    out: list[ModelMessage] = []
    for message in messages:
        before = out[-1] if out else None
        if not (isinstance(message, ModelRequest) and isinstance(before, ModelRequest)):
            out.append(message)
            continue
        keys = (*(stored_keys(before, session_id) or ()), *(stored_keys(message, session_id) or ()))
        parts = sorted(
            [*before.parts, *message.parts],
            key=lambda p: 0 if isinstance(p, ToolReturnPart) else 1,
        )
        merged = ModelRequest(
            parts=parts,
            timestamp=message.timestamp or before.timestamp,
            instructions=before.instructions or message.instructions,
            run_id=message.run_id or before.run_id,
            conversation_id=message.conversation_id or before.conversation_id,
            metadata={**(before.metadata or {}), **(message.metadata or {})} or None,
        )
        mark(merged, session_id, *keys)
        out[-1] = merged
    return out
