"""`ToolOutputCompactionStrategy`: old tool outputs leave the prompt, the log keeps them.

Most of an agent's prompt is tool output that mattered for one step. This strategy puts a short
stand-in (a note, or a preview with a size note) in the view in place of each old tool result,
and optionally of the long arguments of the call that asked for it. The stand-ins are synthetic
events appended after the boundary, which maps each to the event it replaces
(`CompactionBoundary.replaced`); the originals stay in the log. Calls and their results keep
their ids, so the view rules hold. It can hand the cleared view on to a
`WindowCompactionStrategy` when that is still too long: one pass, one boundary.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

from msgspec.structs import replace

from turnlog.compaction._attachments import attachment_note
from turnlog.compaction._sent import SentTokens
from turnlog.compaction.base import CompactionRequest, CompactionResult, not_smaller
from turnlog.compaction.boundary import CompactionBoundary
from turnlog.compaction.triggers import sent_events
from turnlog.compaction.window import WindowCompactionStrategy
from turnlog.errors import InvalidInput
from turnlog.events import Message, SessionEvent, ToolCall, ToolResult, new_id
from turnlog.reasoning import DEFAULT_REASONING, ReasoningPolicy
from turnlog.tokens import EventTokens, TokenCounter, event_tokens, part_tokens

__all__ = ["STAND_IN_KEY", "ToolOutputCompactionStrategy", "stand_ins"]

STAND_IN_KEY: Final = "turnlog.stands_in_for"
"""The message metadata key of a stand-in: the id of the event it replaces in the view."""

DEFAULT_PLACEHOLDER: Final = (
    "[output of {tool} cleared from the prompt: {chars} characters, about {tokens} tokens; "
    "the session log keeps it as event {event_id}]"
)
"""The note a cleared output becomes. Fields: tool, chars, tokens, event_id, call_id."""

_CLEARED_ARGUMENTS: Final = "turnlog_cleared"

ATTACHMENTS_NOTE: Final = "Attachments cleared with it (the session log keeps them): "
"""Starts the line of a stand-in that names the attachments its result held, one note each
(`[image: image/png, 1024x768, 150,000 bytes, sha256:…]`)."""


@dataclass(frozen=True, slots=True)
class _Cleared:
    """One event of the view and the stand-in that replaces it."""

    original: SessionEvent
    stand_in: SessionEvent
    saved: int


class ToolOutputCompactionStrategy:
    """Replaces old tool outputs in the view with short stand-ins; keeps them in the log.

    A pass, over the view it is given:

    1. Every tool result is a candidate except the newest `keep_last` results, those of the
       newest `keep_turns` turns, those of an `exclude_tools` tool, those under `min_tokens`,
       and stand-ins from earlier passes.
    2. Each tool message with candidates gets a stand-in: the same results (same call ids and
       tool names, `is_error` kept), the candidates' content replaced by `placeholder`, or by
       their first `preview_head` and last `preview_tail` characters around it. A result whose
       stand-in would not be shorter stays. A result that holds attachments (images, files,
       audio, a provider's blocks) is measured with them, and its stand-in is text alone: the
       note, then a line naming each attachment (kind, media type, size, name, the start of its
       reference or its URL; never its bytes). With `clear_arguments`, the assistant message
       that made a cleared call gets a stand-in too, whose arguments over `min_tokens` become
       a small JSON object saying they were cleared.
    3. When the stand-ins save fewer than `clear_at_least` tokens, nothing is cleared: passes
       stay rare, and between them the prompt's prefix (what a provider caches) stays the same.
    4. With `then`, a `WindowCompactionStrategy`, the cleared view (or the view as it was, when
       nothing was cleared) is handed to it when its tokens reach `then_at` (always when None):
       it cuts turns, with or without a summary, and the pass records both in one boundary.
       Stand-ins of cut turns are not written.

    Pure: no I/O, no clock. The service records the result as one version-checked append: the
    boundary, the summary events, then the stand-ins. Tokens (`then_at`, `clear_at_least`, the
    saved estimate) are those of what is sent: an assistant message whose reasoning `reasoning`
    leaves out counts without it.

    Args:
        keep_last: the newest tool results kept as they are.
        keep_turns: the tool results of the newest `keep_turns` turns are kept too (0: none).
        min_tokens: only results (and, with `clear_arguments`, arguments) of at least this many
            tokens are cleared.
        clear_at_least: the fewest tokens a clearing must save; under it nothing is cleared.
        exclude_tools: names of tools whose results are never cleared.
        clear_arguments: also shorten the arguments of the calls whose results are cleared.
        preview_head: characters kept from the start of a cleared output (0: none).
        preview_tail: characters kept from its end (0: none).
        placeholder: the note that replaces the output; `str.format` fields: tool, chars,
            tokens, event_id, call_id.
        then: a window strategy run after the clearing, in the same pass.
        then_at: the tokens (of what is sent) from which `then` runs; None: always.
        token_counter: counts tokens; the default counter when None.
        reasoning: which reasoning parts are counted as sent: "current_turn" (the default, the
            turn runner's too), "all" or "none"; `then` must have the same.

    Raises:
        InvalidInput: a count is not a non-negative integer, `then_at` not a positive one,
            `exclude_tools` not a collection of names, `then` not a `WindowCompactionStrategy`
            or one with another `reasoning`, `reasoning` not a reasoning policy, or
            `placeholder` has a field not in the list above.
    """

    def __init__(
        self,
        *,
        keep_last: int = 3,
        keep_turns: int = 0,
        min_tokens: int = 50,
        clear_at_least: int = 0,
        exclude_tools: Collection[str] = (),
        clear_arguments: bool = False,
        preview_head: int = 0,
        preview_tail: int = 0,
        placeholder: str = DEFAULT_PLACEHOLDER,
        then: WindowCompactionStrategy | None = None,
        then_at: int | None = None,
        token_counter: TokenCounter | None = None,
        reasoning: ReasoningPolicy = DEFAULT_REASONING,
    ) -> None:
        self.keep_last = _count(keep_last, "keep_last")
        self.keep_turns = _count(keep_turns, "keep_turns")
        self.min_tokens = _count(min_tokens, "min_tokens")
        self.clear_at_least = _count(clear_at_least, "clear_at_least")
        self.preview_head = _count(preview_head, "preview_head")
        self.preview_tail = _count(preview_tail, "preview_tail")
        if isinstance(exclude_tools, str) or not all(isinstance(n, str) for n in exclude_tools):
            raise InvalidInput(
                f"exclude_tools must be a collection of tool names, got {exclude_tools!r}"
            )
        self.exclude_tools = frozenset(exclude_tools)
        if not isinstance(clear_arguments, bool):
            raise InvalidInput(f"clear_arguments must be True or False, got {clear_arguments!r}")
        self.clear_arguments = clear_arguments
        if not isinstance(placeholder, str):
            raise InvalidInput(f"placeholder must be a string, got {placeholder!r}")
        try:
            placeholder.format(tool="t", chars=1, tokens=1, event_id="e", call_id="c")
        except (KeyError, IndexError, ValueError) as exc:
            raise InvalidInput(
                f"placeholder {placeholder!r} cannot be filled ({exc!r}): its fields are "
                "{tool}, {chars}, {tokens}, {event_id} and {call_id}"
            ) from None
        self.placeholder = placeholder
        if then is not None and not isinstance(then, WindowCompactionStrategy):
            raise InvalidInput(f"then must be a WindowCompactionStrategy or None, got {then!r}")
        self.then = then
        if then_at is not None:
            then_at = _count(then_at, "then_at")
            if then_at == 0:
                raise InvalidInput("then_at must be a positive number of tokens, or None")
        self.then_at = then_at
        self._tokens: EventTokens = event_tokens(token_counter)
        self._sent = SentTokens(self._tokens, reasoning)
        if then is not None and then.reasoning != self._sent.policy:
            raise InvalidInput(
                f"then counts reasoning={then.reasoning!r} and this strategy "
                f"reasoning={self._sent.policy!r}: pass the same reasoning to both (the turn "
                "runner's)"
            )

    @property
    def reasoning(self) -> ReasoningPolicy:
        """Which reasoning parts the token counts include: "current_turn", "all" or "none"."""
        return self._sent.policy

    @property
    def name(self) -> str:
        """E.g. `tool-outputs:keep_last(3)` or `tool-outputs:keep_last(3)+window:last_turns(8)`."""
        name = f"tool-outputs:keep_last({self.keep_last})"
        if self.keep_turns:
            name += f",keep_turns({self.keep_turns})"
        return name + (f"+{self.then.name}" if self.then is not None else "")

    def __repr__(self) -> str:
        return f"ToolOutputCompactionStrategy({self.name})"

    def compact(self, request: CompactionRequest) -> CompactionResult:
        """One pass over `request.view`. See the class docstring.

        Raises:
            InvalidInput: `then` has an async summarizer: run the pass with `compact_async`, as
                `AsyncSessionService` does.
        """
        view = list(request.view)
        cleared = self._clear(request.session.id, view)
        cleared_view = _swap(view, cleared)
        window = None
        if self._cut_needed(cleared_view):
            assert self.then is not None
            window = self.then.compact(CompactionRequest.of(request.session, cleared_view))
        return self._finish(view, cleared, cleared_view, window)

    async def compact_async(self, request: CompactionRequest) -> CompactionResult:
        """`compact`, awaiting the window's summarizer when it is async."""
        view = list(request.view)
        cleared = self._clear(request.session.id, view)
        cleared_view = _swap(view, cleared)
        window = None
        if self._cut_needed(cleared_view):
            assert self.then is not None
            window = await self.then.compact_async(
                CompactionRequest.of(request.session, cleared_view)
            )
        return self._finish(view, cleared, cleared_view, window)

    def _cut_needed(self, view: Sequence[SessionEvent]) -> bool:
        if self.then is None:
            return False
        return self.then_at is None or self._sent.total(sent_events(view)) >= self.then_at

    def _finish(
        self,
        view: list[SessionEvent],
        cleared: list[_Cleared],
        cleared_view: list[SessionEvent],
        window: CompactionResult | None,
    ) -> CompactionResult:
        """The result of the clearing, merged with the window's pass when it cut."""
        if window is not None and not window.unchanged and window.boundary is not None:
            final = list(window.view)
            pinned, preserved = window.pinned_events, window.preserved_events
            summary, summary_events = window.summary, window.summary_events
        elif cleared:
            final, pinned, preserved = cleared_view, (), tuple(cleared_view)
            summary, summary_events = (), ()
        else:
            reason = window.reason if window is not None else "no tool output to clear"
            return CompactionResult.nothing(view, reason)
        kept = {e.id for e in final}
        written = [c for c in cleared if c.stand_in.id in kept]
        covered = tuple(e for e in view if e.id not in kept)
        before, after = (
            self._sent.total(sent_events(view)),
            self._sent.total(sent_events(final)),
        )
        saved = before - after
        if saved <= 0:
            return CompactionResult.nothing(view, not_smaller(before, after))
        boundary = CompactionBoundary(
            id=new_id(),
            pinned_event_ids=tuple(e.id for e in pinned),
            summary_event_ids=tuple(e.id for e in summary_events),
            preserved_event_ids=tuple(e.id for e in preserved),
            covered_event_count=len(covered),
            tokens_estimated_saved=saved,
            strategy=self.name,
            replaced={c.stand_in.id: c.original.id for c in written},
        )
        return CompactionResult(
            unchanged=False,
            covered_events=covered,
            pinned_events=tuple(pinned),
            preserved_events=tuple(preserved),
            summary=tuple(summary),
            summary_events=tuple(summary_events),
            stand_in_events=tuple(c.stand_in for c in written),
            tokens_estimated_saved=saved,
            boundary=boundary,
            view=tuple(final),
        )

    # -- clearing ---------------------------------------------------------------------------

    def _clear(self, session_id: str, view: list[SessionEvent]) -> list[_Cleared]:
        """The stand-ins of this pass, in view order; empty when they save too little."""
        protected = self._protected(view)
        out: list[_Cleared] = []
        cleared_calls: set[str] = set()
        for event in view:
            m = event.message
            if m is None or m.role != "tool" or event.synthetic or STAND_IN_KEY in m.metadata:
                continue
            results = []
            for result in m.tool_results:
                if result.call_id not in protected and result.name not in self.exclude_tools:
                    shorter = self._stand_in_result(event, result)
                    if shorter is not None:
                        results.append(shorter)
                        cleared_calls.add(result.call_id)
                        continue
                results.append(result)
            if any(a is not b for a, b in zip(results, m.tool_results, strict=True)):
                out.append(
                    self._cleared(session_id, event, replace(m, tool_results=tuple(results)))
                )
        if self.clear_arguments and cleared_calls:
            out += self._clear_arguments(session_id, view, cleared_calls)
            order = {e.id: i for i, e in enumerate(view)}
            out.sort(key=lambda c: order[c.original.id])
        if not out or sum(c.saved for c in out) < max(self.clear_at_least, 1):
            return []
        return out

    def _protected(self, view: Sequence[SessionEvent]) -> set[str]:
        """The call ids whose results stay: the newest `keep_last`, the last `keep_turns`."""
        results: list[tuple[int, str]] = []
        for at, event in enumerate(view):
            if event.message is not None and event.message.role == "tool":
                results += [(at, r.call_id) for r in event.message.tool_results]
        newest = results[-self.keep_last :] if self.keep_last else []
        protected = {call for _, call in newest}
        if self.keep_turns:
            starts = [at for at, e in enumerate(view) if e.starts_turn]
            if starts:
                since = starts[-min(self.keep_turns, len(starts))]
                protected |= {call for at, call in results if at >= since}
        return protected

    def _stand_in_result(self, event: SessionEvent, result: ToolResult) -> ToolResult | None:
        """The cleared `result`, or None when it is too small to be worth clearing.

        A result with parts is measured with them (their notes and `part_tokens`), and its
        stand-in is text alone, naming each attachment: no part, no bytes."""
        counter = self._tokens.counter
        count = counter.count(result.content)
        notes = []
        for part in result.parts:
            count += part_tokens(part, counter, self._tokens.media_provider)
            note = attachment_note(part)
            if note is not None:
                notes.append(note)
        if count < max(self.min_tokens, 1):
            return None
        note = self.placeholder.format(
            tool=result.name,
            chars=len(result.content),
            tokens=count,
            event_id=event.id,
            call_id=result.call_id,
        )
        parts = []
        if self.preview_head:
            parts.append(result.content[: self.preview_head])
        parts.append(note)
        if self.preview_tail:
            parts.append(result.content[-self.preview_tail :])
        if notes:
            parts.append(ATTACHMENTS_NOTE + ", ".join(notes))
        text = "\n".join(parts)
        if counter.count(text) >= count:
            return None
        return ToolResult(result.call_id, result.name, text, result.is_error)

    def _clear_arguments(
        self, session_id: str, view: Sequence[SessionEvent], calls: set[str]
    ) -> list[_Cleared]:
        out = []
        for event in view:
            m = event.message
            if m is None or m.role != "assistant" or event.synthetic or STAND_IN_KEY in m.metadata:
                continue
            new_calls = [self._short_call(c) if c.id in calls else c for c in m.tool_calls]
            if any(a is not b for a, b in zip(new_calls, m.tool_calls, strict=True)):
                out.append(
                    self._cleared(session_id, event, replace(m, tool_calls=tuple(new_calls)))
                )
        return out

    def _short_call(self, call: ToolCall) -> ToolCall:
        count = self._tokens.counter.count(call.arguments)
        if count < max(self.min_tokens, 1):
            return call
        note = f"{len(call.arguments)} characters of arguments, kept in the session log"
        arguments = json.dumps({_CLEARED_ARGUMENTS: note})
        if self._tokens.counter.count(arguments) >= count:
            return call
        return replace(call, arguments=arguments)

    def _cleared(self, session_id: str, event: SessionEvent, message: Message) -> _Cleared:
        message = replace(message, metadata={**message.metadata, STAND_IN_KEY: event.id})
        stand_in = SessionEvent.for_message(session_id, message, synthetic=True)
        return _Cleared(event, stand_in, self._tokens.of(event) - self._tokens.of(stand_in))


def stand_ins(log: Sequence[SessionEvent]) -> dict[str, SessionEvent]:
    """The original of every stand-in a compaction of `log` wrote: stand-in id -> the event it
    replaced in the view, from the `replaced` maps of all the boundaries in `log`.

    Args:
        log: a session's whole log, oldest first (`store.events(session_id)`).

    Returns:
        A new dict; an original missing from `log` is left out.
    """
    by_id = {e.id: e for e in log}
    out = {}
    for event in log:
        if event.type.name == "COMPACTION":
            for stand_in, original in CompactionBoundary.from_event(event).replaced.items():
                if original in by_id:
                    out[stand_in] = by_id[original]
    return out


def _swap(view: list[SessionEvent], cleared: list[_Cleared]) -> list[SessionEvent]:
    by_original = {c.original.id: c.stand_in for c in cleared}
    return [by_original.get(e.id, e) for e in view]


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{name} must be a non-negative integer, got {value!r}")
    return value
