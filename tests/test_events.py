"""The data model: messages, event types, events, errors, and the bad input they refuse."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog import (
    CompactionBoundary,
    CorruptData,
    EventType,
    InvalidInput,
    Message,
    SessionAlreadyExists,
    SessionEvent,
    SessionNotFound,
    StoreError,
    TokenCount,
    ToolCall,
    ToolResult,
    TurnlogError,
    VersionConflict,
)
from turnlog.events import MAX_ID_LENGTH, check_id, check_json, trusted, trusted_copy
from turnlog.payloads import TOOLS_DISCOVERED, ToolsDiscovered
from turnlog.toolsearch.discovery import MAX_QUERY_CHARS, discovered_names, discovery_event

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


# -- checked constructors, the codec's trusted path ------------------------------------------------


def test_records_are_checked_when_built_and_not_on_the_trusted_path():
    with pytest.raises(InvalidInput, match="event id"):
        SessionEvent("", "s1", EventType.MESSAGE, Message.user("x"))
    with pytest.raises(InvalidInput, match="token count"):
        TokenCount("c", -1)
    # the codec's path builds from values it has checked: no check runs (here: none would pass)
    unchecked = trusted(SessionEvent, "", "s1", EventType.MESSAGE, Message.user("x"))
    assert type(unchecked) is SessionEvent and unchecked.id == ""
    assert trusted(TokenCount, "c", -1).count == -1
    event = SessionEvent.for_message("s1", Message.user("x"), event_id="e1")
    assert trusted_copy(event, id="").id == ""  # a store's copy: the caller vouches for it
    with pytest.raises(InvalidInput):  # and every build by the application is checked still
        SessionEvent.for_message("s1", Message.user("x"), event_id="")


def test_an_event_checks_the_record_it_is_given():
    boundary = CompactionBoundary("b", (), (), ("u",), 1, 0, "t")
    other = CompactionBoundary("b", (), (), ("v",), 1, 0, "t")
    with pytest.raises(InvalidInput, match="is not its payload"):
        SessionEvent("b", "s1", EventType.COMPACTION, payload=boundary.to_payload(), record=other)
    with pytest.raises(InvalidInput, match="is not its payload"):
        SessionEvent("b", "s1", EventType.COMPACTION, payload={"a": 1}, record={"a": 1})
    with pytest.raises(InvalidInput, match="no payload record"):
        SessionEvent("e", "s1", EventType.MESSAGE, Message.user("x"), record=boundary)
    made = SessionEvent(
        "b", "s1", EventType.COMPACTION, payload=boundary.to_payload(), record=boundary
    )
    assert made == boundary.to_event("s1") and made.record is boundary


# -- the payload records ---------------------------------------------------------------------------


def test_a_boundary_copies_what_it_is_given_into_tuples_and_a_dict():
    replaced = {"x": "t"}
    boundary = CompactionBoundary("b", ["p"], [], ["u", "x"], 2, 5, "t", replaced)
    replaced["y"] = "z"
    assert boundary.pinned_event_ids == ("p",) and boundary.preserved_event_ids == ("u", "x")
    assert boundary.replaced == {"x": "t"}
    assert boundary.view_event_ids == ("p", "u", "x")
    assert boundary.appended_event_ids == frozenset({"x"})


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"id": ""}, "boundary's id"),
        ({"pinned_event_ids": "p"}, "sequence of ids"),
        ({"pinned_event_ids": ("p", " ")}, "pinned_event_ids"),
        ({"preserved_event_ids": ("a\nb",)}, "control character"),
        ({"summary_event_ids": ("x" * (MAX_ID_LENGTH + 1),)}, "the limit"),
        ({"summary_event_ids": (7,)}, "string"),
        ({"covered_event_count": True}, "covered_event_count"),
        ({"tokens_estimated_saved": 1.5}, "tokens_estimated_saved"),
        ({"strategy": None}, "strategy"),
        ({"replaced": [("x", "t")]}, "replaced must map"),
        ({"replaced": {"x": ""}}, "replaced id"),
        ({"replaced": {"nope": "t"}}, "not named by the view"),
        ({"replaced": {"x": "u"}}, "both replaced and in the view"),
        ({"replaced": {"x": "x"}}, "both replaced and in the view"),
        ({"replaced": {"x": "t", "u": "t"}}, "replaced twice"),
    ],
)
def test_boundary_validation(fields, says):
    good = {
        "id": "b",
        "pinned_event_ids": ("p",),
        "summary_event_ids": (),
        "preserved_event_ids": ("u", "x"),
        "covered_event_count": 2,
        "tokens_estimated_saved": 5,
        "strategy": "t",
    }
    CompactionBoundary(**good)
    with pytest.raises(InvalidInput, match=says):
        CompactionBoundary(**{**good, **fields})


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: ToolsDiscovered("get_weather"), "sequence of names"),
        (lambda: ToolsDiscovered(("get_weather", "")), "must not be empty"),
        (lambda: ToolsDiscovered((3,)), "string"),
        (lambda: ToolsDiscovered(("f",), None), "query"),
    ],
)
def test_discovery_validation(build, says):
    with pytest.raises(InvalidInput, match=says):
        build()


def test_a_discovery_event_carries_its_record():
    event = discovery_event("s1", ["get_weather", "send_email"], "weather " * 300)
    assert event.type == TOOLS_DISCOVERED and event.record == ToolsDiscovered(
        ("get_weather", "send_email"), ("weather " * 300)[:MAX_QUERY_CHARS]
    )
    assert event.payload == event.record.to_payload()
    odd = SessionEvent.for_payload("s1", TOOLS_DISCOVERED, {"names": ["a", 3, "", "b", "a"]})
    assert odd.record is None  # written by something else: what it holds that is a name counts
    assert discovered_names([event, odd]) == ["get_weather", "send_email", "a", "b"]


_ID_TEXT = st.one_of(
    st.text(max_size=8),
    st.text(st.characters(codec="utf-8"), min_size=250, max_size=260),
    st.sampled_from(["\u0085", "\u00a0", "\u2028x", "x\u3000", " a ", "\x9f", "é", "a\n"]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_ID_TEXT, max_size=4), _ID_TEXT)
def test_a_stored_boundary_is_refused_exactly_when_its_ids_are(ids, stand_in):
    # The codec checks a stored boundary's ids in C (a pattern and a length); the oracle is
    # `check_id`, the Python check the application's ids go through.
    def ok(value):
        try:
            check_id(value, "id")
        except InvalidInput:
            return False
        return True

    payload = {
        "pinned_event_ids": ids,
        "summary_event_ids": [],
        "preserved_event_ids": [stand_in],
        "covered_event_count": 1,
        "tokens_estimated_saved": 0,
        "strategy": "t",
        "replaced": {stand_in: "orig"},
    }
    # a stand-in is named by the view (it is); what it stands in for is not
    fine = all(ok(i) for i in ids) and ok(stand_in) and "orig" not in (*ids, stand_in)
    if fine:
        boundary = CompactionBoundary.from_payload("b", payload)
        assert boundary.pinned_event_ids == tuple(ids)
    else:
        with pytest.raises(CorruptData):
            CompactionBoundary.from_payload("b", payload)
