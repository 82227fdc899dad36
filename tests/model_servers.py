"""Small real HTTP servers that speak the OpenAI and Anthropic wire formats, for the tests.

A `ScriptedServer` listens on 127.0.0.1 (a thread per request); the test scripts its replies in
order (`reply_json`, `reply_sse`, `reply_status`, `reply_raw`, optionally slow) and reads the
requests it got (`requests`: path, headers, JSON body). The official clients talk to it over
real sockets through `base_url`. Builders below write bodies exactly as each provider does.

Like llama-cpp-python's server, it answers 500 to a Chat Completions request holding a message
whose `content` is null (`null_content`), and keeps the scripted reply for the next request.
(`refuse_null_content = False` lets it pass, for clients that send null, e.g. LangChain's.)

Like the Messages API, it answers 400 to a request with thinking enabled whose thinking blocks
are not the ones it issued, whose final assistant message (in a tool loop) does not start with
a thinking block, or whose latest assistant message does not hold the thinking blocks of the
reply it came from, all of them, unchanged and in the reply's order among its tool_use blocks
(`thinking_refusal`: interleaved thinking sent back reordered is refused). It also answers 400
to `compaction` blocks not sent back as issued, or not as the API reads them
(`compaction_refusal`), and to `context_management` without the beta header its edits need
(`context_management_refusal`). The scripted reply waits for the next request.
(`enforce_thinking = False` turns these checks off.)

Like the Responses API, it answers 400 to a `/responses` request whose items break its rules
(`responses_refusal`): a `function_call_output` that answers no `function_call` of the input (or
of the stored responses `previous_response_id` chains to), a `previous_response_id` it did not
store, a reasoning item not exactly as issued or not followed by the item it preceded, and
(with `store: false`) a tool loop sent without the reasoning issued with its calls; the scripted
reply waits for the next request. (`enforce_responses = False` turns the checks off.)

Like the providers, it bills the images of a request as input tokens: the tokens of every inline
image (Chat Completions `image_url`, Responses `input_image`, Messages `image` blocks, tool
results included) are added to the reply's `prompt_tokens` / `input_tokens` (and
`total_tokens`), in a JSON reply or a stream's usage, by each provider's published rule
(`openai_billed_tokens`, `anthropic_billed_tokens`, below), the image's size decoded from its
base64 data with Pillow. Text is billed as scripted. `Request.images` lists what each request
was billed for; `bill_images = False` reports the scripted usage unchanged.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import math
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    sse: list[bytes] | None = None
    delay: float = 0.0


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    images: list[BilledImage] = field(default_factory=list)
    """The images the request was billed for, in the order they appear in it."""


class ScriptedServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Request] = []
        self.aborted = 0
        self.refuse_null_content = True
        """Answer 500 to a null message content, as llama-cpp-python's server does."""
        self.enforce_thinking = True
        """Answer 400 as the Messages API does to thinking blocks not passed back unmodified."""
        self.issued: list[Issued] = []
        """The thinking blocks and tool_use ids of each Messages reply sent (JSON or SSE)."""
        self.enforce_responses = True
        """Answer 400 as the Responses API does to items that break its rules."""
        self.responses_issued: list[IssuedResponse] = []
        """Each Responses reply sent (JSON or SSE): its id, output items, whether it was
        stored, and the request it answered."""
        self.bill_images = True
        """Add the tokens of a request's images to the input tokens its reply reports."""
        self.anthropic_max_pixels = ANTHROPIC_MAX_PIXELS
        """The area over which the Messages API scales an image down (see
        `anthropic_billed_tokens`)."""
        self.rewrite: Callable[[Request, Reply], Reply] | None = None
        """Called with each request and the scripted reply; returns the reply to send (a
        server that computes part of its reply from the request, e.g. `CountingServer`)."""
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                try:
                    self._answer()
                except (BrokenPipeError, ConnectionResetError):
                    server.aborted += 1  # the client gave up (a timeout, a stream left early)
                    self.close_connection = True

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                request = Request(
                    "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                request.images = billed_images(self.path, body, server.anthropic_max_pixels)
                server.requests.append(request)
                reply = server.replies.popleft() if server.replies else Reply(500, b"{}")
                refused = null_content(self.path, body) if server.refuse_null_content else None
                if refused is not None:
                    server.replies.appendleft(reply)  # it waits for a request the server takes
                    reply = Reply(500, json.dumps(openai_error(500, refused)).encode())
                refused = (
                    context_management_refusal(body, request.headers)
                    or compaction_refusal(body, server.issued)
                    or thinking_refusal(body, server.issued)
                    if server.enforce_thinking and self.path.endswith("/messages")
                    else None
                )
                if refused is not None:
                    server.replies.appendleft(reply)
                    error = anthropic_error("invalid_request_error", refused)
                    reply = Reply(400, json.dumps(error).encode())
                responses = self.path.rstrip("/").endswith("/responses")
                refused = (
                    responses_refusal(body, server.responses_issued)
                    if server.enforce_responses and responses
                    else None
                )
                if refused is not None:
                    server.replies.appendleft(reply)
                    reply = Reply(400, json.dumps(openai_error(400, refused)).encode())
                if server.rewrite is not None:
                    reply = server.rewrite(request, reply)
                billed = sum(image.tokens for image in request.images)
                if server.bill_images and billed and reply.status == 200:
                    reply = with_input_tokens(reply, billed)
                if self.path.endswith("/messages") and reply.status == 200:
                    issued = issued_by(reply)
                    if issued is not None:
                        server.issued.append(issued)
                if responses and reply.status == 200:
                    answered = issued_response(reply, body)
                    if answered is not None:
                        server.responses_issued.append(answered)
                if reply.sse is None and reply.delay and server._stop.wait(reply.delay):
                    return
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if reply.sse is None:
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    return
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in reply.sse:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    if reply.delay:
                        time.sleep(reply.delay)
                self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    # -- scripting -----------------------------------------------------------------------

    def reply_json(self, body: Any, status: int = 200, **headers: str) -> None:
        self.replies.append(Reply(status, json.dumps(body).encode(), headers=headers))

    def reply_raw(self, body: bytes, status: int = 200, content_type: str = "application/json"):
        self.replies.append(Reply(status, body, content_type))

    def reply_sse(
        self, events: list[tuple[str | None, Any]], trailer: bytes = b"", pause: float = 0.0
    ) -> None:
        """Events as (event name or None, JSON data or a raw string), then `trailer`; `pause`
        seconds after each. The body ends cleanly after them: a list cut short is a stream
        a proxy closed early."""
        chunks = []
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name else ""
            chunks.append(f"{head}data: {text}\n\n".encode())
        if trailer:
            chunks.append(trailer)
        self.replies.append(Reply(200, content_type="text/event-stream", sse=chunks, delay=pause))

    def reply_slow(self, seconds: float) -> None:
        self.replies.append(Reply(200, b"{}", delay=seconds))

    def last_body(self) -> Any:
        return self.requests[-1].body


# -- OpenAI Chat Completions ------------------------------------------------------------------


def null_content(path: str, body: Any) -> str | None:
    """What llama-cpp-python's server says (500) to a Chat Completions `body` with a message
    whose content is null; None when every message has one."""
    if not path.endswith("/chat/completions") or not isinstance(body, dict):
        return None
    for i, message in enumerate(body.get("messages") or []):
        if isinstance(message, dict) and message.get("content", "") is None:
            return f'can only concatenate str (not "NoneType") to str (message {i})'
    return None


def openai_error(status: int, message: str, kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def openai_completion(
    text: str | None = "Hello!",
    tool_calls: list[tuple[str, str, str]] = (),
    *,
    model: str = "gpt-test-2025",
    finish_reason: str | None = None,
    usage: dict | None = None,
) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in tool_calls
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_760_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": usage
        or {
            "prompt_tokens": 42,
            "completion_tokens": 7,
            "total_tokens": 49,
            "prompt_tokens_details": {"cached_tokens": 32, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
        "system_fingerprint": "fp_test",
    }


def openai_chunks(
    deltas: list[str],
    tool_calls: list[tuple[str, str, list[str]]] = (),
    *,
    model: str = "gpt-test-2025",
    usage: dict | None = None,
) -> list[tuple[str | None, Any]]:
    """A streamed reply: text deltas, tool calls whose arguments come in pieces, usage last."""

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1_760_000_000,
            "model": model,
            "system_fingerprint": "fp_test",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            "usage": None,
        }

    events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
    events += [(None, chunk({"content": d})) for d in deltas]
    for index, (call_id, name, pieces) in enumerate(tool_calls):
        events.append(
            (
                None,
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                ),
            )
        )
        events += [
            (None, chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}))
            for p in pieces
        ]
    events.append((None, chunk({}, "tool_calls" if tool_calls else "stop")))
    last = chunk({})
    last["choices"] = []
    last["usage"] = usage or {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}
    events.append((None, last))
    events.append((None, "[DONE]"))
    return events


