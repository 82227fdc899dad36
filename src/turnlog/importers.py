"""Read conversations from files: OpenAI chat-completions messages, Anthropic Messages
transcripts, ShareGPT records, and turnlog's own JSONL (`turnlog export --format jsonl`), which
`read_session_dump` reads back whole.

`read_conversations(path)` accepts a JSON list of OpenAI messages (or `{"messages": [...]}`),
JSONL with one message per line, an Anthropic transcript (`{"system": ..., "messages": [...]}`,
or messages holding Anthropic content blocks; see `turnlog.importers_anthropic`), or ShareGPT: a
record `{"conversations": [...]}`, a list of records, or JSONL of records. Consecutive tool
messages become one turnlog tool message with several results. Every problem raises
`InvalidInput` naming the file and the entry.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import mimetypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from turnlog.errors import InvalidInput
from turnlog.events import Message, ToolCall, ToolResult
from turnlog.importers_anthropic import anthropic_messages, looks_anthropic
from turnlog.jsonl import SessionDump, is_header, read_dump
from turnlog.parts import AudioPart, FilePart, ImagePart, Part, TextPart, read_data_url

__all__ = ["is_session_dump", "read_conversations", "read_session_dump", "sharegpt_messages"]


ACCEPTED = (
    'turnlog import reads a JSON list of OpenAI chat-completions messages ({"role": ..., '
    '"content": ...}) or {"messages": [...]}, JSONL with one message per line, an Anthropic '
    'Messages transcript ({"system": ..., "messages": [...]}), or ShareGPT: '
    '{"conversations": [...]}, a list or JSONL of such records'
)

# Item types of the OpenAI Responses API, whose `input` and `output` lists are not chat messages.
_RESPONSES_TYPES = frozenset(
    {"message", "function_call", "function_call_output", "reasoning", "input_text", "output_text"}
)
_RESPONSES = (
    "this looks like OpenAI Responses API items, which turnlog import does not read: convert "
    "them to chat-completions messages"
)


def is_session_dump(path: Path) -> bool:
    """True when `path` starts like turnlog JSONL (its first line is a turnlog header); False
    for any other file, and for one that cannot be read (`read_conversations` then says why)."""
    try:
        with path.open("rb") as f:
            if b'"turnlog"' not in f.read(256):  # the header names it first; skip the rest
                return False
            f.seek(0)
            for raw in f:
                if raw.strip():
                    return is_header(json.loads(raw.removeprefix(b"\xef\xbb\xbf")))
    except (OSError, ValueError, RecursionError):
        return False
    return False


def read_session_dump(path: Path, session_id: str | None = None) -> SessionDump:
    """A session and its events from turnlog JSONL, exactly as they were exported.

    Args:
        path: the file.
        session_id: the id to import it as (default: the exported session's).

    Raises:
        InvalidInput: the file cannot be read or is not valid turnlog JSONL; names the line.
    """
    try:
        with path.open("rb") as f:
            return read_dump(str(path), f, session_id=session_id)
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such file") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _bad(where: str, what: str) -> InvalidInput:
    return InvalidInput(f"{where}: {what}")


def _json_error(exc: json.JSONDecodeError, *, line: bool = True) -> str:
    """The decoder's message and position ("Invalid control character at" ends in "at")."""
    what = exc.msg.removesuffix(" at")
    where = f"line {exc.lineno} column {exc.colno}" if line else f"column {exc.colno}"
    hint = "; escape it, e.g. \\n or \\u0001" if "control character" in what else ""
    return f"{what} at {where}{hint}"


def _load(path: Path) -> list[tuple[str, Any]]:
    """The file's items as (location, value): one item for a JSON document, one per JSONL line."""
    try:
        raw = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if not raw.strip():
        raise InvalidInput(f"{path} is empty: expected a JSON list of messages, JSONL or ShareGPT")
    try:
        return [("", json.loads(raw))]
    except RecursionError:
        raise InvalidInput(f"{path}: JSON nested too deeply to be a conversation") from None
    except json.JSONDecodeError as whole:
        items = []
        for n, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append((f"line {n}", json.loads(line)))
            except RecursionError:
                raise _bad(f"{path}, line {n}", "JSON nested too deeply") from None
            except json.JSONDecodeError as exc:
                if not items:  # not JSONL either: report the document's own error
                    raise InvalidInput(f"{path} is not JSON: {_json_error(whole)}") from None
                raise _bad(
                    f"{path}, line {n}", f"not JSON: {_json_error(exc, line=False)}"
                ) from None
        return items


def read_conversations(path: Path) -> tuple[str, list[list[Message]]]:
    """The conversations a file holds, as turnlog messages, and the format's name.

    A JSON list of OpenAI chat-completions messages (or `{"messages": [...]}`), JSONL with one
    message per line, or ShareGPT: a record `{"conversations": [...]}`, a list of records or
    JSONL of records (one conversation each).

    Raises:
        InvalidInput: the file cannot be read or holds something else; names the entry.
    """
    try:
        return _conversations(path, _load(path))
    except RecursionError:  # e.g. tool-call arguments nested thousands deep
        raise InvalidInput(f"{path}: JSON nested too deeply to be a conversation") from None


def _conversations(path: Path, items: list[tuple[str, Any]]) -> tuple[str, list[list[Message]]]:
    system: object = None
    anthropic = False  # a top-level "system" beside the messages is the Anthropic shape
    if len(items) == 1 and not items[0][0]:  # one JSON document
        doc = items[0][1]
        if isinstance(doc, dict) and "messages" in doc and "role" not in doc:
            anthropic, system = "system" in doc, doc.get("system")
            doc = doc["messages"]
        elif isinstance(doc, dict) and not {"role", "conversations", "from"} & doc.keys():
            known = "input" in doc or "output" in doc or doc.get("type") in _RESPONSES_TYPES
            what = _RESPONSES if known else 'a JSON object without a "messages" or "role" key'
            raise InvalidInput(f"{path}: {what}. {ACCEPTED}")
        if isinstance(doc, dict):
            doc = [doc]
        if not isinstance(doc, list):
            raise InvalidInput(f"{path}: expected a list of messages or ShareGPT records")
        items = [(f"entry {i}", item) for i, item in enumerate(doc, start=1)]
    if not items:
        raise InvalidInput(f"{path} holds no messages")
    items = [(f"{path}, {where}", item) for where, item in items]
    if isinstance(items[0][1], dict) and "conversations" in items[0][1]:
        return "sharegpt", [sharegpt_messages(where, record) for where, record in items]
    if anthropic or looks_anthropic([item for _, item in items]):
        return "anthropic", [anthropic_messages(str(path), system, items)]
    return "openai", [_openai(items)]


_AUDIO_TYPES: Final = {"wav": "audio/wav", "mp3": "audio/mpeg"}


def _text(where: str, value: object) -> str | None:
    """An OpenAI `content` of text alone: a string, a list of text parts (joined by newlines),
    or null."""
    text, parts = _content(where, value)
    if parts:
        raise _bad(where, "only a user message's content may hold images, audio or files")
    return text


def _content(where: str, value: object) -> tuple[str | None, tuple[Part, ...]]:
    """An OpenAI `content`: (its text, ()) for text alone (text parts joined by newlines), or
    (None, its parts) when it holds an image (`image_url`), audio (`input_audio`) or a file
    (`file` with `file_data`), as `turnlog export --format openai` writes them."""
    if value is None or isinstance(value, str):
        return value, ()
    if not isinstance(value, list):
        raise _bad(where, "content must be a string, a list of content parts, or null")
    parts: list[Part] = []
    for j, part in enumerate(value, start=1):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if not isinstance(part, dict) or kind not in ("text", "image_url", "input_audio", "file"):
            raise _bad(
                where,
                f"content part {j} is of type {kind!r}: text, image_url, input_audio and file "
                "parts import (and Anthropic content blocks, from a transcript without OpenAI's "
                "system or tool messages and tool_calls)",
            )
        try:
            parts.append(_part(part))
        except (InvalidInput, KeyError, TypeError, ValueError, binascii.Error) as exc:
            detail = f": {exc}" if isinstance(exc, InvalidInput) else ""
            raise _bad(where, f"content part {j} ({kind}) is malformed{detail}") from None
    if all(type(p) is TextPart for p in parts):
        return "\n".join(p.text for p in parts if type(p) is TextPart), ()
    return None, tuple(parts)


def _part(part: dict[str, Any]) -> Part:
    """One OpenAI content part as a turnlog part. Raises KeyError, TypeError, ValueError or
    InvalidInput when it is malformed."""
    kind = part["type"]
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise InvalidInput("it has no text")
        return TextPart(part["text"])
    if kind == "image_url":
        image = part["image_url"]
        url, detail = image["url"], image.get("detail")
        inline = read_data_url(url)
        if inline is not None:
            return ImagePart(inline[0], data=inline[1], detail=detail)
        if url.startswith("data:"):
            raise InvalidInput("its data: URL is not base64 that decodes")
        guessed = mimetypes.guess_type(url.split("?", 1)[0])[0]
        media = guessed if guessed and guessed.startswith("image/") else "image/png"
        return ImagePart(media, url=url, detail=detail)
    if kind == "input_audio":
        audio = part["input_audio"]
        data = base64.b64decode(audio["data"], validate=True)
        return AudioPart(_AUDIO_TYPES[audio["format"]], data=data)
    file = part["file"]
    inline = read_data_url(file["file_data"])
    if inline is None:
        raise InvalidInput("file_data must be a base64 data: URL")
    return FilePart(inline[0], data=inline[1], name=file.get("filename"))


def _openai(items: Sequence[tuple[str, Any]]) -> list[Message]:
    messages: list[Message] = []
    call_names: dict[str, str] = {}  # call id -> tool name, from earlier assistant messages
    for where, item in items:
        if not isinstance(item, dict):
            raise _bad(where, f"expected a message object, got {type(item).__name__}")
        role = item.get("role")
        if role is None and "from" in item:
            raise _bad(where, 'a ShareGPT turn: wrap the turns in {"conversations": [...]}')
        if role is None or item.get("type") in _RESPONSES_TYPES - {"message"}:
            what = _RESPONSES if item.get("type") in _RESPONSES_TYPES else 'no "role"'
            raise _bad(where, f"{what}. {ACCEPTED}")
        try:
            message = _openai_message(where, item, call_names)
        except InvalidInput as exc:
            if str(exc).startswith(where):
                raise
            raise _bad(where, str(exc)) from None
        if message.role == "tool" and messages and messages[-1].role == "tool":
            message = Message.tool(messages[-1].tool_results + message.tool_results)
            messages[-1] = message  # answers to parallel calls share one tool message
        else:
            messages.append(message)
    return messages


def _openai_message(where: str, item: dict[str, Any], call_names: dict[str, str]) -> Message:
    role = item.get("role")
    metadata = {"name": item["name"]} if isinstance(item.get("name"), str) else {}
    if role == "user":
        text, parts = _content(where, item.get("content"))
        if text is None and not parts:
            raise _bad(where, "a user message needs content")
        return Message("user", text, parts=parts, metadata=metadata)
    text = _text(where, item.get("content"))
    if role in ("system", "developer"):
        if text is None:
            raise _bad(where, f"a {role} message needs content")
        return Message("system", text, metadata=metadata)
    if role == "assistant":
        if item.get("function_call") is not None:
            raise _bad(where, "the legacy function_call field is not supported: use tool_calls")
        raw_calls = item.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise _bad(where, "tool_calls must be a list")
        calls = []
        for j, call in enumerate(raw_calls, start=1):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise _bad(where, f"tool call {j} needs a function with a name")
            if not isinstance(call.get("id"), str) or call.get("type", "function") != "function":
                raise _bad(where, f'tool call {j} needs an id and type "function"')
            args = fn.get("arguments", "{}")
            if isinstance(args, (dict, list)):
                args = json.dumps(args, ensure_ascii=False)
            if not isinstance(args, str):
                raise _bad(where, f"tool call {j}: arguments must be a JSON string")
            calls.append(ToolCall(call["id"], fn["name"], args))
            call_names[call["id"]] = fn["name"]
        return Message("assistant", text, tuple(calls), metadata=metadata)
    if role == "tool":
        call_id = item.get("tool_call_id")
        if not isinstance(call_id, str) or call_id not in call_names:
            raise _bad(where, f"tool_call_id {call_id!r} answers no earlier assistant tool call")
        name = item.get("name")
        if not isinstance(name, str):
            name = call_names[call_id]
        return Message.tool(ToolResult(call_id, name, text or ""))
    raise _bad(where, f"unknown role {role!r}: expected system, user, assistant or tool")


_SHAREGPT = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "function_call": "call",
    "observation": "result",
    "tool": "result",
}


