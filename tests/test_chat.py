"""The turn runner: `SessionChat` and `AsyncSessionChat` (through a blocking bridge)."""

import asyncio
import concurrent.futures
import json
import logging

import pytest

from chat_harness import KINDS, Harness
from prompt_rules import breaks as violations
from turnlog import (
    CompactionWindow,
    EventType,
    Message,
    O200kCounter,
    TokenCount,
    TokenCountTrigger,
    ToolCall,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.chat_async import NO_REPLY
from turnlog.compaction import ChatModelSummarizer, ExtractiveSummarizer
from turnlog.compaction.reported import USAGE_KEY, prompt_digest
from turnlog.errors import InvalidInput, ModelError, ToolRoundsExceeded
from turnlog.models.base import CACHE_BREAKPOINT_KEY, Usage
from turnlog.parts import ImagePart, TextPart
from turnlog.text import event_text
from turnlog.turns import ChatTurn, ToolRun


@pytest.fixture(params=KINDS)
def harness(request, tmp_path):
    h = Harness(request.param, tmp_path)
    yield h
    h.close()


def call(name, arguments, call_id):
    return ToolCall(call_id, name, json.dumps(arguments))


def calls(*items):
    return Message.assistant(None, [call(*item) for item in items])


def weather(city: str, unit: str = "C") -> dict:
    """Today's weather in a city.

    Args:
        city: the city's name.
        unit: C or F.
    """
    return {"city": city, "temp": 21 if unit == "C" else 70}


async def slow_clock(zone: str) -> str:
    """The time in a zone."""
    return f"12:00 {zone}"


def broken(path: str) -> str:
    """A tool that always fails."""
    raise FileNotFoundError(f"no such file: {path}")


def roles(h, session_id):
    return [m.role for m in log_messages(h, session_id)]


def log_messages(h, session_id):
    return [e.message for e in h.service.events(session_id) if e.message is not None]


def test_a_text_turn_stores_system_user_and_reply_with_the_providers_counts(harness):
    model = harness.model(
        ["Hello!"], usage=lambda messages, tools: Usage(100 + len(messages), 7, 40)
    )
    chat = harness.make(model, system="Be brief.")
    turn = chat.send("s1", "hi")
    assert isinstance(turn, ChatTurn)
    assert turn.text == "Hello!" and not turn.replayed
    assert [m.role for m in log_messages(harness, "s1")] == ["system", "user", "assistant"]
    assert [(m.role, m.text) for m in model.calls[0]] == [("system", "Be brief."), ("user", "hi")]
    assert model.tools == [None]
    reply = harness.service.events("s1")[-1]
    usage = reply.metadata[USAGE_KEY]
    assert usage["input_tokens"] == 102 and usage["output_tokens"] == 7
    assert usage["cached_input_tokens"] == 40 and usage["model"] == "scripted"
    assert usage["stop_reason"] == "stop"
    assert usage["prompt"] == prompt_digest(harness.service.events("s1")[:2])
    assert "reasoning_tokens" not in usage  # stored only when the provider reports it
    assert turn.usage == Usage(102, 7, 40)
    assert [e.id for e in turn.events] == [e.id for e in harness.service.events("s1")]
    # the reply's own count (stored at append, by the service's counter) is kept apart from
    # the provider's report for the whole request
    counter = O200kCounter()
    assert reply.tokens == TokenCount(counter.identity, counter.count(event_text(reply)))
    assert reply.tokens.count not in (usage["input_tokens"], usage["output_tokens"])


def test_the_system_prompt_is_appended_only_when_it_changed(harness):
    model = harness.model(["ok"])
    harness.make(model, system="v1").send("s", "one")
    harness.make(model, system="v1").send("s", "two")
    harness.make(model, system="v2").send("s", "three")
    harness.make(model).send("s", "four")  # no system prompt: the stored one stays
    systems = [m.text for m in log_messages(harness, "s") if m.role == "system"]
    assert systems == ["v1", "v2"]
    assert model.calls[-1][0].text == "v2"
    assert sum(m.role == "system" for m in model.calls[-1]) == 1


def test_tools_run_and_their_results_go_back_to_the_model(harness):
    model = harness.model(
        [
            calls(("weather", {"city": "Oslo"}, "c1"), ("slow_clock", {"zone": "CET"}, "c2")),
            "It is 21 degrees at noon.",
        ]
    )
    chat = harness.make(model, tools=[weather, slow_clock])
    turn = chat.send("s", "weather and time?")
    assert turn.text == "It is 21 degrees at noon."
    offered = {t.name: t for t in model.tools[0]}
    assert set(offered) == {"weather", "slow_clock"}
    schema = offered["weather"].parameters
    assert schema["required"] == ["city"]
    assert schema["properties"]["city"] == {"type": "string", "description": "the city's name."}
    assert offered["weather"].description == "Today's weather in a city."
    tool_message = model.calls[1][-1]
    assert tool_message.role == "tool"
    results = tool_message.tool_results
    assert [r.call_id for r in results] == ["c1", "c2"]
    assert json.loads(results[0].content) == {"city": "Oslo", "temp": 21}
    assert results[1].content == "12:00 CET" and not results[1].is_error
    assert [r.call.id for r in turn.tool_runs] == ["c1", "c2"]
    assert violations(log_messages(harness, "s")) == []


def test_a_failing_tool_bad_arguments_and_an_unknown_tool_become_error_results(harness):
    model = harness.model(
        [
            calls(
                ("broken", {"path": "a.txt"}, "c1"),
                ("weather", {"town": "Oslo"}, "c2"),
                ("weather", {"city": 3}, "c3"),
                ("teleport", {}, "c4"),
            ),
            "Sorry.",
        ]
    )
    turn = harness.make(model, tools=[broken, weather]).send("s", "go")
    assert turn.text == "Sorry."
    results = {r.call_id: r for r in model.calls[1][-1].tool_results}
    assert all(r.is_error for r in results.values())
    assert results["c1"].content == "FileNotFoundError: no such file: a.txt"
    assert "town" in results["c2"].content or "city" in results["c2"].content
    assert "Expected `str`, got `int`" in results["c3"].content
    assert "no tool named 'teleport'" in results["c4"].content
    assert "broken, weather" in results["c4"].content


def test_a_tool_loop_stops_at_max_tool_rounds_with_the_log_intact(harness):
    looping = calls(("weather", {"city": "Oslo"}, "c"))
    model = harness.model([looping])
    chat = harness.make(model, tools=[weather], max_tool_rounds=3)
    with pytest.raises(ToolRoundsExceeded) as caught:
        chat.send("s", "loop forever")
    assert caught.value.max_tool_rounds == 3
    assert len(model.calls) == 4  # 3 rounds answered, the 4th call's tools not run
    messages = log_messages(harness, "s")
    assert violations(messages) == []
    last = messages[-1]
    assert last.role == "tool" and last.tool_results[0].is_error
    assert "not run" in last.tool_results[0].content
    ran = [r for m in messages if m.role == "tool" for r in m.tool_results if not r.is_error]
    assert len(ran) == 3
    # the session goes on with a new turn
    model.replies.append("Done.")
    assert harness.make(model, tools=[weather]).send("s", "stop").text == "Done."


def test_a_retried_request_id_returns_the_stored_turn_without_calling_the_model(harness):
    model = harness.model(["first answer", "second answer"])
    chat = harness.make(model)
    first = chat.send("s", "question", request_id="req-1")
    version = harness.service.version("s")
    again = chat.send("s", "question", request_id="req-1")
    assert again.replayed and again.text == "first answer"
    assert len(model.calls) == 1 and harness.service.version("s") == version
    assert [e.id for e in again.events] == [e.id for e in first.events]
    other = chat.send("s", "question", request_id="req-2")
    assert other.text == "second answer"
    assert [m.role for m in log_messages(harness, "s")] == ["user", "assistant"] * 2


def test_a_request_id_in_another_session_is_another_turn(harness):
    model = harness.model(["a", "b"])
    chat = harness.make(model)
    chat.send("s1", "q", request_id="same")
    assert chat.send("s2", "q", request_id="same").text == "b"
    assert harness.service.version("s2") == 2


class Crash(BaseException):
    """A process dying mid-turn: not an Exception, so no layer turns it into a result."""


def test_a_turn_cut_short_resumes_on_retry_without_doubling_or_rerunning(harness):
    runs = []

    def count(n: int) -> int:
        """Count."""
        runs.append(n)
        if len(runs) == 2:
            raise Crash()
        return n

    model = harness.model(
        [
            calls(("count", {"n": 1}, "c1")),
            calls(("count", {"n": 2}, "c2")),
            "done",
        ]
    )
    chat = harness.make(model, tools=[count])
    with pytest.raises(Crash):
        chat.send("s", "count", request_id="r")
    # stored: user, a0 (c1), t0, a1 (c2) with its call open
    assert [m.role for m in log_messages(harness, "s")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    turn = chat.send("s", "count", request_id="r")
    assert turn.text == "done" and not turn.replayed
    assert runs == [1, 2, 2]  # the unanswered call ran again, the answered one did not
    messages = log_messages(harness, "s")
    assert [m.role for m in messages] == ["user"] + ["assistant", "tool"] * 2 + ["assistant"]
    assert violations(messages) == []
    assert len(model.calls) == 3  # the crashed call was not asked again


def test_a_model_error_mid_turn_keeps_what_was_stored_and_a_retry_finishes(harness):
    model = harness.model(
        [calls(("weather", {"city": "Oslo"}, "c1")), ModelError("openai", 503, "down"), "sunny"]
    )
    chat = harness.make(model, tools=[weather])
    with pytest.raises(ModelError):
        chat.send("s", "weather?", request_id="r")
    assert [m.role for m in log_messages(harness, "s")] == ["user", "assistant", "tool"]
    assert chat.send("s", "weather?", request_id="r").text == "sunny"
    assert [m.role for m in log_messages(harness, "s")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_an_empty_reply_is_a_model_error_and_nothing_is_stored_for_it(harness):
    model = harness.model([Message.assistant("  ")])
    with pytest.raises(ModelError, match="empty reply"):
        harness.make(model).send("s", "hi")
    assert [m.role for m in log_messages(harness, "s")] == ["user"]


def test_streaming_yields_deltas_tool_runs_and_the_turn_last(harness):
    model = harness.model([calls(("weather", {"city": "Rome"}, "c1")), "Warm and sunny in Rome."])
    events = list(harness.make(model, tools=[weather]).stream("s", "Rome?"))
    assert isinstance(events[-1], ChatTurn)
    deltas = [e for e in events if isinstance(e, str)]
    assert len(deltas) > 1 and "".join(deltas) == "Warm and sunny in Rome."
    runs = [e for e in events if isinstance(e, ToolRun)]
    assert [r.call.name for r in runs] == ["weather"]
    assert events.index(runs[0]) < events.index(deltas[0])
    assert log_messages(harness, "s")[-1] == Message.assistant("Warm and sunny in Rome.")


def test_compaction_runs_after_the_turn(harness):
    model = harness.model([f"answer {i}" for i in range(6)])
    chat = harness.make(
        model,
        trigger=TurnCountTrigger(3),
        strategy=WindowCompactionStrategy(CompactionWindow.last_turns(2)),
    )
    turns = [chat.send("s", f"question {i}") for i in range(4)]
    assert [t.compaction.unchanged for t in turns] == [True, True, True, False]
    boundaries = harness.service.events(
        "s", __import__("turnlog").stores.base.EventFilter(event_types=[EventType.COMPACTION])
    )
    assert len(boundaries) == 1
    assert [m.text for m in harness.service.view_messages("s") if m.role == "user"] == [
        "question 2",
        "question 3",
    ]


def test_a_failing_summarizer_is_logged_and_the_reply_stands(harness, caplog):
    summarizer_model = harness.model([RuntimeError("summarizer down")])
    strategy = WindowCompactionStrategy(
        CompactionWindow.last_turns(1), summarizer=ChatModelSummarizer(summarizer_model)
    )
    chat = harness.make(
        harness.model(["one", "two"]), trigger=TurnCountTrigger(1), strategy=strategy
    )
    chat.send("s", "first")
    with caplog.at_level(logging.WARNING, logger="turnlog.chat"):
        turn = chat.send("s", "second")
    assert turn.text == "two" and turn.compaction is None
    assert isinstance(turn.compaction_error, RuntimeError)
    assert any("RuntimeError" in r.getMessage() for r in caplog.records)
    # without the content opt-in the error's text stays out of the logs (issue 24, item 7)
    assert not any("summarizer down" in r.getMessage() for r in caplog.records)
    assert all(e.type == EventType.MESSAGE for e in harness.service.events("s"))


def test_the_stable_prefix_is_marked_for_the_prompt_cache(harness):
    # replies long enough for the summary to be smaller than the turns it covers
    model = harness.model([f"a{i}: " + "it rains in Oslo again. " * 30 for i in range(5)])
    strategy = WindowCompactionStrategy(
        CompactionWindow.last_turns(1), summarizer=ExtractiveSummarizer()
    )
    chat = harness.make(model, system="sys", trigger=TurnCountTrigger(2), strategy=strategy)
    for i in range(4):
        chat.send("s", f"q{i}")
    marked = [
        [i for i, m in enumerate(sent) if m.metadata.get(CACHE_BREAKPOINT_KEY)]
        for sent in model.calls
    ]
    assert marked[0] == [0]  # only the system prompt
    last = model.calls[-1]
    (end,) = marked[-1]
    assert end > 0 and last[end].role == "assistant"  # the summary's reply ends the prefix
    assert last[end + 1].text == "q2"  # the kept turn follows it
    unmarked = harness.make(harness.model(["x"]), system="sys", cache_breakpoint=False)
    unmarked.send("t", "q")
    assert (
        not any(CACHE_BREAKPOINT_KEY in m.metadata for m in unmarked.chat.model.calls[0])
        if (harness.kind == "async")
        else not any(CACHE_BREAKPOINT_KEY in m.metadata for m in unmarked.model.calls[0])
    )


def test_a_pair_that_compacts_every_turn_is_warned_about(harness, caplog):
    """The runner's trigger still fires on the view its pass wrote, which summarized: a WARNING
    names the session and the strategy (a summary each turn), and the turn's result says
    `refires`. A plain window that cuts every turn is flagged but costs no model call, so it
    is not warned about; a roomy trigger is not flagged."""
    model = harness.model(["a long enough answer to fill the view up with words " * 8] * 9)
    summarizing = WindowCompactionStrategy(
        CompactionWindow.last_turns(1), summarizer=ExtractiveSummarizer(max_tokens=60)
    )
    tight = harness.make(model, trigger=TokenCountTrigger(10), strategy=summarizing)
    with caplog.at_level(logging.WARNING, logger="turnlog.compaction"):
        tight.send("s", "q0")
        turn = tight.send("s", "q1")
    assert turn.compaction is not None and turn.compaction.refires
    assert turn.compaction.summary_events
    [warning] = [r for r in caplog.records if "still fires" in r.getMessage()]
    assert "'s'" in warning.getMessage()
    assert "window:last_turns(1)+summary" in warning.getMessage()

    caplog.clear()
    plain = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    cutting = harness.make(model, trigger=TokenCountTrigger(10), strategy=plain)
    with caplog.at_level(logging.WARNING, logger="turnlog.compaction"):
        cutting.send("p", "q0")
        turn = cutting.send("p", "q1")
    assert turn.compaction is not None and turn.compaction.refires
    assert not caplog.records

    roomy = harness.make(
        model,
        trigger=TokenCountTrigger(100),  # two turns are over 100 tokens, one is not
        strategy=WindowCompactionStrategy(CompactionWindow.last_turns(1)),
    )
    with caplog.at_level(logging.WARNING, logger="turnlog.compaction"):
        roomy.send("t", "q0")
        turn = roomy.send("t", "q1")
    assert turn.compaction is not None and not turn.compaction.unchanged
    assert not turn.compaction.refires and not caplog.records


def test_reported_counts_drive_the_token_trigger(harness):
    # the provider reports 1,000 tokens per call whatever is sent: far above any estimate
    model = harness.model(["ok"] * 4, usage=lambda messages, tools: Usage(1_000, 2, 0))
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    chat = harness.make(model, trigger=TokenCountTrigger(900), strategy=strategy)
    chat.send("s", "q0")
    turn = chat.send("s", "q1")
    assert turn.compaction is not None and not turn.compaction.unchanged
    estimate = harness.make(
        harness.model(["ok"] * 4, usage=lambda messages, tools: Usage(1_000, 2, 0)),
        trigger=TokenCountTrigger(900, reported=False),
        strategy=strategy,
    )
    estimate.send("t", "q0")
    assert estimate.send("t", "q1").compaction.unchanged


def test_tool_search_offers_the_search_tool_then_what_it_found(harness):
    def send_invoice(customer: str, amount: float) -> str:
        """Send an invoice to a customer by email."""
        return f"sent {amount} to {customer}"

    def delete_repo(name: str) -> str:
        """Delete a source code repository."""
        return "deleted"

    model = harness.model(
        [
            calls(("tool_search", {"query": "invoice customer email"}, "s1")),
            calls(("send_invoice", {"customer": "ACME", "amount": 10.5}, "c1")),
            "Invoice sent.",
        ]
    )
    chat = harness.make(model, tools=[send_invoice, delete_repo], tool_search=harness.tool_search())
    assert chat.send("s", "bill ACME 10.50").text == "Invoice sent."
    assert [t.name for t in model.tools[0]] == ["tool_search"]
    assert [t.name for t in model.tools[1]] == ["tool_search", "send_invoice"]
    answer = json.loads(model.calls[1][-1].tool_results[0].content)
    assert "send_invoice" in json.dumps(answer)
    assert model.calls[2][-1].tool_results[0].content == "sent 10.5 to ACME"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"trigger": TurnCountTrigger(2)}, "trigger and strategy together"),
        ({"max_tool_rounds": 0}, "max_tool_rounds must be an integer >= 1"),
        ({"retries": -1}, "retries must be"),
        ({"system": "  "}, "system must be"),
        ({"tools": [weather, weather]}, "two tools are named 'weather'"),
        ({"tools": "weather"}, "tools must be a list"),
    ],
)
def test_bad_settings_are_refused(harness, settings, message):
    with pytest.raises(InvalidInput, match=message):
        harness.make(harness.model(["x"]), **settings)


