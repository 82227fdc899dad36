"""Token counting: the `TokenCounter` protocol, the counters, and the per-event count cache.

The default counter is exact o200k_base BPE from the `toktok-rs` package, which bundles its
vocabulary and never downloads anything. Where that package cannot be imported the default falls
back to ceil(utf-8 bytes / 4) and warns once.

An event whose message (or a tool result of it) has parts other than text counts its
`event_text` by the counter plus, for each part, what `part_tokens` gives (the media rules of
`turnlog.media`: images, PDFs, audio; reasoning by its text). Its count is recorded under the
counter's identity with the rules' name appended (`media_counter_name`), so a count made under
other rules is told apart and made again. Text-only events are counted and named as before.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol, runtime_checkable

import msgspec

from turnlog import media
from turnlog.errors import InvalidInput
from turnlog.events import (
    MAX_COUNTER_NAME,
    Message,
    SessionEvent,
    TokenCount,
    _shared_counts,
    shared_token_count,
)
from turnlog.lazy import LazyEvents
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
)
from turnlog.text import event_text, message_text

__all__ = [
    "MEDIA_PROVIDERS",
    "MEDIA_RULES",
    "ByteEstimateCounter",
    "CharCounter",
    "EventTokens",
    "O200kCounter",
    "TiktokenCounter",
    "TokenCounter",
    "counter_identity",
    "default_counter",
    "event_tokens",
    "media_counter_name",
    "part_tokens",
]


@runtime_checkable
class TokenCounter(Protocol):
    """Anything with `count(text) -> int`.

    A counter may also have an `identity` attribute: a string of 1-255 characters naming its
    encoding and the version of the code that counts (`"o200k_base toktok-rs/0.3.0"`). The
    counts of a counter with an identity are stored with the events at append and read back
    instead of tokenizing again; a counter without one is never trusted with a stored count.

    It may also have a `media_provider` attribute, `"openai"` or `"anthropic"`, choosing that
    provider's rules for the parts it counts (images above all); absent or None, each part
    counts the larger of the two providers' estimates (see `part_tokens`).
    """

    def count(self, text: str) -> int:
        """The number of tokens in `text`."""
        ...


def counter_identity(counter: object) -> str | None:
    """The `identity` of `counter`: a non-empty string, or None when it names none."""
    identity = getattr(counter, "identity", None)
    return identity if isinstance(identity, str) and identity else None


MEDIA_PROVIDERS: Final = (None, "openai", "anthropic")
"""The values of a counter's `media_provider`: None (the larger of the two), or a provider."""

MEDIA_RULES: Final[dict[str | None, str]] = {
    None: "media/1",
    "openai": "media-openai/1",
    "anthropic": "media-anthropic/1",
}
"""The name and version of the rules counting parts, by `media_provider`: appended to a
counter's identity for the counts of events with parts (`media_counter_name`).

Version 1 stands for `turnlog.media`'s rules `DEFAULT_IMAGE_RULE`, `DEFAULT_PDF_RULE` and
`AUDIO_RULE` (None), `OPENAI_IMAGE_RULE`, `OPENAI_PDF_RULE`, `AUDIO_RULE` ("openai"),
`ANTHROPIC_IMAGE_RULE`, `ANTHROPIC_PDF_RULE`, `AUDIO_RULE` ("anthropic"), and the rules of
`part_tokens`; a change to any of them is a new version here."""


def media_counter_name(identity: str, provider: str | None = None) -> str:
    """The counter name recorded with the count of an event with parts: `identity`, "+", and
    the rules' name (`MEDIA_RULES`), e.g. `"o200k_base toktok-rs/0.3.0+media/1"`.

    Raises:
        InvalidInput: `provider` is not one of `MEDIA_PROVIDERS`.
    """
    return f"{identity}+{MEDIA_RULES[_check_provider(provider)]}"


def _check_provider(value: object) -> str | None:
    """`value` if it is one of `MEDIA_PROVIDERS`, else `InvalidInput`."""
    if value not in MEDIA_PROVIDERS:
        raise InvalidInput(
            f"media_provider must be 'openai', 'anthropic' or None, got {value!r}: "
            "None counts each part by the larger of the two providers' rules"
        )
    return value  # one of MEDIA_PROVIDERS


def _with_provider(name: str, provider: str | None) -> str:
    return f"{name}()" if provider is None else f"{name}(media_provider={provider!r})"