# -- Anthropic Messages -------------------------------------------------------------------------


def anthropic_error(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_message(
    text: str | None = "Hello!",
    tool_uses: list[tuple[str, str, dict]] = (),
    *,
    model: str = "claude-test-2025",
    stop_reason: str | None = None,
    usage: dict | None = None,
    thinking: list[dict] = (),
    content: list[dict] | None = None,
) -> dict:
    """A Messages reply: `thinking` blocks (`thinking_block`, `redacted_block`) first, then the
    text and the tool_use blocks; or `content`, every block in its order (`tool_use_block`)."""
    if content is None:
        content = list(thinking)
        content += [{"type": "text", "text": text}] if text else []
        content += [tool_use_block(i, n, a) for i, n, a in tool_uses]
    elif stop_reason is None and any(b["type"] == "tool_use" for b in content):
        stop_reason = "tool_use"
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason or ("tool_use" if tool_uses else "end_turn"),
        "stop_sequence": None,
        "usage": usage
        or {
            "input_tokens": 10,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 32,
            "output_tokens": 7,
        },
    }


def tool_use_block(call_id: str, name: str, arguments: dict) -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def anthropic_events(
    deltas: list[str],
    tool_uses: list[tuple[str, str, list[str]]] = (),
    *,
    model: str = "claude-test-2025",
    usage: dict | None = None,
    thinking: list[dict] = (),
    content: list[dict] | None = None,
    context_management: dict | None = None,
    end_usage: dict | None = None,
) -> list[tuple[str | None, Any]]:
    """A streamed reply as the Messages API sends it (named SSE events); `usage` is the
    prompt's counts in message_start. `thinking` blocks come first: a thinking block as its
    start (empty), two thinking_delta events and a signature_delta; a redacted_thinking block
    whole in its content_block_start. Or `content`, every block in its order, each streamed
    as the API streams its kind (`content_events`). `context_management` and `end_usage` go
    in the message_delta event."""
    if content is not None:
        return content_events(
            content,
            model=model,
            usage=usage,
            context_management=context_management,
            end_usage=end_usage,
        )
    start = anthropic_message(None, model=model, stop_reason="end_turn")
    start["stop_reason"] = None
    start["usage"] = usage or {
        "input_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 32,
        "output_tokens": 1,
    }
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    index = 0
    for block in thinking:
        start_block = (
            dict(block, thinking="", signature="") if block["type"] == "thinking" else block
        )
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start_block},
            )
        )
        if block["type"] == "thinking":
            half = len(block["thinking"]) // 2
            deltas_ = [
                {"type": "thinking_delta", "thinking": block["thinking"][:half]},
                {"type": "thinking_delta", "thinking": block["thinking"][half:]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
            events += [
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": d},
                )
                for d in deltas_
            ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    if deltas:
        events.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
        )
        events.append(("ping", {"type": "ping"}))
        events += [
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": d},
                },
            )
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for call_id, name, pieces in tool_uses:
        events.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                },
            )
        )
        events += [
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": p},
                },
            )
            for p in pieces
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "tool_use" if tool_uses else "end_turn",
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": 7},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def content_events(
    content: list[dict],
    *,
    model: str = "claude-test-2025",
    usage: dict | None = None,
    context_management: dict | None = None,
    end_usage: dict | None = None,
) -> list[tuple[str | None, Any]]:
    """The stream of a reply of these blocks in order: a text block as an empty start and two
    text_delta events; a tool_use block as a start with an empty input and its input JSON in
    two input_json_delta pieces; a thinking block as an empty start, two thinking_delta events
    and a signature_delta; a compaction block as a start without its content and one
    compaction_delta with it; any other block whole in its start."""
    start = anthropic_message(None, model=model, stop_reason="end_turn")
    start["stop_reason"] = None
    start["usage"] = usage or {
        "input_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 32,
        "output_tokens": 1,
    }
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]

    def add(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, **data}))

    for index, block in enumerate(content):
        kind = block["type"]
        deltas: list[dict] = []
        if kind == "text":
            opened = {"type": "text", "text": ""}
            half = len(block["text"]) // 2
            deltas = [
                {"type": "text_delta", "text": block["text"][:half]},
                {"type": "text_delta", "text": block["text"][half:]},
            ]
        elif kind == "tool_use":
            opened = dict(block, input={})
            raw = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": raw[: len(raw) // 2]},
                {"type": "input_json_delta", "partial_json": raw[len(raw) // 2 :]},
            ]
        elif kind == "thinking":
            opened = dict(block, thinking="", signature="")
            half = len(block["thinking"]) // 2
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"][:half]},
                {"type": "thinking_delta", "thinking": block["thinking"][half:]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif kind == "compaction":
            opened = {k: v for k, v in block.items() if k not in ("content", "encrypted_content")}
            delta = {"type": "compaction_delta", "content": block.get("content")}
            if "encrypted_content" in block:
                delta["encrypted_content"] = block["encrypted_content"]
            deltas = [delta]
        else:
            opened = block
        add("content_block_start", index=index, content_block=opened)
        for delta in deltas:
            add("content_block_delta", index=index, delta=delta)
        add("content_block_stop", index=index)
    calls = any(b["type"] == "tool_use" for b in content)
    final: dict[str, Any] = {
        "delta": {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None},
        "usage": end_usage or {"output_tokens": 7},
    }
    if context_management is not None:
        final["context_management"] = context_management
    add("message_delta", **final)
    add("message_stop")
    return events


def thinking_block(text: str, signature: str) -> dict:
    return {"type": "thinking", "thinking": text, "signature": signature}


def redacted_block(data: str) -> dict:
    return {"type": "redacted_thinking", "data": data}


@dataclass
class Issued:
    """What one Messages reply of the server carried: its thinking blocks in order (only
    their fields the API checks), the ids of its tool_use blocks, the two in the reply's order
    (`sequence`: a thinking block's checked fields, or `("tool_use", id)`), and its compaction
    blocks (their checked fields)."""

    thinking: list[dict]
    tool_use_ids: set[str]
    sequence: list = field(default_factory=list)
    compaction: list[dict] = field(default_factory=list)


_THINKING_TYPES = ("thinking", "redacted_thinking")


def _checked(block: dict) -> dict:
    """The fields of a thinking, redacted_thinking or compaction block the API checks."""
    if block["type"] == "compaction":
        return {k: block.get(k) for k in ("type", "content", "encrypted_content", "signature")}
    keys = ("type", "thinking", "signature") if block["type"] == "thinking" else ("type", "data")
    return {k: block.get(k) for k in keys}


def _sequence(blocks: list) -> list:
    """The thinking blocks (checked fields) and tool_use ids of `blocks`, in their order."""
    out: list = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") in _THINKING_TYPES:
            out.append(_checked(block))
        elif block.get("type") == "tool_use":
            out.append(("tool_use", block.get("id")))
    return out


def _sse_blocks(chunks: list[bytes]) -> list[dict]:
    """The content blocks a streamed Messages reply assembles."""
    blocks: dict[int, dict] = {}
    for chunk in chunks:
        for line in chunk.decode().splitlines():
            if not line.startswith("data: "):
                continue
            try:
                event = json.loads(line[6:])
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if event.get("type") == "content_block_start":
                blocks[event["index"]] = dict(event["content_block"])
            elif event.get("type") == "content_block_delta":
                block, delta = blocks[event["index"]], event["delta"]
                if delta.get("type") == "thinking_delta":
                    block["thinking"] = block.get("thinking", "") + delta["thinking"]
                elif delta.get("type") == "signature_delta":
                    block["signature"] = delta["signature"]
                elif delta.get("type") == "compaction_delta":
                    block.update((k, v) for k, v in delta.items() if k != "type")
    return [blocks[i] for i in sorted(blocks)]


def issued_by(reply: Reply) -> Issued | None:
    """The thinking blocks and tool_use ids of a Messages reply; None for a body that is not
    a message."""
    if reply.sse is not None:
        content = _sse_blocks(reply.sse)
    else:
        try:
            body = json.loads(reply.body)
        except ValueError:
            return None
        if not isinstance(body, dict) or not isinstance(body.get("content"), list):
            return None
        content = body["content"]
    thinking = [_checked(b) for b in content if b.get("type") in _THINKING_TYPES]
    ids = {b["id"] for b in content if b.get("type") == "tool_use"}
    compaction = [_checked(b) for b in content if b.get("type") == "compaction"]
    return Issued(thinking, ids, _sequence(content), compaction)


FINAL_MUST_START_WITH_THINKING = (
    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)


MODIFIED_IN_LATEST = (
    "messages.{i}.content.{j}: `thinking` or `redacted_thinking` blocks in the latest assistant "
    "message cannot be modified. These blocks must remain as they were in the original response."
)


def _origin(blocks: list, issued: list[Issued]) -> Issued | None:
    """The reply an assistant message came from: the one that issued its tool_use blocks, else
    the one that issued its first thinking block."""
    ids = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
    if ids:
        return next((x for x in issued if ids <= x.tool_use_ids), None)
    first = next((_checked(b) for b in blocks if b.get("type") in _THINKING_TYPES), None)
    return next((x for x in issued if first is not None and first in x.thinking), None)


def thinking_refusal(body: Any, issued: list[Issued]) -> str | None:
    """What the Messages API says (400) to `body` when thinking is enabled and its thinking
    blocks were not passed back as issued; None when it passes.

    Written from Anthropic's extended-thinking guide ("pass thinking blocks back complete and
    unmodified", "echo the assistant message exactly as received") and the errors the API
    gives, not from turnlog's code:

    - every thinking or redacted_thinking block sent must be one the server issued, unchanged
      (a changed signature, text or data is refused);
    - when the last user turn carries tool_result blocks, the last assistant message must start
      with a thinking block (after a compaction block, which the API reads first);
    - the latest assistant message, when it is one of a tool loop or holds thinking blocks,
      must hold exactly the thinking blocks of the reply it came from, in that reply's order
      among its tool_use blocks: none left out, none added, none moved (interleaved thinking,
      `[thinking, tool_use, thinking, tool_use]`, sent back as `[thinking, thinking, tool_use,
      tool_use]` is refused at the first block out of place).
    """
    if not isinstance(body, dict):
        return None
    config = body.get("thinking")
    if not isinstance(config, dict) or config.get("type") not in ("enabled", "adaptive"):
        return None
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    known = [b for i in issued for b in i.thinking]
    for i, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if block.get("type") in _THINKING_TYPES and _checked(block) not in known:
                field = "signature" if block["type"] == "thinking" else "data"
                return f"messages.{i}.content.{j}: Invalid `{field}` in `{block['type']}` block"
    assistants = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if not assistants:
        return None
    at = assistants[-1]
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    content = last_user.get("content") if last_user else None
    if not isinstance(content, list) or not any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    ):  # no tool loop: the latest assistant message's thinking may be left out, not changed
        latest = messages[at].get("content")
        if _has_thinking(messages[at]) and isinstance(latest, list):
            return _latest_refusal(at, [b for b in latest if isinstance(b, dict)], issued)
        return None
    blocks = messages[at].get("content")
    if isinstance(blocks, str):
        blocks = [{"type": "text", "text": blocks}]
    blocks = [b for b in blocks or [] if isinstance(b, dict)]
    lead = next((b for b in blocks if b.get("type") != "compaction"), None)
    if lead is None or lead.get("type") not in _THINKING_TYPES:
        found = lead.get("type") if lead else "nothing"
        return FINAL_MUST_START_WITH_THINKING.format(i=at, found=found)
    return _latest_refusal(at, blocks, issued)


def _latest_refusal(at: int, blocks: list, issued: list[Issued]) -> str | None:
    """The refusal of the latest assistant message (`blocks`, at `at`) whose thinking blocks
    and tool_use blocks are not those of the reply it came from, in its order."""
    origin = _origin(blocks, issued)
    if origin is None:
        return None
    sent = _sequence(blocks)
    if sent == origin.sequence:
        return None
    positions = [j for j, b in enumerate(blocks) if b.get("type") in (*_THINKING_TYPES, "tool_use")]
    wrong = next(
        (k for k, (a, b) in enumerate(zip(sent, origin.sequence, strict=False)) if a != b),
        min(len(sent), len(origin.sequence)),
    )
    j = positions[wrong] if wrong < len(positions) else len(blocks)
    return MODIFIED_IN_LATEST.format(i=at, j=j)


def _has_thinking(message: dict) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") in _THINKING_TYPES for b in content
    )


