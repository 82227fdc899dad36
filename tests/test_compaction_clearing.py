"""ToolOutputCompactionStrategy: old tool outputs leave the view, the log keeps them.

Runs through SessionService.compact on real stores (memory, SQLite file); counts use CharCounter.
"""

import asyncio
import json
import re
from pathlib import Path

import pytest

from prompt_rules import breaks
from turnlog import (
    AsyncSessionService,
    CharCounter,
    CompactionBoundary,
    CompactionWindow,
    CorruptData,
    InvalidInput,
    MemoryStore,
    Message,
    SessionService,
    SqliteStore,
    TokenCountTrigger,
    ToolCall,
    ToolOutputCompactionStrategy,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.codec import decode_event, encode_body
from turnlog.compaction import STAND_IN_KEY, stand_ins
from turnlog.stores.memory_async import AsyncMemoryStore

ALWAYS = lambda request: True  # noqa: E731
CHARS = CharCounter()
FIXTURES = json.loads(
    (Path(__file__).parent / "fixtures" / "bodies_v1_stand_in.json").read_text("utf-8")
)


@pytest.fixture(params=["memory", "sqlite"])
def service(request, tmp_path):
    store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "t.db")
    with SessionService(store) as svc:
        yield svc


def tool_turn(svc, sid, n, *, tool="search", size=500, args="{}"):
    """A turn: question, a call, its result (`size` characters), the answer."""
    call = ToolCall(f"c{n}", tool, args)
    svc.append_message(sid, Message.user(f"q{n}"))
    svc.append_message(sid, Message.assistant(None, [call]))
    svc.append_message(sid, Message.tool(ToolResult(call.id, tool, f"{n}" * size)))
    svc.append_message(sid, Message.assistant(f"a{n}"))


def results(view):
    """call id -> content of every tool result in the view."""
    return {r.call_id: r.content for e in view if e.message for r in e.message.tool_results}


def strategy(**kw):
    kw.setdefault("token_counter", CHARS)
    return ToolOutputCompactionStrategy(**kw)


def test_old_outputs_become_stand_ins_and_the_log_keeps_them(service):
    sid = service.create().id
    for n in range(1, 6):
        tool_turn(service, sid, n)
    result = service.compact(sid, ALWAYS, strategy(keep_last=2))
    assert not result.unchanged and len(result.stand_in_events) == 3
    view = service.view(sid)
    got = results(view)
    assert got["c4"] == "4" * 500 and got["c5"] == "5" * 500
    for n in (1, 2, 3):
        assert (
            got[f"c{n}"].startswith("[output of search cleared")
            and "500 characters" in got[f"c{n}"]
        )
    assert breaks(service.view_messages(sid)) == []
    log = service.events(sid)
    originals = stand_ins(log)
    assert sorted(e.message.tool_results[0].call_id for e in originals.values()) == [
        "c1",
        "c2",
        "c3",
    ]
    stand_in = next(e for e in view if e.id in originals)
    assert (
        stand_in.synthetic and stand_in.message.metadata[STAND_IN_KEY] == originals[stand_in.id].id
    )
    assert result.tokens_estimated_saved > 3 * 300
    assert len(result.covered_events) == 3  # the three originals left the view
    # the view keeps its order: each stand-in sits between its call and the answer
    roles = [e.role for e in view]
    assert roles == ["user", "assistant", "tool", "assistant"] * 5


def test_nothing_is_written_when_it_saves_too_little(service):
    sid = service.create().id
    for n in range(1, 4):
        tool_turn(service, sid, n)
    before = service.store.version(sid)
    result = service.compact(sid, ALWAYS, strategy(keep_last=1, clear_at_least=2000))
    assert result.unchanged and service.store.version(sid) == before
    result = service.compact(sid, ALWAYS, strategy(keep_last=1, clear_at_least=600))
    assert len(result.stand_in_events) == 2


def test_keep_turns_min_tokens_and_excluded_tools(service):
    sid = service.create().id
    tool_turn(service, sid, 1, tool="read_file")
    tool_turn(service, sid, 2, size=20)
    tool_turn(service, sid, 3)
    tool_turn(service, sid, 4)
    tool_turn(service, sid, 5)
    s = strategy(keep_last=0, keep_turns=2, min_tokens=100, exclude_tools=["read_file"])
    result = service.compact(sid, ALWAYS, s)
    cleared = {e.message.tool_results[0].call_id for e in result.stand_in_events}
    assert cleared == {"c3"}  # c1 excluded, c2 small, c4 and c5 in the last two turns
    assert "keep_turns(2)" in s.name


