"""Token counts of a view as it is sent: the reasoning policy applied to the counts.

The turn runner sends a view's reasoning parts by its reasoning policy (`turnlog.reasoning`):
by default those of the turn in progress only. A token-budget window, `TokenCountTrigger` and
tool-output clearing measure what is sent, so an assistant message whose reasoning is left out
counts as it is sent, without its reasoning parts (their text, their encrypted content and
their note). The log and the view keep every part; only the counts change.

Pure: no I/O. Planned from the view's outline: only the assistant messages whose reasoning is
left out and whose stored count may include parts (a count by the rules for parts, another
counter's, or none) are decoded and counted again, once per process for a stored event (its
count without reasoning is kept, by session, id and seq, in a bounded cache).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import msgspec

from turnlog.events import SessionEvent
from turnlog.lazy import LazyEvents, outline_of, pick
from turnlog.reasoning import ReasoningPolicy, check_reasoning_policy, reasoning_end
from turnlog.reasoning import without_reasoning as _without
from turnlog.tokens import EventTokens, TokenCounter

__all__ = ["SentTokens"]

_Key = tuple[str, str, int, object]

_MAXSIZE = 100_000
"""The most counts without reasoning a `SentTokens` keeps (least recently used go first)."""


class SentTokens:
    """The tokens of events as the model is sent them under a reasoning policy.

    Args:
        tokens: the per-event counts (`turnlog.tokens.event_tokens(counter)`).
        policy: which reasoning parts are sent: "current_turn", "all" or "none".

    Raises:
        InvalidInput: `policy` is not a reasoning policy.
    """

    __slots__ = ("_cache", "_lock", "policy", "tokens")

    def __init__(self, tokens: EventTokens, policy: ReasoningPolicy) -> None:
        self.tokens = tokens
        self.policy: ReasoningPolicy = check_reasoning_policy(policy)
        self._cache: OrderedDict[_Key, int] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def counter(self) -> TokenCounter:
        """The token counter."""
        return self.tokens.counter

    def counts(
        self, view: Sequence[SessionEvent], positions: Sequence[int] | None = None
    ) -> list[int]:
        """The tokens of the events of `view` at `positions` (all of them when None), as sent.

        The turn in progress is that of the whole `view` (from its last user message on),
        whichever events are counted: pass the sequence that is sent, and pick from it.

        Returns:
            One count for each position, in the order given.
        """
        events = view if positions is None else pick(view, positions)
        counts = self.tokens.counts(events)
        if self.policy == "all":
            return counts
        roles, _ = outline_of(view)
        end = reasoning_end(roles, self.policy)
        if end == 0:
            return counts
        identity = self.tokens.identity
        if isinstance(view, LazyEvents):
            plain = view.stored_counts(identity)  # a count without parts: nothing to take off
        else:
            plain = [
                None if (t := e.tokens) is None or t.counter != identity else t.count for e in view
            ]
        where = range(len(view)) if positions is None else positions
        todo = [
            (k, at)
            for k, at in enumerate(where)
            if at < end and roles[at] == "assistant" and plain[at] is None
        ]
        if not todo:
            return counts
        # decoded in one batch (a lazy view decodes its rows together)
        events = pick(view, [at for _, at in todo])
        for (k, _), event in zip(todo, events, strict=True):
            n = self._without_reasoning(event)
            if n is not None:
                counts[k] = n
        return counts

    def _without_reasoning(self, event: SessionEvent) -> int | None:
        """The tokens of `event` sent without its reasoning; None when it has none to leave out."""
        message = event.message
        if message is None or not message.parts:
            return None
        key: _Key | None = None
        if event.seq is not None:  # a stored event never changes: its count is kept
            key = (event.session_id, event.id, event.seq, event.timestamp)
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    return hit if hit >= 0 else None
        kept = _without(message)
        n = None
        if kept is not message:  # counted as an append would count it (never cached there)
            recorded = self.tokens.of_message(kept)
            n = (
                recorded.count
                if recorded is not None
                else self.tokens.of(
                    msgspec.structs.replace(event, message=kept, seq=None, tokens=None)
                )
            )
        if key is not None:
            with self._lock:
                self._cache[key] = -1 if n is None else n
                if len(self._cache) > _MAXSIZE:
                    self._cache.popitem(last=False)
        return n

    def total(self, view: Sequence[SessionEvent], positions: Sequence[int] | None = None) -> int:
        """The sum of `counts(view, positions)`."""
        return sum(self.counts(view, positions))
