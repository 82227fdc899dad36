"""Content parts: built with checks, stored by the one codec, read back exactly on every store.

The bodies in tests/fixtures/bodies_v1_parts.json never change: each decodes to the message
built here by hand and encodes back to the same bytes.
"""

import base64
import hashlib
import json
import re
import uuid
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnlog
from turnlog import (
    AudioPart,
    CorruptData,
    FilePart,
    ImagePart,
    InvalidInput,
    Message,
    ProviderPart,
    ReasoningPart,
    SessionEvent,
    TextPart,
    TokenCount,
    ToolCall,
    ToolResult,
    event_text,
)
from turnlog.codec import decode_event, encode_body, events_from_rows, message_ids

ROOT = Path(__file__).parent
FIXTURES = json.loads((ROOT / "fixtures" / "bodies_v1_parts.json").read_text("utf-8"))
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)
REF = "sha256:" + "0123456789abcdef" * 4


def _decode(body, event_id="e", type_name="MESSAGE"):
    return decode_event(
        event_id=event_id,
        session_id="s",
        seq=1,
        type_name=type_name,
        timestamp_micros=1_700_000_000_000_000,
        synthetic=False,
        body=body if isinstance(body, bytes) else body.encode(),
    )


def _round_trip(message, **event):
    body = encode_body(SessionEvent.for_message("s", message, event_id="e", **event))
    return _decode(body).message


# What each fixture body holds, built by hand.
EXPECTED = {
    "user_image": Message.user(
        "What is in this picture?",
        ImagePart("image/png", data=PNG, detail="high", width=1, height=1, filename="dot.png"),
    ),
    "user_image_url_ref": Message.user(
        ImagePart("image/jpeg", url="https://example.com/cat.jpg", detail="low"),
        "and this one?",
        ImagePart("image/webp", ref=REF, size=150000, width=1024, height=768),
    ),
    "user_file_audio": Message.user(
        "Summarize both.",
        FilePart(
            "application/pdf", data=b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", name="report.pdf", pages=12
        ),
        AudioPart("audio/wav", ref=REF, size=56044, seconds=3.2),
        FilePart("text/csv", url="https://example.com/t.csv"),
    ),
    "system_file": Message.system(
        "Answer from this handbook.",
        FilePart("application/pdf", ref=REF, size=48213, name="handbook.pdf"),
    ),
    "assistant_reasoning_tools": Message.assistant(
        parts=[
            ReasoningPart(
                "anthropic",
                "The user wants the weather; call the tool.",
                signature="EqQBCkYIBxgCKkBsig==",
            ),
            ReasoningPart(
                "anthropic",
                encrypted="EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP",
                redacted=True,
            ),
            "Checking.",
        ],
        tool_calls=[ToolCall("toolu_1", "get_weather", '{"city":"Oslo"}')],
    ),
    "assistant_openai_reasoning": Message.assistant(
        parts=[
            ReasoningPart("openai", "**Planning** the answer", encrypted="gAAAAABoRqXl0"),
            "It is 3 C in Oslo.",
        ]
    ),
    "assistant_provider": Message.assistant(
        parts=[
            ProviderPart(
                "anthropic",
                "server_tool_use",
                {"id": "srvtoolu_1", "name": "web_search", "input": {"query": "oslo weather"}},
            ),
            ProviderPart(
                "anthropic",
                "web_search_tool_result",
                {
                    "tool_use_id": "srvtoolu_1",
                    "content": [
                        {
                            "type": "web_search_result",
                            "url": "https://yr.no",
                            "title": "Yr",
                            "page_age": None,
                            "encrypted_content": "Eo8B",
                        }
                    ],
                },
            ),
            "Rain, 3 C.",
            ImagePart("image/png", data=PNG),
        ]
    ),
    "tool_image": Message.tool(
        [
            ToolResult(
                "c1",
                "screenshot",
                "",
                parts=(TextPart("The page:"), ImagePart("image/png", data=PNG, width=1, height=1)),
            ),
            ToolResult(
                "c2",
                "fetch",
                "",
                is_error=True,
                parts=(
                    TextPart("not a PDF: "),
                    FilePart("application/octet-stream", data=b"\x00\x01", name="blob.bin"),
                ),
            ),
            ToolResult("c3", "get_time", "09:00"),
        ]
    ),
}


