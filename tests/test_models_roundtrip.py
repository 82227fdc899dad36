"""Lossless both ways, by property: random conversations of every part kind each wire format
carries go to the wire and back unchanged (Chat Completions and the Messages API).

The oracle is the conversation itself: what comes back from the wire must equal what was sent,
part for part (bytes by value). The generators build only what each wire can carry (the docs
list the corners it cannot tell apart: an image's file name and size, a file's page count, two
text parts side by side in one message, ...), and build each message by the data model's own
rules (an Anthropic reply's call that another block follows has its place marker there), not
by the code under test.
"""

import base64
import itertools
import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model_servers import anthropic_message
from turnlog import Message, ToolCall, ToolResult
from turnlog.models.anthropic_format import (
    from_anthropic_messages,
    response_from_anthropic,
    to_anthropic_messages,
)
from turnlog.models.anthropic_parts import call_marker
from turnlog.models.openai_format import from_openai_messages, to_openai_messages
from turnlog.parts import AudioPart, FilePart, ImagePart, ProviderPart, ReasoningPart, TextPart

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# text the wire carries as it is: letters, digits, blanks, newlines, a few signs and non-ASCII
TEXT = st.text(
    alphabet=string.ascii_letters + string.digits + " \n.,:!?-'åß🌍", min_size=1, max_size=24
)
WORD = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8)
BYTES = st.binary(min_size=1, max_size=24)
IMAGE_TYPES = st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"])
URL_IMAGES = st.sampled_from(
    [(".png", "image/png"), (".jpg", "image/jpeg"), (".gif", "image/gif"), (".webp", "image/webp")]
)
DETAIL = st.sampled_from([None, "auto", "low", "high"])


@st.composite
def url_image(draw, detail=True):
    ext, media_type = draw(URL_IMAGES)
    return ImagePart(
        media_type,
        url=f"https://example.com/{draw(WORD)}{ext}",
        detail=draw(DETAIL) if detail else None,
    )


def provider_part(provider, known):
    kinds = WORD.map(lambda w: f"x_{w}_2031").filter(lambda k: k not in known)
    return st.builds(
        lambda kind, n: ProviderPart(provider, kind, {"type": kind, "n": n, "items": [n, "a"]}),
        kinds,
        st.integers(-5, 5),
    )


def calls_of(count_ids):
    return st.lists(
        st.tuples(WORD, st.dictionaries(WORD, st.integers(0, 9), max_size=2)),
        min_size=1,
        max_size=3,
    ).map(
        lambda drawn: [
            ToolCall(f"call_{next(count_ids)}", name, json.dumps(args, separators=(",", ":")))
            for name, args in drawn
        ]
    )


def counter():
    n = 0
    while True:
        n += 1
        yield n


# -- Chat Completions ----------------------------------------------------------------------------

OPENAI_MEDIA = st.one_of(
    st.builds(lambda t, d, detail: ImagePart(t, data=d, detail=detail), IMAGE_TYPES, BYTES, DETAIL),
    url_image(),
    st.builds(
        lambda t, d: AudioPart(t, data=d), st.sampled_from(["audio/wav", "audio/mpeg"]), BYTES
    ),
    st.builds(
        lambda t, d, name: FilePart(t, data=d, name=name),
        st.sampled_from(["application/pdf", "text/csv", "text/plain"]),
        BYTES,
        WORD.map(lambda w: w + ".bin"),
    ),
    provider_part("openai", {"text", "image_url", "input_audio", "file"}),
)


@st.composite
def with_text(draw, media):
    """Media parts in order, with at most one text part among them (two side by side read
    back as one), or alone."""
    parts = draw(st.lists(media, min_size=1, max_size=3))
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), TextPart(draw(TEXT)))
    return parts


@st.composite
def openai_result(draw, call):
    if draw(st.booleans()):
        return ToolResult(call.id, call.name, draw(TEXT), is_error=draw(st.booleans()))
    # text and attachments alternating (the placeholders keep them apart), attachments first
    # or not
    media = draw(st.lists(OPENAI_MEDIA, min_size=1, max_size=3))
    parts: list = []
    for part in media:
        if draw(st.booleans()):
            parts.append(TextPart(draw(TEXT)))
        parts.append(part)
    if draw(st.booleans()):
        parts.append(TextPart(draw(TEXT)))
    return ToolResult(call.id, call.name, "", is_error=draw(st.booleans()), parts=tuple(parts))


