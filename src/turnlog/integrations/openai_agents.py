"""turnlog as the memory of the OpenAI Agents SDK: `TurnlogSession`, a `Session` backend.

Pass it where the SDK takes a session (`Runner.run(agent, text, session=TurnlogSession(...))`).
The SDK's items are kept exactly as it gave them, and the model sees the session's compacted view.

How the items map onto turnlog's log, so that the view rules and compaction work on them:

- a user message is a user message; a system or developer message is a system message; the
  `input_image` and `input_file` items of their content are `ImagePart`s and `FilePart`s (one
  named only by a `file_id` is a `ProviderPart("openai", "input_image" | "input_file", ...)`);
- the items the model produced between two inputs (assistant messages, function calls, reasoning,
  hosted-tool calls, anything unknown) are one assistant message: its text is the text of the
  assistant messages (or a short `[reasoning]`-style label when there is none), its tool calls
  are the function calls, and each `reasoning` item is a `ReasoningPart("openai", ...)`;
- consecutive function call outputs are one tool message, a `ToolResult` for each.

Every event keeps the JSON of its items, as the SDK serialized them, in its metadata under
`ITEMS_KEY`, less the strings its parts hold (stored once, in the part); `get_items` returns the
items whole, so a later run sends byte for byte what was stored. The summary messages a
compaction writes come back as plain `{"role": ..., "content": ...}` items.

Needs the `openai-agents` extra: `pip install 'turnlog[openai-agents]'`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

try:
    from agents.items import TResponseInputItem
    from agents.memory import Session
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
    from agents.tool import FunctionTool
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "turnlog.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'turnlog[openai-agents]'"
    ) from exc

from turnlog.compaction import (
    CompactionBoundary,
    CompactionResult,
    CompactionStrategy,
    CompactionTrigger,
)
from turnlog.compaction.base import warn_if_refires
from turnlog.errors import InvalidInput, VersionConflict
from turnlog.events import Message, SessionEvent, ToolCall, ToolResult, new_id
from turnlog.integrations._openai_agents_parts import (
    PARTS_KEY,
    content_parts,
    give_back,
    reasoning_part,
    take,
)
from turnlog.integrations._recall import answer_async
from turnlog.parts import Part, TextPart
from turnlog.recall_tools import recall_tool_references
from turnlog.service_async import AsyncSessionService

__all__ = ["ITEMS_KEY", "PARTS_KEY", "TurnlogSession", "recall_tools", "stored_items"]

ITEMS_KEY: Final = "openai_agents.items"
"""The event metadata key holding the SDK items of an event, each as the JSON text
`json.dumps` gives, except the strings a part of the event's message holds (a data URL, a
file's base64, encrypted reasoning): those are "" here, the part holds them and `PARTS_KEY`
names them. `stored_items(event)` gives the items back whole."""

_CALLS: Final = frozenset({"function_call", "custom_tool_call"})
_OUTPUTS: Final = frozenset({"function_call_output", "custom_tool_call_output"})
_ATTEMPTS: Final = 32
_log: Final = logging.getLogger("turnlog.integrations.openai_agents")

Item = Mapping[str, Any]


class TurnlogSession:
    """An Agents SDK `Session` over a turnlog session: the log keeps everything, the model
    gets the compacted view.

    `get_items()` returns the session's view (what is left after compactions, pops and clears)
    as the SDK's input items; `add_items` appends them and then compacts when a trigger and a
    strategy were given; `pop_item` and `clear_session` append a boundary that takes items out
    of the view and never delete anything from the log.

    Args:
        session_id: the turnlog session (created on first use).
        service: the `AsyncSessionService` over any turnlog store; the caller closes it.
        trigger: when to compact after items are added, e.g. `TurnCountTrigger(20)`.
        strategy: how, e.g. `WindowCompactionStrategy(CompactionWindow.last_turns(10))`;
            given with `trigger`, or neither.
        session_settings: the SDK's settings; `limit` is the default of `get_items`.
        compaction_retries: passed to `compact` as `retries`.

    Raises:
        InvalidInput: only one of `trigger` and `strategy` was given.
    """

    def __init__(
        self,
        session_id: str,
        service: AsyncSessionService,
        *,
        trigger: CompactionTrigger | None = None,
        strategy: CompactionStrategy | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        compaction_retries: int = 1,
    ) -> None:
        if (trigger is None) != (strategy is None):
            raise InvalidInput(
                "give TurnlogSession both a trigger and a strategy to compact, or neither: "
                "e.g. trigger=TurnCountTrigger(20), "
                "strategy=WindowCompactionStrategy(CompactionWindow.last_turns(10))"
            )
        self.session_id = session_id
        self.service = service
        self.trigger = trigger
        self.strategy = strategy
        self.session_settings: SessionSettings | None = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(cast(Any, session_settings))
        )
        self.compaction_retries = compaction_retries
        self.last_compaction: CompactionResult | None = None
        """The result of the compaction pass after the latest `add_items`, if one ran. A run
        calls `add_items` more than once (its input, then its output), so this is the last pass
        of a run: see `compactions` for every pass that compacted."""
        self.compactions: list[CompactionResult] = []
        """Every pass of this object that compacted (wrote a boundary), oldest first; passes
        that changed nothing are left out. Clear it when you have read it; the log keeps every
        boundary whatever is done here."""
        self._created = False

    async def _ensure(self) -> None:
        if not self._created:
            await self.service.get_or_create(self.session_id)
            self._created = True

    # -- the Session protocol --------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's view as input items, oldest first.

        Args:
            limit: the newest `limit` items of the view, exactly, as the SDK's own sessions
                give them (the SDK reads the tail of a session this way when it rewinds or
                resumes a write); `session_settings.limit` when None, the whole view when both
                are None; 0 or less gives none. A limit can cut a call from its output: bound
                the prompt with compaction instead, which never does.

        Returns:
            The items as stored, or as rendered for the summary a compaction wrote, without
            the function call outputs that have no call before them in the view (a pop or a
            clear between the SDK saving a run's input and its output leaves such an output;
            the Responses API refuses it). Each one left out is logged as a WARNING on the
            "turnlog.integrations.openai_agents" logger; the log keeps it.
        """
        await self._ensure()
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted <= 0:
            return []
        items = [item for _, _, item in _shown(await self.service.view_with_bytes(self.session_id))]
        if wanted is None:
            return cast(list[TResponseInputItem], items)
        return cast(list[TResponseInputItem], items[-wanted:])

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append `items` (one event per user or system message, per run of model output and
        per run of call outputs), then compact if the trigger fires.

        Raises:
            InvalidInput: an item is not a JSON object.
            VersionConflict: other writers kept appending to the session meanwhile.
        """
        if not items:
            return
        await self._ensure()
        raw = [_dump(i) for i in items]
        for attempt in range(_ATTEMPTS):
            version = await self.service.version(self.session_id)
            events = await self._events_for(raw)
            try:
                await self._append(events, version)
                break
            except VersionConflict:
                if attempt == _ATTEMPTS - 1:
                    raise
        if self.trigger is not None and self.strategy is not None:
            self.last_compaction = await self.service.compact(
                self.session_id, self.trigger, self.strategy, retries=self.compaction_retries
            )
            if not self.last_compaction.unchanged:
                self.compactions.append(self.last_compaction)
            warn_if_refires(self.session_id, self.last_compaction)

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the newest item of `get_items()` out of the view and return it; None when the
        view is empty.

        The item stays in the log: one version-checked append writes a boundary that leaves
        its event out of the view and, when the event held several items, a stand-in event
        holding the others in its place. When another writer appended meanwhile, the pop reads
        the view again and retries, so concurrent pops return distinct items and never reorder
        the history.

        Raises:
            VersionConflict: other writers kept appending through every retry; nothing was
                written.
        """
        await self._ensure()
        for attempt in range(_ATTEMPTS):
            version = await self.service.version(self.session_id)
            view = await self.service.view_with_bytes(self.session_id)
            shown = _shown(view, warn=False)
            if not shown:
                return None
            at, index, item = shown[-1]
            event = view[at]
            raw = _event_raw(event)
            events = self._boundary(view, event, [r for n, r in enumerate(raw) if n != index])
            try:
                await self.service.append_events(
                    self.session_id, events, version, check_rules=False
                )
            except VersionConflict:
                if attempt == _ATTEMPTS - 1:
                    raise
                continue
            return cast(TResponseInputItem, item)
        raise AssertionError("unreachable")  # pragma: no cover

    def _boundary(
        self, view: Sequence[SessionEvent], popped: SessionEvent, rest: Sequence[str]
    ) -> list[SessionEvent]:
        """The events that take `popped` out of `view`: a boundary, then the stand-in holding
        the items `rest` of the popped event (none when it held one item)."""
        stand_in: SessionEvent | None = None
        if rest:
            items = [json.loads(r) for r in rest]
            names = {
                c.id: c.name for e in view if e.message is not None for c in e.message.tool_calls
            }
            stand_in = _record(self.session_id, items, list(rest), names)
        ids: list[str] = []
        for event in view:
            if event.id != popped.id:
                ids.append(event.id)
            elif stand_in is not None:
                ids.append(stand_in.id)
        boundary = CompactionBoundary(
            id=new_id(),
            pinned_event_ids=(),
            summary_event_ids=(),
            preserved_event_ids=tuple(ids),
            covered_event_count=1 if stand_in is None else 0,
            tokens_estimated_saved=0,
            strategy="pop",
            replaced={} if stand_in is None else {stand_in.id: popped.id},
        )
        out = [boundary.to_event(self.session_id)]
        return out if stand_in is None else [*out, stand_in]

    async def clear_session(self) -> None:
        """Empty the view; the log keeps every item (`AsyncSessionService.clear_view`)."""
        await self._ensure()
        await self.service.clear_view(self.session_id)

    # -- writing ---------------------------------------------------------------------------

    async def _append(self, events: list[SessionEvent], version: int) -> None:
        try:
            await self.service.append_events(self.session_id, events, version)
        except InvalidInput:
            # The SDK gave an order the view rules refuse (say a pop left a call unanswered):
            # keep what it gave, as it gave it; view_messages() repairs what a model is sent.
            await self.service.append_events(self.session_id, events, version, check_rules=False)

    async def _events_for(
        self, raw: Sequence[str], names_from: Sequence[SessionEvent] | None = None
    ) -> list[SessionEvent]:
        """The events for the items whose JSON is `raw`, in order."""
        items = [json.loads(r) for r in raw]
        names = {str(i["call_id"]): str(i.get("name", "")) for i in items if _kind(i) == "call"}
        unknown = {
            str(i.get("call_id"))
            for i in items
            if _kind(i) == "output" and str(i.get("call_id")) not in names
        }
        if unknown:
            view = (
                names_from if names_from is not None else await self.service.view(self.session_id)
            )
            for event in view:
                if event.message is not None:
                    names.update((c.id, c.name) for c in event.message.tool_calls)
        return [
            _record(self.session_id, [items[n] for n in group], [raw[n] for n in group], names)
            for group in _groups(items)
        ]


