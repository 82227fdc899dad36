"""The typed payloads of the event types turnlog writes: `CompactionBoundary` (a COMPACTION
event: the record of one compaction, and the projection of a log to its view) and
`ToolsDiscovered` (a TURNLOG.TOOLS_DISCOVERED event: the tools a search found).

msgspec structs, next to the events they ride on (part of the pure core, like `turnlog.events`:
no I/O, no clock). Building one checks each field and raises `InvalidInput`. The codec reads a
stored payload of such an event into its record once, checked in C (`record_of`), and the event
carries it (`SessionEvent.record`), so `CompactionBoundary.from_event` costs nothing more on an
event read from a store. The stored bytes are those of the payload as JSON, as before the records
existed (`to_payload`): see `turnlog.codec`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Final, TypeAlias

import msgspec
from msgspec.structs import force_setattr

from turnlog.errors import CorruptData, InvalidInput
from turnlog.events import MAX_ID_LENGTH, EventType, JsonValue, SessionEvent, check_id, new_id
from turnlog.parts import _check_text, _Checked

__all__ = [
    "TOOLS_DISCOVERED",
    "CompactionBoundary",
    "ToolsDiscovered",
    "record_of",
]

_ID_PATTERN: Final = r"\A(?=.*\S)[^\x00-\x1f\x7f-\x9f\ud800-\udfff]*\Z"
"""`check_id` as a pattern msgspec checks in C: not blank, no control character, no lone
surrogate (the length is checked beside it)."""
_Id: TypeAlias = Annotated[str, msgspec.Meta(max_length=MAX_ID_LENGTH, pattern=_ID_PATTERN)]
_Name: TypeAlias = Annotated[str, msgspec.Meta(min_length=1)]
_ID_LISTS: Final = ("pinned_event_ids", "summary_event_ids", "preserved_event_ids")
_KEYS: Final = (*_ID_LISTS, "covered_event_count", "tokens_estimated_saved", "strategy")
_convert: Final = msgspec.convert


class CompactionBoundary(msgspec.Struct, frozen=True, omit_defaults=True, metaclass=_Checked):
    """The payload of a COMPACTION event: the view from then on, named by event id.

    A compaction never changes the events already in the log. It appends one boundary event and,
    right after it, the synthetic summary events. The boundary names the events of the view:
    pinned ones first (the latest system message, a preamble, a carried-forward summary), then
    the summary events, then the preserved recent conversation in log order. Every other event
    that was in the view is covered: it stays in the log and leaves the prompt.

    Building one checks each field (`InvalidInput`); an event read from a store carries its
    boundary decoded and checked once, by the codec (`SessionEvent.record`), so `from_event`
    costs nothing more.
    """

    id: _Id
    """The id of the boundary event."""
    pinned_event_ids: tuple[_Id, ...]
    """The events kept at the front of the view, in view order."""
    summary_event_ids: tuple[_Id, ...]
    """The summary events appended right after the boundary, in order; empty for a plain window."""
    preserved_event_ids: tuple[_Id, ...]
    """The events kept verbatim, in log order."""
    covered_event_count: int
    """How many events left the view (for reporting)."""
    tokens_estimated_saved: int
    """The estimated tokens removed from the prompt, net of the summary (for reporting)."""
    strategy: str
    """The name of the strategy that compacted."""
    replaced: Mapping[_Id, _Id] = {}
    """Stand-ins: the id of an event this compaction appended after the boundary -> the id of
    the event it stands in for (e.g. a tool result cleared to a short note). The stand-in is
    named in the view lists where the original was; the original stays in the log. Empty for
    a compaction that replaced nothing, and then not stored (older boundaries read the same)."""

    def _check(self) -> None:
        check_id(self.id, "a boundary's id")
        for name in _ID_LISTS:
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, Sequence):
                raise InvalidInput(
                    f"a boundary's {name} must be a sequence of ids, got {type(value).__name__}"
                )
            ids = tuple(value)
            for i in ids:
                check_id(i, f"an id of a boundary's {name}")
            force_setattr(self, name, ids)
        for name in ("covered_event_count", "tokens_estimated_saved"):
            n = getattr(self, name)
            if isinstance(n, bool) or not isinstance(n, int):
                raise InvalidInput(f"a boundary's {name} must be an integer, got {n!r}")
        _check_text(self.strategy, "a boundary's strategy")
        if not isinstance(self.replaced, Mapping):
            raise InvalidInput(
                "a boundary's replaced must map stand-in ids to original ids, got "
                f"{type(self.replaced).__name__}"
            )
        replaced = dict(self.replaced)
        for stand_in, original in replaced.items():
            check_id(stand_in, "a stand-in id")
            check_id(original, "a replaced id")
        force_setattr(self, "replaced", replaced)
        problem = self._replaced_problem()
        if problem is not None:
            raise InvalidInput(f"compaction boundary {self.id!r}: {problem}")

    def _replaced_problem(self) -> str | None:
        """What is wrong with `replaced`, given ids that are each fine: None when nothing.

        A stand-in is named by the view; what it stands in for is not (nor is it itself); no
        event is replaced twice."""
        replaced = self.replaced
        if not replaced:
            return None
        named = set(self.pinned_event_ids) | set(self.preserved_event_ids)
        for stand_in, original in replaced.items():
            if stand_in not in named:
                return f"stand-in {stand_in!r} is not named by the view"
            if original in named or original == stand_in:
                return f"event {original!r} is both replaced and in the view"
        if len(set(replaced.values())) != len(replaced):
            return "an event is replaced twice"
        return None

    @classmethod
    def _read(cls, boundary_id: str, payload: JsonValue) -> CompactionBoundary | None:
        """The boundary a stored `payload` (plain JSON) holds, typed and checked in C; None
        when it is not a boundary (`from_payload` then says why)."""
        if type(payload) is not dict:
            return None
        try:
            boundary = _convert({**payload, "id": boundary_id}, cls)
        except msgspec.ValidationError:
            return None
        return None if boundary._replaced_problem() else boundary

    def to_payload(self) -> dict[str, Any]:
        """The payload of the boundary event, as stored (the event id is not repeated)."""
        payload: dict[str, Any] = {
            "pinned_event_ids": list(self.pinned_event_ids),
            "summary_event_ids": list(self.summary_event_ids),
            "preserved_event_ids": list(self.preserved_event_ids),
            "covered_event_count": self.covered_event_count,
            "tokens_estimated_saved": self.tokens_estimated_saved,
            "strategy": self.strategy,
        }
        if self.replaced:
            payload["replaced"] = dict(self.replaced)
        return payload

    def to_event(self, session_id: str) -> SessionEvent:
        """The COMPACTION event that records this boundary in `session_id`'s log.

        Raises:
            InvalidInput: a bad session id.
        """
        return SessionEvent(
            self.id, session_id, EventType.COMPACTION, payload=self.to_payload(), record=self
        )

    @classmethod
    def from_event(cls, event: SessionEvent) -> CompactionBoundary:
        """The boundary a COMPACTION event records: the one it carries (`event.record`).

        Raises:
            InvalidInput: `event` is not a COMPACTION event.
            CorruptData: its payload is not a boundary.
        """
        if event.type != EventType.COMPACTION:
            raise InvalidInput(
                f"event {event.id!r} is a {event.type.name} event, not a COMPACTION event"
            )
        record = event.record
        if type(record) is CompactionBoundary:
            return record
        return cls.from_payload(event.id, event.payload, where=f"event {event.id!r}")

    @classmethod
    def from_payload(cls, boundary_id: str, payload: Any, *, where: str = "") -> CompactionBoundary:
        """The boundary stored as `payload` under the event id `boundary_id`.

        Raises:
            CorruptData: `payload` is not a boundary payload.
        """
        boundary = cls._read(boundary_id, payload)
        if boundary is not None:
            return boundary
        raise CorruptData(
            f"compaction boundary {where or repr(boundary_id)} is damaged: "
            f"{_boundary_problem(boundary_id, payload)}"
        )

    @property
    def view_event_ids(self) -> tuple[str, ...]:
        """Pinned, summary and preserved ids, in view order."""
        return self.pinned_event_ids + self.summary_event_ids + self.preserved_event_ids

    @property
    def appended_event_ids(self) -> frozenset[str]:
        """The ids of the events this compaction appended after it: summary and stand-ins."""
        return frozenset(self.summary_event_ids) | frozenset(self.replaced)

    @staticmethod
    def newest(log: Sequence[SessionEvent]) -> CompactionBoundary | None:
        """The newest boundary of `log` (oldest event first), or None if it was never compacted.

        Raises:
            CorruptData: that boundary is damaged.
        """
        for event in reversed(log):
            if event.type == EventType.COMPACTION:
                return CompactionBoundary.from_event(event)
        return None

    @staticmethod
    def project(log: Sequence[SessionEvent]) -> list[SessionEvent]:
        """The active view of `log`: what the model sees.

        From the newest boundary: the pinned events, then the summary events, then the preserved
        events, then every message event appended after the boundary. A stand-in the boundary
        appended (`replaced`) sits where the boundary names it, in its original's place; the
        original is not in the view. A log without a boundary is its own view. Boundary events
        and events of other types are never in the view.

        Args:
            log: the events of one session, oldest first: the whole log, or any part of it that
                holds the newest boundary, the events it names and every event after it.

        Returns:
            A new list.

        Raises:
            CorruptData: the newest boundary names an event that `log` does not hold, or is
                damaged.
        """
        at = len(log) - 1
        while at >= 0 and log[at].type != EventType.COMPACTION:
            at -= 1
        if at < 0:
            return [e for e in log if e.message is not None]
        boundary = CompactionBoundary.from_event(log[at])
        by_id = {e.id: e for e in log[:at] if e.message is not None}
        placed = boundary.appended_event_ids
        after = [e for e in log[at + 1 :] if e.message is not None]
        by_id.update((e.id, e) for e in after if e.id in placed)
        view = []
        for event_id in boundary.view_event_ids:
            event = by_id.get(event_id)
            if event is None:
                raise CorruptData(
                    f"compaction boundary {boundary.id!r} names event {event_id!r}, which is not "
                    "in the log: the log is incomplete or damaged"
                )
            view.append(event)
        view.extend(e for e in after if e.id not in placed)
        return view


def _boundary_problem(boundary_id: str, payload: Any) -> str:
    """Why `payload`, which the typed read refused, is not a boundary: the checks of the
    constructor say it in words (the slow path, for a damaged boundary only)."""
    if not isinstance(payload, Mapping) or any(k not in payload for k in _KEYS):
        return f"a boundary payload needs the keys {', '.join(_KEYS)}"
    try:
        CompactionBoundary(
            boundary_id,
            payload["pinned_event_ids"],
            payload["summary_event_ids"],
            payload["preserved_event_ids"],
            payload["covered_event_count"],
            payload["tokens_estimated_saved"],
            payload["strategy"],
            payload.get("replaced", {}),
        )
    except InvalidInput as exc:
        return str(exc)
    try:
        _convert({**payload, "id": boundary_id}, CompactionBoundary)
    except msgspec.ValidationError as exc:
        return str(exc)
    return "it is not a boundary payload"  # pragma: no cover - the checks above agree


TOOLS_DISCOVERED: Final = EventType("TURNLOG.TOOLS_DISCOVERED")
"""The event type of a tool search's discovery (`ToolsDiscovered`; see `turnlog.toolsearch`)."""