@st.composite
def openai_conversation(draw):
    ids = counter()
    out = [Message.system(draw(TEXT))] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            out.append(Message.user(draw(TEXT)))
        else:
            out.append(Message.user(*draw(with_text(OPENAI_MEDIA))))
        for _ in range(draw(st.integers(0, 2))):
            calls = draw(calls_of(ids))
            text = draw(st.one_of(st.none(), TEXT))
            out.append(Message.assistant(text, calls))
            out.append(Message.tool([draw(openai_result(c)) for c in calls]))
        if draw(st.booleans()) or out[-1].role != "tool":  # else the next user message follows
            out.append(Message.assistant(draw(TEXT)))
    return out


@SETTINGS
@given(openai_conversation())
def test_chat_completions_round_trip_is_lossless_for_every_part_kind(messages):
    wire = to_openai_messages(messages)
    assert json.loads(json.dumps(wire)) == wire  # plain JSON
    assert from_openai_messages(wire) == messages


# -- Anthropic Messages ------------------------------------------------------------------------

KNOWN_BLOCKS = {
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
}
NAME = st.one_of(st.none(), WORD.map(lambda w: w + ".pdf"))
ANTHROPIC_MEDIA = st.one_of(
    st.builds(lambda t, d: ImagePart(t, data=d), IMAGE_TYPES, BYTES),
    url_image(detail=False),
    st.builds(lambda d, n: FilePart("application/pdf", data=d, name=n), BYTES, NAME),
    st.builds(
        lambda w, n: FilePart("application/pdf", url=f"https://example.com/{w}.pdf", name=n),
        WORD,
        NAME,
    ),
    st.builds(lambda t, n: FilePart("text/plain", data=t.encode(), name=n), TEXT, NAME),
    provider_part("anthropic", KNOWN_BLOCKS),
)
REASONING = st.one_of(
    st.builds(lambda t, s: ReasoningPart("anthropic", text=t, signature=s), TEXT, WORD),
    st.builds(lambda e: ReasoningPart("anthropic", encrypted=e, redacted=True), WORD),
)


@st.composite
def anthropic_reply(draw, ids):
    """An assistant message as a reply can come: reasoning and provider blocks, at most one
    text, then (or not) calls with anything between them (interleaved thinking); each call
    that another part follows has its place marker."""
    lead = draw(
        st.lists(st.one_of(REASONING, provider_part("anthropic", KNOWN_BLOCKS)), max_size=2)
    )
    items: list = [*lead]
    text = draw(st.one_of(st.none(), TEXT))
    if text is not None:
        items.append(TextPart(text))
    calls = draw(st.one_of(st.just([]), calls_of(ids)))
    for call in calls:
        items.append(call)
        between = st.one_of(
            REASONING, st.builds(TextPart, TEXT), provider_part("anthropic", KNOWN_BLOCKS)
        )
        items += draw(st.lists(between, max_size=2))
    if not calls and text is None:
        items.append(TextPart(draw(TEXT)))  # a reply says something or calls
    last_part = (
        max(i for i, x in enumerate(items) if not isinstance(x, ToolCall))
        if any(not isinstance(x, ToolCall) for x in items)
        else -1
    )
    parts = []
    for i, x in enumerate(items):
        if isinstance(x, ToolCall):
            if i < last_part:
                parts.append(call_marker(x.id))
        else:
            parts.append(x)
    if all(type(p) is TextPart for p in parts):
        return Message.assistant("".join(p.text for p in parts) or None, calls)
    return Message.assistant(parts=parts, tool_calls=calls)


@st.composite
def anthropic_result(draw, call):
    if draw(st.booleans()):
        return ToolResult(call.id, call.name, draw(TEXT), is_error=draw(st.booleans()))
    parts = draw(
        st.lists(st.one_of(ANTHROPIC_MEDIA, st.builds(TextPart, TEXT)), min_size=1, max_size=3)
    )
    return ToolResult(call.id, call.name, "", is_error=draw(st.booleans()), parts=tuple(parts))


@st.composite
def anthropic_conversation(draw):
    ids = counter()
    out = [Message.system(draw(TEXT))] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            out.append(Message.user(draw(TEXT)))
        else:
            out.append(Message.user(*draw(with_text(ANTHROPIC_MEDIA))))
        while True:
            reply = draw(anthropic_reply(ids))
            out.append(reply)
            if not reply.tool_calls:
                break
            out.append(Message.tool([draw(anthropic_result(c)) for c in reply.tool_calls]))
            if draw(st.integers(0, 3)) == 0:
                break  # the next user message follows the results (one user turn on the wire)
    return out