# -- recall ----------------------------------------------------------------------------------


def recall_tools(session: TurnlogSession) -> list[FunctionTool]:
    """The recall tools over `session`'s whole log, for `Agent(tools=[...])`:
    `search_history(query, before?, after?)` and `read_events(ids)`, as the turn runner offers
    them with `recall=True` (same schemas, same result texts; see `turnlog.recall_tools`).

    With them the model gets back what compaction took out of its view: a search finds covered
    and cleared items too (the log keeps them), and `read_events` gives an event back whole
    with when it was said and its turn. A search leaves out the turn in progress (the SDK
    stores a run's input before the model answers it). Arguments the model got wrong give a
    result saying what to correct, never an exception; ids of another session give nothing.
    """

    def tool(name: str, description: str, schema: dict[str, Any]) -> FunctionTool:
        async def invoke(context: ToolContext[Any], arguments: str) -> str:
            await session._ensure()
            answered = await answer_async(
                session.service, session.session_id, name, arguments, current_turn=True
            )
            return answered.text

        # not strict: before and after are optional, which the strict schema form cannot say
        return FunctionTool(name, description, schema, invoke, strict_json_schema=False)

    # each tool its own copy of the schema: the SDK may adjust what it is given
    return [
        tool(r.name, r.description, json.loads(json.dumps(r.parameters or {})))
        for r in recall_tool_references()
    ]