def test_a_preview_keeps_the_ends_of_the_output(service):
    sid = service.create().id
    service.append_message(sid, Message.user("q"))
    service.append_message(sid, Message.assistant(None, [ToolCall("c1", "f")]))
    service.append_message(sid, Message.tool(ToolResult("c1", "f", "HEAD" + "x" * 900 + "TAIL")))
    service.append_message(sid, Message.assistant("done"))
    s = strategy(keep_last=0, preview_head=4, preview_tail=4, placeholder="[{chars} chars cut]")
    service.compact(sid, ALWAYS, s)
    assert results(service.view(sid))["c1"] == "HEAD\n[908 chars cut]\nTAIL"


def test_the_arguments_of_a_cleared_call_are_shortened_too(service):
    sid = service.create().id
    tool_turn(service, sid, 1, args=json.dumps({"content": "y" * 600}))
    tool_turn(service, sid, 2, args=json.dumps({"content": "z" * 600}))
    service.compact(sid, ALWAYS, strategy(keep_last=1, clear_arguments=True))
    calls = {c.id: c for e in service.view(sid) if e.message for c in e.message.tool_calls}
    assert json.loads(calls["c1"].arguments) == {
        "turnlog_cleared": "615 characters of arguments, kept in the session log"
    }
    assert "z" * 600 in calls["c2"].arguments
    assert breaks(service.view_messages(sid)) == []


def test_a_second_pass_leaves_earlier_stand_ins_alone(service):
    sid = service.create().id
    for n in range(1, 4):
        tool_turn(service, sid, n)
    first = service.compact(sid, ALWAYS, strategy(keep_last=1))
    tool_turn(service, sid, 4)
    second = service.compact(sid, ALWAYS, strategy(keep_last=1))
    assert len(first.stand_in_events) == 2 and len(second.stand_in_events) == 1
    assert results(service.view(sid))["c4"] == "4" * 500
    assert len(stand_ins(service.events(sid))) == 3
    assert service.compact(sid, ALWAYS, strategy(keep_last=1)).unchanged


def test_clear_then_cut_in_one_boundary(service):
    sid = service.create().id
    service.append_message(sid, Message.system("be brief"))
    for n in range(1, 7):
        tool_turn(service, sid, n)
    window = WindowCompactionStrategy(CompactionWindow.last_turns(3), token_counter=CHARS)
    s = strategy(keep_last=1, then=window, then_at=1000)
    version = service.store.version(sid)
    result = service.compact(sid, ALWAYS, s)
    log = service.events(sid)
    assert [e.type.name for e in log[version:]].count("COMPACTION") == 1
    # turns 1-3 were cut: their stand-ins were not written; turns 4 and 5 were cleared
    cleared = sorted(e.message.tool_results[0].call_id for e in result.stand_in_events)
    assert cleared == ["c4", "c5"]
    view = service.view(sid)
    assert [e.message.text for e in view if e.role == "user"] == ["q4", "q5", "q6"]
    assert view[0].role == "system"
    assert results(view)["c6"] == "6" * 500
    assert "+window:last_turns(3)" in result.boundary.strategy
    assert breaks(service.view_messages(sid)) == []


def test_the_cut_waits_for_then_at(service):
    sid = service.create().id
    for n in range(1, 7):
        tool_turn(service, sid, n)
    window = WindowCompactionStrategy(CompactionWindow.last_turns(3), token_counter=CHARS)
    result = service.compact(sid, ALWAYS, strategy(keep_last=1, then=window, then_at=2000))
    assert result.summary_events == () and len(result.stand_in_events) == 5
    assert len([e for e in service.view(sid) if e.role == "user"]) == 6  # no cut: under 2000


def test_a_cut_runs_even_when_nothing_is_left_to_clear(service):
    sid = service.create().id
    for n in range(1, 5):
        tool_turn(service, sid, n, size=10)
    window = WindowCompactionStrategy(CompactionWindow.last_turns(1), token_counter=CHARS)
    result = service.compact(sid, ALWAYS, strategy(then=window))
    assert result.stand_in_events == () and not result.unchanged
    assert [e.message.text for e in service.view(sid) if e.role == "user"] == ["q4"]


