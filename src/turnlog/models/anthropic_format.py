"""turnlog messages <-> the Anthropic Messages wire format (plain JSON), both ways.

Pure: no `anthropic` import, no I/O; shared by `AsyncAnthropicChatModel` and
`AnthropicChatModel`.

The mapping:

- system messages -> the top-level `system` field (several are joined by a blank line); it
  takes text only, so a part that is not text goes as its note (`turnlog.text.part_note`);
- a user message -> `{"role": "user", "content": [{"type": "text", "text"}]}`, or, with parts,
  one block per part in order (images, documents: see `turnlog.models.anthropic_parts`);
- an assistant message -> `{"role": "assistant", "content": [text block (when the text is not
  empty), tool_use blocks {"id", "name", "input"}]}`, `input` being the call's arguments parsed
  (arguments that are not a JSON object are sent as `{"arguments": <the string>}`); with parts,
  its parts' blocks in order (thinking and redacted_thinking exactly as received, Anthropic's
  provider blocks; another provider's reasoning and blocks are left out), then the tool_use
  blocks;
- a tool message -> a user turn of `tool_result` blocks `{"tool_use_id", "content",
  "is_error": true when the call failed}`, the content a list of text, image and document
  blocks for a result with parts;
- consecutive turns of the same role are merged into one (the API wants user and assistant to
  alternate): a tool message and the user message after it become one user turn, its
  tool_result blocks first.

With prompt caching (`to_anthropic_cached`), the same turns carry `cache_control` breakpoints
on the system prompt, at the end of the stable prefix and on the last block.

Back from the wire, each user turn splits into its tool message (the tool_result blocks) and
a user message at each text block after a text; an assistant turn splits where text follows a
text or a call, or reasoning follows other content; tool names are read back from the calls;
arguments are written as compact JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from turnlog.events import Message, ToolCall, ToolResult
from turnlog.models.anthropic_parts import block_part, part_block
from turnlog.models.base import (
    CACHE_BREAKPOINT_KEY,
    ChatResponse,
    IncompleteReply,
    MalformedReply,
    Usage,
    count,
    field_of,
    whole_reply,
)
from turnlog.parts import Part, ReasoningPart, TextPart
from turnlog.text import part_note
from turnlog.toolsearch.base import ToolReference

__all__ = [
    "CACHE_CONTROL",
    "AnthropicStream",
    "anthropic_tools",
    "from_anthropic_messages",
    "response_from_anthropic",
    "to_anthropic_cached",
    "to_anthropic_messages",
]

CACHE_CONTROL: Final = "cache_control"
"""The key of a block's cache breakpoint in the Messages API."""


_UNMARKABLE: Final = frozenset({"thinking", "redacted_thinking"})


def _ephemeral() -> dict[str, Any]:
    """A breakpoint's value: a new dict each time, so no two requests share one."""
    return {"type": "ephemeral"}


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


def _system_text(m: Message) -> str:
    """A system message's text; a part that is not text as its note, on a line of its own (the
    API's `system` field takes text only)."""
    if not m.parts:
        return m.text or ""
    pieces = []
    for part in m.parts:
        pieces.append(part.text if type(part) is TextPart else f"\n{part_note(part)}\n")
    return "".join(pieces).strip("\n")


def _part_blocks(parts: Iterable[Part]) -> list[dict[str, Any]]:
    return [b for b in (part_block(p) for p in parts) if b is not None]


def _result_block(r: ToolResult) -> dict[str, Any]:
    content: str | list[dict[str, Any]] = r.content
    if r.parts:
        content = _part_blocks(r.parts) or ""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": r.call_id, "content": content}
    if r.is_error:
        block["is_error"] = True
    return block


def _blocks(m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        return [_result_block(r) for r in m.tool_results]
    if m.parts:
        blocks = _part_blocks(m.parts)
    else:
        blocks = [{"type": "text", "text": m.text}] if m.text else []
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)}
        for c in m.tool_calls
    )
    return blocks