class CharCounter:
    """One token per character: predictable counts for tests and worked examples.

    Args:
        media_provider: whose rules count parts: "openai", "anthropic", or None (the larger).
    """

    identity = "chars/1"

    def __init__(self, *, media_provider: str | None = None) -> None:
        self.media_provider = _check_provider(media_provider)

    def count(self, text: str) -> int:
        return len(text)

    def __repr__(self) -> str:
        return _with_provider("CharCounter", self.media_provider)


class ByteEstimateCounter:
    """ceil(utf-8 bytes / 4): a rough estimate that needs nothing.

    Args:
        media_provider: whose rules count parts: "openai", "anthropic", or None (the larger).
    """

    identity = "utf8-bytes-div-4/1"

    def __init__(self, *, media_provider: str | None = None) -> None:
        self.media_provider = _check_provider(media_provider)

    def count(self, text: str) -> int:
        return -(-len(text.encode("utf-8")) // 4)

    def __repr__(self) -> str:
        return _with_provider("ByteEstimateCounter", self.media_provider)


_load_lock = threading.Lock()


class O200kCounter:
    """Exact o200k_base counts (GPT-4o, GPT-4.1, o-series, GPT-5), offline, via `toktok-rs`.

    Making one imports the extension (about 3 ms); its vocabulary, compiled into it (nothing is
    downloaded), is built on the first count (about 0.6 s, once per process) and then shared.

    Args:
        media_provider: whose rules count parts: "openai", "anthropic", or None (the larger).

    Raises:
        ImportError: when `toktok-rs` is not installed.
        InvalidInput: `media_provider` is none of those.
    """

    def __init__(self, *, media_provider: str | None = None) -> None:
        import toktok

        self.media_provider = _check_provider(media_provider)
        self._toktok = toktok
        self._count: Any = None
        self.identity = f"o200k_base toktok-rs/{getattr(toktok, '__version__', 'unknown')}"

    def load(self) -> None:
        """Build the vocabulary now (about 0.6 s of CPU, once per process) rather than on the
        first count: call it at an application's start so that its first request does not wait.
        The build holds the GIL, so a thread would not hide it."""
        self._load()

    def _load(self) -> Any:
        # toktok's one public function spreads a batch over threads, which costs ~15-30 us a
        # call; its tokenizer object counts one text in ~1 us. Both give the same counts
        # (special-token strings count as plain text in both).
        with _load_lock:  # one build, whatever thread asks first
            if self._count is not None:
                return self._count
            encoding = getattr(self._toktok, "_encoding", None)
            if encoding is None:
                batch = self._toktok.batch_count
                self._count = lambda text: batch((text,), "o200k_base", 1)[0]
            else:
                self._count = encoding("o200k_base").count
                # from now on `count` is the tokenizer's own (it returns an int): one Python
                # call fewer per count, which an append pays (issue 11, item 1)
                self.count = self._count  # type: ignore[method-assign]
            return self._count

    def count(self, text: str) -> int:
        count = self._count or self._load()
        return int(count(text))

    def count_many(self, texts: list[str]) -> list[int]:
        """Counts for many texts (one thread: it is faster than spreading small texts)."""
        count = self._count or self._load()
        return [int(count(t)) for t in texts]

    def __repr__(self) -> str:
        return _with_provider("O200kCounter", self.media_provider)


class TiktokenCounter:
    """Counts with `tiktoken`, for users who have it and its vocabulary files.

    Args:
        encoding: a tiktoken encoding name.
        media_provider: whose rules count parts: "openai", "anthropic", or None (the larger).

    Note that tiktoken downloads its vocabulary on first use unless it is cached already.
    """

    def __init__(self, encoding: str = "o200k_base", *, media_provider: str | None = None) -> None:
        self.media_provider = _check_provider(media_provider)
        try:
            import tiktoken
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "TiktokenCounter needs tiktoken: pip install 'turnlog[tiktoken]'"
            ) from exc
        self._encoding: Any = tiktoken.get_encoding(encoding)
        self.identity = f"{encoding} tiktoken/{getattr(tiktoken, '__version__', 'unknown')}"

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


_default: TokenCounter | None = None
_default_lock = threading.Lock()


def default_counter() -> TokenCounter:
    """The shared default counter: `O200kCounter`, or `ByteEstimateCounter` with a warning."""
    global _default
    with _default_lock:
        if _default is None:
            try:
                _default = O200kCounter()
            except ImportError:
                warnings.warn(
                    "toktok-rs is not installed for this platform: token counts are estimated "
                    "as utf-8 bytes / 4. Pass token_counter=... for exact counts.",
                    RuntimeWarning,
                    stacklevel=2,
                )
                _default = ByteEstimateCounter()
        return _default


