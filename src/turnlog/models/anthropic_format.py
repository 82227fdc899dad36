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
  provider blocks; another provider's reasoning and blocks are left out), each tool_use block
  at its place marker (`turnlog.models.anthropic_parts.MARKER_KIND`), the others after them.
  So a reply with interleaved thinking, `[thinking, tool_use, thinking, tool_use]`, goes back
  in its order;
- a tool message -> a user turn of `tool_result` blocks `{"tool_use_id", "content",
  "is_error": true when the call failed}`, the content a list of text, image and document
  blocks for a result with parts;
- consecutive turns of the same role are merged into one (the API wants user and assistant to
  alternate): a tool message and the user message after it become one user turn, its
  tool_result blocks first.

With prompt caching (`to_anthropic_cached`), the same turns carry `cache_control` breakpoints
on the system prompt, at the end of the stable prefix and on the last block. With the API's
server-side compaction, the adapter sends the turns from the last `compaction` block on
(`from_last_compaction`), as the API reads them.

Read (`response_from_anthropic`, `AnthropicStream`): a reply's blocks in order become one
assistant message: text blocks its text, tool_use blocks its calls, every other block a part
(see `turnlog.models.anthropic_parts`). A call that another block follows gets a place marker
among the parts, so that the message goes back in the reply's order; a reply whose calls come
last gets none. What the API reports beside the content is kept in the message's metadata: the
context edits it applied under `CONTEXT_MANAGEMENT_KEY`, and a usage with `iterations` (a
server-side compaction's own tokens) under `USAGE_KEY`.

Back from the wire, each user turn splits into its tool message (the tool_result blocks) and
a user message at each text block after a text; an assistant turn splits where text follows a
text, or reasoning follows text, unless a call came before them in the message (a call's
message goes on to the end of the turn, its calls at their place markers); tool names are read
back from the calls; arguments are written as compact JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from turnlog.events import JsonValue, Message, ToolCall, ToolResult
from turnlog.models.anthropic_parts import (
    COMPACTION,
    block_part,
    marked_call,
    part_block,
    placed,
)
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
from turnlog.parts import Part, ProviderPart, ReasoningPart, TextPart
from turnlog.text import part_note
from turnlog.toolsearch.base import ToolReference

__all__ = [
    "CACHE_CONTROL",
    "CONTEXT_MANAGEMENT_KEY",
    "USAGE_KEY",
    "AnthropicStream",
    "anthropic_tools",
    "from_anthropic_messages",
    "from_last_compaction",
    "response_from_anthropic",
    "to_anthropic_cached",
    "to_anthropic_messages",
]

CACHE_CONTROL: Final = "cache_control"
"""The key of a block's cache breakpoint in the Messages API."""

CONTEXT_MANAGEMENT_KEY: Final = "anthropic.context_management"
"""Message metadata key: the reply's `context_management` object exactly as the API reported
it (`{"applied_edits": [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": 8,
"cleared_input_tokens": 50000}, ...]}`), when the request enabled context editing; absent
otherwise."""

USAGE_KEY: Final = "anthropic.usage"
"""Message metadata key: the reply's `usage` object exactly as the API reported it, kept only
when it holds `iterations` (a server-side compaction's own sampling, whose tokens the top-level
counts leave out); absent otherwise."""


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


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments)}