def _convert(
    messages: Iterable[Message],
) -> tuple[list[str], list[dict[str, Any]], tuple[int, int] | None]:
    """The system texts, the turns, and where the stable prefix ends on the wire: the
    (turn, block) index of the last block sent up to and including the last message marked
    with `CACHE_BREAKPOINT_KEY` (None when no message is marked, or none sent before it)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    marked: tuple[int, int] | None = None
    for m in messages:
        if m.role == "system":
            system.append(_system_text(m))
            continue  # the system prompt has a breakpoint of its own
        role = "assistant" if m.role == "assistant" else "user"
        blocks = _blocks(m)
        if blocks:  # an empty assistant message is left out: the API refuses empty content
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        if m.metadata.get(CACHE_BREAKPOINT_KEY) is True and turns:
            marked = (len(turns) - 1, len(turns[-1]["content"]) - 1)
    return system, turns, marked


def to_anthropic_messages(
    messages: Iterable[Message],
) -> tuple[str | None, list[dict[str, Any]]]:
    """`messages` as the Messages API's `system` and `messages` (see the module docstring).

    Returns:
        (the system prompt, or None when there is none; the list of user/assistant turns).
    """
    system, turns, _ = _convert(messages)
    return ("\n\n".join(system) if system else None), turns


def to_anthropic_cached(
    messages: Iterable[Message],
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """`messages` as `to_anthropic_messages` sends them, with prompt-cache breakpoints.

    A breakpoint (`"cache_control": {"type": "ephemeral"}`) goes on at most three blocks, under
    the API's limit of four:

    1. the system prompt, sent as one text block (so the tools and the system prompt are cached);
    2. the last block sent up to the last non-system message whose metadata holds
       `CACHE_BREAKPOINT_KEY` set to True (the end of the pinned messages and the summary);
    3. the last block of the last turn (the whole prompt, which the next request reads from the
       cache when it starts the same way).

    A block that two of these fall on carries one marker. Only markers are added: the blocks
    and their order are those of `to_anthropic_messages`, so the content the cache matches is
    the same wherever the breakpoints fall (the last one moves every request, as the API's
    multi-turn caching expects).

    Returns:
        (the system prompt as a list of one text block, or None when there is none; the list
        of user/assistant turns, marked). The turns are new dicts; the messages are unchanged.
    """
    texts, turns, marked = _convert(messages)
    system = None
    if texts:
        system = [{"type": "text", "text": "\n\n".join(texts), CACHE_CONTROL: _ephemeral()}]
    ends = {marked} if marked is not None else set()
    if turns:
        ends.add((len(turns) - 1, len(turns[-1]["content"]) - 1))
    for turn, block in ends:
        target = turns[turn]["content"][block]
        if target.get("type") in _UNMARKABLE:
            continue  # the API refuses a breakpoint on a thinking block
        target[CACHE_CONTROL] = _ephemeral()
    return system, turns


def anthropic_tools(tools: Sequence[ToolReference] | None) -> list[dict[str, Any]]:
    """The `tools` parameter for `tools` (empty when None)."""
    return [t.as_anthropic_tool() for t in tools or ()]


def _result(block: dict[str, Any], name: str, what: str) -> ToolResult:
    """A tool_result block as its `ToolResult`: text, or parts when it holds more."""
    call_id = str(field_of(block, "tool_use_id", str, what))
    failed = block.get("is_error") is True
    content = block.get("content")
    if isinstance(content, str) or content is None:
        return ToolResult(call_id, name, content or "", is_error=failed)
    if not isinstance(content, list):
        raise MalformedReply(f"{what} has a tool result that is neither text nor blocks")
    parts: list[Part] = []
    for item in content:
        if field_of(item, "type", str, what) == "text":
            parts.append(TextPart(str(field_of(item, "text", str, what))))
        else:
            parts.append(block_part(item, what))
    return ToolResult(call_id, name, "", is_error=failed, parts=tuple(parts))


_Group = tuple[list[Part], list[ToolCall]]


def _read(block: object, what: str) -> Part | ToolCall:
    """A reply's content block as a part, or as a call (a tool_use block)."""
    kind = field_of(block, "type", str, what)
    assert isinstance(block, dict)
    if kind == "text":
        return TextPart(str(field_of(block, "text", str, what)))
    if kind == "tool_use":
        raw = block.get("input")
        return ToolCall(
            str(field_of(block, "id", str, what)),
            str(field_of(block, "name", str, what)),
            _dumps(raw if raw is not None else {}),
        )
    return block_part(block, what)


def _starts_message(item: Part | ToolCall, group: _Group) -> bool:
    """Whether `item` begins a new message after `group` (the inverse of how messages are
    merged into one turn): any content after a call; a text after a text; reasoning after
    anything but reasoning (a reply starts with its reasoning)."""
    parts, calls = group
    if isinstance(item, ToolCall):
        return False
    if calls:
        return True
    if type(item) is TextPart:
        return any(type(p) is TextPart for p in parts)
    if type(item) is ReasoningPart:
        return any(type(p) is not ReasoningPart for p in parts)
    return False


