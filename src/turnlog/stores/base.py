"""`EventFilter` and the rules every store shares (the store protocols are in `protocol_async.py`
and its generated twin `protocol.py`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import overload

from turnlog.errors import InvalidInput
from turnlog.events import (
    EventType,
    Role,
    Session,
    SessionEvent,
    TokenCount,
    check_id,
    check_json,
    trusted_copy,
)
from turnlog.payloads import CompactionBoundary
from turnlog.rules import EMPTY_TAIL, Tail, check_append, needs_tail, tail_of

__all__ = [
    "Clock",
    "EventFilter",
    "TailMemory",
    "apply_filter",
    "check_batch",
    "check_boundaries",
    "check_cutoff",
    "check_event",
    "check_limit",
    "check_metadata_query",
    "check_range",
    "check_retry",
    "check_rules_at",
    "check_session",
    "check_token_counts",
    "check_version",
    "metadata_matches",
    "stamped",
    "utc_now",
]

Clock = Callable[[], datetime]
"""Returns the current time, timezone-aware."""


def utc_now() -> datetime:
    """The current UTC time (the stores' default clock)."""
    return datetime.now(UTC)


class _LastN:
    """`EventFilter.last_n(n)` builds a filter; `flt.last_n` reads the number (or None)."""

    @overload
    def __get__(self, obj: None, owner: type[EventFilter]) -> Callable[[int], EventFilter]: ...

    @overload
    def __get__(self, obj: EventFilter, owner: type[EventFilter]) -> int | None: ...

    def __get__(
        self, obj: EventFilter | None, owner: type[EventFilter]
    ) -> Callable[[int], EventFilter] | int | None:
        if obj is None:
            return lambda n: owner(last_n=n)
        return obj._last_n


class EventFilter:
    """Which events of a session to read.

    Args:
        active_view: only the events of the active view, in view order (else the whole log).
        event_types: only events of these types.
        roles: only message events with these roles.
        exclude_synthetic: leave out the summary events compactions wrote.
        last_n: the newest `n` matching events, extended back to the start of the turn the
            window lands in (so a turn is never cut).

    Raises:
        InvalidInput: `last_n` is not a positive integer.
    """

    __slots__ = ("_last_n", "active_view", "event_types", "exclude_synthetic", "roles")

    last_n = _LastN()

    def __init__(
        self,
        active_view: bool = False,
        event_types: Iterable[EventType] | None = None,
        roles: Iterable[Role] | None = None,
        exclude_synthetic: bool = False,
        last_n: int | None = None,
    ) -> None:
        if last_n is not None and (
            isinstance(last_n, bool) or not isinstance(last_n, int) or last_n <= 0
        ):
            raise InvalidInput(f"last_n must be a positive integer, got {last_n!r}")
        self.active_view = bool(active_view)
        self.event_types = None if event_types is None else frozenset(event_types)
        self.roles: frozenset[Role] | None = None if roles is None else frozenset(roles)
        self.exclude_synthetic = bool(exclude_synthetic)
        self._last_n = last_n

    @classmethod
    def all(cls) -> EventFilter:
        """Every event of the log, oldest first."""
        return cls()

    @classmethod
    def active(cls) -> EventFilter:
        """The active view."""
        return cls(active_view=True)

    def _key(self) -> tuple[object, ...]:
        return (
            self.active_view,
            self.event_types,
            self.roles,
            self.exclude_synthetic,
            self._last_n,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EventFilter) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"EventFilter(active_view={self.active_view}, event_types={self.event_types}, "
            f"roles={self.roles}, exclude_synthetic={self.exclude_synthetic}, "
            f"last_n={self._last_n})"
        )


def apply_filter(events: Sequence[SessionEvent], flt: EventFilter) -> list[SessionEvent]:
    """`events` (a log or a view, in order) narrowed by everything in `flt` but `active_view`."""
    out = [
        e
        for e in events
        if (flt.event_types is None or e.type in flt.event_types)
        and (flt.roles is None or e.role in flt.roles)
        and not (flt.exclude_synthetic and e.synthetic)
    ]
    last_n = flt.last_n
    if last_n is None or len(out) <= last_n:
        return out
    start = len(out) - last_n
    back = start
    while back >= 0 and not out[back].starts_turn:
        back -= 1
    return out[back if back >= 0 else start :]


def stamped(event: SessionEvent, seq: int, timestamp: datetime) -> SessionEvent:
    """A copy of a validated `event` at `seq` and `timestamp`, without validating it again."""
    return trusted_copy(event, seq=seq, timestamp=timestamp)


