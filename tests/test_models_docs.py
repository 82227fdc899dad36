"""docs/models.md: its examples run (the streaming loop against the real local server)."""

import re
from pathlib import Path

from model_servers import ScriptedServer, openai_chunks
from turnlog import Message, SessionService
from turnlog.models import AsyncChatModelAdapter, ChatModelAdapter, OpenAIChatModel

DOC = (Path(__file__).parent.parent / "docs" / "models.md").read_text("utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


def block_with(text):
    [found] = [b for b in BLOCKS if text in b]
    return found


def test_the_streaming_example_appends_the_streamed_reply(capsys):
    server = ScriptedServer()
    server.reply_sse(openai_chunks(["Hel", "lo!"]))
    try:
        with (
            OpenAIChatModel("m", base_url=server.url + "/v1", api_key="k") as model,
            SessionService() as service,
        ):
            session_id = service.create().id
            service.append_message(session_id, Message.user("hi"))
            namespace = {
                "model": model,
                "messages": service.view_messages(session_id),
                "service": service,
                "session_id": session_id,
            }
            exec(block_with("for event in model.stream(messages)"), namespace)
            assert service.view_messages(session_id)[-1] == Message.assistant("Hello!")
    finally:
        server.close()
    assert capsys.readouterr().out == "Hello!"


def test_the_local_server_examples_build_models_without_io():
    namespace = {"OpenAIChatModel": OpenAIChatModel}
    exec(block_with("localhost:11434"), namespace)
    assert len([b for b in BLOCKS if "localhost:11434" in b]) == 1


def test_the_options_example_and_the_protocols(monkeypatch):
    from turnlog.models import AnthropicChatModel, AsyncAnthropicChatModel, AsyncOpenAIChatModel

    monkeypatch.setenv("OPENAI_API_KEY", "k")  # the keys come from the environment
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    namespace = {"OpenAIChatModel": OpenAIChatModel, "AnthropicChatModel": AnthropicChatModel}
    exec(block_with("options={"), namespace)
    exec(block_with("ChatModelSummarizer(OpenAIChatModel"), namespace)
    model = OpenAIChatModel("m", api_key="k", options={"temperature": 0.2})
    assert isinstance(model, ChatModelAdapter)
    assert isinstance(AnthropicChatModel("m", api_key="k"), ChatModelAdapter)
    assert isinstance(AsyncOpenAIChatModel("m", api_key="k"), AsyncChatModelAdapter)
    assert isinstance(AsyncAnthropicChatModel("m", api_key="k"), AsyncChatModelAdapter)


def test_the_llama_cpp_python_example_sends_tool_choice_auto():
    from model_servers import openai_completion
    from turnlog.toolsearch.base import ToolReference

    server = ScriptedServer()
    server.reply_json(openai_completion("ok"))
    try:
        code = block_with("llama-cpp-python's server").replace("http://localhost:8000", server.url)
        namespace = {"OpenAIChatModel": OpenAIChatModel}
        exec(code, namespace)
        with namespace["local"] as local:
            tool = ToolReference("f", "A tool.", {"type": "object", "properties": {}})
            local.respond([Message.user("hi")], [tool])
        body = server.last_body()
        assert body["tool_choice"] == "auto" and body["tools"][0]["function"]["name"] == "f"
    finally:
        server.close()


def test_the_responses_example_runs_a_tool_loop_with_reasoning(monkeypatch, tmp_path, capsys):
    from model_servers import out_call, out_message, out_reasoning, responses_reply

    server = ScriptedServer()
    thinking = out_reasoning("rs_1", ["**Weather**\n\nLook it up."], "gAAAAB-enc")
    server.reply_json(
        responses_reply([thinking, out_call("call_1", "get_weather", '{"city":"Oslo"}')])
    )
    server.reply_json(responses_reply([out_message("Clear and 18C in Oslo.")], response_id="r2"))
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.chdir(tmp_path)  # the example's SessionService() writes turnlog.db here
    try:
        exec(block_with("OpenAIResponsesModel("), {})
    finally:
        server.close()
    [printed] = re.findall(r"prints .*?\n\n```\n(.*?)```", DOC, re.S)
    assert capsys.readouterr().out == printed
    first, second = (r.body for r in server.requests)
    assert first["reasoning"] == {"effort": "low", "summary": "auto"}
    assert second["input"][1] == thinking  # sent back as it came, before its call


def test_the_gemini_example_runs_a_tool_loop_with_signatures(monkeypatch, tmp_path, capsys):
    from gemini_server import GeminiServer, call, gemini_reply, signature, text, thought
    from test_models_gemini import decoded

    server = GeminiServer()
    issued = [
        thought("The user wants Oslo's weather.", signature(1)),
        call("get_weather", {"city": "Oslo"}, signature(2)),
    ]
    server.reply_json(gemini_reply(issued))
    server.reply_json(gemini_reply([text("Clear and 18C in Oslo.")]))
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.url)
    monkeypatch.setenv("GEMINI_API_KEY", "g-test")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # the example's SessionService() writes turnlog.db here
    try:
        exec(block_with("GeminiChatModel("), {})
    finally:
        server.close()
    [shown] = re.findall(r"The output \(.*?\n\n```\n(.*?)```", DOC, re.S)
    assert capsys.readouterr().out == shown
    assert server.refusals == []
    first, second = server.body(0), server.body(1)
    assert first["generationConfig"]["thinkingConfig"] == {"includeThoughts": True}
    assert decoded(second["contents"][1]["parts"]) == decoded(issued)  # back on their parts