def _betas(headers: dict[str, str]) -> set[str]:
    return {b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()}


CONTEXT_EDITS = {
    "clear_tool_uses_20250919": "context-management-2025-06-27",
    "clear_thinking_20251015": "context-management-2025-06-27",
    "compact_20260112": "compact-2026-01-12",
}
"""The context management edits the server knows, and the beta header each needs."""


def context_management_refusal(body: Any, headers: dict[str, str]) -> str | None:
    """What the Messages API says (400) to a `context_management` it cannot take; None when it
    passes. Written from Anthropic's context-editing and compaction guides:

    - each edit needs its beta in the `anthropic-beta` header (`CONTEXT_EDITS`); without it the
      field is unknown;
    - an edit of a type not known is refused;
    - `clear_thinking_20251015` needs thinking enabled, and comes first among the edits.
    """
    if not isinstance(body, dict) or "context_management" not in body:
        return None
    edits = (body.get("context_management") or {}).get("edits")
    if not isinstance(edits, list):
        return "context_management.edits: Field required"
    betas = _betas(headers)
    for k, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind not in CONTEXT_EDITS:
            return f"context_management.edits.{k}.type: Input tag {kind!r} is not a known edit"
        if CONTEXT_EDITS[kind] not in betas:
            return (
                f"context_management: Extra inputs are not permitted (the {kind} edit needs "
                f"the anthropic-beta header {CONTEXT_EDITS[kind]!r})"
            )
        if kind == "clear_thinking_20251015":
            thinking = body.get("thinking")
            if not isinstance(thinking, dict) or thinking.get("type") not in (
                "enabled",
                "adaptive",
            ):
                return f"context_management.edits.{k}: clear_thinking_20251015 needs thinking"
            if k != 0:
                return f"context_management.edits.{k}: clear_thinking_20251015 must come first"
    return None


