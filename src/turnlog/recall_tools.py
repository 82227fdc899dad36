"""The recall tools the turn runner offers with `recall=True`: what the model is told about
them, how their arguments are read, and the tool results they give. Pure: no I/O, no clock.

Compaction takes events out of the model's view, never out of the log. With these two tools
the model gets them back when it needs them:

- `search_history(query, before?, after?)`: the best `RECALL_HITS` events of the session's log
  matching the words of `query` (covered and cleared ones included), each with its event id,
  seq, when it was said (ISO 8601), role and a snippet;
- `read_events(ids)`: up to `MAX_READ_IDS` events whole, as they are in the log (text, tool
  calls and results; a part other than text named by its kind, name and attachment reference,
  never its bytes), with when each was said and the turn it belongs to, capped at about
  `DEFAULT_RECALL_TOKENS` tokens.

Both answer as tool results the model asked for, so the prompt rules hold; their results are
never indexed again (`turnlog.history.RECALL_TOOLS`). Arguments the model got wrong (a blank
query, a date that is not one, too many ids, not JSON) become an error result it can read and
correct, never an exception. The runner (`turnlog.chat_async`) does the reading.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from turnlog.errors import InvalidInput
from turnlog.events import SessionEvent, ToolResult
from turnlog.history import MAX_HITS, RECALL_TOOLS, HistoryHit, HistoryQuery, history_query, said_at
from turnlog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ProviderPart,
    ReasoningPart,
    TextPart,
    only_text,
)
from turnlog.tokens import TokenCounter
from turnlog.toolsearch.base import ToolReference

__all__ = [
    "DEFAULT_RECALL_TOKENS",
    "MAX_READ_IDS",
    "READ_EVENTS",
    "RECALL_HITS",
    "RECALL_PLACEHOLDER",
    "RECALL_SHADOW_PROMPT",
    "SEARCH_HISTORY",
    "events_result",
    "hits_result",
    "read_arguments",
    "recall_error",
    "recall_tool_references",
    "search_arguments",
]

SEARCH_HISTORY: Final = "search_history"
"""The name of the search tool."""
READ_EVENTS: Final = "read_events"
"""The name of the tool that reads events back whole."""
assert frozenset({SEARCH_HISTORY, READ_EVENTS}) == RECALL_TOOLS  # their results are not indexed
RECALL_HITS: Final = 5
"""The hits one `search_history` call returns, at most."""
MAX_READ_IDS: Final = 20
"""The most ids one `read_events` call takes."""
DEFAULT_RECALL_TOKENS: Final = 2000
"""About the most tokens one recall result holds (by the service's token counter)."""

RECALL_PLACEHOLDER: Final = (
    "[output of {tool} cleared from the prompt: {chars} characters, about {tokens} tokens; "
    'read_events(["{event_id}"]) gives it back whole]'
)
"""A stand-in for `ToolOutputCompactionStrategy(placeholder=...)` that tells the model how to
get the cleared output back with the recall tools (`SessionChat(..., recall=True)`)."""
RECALL_SHADOW_PROMPT: Final = (
    "Remind me what we have covered so far in this conversation. (All of it is kept: "
    "search_history finds what was said, read_events gives it back whole.)"
)
"""A summary turn's question for `ExtractiveSummarizer(shadow_prompt=...)` or
`ChatModelSummarizer(shadow_prompt=...)` that tells the model the originals can be searched."""

_SEARCH_DESCRIPTION: Final = (
    "Search the whole history of this conversation, including what was said long ago and is "
    "no longer shown to you. Returns up to 5 matching events, best first, each with its id, "
    "when it was said, its role and a snippet; read_events gives them back whole."
)
_READ_DESCRIPTION: Final = (
    "Read events of this conversation's history whole (text, tool calls and results), with "
    "when each was said and its turn number, given their ids (from search_history, or named "
    "in a summary or placeholder)."
)
_DATE: Final = (
    "an ISO 8601 date or date and time (2024-05-01, 2024-05-01T09:30:00+02:00); without a "
    "time zone, UTC"
)


def recall_tool_references() -> list[ToolReference]:
    """The two tools' definitions, to offer the model."""
    search = ToolReference(
        SEARCH_HISTORY,
        _SEARCH_DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "the words to search for"},
                "before": {"type": "string", "description": f"only what was said before: {_DATE}"},
                "after": {"type": "string", "description": f"only what was said after: {_DATE}"},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    )
    read = ToolReference(
        READ_EVENTS,
        _READ_DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "ids": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "maxItems": MAX_READ_IDS,
                    "description": f"the event ids, at most {MAX_READ_IDS}",
                }
            },
            "required": ["ids"],
            "additionalProperties": False,
        },
    )
    return [search, read]


