"""Tools from MCP servers (turnlog.mcp): real servers, started by the tests.

- tests/mcp_servers/toolbox.py, written with the SDK's server API, over stdio (a subprocess)
  and over streamable HTTP (its app under uvicorn on a free loopback port);
- `mcp-server-time`, the MCP project's time server from PyPI, over stdio.

Starting a Python MCP server costs about two seconds of CPU (the SDK's imports), so the stdio
toolbox is started once for the module and its tests run in file order: the list-change test
adds a tool, the crash test (last) restarts the server and closes it.
"""

import asyncio
import base64
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
import uvicorn
from mcp_types import AudioContent, CallToolResult, ImageContent, TextContent

from mcp_servers import toolbox
from turnlog import (
    AsyncSessionChat,
    AsyncSessionService,
    AudioPart,
    FilePart,
    ImagePart,
    InvalidInput,
    MemoryStore,
    Message,
    ProviderPart,
    SessionChat,
    SessionService,
    TextPart,
    ToolCall,
)
from turnlog.mcp import AsyncioMCPTools, MCPServer, MCPTools, tool_result
from turnlog.stores.memory_async import AsyncMemoryStore
from turnlog.testing import AsyncScriptedChatModel, ScriptedChatModel

TOOLBOX = str(Path(__file__).parent / "mcp_servers" / "toolbox.py")
TOOLBOX_TOOLS = {"echo", "picture", "documents", "link", "fail", "slow", "pid", "crash", "grow"}


def call(name, arguments=None, call_id="c1"):
    return ToolCall(call_id, name, json.dumps(arguments or {}))


def mcp_threads():
    return [t for t in threading.enumerate() if t.name == "turnlog-mcp"]


@pytest.fixture(scope="module")
def stdio_tools():
    tools = MCPTools([MCPServer.stdio(sys.executable, [TOOLBOX], name="toolbox")])
    yield tools
    tools.close()


@pytest.fixture(scope="module")
def http_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = toolbox.build().streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(20)


# -- over stdio ---------------------------------------------------------------------------------


def test_stdio_lists_the_tools_with_their_schemas(stdio_tools):
    references = {r.name: r for r in stdio_tools.references()}
    assert set(references) == TOOLBOX_TOOLS
    echo = references["echo"]
    assert echo.description == "Say the text back."
    assert echo.parameters["type"] == "object"
    assert echo.parameters["required"] == ["text"]
    assert echo.parameters["properties"]["text"]["type"] == "string"
    # cached: an unchanged list is the same objects (tool search caches by them)
    again = stdio_tools.references()
    assert [id(r) for r in again] == [id(references[r.name]) for r in again]


def test_results_become_text_images_files_and_errors(stdio_tools):
    echoed = stdio_tools.call(call("echo", {"text": "hello"}))
    assert (echoed.call_id, echoed.name, echoed.content, echoed.is_error) == (
        "c1",
        "echo",
        "hello",
        False,
    )
    assert echoed.parts == ()

    picture = stdio_tools.call(call("picture"))
    assert picture.content == "a red rectangle"
    text, image = picture.parts
    assert text == TextPart("a red rectangle")
    assert isinstance(image, ImagePart)
    assert (image.media_type, image.data) == ("image/png", toolbox.PNG)

    documents = stdio_tools.call(call("documents"))
    notes, agenda = documents.parts
    assert notes == TextPart(f"[resource file:///notes.txt]\n{toolbox.NOTES}")
    assert agenda == FilePart("application/pdf", data=toolbox.PDF, name="agenda.pdf")

    link = stdio_tools.call(call("link"))
    said, kept = link.parts
    assert said == TextPart(
        "[resource link file:///reports/q3.csv: q3.csv - Q3 figures (text/csv)]"
    )
    assert isinstance(kept, ProviderPart) and (kept.provider, kept.kind) == ("mcp", "resource_link")
    assert kept.data["uri"] == "file:///reports/q3.csv"

    failed = stdio_tools.call(call("fail"))
    assert failed.is_error and "the disk is full" in failed.content


