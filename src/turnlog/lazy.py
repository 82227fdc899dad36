"""`LazyEvents`: a store's events whose bodies are decoded when first read.

A compaction pass over a long view reads every event, but decides on little of each: its id,
its role, whether it is synthetic, and its stored token count. A store can hand the pass a
`LazyEvents` carrying exactly that outline, with the rows kept as read and each event decoded
into its `SessionEvent` only when something asks for it (indexing, iterating, comparing). The
window strategy plans from the outline, so a pass over 10,000 events decodes the few it keeps
and none of the ones it covers (`CompactionResult.covered_events` is then a `LazyEvents` too).

Pure: the rows are in memory already; decoding them is CPU work (and may raise `CorruptData`
for a damaged row, when that row is first read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any, Protocol, overload

from turnlog.events import SessionEvent, TokenCount, shared_token_count

__all__ = ["LazyEvents"]

Decoder = Callable[[list[int]], list[SessionEvent]]
"""Decodes the rows at the given positions of a source, in that order."""


class Counted(Protocol):
    """A stored count as a reader found it: a `TokenCount`, or the codec's own record."""

    @property
    def counter(self) -> str: ...

    @property
    def count(self) -> int: ...


class _Source:
    """The outline of every row read, the rows' decoder, and what was decoded so far."""

    __slots__ = ("decode", "events", "ids", "roles", "starts", "synthetic", "tokens")

    def __init__(
        self,
        ids: list[str],
        roles: list[str | None],
        synthetic: list[bool],
        tokens: Sequence[Counted | None],
        decode: Decoder | None,
        events: list[SessionEvent | None],
    ) -> None:
        self.ids = ids
        self.roles = roles
        self.synthetic = synthetic
        self.tokens = tokens
        self.decode = decode
        self.events = events
        self.starts: tuple[int, ...] | None = None  # the turn starts, once asked for

    def load(self, positions: Iterable[int]) -> None:
        """Decode the rows at `positions` not decoded yet, in one batch."""
        events = self.events
        missing = [p for p in positions if events[p] is None]
        if not missing:
            return
        assert self.decode is not None  # a source without a decoder is decoded whole
        for p, event in zip(missing, self.decode(missing), strict=True):
            events[p] = event


