"""A smoke run of bench/recall.py: a tiny generated set, one budget, BM25 only.

The bench's own functions play the conversations into a `SessionService` over `MemoryStore` with
compaction after every turn and ask the questions; the figures it reports rest on two facts
checked here: a question reachable by search is at least as often reachable as in view, and the
event a search finds as evidence is the planted message (its text holds the answer).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def recall():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(_BENCH))
    bytecode = sys.dont_write_bytecode
    try:
        import recall as module
    finally:
        sys.dont_write_bytecode = bytecode
        sys.path.remove(str(_BENCH))
    return module


def test_generated_set_has_the_promised_shape(recall) -> None:  # type: ignore[no-untyped-def]
    from recall_data import generate

    conversations = generate(3, conversations=2, sessions=(4, 4), turns=(5, 6), facts=8)
    again = generate(3, conversations=2, sessions=(4, 4), turns=(5, 6), facts=8)
    assert [c.messages for c in conversations] == [c.messages for c in again]  # seeded
    for conv in conversations:
        assert conv.turn_ends[-1] == len(conv.messages)
        for message in conv.messages[1:]:
            assert "said_at" in message.metadata
        for question in conv.questions:
            for index in question.evidence:
                assert 0 < index < len(conv.messages)
            if question.kind == "revised":
                (index,) = question.evidence
                assert question.answer in (conv.messages[index].text or "")


def test_search_reaches_the_planted_evidence(recall) -> None:  # type: ignore[no-untyped-def]
    from recall_data import generate
    from turnlog import MemoryStore, SessionService
    from turnlog.history import history_query

    conversations = generate(5, conversations=2, sessions=(5, 5), turns=(6, 8), facts=10)
    with SessionService(MemoryStore()) as service:
        results = recall.run(service, conversations, (2_000,), ("window",), {"bm25": recall.bm25})
        outcomes = results[(2_000, "window")]
        assert len(outcomes) == sum(len(c.questions) for c in conversations)
        assert all(o.reachable["bm25"] >= o.in_view for o in outcomes)
        in_view = sum(o.in_view for o in outcomes)
        reachable = sum(o.reachable["bm25"] for o in outcomes)
        assert in_view < len(outcomes)  # the budget took evidence out of the view
        assert reachable > in_view  # and the search gave some of it back

        conv = conversations[0]
        sid = recall.play(service, conv, 2_000, "window")
        checked = 0
        for question in conv.questions:
            if question.kind != "literal":
                continue
            hits = service.store.search_history(sid, history_query(question.text, k=5))
            planted = {recall.event_id(sid, i): i for i in question.evidence}
            found = [h for h in hits if h.event_id in planted]
            assert found, f"{question.text!r}: the planted message is not in the top 5"
            log = {e.id: e for e in service.events(sid)}
            for hit in found:  # the event found is the planted message, as stored
                assert log[hit.event_id].message == conv.messages[planted[hit.event_id]]
            text = " ".join(
                (m.text or "") + " ".join(r.content for r in m.tool_results)
                for m in (conv.messages[i] for i in question.evidence)
            ).lower()
            assert all(w.lower() in text for w in question.answer.split())
            checked += 1
        assert checked


# -- bench/recall_bfcl.py ----------------------------------------------------------------------

# Two BFCL multi_turn_base entries as `tool_outputs.entries` reads them (the users' turns and the
# ground-truth calls), written out here so the test needs no bfcl-eval wheel: the suite never
# downloads, and the wheel is fetched only by the bench itself (bench/.cache).
_ENTRIES = (
    (
        "multi_turn_base_0",
        (
            (
                "Move 'final_report.pdf' within document directory to 'temp' directory in "
                "document. Make sure to create the directory",
                (
                    "cd(folder='document')",
                    "mkdir(dir_name='temp')",
                    "mv(source='final_report.pdf', destination='temp')",
                ),
            ),
            (
                "Perform a detailed search using grep to identify sections in the file "
                "pertaining to 'budget analysis'.",
                (
                    "cd(folder='temp')",
                    "grep(file_name='final_report.pdf',pattern='budget analysis')",
                ),
            ),
            (
                "Upon identifying the requisite 'budget analysis' content, sort the "
                "'final_report.pdf' by line for improved clarity and comprehension.",
                ("sort('final_report.pdf')",),
            ),
            (
                "Move 'previous_report.pdf' in document directory to temp as well and having "
                "final report also there, proceed to juxtapose it with 'previous_report.pdf' to "
                "detect any critical alterations.",
                (
                    "cd(folder='..')",
                    "mv(source='previous_report.pdf',destination='temp')",
                    "cd(folder='temp')",
                    "diff(file_name1='final_report.pdf',file_name2='previous_report.pdf')",
                ),
            ),
        ),
    ),
    (
        "multi_turn_base_113",
        (
            (
                "It would mean a lot if you could include Quasar Ltd.'s stock in my watchlist. "
                "After that's completed, please let me know what's on the list so I can have a "
                "look.",
                ("add_to_watchlist(stock='QUAS')",),
            ),
            (
                "I need to see the details of each stock in my watchlist to feel reassured. Once "
                "I have that information, I am good to go.",
                (
                    "get_watchlist()",
                    "get_stock_info(symbol='NVDA')",
                    "get_stock_info(symbol='QUAS')",
                ),
            ),
        ),
    ),
)
_DOCS = {
    "grep": "Search for lines in a file of any extension at current directory that contain the "
    "specified pattern.",
    "sort": "Sort the contents of a file line by line.",
    "diff": "Compare two files of any extension line by line at the current directory.",
    "get_watchlist": "Get the watchlist.",
    "get_stock_info": "Get the details of a stock.",
}


@pytest.fixture(scope="module")
def recall_bfcl():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(_BENCH))
    bytecode = sys.dont_write_bytecode
    try:
        import recall_bfcl as module
    finally:
        sys.dont_write_bytecode = bytecode
        sys.path.remove(str(_BENCH))
    return module


def test_bfcl_questions_are_about_the_reads(recall_bfcl) -> None:  # type: ignore[no-untyped-def]
    from tool_outputs import Entry

    conv = recall_bfcl.conversation(Entry(*_ENTRIES[1]), _DOCS)
    asked = {(q.kind, q.text) for q in conv.questions}
    assert ("literal", "What did get_stock_info return for NVDA?") in asked
    assert ("paraphrase", "What came back when you had to get the details of a stock?") in asked
    assert not any("add_to_watchlist" in q.fact for q in conv.questions)  # an acknowledgement
    for question in conv.questions:
        messages = [conv.messages[i] for i in question.evidence]
        calls = [m for m in messages if m.tool_calls]
        results = [m for m in messages if m.tool_results]
        assert len(calls) == len(results) >= 1  # each result with the call that made it
        assert question.answer in " ".join(r.tool_results[0].content for r in results)
        if question.kind == "paraphrase" and "stock" in question.text:
            assert len(results) == 2  # names no symbol: either stock's result answers it


def test_bfcl_search_reaches_the_tool_results(recall_bfcl) -> None:  # type: ignore[no-untyped-def]
    from tool_outputs import Entry
    from turnlog import MemoryStore, SessionService

    conversations = [recall_bfcl.conversation(Entry(*e), _DOCS) for e in _ENTRIES]
    with SessionService(MemoryStore()) as service:
        searches = {"bm25": recall_bfcl.via(service)}
        outcomes = recall_bfcl.run(service, conversations, (2_000,), searches)[2_000]
    assert len(outcomes) == sum(len(c.questions) for c in conversations) > 10
    assert all(o.reachable["bm25"] >= o.in_view for o in outcomes)
    assert sum(o.in_view for o in outcomes) < len(outcomes)  # compaction took results out
    literal = [o for o in outcomes if o.question.kind == "literal"]
    assert all(o.found["bm25"] for o in literal), [o.question.text for o in literal]