def compaction_refusal(body: Any, issued: list[Issued]) -> str | None:
    """What the Messages API says (400) to the `compaction` blocks of `body`; None when they
    pass. Written from Anthropic's compaction guide and the API's documented compaction errors:

    - a compaction block sent must be one the server issued, its content, encrypted content and
      signature unchanged (`compaction_content_mismatch`);
    - at most one compaction block holds a summary (`compaction_block_ambiguous`: "send only the
      block the conversation returned last");
    - that block is the first block of the conversation (`compaction_block_misplaced`). (The
      guide also says the API drops what comes before the block; this server holds the client
      to the stricter rule, which sending from the block on meets.)
    """
    if not isinstance(body, dict):
        return None
    known = [c for i in issued for c in i.compaction]
    found: list[tuple[int, int]] = []
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            if not isinstance(block, dict) or block.get("type") != "compaction":
                continue
            if _checked(block) not in known:
                return (
                    f"messages.{i}.content.{j}: compaction_content_mismatch: the compaction "
                    "block differs from the one the API returned"
                )
            if block.get("content") is not None:
                found.append((i, j))
    if len(found) > 1:
        return "compaction_block_ambiguous: send only the compaction block returned last"
    if found and found[0] != (0, 0):
        i, j = found[0]
        return (
            f"messages.{i}.content.{j}: compaction_block_misplaced: the compaction block must "
            "be the first block of the conversation"
        )
    return None


