"""ChatModelSummarizer: the files section and metadata, failures of the model call, the token
cap. Through the service in its 4 modes (the async ones await an async model)."""

import asyncio
import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_summarizer import add, answer, compact, prompt_of, question, scripted, turns
from turnlog import (
    CharCounter,
    ChatModelSummarizer,
    CompactionRequest,
    CompactionWindow,
    FileOperations,
    InvalidInput,
    Message,
    O200kCounter,
    Session,
    SessionEvent,
    SummaryRequest,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
    event_text,
)
from turnlog.compaction._budget import CUT_MARK, turn_tokens
from turnlog.compaction.files import FILES_METADATA_KEY
from turnlog.compaction.summary import DEFAULT_SHADOW_PROMPT
from turnlog.stores.base import utc_now
from turnlog.testing import ScriptedChatModel


def tool_turn(n, name, path):
    """A turn whose assistant calls `name` on `path`, gets a result and concludes."""
    call = ToolCall(f"c{n}", name, json.dumps({"path": path}))
    return [
        Message.user(f"question {n}"),
        Message.assistant(None, [call]),
        Message.tool(ToolResult(f"c{n}", name, "ok")),
        Message.assistant(f"answer {n}"),
    ]


def files_of(event):
    return event.message.metadata.get(FILES_METADATA_KEY)


def test_the_prompt_lists_the_files_of_the_covered_events(service):
    sid = service.create().id
    add(
        service,
        sid,
        *tool_turn(1, "read_file", "src/a.py"),
        *tool_turn(2, "edit_file", "src/b.py"),
        *tool_turn(3, "write_file", "preserved.py"),  # stays in the view: not listed
    )
    model = scripted(service, ["summary"])

    compact(service, sid, ChatModelSummarizer(model))

    _, user = prompt_of(model)
    files = user.split("<files>\n")[1].split("\n</files>")[0]
    assert files == "Files modified:\n- src/b.py\nFiles read:\n- src/a.py"
    assert "preserved.py" not in files
    assert user.index("</conversation>") < user.index("<files>") < user.index("Write the")


def test_the_files_are_stored_in_the_summary_metadata(service):
    sid = service.create().id
    add(service, sid, *tool_turn(1, "read_file", "a.py"), *tool_turn(2, "edit_file", "b.py"))
    model = scripted(service, ["summary"])

    result = compact(service, sid, ChatModelSummarizer(model))

    shadow, summary = service.events(sid)[-2:]  # as the store gives them back
    assert files_of(summary) == {"read": ["a.py"], "modified": []}
    assert shadow.message.metadata == {}
    assert result.summary[-1].metadata == summary.message.metadata
    assert summary.message.text == "summary"  # the model's text, untouched


def test_the_files_survive_any_number_of_passes_when_the_model_drops_them(service):
    sid = service.create().id
    add(service, sid, *tool_turn(1, "read_file", "first.py"), *turns(2))
    model = scripted(service, ["a summary that names no file"])
    summarizer = ChatModelSummarizer(model)
    compact(service, sid, summarizer)
    for n in range(3, 9):
        name = "edit_file" if n == 5 else "read_file"
        path = "first.py" if n == 5 else f"file{n}.py"
        add(service, sid, *tool_turn(n, name, path))
        compact(service, sid, summarizer)

    summary = service.view(sid)[1]
    assert summary.synthetic
    expected = {"read": [f"file{n}.py" for n in (3, 4, 6, 7)], "modified": ["first.py"]}
    assert files_of(summary) == expected
    _, user = prompt_of(model)
    assert "first.py" in user.split("<files>")[1]  # the last pass was told about the first file
    assert "- file7.py" in user and "- file8.py" not in user  # turn 8 stays in the view


def test_without_file_operations_there_is_no_files_section_nor_metadata(service):
    sid = service.create().id
    add(service, sid, *tool_turn(1, "read_file", "a.py"), *turns(2))
    model = scripted(service, ["s"])
    compact(service, sid, ChatModelSummarizer(model, file_operations=None))
    assert "<files>" not in prompt_of(model)[1]
    assert service.events(sid)[-1].message.metadata == {}