def _blocks(m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        return [_result_block(r) for r in m.tool_results]
    if not m.parts:
        blocks = [{"type": "text", "text": m.text}] if m.text else []
        return blocks + [_tool_use(c) for c in m.tool_calls]
    blocks = []
    placed: set[str] = set()  # the calls sent at their place markers
    for part in m.parts:
        marked = marked_call(part) if type(part) is ProviderPart else None
        if marked is None:
            block = part_block(part)
            if block is not None:
                blocks.append(block)
            continue
        call = next((c for c in m.tool_calls if c.id == marked), None)
        if call is not None and marked not in placed:
            blocks.append(_tool_use(call))
            placed.add(marked)
    blocks.extend(_tool_use(c) for c in m.tool_calls if c.id not in placed)
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


def from_last_compaction(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`turns` from the last `compaction` block that holds a summary on, as the API reads them.

    With server-side compaction (`compact_20260112`), the API answers with a `compaction` block
    at the start of its reply and, from then on, reads the conversation from that block on: it
    ignores what comes before, refuses a request holding two compaction blocks with a summary
    ("send only the block the conversation returned last"), and wants the block first. The log
    keeps every turn; this is what is sent. A compaction block whose `content` is null (a
    compaction that failed) changes nothing, as for the API.

    Returns:
        `turns` itself when it holds no such block; else new lists from the turn of the last
        one on, that turn starting at the block (the blocks are the same objects).
    """
    for at in range(len(turns) - 1, -1, -1):
        content = turns[at].get("content")
        if not isinstance(content, list):
            continue
        for j in range(len(content) - 1, -1, -1):
            block = content[j]
            if block.get("type") == COMPACTION and block.get("content") is not None:
                return [dict(turns[at], content=content[j:]), *turns[at + 1 :]]
    return turns


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


def _starts_message(item: Part | ToolCall, group: list[Part | ToolCall]) -> bool:
    """Whether `item` begins a new message after `group` (the inverse of how messages are
    merged into one turn): nothing after a call (a message with calls is answered by the tool
    message after it, so what follows a call in one turn is the same reply's, interleaved);
    else a text after a text, or reasoning after a text (a reply starts with its reasoning)."""
    if isinstance(item, ToolCall) or any(isinstance(x, ToolCall) for x in group):
        return False
    if type(item) in (TextPart, ReasoningPart):
        return any(type(x) is TextPart for x in group)
    return False


def _message(items: list[Part | ToolCall], metadata: Mapping[str, JsonValue]) -> Message:
    """A reply's blocks, read in order, as its message: a call another part follows gets a
    place marker at its place among the parts (empty text blocks, which carry nothing, are
    left out first, so a reply whose calls come last has no marker)."""
    parts, calls = placed([x for x in items if type(x) is not TextPart or x.text])
    if all(type(p) is TextPart for p in parts):
        text = "".join(p.text for p in parts if type(p) is TextPart)
        return Message(
            "assistant", text if text or not calls else None, tuple(calls), metadata=metadata
        )
    return Message("assistant", None, tuple(calls), metadata=metadata, parts=tuple(parts))


def _assistant_turn(content: list[Any], what: str, names: dict[str, str]) -> list[Message]:
    """An assistant turn's blocks as messages, split where `_starts_message` says."""
    groups: list[list[Part | ToolCall]] = []
    for block in content:
        item = _read(block, what)
        if not groups or _starts_message(item, groups[-1]):
            groups.append([])
        if isinstance(item, ToolCall):
            names[item.id] = item.name
        groups[-1].append(item)
    return [_message(items, {}) for items in groups]


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


def _reply_metadata(body: dict[str, Any]) -> dict[str, JsonValue]:
    """What a reply reports beside its content that the message keeps (see
    `CONTEXT_MANAGEMENT_KEY`, `USAGE_KEY`)."""
    metadata: dict[str, JsonValue] = {}
    if isinstance(body.get("context_management"), dict):
        metadata[CONTEXT_MANAGEMENT_KEY] = body["context_management"]
    usage = body.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("iterations"), list):
        metadata[USAGE_KEY] = usage
    return metadata


def response_from_anthropic(body: object) -> ChatResponse:
    """A Messages API reply (the JSON object) as a `ChatResponse`: its tool_use blocks as
    calls; a reply of text alone as its text blocks joined; else every other block as a part,
    in order (thinking and redacted_thinking as `ReasoningPart`s, unknown blocks as
    `ProviderPart`s; see `turnlog.models.anthropic_parts`), with a place marker for each call
    that another block follows. The applied context edits and a compaction's usage go to the
    message's metadata (`CONTEXT_MANAGEMENT_KEY`, `USAGE_KEY`).

    Raises:
        MalformedReply: no content list, or a block without its fields.
        DuplicateCallId: two tool_use blocks share an id.
        CappedReply: the reply stopped at the token cap ("max_tokens") inside its tool calls.
    """
    content = field_of(body, "content", list, "the reply")
    assert isinstance(body, dict) and isinstance(content, list)
    items = [_read(block, "the reply") for block in content]
    model = body.get("model")
    reason = body.get("stop_reason")
    response = ChatResponse(
        message=_message(items, _reply_metadata(body)),
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
        self._context: dict[str, Any] | None = None
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
            if isinstance(event.get("context_management"), dict):
                self._context = event["context_management"]
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
        elif delta.get("type") == "compaction_delta":
            # the summary comes whole in one delta (the client sets the block's fields to it)
            block.update((k, v) for k, v in delta.items() if k != "type")
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
        if self._context is not None:
            message["context_management"] = self._context
        return response_from_anthropic(message)
