"""event_text, the token counters, and the per-event count cache."""

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnlog import (
    CharCounter,
    EventType,
    MemoryStore,
    Message,
    O200kCounter,
    Session,
    SessionEvent,
    SqliteStore,
    TokenCounter,
    ToolCall,
    ToolResult,
    event_text,
)
from turnlog.text import message_text
from turnlog.tokens import ByteEstimateCounter, EventTokens, default_counter, event_tokens

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def message_event(message, **kwargs):
    return SessionEvent.for_message("s1", message, **kwargs)


def stored(message, seq=1):
    """An event as a store returns it: with a seq and a timestamp."""
    event = message_event(message, timestamp=NOW)
    return SessionEvent(
        id=event.id,
        session_id=event.session_id,
        type=event.type,
        message=event.message,
        seq=seq,
        timestamp=NOW,
    )


# -- event_text ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "text"),
    [
        (Message.system("x"), "System: x"),
        (Message.user("x"), "User: x"),
        (Message.assistant("x"), "Assistant: x"),
        (
            Message.assistant(tool_calls=[ToolCall("c1", "f", '{"a":1}'), ToolCall("c2", "g")]),
            'Assistant [tool calls: f({"a":1}), g({})]',
        ),
        (
            Message.assistant("let me look", [ToolCall("c1", "f")]),
            "Assistant: let me look [tool calls: f({})]",
        ),
        (
            Message.tool([ToolResult("c1", "f", "42"), ToolResult("c2", "g", "ok")]),
            "Tool [responses: f → 42, g → ok]",
        ),
        (Message.tool(ToolResult("c1", "f", "")), "Tool [responses: f → ]"),
        (Message.user("two\nlines"), "User: two\nlines"),
    ],
)
def test_event_text(message, text):
    assert event_text(message_event(message)) == text
    assert message_text(message) == text


def test_event_text_of_a_custom_event():
    event = SessionEvent.for_payload("s1", EventType.of("ACME.AUDIT"), {"k": 1})
    assert event_text(event) == "ACME.AUDIT {'k': 1}"


def test_tool_messages_count_their_full_rendering():
    call = message_event(Message.assistant(tool_calls=[ToolCall("c1", "lookup", '{"q":"x"}')]))
    result = message_event(Message.tool(ToolResult("c1", "lookup", "found")))
    assert call.message.text is None and result.message.text is None
    counter = CharCounter()
    assert event_tokens(counter).of(call) == len('Assistant [tool calls: lookup({"q":"x"})]')
    assert event_tokens(counter).of(result) == len("Tool [responses: lookup → found]")


# -- counters ------------------------------------------------------------------------------------


def test_o200k_counts_exactly():
    counter = O200kCounter()
    assert counter.count("hello world") == 2
    assert counter.count("hello") == 1
    assert counter.count("") == 0
    assert counter.count_many(["hello world", "hello", "Hello, world!"]) == [2, 1, 4]
    assert counter.count("hello " * 100) > counter.count("hello " * 10)


def test_the_default_counter_is_o200k_and_shared():
    assert isinstance(default_counter(), O200kCounter)
    assert default_counter() is default_counter()
    assert event_tokens() is event_tokens(default_counter())


@pytest.mark.parametrize(("text", "n"), [("", 0), ("abc", 3), ("héllo", 5), ("→→", 2)])
def test_char_counter(text, n):
    assert CharCounter().count(text) == n


@pytest.mark.parametrize(
    ("text", "n"),
    [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("é", 1), ("ééé", 2), ("→" * 4, 3)],
)
def test_byte_estimate_counter(text, n):
    assert ByteEstimateCounter().count(text) == n


@given(st.text())
def test_byte_estimate_is_ceil_of_utf8_bytes_over_4(text):
    assert ByteEstimateCounter().count(text) == math.ceil(len(text.encode("utf-8")) / 4)


def test_counters_satisfy_the_protocol():
    for counter in (CharCounter(), ByteEstimateCounter(), O200kCounter()):
        assert isinstance(counter, TokenCounter)
    assert not isinstance(object(), TokenCounter)


# -- the per-event cache -------------------------------------------------------------------------


class Recording:
    def __init__(self):
        self.texts = []

    def count(self, text):
        self.texts.append(text)
        return len(text)


class RecordingBatch(Recording):
    def __init__(self):
        super().__init__()
        self.batches = []

    def count_many(self, texts):
        self.batches.append(list(texts))
        return [len(t) for t in texts]