def test_the_parts_fixtures_cover_every_part_kind():
    assert set(FIXTURES) == set(EXPECTED)
    kinds = set()
    for message in EXPECTED.values():
        for part in message.parts + tuple(p for r in message.tool_results for p in r.parts):
            kinds.add(type(part))
    assert kinds == {TextPart, ImagePart, FilePart, AudioPart, ReasoningPart, ProviderPart}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_parts_fixture_decodes_to_the_message_built_by_hand(name):
    event = _decode(FIXTURES[name]["body"], event_id=name)
    assert event.message == EXPECTED[name]
    assert event.message.text == EXPECTED[name].text
    assert [type(p) for p in event.message.parts] == [type(p) for p in EXPECTED[name].parts]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_parts_fixture_encodes_back_to_the_same_bytes(name):
    event = _decode(FIXTURES[name]["body"], event_id=name)
    assert encode_body(event).decode() == FIXTURES[name]["body"]


def test_the_fixture_details_read_back():
    event = _decode(FIXTURES["user_image"]["body"])
    assert event.tokens == TokenCount("o200k_base toktok-rs/0.3.0", 27)
    image = event.message.parts[1]
    assert (image.data, image.size, image.detail) == (PNG, 70, "high")
    tools = _decode(FIXTURES["tool_image"]["body"]).message.tool_results
    assert [r.content for r in tools] == ["The page:", "not a PDF: ", "09:00"]
    assert [r.is_error for r in tools] == [False, True, False]
    assert tools[2].parts == ()


def test_msgspec_generic_decode_of_a_body_is_the_object_built_by_hand():
    message = Message.user("Look:", ImagePart("image/png", data=b"\x00\xff", width=2, height=1))
    body = encode_body(SessionEvent.for_message("s", message, event_id="e"))
    assert msgspec.json.decode(body) == {
        "v": 1,
        "message": {
            "role": "user",
            "text": "Look:",
            "parts": [
                {"type": "text", "text": "Look:"},
                {
                    "type": "image",
                    "media_type": "image/png",
                    "data": "AP8=",
                    "size": 2,
                    "width": 2,
                    "height": 1,
                },
            ],
        },
    }


# -- text-only messages stay as they were


def test_a_message_of_text_alone_has_no_parts_however_it_is_built():
    plain = Message.user("hello")
    assert Message.user("hel", "lo") == plain
    assert Message("user", parts=(TextPart("hello"),)) == plain
    assert Message("user", "hello", parts=[TextPart("he"), TextPart("llo")]) == plain
    assert Message.assistant(parts=["ok"]) == Message.assistant("ok")
    assert plain.parts == ()
    assert encode_body(SessionEvent.for_message("s", Message.user("he", "llo"), event_id="e")) == (
        b'{"v":1,"message":{"role":"user","text":"hello"}}'
    )
    assert ToolResult("c", "t", "", parts=(TextPart("x"),)) == ToolResult("c", "t", "x")


def test_text_is_derived_from_the_text_parts():
    image = ImagePart("image/png", data=PNG)
    assert Message.user("a", image, "b").text == "ab"
    assert Message.user(image).text is None
    assert Message.user("a", image).parts == (TextPart("a"), image)
    assert Message("user", "a", parts=(TextPart("a"), image)).text == "a"  # the same text: fine
    assert ToolResult("c", "t", "", parts=(image,)).content == ""
    assert ToolResult("c", "t", "see", parts=(TextPart("see"), image)).content == "see"


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda i: Message("user", "other", parts=(TextPart("a"), i)), "differs from the text"),
        (lambda i: Message("user", "a", parts=(i,)), "differs from the text"),
        (lambda i: ToolResult("c", "t", "other", parts=(i,)), "content 'other' differs"),
        (lambda i: Message.assistant("a", parts=[i]), "not both"),
        (lambda i: Message.user(), r"Message.user\(\) needs content"),
        (lambda i: Message.user("a", b"raw"), "must hold parts"),
        (lambda i: Message.user(ReasoningPart("anthropic", "x")), "only assistant"),
        (lambda i: ToolResult("c", "t", "", parts=(ReasoningPart("a"),)), "only assistant"),
        (
            lambda i: Message("tool", parts=(i,), tool_results=(ToolResult("c", "t", "x"),)),
            "its results",
        ),
        (lambda i: Message("user", parts="text"), "sequence of parts"),
    ],
)
def test_messages_with_bad_parts_are_refused(build, match):
    with pytest.raises(InvalidInput, match=match):
        build(ImagePart("image/png", data=PNG))