@SETTINGS
@given(anthropic_conversation())
def test_anthropic_round_trip_is_lossless_for_every_part_kind(messages):
    system, turns = to_anthropic_messages(messages)
    assert json.loads(json.dumps(turns)) == turns  # plain JSON
    roles = [t["role"] for t in turns]
    assert all(a != b for a, b in itertools.pairwise(roles))  # the API's alternation
    assert from_anthropic_messages(system, turns) == messages


# -- the other way: from the wire and back -------------------------------------------------------


@st.composite
def reply_blocks(draw):
    """A Messages reply's content blocks in any order a model may give them (interleaved
    thinking, text and server blocks between calls), no two text blocks side by side and none
    empty (the API sends none such; an empty one carries nothing and is not kept)."""
    ids = counter()
    kinds = draw(
        st.lists(
            st.sampled_from(["thinking", "redacted", "text", "tool_use", "server"]),
            min_size=1,
            max_size=7,
        )
    )
    blocks: list = []
    for kind in kinds:
        if kind == "text":
            if blocks and blocks[-1]["type"] == "text":
                continue
            blocks.append({"type": "text", "text": draw(TEXT)})
        elif kind == "thinking":
            blocks.append({"type": "thinking", "thinking": draw(TEXT), "signature": draw(WORD)})
        elif kind == "redacted":
            blocks.append({"type": "redacted_thinking", "data": draw(WORD)})
        elif kind == "tool_use":
            arguments = draw(st.dictionaries(WORD, st.one_of(st.integers(), TEXT), max_size=2))
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{next(ids)}",
                    "name": draw(WORD),
                    "input": arguments,
                }
            )
        else:
            kind = draw(
                st.sampled_from(["server_tool_use", "web_search_tool_result", "compaction"])
            )
            blocks.append({"type": kind, "id": f"srv_{next(ids)}", "content": draw(TEXT)})
    return blocks


@SETTINGS
@given(reply_blocks())
def test_an_anthropic_reply_goes_back_exactly_as_received(blocks):
    reply = response_from_anthropic(anthropic_message(content=blocks)).message
    _, turns = to_anthropic_messages([Message.user("Go."), reply])
    assert turns[1] == {"role": "assistant", "content": blocks}
    assert [c.id for c in reply.tool_calls] == [b["id"] for b in blocks if b["type"] == "tool_use"]


@st.composite
def user_content(draw):
    """A Chat Completions user message's content list with a part that is not text."""

    def image(data, media_type, detail):
        url = f"data:{media_type};base64,{base64.b64encode(data).decode()}"
        return {
            "type": "image_url",
            "image_url": {"url": url, **({"detail": detail} if detail else {})},
        }

    media = st.one_of(
        st.builds(image, BYTES, IMAGE_TYPES, DETAIL),
        url_image().map(
            lambda p: {
                "type": "image_url",
                "image_url": {"url": p.url, **({"detail": p.detail} if p.detail else {})},
            }
        ),
        st.builds(
            lambda d, f: {
                "type": "input_audio",
                "input_audio": {"data": base64.b64encode(d).decode(), "format": f},
            },
            BYTES,
            st.sampled_from(["wav", "mp3"]),
        ),
        st.builds(
            lambda d, t, n: {
                "type": "file",
                "file": {
                    "file_data": f"data:{t};base64,{base64.b64encode(d).decode()}",
                    "filename": n,
                },
            },
            BYTES,
            st.sampled_from(["application/pdf", "text/csv"]),
            WORD,
        ),
        WORD.map(lambda w: {"type": "file", "file": {"file_id": f"file-{w}"}}),
        WORD.map(lambda w: {"type": f"x_{w}_2031", "value": w}),
    )
    parts = draw(
        st.lists(st.one_of(media, TEXT.map(lambda t: {"type": "text", "text": t})), max_size=4)
    )
    parts.insert(draw(st.integers(0, len(parts))), draw(media))
    return parts


@SETTINGS
@given(user_content())
def test_a_chat_completions_user_message_goes_back_exactly_as_read(content):
    wire = [{"role": "user", "content": content}]
    assert to_openai_messages(from_openai_messages(wire)) == wire
