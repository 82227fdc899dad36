"""How `RedisStore` and `RedisClusterStore` lay sessions out in Redis: the key names, the index
members, the records and the arguments of the append script (docs/redis.md, "Key layout").

Shared by all four stores (the async sources `store_async.py`, `cluster_async.py` and their
generated twins `store.py`, `cluster.py`); nothing here talks to a server.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from importlib import resources
from typing import Any, Final
from urllib.parse import quote

import msgspec

from turnlog.codec import (
    decode_session,
    encode_body,
    event_from_row,
    events_from_rows,
    gc_paused,
    lazy_events_from_rows,
    to_micros,
)
from turnlog.errors import CorruptData, InvalidInput
from turnlog.events import Session, SessionEvent
from turnlog.lazy import LazyEvents
from turnlog.payloads import CompactionBoundary
from turnlog.stores.attachments import Split, check_ref
from turnlog.stores.base import check_boundaries

__all__ = [
    "ATTACHMENT_CHUNK",
    "SCRIPTS",
    "Keys",
    "attachment_args",
    "batch_args",
    "check_prefix",
    "chunk_range",
    "decode_record",
    "event_of",
    "events_of",
    "index_member",
    "messages_of",
    "session_of",
    "split_member",
    "split_record",
    "view_of",
]

_INDEXED_LENGTH: Final = 512  # longer metadata (name + value) is searched by a scan
_header_encoder: Final = msgspec.json.Encoder()
_header_decoder: Final = msgspec.json.Decoder(tuple[str, str, int, int])


def _load_scripts() -> dict[str, str]:
    """The scripts of scripts.lua by name. A section whose name starts with `_` is a piece of
    text shared by scripts, not a script: a line `--+ <name>` of a script is replaced by it
    (Redis scripts cannot call one another, so the text is repeated in each, here and not
    in the file)."""
    text = resources.files("turnlog.stores.redis").joinpath("scripts.lua").read_text("utf-8")
    sections: dict[str, str] = {}
    for part in text.split("\n--! ")[1:]:
        name, _, body = part.partition("\n")
        sections[name.strip()] = body
    pieces = {name: body for name, body in sections.items() if name.startswith("_")}

    def include(match: re.Match[str]) -> str:
        return pieces[match.group(1)].rstrip("\n")

    return {
        name: re.sub(r"^--\+ (\S+)$", include, body, flags=re.MULTILINE)
        for name, body in sections.items()
        if not name.startswith("_")
    }


SCRIPTS: Final = _load_scripts()
"""The Lua scripts by name (scripts.lua)."""

ATTACHMENT_CHUNK: Final = 65_472
"""Bytes per element of an attachment's list: 64 bytes under 64 KiB, so that an element with
the headers of Redis's string and list encodings (a few bytes) fills jemalloc's 64 KiB size
class exactly. One string of 1 MiB would take the next class up, 1.25 MiB."""

_STAGED_MS: Final = 600_000
"""How long bytes sent ahead of the append script live if the script never takes them (a
writer that died between the two): ten minutes."""

_PLAIN: Final = re.compile(r"[A-Za-z0-9_.~-]+")


def _escape(text: str) -> str:
    """`quote(text, safe="")`: only ASCII letters, digits and `_.-~` stay (checked first,
    because most ids are plain already)."""
    return text if _PLAIN.fullmatch(text) else quote(text, safe="")


_FORBIDDEN: Final = frozenset(":{}*?[]\\")


def check_prefix(prefix: object) -> str:
    """`prefix` if it can be the prefix of a store's keys.

    Every key of a store is `<prefix>:...`, so a prefix holds no `:`: two different prefixes
    then never share a key (the first `:` of a key ends its prefix), and `SCAN MATCH
    <prefix>:*` finds exactly one store's keys, because a prefix holds no glob character either.
    No braces (a hash tag would move keys between slots), no whitespace, no control characters
    or lone surrogates (not printable).

    Raises:
        InvalidInput: a prefix that breaks these rules.
    """
    if not isinstance(prefix, str) or not prefix:
        raise InvalidInput(f"a Redis key prefix is a non-empty string, not {prefix!r}")
    bad = sorted({c for c in prefix if _refused(c)})
    if bad:
        raise InvalidInput(
            f"the Redis key prefix {prefix!r} holds {' '.join(repr(c) for c in bad)}: a prefix "
            "may not hold ':', braces, glob characters (* ? [ ] \\), whitespace or control "
            "characters, so that no two stores' keys can meet (with 'app' and 'app:m', one "
            "store's keys would be the other's) and SCAN MATCH '<prefix>:*' finds one store's "
            "keys only. Use another separator, e.g. "
            f"{_suggest(prefix)!r}. Data that turnlog 0.1 wrote under such a prefix: see "
            "docs/redis.md, 'Prefixes'"
        )
    return prefix


def _refused(char: str) -> bool:
    return char in _FORBIDDEN or char.isspace() or not char.isprintable()


def _suggest(prefix: str) -> str:
    return "".join("-" if _refused(c) else c for c in prefix).strip("-") or "turnlog"


class Keys:
    """Key names. Ids are percent-escaped (`quote(id, safe="")`), which leaves no `{`, `}`, `:`
    or glob character in them: a session id can neither move its keys to another slot nor
    produce another session's key names."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.created = f"{prefix}:{{:idx}}:c"  # ':' never survives escaping: no session has it
        self.expiry = f"{prefix}:{{:idx}}:x"
        self._sessions: dict[str, list[str]] = {}

    def session(self, session_id: str) -> list[str]:
        """The session hash (state, records, ids), its failed claims, its index keys and its
        attachments (a hash of reference -> size; the bytes of each in `<that key>:<hex>`):
        one tag."""
        keys = self._sessions.get(session_id)
        if keys is None:
            base = f"{self.prefix}:{{{_escape(session_id)}}}:"
            keys = [base + suffix for suffix in ("s", "r", "k", "a")]
            if len(self._sessions) >= 4096:
                self._sessions.clear()
            self._sessions[session_id] = keys
        return keys

    def attachment(self, session_id: str, ref: str) -> str:
        """The key of the bytes of attachment `ref` (`sha256:<hex>`) in the session's slot: a
        list of chunks of `ATTACHMENT_CHUNK` bytes."""
        return f"{self.session(session_id)[3]}:{ref[7:]}"

    def staged(self, session_id: str, ref: str, nonce: str) -> str:
        """The key an append sends the bytes of `ref` to before its script runs (`nonce`: one
        per append), in the session's slot; the script renames it to `attachment(...)` or
        deletes it."""
        return f"{self.session(session_id)[3][:-1]}u:{ref[7:]}:{nonce}"

    def event(self, event_id: str) -> str:
        """The key of an event id's claim."""
        return f"{self.prefix}:id:{_escape(event_id)}"

    def indexes(self, metadata: Mapping[str, object], indexed: frozenset[str] | None) -> list[str]:
        """The index sets a session with `metadata` belongs in (`indexed`: the names indexed,
        None for all)."""
        keys = []
        for name, value in metadata.items():
            if indexed is not None and name not in indexed:
                continue
            if isinstance(value, (str, int)):  # bool is an int
                key = self.metadata(name, value)
                if key is not None:
                    keys.append(key)
        return keys

    def metadata(self, name: str, value: str | int | bool) -> str | None:
        """The index set of `name` == `value` (type-exact), or None when it is too long."""
        if isinstance(value, bool):
            typed = "b1" if value else "b0"
        elif isinstance(value, int):
            typed = f"i{value}"
        else:
            typed = "s" + _escape(value)
        if len(name) + len(typed) > _INDEXED_LENGTH:
            return None
        return f"{self.prefix}:m:{_escape(name)}:{typed}"


