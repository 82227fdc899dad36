"""Real model servers for tests/test_real_model.py: llama.cpp's `llama-server` serving a small
instruct model, and LiteLLM's proxy in front of it speaking the Anthropic Messages format, each
behind a recording proxy that keeps every request and what the server answered.

Nothing is downloaded here: `scripts/real-model-server.py` (run by scripts/install-test-deps.sh)
built the server, joined the model and installed LiteLLM into a cache outside the clone; a piece
that is missing fails the test, saying which command installs it. Both servers listen on
127.0.0.1 only, are children of the test run (they get a signal when it dies, however it dies),
and are started once per run, on first use.

    client --> Recorder --> llama-server                       (Chat Completions, /v1)
    client --> Recorder --> litellm --> Recorder --> llama-server     (Messages, via LiteLLM)

A `Recorder` forwards each request as it came and each answer as it went, streams chunk by chunk,
closes each connection after its answer (so no client the tests leave open holds a socket), and
keeps an `Exchange` per request: the path, the JSON body sent, the status, and the JSON
reply or the data of each SSE event. `fail_request(n)` makes it answer the n-th request from
then on 500 itself, without forwarding it (a provider failure the real server never sees).
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from server_procs import ServerUnavailable, die_with_parent, free_ports, log_tail, scratch_dir

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "scripts" / "real-model-server.py"
MODEL_NAME = "local"
"""The model name the clients send (llama-server serves one model whatever it is called)."""

# The server's settings: small and deterministic, so the tests' time stays low on two cores.
CONTEXT = 4096
THREADS = 2
SEED = 7


def setup_script() -> Any:
    """scripts/real-model-server.py as a module (its paths and pins)."""
    spec = importlib.util.spec_from_file_location("real_model_server", SETUP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def installed() -> dict[str, Path]:
    """The llama-server binary, the model file and the litellm command.

    Raises:
        ServerUnavailable: one of them is missing, naming the command that installs it.
    """
    script = setup_script()
    found = script.paths()
    gone = script.missing(script.cache_root())
    if gone:
        raise ServerUnavailable(
            f"{', '.join(gone)} not installed in {script.cache_root()}: run "
            "`python scripts/real-model-server.py` (scripts/install-test-deps.sh runs it)"
        )
    return found


# -- the chat template -----------------------------------------------------------------------

_GGUF_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}


def gguf_chat_template(model: Path) -> str:
    """The `tokenizer.chat_template` of a GGUF file, read from its header."""
    with model.open("rb") as f:

        def take(fmt: str) -> Any:
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def text() -> str:
            return f.read(take("Q")).decode("utf-8")

        def value(kind: int) -> Any:
            if kind in _GGUF_SCALARS:
                return take(_GGUF_SCALARS[kind])
            if kind == 8:
                return text()
            if kind == 9:
                inner, count = take("I"), take("Q")
                for _ in range(count):
                    value(inner)
                return None
            raise ValueError(f"{model}: unknown GGUF value type {kind}")

        if f.read(4) != b"GGUF":
            raise ServerUnavailable(f"{model} is not a GGUF file")
        take("I")  # version
        take("Q")  # tensor count
        for _ in range(take("Q")):
            key, kind = text(), take("I")
            found = value(kind)
            if key == "tokenizer.chat_template":
                return str(found)
    raise ServerUnavailable(f"{model} has no chat template")


# Qwen2.5's template asks for each tool call as JSON inside <tool_call> tags. Qwen2.5-Coder
# answers with the JSON alone, which llama-server then returns as text. Without the tags in the
# template (the instruction and the rendered calls alike), llama-server reads a reply that is
# such a JSON object as a structured call.
_TAGGED = [
    ("within <tool_call></tool_call> XML tags", "as a single line"),
    ("<tool_call>\\n", ""),  # the backslash-n escapes of the template's string literals
    ("\\n</tool_call>", ""),
]


def untagged_template(template: str) -> str:
    """`template` with its tool calls asked for and shown as bare JSON objects.

    Raises:
        ServerUnavailable: the template is not the one this was written for.
    """
    for old, new in _TAGGED:
        if old not in template:
            raise ServerUnavailable(f"the model's chat template has no {old!r}: another model?")
        template = template.replace(old, new)
    # This GGUF's template doubles the braces of its example call (it renders "{{"name": ...}}"),
    # and the model then writes its calls so: the example gets single braces.
    example = r"\"name\": <function-name>, \"arguments\": <args-json-object>"
    template = template.replace("{{" + example + "}}", "{" + example + "}")
    if "tool_call>" in template:
        raise ServerUnavailable("the model's chat template still names <tool_call>: another model?")
    return template


# -- the recording proxy ---------------------------------------------------------------------


@dataclass
class Exchange:
    """One request through a `Recorder` and what came back."""

    path: str
    body: Any
    """The request's JSON body (None when it had none)."""
    status: int = 0
    reply: Any = None
    """The JSON reply (None for a stream)."""
    events: list[Any] = field(default_factory=list)
    """The data of each SSE event of a streamed reply, parsed as JSON ("[DONE]" left out)."""
    injected: bool = False
    """The recorder answered this one itself (`fail_request`); the server never saw it."""

    @property
    def streamed(self) -> bool:
        return bool(self.events)


