# Generated from src/turnlog/service_async.py by scripts/async_to_sync.py.
# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.
"""`SessionService`: the one place where stores and compaction meet."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from turnlog import telemetry
from turnlog.compaction import (
    CompactionBoundary,
    CompactionRequest,
    CompactionResult,
    CompactionStrategy,
    CompactionTrigger,
    sent_events,
)
from turnlog.compaction._checks import check_function, describe
from turnlog.compaction._sent import SentTokens
from turnlog.compaction.base import NOT_FIRED
from turnlog.compaction.running import fires, run_pass
from turnlog.durations import Duration, to_timedelta
from turnlog.errors import (
    CorruptData,
    InvalidInput,
    SessionAlreadyExists,
    SessionNotFound,
    VersionConflict,
)
from turnlog.events import (
    JsonValue,
    Message,
    Session,
    SessionEvent,
    check_id,
    new_id,
    trusted_copy,
)
from turnlog.history import HistoryHit, history_query
from turnlog.history_hybrid import HybridHistory
from turnlog.lazy import LazyEvents
from turnlog.reasoning import DEFAULT_REASONING
from turnlog.rules import repair_messages
from turnlog.stores.attachments import (
    DEFAULT_LIMITS,
    check_ref,
    has_media,
    inline_bytes,
    refs_in,
    refs_of_messages,
    split_attachments,
    verified,
)
from turnlog.stores.base import Clock, EventFilter, utc_now
from turnlog.stores.protocol import SessionStore
from turnlog.tokens import EventTokens, TokenCounter, event_tokens

__all__ = ["SessionService"]


class SessionService:
    """Sessions, their logs, their views, and compaction, over one store.

    Use it as a context manager (`with SessionService(store) as service:`), or call
    `close()`: closing the service closes the store and its connections.

    Args:
        store: where sessions live; None opens `SqliteStore("turnlog.db")` in the working
            directory.
        clock: the time used for `created_at`, `ttl` and `delete_expired()`.
        token_counter: counts each message event's tokens at append, stored with the event
            (`SessionEvent.tokens`) so that compaction and triggers using the same counter never
            tokenize it again; the default o200k counter when None (loaded on the first
            count). A counter without an `identity` is not recorded.
        record_tokens: False appends events without counting them (they are counted when
            first measured, as before counts were stored).
        history: how `search_history` ranks (`turnlog.history_hybrid.HybridHistory`: BM25 and
            embeddings fused); None ranks by the store's index alone (BM25).

    Raises:
        InvalidInput: `token_counter` has no `count(text)` method.
    """

    def __init__(
        self,
        store: SessionStore | None = None,
        *,
        clock: Clock = utc_now,
        token_counter: TokenCounter | None = None,
        record_tokens: bool = True,
        history: HybridHistory | None = None,
    ) -> None:
        if token_counter is not None and not callable(getattr(token_counter, "count", None)):
            raise InvalidInput(
                f"token_counter must have a count(text) method, got {describe(token_counter)}"
            )
        if store is None:
            from turnlog.stores.sqlite import SqliteStore

            store = SqliteStore("turnlog.db")
        self.store = store
        self._clock = clock
        self._counter = token_counter
        self._record_tokens = bool(record_tokens)
        self._tokens: EventTokens | None = None
        self.history = history

    def _token_cache(self) -> EventTokens:
        """The counts of the service's counter (made on first use: a service that appends
        nothing never makes its counter)."""
        if self._tokens is None:
            self._tokens = event_tokens(self._counter)
        return self._tokens

    def _counted(self, events: Sequence[SessionEvent]) -> list[SessionEvent]:
        """`events` with each message's token count, as they are appended.

        An event whose large bytes the store keeps apart is counted in the form the store
        keeps (its parts naming their attachments, with the image sizes and page counts their
        bytes tell), so that a recount of the stored event gives the same number."""
        if not self._record_tokens:
            return list(events)
        cache = self._token_cache()
        if not any(e.message is not None and has_media(e.message) for e in events):
            return cache.counted(events)
        limits = getattr(self.store, "attachment_limits", DEFAULT_LIMITS)
        kept = cache.counted(split_attachments(events, limits).events)
        return [
            e if k.tokens is None else trusted_copy(e, tokens=k.tokens)
            for e, k in zip(events, kept, strict=True)
        ]

    def close(self) -> None:
        """Close the store (and so its connections or pool)."""
        self.store.close()

    def __enter__(self) -> SessionService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ---------------------------------------------------------------------------

    def create(
        self,
        session_id: str | None = None,
        *,
        ttl: Duration | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Session:
        """Create a session (with a fresh id unless one is given).

        Args:
            session_id: the id; a random one when None.
            ttl: how long until `delete_expired` may delete it: a `timedelta` or a number of
                seconds (`ttl=60` is a minute); None keeps it.
            metadata: JSON the application attaches.

        Returns:
            The session as stored.

        Raises:
            SessionAlreadyExists: the id is taken.
            InvalidInput: a blank or over-long id; a ttl that is not a positive, finite
                duration; non-JSON metadata.
        """
        session = self._new_session(session_id, ttl, metadata)
        self.store.create_session(session)
        return session

    def _new_session(
        self,
        session_id: str | None,
        ttl: Duration | None,
        metadata: Mapping[str, JsonValue] | None,
    ) -> Session:
        span = None if ttl is None else to_timedelta(ttl, "ttl")
        now = self._clock()
        try:
            expires_at = None if span is None else now + span
        except OverflowError:
            raise InvalidInput(
                f"ttl {ttl!r} ends after the year 9999, past any time a store can hold: "
                "pass a shorter ttl, or none to keep the session"
            ) from None
        return Session(
            id=new_id() if session_id is None else check_id(session_id, "session id"),
            created_at=now,
            expires_at=expires_at,
            metadata=metadata or {},
        )

    def find(self, session_id: str) -> Session | None:
        """The session, or None."""
        return self.store.find_session(session_id)

    def get(self, session_id: str) -> Session:
        """The session. Raises `SessionNotFound`."""
        session = self.store.find_session(session_id)
        if session is None:
            raise SessionNotFound(session_id)
        return session

    def get_or_create(
        self,
        session_id: str,
        *,
        ttl: Duration | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Session:
        """The session, created (with `ttl` and `metadata`) when it does not exist yet.

        `ttl` is a `timedelta` or a number of seconds, as for `create`; it is checked even
        when the session exists already (and then not used).

        Returns:
            The session found, or the one created.

        Raises:
            InvalidInput: as for `create`.
        """
        if ttl is not None:
            to_timedelta(ttl, "ttl")
        found = self.store.find_session(session_id)
        if found is not None:
            return found
        try:
            return self.create(session_id, ttl=ttl, metadata=metadata)
        except SessionAlreadyExists:  # created meanwhile by another writer
            return self.get(session_id)

    def sessions(self, *, limit: int | None = None) -> list[Session]:
        """Sessions, newest first."""
        return self.store.list_sessions(limit=limit)

    def delete(self, session_id: str) -> bool:
        """Delete a session and its log; False when there was none."""
        return self.store.delete_session(session_id)

    def delete_expired(self, before: datetime | None = None) -> int:
        """Delete the sessions that expire at or before `before` (now by default)."""
        return self.store.delete_expired(self._clock() if before is None else before)

    def find_by_metadata(self, name: str, value: str | int | bool) -> list[Session]:
        """The sessions whose metadata has `name` equal to `value`."""
        return self.store.find_by_metadata(name, value)

    # -- events -----------------------------------------------------------------------------

    def append_message(
        self,
        session_id: str,
        message: Message,
        *,
        event_id: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        check_rules: bool = True,
    ) -> SessionEvent:
        """Append a message at the end of the log; returns the stored event (with its seq).

        Args:
            session_id: the session.
            message: the message.
            event_id: the event's id; a fresh one when None.
            metadata: JSON the application attaches to the event.
            check_rules: refuse a message that would break a view rule (see `turnlog.rules`);
                False stores it anyway (importing a broken transcript on purpose), and
                `view_messages` repairs the view.

        Raises:
            SessionNotFound: no such session.
            InvalidInput: a bad message, id or metadata, or a message that breaks a view rule
                (a tool result that answers no open call, a message while calls are open, an
                empty assistant message, an assistant or tool message first); nothing is
                written.
        """
        if not isinstance(message, Message):
            raise InvalidInput(f"append_message takes a Message, got {type(message).__name__}")
        tokens = None  # the count this event is appended with (kept inline: every append)
        if self._record_tokens:
            tokens = (self._tokens or self._token_cache()).of_message(message)
        event = SessionEvent.for_message(
            session_id,
            message,
            event_id=event_id,
            metadata=metadata,
            tokens=tokens,
        )
        with telemetry.span("turnlog.append", session_id) as span:
            stored = self.store.append_event(event, check_rules=check_rules)
            if span.recording:
                span.set("turnlog.append.events", 1)
                span.set("turnlog.session.version", stored.seq or 0)
            return stored

    def append_event(self, event: SessionEvent, *, check_rules: bool = True) -> SessionEvent:
        """Append one event at the end of the log, whatever the version.

        Raises:
            InvalidInput: as `append_message`.
        """
        if isinstance(event, SessionEvent):
            (event,) = self._counted((event,))
        with telemetry.span("turnlog.append", event.session_id) as span:
            stored = self.store.append_event(event, check_rules=check_rules)
            if span.recording:
                span.set("turnlog.append.events", 1)
                span.set("turnlog.session.version", stored.seq or 0)
            return stored

    def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        expected_version: int,
        *,
        check_rules: bool = True,
    ) -> int:
        """Append all of `events` or none, if the log is at `expected_version`.

        Returns:
            The new version.

        Raises:
            VersionConflict: another writer appended first; nothing was written.
            InvalidInput: a bad batch, or events that break a view rule (`check_rules=False`
                stores them anyway, see `append_message`); nothing was written.
        """
        if (
            isinstance(events, Sequence)
            and not isinstance(events, (str, bytes))
            and all(isinstance(e, SessionEvent) for e in events)
        ):
            events = self._counted(events)  # a batch the store would refuse is left to it
        with telemetry.span("turnlog.append", session_id) as span:
            version = self.store.append_events(
                session_id, events, expected_version, check_rules=check_rules
            )
            if span.recording:
                span.set("turnlog.append.events", len(events))
                span.set("turnlog.append.expected_version", expected_version)
                span.set("turnlog.session.version", version)
            return version

    def record_tokens(self, session_id: str) -> int:
        """Count and store the tokens of the session's message events that carry no count of
        this service's counter (a backfill of a log written before counts were stored, or by
        another counter). The events are otherwise unchanged; the version stays.

        Returns:
            How many events were counted and stored.

        Raises:
            SessionNotFound: no such session.
            InvalidInput: the service's counter has no `identity`, so its counts are never
                stored (or `record_tokens=False` was given).
        """
        if not self._record_tokens:
            raise InvalidInput("this service was made with record_tokens=False")
        tokens = self._token_cache()
        if tokens.identity is None:
            raise InvalidInput(
                f"the counter {describe(tokens.counter)} has no identity, so its counts "
                "are not stored: give it an `identity` string naming its encoding and version"
            )
        stored = self.store.events(session_id)
        counted = tokens.counted(stored)
        fresh = {
            after.id: after.tokens
            for before, after in zip(stored, counted, strict=True)
            if after is not before and after.tokens is not None
        }
        if not fresh:
            return 0
        return self.store.record_tokens(session_id, fresh)

    def version(self, session_id: str) -> int:
        """The number of events in the session's log."""
        return self.store.version(session_id)

    def events(self, session_id: str, filter: EventFilter | None = None) -> list[SessionEvent]:
        """The session's events: the whole log by default, oldest first."""
        return self.store.events(session_id, filter)

    def events_after(self, session_id: str, after: int = 0, limit: int = 100) -> list[SessionEvent]:
        """One page of the log: the events whose seq is above `after`, oldest first, at most
        `limit` of them. Reads only that page, however long the log.

        Raises:
            SessionNotFound: no such session.
            InvalidInput: `after` is not an integer >= 0 or `limit` not an integer >= 1.
        """
        return self.store.events_after(session_id, after, limit)

    # -- recall -----------------------------------------------------------------------------

    def search_history(
        self,
        session_id: str,
        query: str,
        *,
        k: int = 5,
        before: datetime | None = None,
        after: datetime | None = None,
        roles: Sequence[str] | None = None,
        tools: Sequence[str] | None = None,
    ) -> list[HistoryHit]:
        """The message events of the session's log that best match the words of `query`, best
        first, at most `k`: what a compaction took out of the view is found as well (the log
        keeps it). Summaries and stand-ins are not searched, nor what the recall tools gave
        back. `before` and `after` bound when an event was said (`HistoryHit.said_at`: a
        message's "said_at" metadata, else when it was stored), exclusive; `roles` and `tools`
        keep only messages of those roles, or calling or answering those tools.

        With `history=HybridHistory()` on the service, BM25 and embeddings are fused, so that
        an event said in other words is found too. Each store keeps the index in step with the
        log: SQLite (FTS5) and PostgreSQL
        (`tsvector`) in the append's own transaction; the memory and Redis stores in the
        process, built from the log on a session's first search (docs/recall.md).

        Raises:
            SessionNotFound: no such session.
            InvalidInput: a blank or too long query, `k` outside 1-100, a date without a
                timezone, an unknown role.
        """
        checked = history_query(query, k=k, before=before, after=after, roles=roles, tools=tools)
        session_id = check_id(session_id, "session id")
        if self.history is not None:
            return self.history.search(self, session_id, checked)
        return self.store.search_history(session_id, checked)

    def search(
        self,
        query: str,
        *,
        sessions: Sequence[str] | None = None,
        metadata: Mapping[str, str | int | bool] | None = None,
        k: int = 5,
        before: datetime | None = None,
        after: datetime | None = None,
        roles: Sequence[str] | None = None,
    ) -> list[HistoryHit]:
        """`search_history` across sessions: every session by default, those of `sessions`,
        and of them those whose metadata has each name of `metadata` equal to its value (an
        owner field, so that an application searches one user's conversations). The best `k`
        events of them all; ids of sessions that do not exist are skipped.

        Raises:
            InvalidInput: as `search_history`; `metadata` is not a mapping of names to strings,
                integers or booleans.
        """
        checked = history_query(query, k=k, before=before, after=after, roles=roles)
        chosen = None if sessions is None else _session_ids(sessions)
        return self.store.search_sessions(
            checked, sessions=chosen, metadata=_metadata_filter(metadata)
        )

    def read_events(self, session_id: str, ids: Sequence[str]) -> list[SessionEvent]:
        """The session's events with these ids (a search's `HistoryHit.event_id`), in log
        order, whole: an id of another session, or of none, gives nothing. At most 1,000 ids.

        Raises:
            SessionNotFound: no such session.
            InvalidInput: an id is not a valid event id, or too many ids.
        """
        return self.store.events_by_id(check_id(session_id, "session id"), ids)

    def attachment(self, session_id: str, ref: str) -> bytes:
        """The bytes of attachment `ref` of the session, checked against the reference.

        A part whose bytes were stored apart holds `ref` (`ImagePart.ref`, ...) instead of
        `data`; view and log reads never load those bytes. For a large attachment,
        `iter_attachment` reads it in chunks.

        Raises:
            SessionNotFound: no such session.
            AttachmentNotFound: no event of the session stored `ref`.
            CorruptData: the bytes read back are not those of `ref` (truncated or altered).
        """
        return verified(ref, self.store.read_attachment(session_id, ref))

    def iter_attachment(
        self, session_id: str, ref: str, *, chunk_size: int = 1 << 20
    ) -> Iterator[bytes]:
        """The bytes of attachment `ref` in chunks of `chunk_size` (1 MiB), each read when it
        is asked for; the last one is checked with all of them against the reference before it
        is given (`CorruptData` instead of a last chunk that would complete damaged bytes).

        Raises:
            SessionNotFound, AttachmentNotFound, CorruptData: as `attachment`.
            InvalidInput: `chunk_size` is not a positive integer.
        """
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise InvalidInput(f"chunk_size must be a positive integer, got {chunk_size!r}")
        check_ref(ref)
        import hashlib  # here: `import turnlog` does not load it (tests/test_cold_start.py)

        digest = hashlib.sha256()
        offset = 0
        chunk = self.store.read_attachment(session_id, ref, 0, chunk_size)
        while True:
            following = b""
            if len(chunk) == chunk_size:
                following = self.store.read_attachment(
                    session_id, ref, offset + chunk_size, chunk_size
                )
            digest.update(chunk)
            if not following and "sha256:" + digest.hexdigest() != ref:
                raise CorruptData(
                    f"attachment {ref} is damaged: the {offset + len(chunk):,} bytes read back "
                    "have another sha256"
                )
            if chunk:
                yield chunk
            if not following:
                return
            offset += len(chunk)
            chunk = following

    def with_bytes(self, session_id: str, messages: Sequence[Message]) -> list[Message]:
        """`messages` with the bytes of every attachment put back into its part (`data` in
        place of `ref`): what a model's wire format needs. Each attachment is read once.

        Raises:
            AttachmentNotFound, CorruptData: as `attachment`.
        """
        refs = sorted(refs_of_messages(messages))
        if not refs:
            return list(messages)
        blobs = {ref: self.attachment(session_id, ref) for ref in refs}
        return [inline_bytes(m, blobs) for m in messages]

    def view_with_bytes(self, session_id: str) -> list[SessionEvent]:
        """`view`, with the bytes of every attachment back in its part (for an adapter that
        hands the view to a framework or a wire format, which need the bytes themselves).

        Raises:
            SessionNotFound: no such session.
            AttachmentNotFound, CorruptData: as `attachment`.
        """
        view = self.view(session_id)
        refs = sorted(refs_in(view))
        if not refs:
            return view
        blobs = {ref: self.attachment(session_id, ref) for ref in refs}
        return [
            trusted_copy(e, message=inline_bytes(e.message, blobs))
            if e.message is not None and has_media(e.message)
            else e
            for e in view
        ]

    def view(self, session_id: str) -> list[SessionEvent]:
        """The active view: what the model sees, in order."""
        if telemetry.idle():  # the hot path: no hook at all while nothing would record
            return self.store.view(session_id)
        with telemetry.span("turnlog.view", session_id) as span:
            view = self.store.view(session_id)
            telemetry.record_view(span, view)
            return view

    def view_messages(self, session_id: str) -> list[Message]:
        """The messages to send a model: the latest system message first, then the rest.

        Superseded system messages are not sent. They obey the view rules (`turnlog.rules`):
        on a log stored with `check_rules=False` they are repaired, visibly (see
        `turnlog.rules.repair_messages`: orphan tool results and empty assistant messages are
        left out; unanswered calls get a placeholder result; a placeholder user message comes
        before a conversation that starts with the assistant; added and changed messages carry
        the metadata key "turnlog.repair"). A log that always kept the rules is sent as it is.
        """
        with telemetry.span("turnlog.view", session_id) as span:
            view = self.store.view(session_id)
            telemetry.record_view(span, view)
            messages = repair_messages([e.message for e in sent_events(view) if e.message])
            span.set("turnlog.view.messages", len(messages))
            return messages

    def hide(
        self, session_id: str, event_ids: Sequence[str], *, retries: int = 3
    ) -> list[SessionEvent]:
        """Take events out of the view without deleting them from the log.

        Appends a COMPACTION boundary (strategy "hide") that names the current view minus
        `event_ids`; the log keeps every event, and `events()` still shows them and the
        boundary. Ids that are not in the view are ignored; when none is, nothing is written.
        Messages appended afterwards join the view as usual.

        Args:
            session_id: the session.
            event_ids: the events to take out of the view.
            retries: how many times to read the view again when another writer appended
                meanwhile.

        Returns:
            The events taken out of the view, in view order (empty when none was in it).

        Raises:
            SessionNotFound: no such session.
            VersionConflict: other writers kept appending through every retry; nothing was
                written.
            InvalidInput: `retries` is not an integer >= 0, or an id is not a string.
        """
        wanted = {check_id(i, "event id") for i in event_ids}
        return self._hide_where(session_id, lambda e: e.id in wanted, "hide", retries)

    def clear_view(self, session_id: str, *, retries: int = 3) -> list[SessionEvent]:
        """Empty the view without deleting anything from the log (see `hide`).

        The model sees only what is appended afterwards. Returns the events taken out of the
        view; raises as `hide`.
        """
        return self._hide_where(session_id, lambda e: True, "clear", retries)

    def _hide_where(
        self,
        session_id: str,
        hidden: Callable[[SessionEvent], bool],
        name: str,
        retries: int,
    ) -> list[SessionEvent]:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidInput(f"retries must be an integer >= 0, got {retries!r}")
        self.get(session_id)
        for attempt in range(retries + 1):
            version = self.store.version(session_id)
            view = self.store.view(session_id)
            gone = [e for e in view if hidden(e)]
            if not gone:
                return []
            boundary = CompactionBoundary(
                id=new_id(),
                pinned_event_ids=(),
                summary_event_ids=(),
                preserved_event_ids=tuple(e.id for e in view if not hidden(e)),
                covered_event_count=len(gone),
                tokens_estimated_saved=0,
                strategy=name,
            )
            try:
                self.store.append_events(session_id, [boundary.to_event(session_id)], version)
            except VersionConflict:
                if attempt == retries:
                    raise
                continue
            return gone
        raise AssertionError("unreachable")  # pragma: no cover

    # -- compaction -------------------------------------------------------------------------

    def compact(
        self,
        session_id: str,
        trigger: CompactionTrigger,
        strategy: CompactionStrategy,
        *,
        retries: int = 0,
    ) -> CompactionResult:
        """Compact the session if `trigger` fires.

        Reads the version, then the view; evaluates the trigger; runs the strategy; writes the
        boundary and the summary events in one version-checked append.

        Returns:
            The result. Unchanged when the trigger did not fire or nothing left the view;
            unchanged with `conflict=True` when another writer appended meanwhile (nothing was
            written, nothing raised: compact again if you still want to). With `retries=N`, a
            pass that lost the race is run again on the new view, up to N more times.

        Raises:
            InvalidInput: `trigger` is not a function of the request (or an instance of a
                trigger class), `strategy` has no `compact(request)` method, or `retries` is
                not an integer >= 0. Checked before anything is read.
            SessionNotFound: no such session.
            Exception: whatever the summarizer raised; nothing was written.
        """
        check_function(trigger, "trigger", "(CompactionRequest) -> bool, e.g. TurnCountTrigger(20)")
        if isinstance(strategy, type) or not callable(getattr(strategy, "compact", None)):
            raise InvalidInput(
                "strategy must be a compaction strategy (an object with compact(request), "
                f"e.g. WindowCompactionStrategy(...)); got {describe(strategy)}"
            )
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidInput(f"retries must be an integer >= 0, got {retries!r}")
        session = self.get(session_id)
        for _ in range(retries + 1):
            result = self._compact_once(session, trigger, strategy)
            if not result.conflict:
                return result
        return result

    def _compact_seen(
        self,
        session: Session,
        seen: tuple[int, Sequence[SessionEvent]],
        trigger: CompactionTrigger,
        strategy: CompactionStrategy,
        retries: int,
    ) -> CompactionResult:
        """`compact`, whose first pass starts from a view the caller holds (the turn runner).

        `seen` is (version, view): the session's view as it was at that version, exactly. The
        boundary is appended only if the log is still at that version, so a pass from a view
        that went stale loses the race like any other, and the next pass reads afresh.
        """
        result = self._compact_once(session, trigger, strategy, seen)
        for _ in range(retries):
            if not result.conflict:
                break
            result = self._compact_once(session, trigger, strategy)
        return result

    def _compact_once(
        self,
        session: Session,
        trigger: CompactionTrigger,
        strategy: CompactionStrategy,
        seen: tuple[int, Sequence[SessionEvent]] | None = None,
    ) -> CompactionResult:
        with telemetry.compaction_span(session.id, strategy) as span:
            fired, result, view = self._compact_pass(session, trigger, strategy, seen)
            telemetry.record_compaction(span, strategy, fired, result, view, _sent_tokens)
            return result

    def _compact_pass(
        self,
        session: Session,
        trigger: CompactionTrigger,
        strategy: CompactionStrategy,
        seen: tuple[int, Sequence[SessionEvent]] | None,
    ) -> tuple[bool, CompactionResult, Sequence[SessionEvent]]:
        """One pass: (whether the trigger fired, the result, the view it started from).

        The view is read lazily: the strategy plans from its outline, and the events it covers
        are decoded only if the caller reads `covered_events`.
        """
        if seen is None:
            version = self.store.version(session.id)
            view: Sequence[SessionEvent] = self._lazy_view(session.id)
        else:
            version, view = seen[0], list(seen[1])
        request = CompactionRequest.of(session, view)
        if not fires(trigger, request):
            return False, CompactionResult.nothing(view, NOT_FIRED), view
        result = run_pass(strategy, request)
        to_append = self._counted(result.events_to_append(session.id))
        if not to_append:
            return True, result, view
        try:
            self.store.append_events(session.id, to_append, version)
        except VersionConflict:
            return True, result.as_conflict(), view
        if fires(trigger, CompactionRequest.of(session, result.view)):
            result = replace(result, refires=True)
        return True, result, view

    def _lazy_view(self, session_id: str) -> LazyEvents:
        """The store's `view_lazy`; its `view`, outlined, for a store written before it."""
        lazy = getattr(self.store, "view_lazy", None)
        if lazy is None:
            return LazyEvents.of(self.store.view(session_id))
        result: LazyEvents = lazy(session_id)
        return result