def test_bad_arguments_and_unknown_tools_are_error_results(stdio_tools):
    assert stdio_tools.call(ToolCall("c1", "echo", "{not json")).is_error
    assert stdio_tools.call(ToolCall("c1", "echo", "[1]")).is_error
    refused = stdio_tools.call(call("echo", {"wrong": 1}))  # the server checks the schema
    assert refused.is_error
    unknown = stdio_tools.call(call("nope"), others=["local_tool"])
    assert unknown.is_error
    assert "'nope'" in unknown.content and "local_tool" in unknown.content
    assert "echo" in unknown.content


def test_a_slow_call_times_out_and_the_session_stays(stdio_tools):
    before = stdio_tools.call(call("pid")).content
    started = time.monotonic()
    slow = stdio_tools.call(call("slow", {"seconds": 30}), timeout=0.5)
    assert time.monotonic() - started < 10
    assert slow.is_error and "timed out after 0.5 s" in slow.content
    assert stdio_tools.call(call("pid")).content == before  # the same process answers


def test_the_server_s_timeout_comes_before_the_runner_s():
    server = MCPServer.stdio(sys.executable, [TOOLBOX], timeout=0.25)
    assert server.timeout == 0.25
    with pytest.raises(InvalidInput):
        MCPServer.stdio(sys.executable, [TOOLBOX], timeout=0)


def test_a_tool_list_change_is_picked_up(stdio_tools):
    assert "extra" not in {r.name for r in stdio_tools.references()}
    assert stdio_tools.call(call("grow")).content == "added extra"
    deadline = time.monotonic() + 10
    while "extra" not in {r.name for r in stdio_tools.references()}:
        assert time.monotonic() < deadline, "the change notification was not acted on"
        time.sleep(0.05)
    assert stdio_tools.call(call("extra", {"x": 21})).content == "42"


def test_a_server_that_dies_mid_call_gives_an_error_and_the_next_call_restarts_it(stdio_tools):
    first = int(stdio_tools.call(call("pid")).content)
    crashed = stdio_tools.call(call("crash"))
    assert crashed.is_error and "closed the connection" in crashed.content
    second = int(stdio_tools.call(call("pid")).content)  # started again
    assert second != first
    assert "extra" not in {r.name for r in stdio_tools.references()}  # the new process's list
    stdio_tools.close()
    assert not mcp_threads() or all(t is not threading.current_thread() for t in mcp_threads())
    with pytest.raises(ProcessLookupError):
        os.kill(second, 0)  # closing stopped the server


# -- the turn runner ----------------------------------------------------------------------------


def test_a_turn_calls_an_mcp_tool_and_the_image_is_stored_and_sent_back(http_url):
    model = ScriptedChatModel([Message.assistant(None, [call("picture")]), "A red rectangle."])
    threads = len(mcp_threads())

    def word_count(text: str) -> int:
        """Count the words."""
        return len(text.split())

    with (
        SessionService(MemoryStore()) as service,
        SessionChat(service, model, tools=[word_count], mcp=[MCPServer.http(http_url)]) as chat,
    ):
        turn = chat.send("s1", "What does the picture show?")
        assert turn.text == "A red rectangle."
        offered = [t.name for t in model.tools[0]]
        assert offered[0] == "word_count" and set(offered[1:]) == TOOLBOX_TOOLS
        [stored] = [e for e in service.events("s1") if e.role == "tool"]
        [result] = stored.message.tool_results
        assert result.name == "picture" and result.content == "a red rectangle"
        assert result.parts[1] == ImagePart("image/png", data=toolbox.PNG)
        sent = model.calls[1][-1].tool_results[0]
        assert sent.parts[1] == ImagePart("image/png", data=toolbox.PNG)
        assert len(mcp_threads()) == threads + 1
    assert len(mcp_threads()) == threads  # leaving `with` closed the sessions