class Recorder:
    """A recording HTTP proxy on 127.0.0.1 in front of `upstream` (scheme://host:port)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.exchanges: list[Exchange] = []
        self._fail: set[int] = set()  # the indices of the exchanges to answer 500
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                recorder._forward(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                recorder._forward(self, self.rfile.read(length))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def mark(self) -> int:
        """Where the exchanges of what follows start (`since(mark)` reads them)."""
        return len(self.exchanges)

    def fail_request(self, n: int) -> None:
        """Answer the `n`-th request from now (1 is the next) 500, without forwarding it."""
        with self._lock:
            self._fail.add(len(self.exchanges) + n - 1)

    def since(self, mark: int) -> list[Exchange]:
        return self.exchanges[mark:]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _forward(self, handler: BaseHTTPRequestHandler, raw: bytes | None) -> None:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        exchange = Exchange(handler.path, body)
        with self._lock:
            inject = handler.command == "POST" and len(self.exchanges) in self._fail
            if handler.command == "POST":
                self.exchanges.append(exchange)
        if inject:
            exchange.injected, exchange.status = True, 500
            error = json.dumps(
                {"error": {"message": "injected by the test", "type": "server_error"}}
            )
            self._answer(handler, 500, {"content-type": "application/json"}, error.encode())
            return
        headers = {
            k: v
            for k, v in handler.headers.items()
            if k.lower() not in ("host", "connection", "content-length", "accept-encoding")
        }
        upstream = http.client.HTTPConnection(*self.upstream, timeout=600)
        try:
            upstream.request(handler.command, handler.path, body=raw, headers=headers)
            response = upstream.getresponse()
            exchange.status = response.status
            kept = {
                k: v
                for k, v in response.getheaders()
                if k.lower() not in ("transfer-encoding", "connection", "content-length")
            }
            if "text/event-stream" not in response.getheader("content-type", ""):
                data = response.read()
                try:
                    exchange.reply = json.loads(data) if data else None
                except ValueError:
                    exchange.reply = data
                self._answer(handler, response.status, kept, data)
                return
            handler.send_response(response.status)
            for k, v in kept.items():
                handler.send_header(k, v)
            handler.send_header("connection", "close")
            handler.end_headers()
            while line := response.readline():
                handler.wfile.write(line)
                handler.wfile.flush()
                text = line.decode("utf-8", "replace").strip()
                if text.startswith("data:") and text[5:].strip() not in ("", "[DONE]"):
                    exchange.events.append(json.loads(text[5:]))
            handler.close_connection = True
        finally:
            upstream.close()

    @staticmethod
    def _answer(
        handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], data: bytes
    ) -> None:
        handler.send_response(status)
        for k, v in headers.items():
            handler.send_header(k, v)
        handler.send_header("content-length", str(len(data)))
        handler.send_header("connection", "close")
        handler.end_headers()
        handler.wfile.write(data)
        handler.close_connection = True


# -- the servers -----------------------------------------------------------------------------


def _wait_for(url: str, proc: subprocess.Popen[bytes], log: Path, what: str, limit: float) -> None:
    """Wait until GET `url` answers 200; a server that exits or stays silent fails, with its log."""
    parts = urlsplit(url)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerUnavailable(f"{what} exited {proc.returncode}:\n{log_tail(log)}")
        try:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
            conn.request("GET", parts.path)
            status = conn.getresponse().status
            conn.close()
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise ServerUnavailable(f"{what} did not answer within {limit:.0f} s:\n{log_tail(log)}")


@contextmanager
def _process(command: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[Any]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class RealModel:
    """The running servers: where the clients connect, and what each recorder saw."""

    openai_url: str
    """The Chat Completions base URL (ends in /v1), llama-server behind a recorder."""
    anthropic_url: str
    """The Messages API base URL, LiteLLM behind a recorder."""
    llama: Recorder
    """What reached llama-server from the clients directly."""
    anthropic: Recorder
    """What reached LiteLLM."""
    behind_litellm: Recorder
    """What LiteLLM sent on to llama-server."""
    started: dict[str, float]
    """Seconds each server took to start."""


@contextmanager
def start() -> Iterator[RealModel]:
    """Start llama-server and LiteLLM's proxy (the recorders with them); stop them after."""
    found = installed()
    work = scratch_dir("llm")
    llama_port, litellm_port = free_ports(2)
    template = work / "chat-template.jinja"
    template.write_text(untagged_template(gguf_chat_template(found["model"])))
    began = time.monotonic()
    command = [
        str(found["llama_server"]),
        "--model",
        str(found["model"]),
        "--host",
        "127.0.0.1",
        "--port",
        str(llama_port),
        "--ctx-size",
        str(CONTEXT),
        "--threads",
        str(THREADS),
        "--threads-batch",
        str(THREADS),
        "--parallel",
        "1",
        "--seed",
        str(SEED),
        # No prompt cache: a prompt evaluated after a cached prefix gets slightly different
        # logits, so a reply would depend on the requests before it. Each is evaluated whole.
        "--no-cache-prompt",
        "--cache-ram",
        "0",
        "--jinja",  # chat templates in Jinja: structured tool calls
        "--chat-template-file",
        str(template),
        "--no-webui",
        "--alias",
        MODEL_NAME,
    ]
    with _process(command, work / "llama-server.log") as llama:
        _wait_for(
            f"http://127.0.0.1:{llama_port}/health",
            llama,
            work / "llama-server.log",
            "llama-server",
            180,
        )
        llama_started = time.monotonic() - began
        direct = Recorder(f"http://127.0.0.1:{llama_port}")
        behind = Recorder(f"http://127.0.0.1:{llama_port}")
        config = {
            "model_list": [
                {
                    "model_name": MODEL_NAME,
                    "litellm_params": {
                        "model": f"openai/{MODEL_NAME}",
                        "api_base": behind.url + "/v1",
                        "api_key": "unused",
                    },
                }
            ],
            "litellm_settings": {
                "use_chat_completions_url_for_anthropic_messages": True,
                "telemetry": False,
                "drop_params": True,
            },
        }
        (work / "litellm.yaml").write_text(json.dumps(config, indent=1))  # JSON is YAML
        env = dict(os.environ)
        env.update(
            LITELLM_LOCAL_MODEL_COST_MAP="True",  # its price table from the wheel, not fetched
            LITELLM_TELEMETRY="False",
            NO_DOCS="True",
            NO_REDOC="True",
        )
        began = time.monotonic()
        litellm_command = [
            str(found["litellm"]),
            "--config",
            str(work / "litellm.yaml"),
            "--host",
            "127.0.0.1",
            "--port",
            str(litellm_port),
            "--num_workers",
            "1",
        ]
        try:
            with _process(litellm_command, work / "litellm.log", env) as litellm:
                _wait_for(
                    f"http://127.0.0.1:{litellm_port}/health/liveliness",
                    litellm,
                    work / "litellm.log",
                    "LiteLLM's proxy",
                    180,
                )
                anthropic = Recorder(f"http://127.0.0.1:{litellm_port}")
                try:
                    yield RealModel(
                        openai_url=direct.url + "/v1",
                        anthropic_url=anthropic.url,
                        llama=direct,
                        anthropic=anthropic,
                        behind_litellm=behind,
                        started={
                            "llama-server": llama_started,
                            "litellm": time.monotonic() - began,
                        },
                    )
                finally:
                    anthropic.close()
        finally:
            direct.close()
            behind.close()
    shutil.rmtree(work, ignore_errors=True)  # the servers are stopped: only logs are left


