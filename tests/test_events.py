"""The data model: messages, event types, events, errors, and the bad input they refuse."""

from datetime import UTC, datetime, timedelta

import pytest

from turnlog import (
    CorruptData,
    EventType,
    InvalidInput,
    Message,
    SessionAlreadyExists,
    SessionEvent,
    SessionNotFound,
    StoreError,
    ToolCall,
    ToolResult,
    TurnlogError,
    VersionConflict,
)
from turnlog.events import MAX_ID_LENGTH, check_id, check_json

AUDIT = EventType.of("ACME.AUDIT")


@pytest.fixture
def sid(service):
    sid = service.create().id
    service.append_message(sid, Message.user("hello"))
    return sid


# -- messages ------------------------------------------------------------------------------------


def test_message_constructors():
    assert Message.system("be terse") == Message("system", "be terse")
    assert Message.user("hi").role == "user" and Message.user("hi").text == "hi"
    reply = Message.assistant("sure")
    assert (reply.role, reply.text, reply.tool_calls) == ("assistant", "sure", ())
    call = ToolCall("c1", "f", '{"a":1}')
    calling = Message.assistant(tool_calls=[call])
    assert calling.text is None and calling.tool_calls == (call,)
    one = Message.tool(ToolResult("c1", "f", "42"))
    assert one.role == "tool" and one.text is None
    assert one.tool_results == (ToolResult("c1", "f", "42"),)
    results = [ToolResult("c1", "f", "1"), ToolResult("c2", "g", "2")]
    assert Message.tool(results).tool_results == tuple(results)
    assert ToolCall("c", "f").arguments == "{}"


def test_messages_are_immutable_and_copy_their_metadata():
    metadata = {"k": [1]}
    message = Message("user", "hi", metadata=metadata)
    metadata["k2"] = 2
    assert dict(message.metadata) == {"k": [1]}
    with pytest.raises(AttributeError):
        message.text = "changed"


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: Message("user", "x", tool_calls=(ToolCall("c", "f"),)), "assistant"),
        (lambda: Message("system", "x", tool_calls=(ToolCall("c", "f"),)), "assistant"),
        (lambda: Message("assistant", "x", tool_results=(ToolResult("c", "f", "r"),)), "tool"),
        (lambda: Message("tool", None), "ToolResult"),
        (lambda: Message.tool([]), "ToolResult"),
        (lambda: Message("robot", "x"), "system, user, assistant, tool"),
        (lambda: Message("USER", "x"), "unknown role"),
        (lambda: Message("user", 42), "string"),
        (lambda: Message("assistant", None, tool_calls=({"id": "c"},)), "ToolCall"),
        (lambda: Message("tool", None, tool_results=("42",)), "ToolResult"),
        (lambda: Message("user", "x", metadata=[("k", 1)]), "mapping"),
        (lambda: Message("user", "x", metadata={"k": {1, 2}}), "not JSON"),
    ],
)
def test_message_validation(build, says):
    with pytest.raises(InvalidInput, match=says):
        build()


@pytest.mark.parametrize(
    "build",
    [
        lambda: ToolCall(5, "f"),
        lambda: ToolCall("c", None),
        lambda: ToolCall("c", "f", {"a": 1}),
        lambda: ToolResult("c", "f", 42),
        lambda: ToolResult(None, "f", "r"),
        lambda: Message.user("\ud800"),
        lambda: ToolResult("c", "f", "bad \udfff"),
    ],
)
def test_tool_parts_and_text_must_be_storable_strings(build):
    with pytest.raises(InvalidInput):
        build()


def test_a_message_every_store_refuses_is_refused_before_any_write(service, sid):
    version = service.version(sid)
    with pytest.raises(InvalidInput):
        service.append_message(sid, Message.assistant(tool_calls=[ToolCall(5, "f")]))
    with pytest.raises(InvalidInput):
        service.append_message(sid, Message.user("lone \ud800 surrogate"))
    assert service.version(sid) == version
    assert [e.message.text for e in service.view(sid)] == ["hello"]


