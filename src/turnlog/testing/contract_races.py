"""Deletes racing appends: no event outlives its session (issue 7, item 1).

An append that races `delete_session` either lands before the delete (and is deleted with the
session) or raises `SessionNotFound`; a session created again with the same id starts empty at
version 0, whatever happened to the one before it.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from turnlog.errors import SessionNotFound, VersionConflict
from turnlog.events import Message
from turnlog.stores.protocol import SessionStore
from turnlog.testing._base import ContractBase, msg, session_at, turn

__all__ = ["RaceContract"]

_ROUNDS = 40
_SECONDS = 6.0


class _Appender(threading.Thread):
    """Appends to one session in a loop until the session is gone or `stop` is set.

    `checked` appends one event at a time with an expected version (re-read after a
    `VersionConflict`); otherwise `append_event` appends at the end. Every append that returned
    is in `landed`; the error that ended the loop (if any) is in `ended`.
    """

    def __init__(
        self,
        handle: SessionStore,
        session_id: str,
        tag: str,
        version: int,
        *,
        checked: bool,
        start: threading.Barrier,
        stop: threading.Event,
    ) -> None:
        super().__init__(daemon=True)
        self.handle, self.session_id, self.tag = handle, session_id, tag
        self.version, self.checked = version, checked
        self.start_line, self.stop = start, stop
        self.landed: list[str] = []
        self.ended: BaseException | None = None
        self.n = 0

    def append_once(self) -> None:
        """One append; raises what the store raises."""
        self.n += 1
        event = msg(self.session_id, Message.user(self.tag), event_id=f"{self.tag}-{self.n}")
        if self.checked:
            self.version = self.handle.append_events(self.session_id, [event], self.version)
        else:
            self.handle.append_event(event)
        self.landed.append(event.id)

    def run(self) -> None:
        self.start_line.wait()
        try:
            while not self.stop.is_set():
                try:
                    self.append_once()
                except VersionConflict as exc:
                    self.version = exc.actual
        except SessionNotFound:
            pass
        except BaseException as exc:  # pragma: no cover - reported by the test
            self.ended = exc


class RaceContract(ContractBase):
    """Part of `StoreContract`; see the module docstring."""

    def _assert_gone_then_fresh(self, store: SessionStore, session_id: str) -> None:
        """The session and its log are gone; created again, it is empty at version 0."""
        assert store.find_session(session_id) is None
        with pytest.raises(SessionNotFound):
            store.version(session_id)
        with pytest.raises(SessionNotFound):
            store.events(session_id)
        store.create_session(session_at(session_id))
        assert store.version(session_id) == 0, "events of the deleted session came back"
        assert store.events(session_id) == []
        assert store.view(session_id) == []

    def test_deletes_racing_appends_leave_no_event_behind(
        self, store: SessionStore, tmp_path: Path
    ) -> None:
        other = self.open_again(store, tmp_path)
        rng = random.Random(7)
        sid = "raced"
        store.create_session(session_at(sid))
        deadline = time.monotonic() + _SECONDS
        try:
            for r in range(_ROUNDS):
                if time.monotonic() > deadline and r >= 3:
                    break
                # Half the rounds start at version 0 (the session row is the only guard),
                # half with a turn in the log (the version check finds seq 2).
                start = 0
                if r % 2:
                    start = store.append_events(sid, turn(sid, r), 0)
                go, stop = threading.Barrier(3), threading.Event()
                appenders = [
                    _Appender(other, sid, f"r{r}c", start, checked=True, start=go, stop=stop),
                    _Appender(store, sid, f"r{r}e", start, checked=False, start=go, stop=stop),
                ]
                for a in appenders:
                    a.start()
                go.wait()
                time.sleep(rng.uniform(0, 0.004))
                assert store.delete_session(sid) is True
                stop.set()
                for a in appenders:
                    a.join(30)
                    assert not a.is_alive(), "an appender hung"
                    assert a.ended is None, f"round {r}: {a.ended!r}"
                    # The delete has returned: any append now finds no session.
                    with pytest.raises(SessionNotFound):
                        a.append_once()
                # Whatever landed, landed before the delete, and went with it.
                self._assert_gone_then_fresh(store, sid)
        finally:
            if other is not store:
                other.close()

    def test_an_append_at_a_version_read_before_a_delete_finds_no_session(
        self, store: SessionStore, sid: str
    ) -> None:
        version = store.append_events(sid, turn(sid, 1), 0)
        assert store.delete_session(sid) is True
        late = msg(sid, Message.user("late"), event_id="late")
        with pytest.raises(SessionNotFound):
            store.append_events(sid, [late], version)
        with pytest.raises(SessionNotFound):
            store.append_events(sid, [late, msg(sid, Message.user("later"))], version)
        self._assert_gone_then_fresh(store, sid)

    def test_an_append_at_version_zero_after_a_delete_finds_no_session(
        self, store: SessionStore, sid: str
    ) -> None:
        assert store.delete_session(sid) is True
        with pytest.raises(SessionNotFound):
            store.append_events(sid, [msg(sid, Message.user("late"))], 0)
        self._assert_gone_then_fresh(store, sid)

    def test_append_event_after_a_delete_finds_no_session(
        self, store: SessionStore, sid: str
    ) -> None:
        store.append_events(sid, turn(sid, 1), 0)
        assert store.delete_session(sid) is True
        with pytest.raises(SessionNotFound):
            store.append_event(msg(sid, Message.user("late"), event_id="late"))
        self._assert_gone_then_fresh(store, sid)