def _sent_tokens(view: Sequence[SessionEvent]) -> int:
    """The tokens of what `view` sends to a model (the default counter, and the reasoning the
    turn runner sends by default: the turn in progress's; for telemetry)."""
    global _sent_counts
    if _sent_counts is None:
        _sent_counts = SentTokens(event_tokens(), DEFAULT_REASONING)
    return sum(_sent_counts.counts(sent_events(view)))


_sent_counts: SentTokens | None = None
"""The counts `_sent_tokens` takes, made on first use (the tokenizer loads then)."""


def _session_ids(sessions: object) -> list[str]:
    if isinstance(sessions, str) or not isinstance(sessions, Sequence):
        raise InvalidInput(f"sessions must be a list of session ids, got {sessions!r}")
    return [check_id(sid, "session id") for sid in sessions]


def _metadata_filter(metadata: object) -> dict[str, str | int | bool] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidInput(f"metadata must be a mapping of names to values, got {metadata!r}")
    out: dict[str, str | int | bool] = {}
    for name, value in metadata.items():
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"a metadata name must be a non-empty string, got {name!r}")
        if not isinstance(value, (str, int, bool)):
            raise InvalidInput(
                f"metadata {name!r} must be matched by a string, integer or boolean, "
                f"got {type(value).__name__}"
            )
        out[name] = value
    return out
