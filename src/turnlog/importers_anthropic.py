"""Read an Anthropic Messages transcript (`{"system": ..., "messages": [...]}`, as `turnlog
export --format anthropic` writes it and the Messages API takes it) as turnlog messages.

The content blocks become content parts by the mapping the Anthropic adapter reads replies with
(`turnlog.models.anthropic_parts.block_part`, which imports no provider package): image blocks
(base64 and url sources) `ImagePart`, document blocks (a base64 PDF, plain text, a URL)
`FilePart`, `thinking` and `redacted_thinking` blocks `ReasoningPart("anthropic", ...)` with the
signature or the redacted data kept verbatim, and any other block `ProviderPart("anthropic",
<its type>, <the block>)`.

One turn becomes one message, save that a user turn's `tool_result` blocks become a tool message
of their own (the results in order) and the rest of the turn a user message after it; a turn of
text alone is its text blocks joined by newlines. Every problem raises `InvalidInput` naming the
file and the entry.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from turnlog.errors import InvalidInput
from turnlog.events import Message, ToolCall, ToolResult
from turnlog.models.anthropic_parts import block_part, placed
from turnlog.models.base import MalformedReply
from turnlog.parts import Part, ReasoningPart, TextPart

__all__ = ["ANTHROPIC_BLOCK_TYPES", "anthropic_messages", "looks_anthropic"]

ANTHROPIC_BLOCK_TYPES: Final = frozenset(
    {
        "image",
        "document",
        "search_result",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)
"""Content block types of the Messages API that OpenAI chat-completions messages never hold:
one of them makes a transcript Anthropic's (when nothing in it is OpenAI's alone). Once it is,
a block of a type not known here is kept as a `ProviderPart`."""

_OPENAI_ROLES: Final = frozenset({"system", "developer", "tool", "function"})
_OPENAI_KEYS: Final = frozenset({"tool_calls", "tool_call_id", "function_call"})


def looks_anthropic(items: Sequence[object]) -> bool:
    """True when these messages hold an Anthropic content block (`ANTHROPIC_BLOCK_TYPES`) and
    nothing only OpenAI messages have (a system, developer or tool role, tool_calls, a
    tool_call_id)."""
    found = False
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("role") in _OPENAI_ROLES or _OPENAI_KEYS & item.keys():
            return False
        content = item.get("content")
        if isinstance(content, list):
            found = found or any(
                isinstance(b, dict) and b.get("type") in ANTHROPIC_BLOCK_TYPES for b in content
            )
    return found


def _bad(where: str, what: str) -> InvalidInput:
    return InvalidInput(f"{where}: {what}")


def _system(where: str, value: object) -> Message | None:
    """The top-level `system`: a string or a list of text blocks (joined by a blank line)."""
    if value is None:
        return None
    if isinstance(value, list):
        texts = []
        for j, block in enumerate(value, start=1):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise _bad(where, f"system block {j} is not a text block")
            if not isinstance(block.get("text"), str):
                raise _bad(where, f"system block {j} has no text")
            texts.append(block["text"])
        value = "\n\n".join(texts)
    if not isinstance(value, str):
        raise _bad(where, '"system" must be a string, a list of text blocks, or null')
    return Message.system(value) if value.strip() else None


def _blocks(where: str, content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _bad(where, "content must be a string or a list of content blocks")
    for j, block in enumerate(content, start=1):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _bad(where, f'content block {j} is not an object with a "type"')
    return content


def _part(where: str, block: dict[str, Any], what: str) -> Part:
    """A content block other than tool_use and tool_result, as its part."""
    if block["type"] == "text":
        if not isinstance(block.get("text"), str):
            raise _bad(where, f"{what} (text) has no text")
        return TextPart(block["text"])
    try:
        return block_part(block, what)
    except MalformedReply as exc:
        raise _bad(where, str(exc)) from None
    except InvalidInput as exc:
        raise _bad(where, f"{what} ({block['type']}) is malformed: {exc}") from None


def _joined(parts: list[Part]) -> tuple[str | None, tuple[Part, ...]]:
    """(text, ()) for parts of text alone (joined by newlines), else (None, the parts)."""
    if all(type(p) is TextPart for p in parts):
        return "\n".join(p.text for p in parts if type(p) is TextPart), ()
    return None, tuple(parts)


def _call(where: str, block: dict[str, Any], what: str) -> ToolCall:
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise _bad(where, f"{what} (tool_use) needs an id and a name")
    raw = block.get("input", {})
    if not isinstance(raw, dict):
        raise _bad(where, f"{what} (tool_use) has an input that is not a JSON object")
    return ToolCall(
        block["id"], block["name"], json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
    )


def _result(where: str, block: dict[str, Any], what: str, names: dict[str, str]) -> ToolResult:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or call_id not in names:
        raise _bad(where, f"{what}: tool_use_id {call_id!r} answers no earlier tool_use block")
    failed = block.get("is_error") is True
    content = block.get("content")
    if content is None or isinstance(content, str):
        return ToolResult(call_id, names[call_id], content or "", is_error=failed)
    if not isinstance(content, list):
        raise _bad(where, f"{what} (tool_result) has content that is neither text nor blocks")
    parts = []
    for k, item in enumerate(content, start=1):
        inner = f"{what} (tool_result), its block {k}"
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise _bad(where, f'{inner} is not an object with a "type"')
        part = _part(where, item, inner)
        if type(part) is ReasoningPart:
            raise _bad(where, f"{inner} is reasoning, which a tool result cannot carry")
        parts.append(part)
    text, kept = _joined(parts)
    return ToolResult(call_id, names[call_id], text or "", is_error=failed, parts=kept)


def _user_turn(where: str, blocks: list[dict[str, Any]], names: dict[str, str]) -> list[Message]:
    """A user turn: a tool message for each run of tool_result blocks, a user message for each
    run of other blocks, in order (a well-formed turn is its results, then the user's text)."""
    out: list[Message] = []
    results: list[ToolResult] = []
    parts: list[Part] = []

    def flush_parts() -> None:
        if parts:
            text, kept = _joined(parts)
            out.append(Message("user", text, parts=kept))
            parts.clear()

    for j, block in enumerate(blocks, start=1):
        what = f"content block {j}"
        kind = block["type"]
        if kind == "tool_result":
            flush_parts()
            results.append(_result(where, block, what, names))
            continue
        if results:
            out.append(Message.tool(results))
            results = []
        if kind == "tool_use":
            raise _bad(
                where, f"{what} is a tool_use block in a user turn: only the assistant calls"
            )
        part = _part(where, block, what)
        if type(part) is ReasoningPart:
            raise _bad(
                where,
                f"{what} ({kind}) is reasoning in a user turn: only the assistant's turns carry it",
            )
        parts.append(part)
    if results:
        out.append(Message.tool(results))
    flush_parts()
    return out


def _assistant_turn(where: str, blocks: list[dict[str, Any]], names: dict[str, str]) -> Message:
    """An assistant turn as one message: its blocks as parts in order, its tool_use blocks as
    calls (after the parts, where turnlog keeps them)."""
    items: list[Part | ToolCall] = []
    for j, block in enumerate(blocks, start=1):
        what = f"content block {j}"
        if block["type"] == "tool_result":
            raise _bad(where, f"{what} is a tool_result block in an assistant turn")
        if block["type"] == "tool_use":
            call = _call(where, block, what)
            names[call.id] = call.name
            items.append(call)
        else:
            items.append(_part(where, block, what))
    parts, calls = placed(items)  # a call that a block follows keeps its place (a marker)
    text, kept = _joined(parts)
    if not kept:
        return Message("assistant", text if text or not calls else None, tuple(calls))
    return Message("assistant", None, tuple(calls), parts=kept)


def anthropic_messages(
    where: str, system: object, items: Sequence[tuple[str, Any]]
) -> list[Message]:
    """An Anthropic transcript as turnlog messages (see the module docstring).

    Args:
        where: names the file in errors.
        system: the top-level `system` (None when there is none).
        items: (location, message) pairs: `{"role": "user" | "assistant", "content": ...}`.

    Raises:
        InvalidInput: a message or a block is malformed; names the entry.
    """
    out: list[Message] = []
    head = _system(where, system)
    if head is not None:
        out.append(head)
    names: dict[str, str] = {}  # tool_use id -> tool name
    for at, item in items:
        if not isinstance(item, dict):
            raise _bad(at, f"expected a message object, got {type(item).__name__}")
        role = item.get("role")
        if role not in ("user", "assistant"):
            raise _bad(
                at,
                f"role {role!r} in an Anthropic transcript: its messages are user or assistant "
                'turns, and the system prompt is the top-level "system"',
            )
        blocks = _blocks(at, item.get("content"))
        if not blocks:
            raise _bad(at, f"a {role} turn needs content")
        try:
            if role == "assistant":
                out.append(_assistant_turn(at, blocks, names))
            else:
                out.extend(_user_turn(at, blocks, names))
        except InvalidInput as exc:
            if str(exc).startswith(at):
                raise
            raise _bad(at, str(exc)) from None
    return out
