"""`AsyncSessionStore`: the protocol every async store implements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from turnlog.events import Session, SessionEvent, TokenCount
from turnlog.history import HistoryHit, HistoryQuery
from turnlog.lazy import LazyEvents
from turnlog.stores.base import EventFilter

__all__ = ["AsyncSessionStore"]


@runtime_checkable
class AsyncSessionStore(Protocol):
    """Where sessions and their logs live. An implementation is safe to share
    between threads (a blocking store) or between the tasks of an event loop (an async store).

    Versions: a session's version is the number of events in its log (0 when new). Appends are
    all or nothing. Every store passes `turnlog.testing.AsyncStoreContract`.
    """

    async def create_session(self, session: Session) -> None:
        """Store a new session. Raises `SessionAlreadyExists`."""
        ...

    async def save_session(self, session: Session) -> None:
        """Create a session or replace its expiry and metadata (its log is untouched)."""
        ...

    async def find_session(self, session_id: str) -> Session | None:
        """The session, or None."""
        ...

    async def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        """Sessions, newest first."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session and its log; False when there was none."""
        ...

    async def delete_expired(self, before: datetime) -> int:
        """Delete the sessions (and logs) that expire at or before `before`; returns how many."""
        ...

    async def find_by_metadata(self, name: str, value: str | int | bool) -> list[Session]:
        """The sessions whose metadata has `name` equal to `value`."""
        ...

    async def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        expected_version: int,
        *,
        check_rules: bool = True,
    ) -> int:
        """Append all of `events` or none; returns the new version.

        Events whose id the session holds already are skipped (a retry is a no-op). The events
        that are new must keep the view rules (`turnlog.rules`), checked against the end of the
        log inside the same write; `check_rules=False` stores them as they are (importing a
        broken transcript on purpose; `AsyncSessionService.view_messages` repairs the view).

        Raises:
            SessionNotFound: no such session.
            VersionConflict: the log is not at `expected_version`; nothing was written.
            InvalidInput: a bad batch, an id that another session holds, or an event that
                would break a view rule; nothing was written.
        """
        ...

    async def append_event(self, event: SessionEvent, *, check_rules: bool = True) -> SessionEvent:
        """Append one event at the end, whatever the version; returns it as stored.

        Raises:
            InvalidInput: as `append_events` (the view rules are checked at the end of the log
                as it is when the event lands).
        """
        ...

    async def events(self, session_id: str, flt: EventFilter | None = None) -> list[SessionEvent]:
        """The session's events (the whole log by default), oldest first."""
        ...

    async def events_after(self, session_id: str, after: int, limit: int) -> list[SessionEvent]:
        """One page of the log: the events whose seq is above `after`, oldest first, at most
        `limit` of them; reads only those (a log's seqs are 1, 2, 3, ...).

        Raises:
            SessionNotFound: no such session.
            InvalidInput: `after` is not an integer >= 0 or `limit` not an integer >= 1.
        """
        ...

    async def version(self, session_id: str) -> int:
        """The number of events in the session's log."""
        ...

    async def view(self, session_id: str) -> list[SessionEvent]:
        """The active view, in view order; reads only what it returns (and the newest boundary)."""
        ...

    async def view_lazy(self, session_id: str) -> LazyEvents:
        """`view`, with each event decoded when it is first read (what a compaction pass
        reads: it plans from the events' outline and decodes only what it keeps). A store that
        reads its view whole returns `LazyEvents.of(view)`.

        Raises:
            SessionNotFound: no such session.
            CorruptData: a row's outline cannot be read (a damaged row whose outline is intact
                raises when its event is read).
        """
        ...

    async def record_tokens(self, session_id: str, counts: Mapping[str, TokenCount]) -> int:
        """Store token counts for message events already in the log (a backfill of events
        appended before counts were recorded, or counted by another counter).

        Only the counts change: every event keeps its seq, timestamp and content, and the
        version stays. Ids that are not message events of this session are skipped.

        Returns:
            How many events now carry the given count.

        Raises:
            SessionNotFound: no such session.
            InvalidInput: a value of `counts` is not a `TokenCount`.
        """
        ...

    async def read_attachment(
        self, session_id: str, ref: str, offset: int = 0, length: int | None = None
    ) -> bytes:
        """Bytes of an attachment of the session: from `offset`, at most `length` of them (all
        by default). Appends store the large bytes of parts apart (`turnlog.stores.attachments`);
        the part keeps the reference. This reads them as stored: `SessionService.attachment`
        checks them against their reference.

        Raises:
            SessionNotFound: no such session.
            AttachmentNotFound: no event of the session stored an attachment `ref`.
            InvalidInput: `ref` is not an attachment reference, or a bad range.
        """
        ...

    async def events_by_id(self, session_id: str, ids: Sequence[str]) -> list[SessionEvent]:
        """The events of the session's log with these ids, in log order, each once; an id the
        session does not hold (another session's, or none) is skipped. Reads only those events
        (what the recall tool `read_events` gives the model back).

        Raises:
            SessionNotFound: no such session.
            InvalidInput: an id is not a valid event id, or more than 1,000 ids.
        """
        ...

    async def search_history(self, session_id: str, query: HistoryQuery) -> list[HistoryHit]:
        """The message events of the session's log that best match `query`, best first, at
        most `query.k`: covered and cleared events included (the log keeps them), summaries,
        stand-ins and the recall tools' own results not (`turnlog.history.indexed_text`).
        Filters by role, tool and when it was said (`turnlog.history.said_at`) apply before
        the ranking's cut.

        Raises:
            SessionNotFound: no such session.
        """
        ...

    async def search_sessions(
        self,
        query: HistoryQuery,
        *,
        sessions: Sequence[str] | None = None,
        metadata: Mapping[str, str | int | bool] | None = None,
    ) -> list[HistoryHit]:
        """`search_history` across sessions: those of `sessions` (every session by default)
        whose metadata has each name of `metadata` equal to its value; the best `query.k`
        events of them all, best first. Ids of sessions that do not exist are skipped."""
        ...

    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
        ...
