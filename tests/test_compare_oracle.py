"""The comparison benchmark's oracle and transcript builder (bench/compare/_transcripts.py).

No download: transcripts are built from BFCL-shaped entries written here, and every trimmed
prompt is judged by the benchmark's oracle and by tests/prompt_rules.py, which must agree.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "compare"))

from _transcripts import Call, Msg, _build, breaks, history_at, parse_call, requests

from prompt_rules import breaks as rule_breaks
from turnlog import Message, ToolCall, ToolResult

QUESTION = [
    [{"role": "user", "content": "Make a folder temp in document and move the report there."}],
    [{"role": "user", "content": "Sort the report."}],
    [],  # a miss_func turn: no user message, skipped
    [{"role": "user", "content": "Post the result."}],
    [{"role": "user", "content": "And book a flight?"}],
]
TRUTH = [
    ["cd(folder='document')", "mkdir(dir_name='temp')", "mv(source='r.pdf', destination='temp')"],
    ["sort('r.pdf')"],
    [],
    ["post_tweet(content='done', tags=['a', 'b'])"],
    [],
]


def test_a_turn_is_user_parallel_calls_results_answer():
    transcript = _build("t", QUESTION, TRUTH)
    assert len(transcript.turns) == 4
    first = transcript.turns[0]
    assert [c.name for c in first.calls.calls] == ["cd", "mkdir", "mv"]
    assert [r.call_id for r in first.results] == [c.id for c in first.calls.calls]
    assert transcript.turns[3].calls is None
    assert [(r.turn, r.stage) for r in requests(transcript)] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
        (3, 0),
    ]
    assert _build("t", QUESTION, TRUTH) == transcript  # deterministic tool results


def test_parse_call():
    assert parse_call("sort('r.pdf')") == ("sort", {"arg0": "r.pdf"})
    assert parse_call("f(a=1, b=[1, 2])") == ("f", {"a": 1, "b": [1, 2]})
    with pytest.raises(ValueError):
        parse_call("1 + 2")


def test_breaks_names_each_kind():
    call = Msg("assistant", "", (Call("c1", "f", "{}"),))
    result = Msg("tool", "ok", call_id="c1")
    user = Msg("user", "hi", uid="u")
    system = Msg("system", "s")
    assert breaks([system, user, call, result], "u") == set()
    assert breaks([system, result, user], "u") == {"orphan result", "first not user"}
    assert breaks([user, call, Msg("user", "again", uid="v")], "v") == {"unanswered call"}
    assert breaks([user, call], "u") == {"unanswered call"}
    assert breaks([system], "u") == {"empty", "lost request"}
    assert breaks([user, call, result, result], "u") == {"orphan result"}  # answered twice
    assert breaks([call, result], "u") == {"first not user", "lost request"}


def as_messages(prompt):
    out = []
    for m in prompt:
        if m.role == "tool":
            out.append(Message.tool(ToolResult(str(m.call_id), "f", m.text)))
        elif m.role == "assistant":
            calls = [ToolCall(c.id, c.name, c.arguments) for c in m.calls]
            out.append(Message.assistant(m.text or None, calls))
        else:
            out.append(Message(role=m.role, text=m.text))
    return out


def test_the_oracle_agrees_with_the_prompt_rules_on_every_cut():
    transcript = _build("t", QUESTION, TRUTH)
    seen = set()
    for request in requests(transcript):
        history = history_at(transcript, request)
        for n in range(1, len(history) + 1):
            prompt = [history[0], *history[1:][-n:]]
            mine = breaks(prompt, transcript.turns[request.turn].user.uid)
            rules = rule_breaks(as_messages(prompt))
            assert ("orphan result" in mine) == any(r.startswith("R1") for r in rules)
            assert ("first not user" in mine) == any(r.startswith("R3") for r in rules)
            seen |= mine
    assert {"orphan result", "first not user", "lost request"} <= seen
