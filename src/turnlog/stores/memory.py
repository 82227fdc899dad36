"""`MemoryStore`: sessions in a dict, for tests and short-lived processes. Thread-safe."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from turnlog.errors import (
    AttachmentNotFound,
    InvalidInput,
    SessionAlreadyExists,
    SessionNotFound,
    VersionConflict,
)
from turnlog.events import EventType, Session, SessionEvent, TokenCount, check_id
from turnlog.history import HistoryHit, HistoryQuery
from turnlog.lazy import LazyEvents
from turnlog.payloads import CompactionBoundary
from turnlog.rules import EMPTY_TAIL as EMPTY
from turnlog.rules import check_append, needs_tail, tail_of_events
from turnlog.stores.attachments import (
    DEFAULT_LIMITS,
    AttachmentLimits,
    Split,
    check_read_range,
    check_ref,
    check_refs_known,
    has_media,
    split_attachments,
)
from turnlog.stores.base import (
    Clock,
    EventFilter,
    apply_filter,
    check_batch,
    check_boundaries,
    check_cutoff,
    check_event,
    check_event_ids,
    check_limit,
    check_metadata_query,
    check_range,
    check_session,
    check_token_counts,
    stamped,
    utc_now,
)

if TYPE_CHECKING:
    from turnlog.stores.history_index import CatchUp, HistoryIndex

__all__ = ["MemoryStore"]


@dataclass
class _Log:
    session: Session
    events: list[SessionEvent] = field(default_factory=list)
    by_id: dict[str, SessionEvent] = field(default_factory=dict)
    boundary_at: int = -1  # index of the newest COMPACTION event
    attachments: set[str] = field(default_factory=set)  # the refs its events hold


class MemoryStore:
    """Keeps everything in memory; it is gone when the process ends.

    It applies the same rules as every other store, under one lock: versions, all-or-nothing
    batches, idempotent ids, and event ids unique across sessions.

    Args:
        clock: stamps events appended without a timestamp.
        attachments: which bytes of parts are stored apart, and the size limits.
        history: the history index `search_history` keeps (`HistoryIndex`: built from a
            session's log on its first search; the 1,000 sessions searched last by default).
    """

    def __init__(
        self,
        *,
        clock: Clock = utc_now,
        attachments: AttachmentLimits = DEFAULT_LIMITS,
        history: HistoryIndex | None = None,
    ) -> None:
        self._clock = clock
        self._limits = self.attachment_limits = attachments
        self._logs: dict[str, _Log] = {}
        self._owner: dict[str, str] = {}  # event id -> session id
        self._blobs: dict[str, bytes] = {}  # attachment ref -> bytes
        self._users: dict[str, int] = {}  # attachment ref -> how many sessions hold it
        self._lock = threading.RLock()
        self._history = history

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release."""

    def _log(self, session_id: str) -> _Log:
        log = self._logs.get(check_id(session_id, "session id"))
        if log is None:
            raise SessionNotFound(session_id)
        return log

    def create_session(self, session: Session) -> None:
        check_session(session)
        with self._lock:
            if session.id in self._logs:
                raise SessionAlreadyExists(session.id)
            self._logs[session.id] = _Log(session)

    def save_session(self, session: Session) -> None:
        check_session(session)
        with self._lock:
            log = self._logs.get(session.id)
            if log is None:
                self._logs[session.id] = _Log(session)
            else:
                log.session = replace(session, created_at=log.session.created_at)

    def find_session(self, session_id: str) -> Session | None:
        check_id(session_id, "session id")
        with self._lock:
            log = self._logs.get(session_id)
            return None if log is None else log.session

    def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        limit = check_limit(limit)
        with self._lock:
            sessions = sorted(
                (log.session for log in self._logs.values()),
                key=lambda s: (s.created_at, s.id),
                reverse=True,
            )
        return sessions if limit is None else sessions[:limit]

    def delete_session(self, session_id: str) -> bool:
        check_id(session_id, "session id")
        with self._lock:
            log = self._logs.pop(session_id, None)
            if log is None:
                return False
            if self._history is not None:
                self._history.forget(session_id)
            for event_id in log.by_id:
                self._owner.pop(event_id, None)
            for ref in log.attachments:
                left = self._users[ref] - 1
                if left:
                    self._users[ref] = left
                else:
                    del self._users[ref], self._blobs[ref]
            return True

    def delete_expired(self, before: datetime) -> int:
        check_cutoff(before)
        with self._lock:
            doomed = [
                sid
                for sid, log in self._logs.items()
                if log.session.expires_at is not None and log.session.expires_at <= before
            ]
            for sid in doomed:
                self.delete_session(sid)
            return len(doomed)

    def find_by_metadata(self, name: str, value: str | int | bool) -> list[Session]:
        if not check_metadata_query(name, value):
            return []
        with self._lock:
            return [
                log.session
                for log in self._logs.values()
                if name in log.session.metadata and _same(log.session.metadata[name], value)
            ]

    def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        expected_version: int,
        *,
        check_rules: bool = True,
    ) -> int:
        batch = check_batch(session_id, events, expected_version)
        split = None
        for e in batch:  # the split only when an event has media: a text batch pays one test
            m = e.message
            if m is not None and (m.parts or m.tool_results) and has_media(m):
                split = split_attachments(batch, self._limits)
                batch = split.events
                break
        with self._lock:
            log = self._log(session_id)
            fresh = []
            for event in batch:
                owner = self._owner.get(event.id)
                if owner is None:
                    fresh.append(event)
                elif owner != session_id:
                    raise InvalidInput(
                        f"event id {event.id!r} belongs to another session; ids are unique "
                        "across sessions"
                    )
            actual = len(log.events)
            if not fresh:
                return actual
            if actual != expected_version:
                raise VersionConflict(session_id, expected_version, actual)

            def known(ids: list[str]) -> set[str]:
                return {i for i in ids if i in log.by_id and log.by_id[i].message is not None}

            check_boundaries(fresh, known)
            if check_rules:
                check_append(tail_of_events(log.events) if needs_tail(fresh) else EMPTY, fresh)
            if split is not None:
                self._store_attachments(log, session_id, split)
            now = self._clock()
            for offset, event in enumerate(fresh, start=actual + 1):
                stored = stamped(event, offset, event.timestamp or now)
                log.events.append(stored)
                log.by_id[stored.id] = stored
                self._owner[stored.id] = session_id
                if stored.type == EventType.COMPACTION:
                    log.boundary_at = offset - 1
            return len(log.events)

    def _store_attachments(self, log: _Log, session_id: str, split: Split) -> None:
        """Keep the bytes of `split` for the session (under the lock); refuse references the
        session does not hold."""
        if split.named:
            held = {r: len(self._blobs[r]) for r in split.named if r in log.attachments}
            held.update((r, len(b)) for r, b in split.blobs.items())
            check_refs_known(session_id, split.named, held)
        for ref, data in split.blobs.items():
            if ref not in log.attachments:
                log.attachments.add(ref)
                self._users[ref] = self._users.get(ref, 0) + 1
                self._blobs.setdefault(ref, data)

    def append_event(self, event: SessionEvent, *, check_rules: bool = True) -> SessionEvent:
        check_event(event)
        with self._lock:
            log = self._log(event.session_id)
            if event.id in log.by_id:
                return log.by_id[event.id]
            self.append_events(event.session_id, [event], len(log.events), check_rules=check_rules)
            return log.events[-1]

    def events(self, session_id: str, flt: EventFilter | None = None) -> list[SessionEvent]:
        flt = EventFilter.all() if flt is None else flt
        if flt.active_view:
            return apply_filter(self.view(session_id), flt)
        with self._lock:
            log = list(self._log(session_id).events)
        return apply_filter(log, flt)

    def record_tokens(self, session_id: str, counts: Mapping[str, TokenCount]) -> int:
        counts = check_token_counts(counts)
        with self._lock:
            log = self._log(session_id)
            written = 0
            for seq0, event in enumerate(log.events):
                count = counts.get(event.id)
                if count is None or event.message is None:
                    continue
                counted = event.with_tokens(count)
                log.events[seq0] = counted
                log.by_id[event.id] = counted
                written += 1
            return written

    def events_after(self, session_id: str, after: int, limit: int) -> list[SessionEvent]:
        after, limit = check_range(after, limit)
        with self._lock:
            return self._log(session_id).events[after : after + limit]

    def version(self, session_id: str) -> int:
        with self._lock:
            return len(self._log(session_id).events)

    def read_attachment(
        self, session_id: str, ref: str, offset: int = 0, length: int | None = None
    ) -> bytes:
        check_ref(ref)
        offset, length = check_read_range(offset, length)
        with self._lock:
            log = self._log(session_id)
            if ref not in log.attachments:
                raise AttachmentNotFound(session_id, ref)
            data = self._blobs[ref]
        if offset == 0 and (length is None or length >= len(data)):
            return data
        return data[offset : None if length is None else offset + length]

    def events_by_id(self, session_id: str, ids: Sequence[str]) -> list[SessionEvent]:
        wanted = check_event_ids(ids)
        with self._lock:
            by_id = self._log(session_id).by_id
            found = [by_id[i] for i in wanted if i in by_id]
        return sorted(found, key=lambda e: e.seq or 0)

    def search_history(self, session_id: str, query: HistoryQuery) -> list[HistoryHit]:
        with self._lock:
            version = len(self._log(session_id).events)
            index, catch_up = self._index()
            catch_up(index, session_id, version, self.events_after)
            return index.search([session_id], query)

    def search_sessions(
        self,
        query: HistoryQuery,
        *,
        sessions: Sequence[str] | None = None,
        metadata: Mapping[str, str | int | bool] | None = None,
    ) -> list[HistoryHit]:
        with self._lock:
            chosen = [
                sid
                for sid in (self._logs if sessions is None else dict.fromkeys(sessions))
                if sid in self._logs and _matches(self._logs[sid].session, metadata)
            ]
            index, catch_up = self._index()
            for sid in chosen:
                catch_up(index, sid, len(self._logs[sid].events), self.events_after)
            return index.search(chosen, query)

    def _index(self) -> tuple[HistoryIndex, CatchUp]:
        # here: `import turnlog` loads neither sqlite3's FTS5 index nor logging
        from turnlog.stores.history_index import HistoryIndex, catch_up

        if self._history is None:
            self._history = HistoryIndex()
        return self._history, catch_up

    def view_lazy(self, session_id: str) -> LazyEvents:
        return LazyEvents.of(self.view(session_id))  # decoded already: nothing to defer

    def view(self, session_id: str) -> list[SessionEvent]:
        with self._lock:
            log = self._log(session_id)
            if log.boundary_at < 0:
                return [e for e in log.events if e.message is not None]
            boundary_event = log.events[log.boundary_at]
            boundary = CompactionBoundary.from_event(boundary_event)
            named = [log.by_id[i] for i in boundary.view_event_ids if i in log.by_id]
            after = log.events[log.boundary_at + 1 :]
        part = sorted({e.id: e for e in named}.values(), key=lambda e: e.seq or 0)
        return CompactionBoundary.project([*part, boundary_event, *after])


def _same(stored: object, value: object) -> bool:
    return type(stored) is type(value) and stored == value


def _matches(session: Session, metadata: Mapping[str, str | int | bool] | None) -> bool:
    return metadata is None or all(
        name in session.metadata and _same(session.metadata[name], value)
        for name, value in metadata.items()
    )
