# Generated from src/turnlog/chat_async.py by scripts/async_to_sync.py.
# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.
"""`SessionChat`: the turn runner, a chat loop over a session's log.

One `send` is one turn: the session is found or created, the system prompt appended when it
changed, the user message appended; then the model is called with the view, its message
appended with the provider's counts, the tools it asked for run and their results appended,
until it answers without calling a tool. Then compaction runs, and a failure of it is logged,
never raised: the reply stands. See docs/chat.md.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from msgspec.structs import replace

from turnlog import telemetry
from turnlog.compaction import CompactionResult, CompactionStrategy, CompactionTrigger, sent_events
from turnlog.compaction._checks import check_function
from turnlog.compaction.base import warn_if_refires
from turnlog.compaction.reported import usage_metadata
from turnlog.compaction.triggers import bind_context_window
from turnlog.context_usage import (
    DEFAULT_CONTEXT_WARNING,
    ContextMeter,
    ContextUsage,
    model_limits,
    model_name,
)
from turnlog.durations import Duration, to_timedelta
from turnlog.errors import InvalidInput, ModelError, ToolRoundsExceeded, VersionConflict
from turnlog.events import (
    EventType,
    Message,
    Session,
    SessionEvent,
    ToolCall,
    ToolResult,
    check_id,
    new_id,
)
from turnlog.history import RECALL_TOOLS
from turnlog.mcp import MCPServer, MCPTools
from turnlog.models.base import (
    CACHE_BREAKPOINT_KEY,
    ChatModelAdapter,
    ChatResponse,
)
from turnlog.models.windows import ModelLimits
from turnlog.reasoning import (
    DEFAULT_REASONING,
    ReasoningPolicy,
    SentReasoning,
    check_counted_reasoning,
    check_reasoning_policy,
    strip_foreign_reasoning,
)
from turnlog.recall_tools import (
    RECALL_HITS,
    SEARCH_HISTORY,
    events_result,
    hits_result,
    read_arguments,
    recall_error,
    recall_tool_references,
    search_arguments,
)
from turnlog.rules import repair_messages
from turnlog.service import SessionService
from turnlog.stores.base import EventFilter
from turnlog.tokens import default_counter
from turnlog.tools import (
    DEFAULT_MAX_TOOL_RESULT_TOKENS,
    Tool,
    as_tools,
    check_timeout,
    preview_result,
    run_tool,
)
from turnlog.toolsearch.base import ToolReference
from turnlog.toolsearch.search import SEARCH_TOOL_NAME, ToolSearch
from turnlog.turns import ChatEvent, ChatTurn, ToolRun, TurnIds, total_usage

__all__ = ["CLAIM_TYPE", "NO_REPLY", "SessionChat"]

logger: Final = logging.getLogger("turnlog.chat")


class SessionChat:
    """Runs turns of a conversation against a chat model, keeping each session's log.

    Args:
        service: the sessions' service (and so their store).
        model: the chat model (an `OpenAIChatModel`, `AnthropicChatModel`, or
            another `ChatModelAdapter`).
        system: the system prompt; appended to a session's log when its latest one differs.
        tools: functions (or `Tool`s) the model may call; see `turnlog.tools`.
        tool_search: offer the model one search tool and the tools it discovered instead of
            every tool; `tools` are what it searches.
        mcp: MCP servers (`turnlog.mcp.MCPServer`) whose tools join `tools` (after them: a
            local tool keeps its name); started on first use, listed again when a server says
            its tools changed, stopped by `close` (or leaving `with`). A call that
            fails on the server side becomes an error result. See `turnlog.mcp`.
        trigger: when to compact after a turn (with `strategy`); None never compacts.
        strategy: how to compact (with `trigger`).
        retries: compaction passes re-run after losing a race to another writer.
        max_tool_rounds: model calls answered by tools in one turn before the turn stops with
            `ToolRoundsExceeded`.
        ttl: how long a session this runner creates lives (see `SessionService.create`).
        cache_breakpoint: mark the end of the stable prefix (the system prompt, the pinned
            events and the summary) for the provider's prompt cache (`CACHE_BREAKPOINT_KEY`;
            the Anthropic adapter honours it when built with `cache_prompt=True`).
        tool_timeout: seconds a tool call may take (a `Tool`'s own `timeout` comes first);
            one that takes longer becomes an error result the model reads ("timed out"). An
            `def` tool is cancelled; a blocking tool is abandoned in its thread and runs
            on (Python cannot stop a thread). None: no limit.
        max_tool_result_tokens: a tool result over about this many tokens (utf-8 bytes / 4) is
            stored whole but sent, on every request, as its start and a note of its size
            (20,000 by default; None sends every result whole).
        at_most_once: before a round of tool calls runs, append a claim event for it (type
            `CLAIM_TYPE`, version-checked); a retry, or a second caller with the same request
            id, that finds the claim without the round's results does not run the tools again
            but answers each call with an error result saying its outcome is unknown. For
            tools with side effects; without it tools run at least once.
        reasoning: which reasoning parts of the view are sent (they all stay in the log):
            "current_turn", the default, those of the turn in progress (what providers need:
            the thinking of the current tool loop); "all" every one; "none" none, for providers
            without reasoning round trips only (Anthropic with thinking enabled refuses a tool
            loop sent without its thinking). See `turnlog.reasoning`. The strategy's and the
            trigger's token counts must include at least what is sent: the built-in ones take
            the same `reasoning=`, with the same default.
        limits: the model's context window and output limit, over the table's
            (`turnlog.models.windows`, looked up by the adapter's `model` name); a
            `TokenCountTrigger.fraction` without its own window is bound to it here.
        context_warning: the share of the window above which `context_usage` logs a WARNING
            on the "turnlog.chat" logger, once per session (0.9 by default; None never).
        recall: offer the model two more tools, `search_history(query, before?, after?)` and
            `read_events(ids)`, that search the session's whole log (what compaction took out
            of the view included) and read events of it back whole, capped at about 2,000
            tokens a result by the service's token counter. Offered beside a tool search's
            tools too. See `turnlog.recall_tools` and docs/chat.md.

    Raises:
        InvalidInput: an argument of the wrong kind (a service, model or tool search of the
            other flavour: the blocking and the asyncio runner each take their own), `trigger`
            without `strategy` or the reverse, two tools of one name, a `reasoning` other than
            "all", "current_turn" and "none", a tool named as a recall tool with `recall`, a
            strategy or trigger whose `reasoning` counts
            less reasoning than this one sends, a `TokenCountTrigger.fraction` without a
            window for a model whose window is unknown (no `limits` and not in the table).
    """

    def __init__(
        self,
        service: SessionService,
        model: ChatModelAdapter,
        *,
        system: str | None = None,
        tools: Sequence[Tool | Callable[..., Any]] = (),
        tool_search: ToolSearch | None = None,
        mcp: Sequence[MCPServer] = (),
        trigger: CompactionTrigger | None = None,
        strategy: CompactionStrategy | None = None,
        retries: int = 2,
        max_tool_rounds: int = 10,
        ttl: Duration | None = None,
        cache_breakpoint: bool = True,
        tool_timeout: float | None = None,
        max_tool_result_tokens: int | None = DEFAULT_MAX_TOOL_RESULT_TOKENS,
        at_most_once: bool = False,
        reasoning: ReasoningPolicy = DEFAULT_REASONING,
        limits: ModelLimits | None = None,
        context_warning: float | None = DEFAULT_CONTEXT_WARNING,
        recall: bool = False,
    ) -> None:
        if not isinstance(service, SessionService):
            raise InvalidInput(f"service must be a SessionService, got {type(service).__name__}")
        respond = getattr(model, "respond", None)
        if not callable(respond) or inspect.iscoroutinefunction(respond):
            raise InvalidInput(
                "model must be a blocking chat model (OpenAIChatModel, "
                f"AnthropicChatModel, ...), got {type(model).__name__}; an asyncio model "
                "goes with AsyncSessionChat"
            )
        if system is not None and (not isinstance(system, str) or not system.strip()):
            raise InvalidInput(f"system must be a non-blank string or None, got {system!r}")
        if tool_search is not None and not isinstance(tool_search, ToolSearch):
            raise InvalidInput(
                f"tool_search must be a ToolSearch, got {type(tool_search).__name__}"
            )
        if (trigger is None) != (strategy is None):
            raise InvalidInput(
                "pass trigger and strategy together (e.g. TokenCountTrigger(60_000) and "
                "WindowCompactionStrategy(...)), or neither to never compact"
            )
        if trigger is not None:
            check_function(trigger, "trigger", "(CompactionRequest) -> bool")
        if strategy is not None and not callable(getattr(strategy, "compact", None)):
            raise InvalidInput("strategy must have compact(request), e.g. WindowCompactionStrategy")
        counts = ((retries, "retries", 0), (max_tool_rounds, "max_tool_rounds", 1))
        for value, what, least in counts:
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InvalidInput(f"{what} must be an integer >= {least}, got {value!r}")
        if ttl is not None:
            to_timedelta(ttl, "ttl")
        check_timeout(tool_timeout, "tool_timeout")
        self.reasoning: ReasoningPolicy = check_reasoning_policy(reasoning)
        self.limits = model_limits(model, limits)
        window = None if self.limits is None else self.limits.prompt_window
        if trigger is not None:
            trigger = bind_context_window(trigger, window, model_name(model))
        self._meter = ContextMeter(self.limits, self.reasoning, context_warning, model_name(model))
        self._foreign_warned: set[str] = set()  # sessions told their old reasoning is not sent
        self._sent_reasoning = SentReasoning(self.reasoning)
        check_counted_reasoning(self.reasoning, strategy, trigger)
        if max_tool_result_tokens is not None and (
            isinstance(max_tool_result_tokens, bool)
            or not isinstance(max_tool_result_tokens, int)
            or max_tool_result_tokens < 1
        ):
            raise InvalidInput(
                "max_tool_result_tokens must be an integer >= 1 or None, got "
                f"{max_tool_result_tokens!r}"
            )
        self.service = service
        self.model = model
        self.system = system
        self.tools = as_tools(tools)
        if tool_search is not None and SEARCH_TOOL_NAME in self.tools:
            raise InvalidInput(f"a tool is named {SEARCH_TOOL_NAME!r}, the search tool's name")
        self.tool_search = tool_search
        self.recall = bool(recall)
        self._recall_tools = recall_tool_references() if self.recall else []
        for reference in self._recall_tools:
            if reference.name in self.tools:
                raise InvalidInput(
                    f"a tool is named {reference.name!r}, a recall tool's name (recall=True): "
                    "rename it, or leave recall off"
                )
        self.trigger = trigger
        self.strategy = strategy
        self.retries = retries
        self.max_tool_rounds = max_tool_rounds
        self.ttl = ttl
        self.cache_breakpoint = bool(cache_breakpoint)
        self.tool_timeout = tool_timeout
        self.max_tool_result_tokens = max_tool_result_tokens
        self.at_most_once = bool(at_most_once)
        self._references = [t.reference for t in self.tools.values()]
        reserved = [*self.tools, *([SEARCH_TOOL_NAME] if tool_search is not None else [])]
        reserved += [r.name for r in self._recall_tools]
        self._mcp = MCPTools(mcp, reserved=reserved) if mcp else None

    # -- the public calls -------------------------------------------------------------------

    def send(
        self, session_id: str, text: str | Message, *, request_id: str | None = None
    ) -> ChatTurn:
        """Run one turn: `text` from the user, the model's reply back.

        Args:
            session_id: the session; created when it does not exist.
            text: the user's message: its text, or a user `Message` (text with images, files
                or audio: `Message.user("What is this?", ImagePart(...))`).
            request_id: the caller's id for this request. Every event of the turn gets an id
                derived from it, so a `send` retried with the same request id (after a timeout,
                say) never doubles the user message, an assistant message or a tool result:
                a finished turn is returned as stored (`replayed`), an unfinished one resumes
                where it stopped (a tool whose result was not stored runs again).

        Returns:
            The turn: the reply, the events stored, the responses, the tools run, the
            compaction after it.

        Raises:
            InvalidInput: a bad session id, blank text, a message that is not the user's, or
                the request id of a turn that has left the view (compacted away): use a new
                request id.
            ModelError: the provider failed a call; what the turn stored so far stays (a
                retry with the same request id resumes it).
            ToolRoundsExceeded: the model was still calling tools after `max_tool_rounds`; its
                last calls were answered with error results, so the log keeps the rules.
        """
        turn: ChatTurn | None = None
        for event in self._turn(session_id, text, request_id, streaming=False):
            if isinstance(event, ChatTurn):
                turn = event
        assert turn is not None  # _turn always ends with the turn
        return turn

    def stream(
        self, session_id: str, text: str | Message, *, request_id: str | None = None
    ) -> Iterator[ChatEvent]:
        """Run one turn, yielding the reply as it arrives.

        Yields text deltas (`str`) of each model call as the provider sends them, a `ToolRun`
        for each tool call run, and the `ChatTurn` last (the full reply is stored before it is
        yielded). Arguments, and what is raised, as for `send`.
        """
        return self._turn(session_id, text, request_id, streaming=True)

    def context_usage(self, session_id: str) -> ContextUsage:
        """How much of the model's context window the session's view takes.

        The tokens are counted as `TokenCountTrigger` counts them (see `ContextUsage`); the
        window is `limits`' prompt window. The first time a session's share exceeds
        `context_warning`, a WARNING is logged on the "turnlog.chat" logger (once per session
        and runner).

        Raises:
            InvalidInput: a bad session id.
            SessionNotFound: no such session.
        """
        check_id(session_id, "session id")
        return self._meter.measure(session_id, self.service.view(session_id))

    # -- one turn ---------------------------------------------------------------------------

    def _turn(
        self, session_id: str, text: str | Message, request_id: str | None, *, streaming: bool
    ) -> Iterator[ChatEvent]:
        check_id(session_id, "session id")
        asked = _user_message(text)
        if request_id is not None:
            check_id(request_id, "request id")
        ids = TurnIds(session_id, request_id)
        session = self.service.get_or_create(session_id, ttl=self.ttl)
        # the version first, then the view: `view` is the view at `known` while every append
        # lands right after the last (see _Tracked); compaction after the turn then starts
        # from it instead of reading it again
        tracked = _Tracked(self.service.version(session_id))
        view = self.service.view(session_id)
        stored = ids.mine(view) if request_id is not None else []
        if not any(e.id == ids.user for e in stored):
            opened = self._open_turn(session_id, asked, ids, view, request_id)
            tracked.add(opened)
            view.extend(opened)
            stored = [*stored, *opened]
        replayed = _finished(stored[-1])
        if request_id is not None and not replayed:
            _check_not_superseded(view, stored, request_id, session_id)
        if self.tool_search is not None and not replayed:
            self.tool_search.prepare(session_id, self._tool_references())
        call = sum(1 for e in stored if e.role == "assistant")
        responses: list[ChatResponse] = []
        runs: list[ToolRun] = []
        while not _finished(stored[-1]):
            previous = stored[-1]
            if previous.message is not None and previous.message.tool_calls:
                step = ids.step(previous)
                calls = previous.message.tool_calls
                over = step >= self.max_tool_rounds
                if over:
                    results = [ToolRun(c, _not_run(c, self.max_tool_rounds)) for c in calls]
                elif self.at_most_once and not self._claim(session_id, ids, step):
                    results = [ToolRun(c, _unknown_outcome(c)) for c in calls]
                else:
                    results = self._run_calls(session_id, calls, stored)
                for run in results:
                    runs.append(run)
                    yield run
                answer = Message.tool([r.result for r in results])
                event = self.service.append_message(session_id, answer, event_id=ids.tools(step))
                tracked.add([event])
                stored.append(event)
                view.append(event)
                if over:
                    raise ToolRoundsExceeded(session_id, self.max_tool_rounds)
                continue
            sent = sent_events(view)
            offered = self._offered(session_id)
            messages = self.service.with_bytes(session_id, self._prompt(session_id, sent))
            response: ChatResponse | None = None
            try:
                with telemetry.model_span(self.model, session_id, messages) as span:
                    if streaming:
                        for piece in self.model.stream(messages, offered):
                            if isinstance(piece, ChatResponse):
                                response = piece
                            else:
                                yield piece
                        if response is None:
                            raise ModelError(
                                _provider(self.model),
                                None,
                                "the model's stream ended without a reply",
                            )
                    else:
                        response = self.model.respond(messages, offered)
                    telemetry.record_response(span, self.model, response)
            except ModelError as exc:
                raise _what_stayed(exc, session_id, stored) from exc
            responses.append(response)
            event = self._store_reply(session_id, response, sent, ids.assistant(call))
            tracked.add([event])
            stored.append(event)
            view.append(event)
            call += 1
        seen = None if tracked.known is None else (tracked.known, view)
        compaction, error = self._compact(session, seen)
        yield ChatTurn(
            session_id=session_id,
            reply=_reply(stored),
            events=tuple(stored),
            responses=tuple(responses),
            tool_runs=tuple(runs),
            usage=total_usage(responses),
            compaction=compaction,
            compaction_error=error,
            replayed=replayed,
        )

    def _open_turn(
        self,
        session_id: str,
        asked: Message,
        ids: TurnIds,
        view: list[SessionEvent],
        request_id: str | None,
    ) -> list[SessionEvent]:
        """Append the system prompt (when it changed) and the user message."""
        opened: list[SessionEvent] = []
        unanswered = _open_calls(view)
        if unanswered:  # a turn cut short left calls open: close them before a new message
            closing = Message.tool([_interrupted(c) for c in unanswered])
            opened.append(self.service.append_message(session_id, closing, event_id=ids.closing))
        if _unreplied([*view, *opened]):  # a turn whose model call failed or was interrupted
            opened.append(
                self.service.append_message(
                    session_id, Message.assistant(NO_REPLY), event_id=ids.no_reply
                )
            )
        if self.system is not None and _latest_system(view) != self.system:
            opened.append(
                self.service.append_message(
                    session_id, Message.system(self.system), event_id=ids.system
                )
            )
        user = self.service.append_message(session_id, asked, event_id=ids.user)
        newest = max((e.seq or 0 for e in view), default=0)
        if request_id is not None and user.seq is not None and user.seq < newest:
            raise InvalidInput(
                f"request {request_id!r} of session {session_id!r} was handled already and its "
                "turn has left the view (compacted away); send it with a new request id"
            )
        opened.append(user)
        return opened

    def _store_reply(
        self, session_id: str, response: ChatResponse, sent: list[SessionEvent], event_id: str
    ) -> SessionEvent:
        """Append the model's message with what the provider reported, as `event_id`."""
        message = response.message
        if not message.tool_calls and not (message.text or "").strip():
            raise ModelError(
                _provider(self.model),
                200,
                f"model {response.model!r} returned an empty reply (no text, no tool calls; "
                f"stop reason {response.stop_reason!r}); nothing was stored for it: send again",
            )
        usage = response.usage
        metadata = usage_metadata(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            model=response.model,
            stop_reason=response.stop_reason,
            prompt=sent,
        )
        return self.service.append_message(
            session_id, message, event_id=event_id, metadata=metadata
        )

    def _prompt(self, session_id: str, sent: list[SessionEvent]) -> list[Message]:
        """The messages to send: the view's, the reasoning `self.reasoning` leaves out and
        that of other providers removed, repaired, the stable prefix marked."""
        events = [e for e in sent if e.message is not None]
        messages = self._sent_reasoning.strip(events, [self._shown(e) for e in events])
        provider = getattr(self.model, "provider", None)
        if isinstance(provider, str):  # a model that names its provider: drop the others'
            messages, others = strip_foreign_reasoning(messages, provider)
            if others and session_id not in self._foreign_warned:
                self._foreign_warned.add(session_id)
                logger.warning(
                    "session %r holds reasoning from %s, and the model is %s's: that reasoning "
                    "stays in the log and is not sent (a provider refuses or ignores another's "
                    "reasoning); said once per session",
                    session_id,
                    ", ".join(sorted(others)),
                    provider,
                )
        if self.cache_breakpoint:
            end = _stable_prefix_end(sent)
            if end is not None:
                marked = messages[end]
                messages[end] = replace(
                    marked, metadata={**marked.metadata, CACHE_BREAKPOINT_KEY: True}
                )
        return repair_messages(messages)

    def _claim(self, session_id: str, ids: TurnIds, step: int) -> bool:
        """Append the claim of tool round `step`; False when it was claimed before.

        Raises:
            VersionConflict: other writers kept appending (three tries).
        """
        token = new_id()  # whose claim it is: an id stored before is skipped, not refused
        claim = SessionEvent(
            id=ids.claim(step),
            session_id=session_id,
            type=CLAIM_TYPE,
            payload={"step": step, "claimant": token},
        )
        for attempt in range(3):
            version = self.service.version(session_id)
            try:
                self.service.append_events(session_id, [claim], version)
                break
            except VersionConflict:
                if attempt == 2:
                    raise
        claims = self.service.events(session_id, EventFilter(event_types=[CLAIM_TYPE]))
        mine = [e for e in claims if e.id == claim.id]
        return (
            bool(mine)
            and isinstance(mine[0].payload, dict)
            and (mine[0].payload.get("claimant") == token)
        )

    def _shown(self, event: SessionEvent) -> Message:
        """The event's message as sent: tool results over `max_tool_result_tokens` previewed."""
        message = event.message
        assert message is not None
        limit = self.max_tool_result_tokens
        if limit is None or message.role != "tool":
            return message
        results = tuple(preview_result(r, event.id, limit) for r in message.tool_results)
        if all(a is b for a, b in zip(results, message.tool_results, strict=True)):
            return message
        return replace(message, tool_results=results)

    def _offered(self, session_id: str) -> list[ToolReference] | None:
        """The tool definitions to send: every tool, or the search tool and what it found;
        then the recall tools."""
        if self.tool_search is not None:  # prepared once per turn, in _turn
            offered = self.tool_search.offered_tools(session_id)
        else:
            offered = self._tool_references()
        return [*offered, *self._recall_tools] or None

    def _tool_references(self) -> list[ToolReference]:
        """The runner's tools, then the MCP servers' (listed again after a change)."""
        if self._mcp is None:
            return self._references
        return [*self._references, *self._mcp.references()]

    def _run_calls(
        self, session_id: str, calls: Sequence[ToolCall], turn: Sequence[SessionEvent]
    ) -> list[ToolRun]:
        """Run the calls of one assistant message (at once, on the asyncio runner); `turn` is
        what the turn in progress has stored."""
        results = [self._run_call(session_id, c, turn) for c in calls]
        return [ToolRun(c, r) for c, r in zip(calls, results, strict=True)]

    def _run_call(
        self, session_id: str, call: ToolCall, turn: Sequence[SessionEvent]
    ) -> ToolResult:
        if self.tool_search is not None and call.name == SEARCH_TOOL_NAME:
            answer = self.tool_search.answer_call(session_id, call.arguments)
            return ToolResult(call.id, call.name, answer)
        if self._recall_tools and call.name in RECALL_TOOLS:
            return self._recall(session_id, call, {e.id for e in turn})
        if self._mcp is not None and call.name not in self.tools:
            return self._mcp.call(call, self.tool_timeout, others=self.tools)
        return run_tool(self.tools, call, self.tool_timeout)

    def _recall(self, session_id: str, call: ToolCall, turn: set[str]) -> ToolResult:
        """Answer a recall tool's call from the session's log; arguments the model got wrong
        give an error result saying what to correct (see `turnlog.recall_tools`). A search
        leaves out the events of the turn in progress (`turn`: the question, the model's own
        search calls), which the model has in view."""
        store = self.service.store
        try:
            if call.name == SEARCH_HISTORY:
                query = search_arguments(call.arguments, skipped=len(turn))
                history = self.service.history  # BM25 and embeddings fused, when it is set
                if history is not None:
                    hits = history.search(self.service, session_id, query)
                else:
                    hits = store.search_history(session_id, query)
                kept = [h for h in hits if h.event_id not in turn][:RECALL_HITS]
                return ToolResult(call.id, call.name, hits_result(kept))
            ids = read_arguments(call.arguments)
            found = store.events_by_id(session_id, ids)
        except InvalidInput as exc:
            return recall_error(call.id, call.name, str(exc))
        users: list[int] = []
        if found:  # each event's turn: the user messages up to it
            opened = EventFilter(roles=["user"], exclude_synthetic=True)
            users = [e.seq or 0 for e in self.service.events(session_id, opened)]
        counter = self.service._counter or default_counter()
        return ToolResult(call.id, call.name, events_result(ids, found, users, counter))

    def _compact(
        self, session: Session, seen: tuple[int, Sequence[SessionEvent]] | None
    ) -> tuple[CompactionResult | None, Exception | None]:
        """Compact after the turn; a failure is logged at WARNING and returned, never raised.

        With `seen` (the version and the view at it, as this turn knows them), the first pass
        starts from that view; the boundary's version check makes that safe.
        """
        if self.trigger is None or self.strategy is None:
            return None, None
        session_id = session.id
        try:
            if seen is None:
                result = self.service.compact(
                    session_id, self.trigger, self.strategy, retries=self.retries
                )
            else:
                result = self.service._compact_seen(
                    session, seen, self.trigger, self.strategy, self.retries
                )
        except Exception as exc:
            logger.warning(
                "compaction of session %r after the turn failed; the turn's reply stands and "
                "nothing of the compaction was written: %s",
                session_id,
                telemetry.safe_error_text(exc),  # no provider text without the content opt-in
                exc_info=telemetry.safe_exc_info(exc),
            )
            return None, exc
        warn_if_refires(session_id, result)
        return result, None

    def close(self) -> None:
        """Close the MCP servers' sessions (stdio servers stop; the next turn starts them
        again). The service stays open: it is the caller's."""
        if self._mcp is not None:
            self._mcp.close()

    def __enter__(self) -> SessionChat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, tools={list(self.tools)}, "
            f"max_tool_rounds={self.max_tool_rounds})"
        )


