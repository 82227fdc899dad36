"""`CompactionBoundary`: the record of one compaction, and the projection of a log to its view."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnlog.errors import CorruptData, InvalidInput
from turnlog.events import EventType, SessionEvent, check_id

__all__ = ["CompactionBoundary"]

_KEYS = (
    "pinned_event_ids",
    "summary_event_ids",
    "preserved_event_ids",
    "covered_event_count",
    "tokens_estimated_saved",
    "strategy",
)


@dataclass(frozen=True, slots=True)
class CompactionBoundary:
    """The payload of a COMPACTION event: the view from then on, named by event id.

    A compaction never changes the events already in the log. It appends one boundary event and,
    right after it, the synthetic summary events. The boundary names the events of the view:
    pinned ones first (the latest system message, a preamble, a carried-forward summary), then
    the summary events, then the preserved recent conversation in log order. Every other event
    that was in the view is covered: it stays in the log and leaves the prompt.
    """

    id: str
    """The id of the boundary event."""
    pinned_event_ids: tuple[str, ...]
    """The events kept at the front of the view, in view order."""
    summary_event_ids: tuple[str, ...]
    """The summary events appended right after the boundary, in order; empty for a plain window."""
    preserved_event_ids: tuple[str, ...]
    """The events kept verbatim, in log order."""
    covered_event_count: int
    """How many events left the view (for reporting)."""
    tokens_estimated_saved: int
    """The estimated tokens removed from the prompt, net of the summary (for reporting)."""
    strategy: str
    """The name of the strategy that compacted."""
    replaced: Mapping[str, str] = field(default_factory=dict)
    """Stand-ins: the id of an event this compaction appended after the boundary -> the id of
    the event it stands in for (e.g. a tool result cleared to a short note). The stand-in is
    named in the view lists where the original was; the original stays in the log. Empty for
    a compaction that replaced nothing, and then not stored (older boundaries read the same)."""

    def to_payload(self) -> dict[str, Any]:
        """The payload of the boundary event, as stored (the event id is not repeated)."""
        return {
            "pinned_event_ids": list(self.pinned_event_ids),
            "summary_event_ids": list(self.summary_event_ids),
            "preserved_event_ids": list(self.preserved_event_ids),
            "covered_event_count": self.covered_event_count,
            "tokens_estimated_saved": self.tokens_estimated_saved,
            "strategy": self.strategy,
            **({"replaced": dict(self.replaced)} if self.replaced else {}),
        }

    def to_event(self, session_id: str) -> SessionEvent:
        """The COMPACTION event that records this boundary in `session_id`'s log."""
        return SessionEvent.for_payload(
            session_id, EventType.COMPACTION, self.to_payload(), event_id=self.id
        )

    @classmethod
    def from_event(cls, event: SessionEvent) -> CompactionBoundary:
        """The boundary a COMPACTION event records.

        Raises:
            InvalidInput: `event` is not a COMPACTION event.
            CorruptData: its payload is not a boundary.
        """
        if event.type != EventType.COMPACTION:
            raise InvalidInput(
                f"event {event.id!r} is a {event.type.name} event, not a COMPACTION event"
            )
        return cls.from_payload(event.id, event.payload, where=f"event {event.id!r}")

    @classmethod
    def from_payload(cls, boundary_id: str, payload: Any, *, where: str = "") -> CompactionBoundary:
        """The boundary stored as `payload` under the event id `boundary_id`.

        Raises:
            CorruptData: `payload` is not a boundary payload.
        """
        try:
            if not isinstance(payload, Mapping) or any(k not in payload for k in _KEYS):
                raise ValueError(f"a boundary payload needs the keys {', '.join(_KEYS)}")
            ids = {}
            for key in ("pinned_event_ids", "summary_event_ids", "preserved_event_ids"):
                value = payload[key]
                if not isinstance(value, Sequence) or isinstance(value, str):
                    raise ValueError(f"{key} must be a list of ids")
                ids[key] = tuple(check_id(i, key) for i in value)
            counts = [payload["covered_event_count"], payload["tokens_estimated_saved"]]
            if not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
                raise ValueError("the counts must be integers")
            if not isinstance(payload["strategy"], str):
                raise ValueError("strategy must be a string")
            replaced = _replaced(payload.get("replaced", {}), ids)
        except (ValueError, InvalidInput) as exc:
            raise CorruptData(
                f"compaction boundary {where or boundary_id!r} is damaged: {exc}"
            ) from exc
        return cls(
            id=boundary_id,
            pinned_event_ids=ids["pinned_event_ids"],
            summary_event_ids=ids["summary_event_ids"],
            preserved_event_ids=ids["preserved_event_ids"],
            covered_event_count=counts[0],
            tokens_estimated_saved=counts[1],
            strategy=payload["strategy"],
            replaced=replaced,
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
        """The newest boundary of `log` (oldest event first), or None if it was never compacted."""
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
            CorruptData: the newest boundary names an event that `log` does not hold.
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


def _replaced(value: Any, ids: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """The `replaced` map of a payload, checked: stand-in ids the view names, each standing in
    for another event, no event replaced twice."""
    if not isinstance(value, Mapping):
        raise ValueError("replaced must map stand-in ids to original ids")
    named = set(ids["pinned_event_ids"]) | set(ids["preserved_event_ids"])
    out: dict[str, str] = {}
    for stand_in, original in value.items():
        check_id(stand_in, "a stand-in id")
        check_id(original, "a replaced id")
        if stand_in not in named:
            raise ValueError(f"stand-in {stand_in!r} is not named by the view")
        if original in named or original == stand_in:
            raise ValueError(f"event {original!r} is both replaced and in the view")
        out[stand_in] = original
    if len(set(out.values())) != len(out):
        raise ValueError("an event is replaced twice")
    return out