def test_a_model_of_the_other_kind_is_refused(harness):
    from turnlog.testing.fakes import AsyncScriptedChatModel, ScriptedChatModel

    other = AsyncScriptedChatModel if harness.kind == "sync" else ScriptedChatModel
    runner = "AsyncSessionChat" if harness.kind == "sync" else "SessionChat"
    with pytest.raises(InvalidInput, match=f"model goes with {runner}$"):
        harness.make(other(["x"]))


def test_a_service_or_tool_search_of_the_other_kind_is_refused_by_its_name(harness):
    from turnlog.chat import SessionChat
    from turnlog.chat_async import AsyncSessionChat

    model = harness.model(["x"])
    if harness.kind == "sync":
        with pytest.raises(InvalidInput, match="service must be a SessionService, got"):
            SessionChat(harness.service.store, model)
        with pytest.raises(InvalidInput, match="tool_search must be a ToolSearch, got"):
            SessionChat(harness.service, model, tool_search=object())
    else:
        with pytest.raises(InvalidInput, match="service must be an AsyncSessionService, got"):
            AsyncSessionChat(harness.service, model)
        with pytest.raises(InvalidInput, match="tool_search must be an AsyncToolSearch, got"):
            AsyncSessionChat(harness.async_service, model, tool_search=object())