# -- items -> messages -----------------------------------------------------------------------


def _dump(item: object) -> str:
    if not isinstance(item, Mapping):
        raise InvalidInput(f"a session item is a JSON object (a dict), got {type(item).__name__}")
    try:
        return json.dumps(item)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"a session item is not JSON: {exc}") from exc


def _kind(item: Item) -> str:
    """ "user", "system", "output" (a call output), "call", or "model" (other model output)."""
    kind = item.get("type")
    role = item.get("role")
    call_id = item.get("call_id")
    if kind in _OUTPUTS and isinstance(call_id, str):
        return "output"
    if kind in _CALLS and isinstance(call_id, str):
        return "call"
    if kind in (None, "message") and role == "user":
        return "user"
    if kind in (None, "message") and role in ("system", "developer"):
        return "system"
    return "model"


def _groups(items: Sequence[Item]) -> list[list[int]]:
    """Indexes of `items`, grouped: each input alone, runs of model output, runs of outputs."""
    groups: list[list[int]] = []
    side = ""
    for n, item in enumerate(items):
        kind = _kind(item)
        now = "model" if kind == "call" else kind
        if now in ("model", "output") and now == side:
            groups[-1].append(n)
        else:
            groups.append([n])
        side = now
    return groups


def _text(content: object) -> str:
    """The text of a message's content: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            for key in ("text", "refusal"):
                if isinstance(part.get(key), str):
                    parts.append(part[key])
                    break
            else:
                parts.append(f"[{part.get('type', 'part')}]")
    return "\n".join(parts)


Found = list[tuple[int, tuple[str | int, ...], int, str]]
"""The strings of a group's items that its message's parts hold: (item index, path in the item,
part index, form); see `_openai_agents_parts.take`."""


def _record(
    session_id: str, items: Sequence[dict[str, Any]], raw: Sequence[str], names: Mapping[str, str]
) -> SessionEvent:
    """The event for a group of items (see `_groups`) whose JSON is
    `raw`: the items as the SDK gave them, except the strings a part of the message holds (a
    data URL, a file's base64, encrypted reasoning), which are stored in the part alone and
    named under `PARTS_KEY`."""
    message, found = _message(items, names)
    if not found:
        return SessionEvent.for_message(session_id, message, metadata={ITEMS_KEY: list(raw)})
    changed, pointers = take(items, found, message.parts)
    stored = [json.dumps(changed[n]) if n in changed else r for n, r in enumerate(raw)]
    metadata: dict[str, Any] = {ITEMS_KEY: stored}
    if pointers:
        metadata[PARTS_KEY] = pointers
    return SessionEvent.for_message(session_id, message, metadata=metadata)


def _message(items: Sequence[Item], names: Mapping[str, str]) -> tuple[Message, Found]:
    """The one turnlog message standing for a group of items (see `_groups`), and the strings
    of the items its parts hold."""
    kind = _kind(items[0])
    if kind in ("user", "system"):
        content = items[0].get("content")
        mapped = content_parts(content)
        if mapped is not None:
            given, taken = mapped
            make = Message.user if kind == "user" else Message.system
            return make(*given), [(0, path, p, form) for path, p, form in taken]
        if kind == "user":
            return Message.user(_text(content) or "[user input]"), []
        return Message.system(_text(content)), []
    if kind == "output":
        results = []
        for item in items:
            call_id = str(item.get("call_id"))
            output = item.get("output")
            content = output if isinstance(output, str) else json.dumps(output)
            results.append(ToolResult(call_id, names.get(call_id, ""), content))
        return Message.tool(results), []
    calls = tuple(
        ToolCall(str(i["call_id"]), str(i.get("name", "")), _arguments(i))
        for i in items
        if _kind(i) == "call"
    )
    parts: list[Part] = []
    found: Found = []
    texts: list[str] = []
    for n, item in enumerate(items):
        if item.get("type") == "reasoning":
            mapped_reasoning = reasoning_part(item)
            if mapped_reasoning is not None:
                part, taken = mapped_reasoning
                found.extend((n, path, len(parts), form) for path, _, form in taken)
                parts.append(part)
        elif item.get("role") == "assistant":
            said = _text(item.get("content"))
            if said:
                parts.append(TextPart(("\n" if texts else "") + said))
                texts.append(said)
    text = "\n".join(texts) or None
    if text is None and not calls:
        text = "[" + ", ".join(str(i.get("type", "item")) for i in items) + "]"
        if parts:  # reasoning alone: the label keeps the message non-empty for the view rules
            parts.append(TextPart(text))
    if any(type(p) is not TextPart for p in parts):
        return Message.assistant(None, calls, parts=parts), found
    return Message.assistant(text, calls), []


def _arguments(item: Item) -> str:
    value = item.get("arguments", item.get("input", "{}"))
    return value if isinstance(value, str) else json.dumps(value)


# -- events -> items -------------------------------------------------------------------------


def _event_items(event: SessionEvent) -> list[dict[str, Any]]:
    """The SDK items an event of the view stands for."""
    stored = event.metadata.get(ITEMS_KEY)
    if isinstance(stored, list):
        items = [json.loads(r) for r in stored]
        pointers = event.metadata.get(PARTS_KEY)
        if pointers is not None and event.message is not None:
            give_back(items, pointers, event.message.parts)
        return items
    m = event.message
    if m is None:
        return []
    if m.role == "tool":
        return [
            {"call_id": r.call_id, "output": r.content, "type": "function_call_output"}
            for r in m.tool_results
        ]
    out: list[dict[str, Any]] = []
    if m.text:
        out.append({"role": m.role, "content": m.text})
    out.extend(
        {"arguments": c.arguments, "call_id": c.id, "name": c.name, "type": "function_call"}
        for c in m.tool_calls
    )
    return out


def stored_items(event: SessionEvent) -> list[dict[str, Any]]:
    """The SDK items an event of a `TurnlogSession` holds, exactly as they were added (the
    strings its parts hold put back); [] for an event that holds none (a boundary, a summary).
    """
    if not isinstance(event.metadata.get(ITEMS_KEY), list):
        return []
    return _event_items(event)


def _event_raw(event: SessionEvent) -> list[str]:
    """The JSON texts of the items of `event`: as stored, or of the items rendered for it."""
    stored = event.metadata.get(ITEMS_KEY)
    if isinstance(stored, list) and PARTS_KEY not in event.metadata:
        return [str(r) for r in stored]
    return [json.dumps(i) for i in _event_items(event)]


def _shown(
    view: Sequence[SessionEvent], *, warn: bool = True
) -> list[tuple[int, int, dict[str, Any]]]:
    """The items `get_items` gives for `view`, each as (event index, item index, item).

    The view rule for outputs applies to the items: a call output whose call is not before it
    is left out (logged as a WARNING when `warn`), as `repair_messages` leaves an orphan tool
    result out of what a model is sent. Calls without an output are kept: an interrupted run
    (a tool waiting for approval) resumes with the output.
    """
    shown: list[tuple[int, int, dict[str, Any]]] = []
    calls: set[str] = set()
    orphans: list[str] = []
    for at, event in enumerate(view):
        for index, item in enumerate(_event_items(event)):
            kind = _kind(item)
            if kind == "call":
                calls.add(str(item["call_id"]))
            elif kind == "output" and str(item["call_id"]) not in calls:
                orphans.append(str(item["call_id"]))
                continue
            shown.append((at, index, item))
    if orphans and warn:
        _log.warning(
            "left %d function call output(s) out of the session's items (call ids %s): no call "
            "comes before them in the view (a pop or a clear took it out), and the Responses "
            "API refuses such an output; the log keeps them",
            len(orphans),
            ", ".join(repr(o) for o in orphans),
        )
    return shown


if TYPE_CHECKING:  # mypy checks that TurnlogSession has the shape of the SDK's Session protocol

    def _a_session(session: TurnlogSession) -> Session:
        return session