def check_token_counts(counts: Mapping[str, TokenCount]) -> dict[str, TokenCount]:
    """The counts `record_tokens` was given, checked: event ids to `TokenCount`s.

    Raises:
        InvalidInput: not a mapping, or a key or value of the wrong kind.
    """
    if not isinstance(counts, Mapping):
        raise InvalidInput(f"counts must map event ids to TokenCount, got {type(counts).__name__}")
    checked: dict[str, TokenCount] = {}
    for event_id, count in counts.items():
        if not isinstance(event_id, str):
            raise InvalidInput(f"an event id must be a string, got {type(event_id).__name__}")
        if not isinstance(count, TokenCount):
            raise InvalidInput(
                f"the count of event {event_id!r} must be a TokenCount, got {type(count).__name__}"
            )
        checked[event_id] = count
    return checked


def check_batch(
    session_id: str, events: Iterable[SessionEvent], expected_version: int
) -> list[SessionEvent]:
    """Validate a batch before any write; returns it as a list.

    Raises:
        InvalidInput: an event of another session, a repeated id, a bad version.
    """
    check_id(session_id, "session id")
    check_version(expected_version)
    if isinstance(events, (str, bytes, SessionEvent)):
        raise InvalidInput(f"expected a sequence of SessionEvent, got {type(events).__name__}")
    try:
        batch = list(events)
    except TypeError:
        raise InvalidInput(
            f"expected a sequence of SessionEvent, got {type(events).__name__}"
        ) from None
    seen: set[str] = set()
    for event in batch:
        if not isinstance(event, SessionEvent):
            raise InvalidInput(f"expected SessionEvent, got {type(event).__name__}")
        if event.session_id != session_id:
            raise InvalidInput(
                f"event {event.id!r} belongs to session {event.session_id!r}, not {session_id!r}"
            )
        if event.id in seen:
            raise InvalidInput(f"event id {event.id!r} appears twice in one batch")
        seen.add(event.id)
    return batch


def check_version(expected_version: object) -> int:
    """Raise `InvalidInput` unless `expected_version` is an integer from 0 to 2**63 - 1.

    (A version is a count of events; every store keeps it in 64 bits.)
    """
    if (
        isinstance(expected_version, bool)
        or not isinstance(expected_version, int)
        or not 0 <= expected_version < 2**63
    ):
        raise InvalidInput(
            f"expected_version must be an integer from 0 to 2**63 - 1 (the version you read), "
            f"got {expected_version!r}"
        )
    return expected_version


def check_limit(limit: object) -> int | None:
    """Raise `InvalidInput` unless `limit` (of `list_sessions`) is None or an integer from 0
    to 2**63 - 1 (the largest every store's database takes: SQLite and PostgreSQL hold 64-bit
    integers, Redis ranges too).

    Returns:
        `limit`; None means no limit, 0 an empty list.
    """
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit < 2**63:
        raise InvalidInput(
            "limit must be an integer from 0 to 2**63 - 1, or None for every session, "
            f"got {limit!r}"
        )
    return limit