class LazyEvents(Sequence[SessionEvent]):
    """A read-only sequence of stored events, each decoded on first access.

    It behaves as a tuple of `SessionEvent`s: `len`, indexing, slicing (a slice is lazy too),
    iteration (which decodes what is left in one batch), `in`, and equality with any sequence
    of events. Its outline (`ids`, `roles`, `synthetic`, `tokens`) is known without decoding
    anything. Safe to share between threads: a row decoded twice at once gives equal events.

    Raises:
        CorruptData: from an access that decodes a damaged row (the error names the session
            and the row); the rows around it stay readable.
    """

    __slots__ = ("_positions", "_source")

    def __init__(self, source: _Source, positions: range | list[int]) -> None:
        self._source = source
        self._positions = positions

    @classmethod
    def of_rows(
        cls,
        ids: list[str],
        roles: list[str | None],
        synthetic: list[bool],
        tokens: Sequence[Counted | None],
        decode: Decoder,
    ) -> LazyEvents:
        """Events read by a store: each row's outline (its id; its message's role, None for
        an event that is not a message; its synthetic flag; its stored count, None for none)
        and `decode`, which turns the rows at some positions into their events.
        """
        n = len(ids)
        return cls(_Source(ids, roles, synthetic, tokens, decode, [None] * n), range(n))

    @classmethod
    def of(cls, events: Iterable[SessionEvent]) -> LazyEvents:
        """Events decoded already (a store that reads its view whole), outlined from them."""
        events = list(events)
        roles: list[str | None] = [None if (m := e.message) is None else m.role for e in events]
        source = _Source(
            [e.id for e in events],
            roles,
            [e.synthetic for e in events],
            [e.tokens for e in events],
            None,
            list[SessionEvent | None](events),
        )
        return cls(source, range(len(events)))

    # -- the outline ------------------------------------------------------------------------

    def _column(self, values: Sequence[Any]) -> tuple[Any, ...]:
        positions = self._positions
        if isinstance(positions, range) and positions.step == 1:
            return tuple(values[positions.start : positions.stop])
        if len(positions) < 2:
            return tuple([values[p] for p in positions])
        return itemgetter(*positions)(values)  # type: ignore[no-any-return]  # a tuple, in C

    @property
    def turn_starts(self) -> tuple[int, ...]:
        """The indexes of the turns' first events (non-synthetic user messages), in order."""
        source, positions = self._source, self._positions
        whole = isinstance(positions, range) and positions == range(len(source.ids))
        if whole and source.starts is not None:
            return source.starts
        starts = _starts(self.roles, self.synthetic)
        if whole:
            source.starts = starts
        return starts

    @property
    def ids(self) -> tuple[str, ...]:
        """Each event's id."""
        return self._column(self._source.ids)

    @property
    def roles(self) -> tuple[str | None, ...]:
        """Each event's message role; None for an event that is not a message."""
        return self._column(self._source.roles)

    @property
    def synthetic(self) -> tuple[bool, ...]:
        """Each event's `synthetic` flag."""
        return self._column(self._source.synthetic)

    @property
    def tokens(self) -> tuple[TokenCount | None, ...]:
        """Each event's stored token count (`SessionEvent.tokens`); None where none is."""
        return tuple(
            [
                t if t is None or type(t) is TokenCount else shared_token_count(t.counter, t.count)
                for t in self._column(self._source.tokens)
            ]
        )

    def stored_counts(self, counter: str | None) -> list[int | None]:
        """Each event's stored count by the counter named `counter` (its `identity`); None
        where the event has none, or one by another counter."""
        if counter is None:
            return [None] * len(self)
        return [
            None if t is None or t.counter != counter else t.count
            for t in self._column(self._source.tokens)
        ]

    @property
    def decoded(self) -> int:
        """How many of these events have been decoded so far."""
        events = self._source.events
        return sum(1 for p in self._positions if events[p] is not None)

    def select(self, indexes: Iterable[int]) -> LazyEvents:
        """The events at `indexes` (positions in this sequence, 0 to len - 1, in the order
        given), lazily.

        Raises:
            IndexError: an index out of that range.
        """
        positions = self._positions
        chosen = list(indexes)
        if chosen and not 0 <= min(chosen) <= max(chosen) < len(positions):
            raise IndexError("LazyEvents.select: an index out of range")
        if isinstance(positions, range) and positions.start == 0 and positions.step == 1:
            return LazyEvents(self._source, chosen)  # an index is its position
        return LazyEvents(self._source, [positions[i] for i in chosen])

    # -- the sequence -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...

    @overload
    def __getitem__(self, index: slice) -> LazyEvents: ...

    def __getitem__(self, index: int | slice) -> SessionEvent | LazyEvents:
        if isinstance(index, slice):
            return LazyEvents(self._source, self._positions[index])
        return self._event(self._positions[index])

    def __iter__(self) -> Iterator[SessionEvent]:
        source = self._source
        source.load(self._positions)
        events = source.events
        for p in self._positions:
            event = events[p]
            assert event is not None
            yield event

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, SessionEvent):
            return False
        ids = self._source.ids
        return any(ids[p] == value.id and self._event(p) == value for p in self._positions)

    def _event(self, position: int) -> SessionEvent:
        """The event at `position` of the source, decoded if it was not yet."""
        events = self._source.events
        event = events[position]
        if event is None:
            self._source.load((position,))
            event = events[position]
            assert event is not None
        return event

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyEvents):
            if other._source is self._source and list(other._positions) == list(self._positions):
                return True
        elif not isinstance(other, (tuple, list)):
            return NotImplemented
        if len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to tuples, so not hashable like them

    def __repr__(self) -> str:
        return f"<LazyEvents: {len(self)} events, {self.decoded} decoded>"


def outline_of(
    view: Sequence[SessionEvent],
) -> tuple[tuple[str | None, ...], tuple[bool, ...]]:
    """The roles (None for an event that is not a message) and synthetic flags of `view`,
    read from its outline when it is a `LazyEvents` (nothing is decoded)."""
    if isinstance(view, LazyEvents):
        return view.roles, view.synthetic
    return (
        tuple([None if (m := e.message) is None else m.role for e in view]),
        tuple([e.synthetic for e in view]),
    )


def turn_starts(
    view: Sequence[SessionEvent], roles: Sequence[str | None], synthetic: Sequence[bool]
) -> tuple[int, ...]:
    """The positions in `view` of its turns' first events (non-synthetic user messages), from
    `view`'s outline (`roles`, `synthetic`; a `LazyEvents` keeps them once found)."""
    if isinstance(view, LazyEvents):
        return view.turn_starts
    return _starts(roles, synthetic)


def _starts(roles: Sequence[str | None], synthetic: Sequence[bool]) -> tuple[int, ...]:
    flags = enumerate(zip(roles, synthetic, strict=True))
    return tuple([i for i, (r, s) in flags if r == "user" and not s])


def pick(view: Sequence[SessionEvent], indexes: Sequence[int]) -> Sequence[SessionEvent]:
    """The events of `view` at `indexes`: lazily when `view` is a `LazyEvents`, else a tuple."""
    if isinstance(view, LazyEvents):
        return view.select(indexes)
    return tuple([view[i] for i in indexes])