def index_member(session_id: str, inc: str) -> bytes:
    """An index member: the session id, NUL, its incarnation (ids hold no NUL)."""
    return session_id.encode("utf-8") + b"\x00" + inc.encode("ascii")


def split_member(data: bytes) -> tuple[str, str] | None:
    """The session id and incarnation of an index member or claim; None when malformed."""
    sid, sep, inc = data.partition(b"\x00")
    try:
        return (sid.decode("utf-8"), inc.decode("ascii")) if sep else None
    except UnicodeDecodeError:
        return None


def session_of(session_id: str, fields: Sequence[bytes | None]) -> Session:
    """The session whose `c`, `x` and `md` fields are `fields`.

    Raises:
        CorruptData: a field is missing or the metadata is not a JSON object.
    """
    created, expires, metadata = fields
    if created is None or expires is None or metadata is None:
        raise CorruptData(f"the record of session {session_id!r} is incomplete")
    try:
        created_micros, expires_micros = int(created), int(expires) if expires else None
    except ValueError as exc:
        raise CorruptData(
            f"session {session_id!r} cannot be read: a time is not an integer ({exc}). The "
            "record is damaged; other sessions are unaffected."
        ) from exc
    return decode_session(session_id, created_micros, expires_micros, metadata)


def batch_args(
    batch: list[SessionEvent], now: int
) -> tuple[list[Any], list[str], InvalidInput | None]:
    """The append script's arguments for `batch`.

    Returns:
        Per event its id, kind, record and, for a boundary, the ids it names; the ids the
        script must find as messages of the log; the error a malformed boundary makes (the
        script reports versions and retries first).
    """
    invalid: InvalidInput | None = None
    required: dict[str, None] = {}
    if len(batch) > 1 or (batch and batch[0].type.name == "COMPACTION"):
        try:
            check_boundaries(batch, set)  # the format; the script checks the names
        except InvalidInput as exc:
            invalid = exc
    args: list[Any] = []
    messages: set[str] | None = None  # the batch's message ids, once a boundary needs them
    for e in batch:
        stamp = now if e.timestamp is None else to_micros(e.timestamp)
        record = _header_encoder.encode((e.id, e.type.name, stamp, int(e.synthetic)))
        record += b"\n" + encode_body(e)
        if e.message is not None:
            args += (e.id, "M", record, 0)
        elif e.type.name != "COMPACTION":
            args += (e.id, "E", record, 0)
        elif invalid is not None:
            args += (e.id, "C", record, 0)
        else:
            boundary = CompactionBoundary.from_event(e)
            named = boundary.view_event_ids
            if messages is None:
                messages = {x.id for x in batch if x.message is not None}
            required.update((i, None) for i in named if i not in messages)
            required.update((i, None) for i in boundary.replaced.values() if i not in messages)
            args += (e.id, "C", record, len(named), *named)
    return args, list(required), invalid


