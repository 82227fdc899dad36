"""The view rules: what a provider accepts, checked when events are appended, repaired when not.

A provider accepts a conversation only when it obeys four rules. turnlog keeps every view that
way: an append that would break one is refused with `InvalidInput` (nothing is written), and
`SessionService.view_messages()` repairs, visibly, a log that was stored with the rules off
(`check_rules=False`, for importing a broken transcript on purpose).

- R1: a tool result answers an earlier call of the same prompt, and only once.
- R2: the calls of an assistant message are answered before the next user or assistant message,
  except in the turn in progress (the calls at the end of the log are still open).
- R3: the first non-system message is a user message.
- R4: one system message, first. `sent_events` guarantees it: only the latest stored system
  message is sent, first, so system messages may be appended anywhere.

Also refused: an empty assistant message and one message calling the same id twice. An assistant
message is empty when it has no tool call, no text besides blanks, and no part other than text
and reasoning: an image, a file, a clip or a provider's block is content; reasoning alone is not
(a provider wants an answer or a call after it). A user message is never empty: an image alone
is a question. System messages, events of other types (COMPACTION, your own) and the
synthetic summary events a compaction writes are transparent: they may sit anywhere, between a
call and its result too. A synthetic event is accepted only as the summary of a compaction: in
the same batch as its COMPACTION event, named by it, a user message first (the shadow prompt),
no tool calls or results.

Pure: no I/O. A store derives the `Tail` of a log (`tail_of`) inside its write, then calls
`check_append`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from msgspec.structs import replace

from turnlog.errors import CorruptData, InvalidInput
from turnlog.events import EventType, Message, SessionEvent, ToolResult
from turnlog.parts import ReasoningPart, TextPart
from turnlog.payloads import CompactionBoundary

__all__ = [
    "EMPTY_TAIL",
    "REPAIR_KEY",
    "STARTED",
    "Tail",
    "check_append",
    "check_messages",
    "check_one",
    "check_summary",
    "needs_tail",
    "repair_messages",
    "tail_of",
    "tail_of_events",
]

REPAIR_KEY: Final = "turnlog.repair"
"""The message metadata key that marks what `repair_messages` added or changed."""

PLACEHOLDER_USER: Final = "[the conversation starts here]"
"""The text of the user message put before a conversation that starts with the assistant."""

PLACEHOLDER_RESULT: Final = "[no result was recorded for this call]"
"""The content of the result given to a call that was never answered."""

_HINT: Final = (
    " To store such history on purpose (importing a broken transcript), append with "
    "check_rules=False: view_messages() then repairs it."
)


@dataclass(frozen=True, slots=True)
class Tail:
    """What the rules need to know about a log to check an append at its end."""

    open_calls: tuple[str, ...] = ()
    """The ids of the calls of the turn in progress that no tool result answered yet."""
    started: bool = False
    """True once the log holds a user, assistant or tool message (not counting summaries)."""


EMPTY_TAIL: Final = Tail()
STARTED: Final = Tail((), True)
"""The tail of a log whose newest message needs nothing: a user message, a reply without calls."""


def _counts(event: SessionEvent) -> bool:
    """True for a message the rules look at: not synthetic, not a system message."""
    return event.message is not None and not event.synthetic and event.message.role != "system"


def needs_tail(batch: Iterable[SessionEvent]) -> bool:
    """True when checking `batch` needs the log's `Tail` (it holds a user, assistant or tool
    message); a batch of system messages, compactions and events of your own types does not."""
    return any(_counts(e) for e in batch)


def tail_of(rows: Iterable[tuple[str, Sequence[str]]]) -> Tail:
    """The `Tail` of a log, from its messages newest first, read only as far as needed.

    Args:
        rows: `(role, ids)` for each non-synthetic user, assistant and tool message, newest
            first: `ids` are an assistant message's call ids, a tool message's answered call
            ids (anything for a user message). Consumed lazily: it stops at the newest user or
            assistant message.

    Returns:
        The tail: the calls of the newest assistant message that no later result answers.
    """
    answered: set[str] = set()
    started = False
    for role, ids in rows:
        started = True
        if role == "tool":
            answered.update(ids)
        elif role == "assistant":
            return Tail(tuple(i for i in ids if i not in answered), True)
        elif role == "user":
            return Tail((), True)
    return Tail((), started)


def tail_of_events(log: Sequence[SessionEvent]) -> Tail:
    """The `Tail` of `log` (events oldest first), walking back from its end."""
    return tail_of(_rows(log))


def _rows(log: Sequence[SessionEvent]) -> Iterator[tuple[str, Sequence[str]]]:
    for event in reversed(log):
        m = event.message
        if m is None or event.synthetic or m.role == "system":
            continue
        if m.role == "assistant":
            yield "assistant", [c.id for c in m.tool_calls]
        elif m.role == "tool":
            yield "tool", [r.call_id for r in m.tool_results]
        else:
            yield m.role, ()


def _names(ids: Iterable[str]) -> str:
    return ", ".join(repr(i) for i in ids)


def check_append(tail: Tail, batch: Sequence[SessionEvent]) -> Tail:
    """Check that appending `batch` to a log with `tail` keeps the view rules.

    Returns:
        The tail after the batch.

    Raises:
        InvalidInput: an event would break a rule; the message names the event, the rule and
            what to do instead.
    """
    summary_ids: set[str] = set()
    stand_ins: set[str] = set()
    for at, event in enumerate(batch):
        m = event.message
        if m is None:
            if event.type == EventType.COMPACTION:
                summary_ids, stand_ins = _appended_ids(event)
                check_summary(
                    [e.message for e in batch[at + 1 :] if e.id in summary_ids and e.message],
                    f"the summary of compaction {event.id!r}",
                )
            else:
                summary_ids, stand_ins = set(), set()
            continue
        if event.synthetic:
            if event.id not in summary_ids and event.id not in stand_ins:
                raise InvalidInput(
                    f"synthetic event {event.id!r} is not the summary of a compaction: "
                    "synthetic events are appended in one batch right after the COMPACTION "
                    "event whose summary_event_ids (or replaced, for a stand-in) name them "
                    "(SessionService.compact does it)." + _HINT
                )
            continue
        summary_ids, stand_ins = set(), set()
        if m.role != "system":
            tail = _step(tail, m, event.id)
    return tail


def _appended_ids(event: SessionEvent) -> tuple[set[str], set[str]]:
    """The summary ids and the stand-in ids a COMPACTION event names."""
    try:
        boundary = CompactionBoundary.from_event(event)
        return set(boundary.summary_event_ids), set(boundary.replaced)
    except CorruptData as exc:
        raise InvalidInput(f"compaction event {event.id!r} is malformed: {exc}") from exc


def check_summary(messages: Sequence[Message], what: str = "a summary") -> None:
    """Check the messages of a summary turn: a user message first (the shadow prompt), then user
    or assistant messages with text and no tool calls.

    Raises:
        InvalidInput: they are not a summary turn (an empty list is fine: no summary).
    """
    if not messages:
        return
    if messages[0].role != "user":
        raise InvalidInput(
            f"{what} starts with a {messages[0].role} message: a summary turn starts with a user "
            "message (the shadow prompt), e.g. [Message.user('Summarize our conversation.'), "
            "Message.assistant(summary)], so the view still starts with a user message (R3)"
        )
    for m in messages:
        if m.role not in ("user", "assistant") or m.tool_calls:
            raise InvalidInput(
                f"{what} holds a {m.role} message{' with tool calls' if m.tool_calls else ''}: "
                "a summary turn holds only user and assistant messages with text"
            )
        if not (m.text or "").strip():
            raise InvalidInput(f"{what} holds an empty {m.role} message: give it text")


def _empty(m: Message) -> bool:
    """True for an assistant reply a provider refuses: no calls, no text but blanks, and no
    part besides text and reasoning."""
    if m.tool_calls or (m.text or "").strip():
        return False
    return all(type(p) is TextPart or type(p) is ReasoningPart for p in m.parts)


def _label(m: Message, where: str | int, what: str) -> str:
    """How an error names a message: `event id` or `what` N (its place in a conversation)."""
    return f"{m.role} message {where!r}" if isinstance(where, str) else f"{what} {where} ({m.role})"


def check_one(tail: Tail, event: SessionEvent) -> Tail:
    """`check_append(tail, [event])` for one user, assistant or tool message that is not
    synthetic (see `needs_tail`): the short path of a one-event append.

    Raises:
        InvalidInput: as `check_append`.
    """
    m = event.message
    assert m is not None
    return _step(tail, m, event.id)


def _step(tail: Tail, m: Message, where: str | int, what: str = "message") -> Tail:
    """The tail after message `m` (event id or place `where`), or `InvalidInput` naming the
    broken rule."""
    role = m.role
    if not tail.open_calls:
        if role == "user":
            return STARTED
        if role == "assistant" and not m.tool_calls and tail.started and (m.text or "").strip():
            return STARTED

    def label() -> str:
        return _label(m, where, what)

    if m.role == "tool":
        if not tail.started:
            raise InvalidInput(
                f"{label()} would be the first message of the conversation: it "
                "answers no call (R1; the first non-system message is a user message, R3). "
                "Append the user message and the assistant's call first." + _HINT
            )
        still = list(tail.open_calls)
        for result in m.tool_results:
            if result.call_id not in still:
                raise InvalidInput(
                    f"{label()} answers call {result.call_id!r}, which is not an "
                    "open call of the turn in progress (R1: a tool result answers an earlier "
                    "call of the same prompt, once, before the next message). "
                    + (
                        f"The open calls are {_names(still)}."
                        if still
                        else "No call is open: it is already answered, or the conversation "
                        "moved on; put the text in a user message instead."
                    )
                    + _HINT
                )
            still.remove(result.call_id)
        return Tail(tuple(still), True)
    if tail.open_calls:
        raise InvalidInput(
            f"{label()} comes while the calls {_names(tail.open_calls)} are "
            "unanswered (R2: calls are answered before the next message): append a tool "
            "message with a ToolResult for each first (an error text is fine, e.g. "
            "ToolResult(call_id, name, 'error: cancelled'))." + _HINT
        )
    if _empty(m):
        raise InvalidInput(
            f"{label()} is empty (no text, no tool calls, no part but reasoning): a provider "
            "refuses it; do not store it, or give it text." + _HINT
        )
    if not tail.started:
        raise InvalidInput(
            f"{label()} would be the first message of the conversation (R3: "
            "the first non-system message is a user message): append the user message first, "
            "or keep a greeting in the system prompt." + _HINT
        )
    ids = tuple(c.id for c in m.tool_calls)
    if len(set(ids)) != len(ids):
        raise InvalidInput(f"{label()} calls the same id twice: give each call its own id")
    return Tail(ids, True)


def check_messages(messages: Sequence[Message], where: str = "message") -> None:
    """Check a whole conversation (e.g. a file to import) against the rules, from an empty log.

    Raises:
        InvalidInput: message N (1-based, named `where N`) breaks a rule.
    """
    tail = EMPTY_TAIL
    for n, m in enumerate(messages, start=1):
        if m.role == "system":
            continue
        tail = _step(tail, m, n, where)


def _marked(message: Message, repair: str) -> Message:
    return replace(message, metadata={**message.metadata, REPAIR_KEY: repair})


def repair_messages(messages: Sequence[Message]) -> list[Message]:
    """`messages` made to obey R1-R3 (R4 is `sent_events`' job); unchanged when they do.

    The repairs, in order: an empty assistant message is left out; a tool result that answers
    no open call is left out (a tool message left with no result goes, one left with some is
    marked "dropped orphan tool results"); calls still unanswered when the next user or
    assistant message comes get a tool message with a placeholder result for each (marked
    "missing tool results"); a conversation whose first non-system message is not a user
    message gets a placeholder user message first (marked "placeholder user message"). Calls
    open at the end are the turn in progress and stay open. Added and changed messages carry
    the reason under the metadata key `REPAIR_KEY` ("turnlog.repair").

    Returns:
        A new list.
    """
    out: list[Message] = []
    open_calls: dict[str, str] = {}  # call id -> tool name
    started = False
    for m in messages:
        if m.role == "system":
            out.append(m)
            continue
        if m.role == "tool":
            kept = [r for r in m.tool_results if open_calls.pop(r.call_id, None) is not None]
            if not kept:
                continue
            if len(kept) < len(m.tool_results):
                m = _marked(replace(m, tool_results=tuple(kept)), "dropped orphan tool results")
            out.append(m)
            continue
        if m.role == "assistant" and _empty(m):
            continue
        if open_calls:
            results = [ToolResult(i, name, PLACEHOLDER_RESULT) for i, name in open_calls.items()]
            out.append(_marked(Message.tool(results), "missing tool results"))
            open_calls = {}
        if not started and m.role != "user":
            out.append(_marked(Message.user(PLACEHOLDER_USER), "placeholder user message"))
        started = True
        out.append(m)
        open_calls = {c.id: c.name for c in m.tool_calls}
    return out