# -- part checks


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: ImagePart("png", data=b"x"), "media_type 'png' is not a media type"),
        (lambda: ImagePart("image/png; q=1", data=b"x"), "not a media type"),
        (lambda: ImagePart("application/pdf", data=b"x"), r"is not image/\*"),
        (lambda: AudioPart("video/mp4", data=b"x"), r"is not audio/\*"),
        (lambda: FilePart(3, data=b"x"), "media_type must be a string"),
        (lambda: ImagePart("image/png"), "exactly one of data, url and ref, got none"),
        (lambda: FilePart("text/csv", data=b"x", url="https://a/b"), "got data and url"),
        (lambda: AudioPart("audio/wav", url="https://a", ref=REF), "got url and ref"),
        (lambda: ImagePart("image/png", ref=REF, size=-1), "size must be >= 0"),
        (lambda: ImagePart("image/png", ref=REF, size=True), "size must be an integer"),
        (lambda: ImagePart("image/png", data=b"abc", size=4), "size is 4 but its data holds 3"),
        (lambda: ImagePart("image/png", ref="sha256:abc"), "ref 'sha256:abc' is not an attach"),
        (lambda: ImagePart("image/png", ref="md5:" + "0" * 32), "is not an attachment reference"),
        (lambda: ImagePart("image/png", ref="SHA256:" + "A" * 64), "not an attachment reference"),
        (lambda: ImagePart("image/png", url="cat.png"), "url 'cat.png' is not a URL"),
        (lambda: ImagePart("image/png", url="https://a b"), "is not a URL"),
        (lambda: ImagePart("image/png", data="iVBOR"), "data must be bytes"),
        (lambda: ImagePart("image/png", data=b"x", detail="ultra"), "detail 'ultra' is not one"),
        (lambda: ImagePart("image/png", data=b"x", width=0), "width must be >= 1"),
        (lambda: ImagePart("image/png", data=b"x", height=2.5), "height must be an integer"),
        (lambda: ImagePart("image/png", data=b"x", filename=" "), "filename must not be blank"),
        (lambda: FilePart("application/pdf", data=b"x", pages=0), "pages must be >= 1"),
        (lambda: AudioPart("audio/wav", data=b"x", seconds=-1), "seconds must be a finite"),
        (lambda: AudioPart("audio/wav", data=b"x", seconds=float("nan")), "seconds must be a fin"),
        (lambda: AudioPart("audio/wav", data=b"x", seconds="3"), "seconds must be a number"),
        (lambda: TextPart("\ud800"), "text part text holds a lone surrogate"),
        (lambda: TextPart(None), "text part text must be a string"),
        (lambda: ReasoningPart(""), "reasoning part provider must not be blank"),
        (lambda: ReasoningPart("openai", redacted=1), "redacted must be a bool"),
        (lambda: ReasoningPart("openai", signature=b"s"), "signature must be a string"),
        (lambda: ProviderPart("anthropic", "", {}), "provider part kind must not be blank"),
        (lambda: ProviderPart("anthropic", "citation", {"x": {1, 2}}), "holds a set"),
        (lambda: ProviderPart("anthropic", "citation", float("inf")), "which JSON cannot carry"),
    ],
)
def test_a_bad_part_is_refused_naming_the_field(build, match):
    with pytest.raises(InvalidInput, match=match):
        build()


def test_a_part_keeps_what_it_was_given_in_the_form_stores_return():
    assert ImagePart("image/png", data=bytearray(b"ab")).data == b"ab"
    assert ImagePart("image/png", data=memoryview(b"ab")).size == 2
    assert AudioPart("audio/wav", url="https://a/b.wav", seconds=3).seconds == 3.0
    assert ProviderPart("x", "y", {"a": (1, 2)}).data == {"a": [1, 2]}
    assert ImagePart("image/png", url="https://a/b.png").size is None