def check_range(after: object, limit: object) -> tuple[int, int]:
    """Raise `InvalidInput` unless `after` (an integer >= 0) and `limit` (an integer >= 1) pick
    a range of a log for `events_after`.

    Returns:
        (`after`, `limit`).
    """
    for name, value, low in (("after", after, 0), ("limit", limit, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2**63:
            raise InvalidInput(f"{name} must be an integer >= {low}, got {value!r}")
    assert isinstance(after, int) and isinstance(limit, int)
    return after, limit


def check_cutoff(before: object) -> datetime:
    """Raise `InvalidInput` unless `before` (of `delete_expired`) is a timezone-aware datetime.

    Returns:
        `before`, unchanged (any aware datetime is a valid cutoff, even outside the range
        sessions can hold).
    """
    if not isinstance(before, datetime) or before.utcoffset() is None:
        raise InvalidInput(
            f"delete_expired needs a timezone-aware datetime, got {before!r}: "
            "pass for example datetime.now(UTC)"
        )
    return before


def check_session(session: object) -> Session:
    """Raise `InvalidInput` unless `session` is a `Session` every store can save.

    Session metadata must not hold U+0000 in any key or string: PostgreSQL's jsonb cannot
    store it, so no store accepts it (event payloads and metadata may hold it).

    Returns:
        `session`.
    """
    if not isinstance(session, Session):
        raise InvalidInput(f"expected a Session, got {type(session).__name__}")
    stack: list[object] = [session.metadata]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise InvalidInput(
                    f"the metadata of session {session.id!r} holds the character U+0000, "
                    "which session metadata cannot carry: remove it (or put it in an event)"
                )
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
    return session


def check_metadata_query(name: object, value: object) -> bool:
    """Raise `InvalidInput` unless `name` and `value` make a `find_by_metadata` query.

    Returns:
        False when no stored session can match (a U+0000 in `name` or `value`: see
        `check_session`); the store then answers an empty list without asking its database.
    """
    if not isinstance(name, str):
        raise InvalidInput(f"a metadata key is a string, got {type(name).__name__}")
    if isinstance(value, float) or not isinstance(value, (str, int)):
        raise InvalidInput(
            f"find_by_metadata compares strings, integers or booleans, got {type(value).__name__}"
        )
    check_json({name: value}, "a find_by_metadata query")
    return "\x00" not in name and not (isinstance(value, str) and "\x00" in value)


def metadata_matches(metadata: Mapping[str, object], name: str, value: object) -> bool:
    """True when `metadata[name]` equals `value` and has its type (`1` is not `True`)."""
    if name not in metadata:
        return False
    stored = metadata[name]
    return type(stored) is type(value) and stored == value


def check_event(event: object) -> SessionEvent:
    """Raise `InvalidInput` unless `event` is a `SessionEvent`; returns it."""
    if not isinstance(event, SessionEvent):
        raise InvalidInput(f"expected a SessionEvent, got {type(event).__name__}")
    return event


def check_boundaries(batch: Sequence[SessionEvent], known: Callable[[list[str]], set[str]]) -> None:
    """Check that each COMPACTION event of `batch` names only events the log will hold.

    Args:
        batch: the events about to be appended.
        known: given ids, returns those the session's log already holds as message events.

    Raises:
        InvalidInput: a boundary payload is malformed or names an unknown event.
    """
    for at, event in enumerate(batch):
        if event.type != EventType.COMPACTION:
            continue
        try:
            boundary = CompactionBoundary.from_event(event)
        except Exception as exc:
            raise InvalidInput(f"compaction event {event.id!r} is malformed: {exc}") from exc
        _check_order(event.id, boundary, batch[at + 1 :])
        earlier = {e.id for e in batch[:at] if e.message is not None}
        placed = boundary.appended_event_ids
        later = {e.id for e in batch[at + 1 :] if e.message is not None and e.id in placed}
        names = [i for i in boundary.view_event_ids if i not in earlier]
        originals = [i for i in boundary.replaced.values() if i not in earlier]
        missing = set(names) - later - known(names)
        missing |= set(originals) - known(originals)
        if missing:
            raise InvalidInput(
                f"compaction event {event.id!r} names events that are not message events of "
                f"this session: {', '.join(sorted(missing)[:5])}"
            )


def _check_order(
    boundary_id: str, boundary: CompactionBoundary, after: Sequence[SessionEvent]
) -> None:
    """Refuse a boundary that names an event twice, or names an event that comes after it
    (other than its own summary events and stand-ins): its view could not be built."""
    names = boundary.view_event_ids
    twice = sorted({i for i in names if names.count(i) > 1})
    if twice:
        raise InvalidInput(
            f"compaction event {boundary_id!r} names events more than once: "
            f"{', '.join(twice[:5])}; a view holds each event once"
        )
    later = {e.id for e in after} | {boundary_id}
    placed = boundary.appended_event_ids
    early = sorted(
        {i for i in names if i in later and i not in placed}
        | {i for i in boundary.replaced.values() if i in later}
    )
    if early:
        raise InvalidInput(
            f"compaction event {boundary_id!r} names events that come after it: "
            f"{', '.join(early[:5])}; a boundary names earlier events, and only its own "
            "summary events and stand-ins after it"
        )


TailRows = Iterator[tuple[str, Sequence[str]]]
"""A log's non-synthetic user, assistant and tool messages, newest first, as `rules.tail_of`
reads them; fetched lazily."""


def check_rules_at(
    batch: list[SessionEvent],
    expected: int | None,
    read_tail: Callable[[], tuple[int, TailRows]],
    stored: Callable[[list[str]], set[str]],
) -> tuple[int | None, Tail | None]:
    """The view-rule check of a store that reads the end of the log before a version-checked
    write (PostgreSQL, Redis): the write must then be conditioned on the version returned.

    Args:
        batch: the events to append.
        expected: the version the caller expects; None to append at the end.
        read_tail: returns the log's version and its messages newest first (lazily).
        stored: given ids, returns those the session holds already.

    Returns:
        The version the write must be conditioned on (None when the check cannot apply
        because the log is not at `expected`: the write then raises `VersionConflict`, or
        skips a retry's stored events), and the log's `Tail` once the whole batch is written
        (None when it is not known: the log's end was not read, or part of the batch is a
        retry of events stored already). A store may remember that tail (`TailMemory`).

    Raises:
        InvalidInput: the new events of `batch` break a view rule.
    """
    if not needs_tail(batch):
        _check_new(EMPTY_TAIL, batch, stored)
        return expected, None
    version, rows = read_tail()
    try:
        if expected is not None and version != expected:
            return None, None
        tail = tail_of(rows)
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()
    return version, _check_new(tail, batch, stored)


def _check_new(
    tail: Tail, batch: list[SessionEvent], stored: Callable[[list[str]], set[str]]
) -> Tail | None:
    """`check_append(tail, batch)`; when that refuses, the events of `batch` not stored yet are
    checked instead (a retry skips the rest). Returns the tail after the whole batch, or None
    when part of it was a retry."""
    try:
        return check_append(tail, batch)
    except InvalidInput as refusal:
        check_retry(tail, batch, stored([e.id for e in batch]), refusal)
    return None


def check_retry(
    tail: Tail, batch: list[SessionEvent], known: Collection[str], refusal: InvalidInput
) -> None:
    """After `check_append(tail, batch)` refused the batch with `refusal`: check only its
    events whose ids are not in `known` (those the session holds already: a retry skips them).

    Raises:
        InvalidInput: `refusal`, when none of the batch is stored; or the refusal of its new
            events.
    """
    fresh = [e for e in batch if e.id not in known]
    if len(fresh) == len(batch):
        raise refusal
    check_append(tail, fresh)


class TailMemory:
    """What one store handle remembers of the logs it appended to last, so that its next
    append checks the view rules without reading the end of the log.

    An entry is (version, fence, `Tail`): the log's version after this handle's last append,
    a token of the store's choosing that the write is also conditioned on (the newest event
    id, or the session's incarnation: a version alone cannot tell a session that another
    handle deleted and created again), and the tail after that append. An entry is only a
    guess: the store conditions its write on (version, fence), and when that write fails it
    forgets the entry and reads the log. Thread-safe; bounded (cleared at `limit` entries).
    """

    __slots__ = ("_entries", "_limit", "_lock")

    def __init__(self, limit: int = 10_000) -> None:
        self._entries: dict[str, tuple[int, str, Tail]] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, session_id: str) -> tuple[int, str, Tail] | None:
        """The entry of `session_id`, or None."""
        return self._entries.get(session_id)

    def remember(self, session_id: str, version: int, fence: str, tail: Tail) -> None:
        """Remember the log of `session_id` at `version`, its `fence` and its `tail`."""
        entries = self._entries
        if session_id in entries:  # an update: one atomic dict store, no lock needed
            entries[session_id] = (version, fence, tail)
            return
        with self._lock:
            if len(self._entries) >= self._limit and session_id not in self._entries:
                self._entries.clear()
            self._entries[session_id] = (version, fence, tail)

    def forget(self, session_id: str) -> None:
        """Drop the entry of `session_id`, if any."""
        with self._lock:
            self._entries.pop(session_id, None)

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


MAX_EVENT_IDS = 1000
"""The most ids one `events_by_id` call takes."""


def check_event_ids(ids: object) -> list[str]:
    """The ids of an `events_by_id` call, each once, in order.

    Raises:
        InvalidInput: not a list of valid event ids, or more than `MAX_EVENT_IDS`.
    """
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise InvalidInput(f"ids must be a list of event ids, got {ids!r}")
    out = list(dict.fromkeys(check_id(i, "event id") for i in ids))
    if len(out) > MAX_EVENT_IDS:
        raise InvalidInput(f"at most {MAX_EVENT_IDS} ids a call, got {len(out)}")
    return out


def session_matches(session: Session, metadata: Mapping[str, str | int | bool] | None) -> bool:
    """Whether the session's metadata has each name of `metadata` equal to its value (a bool
    is not an int: True does not match 1)."""
    if metadata is None:
        return True
    for name, value in metadata.items():
        held = session.metadata.get(name, _MISSING)
        if type(held) is not type(value) or held != value:
            return False
    return True


_MISSING = object()