def test_the_recipe_with_a_summary_runs_async():
    def summarize(request):
        return [Message.user("recap?"), Message.assistant(f"{len(request.covered)} events")]

    async def main():
        async with AsyncSessionService(AsyncMemoryStore()) as svc:
            sid = (await svc.create()).id
            for n in range(1, 41):
                await svc.append_message(sid, Message.user(f"q{n}"))
                call = ToolCall(f"c{n}", "f")
                await svc.append_message(sid, Message.assistant(None, [call]))
                await svc.append_message(sid, Message.tool(ToolResult(call.id, "f", "r" * 800)))
                await svc.append_message(sid, Message.assistant(f"a{n}"))
            budget = 8000
            window = WindowCompactionStrategy(
                CompactionWindow.token_budget(budget // 2),
                summarizer=summarize,
                token_counter=CHARS,
            )
            s = strategy(keep_last=2, then=window, then_at=int(budget * 0.9))
            trigger = TokenCountTrigger(int(budget * 0.7), CHARS, reported=False)
            result = await svc.compact(sid, trigger, s)
            assert not result.unchanged and result.stand_in_events
            return await svc.view_messages(sid), result

    messages, result = asyncio.run(main())
    assert breaks(messages) == []
    assert len(result.summary_events) == 2
    assert sum(len(event_str(m)) for m in messages) < 8000 * 0.7


def event_str(m):
    return (m.text or "") + "".join(r.content for r in m.tool_results)


def test_options_are_checked():
    for bad in (
        {"keep_last": -1},
        {"keep_turns": True},
        {"exclude_tools": "search"},
        {"placeholder": "{nope}"},
        {"then": "window"},
        {"then_at": 0},
        {"clear_arguments": "yes"},
    ):
        with pytest.raises(InvalidInput):
            ToolOutputCompactionStrategy(**bad)


def test_boundaries_without_stand_ins_are_stored_as_before():
    boundary = CompactionBoundary("b", ("p",), (), ("u",), 1, 2, "t")
    assert "replaced" not in boundary.to_payload()
    again = CompactionBoundary.from_payload("b", boundary.to_payload())
    assert again == boundary and again.replaced == {}


def test_stand_in_fixtures_decode_and_encode_stably():
    for name, row in FIXTURES.items():
        event = decode_event(
            event_id={"boundary_replaced": "b2", "stand_in": "x1"}[name],
            session_id="s",
            seq=1,
            type_name=row["type"],
            timestamp_micros=1_700_000_000_000_000,
            synthetic=row["synthetic"],
            body=row["body"].encode(),
        )
        assert encode_body(event).decode() == row["body"]
        if name == "boundary_replaced":
            boundary = CompactionBoundary.from_event(event)
            assert boundary.replaced == {"x1": "t1"}
            assert boundary.preserved_event_ids == ("u1", "x1", "a1")


@pytest.mark.parametrize(
    "replaced",
    [["x"], {"nope": "t1"}, {"x1": "x1"}, {"x1": "u1"}, {"x1": 3}],
)
def test_a_damaged_replaced_map_is_corrupt_data(replaced):
    payload = CompactionBoundary("b", (), (), ("u1", "x1", "x2"), 1, 2, "t").to_payload()
    payload["replaced"] = replaced
    with pytest.raises(CorruptData):
        CompactionBoundary.from_payload("b", payload)
    payload["replaced"] = {"x1": "t1", "x2": "t1"}  # one original replaced twice
    with pytest.raises(CorruptData):
        CompactionBoundary.from_payload("b", payload)


def test_show_log_shows_the_original_and_its_stand_in(tmp_path, capsys):
    from turnlog.cli import main

    db = tmp_path / "t.db"
    with SessionService(SqliteStore(db)) as svc:
        sid = svc.create("s").id
        for n in range(1, 4):
            tool_turn(svc, sid, n)
        svc.compact(sid, ALWAYS, strategy(keep_last=1))
    assert main(["--db", str(db), "show", "s", "--log"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"cleared\s+tool\s+Tool \[responses: search → 1111", out)) == 1
    assert re.search(r"stand-in\s+tool\s+\(for seq 3\) Tool \[responses: search → \[output of", out)
    assert "replaced 2" in out
    assert main(["--db", str(db), "show", "s", "--log", "--json"]) == 0
    log = json.loads(capsys.readouterr().out)["log"]
    by_status = {}
    for e in log:
        by_status.setdefault(e["status"], []).append(e)
    assert len(by_status["cleared"]) == 2 and len(by_status["stand-in"]) == 2
    assert (
        by_status["stand-in"][0]["message"]["metadata"][STAND_IN_KEY]
        == (by_status["cleared"][0]["id"])
    )
    assert main(["--db", str(db), "show", "s"]) == 0
    view_out = capsys.readouterr().out
    assert "stand-in" in view_out and "1111" not in view_out


DOCS = Path(__file__).parent.parent / "docs" / "compaction.md"


def test_the_docs_recipe_and_recall_run(capsys):
    section = DOCS.read_text("utf-8").split("## Tool outputs")[1].split("\n## ")[0]
    recipe, recall = [b.split("```")[0] for b in section.split("```python\n")[1:3]]
    with SessionService(MemoryStore()) as svc:
        sid = svc.create().id
        for n in range(1, 12):
            tool_turn(svc, sid, n, size=3000)
        # the recipe, with a budget this session exceeds
        exec(recipe.replace("200_000", "8_000"), {"service": svc, "session_id": sid})
        view = svc.view(sid)
        cleared = [e for e in view if e.message and STAND_IN_KEY in e.message.metadata]
        assert cleared and len(results(view)) == len([e for e in view if e.role == "tool"])
        assert [e.message.text for e in view if e.role == "user"][-1] == "q11"
        exec(recall, {"service": svc, "session_id": sid})
    printed = capsys.readouterr().out.split()
    assert printed and all(len(p) == 3000 for p in printed)
