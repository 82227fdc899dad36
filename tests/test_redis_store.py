"""RedisStore on the real server: the contract, and what only Redis has (keys and slots, scripts,
event-id claims, key expiry, damaged records, lost connections).

`RedisChecks` holds the Redis behaviours both stores share; test_redis_cluster.py runs it on a
cluster. Every test uses a random key prefix and deletes its keys afterwards.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

import pytest
import redis
from redis.crc import key_slot

from redis_cluster import RedisServer, free_ports
from turnlog import (
    CompactionBoundary,
    CorruptData,
    ImagePart,
    InvalidInput,
    Message,
    Session,
    SessionEvent,
    SessionNotFound,
    StoreError,
)
from turnlog.errors import AttachmentNotFound, VersionConflict
from turnlog.stores.attachments import AttachmentLimits, ref_of
from turnlog.stores.redis import RedisClusterStore, RedisStore
from turnlog.testing import FakeClock, StoreContract
from turnlog.testing.contract_attachments import blob

HOSTILE = [
    "a",
    "{a}",
    "a}",
    "{",
    "}",
    "%7Ba%7D",
    "a:b",
    "a*",
    "a?[x]",
    "a\\b",
    "'\"%",
    "ünï €",
    "🦜{x}y",
]


def purge(client, prefix: str) -> None:
    """Delete every key under `prefix` (SCAN MATCH; on a cluster, on every master)."""
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for at in range(0, len(keys), 1000):
        pipe = client.pipeline(transaction=False)
        for key in keys[at : at + 1000]:
            pipe.unlink(key)
        pipe.execute()


def keys_of(client, prefix: str) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match=f"{prefix}:*", count=1000))


def version_lookups(monkeypatch) -> list[str]:
    """The names `importlib.metadata.version` is asked for from now on (it still answers)."""
    import importlib.metadata

    asked: list[str] = []
    plain = importlib.metadata.version

    def version(name):
        asked.append(name)
        return plain(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    return asked


def now() -> datetime:
    return datetime.now(UTC)


def turn(sid: str, n: int, tag: str = "") -> list[SessionEvent]:
    return [
        SessionEvent.for_message(sid, Message.user(f"q{n}"), event_id=f"{tag}{sid}-u{n}"),
        SessionEvent.for_message(sid, Message.assistant(f"a{n}"), event_id=f"{tag}{sid}-a{n}"),
    ]


def image(sid: str, data: bytes, event_id: str | None = None) -> SessionEvent:
    message = Message.user("see", ImagePart("image/png", data=data))
    return SessionEvent.for_message(sid, message, event_id=event_id)


def attachment_keys(client, prefix: str, sid: str = "*") -> list[str]:
    """The keys of the attachment bytes under `prefix` (of one session, its id escaped in
    keys as plain ids are, or of all)."""
    return sorted(k.decode() for k in client.scan_iter(match=f"{prefix}:{{{sid}}}:a:*", count=1000))


class RedisChecks:
    """Redis behaviours of both stores. Subclasses provide `new_store(**kw)` and `prefix`."""

    prefix: str

    def new_store(self, **kw) -> RedisStore:
        raise NotImplementedError

    @pytest.fixture
    def store(self):
        with self.new_store() as store:
            yield store

    # -- keys and slots -------------------------------------------------------------------------

    def test_a_session_lives_in_one_slot_and_hostile_ids_stay_apart(self, store):
        for i, sid in enumerate(HOSTILE):
            store.create_session(Session(sid, now(), metadata={"owner": sid, "k{*}": f"v{i}"}))
            store.append_events(sid, turn(sid, i), 0)
            store.append_events(sid, [image(sid, blob(sid))], 2)  # attachment keys too
        for i, sid in enumerate(HOSTILE):
            assert store.read_attachment(sid, ref_of(blob(sid))) == blob(sid)
            assert [e.message.text for e in store.events(sid)] == [f"q{i}", f"a{i}", "see"]
            assert [s.id for s in store.find_by_metadata("owner", sid)] == [sid]
            assert [s.id for s in store.find_by_metadata("k{*}", f"v{i}")] == [sid]
        by_session: dict[str, set[int]] = {}
        for key in keys_of(store.client, self.prefix):
            rest = key[len(self.prefix) + 1 :]
            if rest.startswith(("id:", "m:")):
                assert "{" not in rest and "}" not in rest, key
                continue
            if rest.startswith("{:idx}:"):
                assert rest in ("{:idx}:c", "{:idx}:x"), key
                continue
            assert rest.count("{") == 1 and rest.count("}") == 1, key
            tag = rest[1 : rest.index("}")]
            by_session.setdefault(unquote(tag), set()).add(key_slot(key.encode()))
        assert set(by_session) == set(HOSTILE)
        assert all(len(slots) == 1 for slots in by_session.values())
        assert len(attachment_keys(store.client, self.prefix)) == len(HOSTILE)

    def test_an_escaped_looking_id_is_not_its_escape(self, store):
        for sid in ("{a}", "%7Ba%7D"):
            store.create_session(Session(sid, now()))
        store.append_events("{a}", turn("{a}", 1), 0)
        assert store.version("%7Ba%7D") == 0

    # -- prefixes -------------------------------------------------------------------------------

    def test_overlapping_prefixes_stay_apart(self):
        """`app` and `app:m` shared keys once: the metadata index set `app:m:id:s<value>` of
        one store was the event-id claim `app:m:id:<id>` of the other (WRONGTYPE), and
        `SCAN MATCH app:*` found both stores' keys. Now each prefix is refused or kept apart."""
        base = self.prefix
        prefixes = [base]
        for suffix in (":m", ":id", ":m:id", ":{:idx}", "m", "-m", ".id", "_x", "*", "[m]"):
            try:
                self.new_store(prefix=base + suffix).close()
            except InvalidInput as exc:
                assert "prefix" in str(exc)
                continue
            prefixes.append(base + suffix)
        assert len(prefixes) >= 5, prefixes  # the plain suffixes open side by side
        stores = [self.new_store(prefix=p, indexed_keys=None) for p in prefixes]
        try:
            for p, store in zip(prefixes, stores, strict=True):
                store.create_session(Session("s", now(), metadata={"id": "sx", "owner": p}))
                question = SessionEvent.for_message("s", Message.user("q"), event_id="ssx")
                answer = SessionEvent.for_message("s", Message.assistant("a"), event_id="a-ssx")
                store.append_events("s", [question, answer], 0)
                store.create_session(Session("t", now(), metadata={"id": "sx", "owner": p}))
            for p, store in zip(prefixes, stores, strict=True):
                assert [e.id for e in store.events("s")] == ["ssx", "a-ssx"]
                assert [s.id for s in store.find_by_metadata("id", "sx")] == ["s", "t"]
                assert [s.id for s in store.find_by_metadata("owner", p)] == ["s", "t"]
                assert sorted(s.id for s in store.list_sessions()) == ["s", "t"]
            # the documented pattern, `SCAN MATCH <prefix>:*`, finds each store's keys only
            found = [set(keys_of(s.client, p)) for p, s in zip(prefixes, stores, strict=True)]
            for i, keys in enumerate(found):
                assert keys, prefixes[i]
                for j in range(i):
                    assert not keys & found[j], (prefixes[i], prefixes[j])
            assert stores[0].delete_session("s")
            for store in stores[1:]:
                assert [e.id for e in store.events("s")] == ["ssx", "a-ssx"]
            for p, store in zip(prefixes, stores, strict=True):
                store.delete_session("s")
                store.delete_session("t")
                assert keys_of(store.client, p) == [], p
        finally:
            for p, store in zip(prefixes, stores, strict=True):
                purge(store.client, p)
                store.close()

    # -- damaged data -----------------------------------------------------------------------------

    def _record_key(self, store, sid: str) -> str:
        return store._keys.session(sid)[0]

    def test_a_damaged_record_names_session_and_seq(self, store):
        for sid in ("bad", "good"):
            store.create_session(Session(sid, now()))
            store.append_events(sid, [*turn(sid, 1), *turn(sid, 2)], 0)
        store.client.hset(self._record_key(store, "bad"), "3", b"\x00garbage")
        for read in (store.events, store.view):
            with pytest.raises(CorruptData, match=r"seq 3 .*'bad'"):
                read("bad")
        store.client.hset(self._record_key(store, "bad"), "3", b'["bad-u2","MESSAGE",1,0]\n{"v":')
        with pytest.raises(CorruptData, match=r"seq 3 .*'bad'"):
            store.events("bad")
        assert len(store.events("good")) == 4 and len(store.view("good")) == 4

    @pytest.mark.parametrize(
        ("field", "value"),
        [("c", b"yesterday"), ("c", str(2**63).encode()), ("x", b"1.5"), ("md", b"[1]")],
    )
    def test_a_damaged_session_record_is_corrupt_data(self, store, field, value):
        store.create_session(Session("a", now()))
        store.create_session(Session("b", now()))
        store.client.hset(self._record_key(store, "a"), field, value)
        with pytest.raises(CorruptData, match="session 'a'"):
            store.find_session("a")
        with pytest.raises(CorruptData, match="session 'a'"):
            store.list_sessions()
        assert store.find_session("b") is not None

    @pytest.mark.parametrize("micros", [2**63 - 1, -(2**63)])
    def test_a_damaged_event_timestamp_is_corrupt_data(self, store, micros):
        store.create_session(Session("s", now()))
        store.append_events("s", turn("s", 1), 0)
        record = f'["s-a1","MESSAGE",{micros},0]\n'.encode()
        body = store.client.hget(self._record_key(store, "s"), "2").partition(b"\n")[2]
        store.client.hset(self._record_key(store, "s"), "2", record + body)
        for read in (store.events, store.view):
            with pytest.raises(CorruptData, match=r"seq 2 .*'s'"):
                read("s")

    def test_the_view_never_reads_covered_history(self, store):
        store.create_session(Session("s", now()))
        system = SessionEvent.for_message("s", Message.system("sys"), event_id="sys")
        old = [e for n in range(50) for e in turn("s", n)]
        store.append_events("s", [system, *old], 0)
        keep = turn("s", 99)
        store.append_events("s", keep, 101)
        boundary = CompactionBoundary("b", ("sys",), (), tuple(e.id for e in keep), 100, 1, "t")
        store.append_events("s", [boundary.to_event("s"), *turn("s", 100)], 103)
        for seq in range(2, 102):  # damage every covered record
            store.client.hset(self._record_key(store, "s"), str(seq), b"garbage")
        view = store.view("s")
        assert [e.id for e in view] == ["sys", *(e.id for e in keep), "s-u100", "s-a100"]
        with pytest.raises(CorruptData):
            store.events("s")

    def test_a_boundary_naming_nothing_empties_the_view_alone_or_in_a_batch(self, store):
        for sid, alone in (("alone", True), ("batch", False)):
            store.create_session(Session(sid, now()))
            store.append_events(sid, turn(sid, 1), 0)
            empty = CompactionBoundary(f"{sid}-b", (), (), (), 2, 0, "t").to_event(sid)
            after = turn(sid, 2)
            if alone:  # one event: the script's short path
                store.append_events(sid, [empty], 2)
                assert store.view(sid) == []
                store.append_events(sid, after, 3)
            else:
                store.append_events(sid, [empty, *after], 2)
            assert [e.id for e in store.view(sid)] == [e.id for e in after]
            assert store.view(sid) == CompactionBoundary.project(store.events(sid))

    # -- scripts ----------------------------------------------------------------------------------

    def test_scripts_are_reloaded_after_a_script_flush(self, store):
        store.create_session(Session("s", now()))
        store.append_events("s", turn("s", 1), 0)
        store.client.script_flush()
        assert store.append_events("s", turn("s", 2), 2) == 4
        assert len(store.view("s")) == 4
        store.client.script_flush()
        assert store.delete_session("s") is True  # pipelined EVALSHA of the release script
        assert keys_of(store.client, self.prefix) == []

    # -- event ids across sessions ----------------------------------------------------------------

    def test_ids_of_a_deleted_session_are_free_again(self, store):
        for sid in ("a", "b"):
            store.create_session(Session(sid, now()))
        events = turn("a", 1)
        store.append_events("a", events, 0)
        moved = [SessionEvent.for_message("b", e.message, event_id=e.id) for e in events]
        with pytest.raises(InvalidInput):
            store.append_events("b", moved, 0)
        store.delete_session("a")
        assert store.append_events("b", moved, 0) == 2

    def test_a_claim_of_a_dead_incarnation_is_taken_over(self, store):
        store.create_session(Session("b", now()))
        store.client.set(store._keys.event("x1"), b"ghost\x00deadbeefdeadbeef")
        store.create_session(Session("ghost", now()))  # alive, but another incarnation
        store.client.set(store._keys.event("x2"), b"ghost\x00deadbeefdeadbeef")
        events = [
            SessionEvent.for_message("b", Message.user("hi"), event_id="x1"),
            SessionEvent.for_message("b", Message.user("yo"), event_id="x2"),
        ]
        assert store.append_events("b", events, 0) == 2
        owner = store.client.get(store._keys.event("x1"))
        assert owner.startswith(b"b\x00")

    def test_a_batch_met_by_many_dead_claims_lands(self, store):
        store.create_session(Session("b", now()))
        events = [
            SessionEvent.for_message("b", Message.user(f"{i}"), event_id=f"d{i}") for i in range(60)
        ]
        for e in events:
            store.client.set(store._keys.event(e.id), b"gone\x00" + b"%016d" % 7)
        assert store.append_events("b", events, 0) == 60

    def test_a_claim_of_a_live_session_is_respected(self, store):
        store.create_session(Session("a", now()))
        store.create_session(Session("b", now()))
        inc = store.client.hget(store._keys.session("a")[0], "inc")
        store.client.set(store._keys.event("x"), b"a\x00" + inc)  # claimed, not yet appended
        with pytest.raises(InvalidInput, match="another session"):
            store.append_events(
                "b", [SessionEvent.for_message("b", Message.user("hi"), event_id="x")], 0
            )
        assert store.version("b") == 0
        event = SessionEvent.for_message("a", Message.user("hi"), event_id="x")
        assert store.append_events("a", [event], 0) == 1

    # -- key expiry -------------------------------------------------------------------------------

    def test_ttl_maps_onto_key_expiry_and_save_session_refreshes_it(self, store):
        expires = now() + timedelta(hours=1)
        store.create_session(Session("s", now(), expires_at=expires, metadata={"owner": "o"}))
        store.append_events("s", turn("s", 1), 0)
        keys = store._keys.session("s")

        def expiry_ms() -> set[int]:
            return {store.client.pexpiretime(k) for k in keys if store.client.exists(k)}

        grace = int(timedelta(days=1).total_seconds() * 1000)
        want = int(expires.timestamp() * 1000) + grace
        assert {abs(t - want) < 5 for t in expiry_ms()} == {True}
        assert len(expiry_ms()) == 1 and store.client.exists(*keys) == 2  # no failed claims (:r)
        later = expires + timedelta(hours=5)
        store.save_session(Session("s", now(), expires_at=later))
        assert expiry_ms() == {int(later.timestamp() * 1000) + grace}
        store.save_session(Session("s", now()))
        assert expiry_ms() == {-1}

    def test_attachment_keys_carry_the_sessions_ttl_and_save_session_moves_them(self, store):
        expires = now() + timedelta(hours=1)
        store.create_session(Session("s", now(), expires_at=expires))
        store.append_events("s", [image("s", blob("one")), image("s", blob("two"))], 0)
        grace = int(timedelta(days=1).total_seconds() * 1000)
        session = store._keys.session("s")

        def expiry_ms(blobs: int = 2) -> dict[str, int]:  # the session, its attachments
            keys = [session[0], session[3], *attachment_keys(store.client, self.prefix, "s")]
            assert len(keys) == 2 + blobs and store.client.exists(*keys) == len(keys)
            return {k: store.client.pexpiretime(k) for k in keys}

        want = int(expires.timestamp() * 1000) + grace
        assert {abs(t - want) < 5 for t in expiry_ms().values()} == {True}
        assert len(set(expiry_ms().values())) == 1
        later = expires + timedelta(hours=5)
        store.save_session(Session("s", now(), expires_at=later))
        assert set(expiry_ms().values()) == {int(later.timestamp() * 1000) + grace}
        store.append_events("s", [image("s", blob("three"))], 2)  # a new key gets it too
        three = store._keys.attachment("s", ref_of(blob("three")))
        assert store.client.pexpiretime(three) == int(later.timestamp() * 1000) + grace
        assert three in expiry_ms(3)
        store.save_session(Session("s", now()))  # no expiry: no key expiry either
        assert set(expiry_ms(3).values()) == {-1}

    def test_many_attachments_in_one_batch_are_stored_expired_and_deleted(self):
        """1,500 byte strings in one append (past the script's 1,000-item chunks): stored,
        moved by save_session, deleted with the session."""
        limits = AttachmentLimits(threshold=1)
        with self.new_store(attachments=limits) as store:
            expires = now() + timedelta(hours=1)
            store.create_session(Session("s", now(), expires_at=expires))
            datas = [b"%d" % i for i in range(1500)]
            store.append_events("s", [image("s", d, f"e{i}") for i, d in enumerate(datas)], 0)
            keys = attachment_keys(store.client, self.prefix, "s")
            assert len(keys) == 1500
            assert store.read_attachment("s", ref_of(datas[1499])) == datas[1499]
            store.save_session(Session("s", now()))
            pipe = store.client.pipeline(transaction=False)
            for key in keys:
                pipe.pexpiretime(key)
            assert set(pipe.execute()) == {-1}
            assert store.delete_session("s")
            assert keys_of(store.client, self.prefix) == []

    def test_save_and_delete_scripts_write_nothing_without_the_attachment_keys(self, store):
        """Each script must be given every key it touches: called with other attachment keys
        than the session's, they change nothing and name the right ones."""
        store.create_session(Session("s", now(), expires_at=now() + timedelta(hours=1)))
        store.append_events("s", [image("s", blob("a")), image("s", blob("b"))], 0)
        keys = store._keys.session("s")
        hexes = sorted(ref_of(blob(x))[7:].encode() for x in "ab")
        right = [f"{keys[3]}:{h.decode()}" for h in hexes]
        inc = store.client.hget(keys[0], "inc")
        save = ["save", inc, inc, 0, "", "{}", "", ""]  # no expiry any more
        before = keys_of(store.client, self.prefix)
        for declared in ([], right[:1], [right[0], right[0]], [right[0], keys[3] + ":00"]):
            reply = store._run("delete", [*keys, *declared], ["", ""])
            assert reply[0] == b"attachments" and sorted(reply[1:]) == hexes
            reply = store._run("save", [*keys, *declared], save)
            assert reply[0] == b"attachments" and sorted(reply[1:]) == hexes
        assert keys_of(store.client, self.prefix) == before
        assert store.find_session("s").expires_at is not None
        assert store._run("delete", [*keys, *right], ["", ""])[0] == b"deleted"
        assert not [k for k in keys_of(store.client, self.prefix) if "{s}" in k]

    def test_a_text_only_append_sends_no_attachment_keys_or_arguments(self, store, monkeypatch):
        store.create_session(Session("s", now()))
        sent: list[tuple] = []
        plain = store._run_after

        def recording(commands, name, keys, args):
            if name == "append":
                sent.append((list(commands), list(keys), list(args)))
            return plain(commands, name, keys, args)

        monkeypatch.setattr(store, "_run_after", recording)
        store.append_events("s", turn("s", 1), 0)
        store.append_events("s", [image("s", b"GIF89a tiny")], 2)  # kept in the event
        store.append_events("s", [image("s", blob("x"))], 3)
        store.append_events("s", [image("s", blob("x"))], 4)  # held already
        text, small, media, again = sent
        ids = 0 if isinstance(store, RedisClusterStore) else 1  # id keys per event
        assert not text[0] and not small[0]  # nothing sent ahead of the script
        assert len(text[1]) == 2 + 2 * ids  # the session's two keys (and the two events' id keys)
        assert len(text[2]) == 6 + 2 * 4  # 6 arguments, then 4 per event
        assert len(small[1]) == 2 + ids and len(small[2]) == 6 + 4
        # and the attachment hash, the key of the bytes and the key they are sent to first
        assert len(media[1]) == 2 + ids + 3
        assert blob("x") not in media[2]  # the bytes are never a script argument
        pushed = [c for c in media[0] if c[0] == "RPUSH"]
        assert [c[1] for c in pushed] == [media[1][-1]]
        assert b"".join(bytes(chunk) for chunk in pushed[0][2:]) == blob("x")
        assert not again[0]  # the session holds them: not sent again
        assert store.read_attachment("s", ref_of(blob("x"))) == blob("x")

    def test_bytes_sent_ahead_of_a_refused_append_are_not_left_behind(self, store):
        store.create_session(Session("s", now()))
        store.append_events("s", turn("s", 1), 0)
        with pytest.raises(VersionConflict):
            store.append_events("s", [image("s", blob("late"))], 0)
        unheld = ImagePart("image/png", ref=ref_of(blob("nowhere")))
        refused = Message.user("see", ImagePart("image/png", data=blob("bad")), unheld)
        with pytest.raises(InvalidInput):  # the script refuses it, after the bytes were sent
            store.append_events("s", [SessionEvent.for_message("s", refused)], 2)
        store.append_events("s", [image("s", blob("kept"))], 2)
        store.append_events("s", [image("s", blob("kept"))], 3)  # held: deleted by the script
        keys = [k.decode() for k in store.client.scan_iter(match=f"{self.prefix}:*", count=1000)]
        assert not [k for k in keys if ":u:" in k], keys
        assert len([k for k in keys if ":a:" in k]) == 1

    def test_a_recreated_session_holds_none_of_its_old_attachments(self, store):
        data = blob("old")
        store.create_session(Session("s", now()))
        store.append_events("s", [image("s", data)], 0)
        assert store.delete_session("s")
        store.create_session(Session("s", now()))
        with pytest.raises(AttachmentNotFound):
            store.read_attachment("s", ref_of(data))
        named = Message.user("again?", ImagePart("image/png", ref=ref_of(data)))
        with pytest.raises(InvalidInput, match="holds no attachment"):
            store.append_events("s", [SessionEvent.for_message("s", named)], 0)
        assert keys_of(store.client, self.prefix) and not attachment_keys(store.client, self.prefix)

    @pytest.mark.parametrize("grace", [timedelta(milliseconds=300), 0.3], ids=["timedelta", "s"])
    def test_keys_expire_by_themselves_and_the_sweep_cleans_up(self, grace):
        with self.new_store(expiry_grace=grace) as store:
            store.create_session(Session("s", now(), expires_at=now(), metadata={"owner": "o"}))
            store.append_events("s", turn("s", 1), 0)
            store.append_events("s", [image("s", blob("gone"))], 2)
            store.create_session(Session("keep", now()))
            deadline = time.monotonic() + 5
            while store.find_session("s") is not None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert store.find_session("s") is None
            assert attachment_keys(store.client, self.prefix) == []  # expired with it
            assert [s.id for s in store.list_sessions()] == ["keep"]
            assert store.find_by_metadata("owner", "o") == []
            assert store.delete_expired(now()) == 0  # Redis deleted it already
            assert store.client.zcard(store._keys.expiry) == 0

    def test_delete_expired_removes_every_key_of_the_session(self, store):
        store.create_session(Session("old", now(), expires_at=now(), metadata={"owner": "o"}))
        store.append_events("old", turn("old", 1), 0)
        store.create_session(Session("new", now(), metadata={"owner": "p"}))
        before = keys_of(store.client, self.prefix)
        assert store.delete_expired(now()) == 1
        left = keys_of(store.client, self.prefix)
        assert not [k for k in left if "old" in unquote(k)]
        assert len(left) < len(before)
        with pytest.raises(SessionNotFound):
            store.events("old")
        store.append_events(
            "new", [SessionEvent.for_message("new", Message.user("q"), event_id="old-u1")], 0
        )

    def test_a_ttl_extended_during_the_sweep_is_kept(self):
        """The sweep picked the session from the expiry index; the extension lands before the
        sweep's delete script runs: the script sees the new expiry and keeps the session."""
        extender = self.new_store()
        t0 = now()

        class Racing(type(extender)):
            def _delete(self, session_id, cutoff, inc):
                if cutoff != "":
                    extender.save_session(
                        Session(session_id, t0, expires_at=t0 + timedelta(hours=2))
                    )
                return super()._delete(session_id, cutoff, inc)

        with self.new_store() as plain:
            plain.create_session(Session("a", t0, expires_at=t0 + timedelta(minutes=1)))
            plain.append_events("a", turn("a", 1), 0)
        racing = Racing(self.url, prefix=self.prefix)
        try:
            assert racing.delete_expired(t0 + timedelta(hours=1)) == 0
            found = racing.find_session("a")
            assert found is not None and found.expires_at == t0 + timedelta(hours=2)
            assert racing.version("a") == 2
            assert racing.delete_expired(t0 + timedelta(hours=3)) == 1
        finally:
            racing.close()
            extender.close()

    # -- metadata ---------------------------------------------------------------------------------

    def test_unindexed_metadata_keys_are_found_by_a_scan(self):
        with self.new_store(indexed_keys=("owner",)) as store:
            store.create_session(Session("a", now(), metadata={"owner": "x", "tier": 1}))
            store.create_session(Session("b", now(), metadata={"owner": "y", "tier": 2}))
            assert [s.id for s in store.find_by_metadata("tier", 2)] == ["b"]
            assert [s.id for s in store.find_by_metadata("owner", "x")] == ["a"]
            assert not [k for k in keys_of(store.client, self.prefix) if ":m:tier:" in k]
            long_value = "v" * 1000  # too long for an index: found by a scan
            store.save_session(Session("b", now(), metadata={"owner": long_value}))
            assert [s.id for s in store.find_by_metadata("owner", long_value)] == ["b"]
            assert store.find_by_metadata("owner", "y") == []  # the stale entry is filtered

    def test_the_clock_stamps_events_and_an_empty_batch_changes_nothing(self):
        clock = FakeClock(datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC))
        with self.new_store(clock=clock) as store:
            store.create_session(Session("a", now()))
            assert store.append_events("a", [], 0) == 0
            stored = store.append_event(SessionEvent.for_message("a", Message.user("x")))
            assert stored.timestamp == clock.now == store.events("a")[0].timestamp
            with pytest.raises(SessionNotFound):
                store.append_events("ghost", [], 0)

    # -- connections ------------------------------------------------------------------------------

    def test_a_closed_store_refuses_work(self):
        store = self.new_store()
        store.close()
        store.close()
        with pytest.raises(StoreError, match="closed"):
            store.find_session("a")