class _Tracked:
    """The log's version while this turn's appends land one after the other.

    `known` starts at the version read before the view; each event appended must get the next
    seq. One that does not (another writer appended between, or the id was stored before)
    makes the version unknown, and compaction reads the view afresh.
    """

    __slots__ = ("known",)

    def __init__(self, version: int) -> None:
        self.known: int | None = version

    def add(self, events: Sequence[SessionEvent]) -> None:
        for event in events:
            if self.known is not None and event.seq == self.known + 1:
                self.known = event.seq
            else:
                self.known = None


def _finished(event: SessionEvent) -> bool:
    """True for an assistant message without tool calls: the end of a turn."""
    return event.role == "assistant" and event.message is not None and not event.message.tool_calls


def _not_run(call: ToolCall, limit: int) -> ToolResult:
    return ToolResult(
        call.id,
        call.name,
        f"not run: this turn reached its limit of {limit} tool rounds (max_tool_rounds)",
        is_error=True,
    )


def _interrupted(call: ToolCall) -> ToolResult:
    return ToolResult(
        call.id,
        call.name,
        "not run: the turn that made this call was interrupted before the tool's result was stored",
        is_error=True,
    )


CLAIM_TYPE: Final = EventType.of("TURNLOG.TOOL_CLAIM")
"""The type of the claim `at_most_once` appends before a round of tool calls runs (not part of
the view)."""


