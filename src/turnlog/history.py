"""History search (recall): what a search of a session's log returns, the query it takes, and
the text each event is indexed by. Shared by every store's index; no I/O.

A compaction takes events out of the model's view but never out of the log, so a search of the
log by words can give them back. Each store keeps a history index over the message events of
every session (covered and cleared ones included), kept in step with the log:

- which text an event is found by: `indexed_text` (its text and text parts, the names and
  arguments of its tool calls, the names and content of its tool results). Summaries and
  stand-ins (synthetic events) are left out, and so are the calls and results of the recall
  tools themselves (`RECALL_TOOLS`), so that what the model searched for and read back is
  never found again as if it had been said;
- when it was said: `said_at`, the ISO 8601 date the application stored under `SAID_AT` in the
  message's metadata (an imported conversation's own dates), else the event's timestamp;
- what a query may hold: `HistoryQuery`, built by `history_query`, which checks it (a blank
  query is `InvalidInput`); its words (`query_terms`) reach a full-text engine only as quoted
  terms, so no character of the user's text is ever syntax.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Final

import msgspec

from turnlog.errors import InvalidInput
from turnlog.events import ROLES, SessionEvent

__all__ = [
    "MAX_HITS",
    "MAX_QUERY_CHARS",
    "RECALL_TOOLS",
    "SAID_AT",
    "HistoryHit",
    "HistoryQuery",
    "fts5_expression",
    "history_query",
    "indexed_text",
    "query_terms",
    "said_at",
    "snippet",
    "tool_names",
]

RECALL_TOOLS: Final = frozenset({"search_history", "read_events"})
"""The recall tools' names: their results are not indexed."""
SAID_AT: Final = "said_at"
"""The message metadata key of the ISO 8601 date a message was said, when it is not the date it
was stored (an imported conversation)."""
MAX_QUERY_CHARS: Final = 4000
"""The longest query, in characters."""
MAX_QUERY_TERMS: Final = 64
"""The most words a query searches by (the first ones)."""
MAX_HITS: Final = 100
"""The most hits a search returns."""
SNIPPET_CHARS: Final = 240
"""About how long a hit's snippet is."""


class HistoryHit(msgspec.Struct, frozen=True, kw_only=True):
    """One event a history search found."""

    session_id: str
    """The session whose log holds it."""
    event_id: str
    """Its id: `service.events(session_id)` or the `read_events` tool gives it back whole."""
    seq: int
    """Its position in the log."""
    timestamp: datetime
    """When it was stored."""
    said_at: datetime
    """When it was said: the message's `said_at` metadata when it has one, else `timestamp`."""
    role: str
    """The message's role."""
    snippet: str
    """Its text around the first word of the query found in it, at most about 240 characters."""
    score: float
    """How well it matches, higher is better (BM25 on SQLite, memory and Redis; `ts_rank` on
    PostgreSQL): compare scores within one search, not across stores."""


class HistoryQuery(msgspec.Struct, frozen=True, kw_only=True):
    """A checked history search; build it with `history_query`."""

    text: str
    terms: tuple[str, ...]
    """The words searched by, lower-cased, each once, in order (`query_terms`)."""
    k: int = 5
    before: datetime | None = None
    """Only events said before this moment (exclusive)."""
    after: datetime | None = None
    """Only events said after this moment (exclusive)."""
    roles: frozenset[str] | None = None
    """Only messages of these roles."""
    tools: frozenset[str] | None = None
    """Only messages calling, or giving the result of, one of these tools."""

    def accepts(self, role: str, moment: datetime, tool_names: Iterable[str]) -> bool:
        """Whether an event of this role, said at `moment`, naming these tools passes the
        filters (the text match aside)."""
        if self.roles is not None and role not in self.roles:
            return False
        if self.before is not None and not moment < self.before:
            return False
        if self.after is not None and not moment > self.after:
            return False
        return self.tools is None or not self.tools.isdisjoint(tool_names)


def history_query(
    query: object,
    *,
    k: object = 5,
    before: object = None,
    after: object = None,
    roles: object = None,
    tools: object = None,
) -> HistoryQuery:
    """A checked `HistoryQuery`.

    Raises:
        InvalidInput: the query is not a string, is blank or longer than `MAX_QUERY_CHARS`;
            `k` is not an integer from 1 to `MAX_HITS`; `before` or `after` is not a
            timezone-aware datetime; `roles` holds an unknown role; `tools` is not a
            collection of names.
    """
    if not isinstance(query, str):
        raise InvalidInput(f"a history query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise InvalidInput("a history query must not be blank: give the words to search for")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"a history query must be at most {MAX_QUERY_CHARS} characters, got {len(query)}"
        )
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_HITS:
        raise InvalidInput(f"k must be an integer from 1 to {MAX_HITS}, got {k!r}")
    bounds = [_moment(before, "before"), _moment(after, "after")]
    role_set = None
    if roles is not None:
        role_set = frozenset(_names(roles, "roles"))
        unknown = sorted(role_set - ROLES)
        if unknown:
            raise InvalidInput(f"unknown role {unknown[0]!r}: use system, user, assistant, tool")
    tool_set = None if tools is None else frozenset(_names(tools, "tools"))
    return HistoryQuery(
        text=query,
        terms=tuple(query_terms(query)),
        k=k,
        before=bounds[0],
        after=bounds[1],
        roles=role_set,
        tools=tool_set,
    )