def test_a_conversation_without_files_has_no_files_section(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    model = scripted(service, ["s"])
    compact(service, sid, ChatModelSummarizer(model))
    assert "<files>" not in prompt_of(model)[1]
    assert service.events(sid)[-1].message.metadata == {}


def test_a_custom_file_operations_is_used(service):
    sid = service.create().id
    add(service, sid, *tool_turn(1, "fetch", "x"), *turns(2))
    model = scripted(service, ["s"])
    ops = FileOperations(read_tools={"fetch"})
    compact(service, sid, ChatModelSummarizer(model, file_operations=ops))
    assert files_of(service.events(sid)[-1]) == {"read": ["x"], "modified": []}


def test_file_operations_that_returns_something_else_is_invalid_input(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    log = service.events(sid)
    summarizer = ChatModelSummarizer(scripted(service, ["s"]), file_operations=lambda e: ["a"])
    with pytest.raises(InvalidInput, match="FilesTouched"):
        compact(service, sid, summarizer)
    assert service.events(sid) == log


@pytest.mark.parametrize("ops", [..., "read_file", FileOperations])
def test_a_file_operations_that_cannot_be_called_is_refused_when_built(ops):
    with pytest.raises(InvalidInput, match="file_operations"):
        ChatModelSummarizer(ScriptedChatModel(["s"]), file_operations=ops)


# -- a failing model call -------------------------------------------------------------------


def test_a_raising_model_warns_calls_on_failure_and_propagates(service, caplog):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    log = service.events(sid)
    failures = []
    model = scripted(service, [ConnectionError("model is down")])
    summarizer = ChatModelSummarizer(model, on_failure=failures.append)

    with (
        caplog.at_level(logging.WARNING, logger="turnlog.compaction"),
        pytest.raises(ConnectionError, match="model is down"),
    ):
        compact(service, sid, summarizer)

    assert service.events(sid) == log
    assert len(failures) == 1
    assert failures[0].session.id == sid
    assert [e.message.text for e in failures[0].covered] == [question(1), answer(1)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].name == "turnlog.compaction"
    message = warnings[0].getMessage()
    assert sid in message and "ConnectionError" in message
    assert (
        "model is down" not in message
    )  # an error can quote the prompt: its type only (issue 24, item 7)


def test_a_raising_model_without_on_failure_still_warns(service, caplog):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    model = scripted(service, [RuntimeError("x")])
    with (
        caplog.at_level(logging.WARNING, logger="turnlog.compaction"),
        pytest.raises(RuntimeError),
    ):
        compact(service, sid, ChatModelSummarizer(model))
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


def test_a_plain_function_returning_a_failing_awaitable_warns_and_calls_on_failure():
    failures = []

    async def failing():
        raise TimeoutError("slow")

    summarizer = ChatModelSummarizer(lambda messages: failing(), on_failure=failures.append)
    request = _request(turns(1, 2))
    awaitable = summarizer(request)

    with pytest.raises(TimeoutError):
        asyncio.run(awaitable)
    assert failures == [request]


# -- the token cap --------------------------------------------------------------------------


def test_a_reply_over_the_cap_is_cut_and_the_turn_fits(service, caplog):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    long_reply = " ".join(f"word{i}" for i in range(200))
    model = scripted(service, [long_reply])

    with caplog.at_level(logging.WARNING, logger="turnlog.compaction"):
        result = compact(service, sid, ChatModelSummarizer(model, max_tokens=300))

    text = result.summary[-1].text
    assert text.endswith(CUT_MARK) and text.startswith("word0 word1")
    assert turn_tokens(CharCounter(), DEFAULT_SHADOW_PROMPT, text) <= 300
    assert turn_tokens(CharCounter(), DEFAULT_SHADOW_PROMPT, text) > 290  # cut at the last word
    assert text[: -len(CUT_MARK)] in long_reply and not text[: -len(CUT_MARK)].endswith(" ")
    assert service.events(sid)[-1].message.text == text
    assert any("max_tokens=300" in r.getMessage() for r in caplog.records)
    room = 300 - turn_tokens(CharCounter(), DEFAULT_SHADOW_PROMPT, "")
    assert f"Keep it under {room} tokens." in prompt_of(model)[1]


def test_a_reply_under_the_cap_is_kept_whole(service, caplog):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    model = scripted(service, ["short"])
    strategy = WindowCompactionStrategy(
        CompactionWindow.last_turns(1),
        summarizer=ChatModelSummarizer(model, max_tokens=300),
        token_counter=CharCounter(),
    )

    def more_than_one_turn(request):  # the written view no longer fires it: no refire warning
        return sum(e.starts_turn for e in request.view) > 1

    with caplog.at_level(logging.WARNING, logger="turnlog.compaction"):
        result = service.compact(sid, more_than_one_turn, strategy)
    assert result.summary[-1].text == "short"
    assert not result.refires
    assert not caplog.records


def test_a_cap_too_small_for_the_shadow_prompt_is_invalid_input_before_the_model_is_asked(
    service,
):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    log = service.events(sid)
    model = scripted(service, ["s"])
    with pytest.raises(InvalidInput, match="max_tokens=20 cannot hold"):
        compact(service, sid, ChatModelSummarizer(model, max_tokens=20))
    assert model.calls == []
    assert service.events(sid) == log


@pytest.mark.parametrize("cap", [0, -5, 1.5, True, "100"])
def test_max_tokens_must_be_a_positive_integer(cap):
    with pytest.raises(InvalidInput, match="max_tokens"):
        ChatModelSummarizer(ScriptedChatModel(["s"]), max_tokens=cap)


def _request(messages, counter=None):
    session = Session("s", utc_now())
    events = tuple(SessionEvent.for_message("s", m) for m in messages)
    return SummaryRequest(session, (), events, (), counter)


conversation = st.lists(
    st.tuples(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=120)),
    min_size=2,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    pairs=conversation,
    budget=st.integers(60, 600),
    cap=st.integers(120, 400),
    reply=st.lists(st.text(min_size=1, max_size=12), min_size=10, max_size=80)
    .map(" ".join)
    .filter(str.strip),
)
def test_property_window_plus_cap_bounds_the_view(pairs, budget, cap, reply):
    """With a token-budget window W and a summary cap C, the view after a pass holds at most
    W + C tokens, when the newest turn alone fits in W."""
    counter = CharCounter()
    session = Session("s", utc_now())
    view = []
    for q, a in pairs:
        view += [SessionEvent.for_message("s", m) for m in (Message.user(q), Message.assistant(a))]
    summarizer = ChatModelSummarizer(ScriptedChatModel([reply]), max_tokens=cap)
    strategy = WindowCompactionStrategy(
        CompactionWindow.token_budget(budget), summarizer=summarizer, token_counter=counter
    )
    result = strategy.compact(CompactionRequest.of(session, view))

    def tokens(events):
        return sum(counter.count(event_text(e)) for e in events)

    newest = view[-2:]
    if not result.unchanged:
        assert tokens(result.summary_events) <= cap
        if tokens(newest) <= budget:
            assert tokens(result.view) <= budget + cap


def test_a_cancelled_async_model_call_is_not_a_failure(caplog):
    failures = []
    started = asyncio.Event()

    class Slow:
        async def complete(self, messages):
            started.set()
            await asyncio.sleep(3600)

    summarizer = ChatModelSummarizer(Slow(), on_failure=failures.append)

    async def main():
        task = asyncio.ensure_future(summarizer(_request(turns(1, 2))))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.WARNING, logger="turnlog.compaction"):
        asyncio.run(main())
    assert failures == [] and caplog.records == []


def test_the_cut_holds_with_the_default_o200k_counter():
    counter = O200kCounter()
    line = "Point {}: the user wants ünïcode, 数字 {} and more.\n"
    reply = "".join(line.format(i, i * 7919) for i in range(300))
    summarizer = ChatModelSummarizer(ScriptedChatModel([reply]), max_tokens=400)
    summary = summarizer(_request(turns(1, 2), counter))[-1]
    assert summary.text.endswith(CUT_MARK)
    assert 350 < turn_tokens(counter, DEFAULT_SHADOW_PROMPT, summary.text) <= 400
