"""Cases that killed mutants the rest of the contract let live.

A mutation pass (deliberate bugs put into the stores one at a time) left these behaviours
unchecked; each case below fails against the bug named in its docstring.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnlog.errors import VersionConflict
from turnlog.events import Message, SessionEvent
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import AUDIT, ContractBase, msg, session_at, turn

__all__ = ["RegressionContract"]

_FALSY: list[Any] = [0, False, "", [], {}, 0.0]
_FALSY_METADATA: dict[str, Any] = {
    "zero": 0,
    "no": False,
    "empty": "",
    "none": None,
    "list": [],
    "dict": {},
    "float": 0.0,
}


class RegressionContract(ContractBase):
    """Part of `StoreContract`; see the module docstring."""

    # -- versions ---------------------------------------------------------------------------

    @pytest.mark.parametrize("size", [1, 3])
    @pytest.mark.parametrize("stored", [0, 2])
    def test_expected_version_ahead_of_the_log_conflicts(
        self, store: SessionStore, sid: str, size: int, stored: int
    ) -> None:
        """A version ahead of the log is a conflict, never a gap in the seqs (one event or many)."""
        if stored:
            store.append_events(sid, turn(sid, 0), 0)
        before = store.events(sid)
        batch = [msg(sid, Message.user(f"ahead {i}")) for i in range(size)]
        for ahead in (stored + 1, stored + 5):
            with pytest.raises(VersionConflict) as caught:
                store.append_events(sid, batch, ahead)
            assert (caught.value.expected, caught.value.actual) == (ahead, stored)
        assert store.version(sid) == stored
        assert store.events(sid) == before
        assert store.append_events(sid, batch, stored) == stored + size
        assert [e.seq for e in store.events(sid)] == list(range(1, stored + size + 1))

    @pytest.mark.parametrize("where", ["first", "middle", "last"])
    def test_batch_mixing_stored_and_new_ids_appends_only_the_new(
        self, store: SessionStore, sid: str, where: str
    ) -> None:
        """At the right version, ids already stored are skipped and the rest land right after."""
        old = turn(sid, 1)
        assert store.append_events(sid, old, 0) == 2
        new = [msg(sid, Message.user("new 1")), msg(sid, Message.assistant("new 2"))]
        batch = {
            "first": [old[1], *new],
            "middle": [new[0], old[1], new[1]],
            "last": [*new, old[0]],
        }[where]
        assert store.append_events(sid, batch, 2) == 4
        assert store.version(sid) == 4
        log = store.events(sid)
        assert [e.id for e in log] == [old[0].id, old[1].id, new[0].id, new[1].id]
        assert [e.seq for e in log] == [1, 2, 3, 4]
        assert store.append_events(sid, batch, 4) == 4  # all stored now: a no-op

    def test_batch_mixing_stored_and_new_ids_at_a_stale_version_conflicts(
        self, store: SessionStore, sid: str
    ) -> None:
        """Skipping the stored ids does not excuse the new ones from the version check."""
        old = turn(sid, 1)
        store.append_events(sid, old, 0)
        with pytest.raises(VersionConflict) as caught:
            store.append_events(sid, [old[0], msg(sid, Message.user("new"))], 1)
        assert caught.value.actual == 2
        assert [e.id for e in store.events(sid)] == [e.id for e in old]

    # -- falsy values -----------------------------------------------------------------------

    @pytest.mark.parametrize("payload", _FALSY, ids=repr)
    def test_falsy_payload_round_trips(self, store: SessionStore, sid: str, payload: Any) -> None:
        """0, False, "", [] and {} come back as themselves (with their type), not as None."""
        event = SessionEvent.for_payload(sid, AUDIT, payload)
        store.append_events(sid, [event], 0)
        back = store.events(sid)[0]
        assert back.payload == payload
        assert type(back.payload) is type(payload)
        assert back == store.append_event(event)  # a retry returns the stored event, as stored

    def test_falsy_metadata_round_trips(self, store: SessionStore) -> None:
        """Falsy metadata values of events and sessions come back with their values and types."""
        session = session_at("falsy", metadata=_FALSY_METADATA)
        store.create_session(session)
        found = store.find_session("falsy")
        assert found is not None
        assert found.metadata == _FALSY_METADATA
        assert {k: type(v) for k, v in found.metadata.items()} == {
            k: type(v) for k, v in _FALSY_METADATA.items()
        }
        event = SessionEvent.for_message("falsy", Message.user("hi"), metadata=_FALSY_METADATA)
        audit = SessionEvent.for_payload("falsy", AUDIT, 0, metadata=_FALSY_METADATA)
        store.append_events("falsy", [event, audit], 0)
        for back in store.events("falsy"):
            assert back.metadata == _FALSY_METADATA
            assert {k: type(v) for k, v in back.metadata.items()} == {
                k: type(v) for k, v in _FALSY_METADATA.items()
            }
        assert store.view("falsy")[0].metadata == _FALSY_METADATA
        assert [s.id for s in store.find_by_metadata("zero", 0)] == ["falsy"]
        assert [s.id for s in store.find_by_metadata("no", False)] == ["falsy"]
        assert [s.id for s in store.find_by_metadata("empty", "")] == ["falsy"]
        assert store.find_by_metadata("zero", False) == []
        assert store.find_by_metadata("no", 0) == []