def _unknown_outcome(call: ToolCall) -> ToolResult:
    return ToolResult(
        call.id,
        call.name,
        "outcome unknown: an earlier attempt of this turn started this call (at_most_once) and "
        "stored no result; it was not run again, so check whether its effect happened",
        is_error=True,
    )


NO_REPLY: Final = "(no reply: this turn's model call failed or was interrupted)"
"""The assistant message that closes a turn left without a reply, written when the next turn
opens, so the next request never holds two user messages in a row."""


def _unreplied(view: Sequence[SessionEvent]) -> bool:
    """True when the view's last message is a user message or tool results: a turn that
    stopped before the model's reply was stored."""
    for event in reversed(view):
        message = event.message
        if message is None or message.role == "system":
            continue
        return message.role in ("user", "tool")
    return False


def _check_not_superseded(
    view: Sequence[SessionEvent], stored: Sequence[SessionEvent], request_id: str, session_id: str
) -> None:
    """Refuse to resume an unfinished turn that other events have followed since.

    Raises:
        InvalidInput: messages of another turn or writer come after this turn's last event.
    """
    mine = {e.id for e in stored}
    last = max(i for i, e in enumerate(view) if e.id in mine)
    later = [e for e in view[last + 1 :] if e.message is not None and e.id not in mine]
    if later:
        raise InvalidInput(
            f"request {request_id!r} of session {session_id!r} names a turn that stopped before "
            f"its reply and was superseded by {len(later)} later message(s) (event "
            f"{later[0].id!r} first); it cannot resume there and nothing was run: send it with "
            "a new request id"
        )


