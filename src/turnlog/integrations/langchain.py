"""turnlog as LangChain memory: a chat message history and a middleware for `create_agent`.

- `TurnlogChatMessageHistory` is a `BaseChatMessageHistory` (for `RunnableWithMessageHistory`
  and code that keeps a history object): `messages` is the session's compacted view, tool calls
  and their tool messages kept paired; `clear()` takes everything out of the view and deletes
  nothing from the log.
- `TurnlogMiddleware` is an `AgentMiddleware` for LangChain v1 agents: it stores every message
  of the agent's state in a turnlog session and gives the model the session's compacted view.

Each LangChain message is stored as a turnlog `Message` (so views, rules, token counts and
compaction work on it) and, under the message metadata key `"langchain"`, as LangChain's own
`message_to_dict` form, from which it is read back: ids, names, `additional_kwargs`,
`response_metadata`, `usage_metadata`, list content, artifacts and status come back equal.
Image, file, audio and reasoning content blocks become turnlog parts (counted, summarized); the
bytes and texts they hold are kept in the parts alone and put back into the LangChain form on
read (metadata key `"langchain_parts"`).

Needs `pip install 'turnlog[langchain]'`. See docs/integrations/langchain.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, cast

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelCallResult,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        InvalidToolCall,
        SystemMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
    from langchain_core.messages.tool import ToolCall as LangChainToolCall
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
    from langgraph.config import get_config
    from langgraph.runtime import Runtime
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "turnlog.integrations.langchain needs langchain, langchain-core and langgraph: "
        "pip install 'turnlog[langchain]'"
    ) from exc

from turnlog.compaction import (
    CompactionStrategy,
    CompactionTrigger,
)
from turnlog.errors import InvalidInput
from turnlog.events import (
    EventType,
    Message,
    Role,
    SessionEvent,
    ToolCall,
    ToolResult,
    check_id,
    new_id,
)
from turnlog.integrations._langchain_parts import PARTS_KEY, blocks, rebuild, split
from turnlog.integrations._langchain_service import CLEAR_STRATEGY, Backend, Service
from turnlog.integrations._recall import Answer, answer, answer_async
from turnlog.parts import ReasoningPart, TextPart
from turnlog.recall_tools import recall_tool_references
from turnlog.service_async import AsyncSessionService

__all__ = [
    "CLEAR_STRATEGY",
    "EMPTY_REPLY",
    "PARTS_KEY",
    "RAW_KEY",
    "AsyncLangChainChatModel",
    "LangChainChatModel",
    "TurnlogChatMessageHistory",
    "TurnlogMiddleware",
    "from_turnlog",
    "recall_tools",
    "to_event",
]

RAW_KEY: Final = "langchain"
"""The message metadata key holding a LangChain message's `message_to_dict` form (with the
strings its parts hold replaced by "", see `PARTS_KEY`)."""
EMPTY_REPLY: Final = EventType.of("LANGCHAIN.EMPTY_REPLY")
"""The event type of an `AIMessage` with no text and no tool calls: it is logged (payload: its
`message_to_dict` form) but, as providers refuse such a message, never in the view."""
_CHAT_ROLES: Final[dict[str, Role]] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
}

# -- messages ------------------------------------------------------------------------------------


def _event_id(session_id: str, message_id: str) -> str:
    """A store-wide event id for the LangChain message `message_id` of `session_id`."""
    digest = hashlib.sha256(f"{session_id}\x00{message_id}".encode()).hexdigest()
    return f"lc-{digest[:40]}"


def _provider(raw: dict[str, Any]) -> str:
    """The provider a standard reasoning block came from: the message's `model_provider`."""
    metadata = raw["data"].get("response_metadata")
    provider = metadata.get("model_provider") if isinstance(metadata, dict) else None
    return provider if isinstance(provider, str) and provider.strip() else "langchain"