def test_local_tools_keep_their_names_and_a_prefix_separates(http_url, caplog):
    def echo(text: str) -> str:
        """The local echo."""
        return f"local: {text}"

    model = ScriptedChatModel(
        [
            Message.assistant(
                None, [call("echo", {"text": "hi"}, "a"), call("box_echo", {"text": "hi"}, "b")]
            ),
            "ok",
        ]
    )
    servers = [MCPServer.http(http_url), MCPServer.http(http_url, prefix="box_")]
    with (
        caplog.at_level(logging.WARNING, logger="turnlog.mcp"),
        SessionService(MemoryStore()) as service,
        SessionChat(service, model, tools=[echo], mcp=servers) as chat,
    ):
        turn = chat.send("s1", "echo")
    names = [t.name for t in model.tools[0]]
    assert names.count("echo") == 1 and "box_echo" in names and "box_picture" in names
    assert [r.result.content for r in turn.tool_runs] == ["local: hi", "hi"]
    assert any("'echo' is left out" in r.getMessage() for r in caplog.records)


def test_tool_search_finds_mcp_tools(http_url):
    from turnlog.toolsearch import ToolSearch

    model = ScriptedChatModel(
        [
            Message.assistant(None, [call("tool_search", {"query": "png picture caption"})]),
            Message.assistant(None, [call("picture", {}, "c2")]),
            "found it",
        ]
    )
    with SessionService(MemoryStore()) as service:
        search = ToolSearch(service=service)
        with SessionChat(
            service, model, mcp=[MCPServer.http(http_url)], tool_search=search
        ) as chat:
            turn = chat.send("s1", "show me the picture")
    assert [t.name for t in model.tools[0]] == ["tool_search"]
    assert "picture" in {t.name for t in model.tools[1]}  # found, then offered
    assert turn.tool_runs[1].result.parts[1] == ImagePart("image/png", data=toolbox.PNG)


def test_the_async_runner_runs_mcp_calls_at_once(http_url):
    async def main():
        model = AsyncScriptedChatModel(
            [
                Message.assistant(
                    None, [call("slow", {"seconds": 0.5}, "a"), call("slow", {"seconds": 0.5}, "b")]
                ),
                Message.assistant(None, [call("documents", {}, "c")]),
                "done",
            ]
        )
        async with (
            AsyncSessionService(AsyncMemoryStore()) as service,
            AsyncSessionChat(service, model, mcp=[MCPServer.http(http_url)]) as chat,
        ):
            return await chat.send("s1", "go")

    threads = len(mcp_threads())
    turn = asyncio.run(main())
    assert len(mcp_threads()) == threads  # leaving `async with` closed the sessions
    a, b = (json.loads(r.result.content) for r in turn.tool_runs[:2])
    assert a["start"] < b["end"] and b["start"] < a["end"]  # the two calls ran together
    assert turn.tool_runs[2].result.parts[1] == FilePart(
        "application/pdf", data=toolbox.PDF, name="agenda.pdf"
    )


def test_the_runner_s_tool_timeout_bounds_mcp_calls(http_url):
    model = ScriptedChatModel([Message.assistant(None, [call("slow", {"seconds": 30})]), "ok"])
    with (
        SessionService(MemoryStore()) as service,
        SessionChat(service, model, mcp=[MCPServer.http(http_url)], tool_timeout=0.3) as chat,
    ):
        turn = chat.send("s1", "go")
    [run] = turn.tool_runs
    assert run.result.is_error and "timed out after 0.3 s" in run.result.content


def test_the_asyncio_tools_work_from_two_event_loops(http_url):
    tools = AsyncioMCPTools([MCPServer.http(http_url)])

    async def echo(text):
        return (await tools.call(call("echo", {"text": text}))).content

    assert asyncio.run(echo("one")) == "one"
    assert asyncio.run(echo("two")) == "two"  # another loop: the sessions live on their own
    asyncio.run(tools.aclose())


# -- servers that cannot be reached -------------------------------------------------------------


def test_a_server_that_cannot_start_is_left_out_and_its_calls_fail(caplog, tmp_path):
    missing = str(tmp_path / "no-such-server")
    with (
        caplog.at_level(logging.WARNING, logger="turnlog.mcp"),
        MCPTools([MCPServer.stdio(missing)]) as tools,
    ):
        assert tools.references() == []
        assert any("cannot be reached" in r.getMessage() for r in caplog.records)
        failed = tools.call(call("anything"))
    assert failed.is_error and "no tool named 'anything'" in failed.content


