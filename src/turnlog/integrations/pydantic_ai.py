"""turnlog as the memory of a pydantic-ai agent (`pip install 'turnlog[pydantic-ai]'`).

Three ways in, from the least to the most manual:

- `TurnlogHistory`, a capability: `Agent(model, capabilities=[TurnlogHistory(service, "s1")])`.
  Before every model request it stores the messages the session does not hold yet, compacts the
  session when the trigger fires, and hands the model the session's view; after the run it stores
  the run's last messages.
- `history_processor(service, "s1")`, the same work as a function for pydantic-ai's own
  `ProcessHistory` capability (it cannot see a run's last response: save that with `save_history`).
- `load_history` / `save_history` (and their `_async` forms) around `agent.run`:
  `message_history=load_history(service, "s1")`, then `save_history(service, "s1",
  result.new_messages())`.

Every message is stored once (its event ids derive from its content, so saving it again is a
no-op), as turnlog turns a model reads (system prompt, user prompt, tool results, the assistant's
reply and tool calls) with the message's exact serialized form beside them: the view gives back
the messages that were stored, and a tool call is never separated from its return. A user
prompt's images, documents and audio (`BinaryContent`, `ImageUrl`, `DocumentUrl`, `AudioUrl`)
and a response's `ThinkingPart`s are stored as turnlog content parts (inline bytes once, in the
part), so they are counted, compacted and summarized.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext, Tool
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from turnlog.compaction import CompactionStrategy, CompactionTrigger
from turnlog.compaction.base import warn_if_refires
from turnlog.errors import InvalidInput, VersionConflict
from turnlog.events import SessionEvent
from turnlog.integrations._pydantic_ai_convert import (
    dump,
    events_for,
    is_synthetic,
    mark,
    message_key,
    stored_keys,
    to_model_messages,
)
from turnlog.integrations._recall import Answer, answer, answer_async
from turnlog.recall_tools import recall_tool_references
from turnlog.service import SessionService
from turnlog.service_async import AsyncSessionService

__all__ = [
    "TurnlogHistory",
    "history_processor",
    "load_history",
    "load_history_async",
    "recall_toolset",
    "save_history",
    "save_history_async",
]

_ATTEMPTS = 8
"""How often an append is tried again after another writer appended first."""


@dataclass
class _Plan:
    """What storing a list of messages takes: the events to append, and every message by key."""

    events: list[SessionEvent]
    fresh: list[tuple[ModelMessage, str]]
    by_key: dict[str, ModelMessage]


def _plan(session_id: str, messages: Sequence[ModelMessage]) -> _Plan:
    """Key every message; the events for those the session may not hold yet."""
    plan = _Plan([], [], {})
    for message in messages:
        if is_synthetic(message):
            continue
        keys = stored_keys(message, session_id)
        if keys is None:
            dumped = dump(message)
            key = message_key(session_id, dumped)
            plan.events.extend(events_for(session_id, message, dumped, key))
            plan.fresh.append((message, key))
            plan.by_key[key] = message
        elif len(keys) == 1:
            plan.by_key[keys[0]] = message
    return plan


def _check_both(
    trigger: CompactionTrigger | None, strategy: CompactionStrategy | None
) -> tuple[CompactionTrigger, CompactionStrategy] | None:
    if (trigger is None) != (strategy is None):
        raise InvalidInput(
            "pass both trigger and strategy to compact (e.g. TurnCountTrigger(20) and "
            "WindowCompactionStrategy(CompactionWindow.last_turns(10))), or neither"
        )
    if trigger is None or strategy is None:
        return None
    return trigger, strategy


# -- async --------------------------------------------------------------------------------


async def _store_async(
    service: AsyncSessionService, session_id: str, plan: _Plan, check_rules: bool
) -> None:
    if plan.events:
        await service.get_or_create(session_id)
        for attempt in range(_ATTEMPTS):
            version = await service.version(session_id)
            try:
                await service.append_events(
                    session_id, plan.events, version, check_rules=check_rules
                )
                break
            except VersionConflict:
                if attempt == _ATTEMPTS - 1:
                    raise
    for message, key in plan.fresh:
        mark(message, session_id, key)


async def save_history_async(
    service: AsyncSessionService,
    session_id: str,
    messages: Sequence[ModelMessage],
    *,
    check_rules: bool = True,
) -> int:
    """Store the messages the session does not hold yet (e.g. `result.new_messages()`).

    Creates the session when it does not exist. Saving a message again is a no-op, so passing
    `result.all_messages()` is fine too; the messages turnlog made for a view (a summary, whose
    `metadata` holds the key "turnlog") are never stored back.

    Args:
        service: the session service.
        session_id: the session.
        messages: pydantic-ai messages, oldest first.
        check_rules: refuse messages that break a view rule (a tool return that answers no call,
            a user prompt while calls are unanswered); False stores them and lets the view
            repair them (see `AsyncSessionService.append_message`).

    Returns:
        How many of `messages` were new to this process (stored now, or found stored already
        by their content).

    Raises:
        InvalidInput: the messages break a view rule; nothing was written.
        VersionConflict: other writers kept appending to the session; nothing was written.
    """
    plan = _plan(session_id, messages)
    await _store_async(service, session_id, plan, check_rules)
    return len(plan.fresh)


async def load_history_async(service: AsyncSessionService, session_id: str) -> list[ModelMessage]:
    """The session's view as pydantic-ai messages, for `agent.run(..., message_history=...)`.

    Returns:
        The messages stored (the very messages, field for field), minus what compaction took out
        of the view, with a summary as a user request and an assistant response whose `metadata`
        holds the key "turnlog". Empty for a session that does not exist.
    """
    if await service.find(session_id) is None:
        return []
    return to_model_messages(session_id, await service.view_with_bytes(session_id))


async def _process_async(
    service: AsyncSessionService,
    session_id: str,
    messages: Sequence[ModelMessage],
    compaction: tuple[CompactionTrigger, CompactionStrategy] | None,
    check_rules: bool,
) -> list[ModelMessage]:
    plan = _plan(session_id, messages)
    await _store_async(service, session_id, plan, check_rules)
    await service.get_or_create(session_id)
    if compaction is not None:
        result = await service.compact(session_id, compaction[0], compaction[1], retries=2)
        warn_if_refires(session_id, result)
    return to_model_messages(session_id, await service.view_with_bytes(session_id), plan.by_key)


def history_processor(
    service: AsyncSessionService,
    session_id: str,
    *,
    trigger: CompactionTrigger | None = None,
    strategy: CompactionStrategy | None = None,
    check_rules: bool = True,
) -> Callable[[list[ModelMessage]], Awaitable[list[ModelMessage]]]:
    """A history processor for pydantic-ai's `ProcessHistory` capability.

    Before each model request it stores the messages the session does not hold yet, compacts
    the session when `trigger` fires, and returns the session's view. It never sees a run's last
    response: store that with `save_history_async(service, session_id, result.new_messages())`,
    or use `TurnlogHistory`, which does.

    Raises:
        InvalidInput: only one of `trigger` and `strategy` is given.
    """
    compaction = _check_both(trigger, strategy)

    async def process(messages: list[ModelMessage]) -> list[ModelMessage]:
        return await _process_async(service, session_id, messages, compaction, check_rules)

    return process


@dataclass
class TurnlogHistory(AbstractCapability[Any]):
    """A capability that keeps an agent's conversation in a turnlog session.

    Before every model request it stores the new messages, compacts the session when `trigger`
    fires (with `strategy`), and sends the model the session's view, which also becomes the
    run's history (`result.all_messages()`). After the run it stores the run's last messages.
    Pass the session's history into each run with `load_history_async`, or pass none: the view
    is sent either way (a system prompt pydantic-ai adds to a history-less run is stored again,
    and only the latest system prompt is sent).

    Args:
        service: the session service (any store).
        session_id: the session; created on first use.
        trigger: when to compact, e.g. `TurnCountTrigger(20)`; None never compacts.
        strategy: how, e.g. `WindowCompactionStrategy(CompactionWindow.last_turns(10))`.
        check_rules: refuse messages that break a view rule (see `save_history_async`).
        recall: give the agent the recall tools over the session (`recall_toolset`), so the
            model can search the session's whole log and read events back whole.

    Raises:
        InvalidInput: only one of `trigger` and `strategy` is given.
    """

    service: AsyncSessionService
    session_id: str
    trigger: CompactionTrigger | None = None
    strategy: CompactionStrategy | None = None
    check_rules: bool = True
    recall: bool = False

    def __post_init__(self) -> None:
        self._compaction = _check_both(self.trigger, self.strategy)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: it holds a service, so an agent spec cannot name it."""
        return None

    def get_toolset(self) -> AbstractToolset[Any] | None:
        """The recall tools with `recall=True` (a search leaves out the turn in progress,
        which this capability stored before the model request), else None."""
        if not self.recall:
            return None
        return recall_toolset(self.service, self.session_id, current_turn=True)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Store the new messages, compact, and send the session's view."""
        messages = await _process_async(
            self.service,
            self.session_id,
            request_context.messages,
            self._compaction,
            self.check_rules,
        )
        request_context.messages = messages.copy()
        ctx.messages[:] = messages
        return request_context

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        """Store the run's last messages (its final response, and any tool returns after it)."""
        await save_history_async(
            self.service, self.session_id, result.all_messages(), check_rules=self.check_rules
        )
        return result