def test_stored_events_are_counted_once():
    counter = Recording()
    tokens = EventTokens(counter)
    event = stored(Message.user("hi"))
    assert tokens.of(event) == tokens.of(event) == len("User: hi")
    assert tokens.counts([event, event]) == [8, 8]
    assert counter.texts == ["User: hi"]


def test_events_not_stored_yet_are_counted_every_time():
    counter = Recording()
    tokens = EventTokens(counter)
    event = message_event(Message.user("hi"))  # no seq, no timestamp
    tokens.of(event)
    tokens.total([event])
    assert counter.texts == ["User: hi", "User: hi"]


def test_a_zero_count_is_cached_too():
    class Zero(Recording):
        def count(self, text):
            super().count(text)
            return 0

    counter = Zero()
    tokens = EventTokens(counter)
    event = stored(Message.user(""))
    assert tokens.of(event) == 0 and tokens.counts([event]) == [0]
    assert len(counter.texts) == 1


def test_uncached_events_are_counted_in_one_batch():
    counter = RecordingBatch()
    tokens = EventTokens(counter)
    a, b, c = (stored(Message.user(t), seq) for seq, t in enumerate(("a", "bb", "ccc"), 1))
    tokens.of(b)
    assert counter.batches == []
    assert tokens.counts([a, b, c]) == [7, 8, 9]
    assert counter.batches == [["User: a", "User: ccc"]]
    assert tokens.total([a, b, c]) == 24
    assert len(counter.batches) == 1


def test_the_cache_is_bounded_least_recently_used_first():
    counter = Recording()
    tokens = EventTokens(counter, maxsize=2)
    a, b, c = (stored(Message.user(t), seq) for seq, t in enumerate("abc", 1))
    tokens.of(a)
    tokens.of(b)
    tokens.of(a)  # a is now the most recently used
    tokens.of(c)  # evicts b
    counter.texts.clear()
    tokens.of(a)
    tokens.of(c)
    assert counter.texts == []
    tokens.of(b)
    assert counter.texts == ["User: b"]


def test_one_shared_cache_per_counter_object():
    one, two = CharCounter(), CharCounter()
    assert event_tokens(one) is event_tokens(one)
    assert event_tokens(one) is not event_tokens(two)


def test_a_counter_that_cannot_be_weakly_referenced_gets_a_private_cache():
    class Slotted:
        __slots__ = ()

        def count(self, text):
            return len(text)

    counter = Slotted()
    first = event_tokens(counter)
    assert first.of(stored(Message.user("x"))) == 7
    assert event_tokens(counter) is not first


class Words:
    """Counts words, so two texts of one length can have different counts."""

    def count(self, text):
        return len(text.split())


@pytest.mark.parametrize(
    ("other_session", "other_text", "other_time"),
    [
        ("chat", "hello there my friend", NOW),  # same id, seq and time; another length
        ("chat", "a b c d e", NOW + timedelta(seconds=1)),  # same length ("abcdefghi"), time
        ("other", "a b c d e", NOW),  # same id, seq, time and length; another session
    ],
    ids=["text-length", "timestamp", "session"],
)
def test_the_shared_cache_keeps_two_stores_events_apart(
    tmp_path, other_session, other_text, other_time
):
    """Two stores may hold events with one id (ids are unique only within a store): one counter
    shared by their services must not hand one store's count to the other's event."""
    counter = Words()
    first, second = MemoryStore(), SqliteStore(tmp_path / "second.db")
    for store, session_id, text, at in (
        (first, "chat", "abcdefghi", NOW),
        (second, other_session, other_text, other_time),
    ):
        store.create_session(Session(id=session_id, created_at=NOW))
        event = SessionEvent.for_message(
            session_id, Message.user(text), event_id="e1", timestamp=at
        )
        store.append_events(session_id, [event], 0)
    [a] = first.events("chat")
    [b] = second.events(other_session)
    second.close()
    assert (a.id, a.seq) == (b.id, b.seq)

    tokens = event_tokens(counter)
    expected = {"a": counter.count(event_text(a)), "b": counter.count(event_text(b))}
    assert expected["a"] != expected["b"]
    assert tokens.of(a) == expected["a"]
    assert tokens.of(b) == expected["b"]
    assert tokens.counts([b, a]) == [expected["b"], expected["a"]]
