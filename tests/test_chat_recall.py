"""The recall tools of the turn runner (`recall=True`): the model gets back what compaction took
out of its view, through tool results it asked for, over a real SQLite file, on both runners."""

import json
import random
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_harness import KINDS, Harness
from prompt_rules import breaks
from turnlog import (
    CharCounter,
    CompactionWindow,
    Message,
    SessionService,
    SqliteStore,
    ToolCall,
    ToolOutputCompactionStrategy,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.chat import SessionChat
from turnlog.errors import InvalidInput, ToolRoundsExceeded
from turnlog.recall_tools import MAX_READ_IDS, events_result, read_arguments, search_arguments
from turnlog.testing.fakes import ScriptedChatModel

ROOT = Path(__file__).parent.parent
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


# -- item 7: a property test through the runner --------------------------------------------------

WORDS = ["key", "flowerpot", "invoice", "paris", "dentist", "lookup", "value", "blue", "42"]


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key} " * (len(key) % 5 + 1)


class RecallDirector:
    """The scripted model's brain: each turn's plan is a list of rounds of calls (a search by
    some words, a read of ids picked from the log, of another session or of none, a lookup),
    then a reply."""

    def __init__(self, service, rng):
        self.service, self.rng = service, rng
        self.plan, self.step, self.calls = [], 0, 0

    def start(self, plan):
        """A new turn: its plan, and the ids its reads pick from (the log's so far, some of
        another session's, one of none), read here: the asyncio runner calls the model on
        the service's own loop."""
        self.plan, self.step = plan, 0
        log = [e.id for e in self.service.events("s")] if self.service.find("s") else []
        other = [e.id for e in self.service.events("other")][:3]
        self.pool = [*log, *other, "no-such-event"]

    def _arguments(self, kind, seed):
        rng = random.Random(seed)
        if kind == "search":
            args = {"query": " ".join(rng.sample(WORDS, rng.randint(1, 3)))}
            if rng.random() < 0.2:
                args["after"] = "2000-01-01"
            return args
        if kind == "lookup":
            return {"key": rng.choice(WORDS)}
        pool = self.pool
        return {"ids": rng.sample(pool, min(len(pool), rng.randint(1, 6)))}

    def __call__(self, messages):
        step, self.step = self.step, self.step + 1
        if step < len(self.plan) - 1:
            self.calls += 1
            made = []
            for i, (kind, seed) in enumerate(self.plan[step]):
                name = {"search": "search_history", "read": "read_events"}.get(kind, kind)
                made.append(
                    ToolCall(f"c{self.calls}-{i}", name, json.dumps(self._arguments(kind, seed)))
                )
            return Message.assistant(None, made)
        return Message.assistant(self.plan[-1])


