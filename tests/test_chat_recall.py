"""The recall tools of the turn runner (`recall=True`): the model gets back what compaction took
out of its view, through tool results it asked for, over a real SQLite file, on both runners."""

import json

import pytest

from chat_harness import KINDS, Harness
from prompt_rules import breaks
from turnlog import (
    CharCounter,
    CompactionWindow,
    Message,
    SessionService,
    SqliteStore,
    ToolCall,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.chat import SessionChat
from turnlog.errors import InvalidInput
from turnlog.recall_tools import MAX_READ_IDS, events_result, read_arguments, search_arguments
from turnlog.testing.fakes import ScriptedChatModel

FACT = "The spare key is hidden under the blue flowerpot by the shed."


def last_result(messages):
    """The content of the newest tool result of a request."""
    return messages[-1].tool_results[-1]


def calls(*items):
    return Message.assistant(
        None, [ToolCall(f"k{i}", name, json.dumps(args)) for i, (name, args) in enumerate(items)]
    )


class Recaller:
    """Searches for the key, reads back the first hit, then answers from it."""

    def __init__(self):
        self.step = 0
        self.read = None

    def __call__(self, messages):
        self.step += 1
        if self.step == 1:
            return calls(("search_history", {"query": "where is the spare key"}))
        if self.step == 2:
            hits = json.loads(last_result(messages).content)["hits"]
            return calls(("read_events", {"ids": [hits[0]["event_id"]]}))
        self.read = json.loads(last_result(messages).content)
        return Message.assistant("Under the blue flowerpot.")


def compacted_session(h, sid="s"):
    """A session of five turns whose first (the fact) was compacted out of the view."""
    chat = h.make(h.model(["Noted."]))
    chat.send(sid, FACT)
    for i in range(4):
        chat.send(sid, f"small talk {i}")
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    assert not h.service.compact(sid, TurnCountTrigger(1), strategy).unchanged
    assert all(FACT not in (m.text or "") for m in h.service.view_messages(sid))
    return next(e for e in h.service.events(sid) if e.message and e.message.text == FACT)


@pytest.fixture(params=KINDS)
def h(request, tmp_path):
    harness = Harness(request.param, tmp_path)
    yield harness
    harness.close()


def test_the_model_searches_and_reads_back_what_compaction_took_out(h):
    original = compacted_session(h)
    recaller = Recaller()
    model = h.model([recaller])
    turn = h.make(model, recall=True).send("s", "Where did I say the spare key was?")
    assert turn.text == "Under the blue flowerpot."
    offered = [t.name for t in model.tools[0]]
    assert offered[-2:] == ["search_history", "read_events"]
    hits = json.loads(turn.tool_runs[0].result.content)["hits"]
    assert hits[0]["event_id"] == original.id
    assert hits[0]["seq"] == original.seq and hits[0]["role"] == "user"
    assert hits[0]["said_at"].startswith(original.timestamp.date().isoformat())
    assert "flowerpot" in hits[0]["snippet"]
    [event] = recaller.read["events"]
    assert event["id"] == original.id and event["text"] == FACT
    assert event["turn"] == 1 and event["seq"] == original.seq
    assert "cut" not in recaller.read and "not_found" not in recaller.read
    for sent in model.calls:  # every request, after each tool result, keeps the rules
        assert breaks(sent) == []
    assert len(model.calls) == 3


def test_read_events_gives_tool_calls_and_results_whole(h):
    def weather(city: str) -> str:
        """The weather."""
        return f"{city}: 18 degrees and clear"

    chat = h.make(h.model([calls(("weather", {"city": "Oslo"})), "Fine weather."]), tools=[weather])
    chat.send("s", "weather in Oslo?")
    log = h.service.events("s")
    asked, answered = [e for e in log if e.role in ("assistant", "tool")][:2]
    ids = [answered.id, asked.id, "no-such-event"]
    model = h.model([calls(("read_events", {"ids": ids})), "ok"])
    turn = h.make(model, tools=[weather], recall=True).send("s", "what did the tool say?")
    read = json.loads(turn.tool_runs[0].result.content)
    assert [e["id"] for e in read["events"]] == [asked.id, answered.id]  # log order
    assert read["events"][0]["tool_calls"] == [
        {"id": "k0", "name": "weather", "arguments": '{"city": "Oslo"}'}
    ]
    assert read["events"][1]["tool_results"] == [
        {"call_id": "k0", "name": "weather", "content": "Oslo: 18 degrees and clear"}
    ]
    assert read["not_found"] == ["no-such-event"]
    assert all(breaks(sent) == [] for sent in model.calls)


@pytest.mark.parametrize(
    ("name", "args", "says"),
    [
        ("search_history", {"query": "   "}, "blank"),
        ("search_history", {}, "query"),
        ("search_history", {"query": "key", "before": "last tuesday"}, "before must be"),
        ("search_history", {"query": "key", "after": 20240501}, "after must be"),
        ("search_history", {"query": "key", "k": 50}, "unknown argument 'k'"),
        ("read_events", {"ids": [f"e{i}" for i in range(MAX_READ_IDS + 1)]}, "at most 20"),
        ("read_events", {"ids": []}, "give ids"),
        ("read_events", {"ids": [3]}, "non-blank string"),
    ],
)
def test_bad_arguments_become_an_error_result_the_model_reads(h, name, args, says):
    compacted_session(h)
    model = h.model([calls((name, args)), "sorry"])
    turn = h.make(model, recall=True).send("s", "find it")
    result = turn.tool_runs[0].result
    assert result.is_error and says in result.content
    assert result.content.startswith(name)
    assert turn.text == "sorry"
    assert all(breaks(sent) == [] for sent in model.calls)


def test_arguments_that_are_not_json_become_an_error_result(h):
    compacted_session(h)
    broken = Message.assistant(None, [ToolCall("k0", "search_history", "{query: key")])
    turn = h.make(h.model([broken, "sorry"]), recall=True).send("s", "find it")
    assert turn.tool_runs[0].result.is_error
    assert "not valid JSON" in turn.tool_runs[0].result.content


def test_an_id_of_another_session_gives_nothing_of_it(h):
    theirs = compacted_session(h, "other")
    h.make(h.model(["hi"])).send("s", "hello")
    model = h.model([calls(("read_events", {"ids": [theirs.id]})), "nothing"])
    turn = h.make(model, recall=True).send("s", "read it")
    content = turn.tool_runs[0].result.content
    assert json.loads(content) == {
        "events": [],
        "not_found": [theirs.id],
        "message": "ids under not_found are not events of this conversation's history",
    }
    assert "flowerpot" not in content
    search = h.make(h.model([calls(("search_history", {"query": "flowerpot"})), "no"]), recall=True)
    found = json.loads(search.send("s", "search it").tool_runs[0].result.content)
    assert found["hits"] == [] and "Nothing matched" in found["message"]


def test_dates_filter_by_when_it_was_said(h):
    original = compacted_session(h)
    day = original.timestamp.date().isoformat()
    model = h.model(
        [calls(("search_history", {"query": "spare key", "before": day})), "none before"]
    )
    turn = h.make(model, recall=True).send("s", "before today?")
    assert json.loads(turn.tool_runs[0].result.content)["hits"] == []
    model = h.model([calls(("search_history", {"query": "spare key", "after": day})), "found"])
    turn = h.make(model, recall=True).send("s", "since today?")
    hits = json.loads(turn.tool_runs[0].result.content)["hits"]
    assert original.id in [hit["event_id"] for hit in hits]


def test_what_the_model_read_back_is_never_found_again(h):
    original = compacted_session(h)
    model = h.model([calls(("read_events", {"ids": [original.id]})), "read"])
    h.make(model, recall=True).send("s", "read the first")
    model = h.model([calls(("search_history", {"query": "blue flowerpot shed"})), "found"])
    turn = h.make(model, recall=True).send("s", "search it")
    hits = json.loads(turn.tool_runs[0].result.content)["hits"]
    assert [hit["event_id"] for hit in hits] == [original.id]


def test_without_recall_the_tools_are_neither_offered_nor_run(h):
    compacted_session(h)
    model = h.model([calls(("search_history", {"query": "key"})), "ok"])
    turn = h.make(model).send("s", "find it")
    assert model.tools[0] is None
    assert turn.tool_runs[0].result.is_error
    assert "no tool named 'search_history'" in turn.tool_runs[0].result.content


def test_an_application_tool_may_not_take_a_recall_tools_name(h):
    def read_events(ids: list[str]) -> str:
        """Mine."""
        return ""

    with pytest.raises(InvalidInput, match="recall tool's name"):
        h.make(h.model(["x"]), tools=[read_events], recall=True)
    h.make(h.model(["x"]), tools=[read_events])  # without recall the name is free


def test_recall_tools_come_after_a_tool_searchs(h):
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    model = h.model(["hi"])
    h.make(model, tools=[lookup], tool_search=h.tool_search(), recall=True).send("s", "hi")
    assert [t.name for t in model.tools[0]] == ["tool_search", "search_history", "read_events"]


def test_a_result_over_the_cap_says_where_it_was_cut(tmp_path):
    service = SessionService(SqliteStore(tmp_path / "cap.db"), token_counter=CharCounter())
    chat = SessionChat(service, ScriptedChatModel(["Noted."]))
    for i in range(3):
        chat.send("s", f"note {i}: " + "word " * 300)
    users = [e for e in service.events("s") if e.role == "user"]
    ids = [e.id for e in users]
    model = ScriptedChatModel([calls(("read_events", {"ids": ids})), "ok"])
    turn = SessionChat(service, model, recall=True).send("s", "read")
    read = json.loads(turn.tool_runs[0].result.content)
    counter = CharCounter()
    assert counter.count(turn.tool_runs[0].result.content) <= 2000 + 200  # about the cap
    shown = [e["id"] for e in read["events"]]
    assert shown == ids[: len(shown)] and 1 <= len(shown) < 3
    assert read["not_shown"] == ids[len(shown) :]
    assert f"cut before event {ids[len(shown)]}" in read["cut"]
    for event, stored in zip(read["events"], users, strict=False):
        assert event["text"] == stored.message.text  # what is shown is whole
    assert all(breaks(sent) == [] for sent in model.calls)


def test_an_event_bigger_than_the_cap_is_shown_cut_short(tmp_path):
    service = SessionService(SqliteStore(tmp_path / "big.db"), token_counter=CharCounter())
    big = "lorem ipsum " * 1000
    SessionChat(service, ScriptedChatModel(["Noted."])).send("s", big)
    [user] = [e for e in service.events("s") if e.role == "user"]
    model = ScriptedChatModel([calls(("read_events", {"ids": [user.id]})), "ok"])
    content = SessionChat(service, model, recall=True).send("s", "read").tool_runs[0].result
    read = json.loads(content.content)
    [event] = read["events"]
    assert event["truncated"] is True
    assert big.startswith(event["text"]) and 1000 < len(event["text"]) < 2000
    assert f"event {user.id} cut short" in read["cut"] and "not_shown" not in read


def test_the_argument_readers_refuse_what_the_model_got_wrong():
    assert search_arguments('{"query": "key", "before": "2024-05-01"}').before.tzinfo is not None
    assert read_arguments('{"ids": ["a", "b", "a"]}') == ["a", "b"]
    with pytest.raises(InvalidInput, match="JSON object"):
        read_arguments('["a"]')
    assert json.loads(events_result(["x"], [], [], CharCounter())) == {
        "events": [],
        "not_found": ["x"],
        "message": "ids under not_found are not events of this conversation's history",
    }