def _moment(value: object, what: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInput(f"{what} must be a timezone-aware datetime, got {value!r}")
    return value.astimezone(UTC)


def _names(value: object, what: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidInput(f"{what} must be a list of names, got {value!r}")
    names = list(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"{what} must be a list of non-empty names, got {name!r}")
    return names


def query_terms(query: str) -> list[str]:
    """The words a query searches by: lower-cased, each once, in order, at most
    `MAX_QUERY_TERMS`; the common words ("the", "what", ...) left out unless nothing else is
    left; numbers kept (a price, a date, an order number are what a question about the past
    asks for). Runs of scripts written without spaces become their character pairs, as the
    index stores them. Empty when the query has no letter or digit."""
    # here: `import turnlog` loads none of the tool search (tests/test_cold_start.py)
    from turnlog.toolsearch.words import query_words

    words = query_words(query) or query_words(query, keep_stop_words=True)
    # a lone digit is a word here ("March 3", "gate 7"), as it is to the index
    words += [d for d in dict.fromkeys(_LONE_DIGIT.findall(query)) if d not in words]
    return words[:MAX_QUERY_TERMS]


_LONE_DIGIT: Final = re.compile(r"(?<![^\W_])\d(?![^\W_])")


def fts5_expression(terms: Iterable[str]) -> str:
    """The terms as an SQLite FTS5 expression: each a quoted string, joined with OR ("" for
    none). The terms hold only letters and digits, so nothing in them is FTS5 syntax."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def indexed_text(event: SessionEvent) -> str | None:
    """The text the history index holds for `event`, or None when it is not indexed: an event
    that is not a message, a synthetic one (a summary, a stand-in), or one with no text. The
    recall tools' calls and results are left out: what the model searched for and read back
    is not something said in the conversation."""
    message = event.message
    if message is None or event.synthetic:
        return None
    pieces: list[str] = []
    if message.text:
        pieces.append(message.text)
    for call in message.tool_calls:
        if call.name in RECALL_TOOLS:  # the model's own searches would come back as hits
            continue
        pieces.append(call.name)
        if call.arguments not in ("", "{}"):
            pieces.append(call.arguments)
    for result in message.tool_results:
        if result.name in RECALL_TOOLS:
            continue
        pieces.append(result.name)
        if result.content:
            pieces.append(result.content)
    text = "\n".join(pieces)
    return text if text.strip() else None


def tool_names(event: SessionEvent) -> list[str]:
    """The tools a message event calls or answers."""
    message = event.message
    if message is None:
        return []
    return [c.name for c in message.tool_calls] + [r.name for r in message.tool_results]


def said_at(event: SessionEvent) -> datetime:
    """When `event` was said: the timezone-aware ISO 8601 date under `SAID_AT` in its message's
    metadata (or its own), else its timestamp (a stored event has one). A date that cannot be
    read, or has no timezone, is ignored."""
    for metadata in (event.message.metadata if event.message else {}, event.metadata):
        value = metadata.get(SAID_AT)
        if isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                continue
            if moment.utcoffset() is not None:
                return moment.astimezone(UTC)
    if event.timestamp is None:
        raise InvalidInput(f"event {event.id!r} has no timestamp: search stored events")
    return event.timestamp


def snippet(text: str, terms: Iterable[str], width: int = SNIPPET_CHARS) -> str:
    """About `width` characters of `text` around the first of `terms` found in it (its start
    when none is), cut at spaces, with "..." where text was left out."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    lowered = text.lower()
    first = len(text)
    for term in terms:
        at = lowered.find(term)
        if 0 <= at < first:
            first = at
    if first == len(text):
        first = 0
    start = max(0, first - width // 3)
    if start:
        space = text.find(" ", start)
        start = space + 1 if 0 <= space < first else start
    end = min(len(text), start + width)
    if end < len(text):
        space = text.rfind(" ", start, end)
        end = space if space > first else end
    return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")


def bm25_score(rank: float) -> float:
    """SQLite FTS5's `bm25()` (lower is better, negative) as a score where higher is better."""
    return -rank if math.isfinite(rank) else 0.0