def test_an_http_server_that_is_down_gives_an_error_result(http_url):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with MCPTools(
        [MCPServer.http(http_url), MCPServer.http(f"http://127.0.0.1:{port}/mcp", prefix="down_")]
    ) as tools:
        names = {r.name for r in tools.references()}
        assert names == TOOLBOX_TOOLS  # the reachable server's tools only
        assert tools.call(call("echo", {"text": "up"})).content == "up"


# -- the mapping and the descriptions, alone ------------------------------------------------------


def test_blocks_no_part_holds_are_kept_and_structured_content_is_read():
    bad = ImageContent(data="not base64!", mime_type="image/png")
    kept = tool_result(call("t"), CallToolResult(content=[bad]))
    [part] = kept.parts
    assert part == ProviderPart(
        "mcp", "image", {"type": "image", "data": "not base64!", "mimeType": "image/png"}
    )
    two = tool_result(
        call("t"), CallToolResult(content=[TextContent(text="a"), TextContent(text="b")])
    )
    assert two.content == "a\nb" and two.parts == ()
    structured = tool_result(call("t"), CallToolResult(content=[], structured_content={"n": 1}))
    assert json.loads(structured.content) == {"n": 1}
    failed = tool_result(call("t"), CallToolResult(content=[], is_error=True))
    assert failed.is_error and failed.content
    wav = b"RIFF\x24\x00\x00\x00WAVEfmt "
    clip = AudioContent(data=base64.b64encode(wav).decode(), mime_type="audio/wav")
    heard = tool_result(call("t"), CallToolResult(content=[clip]))
    assert heard.parts == (AudioPart("audio/wav", data=wav),)


def test_server_descriptions_are_checked():
    assert MCPServer.stdio("python", ["-m", "x"]).name == "python -m x"
    assert MCPServer.http("http://h/mcp?k=1").name == "http://h/mcp"
    for bad in (
        lambda: MCPServer.stdio(""),
        lambda: MCPServer.stdio("python", "-m x"),
        lambda: MCPServer.stdio("python", env={"A": 1}),
        lambda: MCPServer.http("ftp://h"),
        lambda: MCPServer.http("http://h", prefix="a b"),
        lambda: MCPServer.http("http://h", connect_timeout=-1),
        lambda: SessionChat(
            SessionService(MemoryStore()), ScriptedChatModel(["x"]), mcp=["python"]
        ),
    ):
        with pytest.raises(InvalidInput):
            bad()


def test_without_the_sdk_the_runner_says_which_extra_to_install():
    script = textwrap.dedent(
        """
        import sys
        from importlib.abc import MetaPathFinder

        class NoMCP(MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("mcp", "mcp_types"):
                    raise ImportError(f"No module named {name!r}", name=name)

        sys.meta_path.insert(0, NoMCP())
        from turnlog import MemoryStore, SessionChat, SessionService
        from turnlog.mcp import MCPServer
        from turnlog.testing import ScriptedChatModel

        service = SessionService(MemoryStore())
        SessionChat(service, ScriptedChatModel(["hi"]))  # no servers: no SDK needed
        try:
            SessionChat(service, ScriptedChatModel(["hi"]), mcp=[MCPServer.stdio("x")])
        except ImportError as exc:
            print(exc)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "pip install 'turnlog[mcp]'" in done.stdout


# -- a third-party server: mcp-server-time from PyPI ----------------------------------------------


def test_the_time_server_from_pypi_lists_and_answers():
    with MCPTools([MCPServer.stdio(sys.executable, ["-m", "mcp_server_time"])]) as tools:
        references = {r.name: r for r in tools.references()}
        assert {"get_current_time", "convert_time"} <= set(references)
        schema = references["get_current_time"].parameters
        assert schema["type"] == "object" and "timezone" in schema["properties"]
        assert "timezone" in schema.get("required", [])
        result = tools.call(call("get_current_time", {"timezone": "UTC"}))
        assert not result.is_error
        answer = json.loads(result.content)
        assert answer["timezone"] == "UTC"
        assert datetime.fromisoformat(answer["datetime"]).utcoffset().total_seconds() == 0
        bad = tools.call(call("get_current_time", {"timezone": "Not/AZone"}))
        assert bad.is_error