# -- what the tests check --------------------------------------------------------------------


def reported_usage(exchange: Exchange) -> dict[str, int | None]:
    """The token counts the server reported for one exchange, by the wire format's own fields:
    input (cached and cache-written tokens included), output, cached input."""
    if exchange.path.endswith("/messages"):
        usage: dict[str, Any] = {}
        if exchange.streamed:
            for event in exchange.events:
                if event.get("type") == "message_start":
                    usage.update(event["message"].get("usage") or {})
                if event.get("type") == "message_delta":
                    usage.update(
                        {k: v for k, v in (event.get("usage") or {}).items() if v is not None}
                    )
        else:
            usage = exchange.reply["usage"]
        parts = [
            usage.get(k)
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        ]
        counted = [n for n in parts if isinstance(n, int)]
        return {
            "input_tokens": sum(counted) if counted else None,
            "output_tokens": usage.get("output_tokens"),
            "cached_input_tokens": usage.get("cache_read_input_tokens"),
        }
    if exchange.streamed:
        found = [e["usage"] for e in exchange.events if e.get("usage")]
        usage = found[-1] if found else {}
    else:
        usage = exchange.reply.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return {
        "input_tokens": usage.get("prompt_tokens"),
        "output_tokens": usage.get("completion_tokens"),
        "cached_input_tokens": details.get("cached_tokens"),
    }


