"""docs/chat.md and the README's chat example: they run, against a real local server speaking
the OpenAI wire format in place of Ollama."""

import re
from pathlib import Path

import pytest

from model_servers import ScriptedServer, openai_chunks, openai_completion
from turnlog import SessionChat, SessionService, SqliteStore
from turnlog.models import OpenAIChatModel

ROOT = Path(__file__).parent.parent
OLLAMA = "http://localhost:11434/v1"


def blocks(path):
    return re.findall(r"```python\n(.*?)```", (ROOT / path).read_text("utf-8"), re.S)


def block_with(path, text):
    [found] = [b for b in blocks(path) if text in b]
    return found


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


@pytest.mark.parametrize("path", ["docs/chat.md", "README.md"])
def test_the_first_conversation_runs_and_resumes_from_the_file(
    path, server, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code = block_with(path, "def get_weather").replace(OLLAMA, server.url + "/v1")
    assert server.url in code  # the example points at Ollama's OpenAI API
    server.reply_json(openai_completion(None, [("call_1", "get_weather", '{"city": "Oslo"}')]))
    server.reply_json(openai_completion("Oslo: 18 degrees and clear."))
    exec(code, {})
    assert capsys.readouterr().out.strip().endswith("Oslo: 18 degrees and clear.")
    tools = server.requests[0].body["tools"]
    assert tools[0]["function"]["name"] == "get_weather"
    assert server.requests[1].body["messages"][-1]["content"] == "Oslo: 18 degrees C, clear"
    with SessionService(SqliteStore(tmp_path / "turnlog.db")) as service:
        roles = [m.role for m in service.view_messages(service.sessions()[0].id)]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]


def test_the_tool_schema_example_prints_what_its_comment_says(capsys):
    namespace = {}
    first = block_with("docs/chat.md", "def get_weather")
    exec(first.split("model = OpenAIChatModel")[0], namespace)  # the imports and get_weather
    exec(block_with("docs/chat.md", "Tool.from_function(get_weather)"), namespace)
    printed = capsys.readouterr().out
    code = block_with("docs/chat.md", "Tool.from_function(get_weather)")
    comment = " ".join(line[2:] for line in code.splitlines() if line.startswith("# "))
    assert printed.strip() == comment


def test_the_streaming_and_request_id_examples(server, tmp_path, capsys):
    namespace = {}
    first = block_with("docs/chat.md", "def get_weather")
    exec(first.split("model = OpenAIChatModel")[0], namespace)
    server.reply_sse(openai_chunks([], [("call_1", "get_weather", ['{"city": "Rome"}'])]))
    server.reply_sse(openai_chunks(["Rome is ", "sunny."]))
    server.reply_json(openai_completion("Booked."))
    with (
        OpenAIChatModel("m", base_url=server.url + "/v1", api_key="k") as model,
        SessionService(SqliteStore(tmp_path / "t.db")) as service,
    ):
        namespace["chat"] = SessionChat(service, model, tools=[namespace["get_weather"]])
        exec(block_with("docs/chat.md", "for event in chat.stream("), namespace)
        out = capsys.readouterr().out
        assert "[get_weather -> Rome: 18 degrees C, clear]" in out
        assert "Rome is sunny." in out and "(84 input tokens)" in out  # two calls of 42
        exec(block_with("docs/chat.md", 'request_id="req-7f3a"'), namespace)
        assert namespace["turn"].text == "Booked."
        exec(block_with("docs/chat.md", 'request_id="req-7f3a"'), namespace)
        assert namespace["turn"].replayed and len(server.requests) == 3


def test_the_tool_timeout_example(server, tmp_path):
    namespace = {}
    first = block_with("docs/chat.md", "def get_weather")
    exec(first.split("model = OpenAIChatModel")[0], namespace)
    with (
        OpenAIChatModel("m", base_url=server.url + "/v1", api_key="k") as model,
        SessionService(SqliteStore(tmp_path / "t.db")) as service,
    ):
        namespace.update(service=service, model=model)
        exec(block_with("docs/chat.md", "tool_timeout=10"), namespace)
        chat = namespace["chat"]
        assert chat.tool_timeout == 10 and chat.tools["slow_weather"].timeout == 30


def test_the_mcp_example_runs_the_time_server_from_pypi(server, tmp_path, capsys, monkeypatch):
    import json
    import threading

    monkeypatch.chdir(tmp_path)
    code = block_with("docs/chat.md", "mcp_server_time").replace(OLLAMA, server.url + "/v1")
    assert server.url in code
    asked = ("call_1", "clock_get_current_time", '{"timezone": "Asia/Tokyo"}')
    server.reply_json(openai_completion(None, [asked]))
    server.reply_json(openai_completion("It is evening in Tokyo."))
    exec(code, {})
    named, said = capsys.readouterr().out.strip().rsplit("\n", 1)
    tool, content = named.split(" ", 1)  # the tool's JSON answer, over several lines
    assert tool == "clock_get_current_time" and json.loads(content)["timezone"] == "Asia/Tokyo"
    assert said == "It is evening in Tokyo."
    offered = {t["function"]["name"] for t in server.requests[0].body["tools"]}
    assert {"clock_get_current_time", "clock_convert_time"} <= offered
    sent = server.requests[1].body["messages"][-1]
    assert sent["role"] == "tool" and json.loads(sent["content"])["timezone"] == "Asia/Tokyo"
    assert not [t for t in threading.enumerate() if t.name == "turnlog-mcp"]  # closed


def noise_png(width: int, height: int) -> bytes:
    """A valid RGB PNG of random pixels, stored uncompressed (so over 16 KiB stays over)."""
    import os
    import struct
    import zlib

    rows = b"".join(b"\0" + os.urandom(3 * width) for _ in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 0))
        + chunk(b"IEND", b"")
    )


def test_the_vision_example_sends_the_chart_with_both_questions(
    server, tmp_path, capsys, monkeypatch
):
    import base64

    from turnlog import ImagePart

    monkeypatch.chdir(tmp_path)
    chart = noise_png(64, 96)  # 18 KB: over the 16 KiB threshold, so stored apart
    (tmp_path / "chart.png").write_bytes(chart)
    code = block_with("docs/chat.md", "llama3.2-vision").replace(OLLAMA, server.url + "/v1")
    assert server.url in code
    server.reply_json(openai_completion("Requests per hour over a day."))
    server.reply_json(openai_completion("At noon."))
    exec(code, {})
    assert capsys.readouterr().out.splitlines() == ["Requests per hour over a day.", "At noon."]
    url = "data:image/png;base64," + base64.b64encode(chart).decode()
    for request in server.requests:  # both questions carry the chart, from the store
        user = next(m for m in request.body["messages"] if m["role"] == "user")
        kinds = [p["type"] for p in user["content"]]
        assert kinds == ["text", "image_url"]
        assert user["content"][1]["image_url"]["url"] == url
    assert len(server.requests) == 2
    with SessionService(SqliteStore(tmp_path / "turnlog.db")) as service:
        (first, *_) = service.events("user-42")
        part = first.message.parts[1]
        assert isinstance(part, ImagePart) and part.data is None and part.ref is not None
        assert (part.width, part.height, part.filename) == (64, 96, "chart.png")
        assert service.attachment("user-42", part.ref) == chart