# -- OpenAI Responses ---------------------------------------------------------------------------
#
# Written from the API reference (the Response object, its output items and streaming events)
# and the errors the API gives, not from turnlog.models.responses_format, so that it can check it.

RESPONSES_USAGE = {
    "input_tokens": 42,
    "input_tokens_details": {"cached_tokens": 32},
    "output_tokens": 17,
    "output_tokens_details": {"reasoning_tokens": 10},
    "total_tokens": 59,
}


def out_message(text: str, item_id: str = "msg_1", **fields: Any) -> dict:
    """An assistant `message` output item holding one `output_text`."""
    content = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    item = {"id": item_id, "type": "message", "status": "completed", "role": "assistant"}
    return {**item, "content": [content], **fields}


def out_call(call_id: str, name: str, arguments: str, item_id: str | None = None) -> dict:
    """A `function_call` output item."""
    return {
        "id": item_id or "fc_" + call_id,
        "type": "function_call",
        "status": "completed",
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
    }


def out_reasoning(
    item_id: str, summary: list[str] = (), encrypted: str | None = None, **fields: Any
) -> dict:
    """A `reasoning` output item: its summary texts, its encrypted content (asked for with
    `include: ["reasoning.encrypted_content"]`)."""
    item: dict[str, Any] = {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": t} for t in summary],
    }
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return {**item, **fields}


def responses_reply(
    output: list[dict],
    *,
    response_id: str = "resp_1",
    model: str = "gpt-test-2025",
    status: str = "completed",
    incomplete_reason: str | None = None,
    usage: dict | None = None,
) -> dict:
    """A Response object as the API returns it (`POST /v1/responses`, not streamed)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1_760_000_000,
        "status": status,
        "error": None,
        "incomplete_details": (
            {"reason": incomplete_reason} if incomplete_reason is not None else None
        ),
        "instructions": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "usage": usage if usage is not None else dict(RESPONSES_USAGE),
    }


def _pieces(text: str, chunk: int) -> list[str]:
    return [text[i : i + chunk] for i in range(0, len(text), chunk)] or [""]


def responses_events(
    reply: dict, chunk: int = 4, items_done: bool = True, completed_output: bool = True
) -> list[tuple[str | None, Any]]:
    """A streamed reply as the API sends it (named SSE events, each with its
    `sequence_number`): response.created, then per output item its output_item.added, its
    deltas (text and arguments in pieces of `chunk` characters) and their done events, its
    output_item.done; then response.completed (response.incomplete for an incomplete reply)
    carrying the whole response. `items_done=False` leaves out the output_item.done events and
    `completed_output=False` sends response.completed with an empty output, as a server may:
    the items are then to be assembled from their deltas."""
    events: list[tuple[str | None, Any]] = []

    def add(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **data}))

    start = dict(reply, status="in_progress", output=[], usage=None, incomplete_details=None)
    add("response.created", response=start)
    add("response.in_progress", response=start)
    for index, item in enumerate(reply["output"]):
        at = {"item_id": item.get("id"), "output_index": index}
        if item["type"] == "message":
            add("response.output_item.added", output_index=index, item=dict(item, content=[]))
            for ci, part in enumerate(item["content"]):
                text = part.get("text", "")
                empty = {"type": "output_text", "text": "", "annotations": []}
                add("response.content_part.added", **at, content_index=ci, part=empty)
                for piece in _pieces(text, chunk):
                    add(
                        "response.output_text.delta",
                        **at,
                        content_index=ci,
                        delta=piece,
                        logprobs=[],
                    )
                add("response.output_text.done", **at, content_index=ci, text=text, logprobs=[])
                add("response.content_part.done", **at, content_index=ci, part=part)
        elif item["type"] == "function_call":
            added = dict(item, arguments="", status="in_progress")
            add("response.output_item.added", output_index=index, item=added)
            for piece in _pieces(item["arguments"], chunk):
                add("response.function_call_arguments.delta", **at, delta=piece)
            add("response.function_call_arguments.done", **at, arguments=item["arguments"])
        elif item["type"] == "reasoning":
            added = {k: v for k, v in item.items() if k != "encrypted_content"}
            add("response.output_item.added", output_index=index, item=dict(added, summary=[]))
            for si, summary in enumerate(item.get("summary") or []):
                for piece in _pieces(summary["text"], chunk):
                    add(
                        "response.reasoning_summary_text.delta",
                        **at,
                        summary_index=si,
                        delta=piece,
                    )
        else:
            add("response.output_item.added", output_index=index, item=item)
        if items_done:
            add("response.output_item.done", output_index=index, item=item)
    final = reply if completed_output else dict(reply, output=[])
    incomplete = reply.get("status") == "incomplete"
    add("response.incomplete" if incomplete else "response.completed", response=final)
    return events


@dataclass
class IssuedResponse:
    """One Responses reply the server sent, and the request it answered."""

    id: str
    output: list[dict]
    stored: bool
    """Whether the request asked for it to be stored (`store`, true unless false)."""
    previous: str | None
    """The `previous_response_id` of its request."""
    input: list
    """The request's `input` items."""