def test_blank_text_and_bad_ids_are_refused_before_anything_is_written(harness):
    chat = harness.make(harness.model(["x"]))
    with pytest.raises(InvalidInput):
        chat.send("s", "   ")
    with pytest.raises(InvalidInput):
        chat.send("", "hi")
    with pytest.raises(InvalidInput):
        chat.send("s", "hi", request_id="")
    with pytest.raises(InvalidInput, match="starts with a user message, got a assistant"):
        chat.send("s", Message.assistant("hi"))
    with pytest.raises(InvalidInput, match="non-blank string or a user Message"):
        chat.send("s", 42)
    assert harness.service.find("s") is None


def test_a_turn_can_start_with_a_user_message_of_parts(harness):
    model = harness.model(["A red square."])
    chat = harness.make(model)
    picture = ImagePart("image/png", data=b"\x89PNG\r\n\x1a\n" + bytes(40))
    turn = chat.send("s", Message.user("What is this?", picture))
    assert turn.text == "A red square."
    (sent,) = model.calls
    assert sent[-1].parts == (TextPart("What is this?"), picture)
    (user,) = [e for e in harness.service.events("s") if e.role == "user"]
    assert user.message == Message.user("What is this?", picture)


def test_a_new_turn_after_one_cut_short_closes_the_calls_it_left_open(harness):
    def hang(n: int) -> int:
        """Hang."""
        raise Crash()

    model = harness.model([calls(("hang", {"n": 1}, "c1"), ("hang", {"n": 2}, "c2")), "fine"])
    chat = harness.make(model, tools=[hang])
    with pytest.raises(Crash):
        chat.send("s", "first")  # no request id: it cannot be resumed
    turn = chat.send("s", "second")
    assert turn.text == "fine"
    messages = log_messages(harness, "s")
    roles = [m.role for m in messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert messages[3].text == NO_REPLY
    closing = messages[2].tool_results
    assert [r.call_id for r in closing] == ["c1", "c2"] and all(r.is_error for r in closing)
    assert "interrupted" in closing[0].content
    assert violations(messages) == []
    assert violations(model.calls[-1]) == []


@pytest.mark.parametrize("how", ["interrupt", "crash"])
def test_a_turn_interrupted_in_the_model_call_is_closed_by_the_next_one(harness, how):
    # Ctrl-C is KeyboardInterrupt in a blocking caller, a cancelled task in an asyncio one
    interrupt = KeyboardInterrupt if harness.kind == "sync" else asyncio.CancelledError
    stop = Crash if how == "crash" else interrupt
    model = harness.model([stop(), "second answer"])
    chat = harness.make(model)
    with pytest.raises((stop, concurrent.futures.CancelledError)):  # the bridge's, for a task
        chat.send("s", "first", request_id="r1")
    assert chat.send("s", "second", request_id="r2").text == "second answer"
    sent = [m.role for m in model.calls[-1]]
    assert sent == ["user", "assistant", "user"]
    assert [m.text for m in log_messages(harness, "s")][1] == NO_REPLY


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_a_blocking_tool_stopping_its_thread_ends_the_turn_not_the_loop(tmp_path, stop):
    from turnlog.tools import ToolInterrupted

    harness = Harness("async", tmp_path)
    try:

        def quit_now(n: int) -> int:
            """Stop."""
            raise stop()

        model = harness.model([calls(("quit_now", {"n": 1}, "c1")), "after"])
        chat = harness.make(model, tools=[quit_now])
        with pytest.raises(ToolInterrupted, match="'quit_now' raised") as caught:
            chat.send("s", "go")
        assert isinstance(caught.value.__cause__, stop)
        assert chat.send("s", "again").text == "after"  # the loop still runs
        closing = log_messages(harness, "s")[2].tool_results
        assert closing[0].call_id == "c1" and closing[0].is_error
    finally:
        harness.close()


def test_a_tool_that_takes_too_long_becomes_a_timed_out_result(harness):
    import threading
    import time

    from turnlog.tools import Tool

    release = threading.Event()

    def hang(n: int) -> int:
        """Hang until released."""
        release.wait(10)
        return n

    async def hang_async(n: int) -> int:
        """Hang for a while."""
        await asyncio.sleep(10)
        return n

    def quick(n: int) -> int:
        """Fast, with a generous timeout of its own."""
        return n * 2

    model = harness.model(
        [
            calls(("hang", {"n": 1}, "c1"), ("hang_async", {"n": 2}, "c2")),
            calls(("quick", {"n": 3}, "c3")),
            "done",
        ]
    )
    tools = [hang, hang_async, Tool.from_function(quick, timeout=30)]
    chat = harness.make(model, tools=tools, tool_timeout=0.2)
    started = time.monotonic()
    try:
        turn = chat.send("s", "go")
    finally:
        release.set()
    assert time.monotonic() - started < 5
    assert turn.text == "done"
    first, second = (r.result for r in turn.tool_runs[:2])
    assert first.is_error and "hang timed out after 0.2 s" in first.content
    assert second.is_error and "hang_async timed out after 0.2 s" in second.content
    assert "outcome is unknown" in first.content
    assert turn.tool_runs[2].result.content == "6"
    assert violations(model.calls[-1]) == []


@pytest.mark.parametrize("bad", [0, -1, True, "5"])
def test_a_bad_tool_timeout_is_refused(harness, bad):
    from turnlog.tools import Tool

    with pytest.raises(InvalidInput, match="tool_timeout must be a positive number"):
        harness.make(harness.model(["x"]), tool_timeout=bad)
    with pytest.raises(InvalidInput, match="timeout must be a positive number"):
        Tool.from_function(weather, timeout=bad)


def test_a_huge_tool_result_is_stored_whole_and_sent_as_a_preview(harness):
    def dump(n: int) -> str:
        """A huge output."""
        return "line of output\n" * n

    model = harness.model([calls(("dump", {"n": 20_000}, "c1")), "big", "next"])
    chat = harness.make(model, tools=[dump], max_tool_result_tokens=1000)
    chat.send("s", "dump it")
    chat.send("s", "and then?")
    stored = next(m for m in log_messages(harness, "s") if m.role == "tool")
    assert stored.tool_results[0].content == "line of output\n" * 20_000  # whole in the log
    for request in model.calls[1:]:  # every later request carries the preview
        [sent] = [m for m in request if m.role == "tool"]
        content = sent.tool_results[0].content
        assert content.startswith("line of output\n")
        assert len(content) < 2000
        assert "300000 characters, about 75000 tokens" in content
        assert "max_tool_result_tokens=1000" in content
        assert violations(request) == []


def test_tool_results_are_sent_whole_under_the_limit_or_without_one(harness):
    def dump(n: int) -> str:
        """A big output."""
        return "x" * n

    model = harness.model([calls(("dump", {"n": 100_000}, "c1")), "big"])
    harness.make(model, tools=[dump], max_tool_result_tokens=None).send("s", "dump it")
    assert model.calls[1][-1].tool_results[0].content == "x" * 100_000
    with pytest.raises(InvalidInput, match="max_tool_result_tokens must be"):
        harness.make(model, max_tool_result_tokens=0)


@pytest.mark.parametrize("at_most_once", [True, False])
def test_at_most_once_a_retry_does_not_run_a_claimed_tool_again(harness, at_most_once):
    from turnlog.chat_async import CLAIM_TYPE

    sent = []

    def pay(amount: int) -> str:
        """Pay once."""
        sent.append(amount)
        if len(sent) == 1:
            raise Crash()  # the process dies after the payment, before its result is stored
        return "paid"

    model = harness.model([calls(("pay", {"amount": 5}, "c1")), "done"])
    chat = harness.make(model, tools=[pay], at_most_once=at_most_once)
    with pytest.raises(Crash):
        chat.send("s", "pay 5", request_id="r1")
    turn = chat.send("s", "pay 5", request_id="r1")
    assert turn.text == "done"
    result = turn.tool_runs[0].result
    claims = [e for e in harness.service.events("s") if e.type == CLAIM_TYPE]
    if at_most_once:
        assert sent == [5] and result.is_error and "outcome unknown" in result.content
        assert len(claims) == 1
    else:
        assert sent == [5, 5] and result.content == "paid" and claims == []
    assert violations(model.calls[-1]) == []


def test_at_most_once_two_callers_with_one_request_id_run_the_tool_once(tmp_path):
    import threading

    harness = Harness("sync", tmp_path)
    ran = []
    both = threading.Barrier(2, timeout=5)

    def pay(amount: int) -> str:
        """Pay once."""
        ran.append(amount)
        return "paid"

    def reply(messages):
        both.wait()  # both callers hold the same view when the model answers
        if messages[-1].role == "tool":
            return Message.assistant("done")
        return calls(("pay", {"amount": 5}, "c1"))

    try:
        model = harness.model([reply] * 4)
        chat = harness.make(model, tools=[pay], at_most_once=True)
        turns, errors = [], []

        def send():
            try:
                turns.append(chat.send("s", "pay 5", request_id="r1"))
            except Exception as exc:  # a typed error is allowed, a second payment is not
                errors.append(exc)

        threads = [threading.Thread(target=send) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert ran == [5]
        assert turns and all(isinstance(e, InvalidInput | ModelError) for e in errors)
    finally:
        harness.close()
