# Generated from src/turnlog/stores/redis/store_async.py by scripts/async_to_sync.py.
# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.
"""`RedisStore`: sessions in Redis (`RedisClusterStore`, in cluster.py, is its
cluster twin).

Every key of a session carries one hash tag, `<prefix>:{<escaped session id>}:...`, so all of a
session lives in one slot, and each write is one Lua script there: the version check, the skip of
ids already stored, the batch, the version and the pointer to the newest boundary, all or nothing.
The view is read from that pointer without touching the covered history. Event ids are unique
across sessions through one small key per id (`<prefix>:id:<escaped id>`): on one server the
append script claims them itself; on a cluster they live in other slots, so they are claimed
just before the script and fenced by the session's incarnation (cluster.py, docs/redis.md).
The key names and the record format are in layout.py; the client, the scripts and the errors in
core.py.

The cross-session indexes (sessions by creation and by expiry, metadata values) are hints kept
beside the sessions: written before a session write, cleaned after a delete, and verified against
the session on every read, so a crash between two steps never yields a wrong answer.

With asyncio, a task cancelled while it waits on a write leaves the write whole or absent: each
write is one script call, which the server runs whole once it has it, and redis-py drops the
connection whose reply was never read, so the pool stays clean.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from turnlog.codec import (
    dump_json,
    encode_body,
    from_micros,
    message_ids,
    message_role,
    to_micros,
)
from turnlog.errors import (
    AttachmentNotFound,
    InvalidInput,
    SessionAlreadyExists,
    SessionNotFound,
    StoreError,
    VersionConflict,
)
from turnlog.events import Session, SessionEvent, TokenCount, check_id
from turnlog.history import HistoryHit, HistoryQuery
from turnlog.lazy import LazyEvents
from turnlog.rules import EMPTY_TAIL, Tail, check_append, needs_tail, tail_of
from turnlog.stores.attachments import (
    Split,
    check_read_range,
    check_ref,
    check_refs_known,
    has_media,
    split_attachments,
)
from turnlog.stores.base import (
    EventFilter,
    apply_filter,
    check_batch,
    check_cutoff,
    check_event,
    check_event_ids,
    check_limit,
    check_metadata_query,
    check_range,
    check_retry,
    check_session,
    check_token_counts,
    metadata_matches,
    session_matches,
    stamped,
    utc_now,
)
from turnlog.stores.history_index import HistoryIndex, catch_up
from turnlog.stores.redis.core import ATTEMPTS, RACES, RedisCore, guarded, pause
from turnlog.stores.redis.layout import (
    ATTACHMENT_CHUNK,
    attachment_args,
    batch_args,
    chunk_range,
    decode_record,
    events_of,
    index_member,
    lazy_view_of,
    session_of,
    split_member,
    split_record,
    view_of,
)

__all__ = ["RedisStore"]

_TAIL_PAGE: Final = 8  # records of a log's end read at a time for the view rules
_CHUNK: Final = 5_000  # records per read script call
_MOST_PER_RANGE: Final = 10_000  # sessions per ZREVRANGE of list_sessions


class RedisStore(RedisCore):
    """Sessions in one Redis server (5 or newer; 7 recommended). Safe to share between threads
    (the blocking store) or between the tasks of one event loop (the asyncio one).

    The constructor checks its arguments and sends nothing to the server: connections open on
    first use (the asyncio store's `open()` also pings the server, so that an unreachable
    server is reported there).

    Args:
        url_or_client: a `redis://`, `rediss://` or `unix://` URL (the store owns the connection
            pool it opens and closes it in `close()`), or a `redis.Redis` client built
            with `decode_responses=False` (the caller keeps owning it).
        prefix: the first part of every key; several stores can share a server under different
            prefixes. No `:`, braces, glob characters (`*?[]\\`), whitespace or control
            characters (so `SCAN MATCH <prefix>:*` finds exactly this store's keys).
        clock: stamps events appended without a timestamp.
        expiry_grace: Redis deletes a session's own keys by itself this long after it expires
            (counted from the last write when it was written already expired). `delete_expired`
            should run more often than that: it also cleans the session's index entries and
            event-id claims, which key expiry cannot reach. A `timedelta` or seconds; None: no
            key expiry at all. At most a century.
        indexed_keys: the top-level metadata keys `find_by_metadata` finds through an index
            (string, integer and boolean values), as `PostgresStore` has them; None indexes
            every key. Other keys are found by a scan of all sessions.
        timeout: socket timeout (seconds or a `timedelta`, at most a day), for a store built
            from a URL.
        connect_timeout: how long to wait for a connection to open (seconds or a `timedelta`;
            default: `timeout`), for a store built from a URL.
        retries: how often redis-py retries a command after a connection error, for a store
            built from a URL. 0 by default: a lost connection surfaces at once as `StoreError`,
            and retrying an append with the same event ids is always safe.
        attachments: which bytes of parts are stored apart (16 KiB and up), and the size
            limits per part and per event. The bytes are kept once per session, in the
            session's slot (docs/redis.md, "Attachments").

    Raises:
        InvalidInput: a bad URL, prefix or client; an `expiry_grace` or `timeout` that is not
            a positive, finite duration.

    Every method raises `StoreError` when the server cannot be reached or the connection drops
    (connections open lazily, on first use), and `CorruptData` for a damaged record.
    """

    # -- sessions ---------------------------------------------------------------------------

    @guarded
    def create_session(self, session: Session) -> None:
        self._put(check_session(session), create=True)

    @guarded
    def save_session(self, session: Session) -> None:
        self._put(check_session(session), create=False)

    def _put(self, session: Session, *, create: bool) -> None:
        keys = self._keys.session(session.id)
        metadata = dump_json(dict(session.metadata))
        index = self._keys.indexes(session.metadata, self._indexed)
        expires = None if session.expires_at is None else to_micros(session.expires_at)
        for _ in range(ATTEMPTS):
            inc, created = self._client.hmget(keys[0], "inc", "c")
            if inc is not None and create:
                raise SessionAlreadyExists(session.id)
            if inc is None:
                inc, expected, created = secrets.token_hex(8), "", to_micros(session.created_at)
            else:
                inc, expected, created = inc.decode(), inc.decode(), int(created)
            member = index_member(session.id, inc)
            # The index first: a crash leaves an extra entry (filtered on reads), never a gap.
            before: list[tuple[Any, ...]] = [("ZADD", self._keys.created, "NX", created, member)]
            if expires is not None:
                before.append(("ZADD", self._keys.expiry, expires, member))
            before += [("SADD", key, member) for key in index]
            self._pipeline(before)
            reply = self._run_declared(
                "save",
                session.id,
                [
                    "create" if create else "save",
                    inc,
                    expected,
                    created,
                    "" if expires is None else expires,
                    metadata,
                    "" if expires is None else expires // 1000,
                    "" if self._grace_ms is None else self._grace_ms,
                    *index,
                ],
            )
            if reply[0] == b"ok":
                if expires is None:
                    self._client.zrem(self._keys.expiry, member)
                self._remember(session.id, inc)
                return
            # This incarnation never became live, or is dead now: its entries are stale.
            self._drop_index(member, index)
            if reply[0] == b"exists":
                raise SessionAlreadyExists(session.id)
        raise StoreError(f"session {session.id!r} kept changing while it was being saved; retry")

    def _run_declared(self, name: str, session_id: str, args: Sequence[Any]) -> Any:
        """Run the script `name` (save or delete) on the session's keys and the keys of its
        attachments' bytes, which a script must be given among its keys (so that a cluster
        routes them, also while their slot migrates): a session without attachments takes one
        call; else the first call names the keys and writes nothing, and the second has them.

        Returns the script's reply.
        """
        keys = self._keys.session(session_id)
        declared: list[str] = []
        for _ in range(ATTEMPTS):
            reply = self._run(name, [*keys, *declared], args)
            if reply[0] != b"attachments":
                return reply
            declared = [f"{keys[3]}:{hex_.decode()}" for hex_ in reply[1:]]
        raise StoreError(f"session {session_id!r} kept changing while it was being written; retry")

    def _drop_index(self, member: bytes, index: Iterable[str | bytes]) -> None:
        self._pipeline(
            [
                ("ZREM", self._keys.created, member),
                ("ZREM", self._keys.expiry, member),
                *(("SREM", key, member) for key in index),
            ]
        )

    @guarded
    def find_session(self, session_id: str) -> Session | None:
        check_id(session_id, "session id")
        inc, *fields = self._client.hmget(self._keys.session(session_id)[0], "inc", "c", "x", "md")
        return None if inc is None else session_of(session_id, fields)

    def _sessions(self, members: Sequence[bytes]) -> list[Session]:
        """The live sessions the index members name, in their order (stale members dropped)."""
        pairs = [p for p in (split_member(m) for m in members) if p is not None]
        replies = self._pipeline(
            [("HMGET", self._keys.session(sid)[0], "inc", "c", "x", "md") for sid, _ in pairs]
        )
        out, seen = [], set()
        for (sid, inc), (live, *fields) in zip(pairs, replies, strict=True):
            if live is not None and live.decode() == inc and sid not in seen:
                seen.add(sid)
                out.append(session_of(sid, fields))
        return out

    @guarded
    def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        if check_limit(limit) == 0:
            return []
        # Twice the limit (some members may be expired), and never past what a range takes.
        page = 200 if limit is None else min(max(2 * limit, 20), _MOST_PER_RANGE)
        out: list[Session] = []
        seen: set[str] = set()
        start = 0
        while True:
            members = self._client.zrevrange(self._keys.created, start, start + page - 1)
            for session in self._sessions(members):
                if session.id not in seen:
                    seen.add(session.id)
                    out.append(session)
                    if limit is not None and len(out) == limit:
                        return out
            if len(members) < page:
                return out
            start += page

    @guarded
    def delete_session(self, session_id: str) -> bool:
        check_id(session_id, "session id")
        return bool(self._delete(session_id, "", "")[0] == b"deleted")

    def _delete(self, session_id: str, cutoff: int | str, inc: str) -> Any:
        reply = self._run_declared("delete", session_id, [cutoff, inc])
        if reply[0] == b"deleted":
            self._forget(session_id)
            self._tails.forget(session_id)
            member = index_member(session_id, reply[1].decode())
            self._drop_index(member, reply[4])
            self._release(
                (self._keys.event(i.decode("utf-8")), member) for i in [*reply[2], *reply[3]]
            )
        return reply

    @guarded
    def delete_expired(self, before: datetime) -> int:
        cutoff = to_micros(check_cutoff(before))
        deleted = 0
        done: set[bytes] = set()
        while True:
            members = self._client.zrangebyscore(self._keys.expiry, "-inf", cutoff, 0, 200)
            if not members or all(m in done for m in members):
                return deleted
            for member in members:
                done.add(member)
                pair = split_member(member)
                if pair is None:
                    self._client.zrem(self._keys.expiry, member)
                    continue
                reply = self._delete(pair[0], cutoff, pair[1])
                if reply[0] == b"deleted":
                    deleted += 1
                elif reply[0] == b"kept" and reply[1]:  # extended meanwhile: fix the index
                    self._client.zadd(self._keys.expiry, {member: int(reply[1])})
                elif reply[0] == b"kept":
                    self._client.zrem(self._keys.expiry, member)
                else:  # gone, or another incarnation: a stale entry
                    self._drop_index(member, ())

    @guarded
    def find_by_metadata(self, name: str, value: str | int | bool) -> list[Session]:
        """Indexed keys are read from their index set; others by a scan of all sessions."""
        if not check_metadata_query(name, value):
            return []
        key = None
        if self._indexed is None or name in self._indexed:
            key = self._keys.metadata(name, value)
        if key is None:
            members = self._client.zrange(self._keys.created, 0, -1)
        else:
            members = sorted(self._client.smembers(key))
        found = [s for s in self._sessions(members) if metadata_matches(s.metadata, name, value)]
        return sorted(found, key=lambda s: (s.created_at, s.id))

    # -- events -----------------------------------------------------------------------------

    @guarded
    def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        expected_version: int,
        *,
        check_rules: bool = True,
    ) -> int:
        batch, split = self._split(check_batch(session_id, events, expected_version))
        if not check_rules:
            return self._append(session_id, batch, expected_version, split=split)[0]
        done = self._append_remembered(session_id, batch, expected_version, split)
        if done is not None:
            return done[0]
        at, after, inc = self._check_rules(session_id, batch, expected_version)
        done = self._append(session_id, batch, expected_version, split=split)
        self._note(session_id, batch, at, after, inc, done)
        return done[0]

    def _split(self, batch: list[SessionEvent]) -> tuple[list[SessionEvent], Split | None]:
        """`batch` with the large bytes of its parts replaced by references, and the split
        (None when no part of the batch stores or names an attachment: `batch` itself when no
        event holds an image, file or audio part).

        Raises:
            InvalidInput: a part or an event over the size limits.
        """
        for event in batch:  # the text-only batch, the common case, at the cost of a loop
            m = event.message
            if m is not None and (m.parts or m.tool_results) and has_media(m):
                break
        else:
            return batch, None
        split = split_attachments(batch, self._limits)
        return split.events, split if split.blobs or split.named else None

    @guarded
    def append_event(self, event: SessionEvent, *, check_rules: bool = True) -> SessionEvent:
        (event,), split = self._split(check_batch(check_event(event).session_id, [event], 0))
        if check_rules:
            done = self._append_remembered(event.session_id, [event], None, split)
            for attempt in range(RACES):
                if done is not None:
                    break
                at, after, inc = self._check_rules(event.session_id, [event], None)
                try:  # conditioned on the version the rules were checked at
                    done = self._append(
                        event.session_id, [event], -1 if at is None else at, split=split
                    )
                except VersionConflict:  # another writer appended meanwhile: check again
                    pause(attempt)
                    continue
                self._note(event.session_id, [event], at, after, inc, done)
            if done is None:
                raise StoreError(f"session {event.session_id!r} kept changing; retry")
            version, appended, now = done
        else:
            version, appended, now = self._append(event.session_id, [event], -1, split=split)
        if appended:
            return stamped(event, version, event.timestamp or from_micros(now))
        found = self._event_by_id(event.session_id, event.id)  # it was stored before
        if found is None:  # pragma: no cover - ids are never removed from a live session
            raise StoreError(f"event {event.id!r} vanished while it was being appended")
        return found

    def _append_remembered(
        self,
        session_id: str,
        batch: list[SessionEvent],
        expected: int | None,
        split: Split | None = None,
    ) -> tuple[int, int, int] | None:
        """Append without reading the log: check the rules against the tail this handle
        remembers and condition the write on its version and the session's incarnation.

        Returns what `_append` returns, or None when the memory cannot decide (nothing
        remembered, another version expected, the batch refused at the remembered tail, or
        the log moved on): nothing was written and the caller reads the log.
        """
        known = self._tails.get(session_id)
        if known is None or (expected is not None and expected != known[0]):
            return None
        version, inc, tail = known
        try:
            after = check_append(tail, batch)
        except InvalidInput:  # maybe a retry, maybe a broken rule: the log decides
            self._tails.forget(session_id)
            return None
        try:
            done = self._append(session_id, batch, version, fence=inc, split=split)
        except VersionConflict:
            self._tails.forget(session_id)
            return None
        except SessionNotFound:
            self._tails.forget(session_id)
            raise
        self._note(session_id, batch, version, after, inc, done)
        return done

    def _note(
        self,
        session_id: str,
        batch: list[SessionEvent],
        at: int | None,
        after: Tail | None,
        inc: str | None,
        done: tuple[int, int, int],
    ) -> None:
        """Remember the tail after an append that wrote all of `batch` at version `at`."""
        version, appended, _ = done
        if (
            at is not None
            and after is not None
            and inc
            and appended == len(batch)
            and version == at + len(batch)
        ):
            self._tails.remember(session_id, version, inc, after)
        else:
            self._tails.forget(session_id)

    def _append(
        self,
        session_id: str,
        batch: list[SessionEvent],
        expected: int,
        *,
        fence: str = "",
        split: Split | None = None,
    ) -> tuple[int, int, int]:
        """Append under the version check (`expected` -1: at the end), and when `fence` is
        given, only to that incarnation of the session (else `VersionConflict`); with the
        attachments of `split` (its events are `batch`).

        Returns the new version, how many events were appended, and the time stamped on them
        (µs since the epoch).
        """
        now = time.time_ns() // 1000 if self._clock is utc_now else to_micros(self._clock())
        args, required, invalid = batch_args(batch, now)
        events = [len(batch), -1 if invalid else len(required), *args, *required]
        tail: list[Any] = events
        media: list[str] = []
        sends: list[tuple[Any, ...]] = []
        known: set[str] = set()
        nonce = ""
        if split is not None:  # what the session holds, and a name for the staging keys
            known, nonce = self._held_of(session_id, split.blobs), secrets.token_hex(8)
        for _ in range(ATTEMPTS):
            if split is not None:  # a text-only batch sends no attachment keys or arguments
                media, more, sends = attachment_args(self._keys, session_id, split, known, nonce)
                tail = events + more
            reply = self._attempt(session_id, batch, expected, tail, fence, media, sends)
            if reply is None:
                continue
            tag = reply[0]
            if tag == b"ok":
                if split is not None:
                    self._note_held(session_id, split.blobs)
                return int(reply[1]), int(reply[2]), now
            if tag == b"lacks" and split is not None:  # believed held, but not: send them
                known -= {"sha256:" + hex_.decode() for hex_ in reply[1:]}
                continue
            if tag == b"nosession":
                raise SessionNotFound(session_id)
            if tag == b"conflict":
                raise VersionConflict(session_id, expected, int(reply[1]))
            if tag == b"changed" and fence:  # deleted and created again: a new log
                raise VersionConflict(session_id, expected, -1)
            if tag == b"unknown":
                raise InvalidInput(
                    "a compaction event names events that are not message events of this "
                    f"session: {reply[1].decode('utf-8', 'replace')}"
                )
            if tag == b"invalid" and invalid is not None:
                raise invalid
            if tag == b"refs" and split is not None:
                held = {r: int(n) for r, n in zip(split.named, reply[1:], strict=True) if n}
                held.update((r, len(data)) for r, data in split.blobs.items())
                check_refs_known(session_id, split.named, held)  # raises InvalidInput
            raise StoreError(f"unexpected reply from the append script: {reply[0]!r}")
        raise StoreError(f"session {session_id!r} kept changing during an append; retry")

    def _attempt(
        self,
        session_id: str,
        batch: list[SessionEvent],
        expected: int,
        tail: list[Any],
        fence: str = "",
        media: Sequence[str] = (),
        sends: Sequence[tuple[Any, ...]] = (),
    ) -> Any:
        """Run the append script once, the batch's event-id keys among its keys, then the
        attachment keys `media` (fenced by the incarnation `fence` unless it is empty), after
        the commands `sends` that send the bytes of attachments ahead of it.

        Returns the script's reply, or None to run it again (claims of dead incarnations were
        released).

        Raises:
            InvalidInput: an id is claimed by another live session.
        """
        keys = self._keys.session(session_id)[:2] + [self._keys.event(e.id) for e in batch]
        keys += media
        reply = self._run_after(sends, "append", keys, [expected, fence, session_id, "1", *tail])
        if reply[0] == b"foreign":
            self._clear_claims(session_id, batch)
            return None
        return reply

    def _check_rules(
        self, session_id: str, batch: list[SessionEvent], expected: int | None
    ) -> tuple[int | None, Tail | None, str | None]:
        """Check the view rules against the end of the log (as `check_rules_at` does).

        Returns the version to write at, the tail after the batch (see `check_rules_at`) and
        the incarnation read (None when the log was not read). The log is read before the
        write, so the write must be conditioned on the version returned (an append only ever
        extends the records read).
        """
        key = self._keys.session(session_id)[:1]
        if not needs_tail(batch):
            self._check_new(key[0], EMPTY_TAIL, batch)
            return expected, None, None
        reply = self._run("tail", key, [_TAIL_PAGE, ""])
        if not reply:
            raise SessionNotFound(session_id)
        version, inc = int(reply[1]), reply[0]
        if expected is not None and version != expected:
            return None, None, inc.decode()
        tail = self._tail(session_id, key, inc, version, reply[2:])
        return version, self._check_new(key[0], tail, batch), inc.decode()

    def _tail(
        self, session_id: str, key: list[str], inc: bytes, seq: int, records: list[Any]
    ) -> Tail:
        """The log's `Tail`, from its records newest first (`records`: the first page, ending
        at `seq`), reading further pages only until a user or assistant message decides it."""
        rows: list[tuple[str, list[str]]] = []
        while records:
            for record in records:
                head, body = split_record(session_id, seq, record)
                seq -= 1
                if head[1] != "MESSAGE" or head[3]:
                    continue
                role = message_role(body)
                if role in ("user", "assistant", "tool"):
                    rows.append((role, [] if role == "user" else message_ids(body)))
                    if role != "tool":
                        return tail_of(rows)
            if seq < 1:
                break
            reply = self._run("tail", key, [_TAIL_PAGE, seq + 1])
            if not reply or reply[0] != inc:
                raise StoreError(f"session {session_id!r} was deleted meanwhile; retry")
            records = reply[2:]
        return tail_of(rows)

    def _check_new(self, key: str, tail: Tail, batch: list[SessionEvent]) -> Tail | None:
        """`check_append(tail, batch)`; when that refuses, the events of `batch` the session
        does not hold yet are checked instead (a retry skips the rest).

        Returns the tail after the whole batch, or None when part of it was a retry.

        Raises:
            InvalidInput: the new events break a view rule.
        """
        try:
            return check_append(tail, batch)
        except InvalidInput as refusal:
            found = self._client.hmget(key, ["#" + e.id for e in batch])
            known = {e.id for e, ref in zip(batch, found, strict=True) if ref is not None}
            check_retry(tail, batch, known, refusal)
        return None

    def _live(self, owner: bytes) -> bool:
        pair = split_member(owner)
        if pair is None:
            return False
        inc = self._client.hget(self._keys.session(pair[0])[0], "inc")
        return inc is not None and inc.decode() == pair[1]

    def _clear_claims(self, session_id: str, batch: list[SessionEvent]) -> None:
        """Standalone: the append met claims it does not own. Release those of dead
        incarnations; refuse those of other live sessions.

        Raises:
            InvalidInput: an id is claimed by another live session.
        """
        keys = [self._keys.event(e.id) for e in batch]
        owners = self._pipeline([("GET", k) for k in keys])
        dead, live = [], {}
        for event, key, owner in zip(batch, keys, owners, strict=True):
            if owner is None:
                continue
            if owner not in live:
                live[owner] = self._live(owner)
            if not live[owner]:
                dead.append((key, owner))
            elif not owner.startswith(session_id.encode("utf-8") + b"\x00"):
                raise InvalidInput(
                    f"event id {event.id!r} belongs to another session; ids are unique across "
                    "sessions"
                )
        self._release(dead)

    @guarded
    def events(self, session_id: str, flt: EventFilter | None = None) -> list[SessionEvent]:
        check_id(session_id, "session id")
        flt = EventFilter.all() if flt is None else flt
        if flt.active_view:
            return apply_filter(self.view(session_id), flt)
        names = None if flt.event_types is None else {t.name for t in flt.event_types}
        records = self._log(session_id, 1)
        return apply_filter(events_of(session_id, 1, records, names), flt)

    @guarded
    def events_by_id(self, session_id: str, ids: Sequence[str]) -> list[SessionEvent]:
        wanted = check_event_ids(ids)
        key = self._keys.session(session_id)[0]
        for _ in range(ATTEMPTS):
            inc, *refs = self._client.hmget(key, ["inc", *("#" + i for i in wanted)])
            if inc is None:
                raise SessionNotFound(session_id)
            seqs = sorted(int(ref[1:]) for ref in refs if ref is not None)
            if not seqs:
                return []
            again, *records = self._client.hmget(key, ["inc", *map(str, seqs)])
            if again == inc:  # records never change within one incarnation
                return [
                    decode_record(session_id, seq, record)
                    for seq, record in zip(seqs, records, strict=True)
                    if record is not None
                ]
        raise StoreError(f"session {session_id!r} kept changing while it was being read; retry")

    def search_history(self, session_id: str, query: HistoryQuery) -> list[HistoryHit]:
        index = self._history_index()
        catch_up(index, session_id, self.version(session_id), self.events_after)
        return index.search([session_id], query)

    def search_sessions(
        self,
        query: HistoryQuery,
        *,
        sessions: Sequence[str] | None = None,
        metadata: Mapping[str, str | int | bool] | None = None,
    ) -> list[HistoryHit]:
        index = self._history_index()
        found_all: list[Session | None]
        if sessions is None:
            found_all = list(self.list_sessions())
        else:
            found_all = [self.find_session(sid) for sid in dict.fromkeys(sessions)]
        picked = []
        for found in found_all:
            if found is None or not session_matches(found, metadata):
                continue
            sid = found.id
            try:
                catch_up(index, sid, self.version(sid), self.events_after)
            except SessionNotFound:
                continue
            picked.append(sid)
        return index.search(picked, query)

    def _history_index(self) -> HistoryIndex:
        # the process's history index of this store (turnlog.stores.history_index)
        index = getattr(self, "_history", None)
        if index is None:
            index = self._history = HistoryIndex()
        return index

    def events_after(self, session_id: str, after: int, limit: int) -> list[SessionEvent]:
        check_id(session_id, "session id")
        after, limit = check_range(after, limit)
        records = self._log(session_id, after + 1, min(after + limit, 2**62))
        return events_of(session_id, after + 1, records)

    def _log(self, session_id: str, first: int, last: int | None = None) -> list[bytes | None]:
        """Records `first`..`last` (the end of the log by default).

        The first chunk comes from one script call with the version and the incarnation; the
        rest in one pipeline of plain `HMGET`s that ends by reading the incarnation again.
        Records never change, so the same incarnation at both ends makes one snapshot.
        """
        key = self._keys.session(session_id)[0]
        for _ in range(ATTEMPTS):
            hi = first + _CHUNK - 1 if last is None else min(last, first + _CHUNK - 1)
            reply = self._run("range", [key], [first, hi])
            if not reply:
                raise SessionNotFound(session_id)
            inc, end = reply[0], int(reply[1]) if last is None else min(int(reply[1]), last)
            records: list[bytes | None] = list(reply[2:])
            lo = first + len(records)
            if lo > end:
                return records
            pipe = self._client.pipeline(transaction=False)
            for at in range(lo, end + 1, _CHUNK):
                pipe.hmget(key, [str(seq) for seq in range(at, min(end, at + _CHUNK - 1) + 1)])
            pipe.hget(key, "inc")
            *chunks, again = pipe.execute()
            if again == inc:
                for chunk in chunks:
                    records += chunk
                return records
            # deleted or re-created meanwhile: read again
        raise StoreError(f"session {session_id!r} kept changing while it was being read; retry")

    def _event_by_id(self, session_id: str, event_id: str) -> SessionEvent | None:
        ref = self._client.hget(self._keys.session(session_id)[0], "#" + event_id)
        if ref is None:
            return None
        seq = int(ref[1:])
        return decode_record(session_id, seq, self._log(session_id, seq, seq)[0])

    @guarded
    def record_tokens(self, session_id: str, counts: Mapping[str, TokenCount]) -> int:
        check_id(session_id, "session id")
        counts = check_token_counts(counts)
        key = self._keys.session(session_id)[0]
        ids = list(counts)
        if not ids:
            if self._client.hget(key, "inc") is None:
                raise SessionNotFound(session_id)
            return 0
        refs = self._client.hmget(key, ["#" + i for i in ids])
        messages = [
            (event_id, int(ref[1:]))
            for event_id, ref in zip(ids, refs, strict=True)
            if ref and ref[:1] == b"M"
        ]
        records = self._client.hmget(key, [str(seq) for _, seq in messages]) if messages else []
        args: list[Any] = []
        for (event_id, seq), record in zip(messages, records, strict=True):
            if record is None:
                continue
            event = decode_record(session_id, seq, record)
            if event.message is None:
                continue
            head = record.partition(b"\n")[0]
            args += (seq, record, head + b"\n" + encode_body(event.with_tokens(counts[event_id])))
        written = self._run("set_bodies", [key], args)
        if written is None:
            raise SessionNotFound(session_id)
        return int(written)

    @guarded
    def version(self, session_id: str) -> int:
        check_id(session_id, "session id")
        inc, version = self._client.hmget(self._keys.session(session_id)[0], "inc", "v")
        if inc is None:
            raise SessionNotFound(session_id)
        return int(version)

    @guarded
    def read_attachment(
        self, session_id: str, ref: str, offset: int = 0, length: int | None = None
    ) -> bytes:
        check_id(session_id, "session id")
        check_ref(ref)
        offset, length = check_read_range(offset, length)
        keys = self._keys.session(session_id)
        blob = self._keys.attachment(session_id, ref)
        first, last = chunk_range(offset, length) if length != 0 else (0, 0)
        skip = offset - first * ATTACHMENT_CHUNK
        for _ in range(ATTEMPTS):
            # One round trip to the session's node; the bytes are read only when the session
            # holds them, and only the chunks of the range. The bytes of a reference never
            # change (they are its sha256), so the only race is a delete between the commands,
            # which a short read shows.
            pipe = self._client.pipeline(transaction=False)
            pipe.hget(keys[0], "inc")
            pipe.hget(keys[3], ref[7:])
            if length != 0:
                pipe.lrange(blob, first, last)
            inc, size, *chunks = pipe.execute()
            if size is None:
                if inc is None:
                    raise SessionNotFound(session_id)
                raise AttachmentNotFound(session_id, ref)
            if not chunks:
                return b""
            joined = b"".join(chunks[0])
            data = joined[skip:] if length is None else joined[skip : skip + length]
            want = max(0, int(size) - offset)
            if length is not None:
                want = min(want, length)
            if len(data) == want:
                return data
            pause(0)  # deleted meanwhile (or damaged): look again
        return data  # held, and read as stored: the service finds it damaged

    @guarded
    def view(self, session_id: str) -> list[SessionEvent]:
        check_id(session_id, "session id")
        reply = self._run("view", self._keys.session(session_id)[:1], [])
        if not reply:
            raise SessionNotFound(session_id)
        return view_of(session_id, reply)

    @guarded
    def view_lazy(self, session_id: str) -> LazyEvents:
        check_id(session_id, "session id")
        reply = self._run("view", self._keys.session(session_id)[:1], [])
        if not reply:
            raise SessionNotFound(session_id)
        return lazy_view_of(session_id, reply)