def recall_error(call_id: str, name: str, text: str) -> ToolResult:
    """An error result for a recall call, saying what to correct."""
    return ToolResult(call_id, name, text, is_error=True)


def _object(raw: str, name: str) -> dict[str, Any]:
    """The call's arguments as a JSON object.

    Raises:
        InvalidInput: not JSON, or not an object.
    """
    try:
        value = msgspec.json.decode(raw.strip() or "{}")
    except msgspec.DecodeError:
        raise InvalidInput(f"{name}: the arguments are not valid JSON") from None
    if not isinstance(value, dict):
        raise InvalidInput(f"{name}: the arguments must be a JSON object")
    return value


def _unexpected(given: dict[str, Any], known: Sequence[str], name: str) -> None:
    extra = sorted(set(given) - set(known))
    if extra:
        raise InvalidInput(
            f"{name}: unknown argument {extra[0]!r}; the arguments are {', '.join(known)}"
        )


def _date(value: object, what: str) -> datetime | None:
    """An ISO 8601 date from the model; one without a time zone is taken as UTC.

    Raises:
        InvalidInput: not a string, or not a date.
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            pass
        else:
            return moment.replace(tzinfo=UTC) if moment.utcoffset() is None else moment
    raise InvalidInput(f"{SEARCH_HISTORY}: {what} must be {_DATE}, got {value!r}")


def search_arguments(raw: str, *, skipped: int = 0) -> HistoryQuery:
    """The `search_history` call's arguments as a checked query for `RECALL_HITS` hits, and
    `skipped` more (hits the caller leaves out), at most `MAX_HITS` in all.

    Raises:
        InvalidInput: not a JSON object, an unknown argument, a missing, blank or too long
            query, a `before` or `after` that is not a date; the message says which.
    """
    given = _object(raw, SEARCH_HISTORY)
    _unexpected(given, ("query", "before", "after"), SEARCH_HISTORY)
    query = given.get("query")
    if not isinstance(query, str):
        raise InvalidInput(f"{SEARCH_HISTORY}: give the words to search for as query (a string)")
    try:
        return history_query(
            query,
            k=min(MAX_HITS, RECALL_HITS + skipped),
            before=_date(given.get("before"), "before"),
            after=_date(given.get("after"), "after"),
        )
    except InvalidInput as exc:
        if str(exc).startswith(SEARCH_HISTORY):
            raise
        raise InvalidInput(f"{SEARCH_HISTORY}: {exc}") from None


def read_arguments(raw: str) -> list[str]:
    """The `read_events` call's ids, each once, in the order given.

    Raises:
        InvalidInput: not a JSON object, an unknown argument, no ids, more than
            `MAX_READ_IDS`, or an id that is not a non-blank string.
    """
    given = _object(raw, READ_EVENTS)
    _unexpected(given, ("ids",), READ_EVENTS)
    ids = given.get("ids")
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not ids:
        raise InvalidInput(f"{READ_EVENTS}: give ids, a list of event ids (from search_history)")
    if len(ids) > MAX_READ_IDS:
        raise InvalidInput(
            f"{READ_EVENTS}: at most {MAX_READ_IDS} ids in one call, got {len(ids)}: read them "
            "in several calls"
        )
    for item in ids:
        if not isinstance(item, str) or not item.strip() or len(item) > 255:
            raise InvalidInput(f"{READ_EVENTS}: an id must be a non-blank string, got {item!r}")
    return list(dict.fromkeys(ids))


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()


def hits_result(hits: Sequence[HistoryHit]) -> str:
    """The `search_history` tool result: `{"hits": [...], "message": ...}`, each hit with its
    event id, seq, said_at (ISO 8601), role and snippet, best first."""
    found = [
        {
            "event_id": h.event_id,
            "seq": h.seq,
            "said_at": _iso(h.said_at),
            "role": h.role,
            "snippet": h.snippet,
        }
        for h in hits
    ]
    if found:
        message = "Call read_events with event ids to read those events whole."
    else:
        message = "Nothing matched. Search again with other words, or without dates."
    return _json({"hits": found, "message": message})


def _part(part: Part) -> dict[str, Any]:
    """A part as the model reads it back: its kind, and for media its type, name, size and
    attachment reference (never its bytes)."""
    if type(part) is TextPart:
        return {"kind": "text", "text": part.text}
    if type(part) is ReasoningPart:
        return {"kind": "reasoning", "provider": part.provider}
    if type(part) is ProviderPart:
        return {"kind": "provider", "provider": part.provider, "name": part.kind}
    assert isinstance(part, ImagePart | FilePart | AudioPart)
    name = part.filename if isinstance(part, ImagePart) else getattr(part, "name", None)
    kind = str(type(part).__struct_config__.tag)  # "image", "file", "audio"
    described: dict[str, Any] = {"kind": kind, "media_type": part.media_type}
    for key, value in (("name", name), ("ref", part.ref), ("url", part.url), ("size", part.size)):
        if value is not None:
            described[key] = value
    return described


def _event(event: SessionEvent, turn: int, limit: int | None) -> dict[str, Any]:
    """The event as the model reads it back; each text cut to `limit` characters when given."""

    def cut(text: str) -> str:
        return text if limit is None or len(text) <= limit else text[:limit]

    message = event.message
    assert message is not None
    shown: dict[str, Any] = {
        "id": event.id,
        "seq": event.seq,
        "said_at": _iso(said_at(event)),
        "turn": turn,
        "role": message.role,
    }
    if message.parts and not only_text(message.parts):
        shown["parts"] = [
            {"kind": "text", "text": cut(p.text)} if type(p) is TextPart else _part(p)
            for p in message.parts
        ]
    elif message.text is not None:
        shown["text"] = cut(message.text)
    if message.tool_calls:
        shown["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": cut(c.arguments)} for c in message.tool_calls
        ]
    if message.tool_results:
        results = []
        for r in message.tool_results:
            result: dict[str, Any] = {
                "call_id": r.call_id,
                "name": r.name,
                "content": cut(r.content),
            }
            if r.is_error:
                result["is_error"] = True
            if r.parts and not only_text(r.parts):
                result["parts"] = [_part(p) for p in r.parts if type(p) is not TextPart]
            results.append(result)
        shown["tool_results"] = results
    if event.synthetic:
        shown["synthetic"] = True
    return shown


def turn_of(seq: int | None, user_seqs: Sequence[int]) -> int:
    """The turn of the event at `seq`: how many user messages the log holds up to it (0 before
    the first). `user_seqs` are the seqs of the log's user messages, ascending."""
    return bisect_right(user_seqs, seq or 0)


