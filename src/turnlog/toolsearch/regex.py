"""`RegexToolIndex`: the reference system's default search, kept as a baseline."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from turnlog.toolsearch._sets import RecentCache, SharedSets
from turnlog.toolsearch.base import ToolHit, ToolReference
from turnlog.toolsearch.words import (
    check_max_results,
    check_tools,
    fold,
    name_words,
    query_words,
    schema_text,
    tool_digest,
    tools_fingerprint,
)

__all__ = ["RegexToolIndex"]

NAME_SCORE: Final = 2.0
DESCRIPTION_SCORE: Final = 1.0
PARAMETERS_SCORE: Final = 0.5
MAX_PATTERN_LENGTH: Final = 2000
ENTRY_CACHE_TOOLS: Final = 4096


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    name_text: str
    description: str
    parameters: str


class RegexToolIndex:
    """Tools found by a case-insensitive alternation of the query's words.

    The query's words (lower-cased, split on anything that is not a letter or digit, English
    stop words and 1-letter words dropped) are escaped and joined into one pattern, matched
    anywhere in a tool's name, description and parameter text. A tool scores 2 for each query
    word found in its name, 1 for each found in its description and 0.5 for each found in its
    parameters, so a name match ranks above a description match; ties keep the indexing order.

    A baseline: no stemming ("forecasts" does not find "forecast"), no word weighting. A query
    with no usable word, or whose pattern would be longer than 2,000 characters, finds nothing.
    Sessions with identical tool sets share one copy, and sets holding the same tool share its
    text (for the last 4,096 tools indexed). Thread-safe.

    Args:
        max_results: how many hits `search` returns when not told.
    """

    def __init__(self, *, max_results: int = 5) -> None:
        self._max_results = check_max_results(max_results, 5)
        self._lock = threading.Lock()
        self._sets: SharedSets[tuple[_Entry, ...]] = SharedSets()
        # The last 4,096 tools' entries: sets holding the same tool share its text.
        self._entries: RecentCache[bytes, _Entry] = RecentCache(ENTRY_CACHE_TOOLS)

    def index_tools(self, session_id: str, tools: Sequence[ToolReference]) -> None:
        """Replace the session's index with `tools`.

        Raises:
            InvalidInput: see `turnlog.toolsearch.words.check_tools`.
        """
        checked = check_tools(tools)
        key = tools_fingerprint(checked, ordered=True)
        with self._lock:
            if self._sets.key(session_id) == key:
                return
            entries = self._sets.value(key)
        if entries is None:
            entries = tuple(self._entry(tool) for tool in checked)
        with self._lock:
            made = entries
            self._sets.attach(session_id, key, lambda: made)

    def _entry(self, tool: ToolReference) -> _Entry:
        """The tool's folded text (lower case, no accents), one object per tool for every set
        that holds it."""
        digest = tool_digest(tool)
        entry = self._entries.get(digest)
        if entry is None:
            entry = _Entry(
                name=tool.name,
                name_text=fold(f"{tool.name}\n{' '.join(name_words(tool.name))}"),
                description=fold(tool.description),
                parameters=fold(schema_text(tool.parameters)),
            )
            self._entries.put(digest, entry)
        return entry

    def search(
        self, session_id: str, query: str, *, max_results: int | None = None
    ) -> list[ToolHit]:
        """The best matches for `query`, best first; nothing for an unknown session.

        Raises:
            InvalidInput: `max_results` is not a positive integer.
        """
        limit = check_max_results(max_results, self._max_results)
        with self._lock:
            entries = self._sets.get(session_id)
        if not entries or not isinstance(query, str):
            return []
        words = list(dict.fromkeys(fold(w) for w in query_words(query)))
        if not words:
            return []
        # Longest first, so a word is not cut short by one of its prefixes.
        words.sort(key=len, reverse=True)
        source = "|".join(re.escape(w) for w in words)
        if len(source) > MAX_PATTERN_LENGTH:
            return []
        try:
            # The texts were folded (lower case, no accents) when indexed and so are the words:
            # matching is case-insensitive without re.IGNORECASE, which is several times slower.
            pattern = re.compile(source)
        except re.error:
            return []

        def found(text: str) -> int:
            return len(set(pattern.findall(text))) if text else 0

        scored: list[tuple[float, int, str]] = []
        for at, entry in enumerate(entries):
            score = (
                NAME_SCORE * found(entry.name_text)
                + DESCRIPTION_SCORE * found(entry.description)
                + PARAMETERS_SCORE * found(entry.parameters)
            )
            if score > 0:
                scored.append((-score, at, entry.name))
        scored.sort()
        return [ToolHit(name, -neg) for neg, _, name in scored[:limit]]

    def clear(self, session_id: str) -> None:
        """Forget the session's index (a no-op for an unknown session)."""
        with self._lock:
            self._sets.detach(session_id)

    def size(self, session_id: str) -> int:
        """How many tools the session's index holds (0 when unknown)."""
        with self._lock:
            entries = self._sets.get(session_id)
            return 0 if entries is None else len(entries)

    def __repr__(self) -> str:
        return f"RegexToolIndex(max_results={self._max_results})"