def _what_stayed(exc: ModelError, session_id: str, stored: Sequence[SessionEvent]) -> ModelError:
    """`exc` reworded to say what this turn has stored (the adapter says nothing was)."""
    said = str(exc).removesuffix(_NOTHING_APPENDED)
    return ModelError(
        exc.provider,
        exc.status,
        f"{said}; this turn's user message stays stored in session {session_id!r} with "
        f"{len(stored) - 1} other event(s) of the turn, nothing of the failed call: send again "
        "with the same request id to resume, or send on (the turn is then closed with a "
        "no-reply note)",
    )


_NOTHING_APPENDED: Final = "; nothing was appended to the log"


def _open_calls(view: Sequence[SessionEvent]) -> list[ToolCall]:
    """The calls of the view's last assistant message that no later tool result answers."""
    answered: set[str] = set()
    for event in reversed(view):
        message = event.message
        if message is None:
            continue
        if message.role == "tool":
            answered.update(r.call_id for r in message.tool_results)
        elif message.role == "assistant":
            return [c for c in message.tool_calls if c.id not in answered]
        elif message.role != "system":
            return []
    return []


def _reply(stored: list[SessionEvent]) -> Message:
    message = stored[-1].message
    assert message is not None
    return message


def _latest_system(view: Sequence[SessionEvent]) -> str | None:
    for event in reversed(view):
        if event.role == "system" and event.message is not None:
            return event.message.text
    return None


def _stable_prefix_end(sent: Sequence[SessionEvent]) -> int | None:
    """The index of the last message of the leading system and summary events, if any."""
    end = None
    for index, event in enumerate(sent):
        if event.role == "system" or event.synthetic:
            end = index
        else:
            break
    return end


def _user_message(text: object) -> Message:
    """The user message a turn starts with: `text`'s, or `text` itself when it is one.

    Raises:
        InvalidInput: blank text, a message of another role, or neither.
    """
    if isinstance(text, Message):
        if text.role != "user":
            raise InvalidInput(
                f"a turn starts with a user message, got a {text.role} message: build it with "
                "Message.user(...)"
            )
        if not text.parts and not (text.text or "").strip():
            raise InvalidInput("the user message of a turn must not be blank")
        return text
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"text must be a non-blank string or a user Message, got {text!r}")
    return Message.user(text)


def _provider(model: object) -> str:
    provider = getattr(model, "provider", None)
    return provider if isinstance(provider, str) else type(model).__name__