def _turnlog_message(message: BaseMessage, raw: dict[str, Any]) -> Message | None:
    """`message` as a turnlog `Message` carrying `raw`; None for an empty AI reply.

    The content blocks that map to parts become parts, and the strings the parts hold are
    taken out of `raw` (see `_langchain_parts`), so the bytes are stored once.
    """
    assistant = isinstance(message, AIMessage) or (
        isinstance(message, ChatMessage) and _CHAT_ROLES.get(message.role.lower()) == "assistant"
    )
    parts, pointers, content = split(
        raw["data"]["content"], assistant=assistant, provider=_provider(raw)
    )
    if pointers:
        raw = {**raw, "data": {**raw["data"], "content": content}}
    metadata: dict[str, Any] = {RAW_KEY: raw}
    if pointers:
        metadata[PARTS_KEY] = pointers
    text = str(message.text)  # a str subclass in langchain-core 1.x: stores take only str
    shown = any(not isinstance(p, (TextPart, ReasoningPart)) for p in parts)
    if isinstance(message, AIMessage):
        calls = [
            ToolCall(c["id"] or "", c["name"], json.dumps(c["args"], ensure_ascii=False))
            for c in message.tool_calls
        ]
        if not calls and not text.strip() and not shown:
            return None
        if parts:
            return Message("assistant", None, tuple(calls), metadata=metadata, parts=tuple(parts))
        return Message("assistant", text or None, tuple(calls), metadata=metadata)
    if isinstance(message, ToolMessage):
        result = ToolResult(
            message.tool_call_id,
            message.name or "",
            "" if parts else text,
            message.status == "error",
            parts=tuple(parts),
        )
        return Message("tool", None, tool_results=(result,), metadata=metadata)
    role: Role
    if isinstance(message, HumanMessage):
        role = "user"
    elif isinstance(message, SystemMessage):
        role = "system"
    elif isinstance(message, ChatMessage):
        role = _CHAT_ROLES.get(message.role.lower(), "user")
        if role == "assistant" and not text.strip() and not shown:
            return None
    else:
        raise InvalidInput(
            f"a {type(message).__name__} cannot be stored in a turnlog session: store "
            "SystemMessage, HumanMessage, AIMessage, ToolMessage or ChatMessage"
        )
    if parts:
        return Message(role, metadata=metadata, parts=tuple(parts))
    return Message(role, text, metadata=metadata)


def to_event(session_id: str, message: BaseMessage) -> SessionEvent:
    """The turnlog event that stores `message` in `session_id`'s log.

    A message with an id gets an event id derived from (session, message id), so storing it
    again is a no-op; one without gets a fresh event id. An `AIMessage` with no text and no
    tool calls becomes an `EMPTY_REPLY` event: logged, never in the view.

    Returns:
        A MESSAGE event (or an `EMPTY_REPLY` event), not yet stored.

    Raises:
        InvalidInput: a message type turnlog cannot store (`RemoveMessage`,
            `FunctionMessage`), or one whose fields are not JSON.
    """
    if not isinstance(message, BaseMessage):
        raise InvalidInput(f"expected a LangChain message, got {type(message).__name__}")
    raw = message_to_dict(message)
    event_id = new_id() if not message.id else _event_id(session_id, message.id)
    turnlog_message = _turnlog_message(message, raw)
    if turnlog_message is None:
        return SessionEvent.for_payload(session_id, EMPTY_REPLY, raw, event_id=event_id)
    return SessionEvent.for_message(session_id, turnlog_message, event_id=event_id)


def _args(arguments: str) -> dict[str, Any] | None:
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _stored_form(message: Message) -> dict[str, Any] | None:
    """The `message_to_dict` form stored with `message`, the strings its parts hold put back;
    None when there is none, or when its parts no longer fit it (cleared by a compaction)."""
    raw = message.metadata.get(RAW_KEY)
    if not isinstance(raw, dict):
        return None
    pointers = message.metadata.get(PARTS_KEY)
    if pointers is None:
        return raw
    parts = message.tool_results[0].parts if message.tool_results else message.parts
    content = rebuild(raw["data"]["content"], pointers, parts)
    if content is None:
        return None
    return {**raw, "data": {**raw["data"], "content": content}}