def attachment_args(
    keys: Keys, session_id: str, split: Split, held: Collection[str], nonce: str
) -> tuple[list[str], list[Any], list[tuple[Any, ...]]]:
    """The append script's keys and arguments for the attachments of a batch (see scripts.lua),
    and the commands that send the bytes ahead of it.

    `held`: the references the session is believed to hold already; their bytes are not sent
    (the script replies 'lacks' if it does not hold them after all).

    Returns:
        The keys: the session's attachment hash, the key of each attachment's bytes, then the
        key each one's bytes are sent to. The arguments: how many attachments, each as hex,
        size and '1' when its bytes are sent ('0' when not); how many references the batch
        names, each as hex and size ('' when the part gives none). The commands, to run
        before the script on the same connection: per attachment sent, UNLINK its staging key,
        RPUSH its chunks there and give it a TTL (`_STAGED_MS`).
    """
    blobs = split.blobs
    finals = [keys.attachment(session_id, r) for r in blobs]
    staging = [keys.staged(session_id, r, nonce) for r in blobs]
    args: list[Any] = [len(blobs)]
    commands: list[tuple[Any, ...]] = []
    for (ref, data), key in zip(blobs.items(), staging, strict=True):
        send = ref not in held
        args += (ref[7:], len(data), "1" if send else "0")
        if send:
            view = memoryview(data)
            chunks = [
                view[at : at + ATTACHMENT_CHUNK] for at in range(0, len(data), ATTACHMENT_CHUNK)
            ]
            commands += [("UNLINK", key), ("RPUSH", key, *chunks), ("PEXPIRE", key, _STAGED_MS)]
    args.append(len(split.named))
    for ref, size in split.named.items():
        args += (check_ref(ref)[7:], "" if size is None else size)
    return [keys.session(session_id)[3], *finals, *staging], args, commands