# -- event types ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ACME.AUDIT", "A", "A" * 64, "X1_Y.Z", "TOOL_INDEX.V2"])
def test_event_type_names(name):
    assert EventType.of(name).name == name
    assert str(EventType.of(name)) == name
    assert EventType.of(name) == EventType.of(name)


@pytest.mark.parametrize(
    "name",
    ["acme.audit", "Acme", "1ACME", "A" * 65, "", " ", "ACME AUDIT", "ACME-AUDIT", "É", None],
)
def test_bad_event_type_names(name):
    with pytest.raises(InvalidInput, match=r"for example 'ACME\.AUDIT'"):
        EventType.of(name)


def test_builtin_event_types():
    assert EventType.of("MESSAGE") == EventType.MESSAGE
    assert EventType.MESSAGE != EventType.COMPACTION != AUDIT


# -- errors --------------------------------------------------------------------------------------


def test_error_hierarchy():
    assert issubclass(SessionNotFound, KeyError)
    assert issubclass(InvalidInput, ValueError)
    assert issubclass(CorruptData, StoreError)
    for error in (
        InvalidInput,
        SessionNotFound,
        SessionAlreadyExists,
        VersionConflict,
        StoreError,
        CorruptData,
    ):
        assert issubclass(error, TurnlogError)
    assert issubclass(TurnlogError, Exception)


def test_errors_say_what_to_do():
    not_found = SessionNotFound("s1")
    assert not_found.session_id == "s1"
    assert "'s1'" in str(not_found) and "create it first" in str(not_found)
    exists = SessionAlreadyExists("s1")
    assert "get_or_create" in str(exists)
    conflict = VersionConflict("s1", 3, 5)
    assert (conflict.session_id, conflict.expected, conflict.actual) == ("s1", 3, 5)
    assert "version 5" in str(conflict) and "retry" in str(conflict)


def test_unknown_session(service):
    with pytest.raises(SessionNotFound) as info:
        service.append_message("no-such-session", Message.user("hi"))
    assert isinstance(info.value, KeyError)
    assert "create it first" in str(info.value)
    assert service.find("no-such-session") is None
    assert service.sessions() == []


# -- ids -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["", "   ", "\t", "x" * (MAX_ID_LENGTH + 1), "a\nb", "a\x00b", "a\x7fb", "\x1b[0m", 7]
)
def test_bad_ids(bad):
    with pytest.raises(InvalidInput):
        check_id(bad, "event id")
    with pytest.raises(InvalidInput):
        SessionEvent.for_message("s1", Message.user("x"), event_id=bad)
    with pytest.raises(InvalidInput):
        SessionEvent.for_message(bad, Message.user("x"))


@pytest.mark.parametrize("good", ["a", "x" * MAX_ID_LENGTH, "order-17/β", "with space"])
def test_good_ids(good):
    assert check_id(good, "event id") == good
    assert SessionEvent.for_message(good, Message.user("x"), event_id=good).id == good


@pytest.mark.parametrize("bad", ["", " ", "x" * 256, "a\nb", "a\x7f"])
def test_bad_event_ids_write_nothing(service, sid, bad):
    version = service.version(sid)
    with pytest.raises(InvalidInput):
        service.append_message(sid, Message.user("x"), event_id=bad)
    assert service.version(sid) == version


@pytest.mark.parametrize("bad", ["", "  ", "x" * 256, "a\tb"])
def test_bad_session_ids_create_nothing(service, bad):
    with pytest.raises(InvalidInput):
        service.create(bad)
    assert service.sessions() == []


def test_new_ids_are_fresh():
    a = SessionEvent.for_message("s1", Message.user("x"))
    b = SessionEvent.for_message("s1", Message.user("x"))
    assert a.id != b.id and len(a.id) == 32


# -- JSON payloads and metadata ------------------------------------------------------------------

NOT_JSON = [
    {1, 2},
    datetime(2026, 1, 1, tzinfo=UTC),
    float("nan"),
    float("inf"),
    {1: "x"},
    {"nested": [{"deeper": {(1, 2): "tuple key"}}]},
    {"k": b"bytes"},
    {"k": object()},
    {"k": "\ud800"},
    {"\udfff": 1},
]


