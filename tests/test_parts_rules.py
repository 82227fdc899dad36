"""The view rules with content parts (issue 25, item 4): a message whose content is only parts
is content; an assistant message with nothing but reasoning is still empty."""

from __future__ import annotations

import pytest

from turnlog import (
    FilePart,
    ImagePart,
    InvalidInput,
    Message,
    ProviderPart,
    ReasoningPart,
    TextPart,
    ToolCall,
)
from turnlog.rules import check_messages, repair_messages

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f01f00050001ff89993d1d"
    "0000000049454e44ae426082"
)
IMAGE = ImagePart("image/png", data=PNG, width=1, height=1)
THINKING = ReasoningPart("anthropic", "The user wants a dot.", signature="sig")

ACCEPTED = {
    "reasoning and text": Message.assistant(parts=[THINKING, "A dot."]),
    "an image": Message.assistant(parts=[IMAGE]),
    "reasoning and an image": Message.assistant(parts=[THINKING, IMAGE]),
    "a file": Message.assistant(parts=[FilePart("text/csv", data=b"a,b\n")]),
    "a provider's block": Message.assistant(
        parts=[ProviderPart("anthropic", "server_tool_use", {"id": "s1", "name": "web_search"})]
    ),
    "reasoning and a call": Message.assistant(
        tool_calls=[ToolCall("c1", "f", "{}")], parts=[THINKING]
    ),
}
REFUSED = {
    "reasoning alone": Message.assistant(parts=[THINKING]),
    "redacted reasoning alone": Message.assistant(
        parts=[ReasoningPart("anthropic", encrypted="opaque", redacted=True)]
    ),
    "reasoning and blanks": Message.assistant(parts=[THINKING, TextPart("  \n")]),
}


@pytest.mark.parametrize("name", ACCEPTED)
def test_an_assistant_message_of_parts_is_accepted(service, name):
    sid = service.create().id
    service.append_message(sid, Message.user("Draw a dot."))
    stored = service.append_message(sid, ACCEPTED[name])
    assert stored.message == ACCEPTED[name]
    check_messages([Message.user("Draw a dot."), ACCEPTED[name]])


@pytest.mark.parametrize("name", REFUSED)
def test_an_assistant_message_with_nothing_but_reasoning_is_empty(service, name):
    sid = service.create().id
    service.append_message(sid, Message.user("Draw a dot."))
    with pytest.raises(InvalidInput, match="is empty"):
        service.append_message(sid, REFUSED[name])
    assert service.version(sid) == 1  # nothing written
    with pytest.raises(InvalidInput, match=r"message 2 .* is empty"):
        check_messages([Message.user("Draw a dot."), REFUSED[name]])


def test_a_user_message_that_is_only_an_image_is_accepted(service):
    sid = service.create().id
    service.append_message(sid, Message.user(IMAGE))
    service.append_message(sid, Message.assistant("A dot."))
    assert [e.message.role for e in service.view(sid)] == ["user", "assistant"]


def test_the_repair_keeps_parts_and_drops_reasoning_alone():
    image_reply = Message.assistant(parts=[IMAGE])
    messages = [
        Message.user("Draw a dot."),
        Message.assistant(parts=[THINKING]),
        image_reply,
        Message.user(IMAGE),
    ]
    assert repair_messages(messages) == [messages[0], image_reply, messages[3]]