def _message(parts: list[Part], calls: list[ToolCall]) -> Message:
    if all(type(p) is TextPart for p in parts):
        text = "".join(p.text for p in parts if type(p) is TextPart)
        return Message.assistant(text if text or not calls else None, calls)
    kept = [p for p in parts if type(p) is not TextPart or p.text]  # empty blocks carry nothing
    return Message.assistant(parts=kept, tool_calls=calls)


def _assistant_turn(content: list[Any], what: str, names: dict[str, str]) -> list[Message]:
    """An assistant turn's blocks as messages, split where `_starts_message` says."""
    groups: list[_Group] = []
    for block in content:
        item = _read(block, what)
        if not groups or _starts_message(item, groups[-1]):
            groups.append(([], []))
        if isinstance(item, ToolCall):
            names[item.id] = item.name
            groups[-1][1].append(item)
        else:
            groups[-1][0].append(item)
    return [_message(parts, calls) for parts, calls in groups]


def from_anthropic_messages(system: str | None, wire: Iterable[Mapping[str, Any]]) -> list[Message]:
    """The Messages API's `system` and `messages` back as turnlog messages (the inverse of
    `to_anthropic_messages`).

    A user turn splits into its tool message (the tool_result blocks) and user messages, a new
    one at each text block after a text; an assistant turn splits where `_starts_message` says.
    A message of several text parts beside other parts therefore reads back as several messages.

    Raises:
        MalformedReply: a turn of an unknown role or shape.
    """
    out: list[Message] = [Message.system(system)] if system is not None else []
    names: dict[str, str] = {}
    for i, item in enumerate(wire):
        what = f"message {i}"
        role = field_of(dict(item), "role", str, what)
        content = item.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise MalformedReply(f"{what} has no content blocks")
        if role == "assistant":
            out.extend(_assistant_turn(content, what, names))
            continue
        if role != "user":
            raise MalformedReply(f"{what} has an unknown role {role!r}")
        results: list[ToolResult] = []
        user: list[Part] = []
        for block in content:
            kind = field_of(block, "type", str, what)
            if kind == "tool_result":
                if user:
                    out.append(Message.user(*user))
                    user = []
                call_id = str(field_of(block, "tool_use_id", str, what))
                results.append(_result(block, names.get(call_id, ""), what))
                continue
            if results:
                out.append(Message.tool(results))
                results = []
            part = _read(block, what)
            if isinstance(part, ToolCall):
                raise MalformedReply(f"{what} is a user turn with a tool_use block")
            if type(part) is TextPart and any(type(p) is TextPart for p in user):
                out.append(Message.user(*user))
                user = []
            user.append(part)
        if user:
            out.append(Message.user(*user))
        if results:
            out.append(Message.tool(results))
    return out


def _usage(raw: object) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    fresh = count(raw.get("input_tokens"))
    read = count(raw.get("cache_read_input_tokens"))
    written = count(raw.get("cache_creation_input_tokens"))
    parts = [n for n in (fresh, read, written) if n is not None]
    return Usage(sum(parts) if parts else None, count(raw.get("output_tokens")), read)


def response_from_anthropic(body: object) -> ChatResponse:
    """A Messages API reply (the JSON object) as a `ChatResponse`: its tool_use blocks as
    calls; a reply of text alone as its text blocks joined; else every other block as a part,
    in order (thinking and redacted_thinking as `ReasoningPart`s, unknown blocks as
    `ProviderPart`s; see `turnlog.models.anthropic_parts`).

    Raises:
        MalformedReply: no content list, or a block without its fields.
        DuplicateCallId: two tool_use blocks share an id.
        CappedReply: the reply stopped at the token cap ("max_tokens") inside its tool calls.
    """
    content = field_of(body, "content", list, "the reply")
    assert isinstance(body, dict) and isinstance(content, list)
    parts: list[Part] = []
    calls: list[ToolCall] = []
    for block in content:
        item = _read(block, "the reply")
        if isinstance(item, ToolCall):
            calls.append(item)
        else:
            parts.append(item)
    model = body.get("model")
    reason = body.get("stop_reason")
    response = ChatResponse(
        message=_message(parts, calls),
        usage=_usage(body.get("usage")),
        model=model if isinstance(model, str) else "",
        stop_reason=reason if isinstance(reason, str) else None,
    )
    return whole_reply(response)


