"""Token counts stored with the events at append (issue 11, item 1): counted once by the
service's counter, read back by every later pass, trusted only by the counter that made them,
and filled in for old logs by `record_tokens` / `turnlog migrate --tokens`."""

from __future__ import annotations

import pytest

from turnlog import (
    CharCounter,
    CompactionWindow,
    InvalidInput,
    Message,
    O200kCounter,
    SessionService,
    SqliteStore,
    TokenCount,
    TokenCountTrigger,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.cli import main
from turnlog.text import event_text
from turnlog.tokens import counter_identity


class CountingCounter:
    """One token per word, counting how many texts it was asked to count."""

    def __init__(self, identity: str | None = "words/1") -> None:
        if identity is not None:
            self.identity = identity
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return len(text.split())


def talk(svc: SessionService, sid: str, turns: int, weather: str = "3 C and rain") -> None:
    svc.get_or_create(sid)
    svc.append_message(sid, Message.system("You are terse."))
    for n in range(turns):
        svc.append_message(sid, Message.user(f"question number {n} about the weather"))
        call = ToolCall(f"c{n}", "weather", '{"city": "Oslo"}')
        svc.append_message(sid, Message.assistant(tool_calls=[call]))
        svc.append_message(sid, Message.tool(ToolResult(call.id, "weather", weather)))
        svc.append_message(sid, Message.assistant(f"answer {n}: it rains"))


def test_the_default_service_stores_exact_o200k_counts(tmp_path):
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        talk(svc, "s", 3)
    oracle = O200kCounter()
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        events = svc.events("s")
    assert len(events) == 13
    for e in events:
        assert e.tokens == TokenCount(oracle.identity, oracle.count(event_text(e)))
    assert oracle.identity.startswith("o200k_base toktok-rs/")


def test_a_pass_with_the_same_counter_tokenizes_nothing(tmp_path):
    writer = CountingCounter()
    with SessionService(SqliteStore(tmp_path / "t.db"), token_counter=writer) as svc:
        talk(svc, "s", 20)
    assert writer.calls == 81  # each message once, at append
    fresh = CountingCounter()  # a new process: same counter, empty caches
    strategy = WindowCompactionStrategy(CompactionWindow.token_budget(40), token_counter=fresh)
    trigger = TokenCountTrigger(50, token_counter=fresh, reported=False)
    with SessionService(SqliteStore(tmp_path / "t.db"), token_counter=fresh) as svc:
        result = svc.compact("s", trigger, strategy)
    assert not result.unchanged and result.tokens_estimated_saved > 0
    assert fresh.calls == 0
    # the same pass on the same log by a counter that counts everything: the same figures
    counted = CountingCounter("words/2")
    recount = WindowCompactionStrategy(CompactionWindow.token_budget(40), token_counter=counted)
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        view = svc.view("s")
    svc_view = [e for e in view]
    assert counted.calls == 0
    from turnlog import CompactionRequest, Session

    session = Session("s", created_at=view[0].timestamp)
    before = recount.compact(CompactionRequest.of(session, svc_view))
    assert counted.calls > 0
    assert before.unchanged  # the view is already compacted: it fits


def test_a_count_of_another_counter_is_not_trusted(tmp_path):
    with SessionService(SqliteStore(tmp_path / "t.db"), token_counter=CharCounter()) as svc:
        talk(svc, "s", 2)
        events = svc.events("s")
    assert all(e.tokens is not None and e.tokens.counter == "chars/1" for e in events)
    newer = CountingCounter("chars/2")  # the same name, another version
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1), token_counter=newer)
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        result = svc.compact("s", lambda r: True, strategy)
    assert newer.calls == len(result.covered_events)  # counted, not read
    expected = sum(len(event_text(e).split()) for e in result.covered_events)
    assert result.tokens_estimated_saved == expected


def test_a_counter_without_identity_stores_nothing(tmp_path):
    anonymous = CountingCounter(identity=None)
    assert counter_identity(anonymous) is None
    with SessionService(SqliteStore(tmp_path / "t.db"), token_counter=anonymous) as svc:
        talk(svc, "s", 1)
        assert all(e.tokens is None for e in svc.events("s"))
        with pytest.raises(InvalidInput, match="no identity"):
            svc.record_tokens("s")
    assert anonymous.calls == 0


