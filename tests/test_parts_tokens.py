"""Token counts of messages with parts (issue 25, item 3): the text's count plus each part's
count under `turnlog.media`'s rules, recorded under a counter name that names the rules, so that
a token-budget window cuts for images; text-only counts are unchanged."""

from __future__ import annotations

import io
import logging
from datetime import UTC, datetime

import msgspec
import pytest
from PIL import Image

from turnlog import (
    AudioPart,
    CharCounter,
    CompactionWindow,
    FilePart,
    ImagePart,
    InvalidInput,
    Message,
    O200kCounter,
    ProviderPart,
    ReasoningPart,
    SessionService,
    TextPart,
    TokenCount,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
    media,
)
from turnlog.events import SessionEvent
from turnlog.lazy import LazyEvents
from turnlog.stores.memory import MemoryStore
from turnlog.text import event_text
from turnlog.tokens import MEDIA_RULES, EventTokens, media_counter_name, part_tokens

REF = "sha256:" + "ab" * 32


def png(width: int, height: int) -> bytes:
    """A real PNG file of that size (one colour: a few hundred bytes)."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def counts(message: Message, counter) -> int:
    return EventTokens(counter).of(SessionEvent.for_message("s", message))


# -- images, by the providers' published examples ----------------------------------------------


@pytest.mark.parametrize(
    ("size", "detail", "provider", "expected"),
    [
        ((1024, 1024), "high", "openai", 765),  # OpenAI's worked example
        ((2048, 4096), "high", "openai", 1105),  # OpenAI's worked example
        ((4096, 8192), "low", "openai", 85),  # OpenAI: low detail is 85 whatever the size
        ((1000, 1000), None, "anthropic", 1334),  # Anthropic's table: ~1334
        ((200, 200), None, "anthropic", 54),  # Anthropic's table: ~54
        ((1024, 1024), "high", None, 1399),  # the default: the larger of 765 and 1399
    ],
)
def test_an_inline_image_counts_its_text_and_the_providers_rule(size, detail, provider, expected):
    counter = CharCounter(media_provider=provider)
    message = Message.user("What is this?", ImagePart("image/png", data=png(*size), detail=detail))
    assert counts(message, counter) == len(event_text_of(message)) + expected


def event_text_of(message: Message) -> str:
    return event_text(SessionEvent.for_message("s", message))


def test_the_size_comes_from_the_header_before_the_fields():
    wrong = ImagePart("image/png", data=png(1024, 1024), width=10, height=10, detail="high")
    assert part_tokens(wrong, CharCounter(), "openai") == 765


def test_a_reference_or_url_counts_by_its_fields_else_as_1024_square(caplog):
    sized = ImagePart("image/png", ref=REF, size=9, width=2048, height=4096, detail="high")
    assert part_tokens(sized, CharCounter(), "openai") == 1105
    with caplog.at_level(logging.WARNING, logger="turnlog.media"):
        unsized = ImagePart("image/png", url="https://example.com/cat.png")
        assert part_tokens(unsized, CharCounter(), "openai") == 765
        assert part_tokens(unsized, CharCounter(), "anthropic") == 1399
        assert part_tokens(unsized, CharCounter(), None) == 1399
    assert caplog.records == []  # an unknown size is not an unreadable header


def test_an_unreadable_header_counts_by_the_fields_else_by_the_fallback_with_a_warning(caplog):
    junk = b"not an image at all" * 10
    with caplog.at_level(logging.WARNING, logger="turnlog.media"):
        fields = ImagePart("image/png", data=junk, width=512, height=512, detail="high")
        assert part_tokens(fields, CharCounter(), "openai") == 255
        assert caplog.records == []
        assert part_tokens(ImagePart("image/png", data=junk), CharCounter(), "openai") == 765
    assert [r.levelname for r in caplog.records] == ["WARNING"]


# -- the other parts ---------------------------------------------------------------------------


def test_pdfs_count_per_page_from_the_field_the_bytes_or_the_size():
    c = CharCounter()
    pdf = FilePart("application/pdf", ref=REF, size=10, pages=4)
    assert part_tokens(pdf, c, None) == 4 * 3000
    assert part_tokens(pdf, c, "openai") == 4 * 2265
    by_size = FilePart("application/pdf", ref=REF, size=120_000)
    assert part_tokens(by_size, c, "anthropic") == 3 * 3000  # one page per 50 KB
    assert part_tokens(FilePart("application/pdf", url="https://e.com/a.pdf"), c, None) == 3000
    doc = (
        b"%PDF-1.4\n1 0 obj <</Type /Catalog /Pages 2 0 R>> endobj\n"
        b"2 0 obj <</Type /Pages /Kids [3 0 R 4 0 R] /Count 2>> endobj\n"
        b"3 0 obj <</Type /Page /Parent 2 0 R>> endobj\n"
        b"4 0 obj <</Type /Page /Parent 2 0 R>> endobj\n%%EOF\n"
    )
    assert part_tokens(FilePart("application/pdf", data=doc), c, None) == 2 * 3000


def test_other_files_count_their_bytes_over_four():
    c = CharCounter()
    assert part_tokens(FilePart("text/csv", data=b"a,b\n" * 100), c, None) == 100
    assert part_tokens(FilePart("text/csv", url="https://e.com/a.csv"), c, None) == 0


def test_audio_counts_ten_tokens_a_second():
    c = CharCounter()
    assert part_tokens(AudioPart("audio/wav", ref=REF, size=9, seconds=3.2), c, None) == 32
    assert part_tokens(AudioPart("audio/mpeg", ref=REF, size=160_000), c, None) == 100


def test_reasoning_counts_its_text_by_the_counter_and_encrypted_content_by_length():
    c = CharCounter()
    thinking = ReasoningPart("anthropic", "Let me think.", signature="s" * 400)
    assert part_tokens(thinking, c, None) == len("Let me think.")  # the signature is not counted
    redacted = ReasoningPart("anthropic", encrypted="x" * 401, redacted=True)
    assert part_tokens(redacted, c, None) == 101
    message = Message.assistant(parts=[thinking, "It is 3 C."])
    assert counts(message, c) == len(event_text_of(message)) + len("Let me think.")


def test_a_provider_part_counts_its_json_over_four():
    data = {"type": "web_search_tool_result", "content": [{"url": "https://e.com"}] * 10}
    part = ProviderPart("anthropic", "web_search_tool_result", data)
    assert part_tokens(part, CharCounter(), None) == -(-len(msgspec.json.encode(data)) // 4)


def test_a_tool_results_parts_count_too():
    c = CharCounter(media_provider="openai")
    image = ImagePart("image/png", data=png(1024, 1024), detail="high")
    message = Message.tool(ToolResult("c1", "screenshot", "", parts=(TextPart("The page:"), image)))
    assert counts(message, c) == len(event_text_of(message)) + 765


def test_an_unknown_media_provider_is_refused():
    with pytest.raises(InvalidInput, match="media_provider"):
        CharCounter(media_provider="google")

    class Odd:
        identity = "odd/1"
        media_provider = "OpenAI"

        def count(self, text):
            return 1

    with pytest.raises(InvalidInput, match="media_provider"):
        EventTokens(Odd())


def test_rules_version_1_stands_for_these_media_rules():
    # A change of a rule in turnlog.media is a new version of MEDIA_RULES (see its docstring).
    assert MEDIA_RULES == {
        None: "media/1",
        "openai": "media-openai/1",
        "anthropic": "media-anthropic/1",
    }
    assert [media.token_rule(k, "any") for k in ("image", "pdf", "audio")] == [
        "max-openai-anthropic-image/1",
        "max-openai-anthropic-pdf/1",
        "audio-10-per-second/1",
    ]
    for provider in ("openai", "anthropic"):
        assert [media.token_rule(k, provider) for k in ("image", "pdf", "audio")] == [
            f"{provider}-image/1",
            f"{provider}-pdf/1",
            "audio-10-per-second/1",
        ]


# -- recorded counts ---------------------------------------------------------------------------


def test_recorded_counts_name_the_rules_and_text_only_counts_are_unchanged(service):
    oracle = O200kCounter()
    sid = service.create().id
    question = Message.user("What is this?", ImagePart("image/png", data=png(1024, 1024)))
    service.append_message(sid, question)
    service.append_message(sid, Message.assistant("A red square."))
    asked, answered = service.events(sid)
    assert asked.tokens == TokenCount(
        oracle.identity + "+media/1", oracle.count(event_text(asked)) + 1399
    )
    assert answered.tokens == TokenCount(oracle.identity, oracle.count(event_text(answered)))
    assert media_counter_name(oracle.identity) == oracle.identity + "+media/1"


def test_a_chosen_provider_is_named_in_the_recorded_count():
    with SessionService(MemoryStore(), token_counter=CharCounter(media_provider="openai")) as svc:
        sid = svc.create().id
        image = ImagePart("image/png", data=png(1024, 1024), detail="high")
        svc.append_message(sid, Message.user("What is this?", image))
        (event,) = svc.events(sid)
    assert event.tokens == TokenCount("chars/1+media-openai/1", len(event_text(event)) + 765)


def test_a_count_under_other_rules_is_counted_again_and_recorded_anew():
    counter = CharCounter()
    store = MemoryStore()
    with SessionService(store, token_counter=counter) as svc:
        sid = svc.create().id
        image = ImagePart("image/png", data=png(1024, 1024))
        event = SessionEvent.for_message(sid, Message.user("What is this?", image))
        stale = [
            event.with_tokens(TokenCount("chars/1", 3)),  # before parts were counted
            SessionEvent.for_message(sid, Message.assistant("Red.")).with_tokens(
                TokenCount("chars/1", 0)  # a text-only event under the counter's own name
            ),
        ]
        store.append_events(sid, stale, 0)  # the store as is: no service recount
        assert EventTokens(counter).counts(svc.events(sid)) == [3, 0]  # a read takes them
        assert svc.record_tokens(sid) == 1  # the event with parts; the text one is kept
        asked, answered = svc.events(sid)
    assert asked.tokens == TokenCount("chars/1+media/1", len(event_text(asked)) + 1399)
    assert answered.tokens == TokenCount("chars/1", 0)
    other = EventTokens(CharCounter(media_provider="anthropic"))  # other rules: recounted
    assert other.of(asked) == len(event_text(asked)) + 1399
    assert other.counted([asked])[0].tokens.counter == "chars/1+media-anthropic/1"


class Counting:
    identity = "counting/1"

    def __init__(self):
        self.calls = 0

    def count(self, text):
        self.calls += 1
        return len(text)


def test_stored_counts_of_events_with_parts_are_read_back_without_counting(tmp_path):
    from turnlog import SqliteStore

    counter = Counting()
    with SessionService(SqliteStore(tmp_path / "t.db"), token_counter=counter) as svc:
        sid = svc.create().id
        svc.append_message(sid, Message.user("Look:", ImagePart("image/png", data=png(64, 64))))
        svc.append_message(sid, Message.assistant("A square."))
        before = counter.calls
        lazy = svc.store.view_lazy(sid)
        assert isinstance(lazy, LazyEvents) and lazy.decoded == 0
        tokens = EventTokens(counter)
        assert tokens.counts(lazy) == [e.tokens.count for e in svc.events(sid)]
        assert tokens.counts(svc.events(sid)) == [e.tokens.count for e in svc.events(sid)]
        assert counter.calls == before
        assert lazy.decoded == 0  # the counts were read from the stored column


def test_the_cache_keys_on_the_parts():
    when = datetime(2025, 1, 1, tzinfo=UTC)

    def stored(*parts):
        event = SessionEvent.for_message("s", Message.user("Look:", *parts), event_id="e1")
        return msgspec.structs.replace(event, seq=1, timestamp=when)

    image = ImagePart("image/png", data=png(1024, 1024))
    tokens = EventTokens(CharCounter())
    one, two = tokens.of(stored(image)), tokens.of(stored(image, image))
    assert two - one == 1399 + len(event_text(stored(image, image))) - len(
        event_text(stored(image))
    )
    assert tokens.counts([stored(image)]) == [one]


# -- a token-budget window cuts for images -----------------------------------------------------


def _conversation(service, with_images: bool) -> str:
    sid = service.create().id
    service.append_message(sid, Message.system("You describe pictures."))
    for n in range(4):
        parts = [ImagePart("image/png", data=png(1024, 1024))] if with_images else []
        service.append_message(sid, Message.user(f"What is picture {n}?", *parts))
        call = ToolCall(f"c{n}", "zoom", '{"x": 1}')
        service.append_message(sid, Message.assistant(tool_calls=[call]))
        service.append_message(sid, Message.tool(ToolResult(call.id, "zoom", "zoomed")))
        service.append_message(sid, Message.assistant(f"Picture {n} is a red square."))
    return sid


def test_a_token_budget_window_cuts_a_conversation_whose_images_exceed_it(service):
    strategy = WindowCompactionStrategy(CompactionWindow.token_budget(2500))
    text_only = _conversation(service, with_images=False)
    assert service.compact(text_only, lambda r: True, strategy).unchanged  # its text fits
    pictures = _conversation(service, with_images=True)
    result = service.compact(pictures, lambda r: True, strategy)
    assert not result.unchanged
    kept = [e.message.text for e in service.view(pictures) if e.message.role == "user"]
    assert kept == ["What is picture 3?"]  # two images (2,798 tokens) do not fit
    assert result.tokens_estimated_saved > 3 * 1399
