"""`turnlog chat` against real local servers speaking the OpenAI and Anthropic wire formats
(tests/model_servers.py), on real SQLite files; in-process, and once as a subprocess to see the
reply arrive while the stream is still open."""

from __future__ import annotations

import io
import itertools
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from model_servers import (
    ScriptedServer,
    anthropic_error,
    anthropic_events,
    anthropic_message,
    openai_chunks,
    openai_completion,
    openai_error,
)
from turnlog import EventType, SessionService, SqliteStore
from turnlog.chat import NO_REPLY
from turnlog.cli import _parser, main
from turnlog.cli_chat import PLACEHOLDER_KEY, chat_settings, provider_api, usage_line
from turnlog.cli_render import view_tokens
from turnlog.models import Usage

ROOT = Path(__file__).resolve().parent.parent
KEY_VARIABLES = ("TURNLOG_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def _anthropic_events(deltas, tool_uses=(), *, input_tokens=10):
    events = anthropic_events(deltas, tool_uses)
    events[0][1]["message"]["usage"]["input_tokens"] = input_tokens
    return events


def _openai_chunks(deltas, tool_calls=(), *, input_tokens=42):
    usage = {"prompt_tokens": input_tokens, "completion_tokens": 7, "total_tokens": 0}
    return openai_chunks(deltas, tool_calls, usage=usage)


PROVIDERS = {
    # name: (URL suffix, stream builder, reply builder, error builder, key variable)
    "openai": ("/v1", _openai_chunks, openai_completion, openai_error, "OPENAI_API_KEY"),
    "anthropic": (
        "",
        _anthropic_events,
        anthropic_message,
        lambda status, text: anthropic_error("api_error", text),
        "ANTHROPIC_API_KEY",
    ),
}


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in (*KEY_VARIABLES, "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "TURNLOG_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TURNLOG_DB", raising=False)


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request):
    return request.param


def chat(capsys, monkeypatch, db, server, provider, *options, stdin=""):
    """`turnlog --db DB chat ... --provider P --base-url SERVER` in-process, `stdin` piped."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    suffix = PROVIDERS[provider][0]
    argv = ["--db", db, "chat", *options, "--provider", provider]
    argv += ["--base-url", server.url + suffix, "--retries", "0"]
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def stream(server, provider, deltas, *calls, **kw):
    """Script a streamed reply: text deltas, then (call id, tool name, argument pieces)."""
    server.reply_sse(PROVIDERS[provider][1](deltas, list(calls), **kw))


def log_of(db, session_id):
    with SessionService(SqliteStore(db)) as svc:
        return svc.events(session_id), svc.view(session_id)


def sent_key(provider, request):
    """The key a request carried (this anthropic client sends it as a bearer token too)."""
    if "x-api-key" in request.headers:
        return request.headers["x-api-key"]
    return request.headers["authorization"].removeprefix("Bearer ")


def assert_one_error_line(err, text):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("turnlog: error: ") and "Traceback" not in err
    assert text in lines[0], err


# -- a conversation ----------------------------------------------------------------------------


def test_a_piped_conversation_is_streamed_and_stored(
    tmp_path, server, provider, capsys, monkeypatch
):
    db = tmp_path / "c.db"
    monkeypatch.setenv("TURNLOG_API_KEY", "sk-from-env")
    stream(server, provider, ["Hel", "lo, ", "Ada."])
    stream(server, provider, ["Paris ", "is in France."])
    stream(server, provider, ["You asked ", "about Paris."])
    stdin = "hello, I am Ada\nwhere is Paris?\n\nwhat did I ask?\n"  # the blank line is skipped

    code, out, err = chat(
        capsys, monkeypatch, db, server, provider,
        "s1", "--model", "m-test", "--system", "Be brief.", "--usage", stdin=stdin,
    )  # fmt: skip

    assert code == 0, err
    assert err == ""
    replies = ["Hello, Ada.", "Paris is in France.", "You asked about Paris."]
    assert [line for line in out.splitlines() if not line.startswith("[")] == replies
    assert out.count("[usage: ") == 3
    assert "[usage: 10 input tokens" in out or "[usage: 42 input tokens" in out
    # the log, read back from the same file: the system prompt once, then three turns
    log, view = log_of(db, "s1")
    assert [(e.role, e.message.text) for e in log] == [
        ("system", "Be brief."),
        ("user", "hello, I am Ada"),
        ("assistant", "Hello, Ada."),
        ("user", "where is Paris?"),
        ("assistant", "Paris is in France."),
        ("user", "what did I ask?"),
        ("assistant", "You asked about Paris."),
    ]
    assert [e.id for e in view] == [e.id for e in log]  # nothing compacted
    # every request carried the key from the environment, the model, and the whole history
    assert len(server.requests) == 3
    assert {sent_key(provider, r) for r in server.requests} == {"sk-from-env"}
    last = server.requests[-1].body
    assert last["model"] == "m-test" and last["stream"] is True
    texts = str(last["messages"])
    assert "hello, I am Ada" in texts and "Paris is in France." in texts
    system = last["system"] if provider == "anthropic" else last["messages"][0]["content"]
    assert "Be brief." in str(system)


def test_one_message_with_message_option_and_the_session_goes_on(
    tmp_path, server, capsys, monkeypatch
):
    db = tmp_path / "c.db"
    for reply in ("one", "two"):
        stream(server, "openai", [reply])
        code, out, err = chat(
            capsys, monkeypatch, db, server, "openai",
            "s1", "--model", "m", "--message", f"say {reply}", stdin="ignored\n",
        )  # fmt: skip
        assert (code, out, err) == (0, reply + "\n", "")
    log, _ = log_of(db, "s1")
    assert [e.message.text for e in log] == ["say one", "one", "say two", "two"]
    assert len(server.requests[-1].body["messages"]) == 3  # the second run saw the first turn


def test_tool_calls_are_shown_and_answered_with_an_error_result(
    tmp_path, server, provider, capsys, monkeypatch
):
    db = tmp_path / "c.db"
    stream(server, provider, ["Let me look. "], ("call_1", "get_weather", ['{"city"', ': "Oslo"}']))
    stream(server, provider, ["I have no tools."])

    code, out, err = chat(
        capsys, monkeypatch, db, server, provider, "s1", "--model", "m", stdin="weather?\n"
    )

    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Let me look. "
    assert re.fullmatch(r'\[tool get_weather\(\{"city": ?"Oslo"\}\) -> error: .*\]', lines[1])
    assert "no tool named 'get_weather'" in lines[1]
    assert lines[2] == "I have no tools."
    log, _ = log_of(db, "s1")
    assert [e.role for e in log] == ["user", "assistant", "tool", "assistant"]
    assert log[2].message.tool_results[0].is_error


def test_what_the_model_streams_is_printed_safely(tmp_path, server, capsys, monkeypatch):
    stream(server, "openai", ["bold \x1b]0;owned\x07", " line one\nline two"])
    code, out, err = chat(
        capsys, monkeypatch, tmp_path / "c.db", server, "openai", "s", "--model", "m",
        stdin="hi\n",
    )  # fmt: skip
    assert code == 0, err
    assert out == "bold \\x1b]0;owned\\x07 line one\nline two\n"


# -- compaction --------------------------------------------------------------------------------


def test_a_compaction_line_when_the_token_trigger_fires(
    tmp_path, server, provider, capsys, monkeypatch
):
    db = tmp_path / "c.db"
    # The provider reports the prompt's tokens: small after the first turn, large after the
    # second, so the trigger (which trusts the report) fires after the second turn only.
    stream(server, provider, ["First answer."], input_tokens=10)
    stream(server, provider, ["Second answer."], input_tokens=500)
    stream(server, provider, ["Third answer."], input_tokens=20)

    code, out, err = chat(
        capsys, monkeypatch, db, server, provider,
        "s1", "--model", "m", "--if-tokens", "100", "--last-turns", "1",
        stdin="question one\nquestion two\nquestion three\n",
    )  # fmt: skip

    assert code == 0, err
    lines = out.splitlines()
    assert lines[:2] == ["First answer.", "Second answer."]
    found = re.fullmatch(
        r"\[compacted: 2 events left the view; ([\d,]+) -> ([\d,]+) "
        r"(o200k tokens|tokens \(est\.\))\]",
        lines[2],
    )
    assert found, out
    assert lines[3:] == ["Third answer."]  # 20 reported tokens: no second compaction
    log, view = log_of(db, "s1")
    assert [e.type for e in log].count(EventType.COMPACTION) == 1
    # the numbers printed are the view's tokens before and after, as `turnlog show` counts them
    boundary = next(i for i, e in enumerate(log) if e.type == EventType.COMPACTION)
    before, after = (int(n.replace(",", "")) for n in found.groups()[:2])
    assert before == view_tokens(log[:boundary])
    assert after == view_tokens([e for e in view if e.seq < log[boundary].seq])
    assert after < before
    # the model was sent the compacted view on the third turn
    third = str(server.requests[-1].body["messages"])
    assert "question one" not in third and "question two" in third


def test_summarize_and_a_turn_trigger(tmp_path, server, provider, capsys, monkeypatch):
    db = tmp_path / "c.db"
    a1 = "A1: " + "the weather in Oslo is rain and wind." * 8  # longer than its summary
    stream(server, provider, [a1])
    stream(server, provider, ["A2"])
    server.reply_json(PROVIDERS[provider][2]("The user asked q1; the answer was A1."))

    code, out, err = chat(
        capsys, monkeypatch, db, server, provider,
        "s1", "--model", "m", "--if-turns", "1", "--last-turns", "1", "--summarize",
        stdin="q1\nq2\n",
    )  # fmt: skip

    assert code == 0, err
    assert out.splitlines()[:2] == [a1, "A2"]
    assert re.fullmatch(
        r"\[compacted: 2 events left the view, summary of 2 messages; [\d,]+ -> [\d,]+ .*\]",
        out.splitlines()[2],
    ), out
    assert len(out.splitlines()) == 3
    _, view = log_of(db, "s1")
    assert any(e.synthetic and "answer was A1" in (e.message.text or "") for e in view)
    assert "stream" not in server.requests[-1].body  # the summary call is not streamed


def test_a_summary_no_smaller_than_its_turn_is_shown_and_not_written(
    tmp_path, server, provider, capsys, monkeypatch
):
    db = tmp_path / "c.db"
    stream(server, provider, ["A1"])
    stream(server, provider, ["A2"])
    server.reply_json(PROVIDERS[provider][2]("The user asked q1; the answer was A1."))

    code, out, err = chat(
        capsys, monkeypatch, db, server, provider,
        "s1", "--model", "m", "--if-turns", "1", "--last-turns", "1", "--summarize",
        stdin="q1\nq2\n",
    )  # fmt: skip

    assert code == 0, err
    assert out.splitlines()[:2] == ["A1", "A2"]
    assert re.fullmatch(
        r"\[compaction: nothing written, the result would not be smaller than the view "
        r"\([\d,]+ tokens would stand in for [\d,]+\)\]",
        out.splitlines()[2],
    ), out
    log, view = log_of(db, "s1")
    assert not any(e.synthetic for e in log) and len(view) == 4


def test_max_tokens_caps_the_replies_not_the_summary(
    tmp_path, server, provider, capsys, monkeypatch
):
    stream(server, provider, ["A1"])
    stream(server, provider, ["A2"])
    server.reply_json(PROVIDERS[provider][2]("The user asked q1; the answer was A1."))
    code, _, err = chat(
        capsys, monkeypatch, tmp_path / "c.db", server, provider,
        "s1", "--model", "m", "--max-tokens", "7", "--if-turns", "1", "--last-turns", "1",
        "--summarize", stdin="q1\nq2\n",
    )  # fmt: skip
    assert code == 0, err
    *replies, summary = [r.body for r in server.requests]
    assert len(replies) == 2 and "stream" not in summary
    assert all(body["max_tokens"] == 7 for body in replies)
    expected = 4096 if provider == "anthropic" else None  # the default cap, not the reply's
    assert summary.get("max_tokens") == expected
    assert "max_completion_tokens" not in summary


def test_a_failed_compaction_is_a_warning_and_the_reply_stands(
    tmp_path, server, capsys, monkeypatch
):
    db = tmp_path / "c.db"
    stream(server, "openai", ["A1"])
    stream(server, "openai", ["A2"])
    server.reply_json(openai_error(500, "summarizer down"), 500)

    code, out, err = chat(
        capsys, monkeypatch, db, server, "openai",
        "s1", "--model", "m", "--last-turns", "1", "--summarize", stdin="q1\nq2\n",
    )  # fmt: skip

    assert code == 0, err
    assert out == "A1\nA2\n"
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("turnlog: warning: compaction after this turn failed")
    assert "HTTP 500" in lines[0]
    log, _ = log_of(db, "s1")
    assert [e.message.text for e in log] == ["q1", "A1", "q2", "A2"]  # nothing of it written


# -- how full the context window is ------------------------------------------------------------

# a model of each provider that turnlog.models.windows lists, and its window
KNOWN_MODELS = {"openai": ("gpt-4o-mini", "128,000"), "anthropic": ("claude-sonnet-4-5", "200,000")}


def test_a_context_line_after_each_turn_of_a_known_model(
    tmp_path, server, provider, capsys, monkeypatch
):
    name, window = KNOWN_MODELS[provider]
    stream(server, provider, ["First."], input_tokens=64_000)
    stream(server, provider, ["Second."], input_tokens=100_000)

    code, out, err = chat(
        capsys, monkeypatch, tmp_path / "c.db", server, provider,
        "s1", "--model", name, stdin="one\ntwo\n",
    )  # fmt: skip

    assert code == 0, err
    assert err == ""  # 50% and 78% of 128,000 (32% and 50% of 200,000): no warning
    lines = out.splitlines()
    assert [line for line in lines if not line.startswith("[")] == ["First.", "Second."]
    shown = [
        re.fullmatch(r"\[context: ([\d,]+) / ([\d,]+) tokens \((\d+)%\)\]", line) for line in lines
    ]
    assert shown[0] is None and shown[2] is None  # each line follows its turn's reply
    cached = 32 if provider == "anthropic" else 0  # the Messages fixture's cache reads
    for found, reported in ((shown[1], 64_000 + cached), (shown[3], 100_000 + cached)):
        assert found, out
        tokens = int(found[1].replace(",", ""))
        # the report counted the prompt; the reply ("First." or "Second.") adds a few tokens
        assert reported < tokens <= reported + 10
        assert found[2] == window
        assert int(found[3]) == round(100 * tokens / int(window.replace(",", "")))


def test_over_ninety_percent_the_context_line_comes_with_one_warning(
    tmp_path, server, capsys, monkeypatch
):
    stream(server, "openai", ["Full."], input_tokens=120_000)
    stream(server, "openai", ["Fuller."], input_tokens=125_000)

    code, out, err = chat(
        capsys, monkeypatch, tmp_path / "c.db", server, "openai",
        "s1", "--model", "gpt-4o-mini-2024-07-18", stdin="one\ntwo\n",
    )  # fmt: skip

    assert code == 0, err
    assert re.search(r"^\[context: 120,0\d\d / 128,000 tokens \(94%\)\]$", out, re.M), out
    assert re.search(r"^\[context: 125,0\d\d / 128,000 tokens \(98%\)\]$", out, re.M), out
    warnings = err.splitlines()
    assert len(warnings) == 1, err  # once for the session, not once per turn
    assert warnings[0].startswith("turnlog: warning: session 's1' holds 120,0")
    assert "94% of the 128,000-token context window" in warnings[0]


def test_no_context_line_for_a_model_whose_window_is_unknown(tmp_path, server, capsys, monkeypatch):
    stream(server, "openai", ["Hi."], input_tokens=10**9)
    code, out, err = chat(
        capsys, monkeypatch, tmp_path / "c.db", server, "openai",
        "s1", "--model", "llama3.2", stdin="hi\n",
    )  # fmt: skip
    assert (code, out, err) == (0, "Hi.\n", "")


# -- failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 500])
def test_a_provider_error_is_one_line_and_the_chat_goes_on(
    tmp_path, server, provider, status, capsys, monkeypatch
):
    db = tmp_path / "c.db"
    monkeypatch.setenv(PROVIDERS[provider][4], "sk-bad")
    server.reply_json(PROVIDERS[provider][3](status, "nope"), status)
    stream(server, provider, ["Back again."])

    code, out, err = chat(
        capsys, monkeypatch, db, server, provider, "s1", "--model", "m", stdin="q1\nq2\n"
    )

    assert code == 1  # a turn failed
    assert_one_error_line(err, f"HTTP {status}")
    assert "no reply was stored (your message stays in the log)" in err
    if status == 401:
        assert PROVIDERS[provider][4] in err and "api_key=" not in err
    assert "sk-bad" not in err + out
    assert out == "Back again.\n"
    log, _ = log_of(db, "s1")
    assert [(e.role, e.message.text) for e in log] == [
        ("user", "q1"),
        ("assistant", NO_REPLY),  # the failed turn, closed before q2: no two users in a row
        ("user", "q2"),
        ("assistant", "Back again."),
    ]


def test_one_message_that_fails_exits_1(tmp_path, server, capsys, monkeypatch):
    server.reply_json(openai_error(500, "down"), 500)
    code, out, err = chat(
        capsys, monkeypatch, tmp_path / "c.db", server, "openai",
        "s1", "--model", "m", "--message", "hi",
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert_one_error_line(err, "failed on the provider's side (HTTP 500)")


# -- the API key -------------------------------------------------------------------------------


def test_there_is_no_api_key_option(tmp_path, capsys):
    code = main(["--db", str(tmp_path / "c.db"), "chat", "s", "--model", "m", "--api-key", "sk"])
    _, err = capsys.readouterr()
    assert code == 2 and "unrecognized arguments: --api-key sk" in err
    assert "--api-key" not in _parser().format_help()
    assert not (tmp_path / "c.db").exists()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, PLACEHOLDER_KEY),  # a --base-url server that may need no key
        ({"KEY": "sk-provider"}, PLACEHOLDER_KEY),  # the provider's key stays home
        ({"KEY": "sk-provider", "TURNLOG_API_KEY": "sk-turnlog"}, "sk-turnlog"),
        ({"TURNLOG_API_KEY": "sk-turnlog"}, "sk-turnlog"),
    ],
)
def test_a_base_url_server_gets_only_turnlog_api_key(
    tmp_path, server, provider, env, expected, capsys, monkeypatch
):
    for name, value in env.items():
        monkeypatch.setenv(PROVIDERS[provider][4] if name == "KEY" else name, value)
    stream(server, provider, ["ok"])
    code, out, err = chat(
        capsys, monkeypatch, tmp_path / "c.db", server, provider,
        "s", "--model", "m", "--message", "hi",
    )  # fmt: skip
    assert (code, out, err) == (0, "ok\n", "")
    assert sent_key(provider, server.requests[-1]) == expected
    assert "sk-provider" not in repr(server.requests[-1].headers)


def test_a_base_url_from_the_environment_gets_no_provider_key(
    tmp_path, server, provider, capsys, monkeypatch
):
    monkeypatch.setenv(PROVIDERS[provider][4], "sk-provider")
    base_variable = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}[provider]
    monkeypatch.setenv(base_variable, server.url + PROVIDERS[provider][0])
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    stream(server, provider, ["ok"])
    argv = ["--db", str(tmp_path / "c.db"), "chat", "s", "--model", "m", "--provider", provider]
    code = main([*argv, "--message", "hi", "--retries", "0"])
    out, err = capsys.readouterr()
    assert (code, out, err) == (0, "ok\n", "")
    assert sent_key(provider, server.requests[-1]) == PLACEHOLDER_KEY
    assert "sk-provider" not in repr(server.requests[-1].headers)


@pytest.mark.parametrize(
    ("url", "own"),
    [
        ("https://HOST/v1", True),
        ("https://HOST", True),
        ("https://HOST:443/v1", True),
        ("http://HOST/v1", False),  # in clear
        ("https://HOST.evil.example/v1", False),
        ("https://evil.example/HOST/v1", False),
        ("https://HOST@evil.example/v1", False),
        ("https://evil.example/v1?HOST", False),
        ("https://[::1/v1", False),  # not a URL
    ],
)
def test_the_provider_key_goes_only_to_the_provider_host(provider, url, own, monkeypatch):
    host = {"openai": "api.openai.com", "anthropic": "api.anthropic.com"}[provider]
    url = url.replace("HOST", host)
    assert provider_api(provider, url) is own
    monkeypatch.setenv(PROVIDERS[provider][4], "sk-provider")
    args = _parser().parse_args(["chat", "s", "--model", "m", "--provider", provider])
    args.base_url = url
    assert chat_settings(args).api_key == ("sk-provider" if own else PLACEHOLDER_KEY)


def test_the_provider_host_without_a_key_is_refused(provider, capsys, tmp_path):
    host = {"openai": "api.openai.com", "anthropic": "api.anthropic.com"}[provider]
    db = tmp_path / "c.db"
    argv = ["--db", str(db), "chat", "s", "--model", "m", "--provider", provider]
    code = main([*argv, "--base-url", f"https://{host}/v1"])
    _, err = capsys.readouterr()
    assert code == 2
    assert_one_error_line(err, f"no API key: set {PROVIDERS[provider][4]}")
    assert not db.exists()


def test_a_refused_key_says_which_variable_the_server_gets(tmp_path, server, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider")
    server.reply_json(openai_error(401, "bad key"), status=401)
    code, _, err = chat(
        capsys, monkeypatch, tmp_path / "c.db", server, "openai",
        "s", "--model", "m", "--message", "hi",
    )  # fmt: skip
    assert code == 1
    assert_one_error_line(err, "HTTP 401")
    assert "set TURNLOG_API_KEY" in err and "only to api.openai.com" in err


def test_no_key_and_no_base_url_is_refused_before_anything_opens(tmp_path, provider, capsys):
    db = tmp_path / "c.db"
    code = main(["--db", str(db), "chat", "s", "--model", "m", "--provider", provider])
    _, err = capsys.readouterr()
    assert code == 2
    assert_one_error_line(err, f"no API key: set {PROVIDERS[provider][4]}")
    assert not db.exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--if-tokens", "100"], "needs a window to keep"),
        (["--summarize"], "--summarize needs a window"),
        (["--last-turns", "0"], "--last-turns must be above 0"),
        (["--message", "  "], "--message needs some text"),
        (["--retries", "-1"], "--retries must be 0 or more"),
    ],
)
def test_bad_options_are_refused_before_anything_opens(
    tmp_path, options, message, capsys, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk")
    db = tmp_path / "c.db"
    code = main(["--db", str(db), "chat", "s", "--model", "m", *options])
    _, err = capsys.readouterr()
    assert code == 2
    assert_one_error_line(err, message)
    assert not db.exists()


# -- help and the reply as it arrives -------------------------------------------------------


def test_the_help_examples_are_valid_and_the_first_one_runs(tmp_path, server, capsys, monkeypatch):
    assert main(["chat", "--help"]) == 0
    out = capsys.readouterr().out
    examples = [line.strip() for line in out.split("Example:", 1)[1].strip().splitlines()]
    assert len(examples) == 3
    monkeypatch.setenv("OPENAI_API_KEY", "sk")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk")
    for example in examples:
        words = shlex.split(example.split(" | ")[-1])
        assert words[:2] == ["turnlog", "chat"], example
        chat_settings(_parser().parse_args(words[1:]))  # raises on a bad combination
    # the first one (Ollama's address swapped for the test server's) really chats
    words = shlex.split(examples[0])[1:]
    words[words.index("--base-url") + 1] = server.url + "/v1"
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    stream(server, "openai", ["Hi from llama."])
    assert main(["--db", str(tmp_path / "c.db"), *words]) == 0
    assert capsys.readouterr().out == "Hi from llama.\n"
    assert server.requests[-1].body["model"] == "llama3.2"


def test_the_reply_is_printed_while_it_streams(tmp_path, server):
    """As a subprocess: the first delta is on stdout long before the stream ends."""
    server.reply_sse(_openai_chunks(["first ", "second ", "third"]), pause=0.4)
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES}
    env.pop("PYTHONUNBUFFERED", None)  # stdout to a pipe is block-buffered: the command flushes
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "turnlog.cli", "--db", str(tmp_path / "c.db"), "chat", "s"]
    argv += ["--model", "m", "--base-url", server.url + "/v1", "--message", "go"]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        seen = b""
        while b"first" not in seen:
            chunk = os.read(proc.stdout.fileno(), 100)
            assert chunk, proc.stderr.read()
            seen += chunk
        first_at = time.monotonic()
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    ended_at = time.monotonic()
    assert proc.returncode == 0, err
    assert (seen + rest).decode() == "first second third\n"
    # the server sleeps 0.4 s after each of the 4 events that follow the first delta: the
    # first delta was printed before they came
    assert ended_at - first_at > 1.2, (first_at - started, ended_at - started)


def _chat_process(tmp_path, server):
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "turnlog.cli", "--db", str(tmp_path / "c.db"), "chat", "s"]
    argv += ["--model", "m", "--base-url", server.url + "/v1", "--retries", "0"]
    return subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )


def test_ctrl_c_during_a_reply_returns_to_the_next_message(tmp_path, server):
    """SIGINT while a slow real stream is arriving: the reply stops, the note is on a line of
    its own, the chat goes on, and the next request holds no two user messages in a row."""
    server.reply_sse(_openai_chunks(["partial ", *["more "] * 40]), pause=0.3)
    stream(server, "openai", ["second reply"])
    proc = _chat_process(tmp_path, server)
    try:
        proc.stdin.write(b"first\n")
        proc.stdin.flush()
        seen = b""
        while b"partial" not in seen:
            chunk = os.read(proc.stdout.fileno(), 100)
            assert chunk, proc.stderr.read()
            seen += chunk
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(b"again\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = (seen + rest).decode()
    assert proc.returncode == 0, err
    assert out.startswith("partial ") and out.endswith("\nsecond reply\n"), out
    assert "Traceback" not in err.decode()
    assert err.decode().startswith("turnlog: note: reply interrupted (Ctrl-C)"), err
    assert len(server.requests) == 2
    roles = [m["role"] for m in server.requests[1].body["messages"]]
    assert roles[-1] == "user" and roles.count("user") == 2
    assert all(not (a == b == "user") for a, b in itertools.pairwise(roles)), roles
    log, _ = log_of(tmp_path / "c.db", "s")
    assert [e.message.text for e in log][-1] == "second reply"


def _wait_until_reading_stdin(proc, timeout=60.0):
    """Wait until `proc`'s main thread is blocked reading its stdin (Linux's /proc/PID/syscall
    shows `read` on fd 0), so that a signal sent next lands while it waits for a message, not
    while it is still importing on a loaded machine."""
    read = {"x86_64": "0", "aarch64": "63"}[platform.machine()]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        fields = Path(f"/proc/{proc.pid}/syscall").read_text().split()
        if fields[:2] == [read, "0x0"]:
            return
        time.sleep(0.05)
    raise AssertionError("the chat never started reading its stdin")


def test_ctrl_c_while_waiting_for_a_message_ends_the_chat(tmp_path, server):
    proc = _chat_process(tmp_path, server)
    try:
        _wait_until_reading_stdin(proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err.decode()


def test_a_ctrl_c_right_after_a_delta_is_written_still_ends_its_line(monkeypatch):
    """The race CI hit: SIGINT lands after a delta was written but before the printer noted
    it; the interrupted reply's note must still start on a line of its own."""
    from turnlog.cli_chat import _Printer

    class Interrupting(io.StringIO):
        armed = True

        def flush(self):
            if self.armed:
                self.armed = False
                raise KeyboardInterrupt

    out = Interrupting()
    monkeypatch.setattr(sys, "stdout", out)
    printer = _Printer()
    with pytest.raises(KeyboardInterrupt):
        printer.text("partial ")
    printer.end_line()
    assert out.getvalue() == "partial \n"


def test_the_usage_line_shows_the_cached_and_reasoning_shares_only_when_reported():
    assert usage_line(Usage(1234, 56, 1024, 32)) == (
        "[usage: 1,234 input tokens (1,024 cached), 56 output tokens (32 reasoning)]"
    )
    assert usage_line(Usage(None, 5)) == "[usage: ? input tokens, 5 output tokens]"