def test_a_repr_shows_the_size_not_the_bytes():
    image = ImagePart("image/png", data=b"\x00" * 150_000, width=1024, height=768)
    assert repr(image) == "ImagePart('image/png', data=<150,000 bytes>, width=1024, height=768)"
    assert len(repr(Message.user("hi", image))) < 300
    assert repr(FilePart("application/pdf", ref=REF, size=9, pages=2)) == (
        f"FilePart('application/pdf', ref={REF!r}, pages=2, size=9)"
    )
    reasoning = ReasoningPart("openai", encrypted="x" * 10_000, redacted=True)
    assert len(repr(reasoning)) < 120 and "10,000 characters" in repr(reasoning)


def test_parts_compare_by_value():
    assert ImagePart("image/png", data=b"ab") == ImagePart("image/png", data=b"ab")
    assert ImagePart("image/png", data=b"ab") != ImagePart("image/png", data=b"ac")
    assert ImagePart("image/png", data=b"ab") != ImagePart("image/png", ref=REF, size=2)
    assert Message.user("a", ImagePart("image/png", data=b"ab")) != Message.user(
        "a", ImagePart("image/png", data=b"ab", filename="x.png")
    )


# -- unknown kinds in stored data


def test_a_part_of_an_unknown_kind_reads_back_as_a_provider_part():
    body = (
        '{"v":1,"message":{"role":"assistant","text":"Here.","parts":['
        '{"type":"hologram","frames":[1,2],"meta":{"fps":24}},{"type":"text","text":"Here."}]}}'
    )
    message = _decode(body).message
    assert message.parts == (
        ProviderPart(
            "unknown", "hologram", {"type": "hologram", "frames": [1, 2], "meta": {"fps": 24}}
        ),
        TextPart("Here."),
    )
    assert message.text == "Here."


def test_an_unknown_kind_in_a_tool_result_and_beside_known_parts_reads_back():
    image = {"type": "image", "media_type": "image/png", "data": "AP8=", "size": 2}
    body = json.dumps(
        {
            "v": 1,
            "message": {
                "role": "tool",
                "tool_results": [
                    ["c1", "t", "", False, [image, {"type": "video", "seconds": 3}]],
                    ["c2", "t", "ok"],
                ],
            },
        }
    )
    [first, second] = _decode(body).message.tool_results
    assert first.parts == (
        ImagePart("image/png", data=b"\x00\xff"),
        ProviderPart("unknown", "video", {"type": "video", "seconds": 3}),
    )
    assert second == ToolResult("c2", "t", "ok")


@pytest.mark.parametrize(
    "parts",
    [
        '[{"type":"hologram"},{"type":"image","media_type":"image/png","width":"wide"}]',
        '[{"type":"hologram"},{"type":"text","text":7}]',
        '[{"text":"no type"}]',
        '[{"type":"hologram"},"not an object"]',
        '{"type":"hologram"}',
    ],
)
def test_a_body_damaged_besides_an_unknown_kind_is_still_corrupt_data(parts):
    body = '{"v":1,"message":{"role":"user","text":"x","parts":' + parts + "}}"
    with pytest.raises(CorruptData, match="seq 1"):
        _decode(body)


def test_a_whole_log_with_an_unknown_kind_reads_every_row():
    good = encode_body(SessionEvent.for_message("s", Message.user("q"), event_id="a"))
    odd = b'{"v":1,"message":{"role":"assistant","parts":[{"type":"hologram"}]}}'
    rows = [(i + 1, f"e{i}", "MESSAGE", i, False, odd if i == 7 else good) for i in range(40)]
    events = events_from_rows("s", rows)
    assert [e.message.parts for e in events if e.message.parts] == [
        (ProviderPart("unknown", "hologram", {"type": "hologram"}),)
    ]


def test_message_ids_reads_a_tool_result_with_parts():
    message = Message.tool(
        [
            ToolResult("c1", "t", "", parts=(ImagePart("image/png", data=PNG),)),
            ToolResult("c2", "t", "x"),
        ]
    )
    assert message_ids(encode_body(SessionEvent.for_message("s", message))) == ["c1", "c2"]


# -- the rendering summaries and token estimates read