# -- the recall tools ---------------------------------------------------------------------


def recall_toolset(
    service: AsyncSessionService | SessionService,
    session_id: str,
    *,
    current_turn: bool = False,
) -> FunctionToolset[Any]:
    """The recall tools over a session's whole log, for `Agent(toolsets=[...])`:
    `search_history(query, before?, after?)` and `read_events(ids)`, as the turn runner offers
    them with `recall=True` (same schemas, same result texts; see `turnlog.recall_tools`).
    `TurnlogHistory(..., recall=True)` adds them for its own session.

    With them the model gets back what compaction took out of its view: a search finds covered
    and cleared messages too (the log keeps them), and `read_events` gives an event back whole
    with when it was said and its turn. Arguments the model got wrong give a failed tool result
    saying what to correct (`ToolFailed`, which spends no retry), never an exception that ends
    the run; ids of another session give nothing.

    Args:
        service: the session service; over a `SessionService` the tools run in a worker thread.
        session_id: the session; one not created yet has nothing to find.
        current_turn: the log holds the turn in progress already (`TurnlogHistory` and
            `history_processor` store it before each model request): a search leaves it out,
            as the runner does. False for `save_history` after the run.
    """

    def tool(name: str, description: str, schema: dict[str, Any]) -> Tool[Any]:
        def result(answered: Answer) -> str:
            if answered.is_error:
                raise ToolFailed(answered.text)
            return answered.text

        if isinstance(service, AsyncSessionService):

            async def arun(**arguments: Any) -> str:
                given = json.dumps(arguments)
                return result(
                    await answer_async(service, session_id, name, given, current_turn=current_turn)
                )

            return Tool.from_schema(arun, name, description, schema)

        def run(**arguments: Any) -> str:
            given = json.dumps(arguments)
            return result(answer(service, session_id, name, given, current_turn=current_turn))

        return Tool.from_schema(run, name, description, schema)

    # each tool its own copy of the schema
    return FunctionToolset(
        [
            tool(r.name, r.description, json.loads(json.dumps(r.parameters or {})))
            for r in recall_tool_references()
        ]
    )


