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