def test_event_text_renders_parts_as_notes():
    image = ImagePart(
        "image/png", ref=REF, size=150_000, width=1024, height=768, filename="cat.png"
    )
    pdf = FilePart("application/pdf", url="https://a/report.pdf", name="report.pdf", pages=12)
    clip = AudioPart("audio/wav", url="https://a/b.wav", seconds=3.21)
    user = SessionEvent.for_message("s", Message.user("What is this?", image, pdf, clip, "ok?"))
    assert event_text(user) == (
        "User: What is this? [image: image/png, 1024x768, cat.png, 150,000 bytes, "
        f"{REF[:19]}] "  # an attachment is named by the start of its reference
        "[file: application/pdf, report.pdf, 12 pages] [audio: audio/wav, 3.2 s] ok?"
    )
    reply = Message.assistant(
        parts=[
            ReasoningPart("anthropic", "secret thoughts", signature="sig"),
            ReasoningPart("anthropic", encrypted="e", redacted=True),
            ProviderPart("anthropic", "web_search_tool_result", {}),
            "Done.",
        ],
        tool_calls=[ToolCall("c1", "f", "{}")],
    )
    rendered = event_text(SessionEvent.for_message("s", reply))
    assert rendered == (
        "Assistant: [reasoning] [reasoning, redacted] "
        "[provider: anthropic, web_search_tool_result] Done. [tool calls: f({})]"
    )
    assert "secret" not in rendered
    tool = Message.tool(
        ToolResult("c1", "f", "", parts=(TextPart("shot:"), ImagePart("image/jpeg", data=b"xy")))
    )
    assert event_text(SessionEvent.for_message("s", tool)) == (
        "Tool [responses: f → shot: [image: image/jpeg, 2 bytes]]"
    )


def test_event_text_of_a_text_message_is_unchanged():
    assert event_text(SessionEvent.for_message("s", Message.user("a", "b"))) == "User: ab"


# -- a property: random parts round-trip the codec exactly

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_name = _text.filter(str.strip)
_ref = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h)
_url = st.sampled_from(["https://example.com/a.png", "gs://bucket/x", "data:image/png;base64,AA"])
_size = st.none() | st.integers(0, 2**40)
_source = st.one_of(
    st.fixed_dictionaries({"data": st.binary(max_size=64)}),
    st.fixed_dictionaries({"url": _url, "size": _size}),
    st.fixed_dictionaries({"ref": _ref, "size": _size}),
)
_dim = st.none() | st.integers(1, 10_000)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_part = st.one_of(
    st.builds(TextPart, _text),
    st.builds(
        lambda src, **kw: ImagePart(**src, **kw),
        _source,
        media_type=st.sampled_from(["image/png", "image/jpeg", "image/svg+xml"]),
        detail=st.none() | st.sampled_from(["auto", "low", "high"]),
        width=_dim,
        height=_dim,
        filename=st.none() | _name,
    ),
    st.builds(
        lambda src, **kw: FilePart(**src, **kw),
        _source,
        media_type=st.sampled_from(["application/pdf", "text/csv", "application/vnd.ms-excel"]),
        name=st.none() | _name,
        pages=_dim,
    ),
    st.builds(
        lambda src, **kw: AudioPart(**src, **kw),
        _source,
        media_type=st.sampled_from(["audio/wav", "audio/mpeg"]),
        seconds=st.none() | st.floats(0, 1e6, allow_nan=False),
    ),
    st.builds(
        ReasoningPart,
        _name,
        text=st.none() | _text,
        signature=st.none() | _text,
        encrypted=st.none() | _text,
        redacted=st.booleans(),
    ),
    st.builds(ProviderPart, _name, _name, _json),
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(_part, max_size=6), role=st.sampled_from(["user", "assistant", "system"]))
def test_random_parts_round_trip_the_codec_exactly(parts, role):
    if role != "assistant":
        parts = [p for p in parts if type(p) is not ReasoningPart]
    message = Message(role, parts=tuple(parts)) if parts else Message(role, "")
    back = _round_trip(message)
    assert back == message
    assert back.text == message.text and back.parts == message.parts
    assert [type(p) for p in back.parts] == [type(p) for p in message.parts]
    tool = Message.tool(
        ToolResult("c", "t", "", parts=tuple(p for p in parts if type(p) is not ReasoningPart))
    )
    assert _round_trip(tool) == tool