def _sse_response(chunks: list[bytes]) -> dict | None:
    """The response a streamed Responses reply ends with, its output the items streamed."""
    items: dict[int, dict] = {}
    final = None
    for chunk in chunks:
        for line in chunk.decode().splitlines():
            if not line.startswith("data: "):
                continue
            try:
                event = json.loads(line[6:])
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if event.get("type") == "response.output_item.done":
                items[event["output_index"]] = event["item"]
            elif event.get("type") in ("response.completed", "response.incomplete"):
                final = dict(event["response"])
    if final is not None and items and not final.get("output"):
        final["output"] = [items[i] for i in sorted(items)]
    return final


def issued_response(reply: Reply, request: Any) -> IssuedResponse | None:
    """What a Responses reply carried; None for a body that is not a response."""
    if reply.sse is not None:
        body = _sse_response(reply.sse)
    else:
        try:
            body = json.loads(reply.body)
        except ValueError:
            return None
    if not isinstance(body, dict) or not isinstance(body.get("output"), list):
        return None
    request = request if isinstance(request, dict) else {}
    inputs = request.get("input")
    return IssuedResponse(
        str(body.get("id")),
        body["output"],
        request.get("store", True) is not False,
        request.get("previous_response_id"),
        inputs if isinstance(inputs, list) else [],
    )


def _same(a: Any, b: Any) -> bool:
    """Unmodified: the same JSON object, every field and value (the order of an object's
    fields aside, which JSON leaves open and the official client does not keep)."""
    return a == b


def _follows(item: Any, issued: dict) -> bool:
    """Whether input `item` is the item `issued` (an output item) was, as sent back."""
    if not isinstance(item, dict):
        return False
    kind = item.get("type", "message")
    if kind != issued.get("type"):
        return False
    if kind == "function_call":
        return item.get("call_id") == issued.get("call_id")
    if kind == "message":
        return item.get("role") == "assistant"
    return True


def responses_refusal(body: Any, issued: list[IssuedResponse]) -> str | None:
    """What the Responses API says (400) to `body` when its items break the API's rules; None
    when it passes.

    - `previous_response_id` must name a response the server issued and stored; its chain
      (that response, the one its request named, ...: their inputs and outputs) comes before
      the input;
    - every `function_call_output` answers a `function_call` before it (in the chain or the
      input);
    - every reasoning item sent is one the server issued, unmodified (every field and value),
      and is directly followed by the item that followed it when issued (a
      `function_call` of the same `call_id`, an assistant message, ...);
    - with `store: false`, when the input ends with `function_call_output` items (a tool loop
      in progress), the reasoning items issued in the response that made those calls are all
      sent (the model's reasoning comes back to it).
    """
    if not isinstance(body, dict):
        return None
    items = body.get("input")
    if isinstance(items, str) or items is None:
        items = []
    if not isinstance(items, list):
        return "Invalid type for 'input': expected a string or an array of items."
    by_id = {r.id: r for r in issued}
    chain: list[Any] = []
    previous = body.get("previous_response_id")
    seen: set[str] = set()
    while previous is not None:
        found = by_id.get(previous)
        if found is None or not found.stored or previous in seen:
            return f"Previous response with id '{previous}' not found."
        seen.add(previous)
        chain[:0] = [*found.input, *found.output]
        previous = found.previous
    calls = {
        i["call_id"] for i in chain if isinstance(i, dict) and i.get("type") == "function_call"
    }
    reasoning = [
        (r, n) for r in issued for n, i in enumerate(r.output) if i.get("type") == "reasoning"
    ]
    for at, item in enumerate(items):
        if not isinstance(item, dict):
            return f"Invalid type for 'input[{at}]': expected an object."
        kind = item.get("type", "message")
        if kind == "function_call":
            calls.add(item.get("call_id"))
        elif kind == "function_call_output" and item.get("call_id") not in calls:
            return (
                f"No tool call found for function call output with call_id {item.get('call_id')}."
            )
        elif kind == "reasoning":
            origin = next(((r, n) for r, n in reasoning if _same(r.output[n], item)), None)
            if origin is None:
                return f"The encrypted content for item {item.get('id')} could not be verified."
            response, n = origin
            after = response.output[n + 1] if n + 1 < len(response.output) else None
            if after is not None and (at + 1 >= len(items) or not _follows(items[at + 1], after)):
                return (
                    f"Item '{item.get('id')}' of type 'reasoning' was provided without its "
                    "required following item."
                )
    if body.get("store", True) is not False:
        return None
    answered = []
    for item in reversed(items):
        if not isinstance(item, dict) or item.get("type") != "function_call_output":
            break
        answered.append(item.get("call_id"))
    sent = [i for i in items if isinstance(i, dict) and i.get("type") == "reasoning"]
    for call_id in answered:
        origin = next(
            (
                r
                for r in issued
                if any(
                    i.get("type") == "function_call" and i.get("call_id") == call_id
                    for i in r.output
                )
            ),
            None,
        )
        for item in origin.output if origin is not None else []:
            if item.get("type") == "reasoning" and not any(_same(item, s) for s in sent):
                return (
                    f"Item 'fc_{call_id}' of type 'function_call' was provided without its "
                    f"required 'reasoning' item: '{item.get('id')}'."
                )
    return None


