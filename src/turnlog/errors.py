"""The errors turnlog raises. Every one of them is a `TurnlogError`.

Each message says what happened and what to do about it. Errors caused by the caller's input are
`InvalidInput` (also a `ValueError`); errors about state the caller expected to be different are
`SessionNotFound`, `SessionAlreadyExists` and `VersionConflict`; errors about the store's data or
connection are `StoreError` and its subclass `CorruptData`; errors from a chat model's provider
(`turnlog.models`) are `ModelError`.
"""

from __future__ import annotations

__all__ = [
    "AttachmentNotFound",
    "CorruptData",
    "InvalidInput",
    "ModelError",
    "SessionAlreadyExists",
    "SessionNotFound",
    "StoreError",
    "ToolRoundsExceeded",
    "TurnlogError",
    "VersionConflict",
]


class TurnlogError(Exception):
    """The root of every error turnlog raises."""


class InvalidInput(TurnlogError, ValueError):
    """The caller passed something turnlog cannot accept. Nothing was written."""


class SessionNotFound(TurnlogError, KeyError):
    """No session has this id. Create it first (`SessionService.create` or `get_or_create`)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(session_id)

    def __str__(self) -> str:
        return (
            f"session {self.session_id!r} does not exist: create it first "
            "(SessionService.create or get_or_create), or check the id"
        )


class AttachmentNotFound(TurnlogError, KeyError):
    """The session holds no attachment with this reference: no event of it stored those bytes
    (a session reads only the attachments of its own events)."""

    def __init__(self, session_id: str, ref: str) -> None:
        self.session_id = session_id
        self.ref = ref
        super().__init__(session_id, ref)

    def __str__(self) -> str:
        return (
            f"session {self.session_id!r} holds no attachment {self.ref}: read the ref from a "
            "part of this session's events"
        )


class SessionAlreadyExists(TurnlogError):
    """A session with this id exists already. Use `find` or `get_or_create` instead."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} already exists: use find() or get_or_create() to reuse it, "
            "or pick another id"
        )


class VersionConflict(TurnlogError):
    """Another writer appended to the session first. Nothing of this write was stored.

    Re-read the session (its `version` and its view), decide again, and retry with the new
    version.

    Attributes:
        session_id: the session written to.
        expected: the version the caller expected the log to have.
        actual: the version the log had.
    """

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session_id!r} is at version {actual}, not the expected {expected}: "
            "another writer appended first and nothing was written; re-read the session and retry"
        )


class StoreError(TurnlogError):
    """The store cannot do what was asked: an unreadable database, a lost connection, ..."""


class CorruptData(StoreError):
    """Stored data cannot be read back: a damaged row, or a file that is not a turnlog database."""


class ModelError(TurnlogError):
    """A chat model's provider refused or failed a call. Nothing was appended to any log.

    Every provider failure an adapter of `turnlog.models` meets becomes this one error: a bad
    key (401/403), an unknown model (404), a rate limit the client's own retries did not outlast
    (429), a server error (5xx), a timeout or lost connection (`status` None), or a reply the
    adapter cannot read (`status` is the HTTP status, 200 for a malformed success). The message
    says what to do; the provider's exception is the `__cause__`.

    Attributes:
        provider: "openai" or "anthropic" (the wire format spoken).
        status: the HTTP status of the failed reply, or None when no reply came.
    """

    def __init__(self, provider: str, status: int | None, message: str) -> None:
        self.provider = provider
        self.status = status
        super().__init__(message)


class ToolRoundsExceeded(TurnlogError):
    """The model was still calling tools when a turn reached its `max_tool_rounds`.

    The runner answered the last calls with error results ("not run") and stopped: the log
    keeps the view rules, and the next `send` starts a new turn. Raise `max_tool_rounds` when
    the tasks really need more steps, or look at the session's log for a model stuck in a loop.

    Attributes:
        session_id: the session.
        max_tool_rounds: the limit that was reached.
    """

    def __init__(self, session_id: str, max_tool_rounds: int) -> None:
        self.session_id = session_id
        self.max_tool_rounds = max_tool_rounds
        super().__init__(
            f"session {session_id!r}: the model was still calling tools after "
            f"{max_tool_rounds} rounds; its last calls were answered as not run and the turn "
            "stopped (raise max_tool_rounds if the task needs more steps)"
        )