# -- on real stores


HANDBOOK = b"%PDF-1.4\n" + bytes(20_000)  # over 16 KiB: the store keeps it apart


def _every_kind(sid):
    return [
        Message.system(
            "Answer from the handbook.", FilePart("application/pdf", data=HANDBOOK, name="h.pdf")
        ),
        Message.user(
            "What is in this picture?",
            ImagePart("image/png", data=PNG, width=1, height=1, filename="dot.png"),
            AudioPart("audio/wav", url="https://example.com/q.wav", seconds=2.5),
        ),
        Message.assistant(
            parts=[ReasoningPart("anthropic", "look closer", signature="sig"), "Let me zoom in."],
            tool_calls=[ToolCall("c1", "zoom", '{"x": 2}')],
        ),
        Message.tool(
            ToolResult(
                "c1", "zoom", "", parts=(TextPart("zoomed:"), ImagePart("image/png", data=PNG))
            )
        ),
        Message.assistant(
            parts=[
                ProviderPart("anthropic", "citation", {"cited_text": "a dot", "n": [1, 2.5]}),
                "A dot.",
            ]
        ),
    ]


def _append_and_read(service):
    sid = service.create().id
    messages = _every_kind(sid)
    appended = [service.append_message(sid, m) for m in messages]
    log = service.events(sid)
    handbook = "sha256:" + hashlib.sha256(HANDBOOK).hexdigest()
    kept = FilePart("application/pdf", ref=handbook, size=len(HANDBOOK), name="h.pdf")
    stored = [Message.system("Answer from the handbook.", kept), *messages[1:]]
    assert [e.message for e in log] == stored
    assert log == appended
    assert [e.message for e in service.view(sid)] == stored
    assert [e.message.text for e in log] == [m.text for m in messages]
    assert service.attachment(sid, handbook) == HANDBOOK


def test_every_part_kind_is_stored_and_read_back(service):
    _append_and_read(service)


def test_every_part_kind_on_postgresql(postgres_dsn):
    import psycopg
    from psycopg import sql

    from turnlog import PostgresStore, SessionService

    schema = f"tl_parts_{uuid.uuid4().hex[:12]}"
    try:
        with SessionService(PostgresStore(postgres_dsn, schema=schema)) as service:
            _append_and_read(service)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_every_part_kind_on_redis(redis_url):
    from turnlog import RedisStore, SessionService

    prefix = f"tlparts-{uuid.uuid4().hex[:12]}"
    store = RedisStore(redis_url, prefix=prefix)
    try:
        with SessionService(store) as service:
            _append_and_read(service)
    finally:
        with RedisStore(redis_url, prefix=prefix) as cleanup:
            for key in cleanup.client.scan_iter(f"{prefix}*"):
                cleanup.client.delete(key)


# -- the docs page


def test_the_docs_example_runs_and_prints_what_the_page_says(capsys):
    page = (ROOT.parent / "docs" / "parts.md").read_text("utf-8")
    examples = re.findall(r"```python\n(.*?)```\n\nprints\n\n```text\n(.*?)```", page, re.S)
    assert len(examples) == 2  # the attachments example, then the parts one
    for code, printed in examples:
        exec(compile(code, "docs/parts.md", "exec"), {})
        assert capsys.readouterr().out == printed


def test_the_parts_are_exported():
    for name in (
        "TextPart",
        "ImagePart",
        "FilePart",
        "AudioPart",
        "ReasoningPart",
        "ProviderPart",
        "Part",
    ):
        assert name in turnlog.__all__ and getattr(turnlog, name) is getattr(turnlog.parts, name)


def test_data_urls_are_written_and_read_back_by_one_pair_of_functions():
    import base64

    from turnlog.parts import data_url, read_data_url

    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    url = data_url("image/png", png)
    assert url == "data:image/png;base64," + base64.b64encode(png).decode("ascii")  # by hand
    assert read_data_url(url) == ("image/png", png)
    for other in (
        "https://example.com/a.png",
        "data:image/png;base64,***",
        "data:image/png,not-base64",
        "data:image/png;name=a;base64,iVBO",
    ):
        assert read_data_url(other) is None