class AnthropicStream:
    """Reads a streamed Messages reply event by event (the JSON data of each SSE event)."""

    def __init__(self) -> None:
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._partial: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._stop: str | None = None
        self._closed: set[int] = set()
        self._ended = False

    def feed(self, event: object) -> str | None:
        """Take one event.

        Returns:
            The text it adds, or None when it adds none.

        Raises:
            MalformedReply: the event is no JSON object, or not in the order the format has.
        """
        kind = field_of(event, "type", str, "a streamed event")
        assert isinstance(event, dict)
        if kind == "message_start":
            message = field_of(event, "message", dict, "message_start")
            assert isinstance(message, dict)
            self._message = message
            self._add_usage(message.get("usage"))
        elif kind == "content_block_start":
            index = field_of(event, "index", int, kind)
            block = field_of(event, "content_block", dict, kind)
            assert isinstance(index, int) and isinstance(block, dict)
            self._blocks[index] = dict(block)
            self._partial[index] = []
            if block.get("type") == "text" and block.get("text"):
                return str(block["text"])
        elif kind == "content_block_delta":
            return self._delta(event)
        elif kind == "content_block_stop":
            index = field_of(event, "index", int, kind)
            assert isinstance(index, int)
            self._closed.add(index)
        elif kind == "message_stop":
            self._ended = True
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            if isinstance(delta.get("stop_reason"), str):
                self._stop = delta["stop_reason"]
            self._add_usage(event.get("usage"))
        elif kind == "error":
            error = event.get("error") or {}
            raise MalformedReply(f"the stream carried an error: {error.get('message', error)}")
        return None

    def _add_usage(self, raw: object) -> None:
        """message_start counts the prompt; message_delta's counts are cumulative and may
        repeat some of them: the latest value of each count wins."""
        if isinstance(raw, dict):
            self._usage.update((k, v) for k, v in raw.items() if v is not None)

    def _delta(self, event: dict[str, Any]) -> str | None:
        index = field_of(event, "index", int, "content_block_delta")
        delta = field_of(event, "delta", dict, "content_block_delta")
        assert isinstance(index, int) and isinstance(delta, dict)
        block = self._blocks.get(index)
        if block is None:
            raise MalformedReply(f"a delta for block {index}, which never started")
        if delta.get("type") == "text_delta":
            text = str(field_of(delta, "text", str, "a text delta"))
            block["text"] = block.get("text", "") + text
            return text or None
        if delta.get("type") == "input_json_delta":
            self._partial[index].append(str(delta.get("partial_json", "")))
        elif delta.get("type") == "thinking_delta":
            piece = str(field_of(delta, "thinking", str, "a thinking delta"))
            block["thinking"] = str(block.get("thinking") or "") + piece
        elif delta.get("type") == "signature_delta":
            # the signature comes whole, just before the block's stop (the client sets it)
            block["signature"] = str(field_of(delta, "signature", str, "a signature delta"))
        return None

    def response(self) -> ChatResponse:
        """The whole reply, once the stream has ended.

        A stream is whole once `message_stop` came, every content block having had its
        `content_block_stop`: a body closed before then (by a proxy, say) may have cut the
        text or a tool call's input anywhere, and is never read as a reply.

        Raises:
            IncompleteReply: the stream ended before message_stop, or with a block still open.
            MalformedReply: a tool input is not JSON.
            DuplicateCallId: two tool_use blocks share an id.
            CappedReply: the reply stopped at the token cap ("max_tokens") inside its tool
                calls.
        """
        if self._message is None:
            raise IncompleteReply("the stream ended before message_start")
        if not self._ended:
            got = f"{len(self._blocks)} content blocks"
            raise IncompleteReply(f"the stream ended before message_stop, after {got}")
        open_blocks = sorted(set(self._blocks) - self._closed)
        if open_blocks:
            raise IncompleteReply(f"the stream ended with content block {open_blocks[0]} open")
        content = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if self._partial[index]:  # tool_use, server_tool_use
                try:
                    block["input"] = json.loads("".join(self._partial[index]))
                except ValueError as exc:
                    raise MalformedReply(f"a streamed tool input is not JSON: {exc}") from exc
            content.append(block)
        message = dict(self._message, content=content, usage=self._usage, stop_reason=self._stop)
        return response_from_anthropic(message)
