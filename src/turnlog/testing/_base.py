"""What every part of the store contract shares: the store fixtures and the event builders.

The contract is split by topic (`contract.py` and the `contract_*.py` modules beside it); each
topic is a class deriving from `ContractBase`, and `StoreContract` derives from all of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from turnlog.events import EventType, Message, Session, SessionEvent
from turnlog.stores.protocol import SessionStore

__all__ = ["AUDIT", "T0", "ContractBase", "msg", "session_at", "turn"]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
AUDIT = EventType.of("ACME.AUDIT")


def session_at(session_id: str, **kw: Any) -> Session:
    """A session created at `T0` (unless `created_at` is given)."""
    return Session(id=session_id, created_at=kw.pop("created_at", T0), **kw)


def msg(session_id: str, message: Message, event_id: str | None = None) -> SessionEvent:
    """A message event of `session_id`."""
    return SessionEvent.for_message(session_id, message, event_id=event_id)


def turn(session_id: str, n: int) -> list[SessionEvent]:
    """Turn `n`: a user question and the assistant's answer."""
    return [
        msg(session_id, Message.user(f"question {n}")),
        msg(session_id, Message.assistant(f"answer {n}")),
    ]


class ContractBase:
    """The fixtures of the contract. Subclasses implement `make_store`."""

    def make_store(self, tmp_path: Path) -> SessionStore:
        """A new, empty store for one test."""
        raise NotImplementedError

    def open_again(self, store: SessionStore, tmp_path: Path) -> SessionStore:
        """A second handle on the same data; the same object by default."""
        return store

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SessionStore]:
        store = self.make_store(tmp_path)
        try:
            yield store
        finally:
            store.close()

    @pytest.fixture
    def sid(self, store: SessionStore) -> str:
        store.create_session(session_at("s1"))
        return "s1"