def events_result(
    asked: Sequence[str],
    events: Sequence[SessionEvent],
    user_seqs: Sequence[int],
    counter: TokenCounter,
    max_tokens: int = DEFAULT_RECALL_TOKENS,
) -> str:
    """The `read_events` tool result: `{"events": [...], "not_found": [...]}`, the events in
    log order, whole, as long as the result stays within about `max_tokens` tokens.

    An event that does not fit is left out and named under `"not_shown"`, with a `"cut"` note
    saying where and how to read it; when not even the first fits, it is shown with each of
    its texts cut short (`"truncated": true`).

    Args:
        asked: the ids the model asked for.
        events: those the session's log holds (others' ids are not among them).
        user_seqs: the seqs of the log's user messages, ascending (for each event's turn).
        counter: counts the result's tokens (the service's counter).
        max_tokens: about the most tokens of the result.
    """
    held = {e.id for e in events}
    missing = [i for i in asked if i not in held]
    messages = [e for e in events if e.message is not None]
    shown: list[dict[str, Any]] = []
    not_shown: list[str] = []

    def render(extra: dict[str, Any]) -> str:
        return _json(_json_body([*shown, extra], missing))

    for index, event in enumerate(messages):
        turn = turn_of(event.seq, user_seqs)
        whole = _event(event, turn, None)
        if counter.count(render(whole)) <= max_tokens:
            shown.append(whole)
            continue
        if not shown:  # the first does not fit: shorten its texts until it does
            low, high = 0, max(len(_json(whole)), 1)
            best = _event(event, turn, 0)
            while low < high:
                middle = (low + high + 1) // 2
                candidate = _event(event, turn, middle)
                if counter.count(render(candidate)) <= max_tokens:
                    best, low = candidate, middle
                else:
                    high = middle - 1
            best["truncated"] = True
            shown.append(best)
            not_shown = [e.id for e in messages[index + 1 :]]
            cut = f"event {event.id} cut short: each of its texts shown up to {low} characters"
        else:
            not_shown = [e.id for e in messages[index:]]
            cut = f"cut before event {event.id}"
        body = _json_body(shown, missing)
        body["cut"] = f"{cut}, at about {max_tokens} tokens per result" + (
            "; read the events under not_shown in another call" if not_shown else ""
        )
        if not_shown:
            body["not_shown"] = not_shown
        return _json(body)
    return _json(_json_body(shown, missing))


def _json_body(shown: list[dict[str, Any]], missing: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {"events": shown}
    if missing:
        body["not_found"] = missing
        body["message"] = "ids under not_found are not events of this conversation's history"
    return body