# -- sync ---------------------------------------------------------------------------------


def _store(service: SessionService, session_id: str, plan: _Plan, check_rules: bool) -> None:
    if plan.events:
        service.get_or_create(session_id)
        for attempt in range(_ATTEMPTS):
            version = service.version(session_id)
            try:
                service.append_events(session_id, plan.events, version, check_rules=check_rules)
                break
            except VersionConflict:
                if attempt == _ATTEMPTS - 1:
                    raise
    for message, key in plan.fresh:
        mark(message, session_id, key)


def save_history(
    service: SessionService,
    session_id: str,
    messages: Sequence[ModelMessage],
    *,
    check_rules: bool = True,
) -> int:
    """`save_history_async` over a blocking `SessionService`.

    Returns:
        How many of `messages` were new to this process.

    Raises:
        InvalidInput: the messages break a view rule; nothing was written.
        VersionConflict: other writers kept appending to the session; nothing was written.
    """
    plan = _plan(session_id, messages)
    _store(service, session_id, plan, check_rules)
    return len(plan.fresh)


def load_history(service: SessionService, session_id: str) -> list[ModelMessage]:
    """`load_history_async` over a blocking `SessionService`.

    Returns:
        The session's view as pydantic-ai messages; empty for a session that does not exist.
    """
    if service.find(session_id) is None:
        return []
    return to_model_messages(session_id, service.view_with_bytes(session_id))