def from_turnlog(message: Message) -> list[BaseMessage]:
    """The LangChain messages for a turnlog message of the view.

    A message stored through this module comes back as it was stored (from its `"langchain"`
    metadata). Any other (a compaction's summary, a placeholder from a repair, a message
    another program appended) is built from its role: a tool message gives one `ToolMessage`
    per result, whose `status` is "error" for a failed call.

    Returns:
        One message, or one per tool result.
    """
    raw = _stored_form(message)
    if raw is not None:
        return list(messages_from_dict([raw]))
    text = message.text or ""
    content: str | list[str | dict[str, Any]] = text
    if message.parts:
        content = list(blocks(message.parts))
    if message.role == "system":
        return [SystemMessage(content)]
    if message.role == "user":
        return [HumanMessage(content)]
    if message.role == "assistant":
        calls: list[LangChainToolCall] = []
        invalid: list[InvalidToolCall] = []
        for call in message.tool_calls:
            args = _args(call.arguments)
            if args is None:
                invalid.append(
                    InvalidToolCall(
                        type="invalid_tool_call",
                        id=call.id,
                        name=call.name,
                        args=call.arguments,
                        error="the arguments are not a JSON object",
                    )
                )
            else:
                calls.append(
                    LangChainToolCall(type="tool_call", id=call.id, name=call.name, args=args)
                )
        return [AIMessage(text, tool_calls=calls, invalid_tool_calls=invalid)]
    return [
        ToolMessage(
            r.content,
            tool_call_id=r.call_id,
            name=r.name,
            status="error" if r.is_error else "success",
        )
        for r in message.tool_results
    ]


def _view(messages: Sequence[Message]) -> list[BaseMessage]:
    return [m for message in messages for m in from_turnlog(message)]


# -- a LangChain chat model for turnlog's summarizer -------------------------------------------


def _reply(reply: BaseMessage) -> Message:
    text = str(reply.text).strip()
    if not text:
        raise InvalidInput(
            "the LangChain model's summary reply has no text: a summary needs some (check "
            "the model's settings, e.g. that it is not bound to tools)"
        )
    return Message.assistant(text)


class LangChainChatModel:
    """A LangChain chat model as the `ChatModel` that `ChatModelSummarizer` asks for summaries.

    So compaction can summarize with the model the application already has:
    `ChatModelSummarizer(LangChainChatModel(llm))`. For `AsyncSessionService` (and
    `TurnlogMiddleware` over it) use `AsyncLangChainChatModel`.

    Args:
        model: any LangChain chat model (not bound to tools).
    """

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model

    def complete(self, messages: Sequence[Message]) -> Message:
        """The model's reply to the summary prompt, as a turnlog assistant message.

        Raises:
            InvalidInput: the reply has no text.
            Exception: whatever the model raised.
        """
        return _reply(self.model.invoke(_view(messages)))


class AsyncLangChainChatModel:
    """`LangChainChatModel` for `AsyncSessionService`: `complete` awaits `model.ainvoke`."""

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model

    async def complete(self, messages: Sequence[Message]) -> Message:
        """The model's reply to the summary prompt, as a turnlog assistant message.

        Raises:
            InvalidInput: the reply has no text.
            Exception: whatever the model raised.
        """
        return _reply(await self.model.ainvoke(_view(messages)))


# -- the chat message history --------------------------------------------------------------------


class TurnlogChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat message history kept in a turnlog session.

    `messages` is the session's view after compaction, as LangChain messages: what a model
    should be sent (the latest system message first; tool calls and their `ToolMessage`s
    paired). `add_messages` appends to the log (creating the session on first use), then
    compacts when a trigger and a strategy were given. `clear` appends a boundary that takes
    every message out of the view: the log keeps them.

    Over a `SessionService`, the blocking methods do the work and the async ones
    (`aget_messages`, `aadd_messages`, `aclear`) run them in a worker thread; over an
    `AsyncSessionService`, the async methods await it and the blocking ones raise
    `InvalidInput`.

    A message with an id is stored once: adding it again is a no-op. Messages are checked
    against the view rules (`turnlog.rules`): a `ToolMessage` must answer a call of the
    `AIMessage` before it, and a new message may not come while calls are unanswered; an
    `AIMessage` with no text and no tool calls is logged but left out of `messages`.

    Args:
        session_id: the turnlog session (LangChain's session id).
        service: the turnlog service over the store of your choice.
        trigger: when to compact after an add (e.g. `TurnCountTrigger(20)`); with `strategy`.
        strategy: how to compact (e.g. `WindowCompactionStrategy(CompactionWindow.last_turns(8))`).
        retries: how often a compaction that lost a race with another writer is run again.

    Raises:
        InvalidInput: a bad session id, a service of another type, or only one of `trigger`
            and `strategy`.
    """

    def __init__(
        self,
        session_id: str,
        service: Service,
        *,
        trigger: CompactionTrigger | None = None,
        strategy: CompactionStrategy | None = None,
        retries: int = 2,
    ) -> None:
        super().__init__()
        self.session_id = check_id(session_id, "session id")
        self._backend = Backend(service, trigger, strategy, retries, "TurnlogChatMessageHistory")

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's view as LangChain messages (empty for a session not created yet).

        Raises:
            InvalidInput: the history is over an `AsyncSessionService` (use `aget_messages`).
        """
        return _view(self._backend.view(self.session_id))

    async def aget_messages(self) -> list[BaseMessage]:
        """The session's view as LangChain messages (empty for a session not created yet)."""
        return _view(await self._backend.aview(self.session_id))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append `messages` in one write, then compact if the trigger fires.

        Raises:
            InvalidInput: a message turnlog cannot store, or one that breaks a view rule;
                nothing was written. Also: the history is over an `AsyncSessionService`.
            VersionConflict: other writers kept appending first; nothing was written.
            Exception: whatever the summarizer raised; the messages are stored, the view is
                not compacted (the next add tries again).
        """
        events = [to_event(self.session_id, m) for m in messages]
        self._backend.append(self.session_id, events)
        self._backend.compact(self.session_id)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append `messages` in one write, then compact if the trigger fires.

        Raises:
            InvalidInput: as `add_messages`.
            VersionConflict: as `add_messages`.
            Exception: as `add_messages`.
        """
        events = [to_event(self.session_id, m) for m in messages]
        await self._backend.aappend(self.session_id, events)
        await self._backend.acompact(self.session_id)

    def clear(self) -> None:
        """Take every message out of the view; the log keeps them (and records the clear).

        Raises:
            InvalidInput: the history is over an `AsyncSessionService` (use `aclear`).
        """
        self._backend.clear(self.session_id)

    async def aclear(self) -> None:
        """Take every message out of the view; the log keeps them (and records the clear)."""
        await self._backend.aclear(self.session_id)


# -- the agent middleware ------------------------------------------------------------------------

_REMEMBERED: Final = 10_000


class TurnlogMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Memory for `create_agent`: every message goes to turnlog, the model sees the view.

    Before each model call (`before_model`) it stores the state's messages that the session does
    not hold yet, and compacts when a trigger and a strategy were given; the model call
    (`wrap_model_call`) is sent the session's compacted view in place of the state's messages;
    at the end of the run (`after_agent`) the last reply is stored. So the log takes a model's
    tool calls together with their results, at the next model call: a run that fails in a tool
    leaves no unanswered call behind. The agent's state is left as it is: a checkpointer keeps
    working, and without one the session alone carries the conversation from one run to the
    next.

    The system prompt given to `create_agent` stays the request's own and is not stored.
    Messages are stored under ids derived from their LangChain ids, so storing a message again
    is a no-op.

    Args:
        service: the turnlog service; an `AsyncSessionService` serves only async runs
            (`ainvoke`, `astream`); a `SessionService` serves both (async runs call it in a
            worker thread).
        session_id: the session; None takes the run's `thread_id`
            (`config={"configurable": {"thread_id": ...}}`).
        trigger: when to compact before a model call; with `strategy`.
        strategy: how to compact.
        retries: how often a compaction that lost a race with another writer is run again.
        recall: add the recall tools (`recall_tools(self)`) to the agent's tools, so the
            model can search the session's whole log and read events back whole.

    Raises:
        InvalidInput: a service of another type, or only one of `trigger` and `strategy`.
    """

    def __init__(
        self,
        service: Service,
        *,
        session_id: str | None = None,
        trigger: CompactionTrigger | None = None,
        strategy: CompactionStrategy | None = None,
        retries: int = 2,
        recall: bool = False,
    ) -> None:
        super().__init__()
        self._session_id = None if session_id is None else check_id(session_id, "session id")
        self._backend = Backend(service, trigger, strategy, retries, "TurnlogMiddleware")
        self._stored: dict[str, str] = {}
        self.tools: Sequence[BaseTool] = recall_tools(self) if recall else []

    def session_id(self) -> str:
        """The session of the run in progress.

        Raises:
            InvalidInput: no `session_id` was given and the run has no `thread_id`.
        """
        if self._session_id is not None:
            return self._session_id
        try:
            configurable = get_config().get("configurable") or {}
        except RuntimeError:
            configurable = {}
        thread_id = configurable.get("thread_id")
        if thread_id is None:
            raise InvalidInput(
                "TurnlogMiddleware needs a session: pass session_id=... or run the agent with "
                "config={'configurable': {'thread_id': ...}}"
            )
        return check_id(str(thread_id), "thread_id")

    def _new(self, session_id: str, messages: Sequence[BaseMessage]) -> list[SessionEvent]:
        """The events for `messages` after the newest one this middleware stored."""
        start = 0
        newest = self._stored.get(session_id)
        if newest is not None:
            for at in range(len(messages) - 1, -1, -1):
                if messages[at].id == newest:
                    start = at + 1
                    break
        return [to_event(session_id, m) for m in messages[start:]]

    def _stored_up_to(self, session_id: str, messages: Sequence[BaseMessage]) -> None:
        if messages and messages[-1].id:
            if len(self._stored) >= _REMEMBERED and session_id not in self._stored:
                self._stored.clear()
            self._stored[session_id] = messages[-1].id

    def _save(self, state: AgentState[Any]) -> str:
        session_id = self.session_id()
        messages = state["messages"]
        self._backend.append(session_id, self._new(session_id, messages))
        self._stored_up_to(session_id, messages)
        return session_id

    async def _asave(self, state: AgentState[Any]) -> str:
        session_id = self.session_id()
        messages = state["messages"]
        await self._backend.aappend(session_id, self._new(session_id, messages))
        self._stored_up_to(session_id, messages)
        return session_id

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Store the state's new messages, then compact if the trigger fires."""
        self._backend.compact(self._save(state))
        return None

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Store the state's new messages, then compact if the trigger fires."""
        await self._backend.acompact(await self._asave(state))
        return None

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        """Call the model with the session's compacted view as its messages."""
        view = _view(self._backend.view(self.session_id()))
        return handler(
            request.override(messages=cast("list[AnyMessage]", view)) if view else request
        )

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        """Call the model with the session's compacted view as its messages."""
        view = _view(await self._backend.aview(self.session_id()))
        return await handler(
            request.override(messages=cast("list[AnyMessage]", view)) if view else request
        )

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Store what the run added after the last model call (a tool that ends the run)."""
        self._save(state)
        return None

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Store what the run added after the last model call (a tool that ends the run)."""
        await self._asave(state)
        return None


# -- the recall tools ----------------------------------------------------------------------------


def recall_tools(
    source: TurnlogChatMessageHistory | TurnlogMiddleware,
) -> list[StructuredTool]:
    """The recall tools over the session of a history or a middleware: `search_history(query,
    before?, after?)` and `read_events(ids)`, as the turn runner offers them with `recall=True`
    (same schemas, same result texts; see `turnlog.recall_tools`).

    With them the model gets back what compaction took out of its view: a search finds covered
    and cleared messages too (the log keeps them), and `read_events` gives an event back whole
    with when it was said and its turn. Over a middleware the session is the run's (its
    `session_id()`), and a search leaves out the turn in progress, which the middleware stored
    before the model call; a history stores a turn after it, so nothing is left out.
    Arguments the model got wrong give a `ToolMessage` with `status="error"` saying what to
    correct; ids of another session give nothing.

    Over a `SessionService` the tools run blocking or async (in a worker thread); over an
    `AsyncSessionService` only async (`ainvoke`, `astream`).
    """
    service = source._backend.service
    middleware = isinstance(source, TurnlogMiddleware)

    def session_id() -> str:
        return source.session_id() if isinstance(source, TurnlogMiddleware) else source.session_id

    def tool(name: str, description: str, schema: dict[str, Any]) -> StructuredTool:
        def given(arguments: dict[str, Any]) -> str:
            return json.dumps(arguments)

        def result(answered: Answer) -> str:
            if answered.is_error:
                raise ToolException(answered.text)
            return answered.text

        def run(**arguments: Any) -> str:
            if isinstance(service, AsyncSessionService):
                raise InvalidInput(
                    f"the recall tool {name} is over an AsyncSessionService: run the agent "
                    "with ainvoke or astream, or give it a SessionService"
                )
            return result(
                answer(service, session_id(), name, given(arguments), current_turn=middleware)
            )

        async def arun(**arguments: Any) -> str:
            if not isinstance(service, AsyncSessionService):
                return await asyncio.to_thread(run, **arguments)
            answered = await answer_async(
                service, session_id(), name, given(arguments), current_turn=middleware
            )
            return result(answered)

        return StructuredTool.from_function(
            run,
            coroutine=arun,
            name=name,
            description=description,
            args_schema=schema,
            infer_schema=False,
            handle_tool_error=True,
        )

    # each tool its own copy of the schema
    return [
        tool(r.name, r.description, json.loads(json.dumps(r.parameters or {})))
        for r in recall_tool_references()
    ]