@pytest.mark.parametrize("value", NOT_JSON)
def test_non_json_payload(value):
    with pytest.raises(InvalidInput):
        check_json(value, "payload")
    with pytest.raises(InvalidInput):
        SessionEvent.for_payload("s1", AUDIT, value)


@pytest.mark.parametrize("value", [v for v in NOT_JSON if isinstance(v, dict)])
def test_non_json_metadata(value):
    with pytest.raises(InvalidInput):
        SessionEvent.for_message("s1", Message.user("x"), metadata=value)
    with pytest.raises(InvalidInput):
        Message("user", "x", metadata=value)


def test_deep_nesting_is_refused():
    value = []
    for _ in range(70):
        value = [value]
    with pytest.raises(InvalidInput, match="nested"):
        check_json(value, "payload")


@pytest.mark.parametrize(
    "value", [None, 1, -2.5, "x", True, [], {}, {"a": [1, {"b": None}], "c": 2**70}, (1, 2)]
)
def test_json_payloads(value):
    check_json(value, "payload")
    expected = list(value) if isinstance(value, tuple) else value
    assert SessionEvent.for_payload("s1", AUDIT, value).payload == expected


@pytest.mark.parametrize("value", NOT_JSON)
def test_non_json_metadata_writes_nothing(service, sid, value):
    version = service.version(sid)
    with pytest.raises(InvalidInput):
        service.append_message(sid, Message.user("x"), metadata={"bad": value})
    with pytest.raises(InvalidInput):
        service.append_event(SessionEvent.for_payload(sid, AUDIT, {"bad": value}))
    assert service.version(sid) == version


def test_non_json_session_metadata_creates_nothing(service):
    with pytest.raises(InvalidInput):
        service.create("s1", metadata={"when": datetime(2026, 1, 1, tzinfo=UTC)})
    assert service.find("s1") is None


# -- events --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: SessionEvent("e1", "s1", EventType.MESSAGE),
        lambda: SessionEvent("e1", "s1", EventType.MESSAGE, Message.user("x"), payload={"a": 1}),
        lambda: SessionEvent("e1", "s1", AUDIT, Message.user("x")),
        lambda: SessionEvent("e1", "s1", "MESSAGE", Message.user("x")),
        lambda: SessionEvent("e1", "s1", AUDIT, payload=1, synthetic=True),
        lambda: SessionEvent.for_payload("s1", EventType.MESSAGE, {}),
        lambda: SessionEvent.for_message("s1", Message.user("x"), timestamp=datetime(2026, 1, 1)),
    ],
)
def test_event_validation(build):
    with pytest.raises(InvalidInput):
        build()


def test_event_properties():
    user = SessionEvent.for_message("s1", Message.user("x"))
    summary = SessionEvent.for_message("s1", Message.user("x"), synthetic=True)
    reply = SessionEvent.for_message("s1", Message.assistant("y"))
    audit = SessionEvent.for_payload("s1", AUDIT, {"k": 1})
    assert user.starts_turn and not summary.starts_turn and not reply.starts_turn
    assert not audit.starts_turn and not audit.is_message and audit.role is None
    assert user.is_message and reply.role == "assistant"
    assert user.seq is None and user.timestamp is None
    when = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=1)
    assert SessionEvent.for_message("s1", Message.user("x"), timestamp=when).timestamp == when


def test_stores_assign_seq_and_timestamp(service, sid):
    audit = service.append_event(SessionEvent.for_payload(sid, AUDIT, {"k": [1, 2]}))
    reply = service.append_message(sid, Message.assistant("hi"))
    assert (audit.seq, reply.seq) == (2, 3)
    assert audit.timestamp is not None and audit.timestamp.utcoffset() == timedelta(0)
    assert audit.payload == {"k": [1, 2]}
    assert audit not in service.view(sid)
    assert [e.id for e in service.events(sid)][1:] == [audit.id, reply.id]
