"""Every request the turn runner sends keeps the prompt rules, whatever the conversation.

Random scripted conversations (parallel calls, failing and unknown tools, long tool loops cut by
`max_tool_rounds`, system prompts that change, retried request ids, model failures mid-turn)
run under random windows, triggers, token budgets and summarizers (none, extractive, a model
one that sometimes fails). Each request the model receives is checked by the oracle in
tests/prompt_rules.py, which is not the code under test: 0 violations.
"""

import contextlib
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_harness import Harness
from prompt_rules import breaks
from turnlog import (
    CharCounter,
    CompactionWindow,
    MemoryStore,
    Message,
    SessionService,
    TokenCountTrigger,
    ToolCall,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.chat import SessionChat
from turnlog.compaction import ChatModelSummarizer, ExtractiveSummarizer
from turnlog.errors import ModelError, ToolRoundsExceeded
from turnlog.testing.fakes import ScriptedChatModel


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key} " * (len(key) % 5 + 1)


def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


TOOLS = [lookup, explode]

window = st.one_of(
    st.integers(1, 4).map(CompactionWindow.last_turns),
    st.integers(2, 12).map(CompactionWindow.last_events),
    st.integers(20, 400).map(CompactionWindow.token_budget),
)
trigger = st.one_of(
    st.integers(1, 5).map(TurnCountTrigger),
    st.integers(30, 600).map(lambda n: TokenCountTrigger(n, CharCounter())),
)
summarizer = st.sampled_from(["none", "extractive", "model", "failing-model"])

call = st.tuples(st.sampled_from(["lookup", "explode", "missing"]), st.text("abcxyz", max_size=8))
round_ = st.lists(call, min_size=1, max_size=3)  # parallel calls
turn = st.fixed_dictionaries(
    {
        "rounds": st.lists(round_, max_size=6),
        "reply": st.text("abc ", min_size=1, max_size=40).filter(str.strip),
        "system": st.sampled_from([None, None, "sys A", "sys B"]),
        "retry": st.booleans(),
        "fail_at": st.one_of(st.none(), st.integers(0, 6)),
    }
)


class Director:
    """The scripted model's brain: replies to each request from the current turn's plan."""

    def __init__(self):
        self.plan = []
        self.calls = 0
        self.fail_at = None

    def start(self, plan, fail_at):
        self.plan, self.step, self.fail_at = plan, 0, fail_at

    def __call__(self, messages):
        step, self.step = self.step, self.step + 1
        if step == self.fail_at:
            self.fail_at = None
            raise ModelError("scripted", 503, "scripted outage")
        if step < len(self.plan) - 1:
            self.calls += 1
            return Message.assistant(
                None,
                [
                    ToolCall(f"c{self.calls}-{i}", name, json.dumps({"key": arg, "reason": arg}))
                    for i, (name, arg) in enumerate(self.plan[step])
                ],
            )
        return Message.assistant(self.plan[-1] if self.plan else "done")


def summary_model(kind, rng):
    if kind == "none":
        return None
    if kind == "extractive":
        return ExtractiveSummarizer(max_tokens=200)

    def summarize(messages):
        if kind == "failing-model" and rng.random() < 0.5:
            raise RuntimeError("summarizer outage")
        return Message.assistant("summary of the conversation so far")

    return ChatModelSummarizer(ScriptedChatModel([summarize]), max_tokens=50)


def run_conversation(chat_for, model, director, turns):
    requests = 0
    for i, plan in enumerate(turns):
        chat = chat_for(plan["system"])
        director.start([*plan["rounds"], plan["reply"]], plan["fail_at"])
        request_id = f"r{i}"
        for _ in range(3):
            try:
                chat.send("s", f"question {i}", request_id=request_id)
                break
            except ToolRoundsExceeded:
                break
            except ModelError:
                continue  # retried with the same request id: it resumes
        if plan["retry"]:
            with contextlib.suppress(ToolRoundsExceeded, ModelError):
                chat.send("s", f"question {i}", request_id=request_id)
    for sent in model.calls:
        requests += 1
        assert breaks(sent) == [], (breaks(sent), sent)
    return requests


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    turns=st.lists(turn, min_size=1, max_size=12),
    window=window,
    trigger=trigger,
    kind=summarizer,
    max_rounds=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_every_request_keeps_the_rules(turns, window, trigger, kind, max_rounds, seed):
    rng = random.Random(seed)
    director = Director()
    model = ScriptedChatModel([director])
    service = SessionService(MemoryStore())
    strategy = WindowCompactionStrategy(window, summarizer=summary_model(kind, rng))

    def chat_for(system):
        return SessionChat(
            service,
            model,
            system=system,
            tools=TOOLS,
            trigger=trigger,
            strategy=strategy,
            max_tool_rounds=max_rounds,
        )

    assert run_conversation(chat_for, model, director, turns) == len(model.calls)


@pytest.mark.parametrize("seed", range(4))
def test_the_async_runner_keeps_the_rules_too(tmp_path, seed):
    rng = random.Random(seed)
    turns = [
        {
            "rounds": [
                [
                    (rng.choice(["lookup", "explode", "missing"]), "k")
                    for _ in range(rng.randint(1, 3))
                ]
                for _ in range(rng.randint(0, 4))
            ],
            "reply": f"reply {i}",
            "system": rng.choice([None, "sys A", "sys B"]),
            "retry": rng.random() < 0.3,
            "fail_at": rng.choice([None, None, 1]),
        }
        for i in range(10)
    ]
    h = Harness("async", tmp_path)
    try:
        director = Director()
        model = h.model([director])
        strategy = WindowCompactionStrategy(
            CompactionWindow.last_turns(2), summarizer=ExtractiveSummarizer(max_tokens=100)
        )

        def chat_for(system):
            return h.make(
                model,
                system=system,
                tools=TOOLS,
                trigger=TurnCountTrigger(3),
                strategy=strategy,
                max_tool_rounds=3,
            )

        assert run_conversation(chat_for, model, director, turns) > 10
    finally:
        h.close()
