"""The recall tools' calls for the framework adapters: one call of `search_history` or
`read_events` answered from a turnlog session through the service, blocking and async.

Private: `openai_agents`, `langchain` and `pydantic_ai` wrap it in their framework's tool type.
It goes through `service.search_history` and `service.read_events` (not the store), so what the
service does for a search (a hybrid, later) applies to the adapters too, and it gives the very
strings the turn runner gives (`turnlog.recall_tools`). It imports no framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from turnlog.errors import InvalidInput, SessionNotFound
from turnlog.events import SessionEvent
from turnlog.history import MAX_HITS, HistoryHit, HistoryQuery
from turnlog.recall_tools import (
    RECALL_HITS,
    SEARCH_HISTORY,
    events_result,
    hits_result,
    read_arguments,
    search_arguments,
)
from turnlog.service import SessionService
from turnlog.service_async import AsyncSessionService
from turnlog.stores.base import EventFilter
from turnlog.tokens import TokenCounter, default_counter

__all__ = ["Answer", "answer", "answer_async"]

_USERS: Final = EventFilter(roles=["user"], exclude_synthetic=True)
_LAST_USER: Final = EventFilter(roles=["user"], exclude_synthetic=True, last_n=1)


class Answer(NamedTuple):
    """A recall call's tool result: its text, and whether it is an error the model should
    correct (the runner's `ToolResult.is_error`)."""

    text: str
    is_error: bool = False


def _counter(service: SessionService | AsyncSessionService) -> TokenCounter:
    """The service's token counter (the runner caps results by it too)."""
    return service._counter or default_counter()


def _kept(hits: Sequence[HistoryHit], turn: set[str]) -> str:
    return hits_result([h for h in hits if h.event_id not in turn][:RECALL_HITS])


def _turn(events: Sequence[SessionEvent], user: Sequence[SessionEvent]) -> set[str]:
    """The ids of the turn in progress: the log's events from its latest user message on."""
    if not user:
        return set()
    start = user[-1].seq or 0
    return {e.id for e in events if (e.seq or 0) >= start}


def _search(service: SessionService, session_id: str, query: HistoryQuery) -> list[HistoryHit]:
    return service.search_history(
        session_id, query.text, k=query.k, before=query.before, after=query.after
    )


async def _search_async(
    service: AsyncSessionService, session_id: str, query: HistoryQuery
) -> list[HistoryHit]:
    return await service.search_history(
        session_id, query.text, k=query.k, before=query.before, after=query.after
    )


def _turn_start(user: Sequence[SessionEvent]) -> int:
    return max((user[-1].seq or 1) - 1, 0) if user else 0


async def answer_async(
    service: AsyncSessionService,
    session_id: str,
    name: str,
    arguments: str,
    *,
    current_turn: bool,
) -> Answer:
    """Answer one recall call (`name` is `search_history` or `read_events`, `arguments` its
    JSON text) from the session's whole log.

    Args:
        current_turn: the log holds the turn in progress already (the adapter stores the
            question before the model answers it): a search leaves it out, as the runner does,
            since the model has it in view and its words would crowd out older hits.

    Returns:
        The result text; arguments the model got wrong give an error `Answer` saying what to
        correct, never an exception. A session not created yet has nothing to find.
    """
    try:
        if name == SEARCH_HISTORY:
            turn: set[str] = set()
            try:
                if current_turn:
                    user = await service.events(session_id, _LAST_USER)
                    tail = await service.events_after(session_id, _turn_start(user), MAX_HITS)
                    turn = _turn(tail, user)
                query = search_arguments(arguments, skipped=len(turn))
                hits = await _search_async(service, session_id, query)
            except SessionNotFound:
                search_arguments(arguments)  # bad arguments are still an error
                hits = []
            return Answer(_kept(hits, turn))
        ids = read_arguments(arguments)
        try:
            found = await service.read_events(session_id, ids)
            users = await service.events(session_id, _USERS) if found else []
        except SessionNotFound:
            found, users = [], []
    except InvalidInput as exc:
        return Answer(str(exc), is_error=True)
    seqs = [e.seq or 0 for e in users]
    return Answer(events_result(ids, found, seqs, _counter(service)))


def answer(
    service: SessionService,
    session_id: str,
    name: str,
    arguments: str,
    *,
    current_turn: bool,
) -> Answer:
    """`answer_async` over a blocking `SessionService`."""
    try:
        if name == SEARCH_HISTORY:
            turn: set[str] = set()
            try:
                if current_turn:
                    user = service.events(session_id, _LAST_USER)
                    tail = service.events_after(session_id, _turn_start(user), MAX_HITS)
                    turn = _turn(tail, user)
                query = search_arguments(arguments, skipped=len(turn))
                hits = _search(service, session_id, query)
            except SessionNotFound:
                search_arguments(arguments)
                hits = []
            return Answer(_kept(hits, turn))
        ids = read_arguments(arguments)
        try:
            found = service.read_events(session_id, ids)
            users = service.events(session_id, _USERS) if found else []
        except SessionNotFound:
            found, users = [], []
    except InvalidInput as exc:
        return Answer(str(exc), is_error=True)
    seqs = [e.seq or 0 for e in users]
    return Answer(events_result(ids, found, seqs, _counter(service)))