# ---------------------------------------------------------------------------------------------
# Parts

_PDF: Final = "application/pdf"


def _quarter(n: int) -> int:
    return -(-n // 4)


def part_tokens(part: Part, counter: TokenCounter, provider: str | None = None) -> int:
    """The tokens `part` adds to its event's count, beyond its note in `event_text`.

    The rules (`MEDIA_RULES` names them; `turnlog.media` holds the providers' rules):

    - text: 0 (its text is the event's text);
    - image: `media.image_tokens` with the part's `detail`, its size read from the inline
      bytes' header, else from its `width` and `height`; a part whose size is not known that
      way (a URL or a reference without both, or bytes whose header cannot be read) counts as
      a `media.FALLBACK_IMAGE_SIZE` image (1024x1024), with a WARNING for unreadable bytes;
    - PDF file (`application/pdf`): `media.pdf_tokens` of its `pages` when given, else of its
      inline bytes; a reference or URL without `pages` counts one page per
      `media.PDF_FALLBACK_BYTES_PER_PAGE` of its `size` (at least 1, at most 100), one page
      when its size is unknown;
    - other file: ceil(size / 4) (its bytes as text), 0 when its size is unknown;
    - audio: `media.audio_tokens` of its `seconds` when given, else of its inline bytes; a
      reference or URL without `seconds` counts `size` bytes at
      `media.AUDIO_FALLBACK_BYTES_PER_SECOND`, 0 when its size is unknown;
    - reasoning: its `text` by `counter`, plus ceil(len / 4) of its `encrypted` content (a
      redacted or encrypted block is sent back whole); the signature is not counted;
    - provider part: ceil(len / 4) of its `data` as compact JSON.

    Args:
        part: the part.
        counter: the counter of the reasoning text.
        provider: "openai", "anthropic", or None: the larger of the two rules.

    Returns:
        The token count.

    Raises:
        InvalidInput: `provider` is none of those.
    """
    rule = "any" if _check_provider(provider) is None else provider
    assert rule is not None
    kind = type(part)
    if kind is TextPart:
        return 0
    if kind is ImagePart:
        assert isinstance(part, ImagePart)
        size = None if part.data is None else media.image_size(part.data)
        if size is None and part.width is not None and part.height is not None:
            size = (part.width, part.height)
        if size is None:
            if part.data is not None:  # the header is unreadable: the fallback, and a warning
                return media.image_tokens(part.data, provider=rule, detail=part.detail)
            size = media.FALLBACK_IMAGE_SIZE
        return media.image_tokens(size, provider=rule, detail=part.detail)
    if kind is FilePart:
        assert isinstance(part, FilePart)
        if part.media_type.lower() != _PDF:
            return 0 if part.size is None else _quarter(part.size)
        if part.pages is not None:
            return media.pdf_tokens(part.pages, rule)
        if part.data is not None:
            return media.pdf_tokens(part.data, rule)
        pages = 1
        if part.size is not None:
            per_page = media.PDF_FALLBACK_BYTES_PER_PAGE
            pages = min(media.PDF_FALLBACK_MAX_PAGES, max(1, -(-part.size // per_page)))
        return media.pdf_tokens(pages, rule)
    if kind is AudioPart:
        assert isinstance(part, AudioPart)
        if part.seconds is not None:
            return media.audio_tokens(part.seconds, rule)
        if part.data is not None:
            return media.audio_tokens(part.data, rule)
        if part.size is None:
            return 0
        return media.audio_tokens(part.size / media.AUDIO_FALLBACK_BYTES_PER_SECOND, rule)
    if kind is ReasoningPart:
        assert isinstance(part, ReasoningPart)
        n = 0 if part.text is None else counter.count(part.text)
        return n + (0 if part.encrypted is None else _quarter(len(part.encrypted)))
    assert isinstance(part, ProviderPart)
    return _quarter(len(msgspec.json.encode(part.data)))


def _has_parts(m: Message) -> bool:
    """True when `m` or one of its tool results has parts (other than text alone).

    The hot loops test `m.parts or (m.tool_results and _has_parts(m))` inline: a text-only
    message then costs two attribute reads and no call."""
    if m.parts:
        return True
    for r in m.tool_results:  # noqa: SIM110 - a loop is faster than any() on a generator
        if r.parts:
            return True
    return False


def _parts_tokens(m: Message, counter: TokenCounter, provider: str | None) -> int:
    """The tokens of the parts of `m` and of its tool results (see `part_tokens`)."""
    n = sum(part_tokens(p, counter, provider) for p in m.parts)
    for r in m.tool_results:
        n += sum(part_tokens(p, counter, provider) for p in r.parts)
    return n


_Key = tuple[str, str, int, object, int]


def _key(event: SessionEvent) -> _Key | None:
    # A stored event never changes and its id is unique in its store. The session, seq,
    # timestamp and a cheap size fingerprint keep apart events of two stores that reuse an id.
    if event.seq is None or event.timestamp is None:
        return None
    # The parts count too (a tool result's parts are left to its count of results).
    m = event.message
    size = (
        -1
        if m is None
        else len(m.text or "")
        + 7919 * (len(m.tool_calls) + len(m.tool_results) + 131 * len(m.parts))
    )
    return (event.session_id, event.id, event.seq, event.timestamp, size)


class EventTokens:
    """Per-event token counts for one counter, computed once.

    A count stored with the event (`SessionEvent.tokens`, recorded at append) is used when this
    counter made it under the same rules: its name is the counter's `identity`, or for an
    event with parts `media_identity`; nothing is tokenized then. Otherwise the count of a
    stored event (one with a seq and a timestamp) is cached by session, id, seq, timestamp and
    a size of its text, calls, results and parts, since stored events never change and an event
    id names one event. Events not stored yet are counted every time. The cache is bounded
    (least recently used entries go first) and thread-safe.

    Raises:
        InvalidInput: the counter's `identity` is not a name a store keeps (1-255
            characters), or its `media_provider` is not "openai", "anthropic" or None.
    """

    def __init__(self, counter: TokenCounter, maxsize: int = 200_000) -> None:
        self.counter = counter
        self.identity = counter_identity(counter)
        self.media_provider = _check_provider(getattr(counter, "media_provider", None))
        self.media_identity: str | None = None
        """The counter name recorded with the count of an event with parts
        (`media_counter_name`); None when the counter has no identity, or the name would be
        longer than a store keeps (such counts are then not recorded)."""
        if self.identity is not None:
            TokenCount(self.identity, 0)  # a name no store could keep is refused here
            name = media_counter_name(self.identity, self.media_provider)
            if len(name) <= MAX_COUNTER_NAME:
                self.media_identity = name
        self._shared: dict[int, TokenCount] | None = None  # see of_message
        self._maxsize = maxsize
        self._cache: OrderedDict[_Key, int] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, event: SessionEvent) -> int:
        """The tokens of one event: its `event_text`, and its parts (`part_tokens`)."""
        tokens = event.tokens
        if tokens is not None and (
            tokens.counter == self.identity or tokens.counter == self.media_identity
        ):
            return tokens.count
        key = _key(event)
        if key is None:
            return self._fresh(event)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        n = self._fresh(event)
        self._remember(key, n)
        return n

    def counts(self, events: Iterable[SessionEvent]) -> list[int]:
        """The tokens of each event, in order; uncached ones are counted in one batch."""
        identity = self.identity
        media = self.media_identity
        if isinstance(events, LazyEvents):  # the stored counts are known without decoding
            out: list[int | None] = events.stored_counts(identity)
            if None not in out:
                return out  # type: ignore[return-value]  # every slot is filled
            if media is not None:  # events with parts
                for i, n in enumerate(events.stored_counts(media)):
                    if n is not None:
                        out[i] = n
            unknown = [i for i, n in enumerate(out) if n is None]
            if not unknown:
                return out  # type: ignore[return-value]  # every slot is filled
            for i, n in zip(unknown, self.counts(list(events.select(unknown))), strict=True):
                out[i] = n  # decoded, then counted (or found in the cache) as any event
            return out  # type: ignore[return-value]
        events = list(events)
        out = [None] * len(events)
        missing: list[int] = []
        cached = self._cache.get
        with self._lock:  # one walk: the stored count, else the cache
            for i, event in enumerate(events):
                tokens = event.tokens
                if tokens is not None and (tokens.counter == identity or tokens.counter == media):
                    out[i] = tokens.count
                    continue
                key = _key(event)
                hit = None if key is None else cached(key)
                if hit is None:
                    missing.append(i)
                else:
                    out[i] = hit
        if missing:
            fresh = self._count_events([events[i] for i in missing])
            for i, n in zip(missing, fresh, strict=True):
                out[i] = n
                key = _key(events[i])
                if key is not None:
                    self._remember(key, n)
        return out  # type: ignore[return-value]  # every slot is filled

    def total(self, events: Iterable[SessionEvent]) -> int:
        """The tokens of all `events`."""
        return sum(self.counts(events))

    def counted(self, events: Sequence[SessionEvent]) -> list[SessionEvent]:
        """`events`, each message event carrying this counter's count (what an append stores).

        Events that carry this counter's count under the rules of today already are kept as
        they are, so nothing is tokenized for them; other events are returned unchanged. An
        event with parts whose count was made under other rules (or before parts were
        counted, under the plain `identity`) is counted again. A counter without an
        `identity` counts nothing here: its counts are never stored.
        """
        identity = self.identity
        if identity is None:
            return list(events)
        media = self.media_identity
        todo: list[int] = []  # text-only events, counted as before parts
        todo_parts: list[int] = []  # events with parts, counted under `media`
        for i, e in enumerate(events):
            m = e.message
            if m is None:
                continue
            if m.parts or (m.tool_results and _has_parts(m)):
                if media is not None and (e.tokens is None or e.tokens.counter != media):
                    todo_parts.append(i)
            elif e.tokens is None or e.tokens.counter != identity:
                todo.append(i)
        if not todo and not todo_parts:
            return list(events)
        out = list(events)
        if todo:
            fresh = self._count_texts([event_text(events[i]) for i in todo])
            for i, n in zip(todo, fresh, strict=True):
                out[i] = events[i].with_tokens(TokenCount(identity, n))
        if todo_parts and media is not None:
            fresh = self._count_events([events[i] for i in todo_parts])
            for i, n in zip(todo_parts, fresh, strict=True):
                out[i] = events[i].with_tokens(TokenCount(media, n))
        return out

    def of_message(self, message: Message) -> TokenCount | None:
        """The count an append stores for an event holding `message`; None when this counter
        has no `identity` (its counts are never stored)."""
        identity = self.identity
        if identity is None:
            return None
        count = self.counter.count(message_text(message))
        if type(count) is not int or count < 0:
            return TokenCount(identity, count)  # raises InvalidInput naming the bad count
        if message.parts or (message.tool_results and _has_parts(message)):  # see _has_parts
            media = self.media_identity
            if media is None:
                return None
            return TokenCount(
                media, count + _parts_tokens(message, self.counter, self.media_provider)
            )
        # `shared_token_count` inlined for the common case (an append pays for every call);
        # the identity's table, once made, is kept for good, and here too
        by_count = self._shared
        if by_count is None:
            by_count = self._shared = _shared_counts.get(identity)
        if by_count is not None:
            shared = by_count.get(count)
            if shared is not None:
                return shared
        return shared_token_count(identity, count)  # the identity was checked with the cache

    def _fresh(self, event: SessionEvent) -> int:
        """The tokens of one event, counted now."""
        n = self.counter.count(event_text(event))
        m = event.message
        if m is not None and (m.parts or (m.tool_results and _has_parts(m))):
            n += _parts_tokens(m, self.counter, self.media_provider)
        return n

    def _count_events(self, events: list[SessionEvent]) -> list[int]:
        """The tokens of each event, counted now: the texts in one batch, then the parts."""
        counts = self._count_texts([event_text(e) for e in events])
        for k, e in enumerate(events):
            m = e.message
            if m is not None and (m.parts or (m.tool_results and _has_parts(m))):
                counts[k] += _parts_tokens(m, self.counter, self.media_provider)
        return counts

    def _count_texts(self, texts: list[str]) -> list[int]:
        many = getattr(self.counter, "count_many", None)
        return list(many(texts)) if many is not None else [self.counter.count(t) for t in texts]

    def _remember(self, key: _Key, n: int) -> None:
        with self._lock:
            self._cache[key] = n
            if len(self._cache) > self._maxsize:
                self._cache.popitem(last=False)


_caches: weakref.WeakKeyDictionary[Any, EventTokens] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def event_tokens(counter: TokenCounter | None = None) -> EventTokens:
    """The shared cache of per-event counts for `counter` (the default counter when None).

    Triggers and strategies that use the same counter object share one cache, so an event is
    tokenized once however many times it is measured.
    """
    counter = default_counter() if counter is None else counter
    with _caches_lock:
        try:
            cache = _caches.get(counter)
        except TypeError:  # not weak-referenceable: a private cache
            return EventTokens(counter)
        if cache is None:
            cache = EventTokens(counter)
            _caches[counter] = cache
        return cache