def chunk_range(offset: int, length: int | None) -> tuple[int, int]:
    """The first and last index of the chunks holding `length` bytes from `offset` (the last
    -1 for "to the end"); `length` is not 0."""
    first = offset // ATTACHMENT_CHUNK
    if length is None:
        return first, -1
    return first, (offset + length - 1) // ATTACHMENT_CHUNK


def split_record(
    session_id: str, seq: int, record: bytes | None
) -> tuple[tuple[str, str, int, int], bytes]:
    """A record's header `(id, type, timestamp µs, synthetic)` and its body.

    Raises:
        CorruptData: the record is missing or its header cannot be read.
    """
    if record is None:
        raise CorruptData(
            f"event seq {seq} of session {session_id!r} is missing: the data is damaged; "
            "other sessions are unaffected"
        )
    head, _, body = record.partition(b"\n")
    try:
        return _header_decoder.decode(head), body
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptData(
            f"event seq {seq} of session {session_id!r} cannot be read: {exc}. The record "
            "is damaged; other sessions are unaffected. Restore it from a backup."
        ) from exc


def event_of(
    session_id: str, seq: int, head: tuple[str, str, int, int], body: bytes
) -> SessionEvent:
    """The event a record's header and body make.

    Raises:
        CorruptData: the body cannot be decoded.
    """
    return event_from_row(head[0], session_id, seq, head[1], head[2], head[3], body)


def decode_record(session_id: str, seq: int, record: bytes | None) -> SessionEvent:
    """The event a stored record holds.

    Raises:
        CorruptData: the record is missing or damaged.
    """
    return event_of(session_id, seq, *split_record(session_id, seq, record))


def messages_of(session_id: str, first: int, records: Sequence[bytes | None]) -> list[SessionEvent]:
    """The message events among consecutive records starting at seq `first`.

    Raises:
        CorruptData: a record is missing or damaged.
    """
    return events_of(session_id, first, records, _MESSAGES)  # can be the whole log


_MESSAGES: Final = frozenset({"MESSAGE"})


def events_of(
    session_id: str,
    first: int,
    records: Sequence[bytes | None],
    names: Collection[str] | None = None,
) -> list[SessionEvent]:
    """The events among consecutive records starting at seq `first`: all of them, or those
    whose type is in `names`.

    Raises:
        CorruptData: a record is missing or damaged.
    """
    rows = _rows(session_id, first, records, names)
    with gc_paused():
        return events_from_rows(session_id, rows)


def _rows(
    session_id: str, first: int, records: Sequence[bytes | None], names: Collection[str] | None
) -> list[tuple[Any, ...]]:
    """The codec's rows of the records whose type is in `names` (all when None)."""
    rows = []
    for seq, record in enumerate(records, start=first):
        head, body = split_record(session_id, seq, record)
        if names is None or head[1] in names:
            rows.append((seq, head[0], head[1], head[2], head[3], body))
    return rows


def lazy_view_of(session_id: str, reply: Sequence[Any]) -> LazyEvents:
    """`view_of`, lazily: a never-compacted view's events are decoded when first read (a
    compacted one, short, is decoded now).

    Raises:
        CorruptData: a record is missing, or its outline is damaged.
    """
    if int(reply[1]) != 0:
        return LazyEvents.of(view_of(session_id, reply))
    return lazy_events_from_rows(session_id, _rows(session_id, 1, reply[3:], _MESSAGES))


def view_of(session_id: str, reply: Sequence[Any]) -> list[SessionEvent]:
    """The active view from the `view` script's reply.

    Raises:
        CorruptData: a record is missing or damaged.
    """
    version, boundary_seq, records = int(reply[0]), int(reply[1]), reply[3:]
    if boundary_seq == 0:
        return messages_of(session_id, 1, records)
    named = [int(s) for s in reply[2].split(b",") if s]
    before = {
        seq: decode_record(session_id, seq, record)
        for seq, record in zip(named, records, strict=False)
    }
    rest = records[len(named) :]
    boundary = decode_record(session_id, boundary_seq, rest[0] if rest else None)
    after = messages_of(session_id, boundary_seq + 1, rest[1:])
    if len(rest) != version - boundary_seq + 1:
        raise CorruptData(f"the view records of session {session_id!r} are incomplete")
    return CompactionBoundary.project([*(before[s] for s in sorted(before)), boundary, *after])