def wire_messages(body: dict[str, Any]) -> list[SimpleNamespace]:
    """The messages of a Chat Completions or Messages request, in the shape prompt_rules.breaks
    reads (role, text, tool_calls with ids, tool_results with call ids), read from the wire JSON
    alone: an oracle apart from turnlog's own conversions."""

    def message(role: str, text: str = "", calls=(), results=()) -> SimpleNamespace:
        return SimpleNamespace(
            role=role,
            text=text,
            tool_calls=[SimpleNamespace(id=c) for c in calls],
            tool_results=[SimpleNamespace(call_id=r) for r in results],
        )

    def text_of(content: Any) -> str:
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(b.get("text", "") for b in content if isinstance(b, dict))
        return ""

    out: list[SimpleNamespace] = []
    if body.get("system"):  # the Messages API: a top-level system prompt
        out.append(message("system", text_of(body["system"])))
    for m in body.get("messages", []):
        role, content = m["role"], m.get("content")
        if role == "tool":
            out.append(message("tool", text_of(content), results=[m["tool_call_id"]]))
        elif role == "assistant":
            calls = [c["id"] for c in m.get("tool_calls") or []]
            if isinstance(content, list):
                calls += [b["id"] for b in content if b.get("type") == "tool_use"]
            out.append(message("assistant", text_of(content), calls))
        elif isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
            results = [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]
            out.append(message("tool", results=results))
            rest = [b for b in content if b.get("type") != "tool_result"]
            if rest:
                out.append(message("user", text_of(rest)))
        else:
            out.append(message(role, text_of(content)))
    return out