# -- images, billed as the providers bill them ------------------------------------------------
#
# Written from the providers' guides, not from turnlog.media, so that it can check it:
#
# OpenAI, "Images and vision", "Calculating costs" (GPT-4o, GPT-4.1, GPT-4.5, o-series): an
# image at `detail: "low"` costs 85 tokens. At `"high"` it is scaled to fit within 2048 x 2048,
# then so that its shortest side is 768 px; it costs 170 tokens per 512 px square needed to
# cover it, plus 85. The guide's examples only ever scale down (1024 x 1024 -> 768 x 768; 2048 x
# 4096 -> 1024 x 2048 -> 768 x 1536), and its input limits give high detail as "768px (short
# side) x 2000px (long side)", so an image is never scaled up here. The guide does not say how a
# scaled side is rounded: here to the nearest pixel, as a resizer does. `"auto"` (or no detail,
# which means auto) lets the model choose; it is billed as `"high"` here.
#
# Anthropic, "Vision", "Evaluate image size": "If your image's long edge is more than 1568
# pixels, or your image is more than ~1,600 tokens, it will first be scaled down, preserving
# aspect ratio, until it's within the size limits"; then tokens = (width px * height px) / 750,
# rounded up here. ~1,600 tokens is 1,600 x 750 = 1,200,000 px, the default area limit
# (`ANTHROPIC_MAX_PIXELS`; the guide's other figures: "no more than 1.15 megapixels" to improve
# time-to-first-token, and its table of the largest sizes not resized, up to 784 x 1568 =
# 1,229,312 px). A scaled size is rounded down to whole pixels, so it stays within the limits.

OPENAI_LOW_DETAIL = 85
OPENAI_BASE = 85
OPENAI_PER_TILE = 170
OPENAI_TILE = 512
OPENAI_BOX = 2048
OPENAI_SHORT_SIDE = 768
ANTHROPIC_LONG_EDGE = 1568
ANTHROPIC_PIXELS_PER_TOKEN = 750
ANTHROPIC_MAX_PIXELS = 1_600 * ANTHROPIC_PIXELS_PER_TOKEN
"""The guide's "more than ~1,600 tokens" as an area: 1,200,000 px."""