def sharegpt_messages(where: str, record: object) -> list[Message]:
    """The messages of one ShareGPT record; `where` names it in errors.

    Raises:
        InvalidInput: the record is malformed.
    """
    turns = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(record, dict) or not isinstance(turns, list):
        raise _bad(where, 'expected a ShareGPT record {"conversations": [...]}')
    messages: list[Message] = []
    if isinstance(record.get("system"), str) and record["system"].strip():
        messages.append(Message.system(record["system"]))
    pending: list[ToolCall] = []
    ids = itertools.count(1)
    for j, turn in enumerate(turns, start=1):
        at = f"{where}, turn {j}"
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise _bad(at, 'expected {"from": ..., "value": "<text>"}')
        kind, value = _SHAREGPT.get(str(turn.get("from"))), turn["value"]
        if kind is None:
            raise _bad(
                at, f"unknown 'from' {turn.get('from')!r}: expected one of {', '.join(_SHAREGPT)}"
            )
        if kind == "call":
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                raise _bad(at, "a function_call value must be JSON") from None
            calls = []
            for call in parsed if isinstance(parsed, list) else [parsed]:
                if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                    raise _bad(at, 'a function_call needs {"name": ..., "arguments": ...}')
                args = call.get("arguments", {})
                args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                calls.append(ToolCall(f"call_{next(ids)}", call["name"], args))
            pending = calls
            messages.append(Message.assistant(tool_calls=calls))
        elif kind == "result":
            if not pending:
                raise _bad(at, "an observation that answers no function_call before it")
            call = pending.pop(0)
            result = ToolResult(call.id, call.name, value)
            if messages[-1].role == "tool":
                messages[-1] = Message.tool((*messages[-1].tool_results, result))
            else:
                messages.append(Message.tool(result))
        else:
            messages.append(Message(kind, value))  # type: ignore[arg-type]
    if not messages:
        raise _bad(where, "holds no turns")
    return messages
