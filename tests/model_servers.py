"""Small real HTTP servers that speak the OpenAI and Anthropic wire formats, for the tests.

A `ScriptedServer` listens on 127.0.0.1 (a thread per request); the test scripts its replies in
order (`reply_json`, `reply_sse`, `reply_status`, `reply_raw`, optionally slow) and reads the
requests it got (`requests`: path, headers, JSON body). The official clients talk to it over
real sockets through `base_url`. Builders below write bodies exactly as each provider does.

Like llama-cpp-python's server, it answers 500 to a Chat Completions request holding a message
whose `content` is null (`null_content`), and keeps the scripted reply for the next request.
(`refuse_null_content = False` lets it pass, for clients that send null, e.g. LangChain's.)
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
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


class ScriptedServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Request] = []
        self.aborted = 0
        self.refuse_null_content = True
        """Answer 500 to a null message content, as llama-cpp-python's server does."""
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
                server.requests.append(
                    Request(
                        "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                    )
                )
                reply = server.replies.popleft() if server.replies else Reply(500, b"{}")
                refused = null_content(self.path, body) if server.refuse_null_content else None
                if refused is not None:
                    server.replies.appendleft(reply)  # it waits for a request the server takes
                    reply = Reply(500, json.dumps(openai_error(500, refused)).encode())
                if server.rewrite is not None:
                    reply = server.rewrite(server.requests[-1], reply)
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
) -> dict:
    content: list[dict] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in tool_uses]
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


def anthropic_events(
    deltas: list[str],
    tool_uses: list[tuple[str, str, list[str]]] = (),
    *,
    model: str = "claude-test-2025",
    usage: dict | None = None,
) -> list[tuple[str | None, Any]]:
    """A streamed reply as the Messages API sends it (named SSE events); `usage` is the
    prompt's counts in message_start."""
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
    if deltas:
        events.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
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
                    "index": 0,
                    "delta": {"type": "text_delta", "text": d},
                },
            )
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
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