class AttachmentHooks:
    """The contract's attachment hooks for every Redis store (blocking or asyncio, one server
    or a cluster): they look at the keys through a blocking store of their own, `admin()`.

    On Redis the bytes are kept once per session (in the session's slot, docs/redis.md), so
    the count is of byte strings, one per session holding them."""

    attachments_shared_across_sessions = False
    url: str
    prefix: str

    def admin(self) -> RedisStore:
        return RedisStore(self.url, prefix=self.prefix)

    def attachment_keys(self, store, ref: str = "*") -> list[bytes]:
        hex_ = ref if ref == "*" else ref.removeprefix("sha256:")
        return list(store.client.scan_iter(match=f"{self.prefix}:{{*}}:a:{hex_}", count=1000))

    def count_attachments(self, store):
        with self.admin() as admin:
            return len(self.attachment_keys(admin))

    def damage_attachment(self, store, ref):
        with self.admin() as admin:
            keys = self.attachment_keys(admin, ref)
            assert keys, ref
            for key in keys:  # a list of chunks: flip a byte of the middle one
                middle = admin.client.llen(key) // 2
                chunk = bytearray(admin.client.lindex(key, middle))
                chunk[len(chunk) // 2] ^= 1
                admin.client.lset(key, middle, bytes(chunk))


class TestRedisStore(AttachmentHooks, StoreContract):
    property_examples = 50  # the validation property test, on a server

    @pytest.fixture(autouse=True)
    def _redis(self, redis_url):
        self.url, self.prefix = redis_url, f"tltest-{uuid.uuid4().hex[:12]}"
        yield
        with RedisStore(redis_url, prefix=self.prefix) as store:
            purge(store.client, self.prefix)

    def make_store(self, tmp_path):
        return RedisStore(self.url, prefix=self.prefix)

    def open_again(self, store, tmp_path):
        return RedisStore(self.url, prefix=self.prefix)


class TestRedisChecks(RedisChecks):
    @pytest.fixture(autouse=True)
    def _redis(self, redis_url):
        self.url, self.prefix = redis_url, f"tltest-{uuid.uuid4().hex[:12]}"
        yield
        with RedisStore(redis_url, prefix=self.prefix) as store:
            purge(store.client, self.prefix)

    def new_store(self, **kw):
        return RedisStore(self.url, **{"prefix": self.prefix, **kw})


class TestRedisClients:
    """Owning and borrowing clients, bad URLs and clients, servers that are gone."""

    def test_a_borrowed_client_stays_open(self, redis_url):
        client = redis.Redis.from_url(redis_url)
        try:
            prefix = f"tltest-{uuid.uuid4().hex[:12]}"
            with RedisStore(client, prefix=prefix) as store:
                store.create_session(Session("a", now()))
            assert client.ping()
            purge(client, prefix)
        finally:
            client.close()

    def test_a_first_connection_names_the_library_without_reading_its_metadata(
        self, redis_url, monkeypatch
    ):
        """redis-py looks its version up in the installed distributions (about 10 ms) unless
        told it: the store tells it, and a server that keeps it still learns it."""
        looked_up = version_lookups(monkeypatch)
        prefix = f"tltest-{uuid.uuid4().hex[:12]}"
        with RedisStore(redis_url, prefix=prefix) as store:
            store.create_session(Session("a", now()))
            info = store._client.client_info()
        assert "redis" not in looked_up
        if "lib-name" in info:  # Redis 7.2 and later keep what CLIENT SETINFO said
            assert info["lib-name"] == "redis-py" and info["lib-ver"] == redis.__version__
        client = redis.Redis.from_url(redis_url)
        try:
            purge(client, prefix)
        finally:
            client.close()

    def test_bad_arguments_are_refused(self, redis_url):
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        try:
            with pytest.raises(InvalidInput, match="decode_responses"):
                RedisStore(client)
        finally:
            client.close()
        for prefix in ("", "a{b}", "a b", "a:b", "a*", "a?", "a[b]", "a\\b", "a\x01", "\ud800", 7):
            with pytest.raises(InvalidInput, match="prefix"):
                RedisStore(redis_url, prefix=prefix)
        with pytest.raises(InvalidInput, match="RedisClusterStore"):
            RedisStore("redis+cluster://127.0.0.1:7000")
        with pytest.raises(InvalidInput):
            RedisStore("http://127.0.0.1:6379")
        with pytest.raises(InvalidInput):
            RedisStore(42)

    @pytest.mark.parametrize(
        "bad", [0, -1, float("nan"), float("inf"), "1d", True, timedelta(0), timedelta(days=40_000)]
    )
    def test_durations_that_are_not_durations_are_refused(self, redis_url, bad):
        # Issue 7 item 10: seconds or a timedelta, positive and finite, as everywhere.
        with pytest.raises(InvalidInput, match="expiry_grace"):
            RedisStore(redis_url, expiry_grace=bad)
        with pytest.raises(InvalidInput, match="timeout"):
            RedisStore(redis_url, timeout=bad)

    def test_no_server_raises_store_error(self):
        port = free_ports(1, bus=False)[0]
        with RedisStore(f"redis://127.0.0.1:{port}/0", timeout=1) as store:
            # nothing was ever sent: neither a write nor a read may have landed anything
            for call in (lambda: store.create_session(Session("a", now())),
                         lambda: store.view("a")):  # fmt: skip
                with pytest.raises(StoreError, match="cannot reach") as raised:
                    call()
                assert "may or may not" not in str(raised.value)


@pytest.fixture(scope="module")
def private_redis():
    """A standalone server of our own: these tests pause and kill clients."""
    with RedisServer.start() as server:
        yield server


class TestLostConnections:
    def _batch(self, sid: str, n: int, tag: str) -> list[SessionEvent]:
        return [
            SessionEvent.for_message(
                sid, Message.user(f"{tag} {i} " + "x" * 200), event_id=f"{tag}-{i}"
            )
            for i in range(n)
        ]

    def test_a_connection_killed_mid_write_raises_and_a_retry_appends_once(self, private_redis):
        admin = redis.Redis.from_url(private_redis.url)
        store = RedisStore(private_redis.url, prefix="kill")
        try:
            store.create_session(Session("s", now()))
            batch = self._batch("s", 500, "k")
            errors: list[BaseException] = []

            def write() -> None:
                try:
                    store.append_events("s", batch, 0)
                except BaseException as exc:
                    errors.append(exc)

            admin.client_pause(5000, all=False)  # writes wait: the append is in flight
            try:
                writer = threading.Thread(target=write)
                writer.start()
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    blocked = [
                        c
                        for c in admin.client_list()
                        if c["cmd"] == "evalsha" and "b" in c["flags"]
                    ]
                    if blocked:
                        break
                    time.sleep(0.01)
                assert blocked, "the append never reached the server"
                admin.client_kill_filter(_id=blocked[0]["id"])
                writer.join(5)
            finally:
                admin.client_unpause()
            assert len(errors) == 1 and isinstance(errors[0], StoreError), errors
            assert "lost the connection" in str(errors[0])
            assert "may or may not have landed" in str(errors[0])  # the write was sent
            assert store.version("s") == 0  # the killed command never ran
            assert store.append_events("s", batch, 0) == 500
            assert store.append_events("s", batch, 0) == 500  # a second retry: no-op
            assert [e.id for e in store.events("s")] == [e.id for e in batch]
        finally:
            store.close()
            admin.close()

    def test_a_read_killed_mid_flight_does_not_say_a_write_may_have_landed(self, private_redis):
        admin = redis.Redis.from_url(private_redis.url)
        store = RedisStore(private_redis.url, prefix="kill-read")
        try:
            store.create_session(Session("s", now()))
            store.append_events("s", self._batch("s", 10, "r"), 0)
            errors: list[BaseException] = []

            def read() -> None:
                try:
                    store.events("s")
                except BaseException as exc:
                    errors.append(exc)

            admin.client_pause(5000, all=False)  # scripts wait, reads among them
            try:
                reader = threading.Thread(target=read)
                reader.start()
                deadline = time.monotonic() + 5
                blocked: list[dict] = []
                while not blocked and time.monotonic() < deadline:
                    time.sleep(0.01)
                    blocked = [
                        c
                        for c in admin.client_list()
                        if c["cmd"] == "evalsha" and "b" in c["flags"]
                    ]
                assert blocked, "the read never reached the server"
                admin.client_kill_filter(_id=blocked[0]["id"])
                reader.join(5)
            finally:
                admin.client_unpause()
            assert len(errors) == 1 and isinstance(errors[0], StoreError), errors
            assert "lost the connection" in str(errors[0]) and "during a read" in str(errors[0])
            assert "may or may not" not in str(errors[0])
        finally:
            store.close()
            admin.close()

    def test_writes_cut_at_random_points_are_whole_or_absent(self, private_redis):
        """A client whose socket times out at once: the append may land or not; a retry of
        the same ids completes it exactly once."""
        with RedisStore(private_redis.url, prefix="cut") as store:
            store.create_session(Session("s", now()))
        landed = 0
        for round_ in range(10):
            batch = self._batch("s", 1000, f"r{round_}")
            with RedisStore(private_redis.url, prefix="cut") as store:
                version = store.version("s")
            hasty = RedisStore(private_redis.url, prefix="cut", timeout=0.002)
            with hasty, contextlib.suppress(StoreError):
                hasty.append_events("s", batch, version)
            time.sleep(0.05)
            with RedisStore(private_redis.url, prefix="cut") as store:
                after = store.version("s")
                assert after in (version, version + 1000)
                landed += after != version
                assert store.append_events("s", batch, version) == version + 1000
        with RedisStore(private_redis.url, prefix="cut") as store:
            log = store.events("s")
        print(f"{landed} of 10 cut appends had landed")
        assert len(log) == 10_000 and len({e.id for e in log}) == 10_000
        assert [e.seq for e in log] == list(range(1, 10_001))

    def test_a_stopped_server_raises_store_error(self):
        with RedisServer.start() as server, RedisStore(server.url, prefix="gone") as store:
            store.create_session(Session("s", now()))
            server._servers.stop()
            # the pooled connection is found dead and reopening it fails: nothing was sent
            with pytest.raises(StoreError, match=r"cannot reach|lost the connection"):
                store.append_events("s", turn("s", 1), 0)