def _nearest(side: int, num: int, den: int) -> int:
    """side * num / den, rounded to the nearest whole pixel (a half up), at least 1."""
    return max(1, (2 * side * num + den) // (2 * den))


def openai_billed_tokens(width: int, height: int, detail: str | None = None) -> int:
    """The tokens OpenAI bills for a `width` x `height` image sent at `detail`."""
    if detail == "low":
        return OPENAI_LOW_DETAIL
    w, h = width, height
    longest = max(w, h)
    if longest > OPENAI_BOX:
        w, h = _nearest(w, OPENAI_BOX, longest), _nearest(h, OPENAI_BOX, longest)
    shortest = min(w, h)
    if shortest > OPENAI_SHORT_SIDE:
        w, h = _nearest(w, OPENAI_SHORT_SIDE, shortest), _nearest(h, OPENAI_SHORT_SIDE, shortest)
    tiles = math.ceil(w / OPENAI_TILE) * math.ceil(h / OPENAI_TILE)
    return OPENAI_BASE + OPENAI_PER_TILE * tiles


def anthropic_scaled_size(
    width: int, height: int, max_pixels: int = ANTHROPIC_MAX_PIXELS
) -> tuple[int, int]:
    """The size Claude sees a `width` x `height` image at: scaled down, keeping its aspect
    ratio, to the largest size whose long edge is at most 1568 px and whose area is at most
    `max_pixels`, in exact integer arithmetic."""
    longest = max(width, height)
    over_edge = longest > ANTHROPIC_LONG_EDGE
    over_area = width * height > max_pixels
    if not over_edge and not over_area:
        return width, height
    # The edge's scale 1568 / longest is the smaller one when
    # (1568 / longest)^2 <= max_pixels / (width * height).
    if over_edge and (
        not over_area or ANTHROPIC_LONG_EDGE**2 * width * height <= max_pixels * longest**2
    ):
        return (
            max(1, width * ANTHROPIC_LONG_EDGE // longest),
            max(1, height * ANTHROPIC_LONG_EDGE // longest),
        )
    # floor(width * sqrt(max_pixels / (width * height))) = isqrt(max_pixels * width // height)
    return (
        max(1, math.isqrt(max_pixels * width // height)),
        max(1, math.isqrt(max_pixels * height // width)),
    )


def anthropic_billed_tokens(width: int, height: int, max_pixels: int = ANTHROPIC_MAX_PIXELS) -> int:
    """The tokens Anthropic bills for a `width` x `height` image."""
    w, h = anthropic_scaled_size(width, height, max_pixels)
    return -(-(w * h) // ANTHROPIC_PIXELS_PER_TOKEN)


@dataclass
class BilledImage:
    """One image of a request, as the server billed it."""

    where: str
    """Where it is in the body, e.g. `messages.1.content.0`."""
    width: int | None
    """Its width as decoded; None when it was not decoded (a URL, unreadable data)."""
    height: int | None
    detail: str | None
    """OpenAI's `detail` sent with it (None when absent; never for Anthropic)."""
    tokens: int
    """The tokens billed for it: 0 when it was not decoded."""


def decoded_size(data: str) -> tuple[int, int] | None:
    """The (width, height) Pillow reads from base64 image `data`; None when it cannot."""
    from PIL import Image, UnidentifiedImageError  # a dev dependency, loaded when billing

    try:
        raw = base64.b64decode(data, validate=True)
        with warnings.catch_warnings():  # only the size is read: a huge one is no bomb here
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as image:
                return image.size
    except (binascii.Error, ValueError, OSError, UnidentifiedImageError):
        return None
    except Image.DecompressionBombError:
        return None


def _data_url_payload(url: Any) -> str | None:
    """The base64 payload of a `data:<type>;base64,<payload>` URL; None for anything else."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    head, sep, payload = url.partition(",")
    return payload if sep and head.endswith(";base64") else None


def _found(value: Any, kind: str, where: str) -> list[tuple[str, dict]]:
    """Every dict of `"type": kind` inside `value` (lists and dicts), with its place."""
    out: list[tuple[str, dict]] = []
    if isinstance(value, dict):
        if value.get("type") == kind:
            out.append((where, value))
        else:
            for key, inner in value.items():
                out += _found(inner, kind, f"{where}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            out += _found(inner, kind, f"{where}.{i}")
    return out


def billed_images(
    path: str, body: Any, anthropic_max_pixels: int = ANTHROPIC_MAX_PIXELS
) -> list[BilledImage]:
    """The images of a Chat Completions, Responses or Messages request `body`, each with its
    tokens. Only inline (base64) images are decoded and billed; one given by URL or file id
    is listed with 0 tokens (the server fetches nothing), as is data Pillow cannot read."""
    if not isinstance(body, dict):
        return []
    path = path.rstrip("/")
    images: list[BilledImage] = []
    if path.endswith("/chat/completions") or path.endswith("/responses"):
        chat = path.endswith("/chat/completions")
        key, kind = ("messages", "image_url") if chat else ("input", "input_image")
        for where, part in _found(body.get(key), kind, key):
            image = part.get("image_url")
            if isinstance(image, dict):  # Chat Completions: {"url", "detail"}
                url, detail = image.get("url"), image.get("detail")
            else:  # Responses: "image_url" and "detail" beside "type"
                url, detail = image, part.get("detail")
            payload = _data_url_payload(url)
            size = decoded_size(payload) if payload is not None else None
            tokens = 0 if size is None else openai_billed_tokens(*size, detail=detail)
            images.append(BilledImage(where, *(size or (None, None)), detail, tokens))
    elif path.endswith("/messages"):
        for where, block in _found(body.get("messages"), "image", "messages"):
            source = block.get("source")
            size = None
            if isinstance(source, dict) and source.get("type") == "base64":
                size = decoded_size(source.get("data", ""))
            tokens = 0 if size is None else anthropic_billed_tokens(*size, anthropic_max_pixels)
            images.append(BilledImage(where, *(size or (None, None)), None, tokens))
    return images


def _add_input(usage: Any, tokens: int) -> bool:
    """Add `tokens` to the input (and total) counts of a usage object, where it has them;
    whether it had any."""
    if not isinstance(usage, dict):
        return False
    keys = [k for k in ("prompt_tokens", "input_tokens", "total_tokens") if k in usage]
    keys = [k for k in keys if isinstance(usage[k], int)]
    for key in keys:
        usage[key] += tokens
    return bool(keys)


def _bill_event(event: Any, tokens: int) -> bool:
    """Add `tokens` to the usage a JSON body or a stream event carries, in any of the three
    wire formats; whether it carried one."""
    if not isinstance(event, dict):
        return False
    billed = _add_input(event.get("usage"), tokens)  # a body, a chunk, a message_delta
    for key in ("message", "response"):  # message_start; response.completed
        if isinstance(event.get(key), dict):
            billed = _add_input(event[key].get("usage"), tokens) or billed
    return billed


def _bill_chunk(chunk: bytes, tokens: int) -> bytes:
    """An SSE chunk with `tokens` added to the usage its events carry; unchanged without."""
    try:
        lines = chunk.decode().split("\n")
    except UnicodeDecodeError:
        return chunk
    billed = False
    for i, line in enumerate(lines):
        if not line.startswith("data: "):
            continue
        try:
            event = json.loads(line[6:])
        except ValueError:
            continue
        if _bill_event(event, tokens):
            lines[i] = "data: " + json.dumps(event)
            billed = True
    return "\n".join(lines).encode() if billed else chunk


def with_input_tokens(reply: Reply, tokens: int) -> Reply:
    """`reply` with `tokens` more input tokens in the usage it reports: in a JSON body, or in
    each stream event that carries a usage. A body that is not JSON is left as it is."""
    if reply.sse is not None:
        chunks = [_bill_chunk(chunk, tokens) for chunk in reply.sse]
        return Reply(
            reply.status, reply.body, reply.content_type, reply.headers, chunks, reply.delay
        )
    try:
        body = json.loads(reply.body)
    except ValueError:
        return reply
    if not _bill_event(body, tokens):
        return reply
    return Reply(
        reply.status,
        json.dumps(body).encode(),
        reply.content_type,
        reply.headers,
        None,
        reply.delay,
    )


# -- driving both twins from one test ------------------------------------------------------------


class Twin:
    """Calls the blocking or the asyncio adapter alike: each call builds the model, uses it and
    closes it (the asyncio one inside its own event loop)."""

    def __init__(self, kind: str, blocking: type, asyncio_: type, **settings: Any) -> None:
        self.kind = kind
        self.cls = blocking if kind == "sync" else asyncio_
        self.settings = settings

    def _run(self, action: Any) -> Any:
        if self.kind == "sync":
            with self.cls(**self.settings) as model:
                return action(model)

        async def main() -> Any:
            async with self.cls(**self.settings) as model:
                result = action(model)
                if hasattr(result, "__anext__"):
                    return [event async for event in result]
                return await result

        return asyncio.run(main())

    def respond(self, messages: Any, tools: Any = None) -> Any:
        return self._run(lambda m: m.respond(messages, tools))

    def stream(self, messages: Any, tools: Any = None) -> list[Any]:
        return self._run(
            lambda m: (
                m.stream(messages, tools)
                if self.kind != "sync"
                else list(m.stream(messages, tools))
            )
        )

    def complete(self, messages: Any) -> Any:
        return self._run(lambda m: m.complete(messages))