def test_record_tokens_false_appends_without_counting(tmp_path):
    counter = CountingCounter()
    store = SqliteStore(tmp_path / "t.db")
    with SessionService(store, token_counter=counter, record_tokens=False) as svc:
        talk(svc, "s", 2)
        assert all(e.tokens is None for e in svc.events("s"))
        with pytest.raises(InvalidInput, match="record_tokens=False"):
            svc.record_tokens("s")
    assert counter.calls == 0


def test_summary_events_of_a_compaction_are_counted(tmp_path):
    from turnlog import ExtractiveSummarizer

    counter = CountingCounter()
    report = " ".join(["3 C, rain, wind from the west at 20 km/h"] * 10)  # a long tool result
    with SessionService(SqliteStore(tmp_path / "t.db"), token_counter=counter) as svc:
        talk(svc, "s", 4, weather=report)  # so that the summary is smaller than what it covers
        strategy = WindowCompactionStrategy(
            CompactionWindow.last_turns(1), summarizer=ExtractiveSummarizer()
        )
        result = svc.compact("s", lambda r: True, strategy)
        assert result.summary
        stored = [e for e in svc.events("s") if e.synthetic]
    assert len(stored) == len(result.summary) == 2
    for e in stored:
        assert e.tokens == TokenCount("words/1", len(event_text(e).split()))


def test_backfill_fills_in_an_old_log_once(tmp_path):
    with SessionService(SqliteStore(tmp_path / "t.db"), record_tokens=False) as svc:
        talk(svc, "s", 3)
        before = svc.events("s")
    counter = CountingCounter()
    with SessionService(SqliteStore(tmp_path / "t.db"), token_counter=counter) as svc:
        assert svc.record_tokens("s") == 13
        assert svc.record_tokens("s") == 0  # nothing left to count
        after = svc.events("s")
    assert counter.calls == 13
    assert after == before and [e.seq for e in after] == [e.seq for e in before]
    assert [e.tokens for e in after] == [
        TokenCount("words/1", len(event_text(e).split())) for e in before
    ]


def test_migrate_tokens_backfills_every_session(tmp_path, capsys):
    db = tmp_path / "t.db"
    with SessionService(SqliteStore(db), record_tokens=False) as svc:
        talk(svc, "a", 1)
        talk(svc, "b", 2)
    assert main(["migrate", "--db", str(db), "--tokens"]) == 0
    assert "token counts stored for 14 events in 2 sessions" in capsys.readouterr().out
    oracle = O200kCounter()
    with SessionService(SqliteStore(db)) as svc:
        for sid in ("a", "b"):
            for e in svc.events(sid):
                assert e.tokens == TokenCount(oracle.identity, oracle.count(event_text(e)))
    assert main(["migrate", "--db", str(db), "--tokens"]) == 0
    assert "token counts stored for 0 events in 2 sessions" in capsys.readouterr().out


def test_o200k_counts_match_the_batch_api():
    import toktok

    counter = O200kCounter()
    texts = ["", "hello", "<|endoftext|> is plain text here", "héllo wörld 你好 " * 50]
    expected = [int(n) for n in toktok.batch_count(texts, "o200k_base", 1)]
    assert [counter.count(t) for t in texts] == expected
    assert counter.count_many(texts) == expected


def test_a_token_count_is_checked():
    with pytest.raises(InvalidInput):
        TokenCount("", 3)
    with pytest.raises(InvalidInput):
        TokenCount("c/1", -1)
    with pytest.raises(InvalidInput):
        TokenCount("c/1", True)
    from turnlog import EventType, SessionEvent

    audit = SessionEvent.for_payload("s", EventType.of("ACME.AUDIT"), {"a": 1})
    with pytest.raises(InvalidInput):
        audit.with_tokens(TokenCount("c/1", 1))


def test_load_builds_the_vocabulary_once(tmp_path):
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import toktok
        from turnlog import O200kCounter
        counter = O200kCounter()
        before = len(toktok._CACHE)
        counter.load()
        O200kCounter().load()
        print(before, len(toktok._CACHE), counter.count("hello world, how many tokens?"))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "7"]