class ToolsDiscovered(msgspec.Struct, frozen=True, metaclass=_Checked):
    """The payload of a TURNLOG.TOOLS_DISCOVERED event: the tools one search found that were
    new to the session, so that they stay offered across compactions and restarts.

    Stored as `{"names": [...], "query": "..."}`. Building one checks each field
    (`InvalidInput`); an event read from a store carries it decoded once (`SessionEvent.record`).
    """

    names: tuple[_Name, ...]
    """The tools' names, in the order found."""
    query: str = ""
    """The search's query (`turnlog.toolsearch.discovery_event` cuts it to `MAX_QUERY_CHARS`)."""

    def _check(self) -> None:
        if isinstance(self.names, str) or not isinstance(self.names, Sequence):
            raise InvalidInput(
                f"a discovery's names must be a sequence of names, got {type(self.names).__name__}"
            )
        names = tuple(self.names)
        for name in names:
            if not _check_text(name, "a discovered tool's name"):
                raise InvalidInput("a discovered tool's name must not be empty")
        force_setattr(self, "names", names)
        _check_text(self.query, "a discovery's query")

    @classmethod
    def _read(cls, _event_id: str, payload: JsonValue) -> ToolsDiscovered | None:
        """The discovery a stored `payload` (plain JSON) holds, typed in C; None when it is not
        one."""
        if type(payload) is not dict:
            return None
        try:
            return _convert(payload, cls)
        except msgspec.ValidationError:
            return None

    def to_payload(self) -> dict[str, Any]:
        """The payload of the discovery event, as stored."""
        return {"names": list(self.names), "query": self.query}

    def to_event(self, session_id: str) -> SessionEvent:
        """A TURNLOG.TOOLS_DISCOVERED event (with a fresh id) recording this discovery.

        Raises:
            InvalidInput: a bad session id.
        """
        return SessionEvent(
            new_id(), session_id, TOOLS_DISCOVERED, payload=self.to_payload(), record=self
        )


_Record: TypeAlias = CompactionBoundary | ToolsDiscovered

_READERS: Final[dict[str, Callable[[str, JsonValue], _Record | None]]] = {
    "COMPACTION": CompactionBoundary._read,
    TOOLS_DISCOVERED.name: ToolsDiscovered._read,
}


def record_of(event_type: EventType, event_id: str, payload: JsonValue) -> _Record | None:
    """The typed record of a (plain JSON) `payload` of an event of `event_type` with id
    `event_id`: a `CompactionBoundary`, a `ToolsDiscovered`; None for another type, and for a
    payload that is not such a record."""
    read = _READERS.get(event_type.name)
    return None if read is None else read(event_id, payload)