def check_read(result, service, asked):
    """A read_events result against the log, the oracle: each event shown is the log's."""
    log = service.events("s")
    by_id = {e.id: e for e in log}
    users = [e.seq for e in log if e.role == "user" and not e.synthetic]
    read = json.loads(result.content)
    shown = [e["id"] for e in read["events"]]
    assert set(read.get("not_found", [])) == {i for i in asked if i not in by_id}
    assert set(shown) | set(read.get("not_shown", [])) == {
        i for i in asked if i in by_id and by_id[i].message is not None
    }
    assert shown == sorted(shown, key=lambda i: by_id[i].seq)  # log order
    for got in read["events"]:
        event = by_id[got["id"]]
        message = event.message
        assert got["seq"] == event.seq and got["role"] == message.role
        assert got["turn"] == sum(1 for s in users if s <= event.seq)
        assert got["said_at"] == event.timestamp.isoformat().replace("+00:00", "Z")
        assert got.get("synthetic", False) == event.synthetic
        if got.get("truncated"):
            continue
        assert got.get("text") == message.text
        assert got.get("tool_calls", []) == [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
        assert got.get("tool_results", []) == [
            {"call_id": r.call_id, "name": r.name, "content": r.content}
            | ({"is_error": True} if r.is_error else {})
            for r in message.tool_results
        ]
    return len(shown)


def run_recall_conversation(chat_for, service, model, director, turns, between):
    """Play the turns, with a compaction or a clearing of the view between some; check every
    request and every read_events result."""
    reads = 0
    service.get_or_create("other")
    service.append_message("other", Message.user("the other session's secret flowerpot"))
    for i, (plan, operation) in enumerate(zip(turns, between, strict=True)):
        director.start([*plan["rounds"], plan["reply"]])
        try:
            turn = chat_for().send("s", f"question {i}: {' '.join(plan['words'])}")
        except ToolRoundsExceeded:
            turn = None
        if turn is not None:
            for run in turn.tool_runs:
                if run.call.name == "read_events":
                    if not run.result.is_error:
                        asked = json.loads(run.call.arguments)["ids"]
                        reads += check_read(run.result, service, asked)
                elif run.call.name == "search_history":
                    assert not run.result.is_error, run.result.content
        operation(service)
    for sent in model.calls:
        assert breaks(sent) == [], (breaks(sent), sent)
    return reads


recall_call = st.tuples(st.sampled_from(["search", "read", "read", "lookup"]), st.integers(0, 999))
recall_turn = st.fixed_dictionaries(
    {
        "rounds": st.lists(st.lists(recall_call, min_size=1, max_size=3), max_size=3),
        "reply": st.sampled_from(["ok", "the key is blue", "invoice 42 paid"]),
        "words": st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    }
)


def operations(rng):
    """What happens between two turns: nothing, a compaction by a window, a clearing of old
    tool outputs (then a window), or a clearing of the whole view."""
    windows = [CompactionWindow.last_turns(1), CompactionWindow.last_events(4)]

    def window(service):
        strategy = WindowCompactionStrategy(rng.choice(windows))
        service.compact("s", TurnCountTrigger(1), strategy)

    def clearing(service):
        then = WindowCompactionStrategy(CompactionWindow.last_turns(2))
        strategy = ToolOutputCompactionStrategy(keep_last=1, min_tokens=1, then=then)
        service.compact("s", TurnCountTrigger(1), strategy)

    def clear(service):
        service.clear_view("s")

    return [lambda service: None, window, clearing, clear]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    turns=st.lists(recall_turn, min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
    max_rounds=st.integers(1, 4),
)
def test_recall_keeps_the_rules_and_reads_back_the_log(turns, seed, max_rounds):
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as folder:
        service = SessionService(SqliteStore(Path(folder) / "recall.db"))
        try:
            director = RecallDirector(service, rng)
            model = ScriptedChatModel([director])
            choices = operations(rng)
            between = [rng.choice(choices) for _ in turns]

            def chat_for():
                return SessionChat(
                    service, model, tools=[lookup], recall=True, max_tool_rounds=max_rounds
                )

            run_recall_conversation(chat_for, service, model, director, turns, between)
        finally:
            service.close()


@pytest.mark.parametrize("seed", range(3))
def test_the_async_runner_reads_back_the_log_too(tmp_path, seed):
    rng = random.Random(seed)
    h = Harness("async", tmp_path)
    try:
        director = RecallDirector(h.service, rng)
        model = h.model([director])
        turns = [
            {
                "rounds": [[("search", rng.randint(0, 999)), ("read", rng.randint(0, 999))]]
                * rng.randint(1, 2),
                "reply": f"reply {i}",
                "words": rng.sample(WORDS, 2),
            }
            for i in range(8)
        ]
        choices = operations(rng)
        between = [choices[i % len(choices)] for i in range(len(turns))]

        def chat_for():
            return h.make(model, tools=[lookup], recall=True, max_tool_rounds=4)

        assert run_recall_conversation(chat_for, h.service, model, director, turns, between) > 5
    finally:
        h.close()


def test_the_docs_example_recalls_a_hotel_compacted_out_of_the_view(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = re.findall(r"```python\n(.*?)```", (ROOT / "docs/chat.md").read_text("utf-8"), re.S)
    [example] = [block for block in code if "recall=True" in block]
    with SessionService(SqliteStore(tmp_path / "recall.db")) as service:
        chat = SessionChat(service, ScriptedChatModel(["Noted."]))
        chat.send("alice", "I booked the Hotel Avenida in Lisbon for April.")
        for i in range(25):
            chat.send("alice", f"unrelated question {i}")
        strategy = WindowCompactionStrategy(CompactionWindow.last_turns(10))
        service.compact("alice", TurnCountTrigger(20), strategy)
        assert "Avenida" not in json.dumps([m.text for m in service.view_messages("alice")])

    def answer(messages):
        last = messages[-1]
        if last.role == "user":
            return calls(("search_history", {"query": "hotel Lisbon booked"}))
        found = json.loads(last.tool_results[0].content)
        if last.tool_results[0].name == "search_history":
            return calls(("read_events", {"ids": [found["hits"][0]["event_id"]]}))
        return Message.assistant(found["events"][0]["text"])

    model = ScriptedChatModel([answer])
    namespace = {"model": model}
    exec(example, namespace)
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in printed] == ["search_history", "read_events"]
    assert namespace["turn"].text == "I booked the Hotel Avenida in Lisbon for April."
    assert all(breaks(sent) == [] for sent in model.calls)
    namespace["service"].close()


def test_a_recall_placeholder_leads_the_model_back_to_the_cleared_output(tmp_path):
    from turnlog.recall_tools import RECALL_PLACEHOLDER, RECALL_SHADOW_PROMPT

    assert "search_history" in RECALL_SHADOW_PROMPT and "read_events" in RECALL_SHADOW_PROMPT
    service = SessionService(SqliteStore(tmp_path / "p.db"))
    report = "Quarterly report: revenue 4,812,300 EUR, churn 2.1%, " + "detail " * 400

    def fetch_report() -> str:
        """Fetch the quarterly report."""
        return report

    fetch = calls(("fetch_report", {}))
    chat = SessionChat(service, ScriptedChatModel([fetch, "Fetched."]), tools=[fetch_report])
    chat.send("p", "Get the quarterly report.")
    for n in range(4):
        chat.send("p", f"small talk {n}")
    clearing = ToolOutputCompactionStrategy(keep_last=0, placeholder=RECALL_PLACEHOLDER)
    assert not service.compact("p", TurnCountTrigger(1), clearing).unchanged

    seen = {}

    def reader(messages):
        stand_in = next(r.content for m in messages for r in m.tool_results)
        seen["stand_in"] = stand_in
        event_id = re.search(r'read_events\(\["([^"]+)"\]\)', stand_in).group(1)
        return calls(("read_events", {"ids": [event_id]}))

    def answer(messages):
        seen["read"] = json.loads(last_result(messages).content)
        return Message.assistant("Revenue was 4,812,300 EUR.")

    recall = SessionChat(service, ScriptedChatModel([reader, answer]), recall=True)
    recall.send("p", "What was the revenue in the report?")
    assert "4,812,300" not in seen["stand_in"]
    shown = json.dumps(seen["read"])
    assert "4,812,300 EUR" in shown and "fetch_report" in shown
