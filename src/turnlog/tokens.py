"""Token counting: the `TokenCounter` protocol, the counters, and the per-event count cache.

The default counter is exact o200k_base BPE from the `toktok-rs` package, which bundles its
vocabulary and never downloads anything. Where that package cannot be imported the default falls
back to ceil(utf-8 bytes / 4) and warns once.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from turnlog.events import Message, SessionEvent, TokenCount, _shared_counts, shared_token_count
from turnlog.lazy import LazyEvents
from turnlog.text import event_text, message_text

__all__ = [
    "ByteEstimateCounter",
    "CharCounter",
    "EventTokens",
    "O200kCounter",
    "TiktokenCounter",
    "TokenCounter",
    "counter_identity",
    "default_counter",
    "event_tokens",
]


@runtime_checkable
class TokenCounter(Protocol):
    """Anything with `count(text) -> int`.

    A counter may also have an `identity` attribute: a string of 1-255 characters naming its
    encoding and the version of the code that counts (`"o200k_base toktok-rs/0.3.0"`). The
    counts of a counter with an identity are stored with the events at append and read back
    instead of tokenizing again; a counter without one is never trusted with a stored count.
    """

    def count(self, text: str) -> int:
        """The number of tokens in `text`."""
        ...


def counter_identity(counter: object) -> str | None:
    """The `identity` of `counter`: a non-empty string, or None when it names none."""
    identity = getattr(counter, "identity", None)
    return identity if isinstance(identity, str) and identity else None


class CharCounter:
    """One token per character: predictable counts for tests and worked examples."""

    identity = "chars/1"

    def count(self, text: str) -> int:
        return len(text)

    def __repr__(self) -> str:
        return "CharCounter()"


class ByteEstimateCounter:
    """ceil(utf-8 bytes / 4): a rough estimate that needs nothing."""

    identity = "utf8-bytes-div-4/1"

    def count(self, text: str) -> int:
        return -(-len(text.encode("utf-8")) // 4)

    def __repr__(self) -> str:
        return "ByteEstimateCounter()"


_load_lock = threading.Lock()


class O200kCounter:
    """Exact o200k_base counts (GPT-4o, GPT-4.1, o-series, GPT-5), offline, via `toktok-rs`.

    Making one imports the extension (about 3 ms); its vocabulary, compiled into it (nothing is
    downloaded), is built on the first count (about 0.6 s, once per process) and then shared.

    Raises:
        ImportError: when `toktok-rs` is not installed.
    """

    def __init__(self) -> None:
        import toktok

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
        return "O200kCounter()"


class TiktokenCounter:
    """Counts with `tiktoken`, for users who have it and its vocabulary files.

    Args:
        encoding: a tiktoken encoding name.

    Note that tiktoken downloads its vocabulary on first use unless it is cached already.
    """

    def __init__(self, encoding: str = "o200k_base") -> None:
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


_Key = tuple[str, str, int, object, int]


def _key(event: SessionEvent) -> _Key | None:
    # A stored event never changes and its id is unique in its store. The session, seq,
    # timestamp and a cheap size fingerprint keep apart events of two stores that reuse an id.
    if event.seq is None or event.timestamp is None:
        return None
    m = event.message
    size = -1 if m is None else len(m.text or "") + 7919 * (len(m.tool_calls) + len(m.tool_results))
    return (event.session_id, event.id, event.seq, event.timestamp, size)


class EventTokens:
    """Per-event token counts for one counter, computed once.

    A count stored with the event (`SessionEvent.tokens`, recorded at append) is used when this
    counter made it (same `identity`); nothing is tokenized then. Otherwise the count of a
    stored event (one with a seq and a timestamp) is cached by session, id, seq, timestamp and
    text size, since stored events never change and an event id names one event. Events not
    stored yet are counted every time. The cache is bounded (least recently used entries go
    first) and thread-safe.
    """

    def __init__(self, counter: TokenCounter, maxsize: int = 200_000) -> None:
        self.counter = counter
        self.identity = counter_identity(counter)
        if self.identity is not None:
            TokenCount(self.identity, 0)  # a name no store could keep is refused here
        self._maxsize = maxsize
        self._cache: OrderedDict[_Key, int] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, event: SessionEvent) -> int:
        """The tokens of one event's `event_text`."""
        tokens = event.tokens
        if tokens is not None and tokens.counter == self.identity:
            return tokens.count
        key = _key(event)
        if key is None:
            return self.counter.count(event_text(event))
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        n = self.counter.count(event_text(event))
        self._remember(key, n)
        return n

    def counts(self, events: Iterable[SessionEvent]) -> list[int]:
        """The tokens of each event, in order; uncached ones are counted in one batch."""
        identity = self.identity
        if isinstance(events, LazyEvents):  # the stored counts are known without decoding
            out: list[int | None] = events.stored_counts(identity)
            if None not in out:
                return out  # type: ignore[return-value]  # every slot is filled
            unknown = [i for i, n in enumerate(out) if n is None]
            for i, n in zip(unknown, self.counts(list(events.select(unknown))), strict=True):
                out[i] = n  # decoded, then counted (or found in the cache) as any event
            return out  # type: ignore[return-value]
        events = list(events)
        out = [None] * len(events)
        unknown = []
        for i, event in enumerate(events):
            tokens = event.tokens
            if tokens is not None and tokens.counter == identity:
                out[i] = tokens.count
            else:
                unknown.append(i)
        if not unknown:
            return out  # type: ignore[return-value]  # every slot is filled
        missing: list[int] = []
        with self._lock:
            for i in unknown:
                key = _key(events[i])
                hit = None if key is None else self._cache.get(key)
                if hit is None:
                    missing.append(i)
                else:
                    out[i] = hit
        if missing:
            fresh = self._count_texts([event_text(events[i]) for i in missing])
            for i, n in zip(missing, fresh, strict=True):
                out[i] = n
                key = _key(events[i])
                if key is not None:
                    self._remember(key, n)
        return [n for n in out if n is not None]

    def total(self, events: Iterable[SessionEvent]) -> int:
        """The tokens of all `events`."""
        return sum(self.counts(events))

    def counted(self, events: Sequence[SessionEvent]) -> list[SessionEvent]:
        """`events`, each message event carrying this counter's count (what an append stores).

        Events that carry this counter's count already are kept as they are, so nothing is
        tokenized for them; other events are returned unchanged. A counter without an
        `identity` counts nothing here: its counts are never stored.
        """
        identity = self.identity
        if identity is None:
            return list(events)
        todo = [
            i
            for i, e in enumerate(events)
            if e.message is not None and (e.tokens is None or e.tokens.counter != identity)
        ]
        if not todo:
            return list(events)
        out = list(events)
        fresh = self._count_texts([event_text(events[i]) for i in todo])
        for i, n in zip(todo, fresh, strict=True):
            out[i] = events[i].with_tokens(TokenCount(identity, n))
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
        # `shared_token_count` inlined for the common case (an append pays for every call)
        by_count = _shared_counts.get(identity)
        if by_count is not None:
            shared = by_count.get(count)
            if shared is not None:
                return shared
        return shared_token_count(identity, count)  # the identity was checked with the cache

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
