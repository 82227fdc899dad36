"""`turnlog.rules` directly: the repairs, and a summarizer whose summary breaks R3."""

import pytest

from turnlog import (
    CompactionWindow,
    InvalidInput,
    Message,
    SessionService,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.rules import REPAIR_KEY, check_messages, repair_messages

CALL = ToolCall("c1", "f", "{}")
ASKS = Message.assistant(None, [CALL, ToolCall("c2", "g", "{}")])


def test_a_valid_conversation_is_returned_unchanged():
    messages = [
        Message.system("s"),
        Message.user("u"),
        ASKS,
        Message.tool(ToolResult("c2", "g", "2")),
        Message.tool(ToolResult("c1", "f", "1")),
        Message.assistant("a"),
        Message.user("u2"),
        Message.assistant(None, [ToolCall("c3", "f", "{}")]),  # the turn in progress
    ]
    check_messages(messages)
    assert repair_messages(messages) == messages


def test_a_tool_message_keeps_its_answers_and_its_metadata_when_orphans_are_dropped():
    tool = Message(
        "tool",
        tool_results=(ToolResult("c1", "f", "1"), ToolResult("zz", "f", "?")),
        metadata={"mine": 1},
    )
    out = repair_messages([Message.user("u"), ASKS, tool, Message.user("u2")])
    assert out[2].tool_results == (ToolResult("c1", "f", "1"),)
    assert out[2].metadata == {"mine": 1, REPAIR_KEY: "dropped orphan tool results"}
    assert out[3].metadata == {REPAIR_KEY: "missing tool results"}
    assert [r.call_id for r in out[3].tool_results] == ["c2"]
    assert out[4] == Message.user("u2")


def test_check_messages_names_the_message():
    with pytest.raises(InvalidInput, match=r"message 3 \(user\).*R2"):
        check_messages([Message.user("u"), ASKS, Message.user("again")])


def test_a_summarizer_whose_summary_starts_with_the_assistant_writes_nothing(service):
    sid = service.create().id
    for n in range(3):
        service.append_message(sid, Message.user(f"u{n}"))
        service.append_message(sid, Message.assistant(f"a{n}"))
    strategy = WindowCompactionStrategy(
        CompactionWindow.last_turns(1), summarizer=lambda request: [Message.assistant("recap")]
    )
    with pytest.raises(InvalidInput, match="starts with a user message"):
        service.compact(sid, lambda request: True, strategy)
    assert service.version(sid) == 6


def test_a_session_service_sends_the_repaired_view(service: SessionService):
    sid = service.create().id
    service.append_message(sid, Message.assistant("hello"), check_rules=False)
    sent = service.view_messages(sid)
    assert [m.role for m in sent] == ["user", "assistant"]
    assert service.view(sid)[0].message == Message.assistant("hello")  # the view is as stored
