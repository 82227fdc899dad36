"""`HybridHistory`: BM25 fused with embeddings (the offline MiniLM), on a real SQLite store."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime

import pytest

from turnlog import AsyncSessionService, Message, SessionService, SqliteStore
from turnlog.errors import InvalidInput
from turnlog.history import SAID_AT
from turnlog.history_hybrid import HybridHistory
from turnlog.stores.sqlite_async import AsyncSqliteStore

FACT = "We adopted a kitten last week and named her Sprocket."
FILLER = [
    "Can you help me plan a garden with tomatoes and basil?",
    "The quarterly report needs a chart of revenue by region.",
    "My laptop battery drains quickly when the screen is bright.",
    "I am learning to bake sourdough bread on weekends.",
    "Which train goes from the airport to the old town?",
]


@pytest.fixture(scope="module")
def hybrid() -> HybridHistory:
    return HybridHistory()


def _fill(svc: SessionService, sid: str) -> None:
    svc.create(sid)
    svc.append_message(sid, Message.user(FACT))
    svc.append_message(sid, Message.assistant("Congratulations on the new family member!"))
    for text in FILLER:
        svc.append_message(sid, Message.user(text))
        svc.append_message(sid, Message.assistant("Sure, here is what I suggest."))


def test_an_event_said_in_other_words_is_found(tmp_path, hybrid):
    plain = SessionService(SqliteStore(tmp_path / "plain.db"))
    both = SessionService(SqliteStore(tmp_path / "both.db"), history=hybrid)
    for svc in (plain, both):
        _fill(svc, "s")
    question = "What is our cat called?"
    assert plain.search_history("s", question) == []  # no word in common
    hits = both.search_history("s", question, k=3)
    assert hits[0].seq == 1 and hits[0].snippet.startswith("We adopted a kitten")
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    # a word match still ranks first when there is one
    assert both.search_history("s", "sourdough bread", k=1)[0].seq == 9


def test_filters_hold_for_the_semantic_hits(tmp_path, hybrid):
    svc = SessionService(SqliteStore(tmp_path / "f.db"), history=hybrid)
    svc.create("f")
    svc.append_message("f", Message("user", FACT, metadata={SAID_AT: "2026-03-01T10:00:00+00:00"}))
    svc.append_message("f", Message.assistant("Lovely."))
    hits = svc.search_history("f", "name of the cat", roles=["assistant"])
    assert {h.role for h in hits} <= {"assistant"}
    before = datetime(2026, 2, 1, tzinfo=UTC)
    assert all(h.seq != 1 for h in svc.search_history("f", "name of the cat", before=before))


def test_appends_and_a_session_created_again_are_seen(tmp_path, hybrid):
    svc = SessionService(SqliteStore(tmp_path / "a.db"), history=hybrid)
    _fill(svc, "a")
    assert svc.search_history("a", "name of the cat")[0].seq == 1
    svc.append_message("a", Message.user("Our puppy is called Bolt."))
    assert svc.search_history("a", "what is the dog called", k=1)[0].seq == 13
    svc.delete("a")
    svc.create("a")
    svc.append_message("a", Message.user("The museum opens at nine."))
    hits = svc.search_history("a", "name of the cat")
    assert [h.seq for h in hits] == [1] and "museum" in hits[0].snippet


def test_the_async_service_fuses_the_same_way(tmp_path, hybrid):
    _fill(SessionService(SqliteStore(tmp_path / "x.db")), "x")

    async def main() -> list[int]:
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "x.db"), history=hybrid) as s:
            return [h.seq for h in await s.search_history("x", "name of our cat", k=2)]

    assert asyncio.run(main())[0] == 1


def test_bad_options_are_refused():
    with pytest.raises(InvalidInput):
        HybridHistory(embedder=object(), depth=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        HybridHistory(embedder=object(), keyword_weight=-1)  # type: ignore[arg-type]


def test_the_runners_recall_search_uses_the_services_hybrid(tmp_path, hybrid):
    import json

    from turnlog import CompactionWindow, ToolCall, TurnCountTrigger, WindowCompactionStrategy
    from turnlog.chat import SessionChat
    from turnlog.testing.fakes import ScriptedChatModel

    svc = SessionService(SqliteStore(tmp_path / "r.db"), history=hybrid)
    _fill(svc, "r")
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    assert not svc.compact("r", TurnCountTrigger(1), strategy).unchanged
    search = ToolCall("k1", "search_history", json.dumps({"query": "What is our cat called?"}))
    model = ScriptedChatModel([Message.assistant(None, [search]), "Her name is Sprocket."])
    chat = SessionChat(svc, model, recall=True)
    chat.send("r", "Remind me about the pet.")
    result = next(r for e in svc.events("r") if e.message for r in e.message.tool_results)
    hits = json.loads(result.content)["hits"]
    assert hits and hits[0]["seq"] == 1  # BM25 alone finds nothing (the first test)
