"""`ExtractiveSummarizer`: a summary written from the events themselves, without a model."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from turnlog.compaction._attachments import attachment_notes
from turnlog.compaction._budget import check_cap, counter_of, turn_tokens
from turnlog.compaction._checks import check_function, describe
from turnlog.compaction.base import SummaryRequest
from turnlog.compaction.files import (
    DEFAULT_FILE_OPERATIONS,
    FilesTouched,
    covered_files,
    files_metadata,
    files_section,
)
from turnlog.compaction.summary import DEFAULT_SHADOW_PROMPT, FilesFunction
from turnlog.errors import InvalidInput
from turnlog.events import JsonValue, Message, SessionEvent, ToolCall, ToolResult
from turnlog.tokens import TokenCounter

__all__ = ["EXTRACT_METADATA_KEY", "ExtractiveSummarizer", "looks_like_error"]

EXTRACT_METADATA_KEY: Final = "turnlog.extract"
"""The key of an extractive summary's metadata that holds its entries, for the next pass."""

_VERSION: Final = 1
_SECTIONS: Final = (
    ("earlier", "Earlier summary:"),
    ("requests", "User requests:"),
    ("tools", "Tool calls:"),
    ("attachments", "Attachments:"),
    ("errors", "Errors:"),
    ("conclusions", "Conclusions:"),
)
# Which entries go first when the cap is reached: the oldest turn first, and within a turn an
# earlier summary's text, then tool calls, attachments, errors, conclusions, and the user's
# request last.
_DROP_RANK: Final = {
    "earlier": 0,
    "tools": 1,
    "attachments": 2,
    "errors": 3,
    "conclusions": 4,
    "requests": 5,
}
_ERROR_START: Final = re.compile(r"(error|exception|traceback|failed|failure|fatal)\b", re.I)
_SPACE: Final = re.compile(r"\s+")


def looks_like_error(result: ToolResult) -> bool:
    """Whether a tool result reports a failure: its text starts with "Error", "Exception",
    "Traceback", "Failed", "Failure" or "Fatal" (any case), or it is a JSON object with a true
    `"error"` or `"is_error"` field."""
    text = result.content.strip()
    if _ERROR_START.match(text):
        return True
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return isinstance(value, dict) and bool(value.get("error") or value.get("is_error"))
    return False


@dataclass(frozen=True, slots=True)
class _Entry:
    turn: int
    section: str
    text: str

    def as_json(self) -> JsonValue:
        return [self.turn, self.text]


class ExtractiveSummarizer:
    """Writes a summary turn from the covered events, deterministically and without a model.

    The summary holds fixed sections, one line per entry, each tagged with its turn (`T3: ...`,
    numbered on from the prior summary): the user's requests; the tool calls with their key
    arguments and outcome (ok, error or no result) and the first line of the result; the errors
    tool results reported; the attachments of its messages and tool results (images, files,
    audio, a provider's blocks), each named by its note (kind, media type, size, name, the start
    of its sha256 reference or its URL; never its bytes); the last assistant text of each turn
    (its conclusion); and the files read and modified (see `FileOperations`). Stored system
    messages are left out, and so is reasoning: neither its text nor its provider's signature or
    encrypted content is summarized.

    It builds on the prior summary: an extractive one's entries (kept in its metadata under
    `"turnlog.extract"`) and files (under `"turnlog.files"`) are merged with the new ones; any
    other summary's text becomes an "Earlier summary" entry. The summary turn (shadow prompt
    included, as the view sends it) holds at most `max_tokens` tokens by the strategy's token
    counter: the oldest entries are left out first (a line says how many), and when even the
    files do not fit, the files list is shortened (the metadata keeps every file). The same
    events always give the same summary.

    Args:
        max_tokens: the most tokens the summary turn may hold.
        shadow_prompt: the user message that opens the summary turn (not blank).
        file_operations: finds the files the covered events read and modified; None for no
            files section.
        entry_chars: the most characters of one entry; longer text is cut with "…".
        is_error: tells whether a tool result reports an error; `looks_like_error` by default.

    Raises:
        InvalidInput: `max_tokens` or `entry_chars` is not a positive integer (`entry_chars`
            at least 20), `shadow_prompt` is blank or not a string, or a function argument
            cannot be called with one argument.
    """

    def __init__(
        self,
        *,
        max_tokens: int = 1000,
        shadow_prompt: str = DEFAULT_SHADOW_PROMPT,
        file_operations: FilesFunction | None = DEFAULT_FILE_OPERATIONS,
        entry_chars: int = 200,
        is_error: Callable[[ToolResult], bool] = looks_like_error,
    ) -> None:
        cap = check_cap(max_tokens)
        if cap is None:
            raise InvalidInput("max_tokens must be a positive integer, got None")
        if not isinstance(shadow_prompt, str) or not shadow_prompt.strip():
            raise InvalidInput(
                f"shadow_prompt must be a non-blank string, got {describe(shadow_prompt)}"
            )
        if isinstance(entry_chars, bool) or not isinstance(entry_chars, int) or entry_chars < 20:
            raise InvalidInput(f"entry_chars must be an integer >= 20, got {describe(entry_chars)}")
        if file_operations is not None:
            check_function(file_operations, "file_operations", "(events) -> FilesTouched, or None")
        check_function(is_error, "is_error", "(ToolResult) -> bool")
        self.max_tokens = cap
        self.shadow_prompt = shadow_prompt
        self.file_operations = file_operations
        self.entry_chars = entry_chars
        self.is_error = is_error

    def __repr__(self) -> str:
        return f"ExtractiveSummarizer(max_tokens={self.max_tokens})"

    def __call__(self, request: SummaryRequest) -> list[Message]:
        """The summary turn for `request`: `[user shadow prompt, assistant summary]`.

        Raises:
            InvalidInput: `max_tokens` cannot hold even the shadow prompt and the section
                headings; `file_operations` returned something else than a `FilesTouched`.
        """
        turns, entries = self._prior_entries(request.prior_summary)
        turns, new = self._entries(request.covered, turns)
        entries += new
        files = self._files(request)
        text, kept = self._fit(counter_of(request), turns, entries, files)
        record: dict[str, JsonValue] = {"v": _VERSION, "turns": turns}
        for section, _ in _SECTIONS:
            record[section] = [e.as_json() for e in kept if e.section == section]
        metadata = {EXTRACT_METADATA_KEY: record, **files_metadata(files)}
        return [Message.user(self.shadow_prompt), Message("assistant", text, metadata=metadata)]

    # -- reading the events -------------------------------------------------------------------

    def _prior_entries(self, prior: Sequence[SessionEvent]) -> tuple[int, list[_Entry]]:
        """The turns counted so far and the entries of the prior summary."""
        turns = 0
        entries: list[_Entry] = []
        for event in prior:
            m = event.message
            if m is None or m.role != "assistant":
                continue
            record = m.metadata.get(EXTRACT_METADATA_KEY)
            if isinstance(record, dict) and record.get("v") == _VERSION:
                count = record.get("turns")
                turns = max(turns, count if type(count) is int else 0)
                for section, _ in _SECTIONS:
                    items = record.get(section)
                    for item in items if isinstance(items, list) else ():
                        if _is_entry(item):
                            entries.append(_Entry(item[0], section, item[1]))
            elif (m.text or "").strip():
                entries.append(_Entry(0, "earlier", self._line(m.text or "")))
        return turns, entries

    def _entries(self, covered: Iterable[SessionEvent], turns: int) -> tuple[int, list[_Entry]]:
        """The turns counted after `covered`, and its entries in event order."""
        entries: list[_Entry] = []
        open_calls: dict[str, tuple[int, ToolCall]] = {}  # call id -> (entry index, call)
        conclusion: _Entry | None = None
        for event in covered:
            m = event.message
            if m is None or m.role == "system":
                continue
            if event.starts_turn:
                if conclusion is not None:
                    entries.append(conclusion)
                conclusion = None
                turns += 1
                entries.append(_Entry(turns, "requests", self._line(m.text or "")))
            for call in m.tool_calls:
                open_calls[call.id] = (len(entries), call)
                entries.append(_Entry(turns, "tools", self._call(call, None)))
            for result in m.tool_results:
                found = open_calls.pop(result.call_id, None)
                failed = bool(self.is_error(result))
                if found is not None:
                    at, call = found
                    line = self._call(call, (result, failed))
                    entries[at] = _Entry(entries[at].turn, "tools", line)
                if failed:
                    line = self._line(f"{result.name}: {result.content}")
                    entries.append(_Entry(turns, "errors", line))
            for _, note in attachment_notes(m):  # images, files, audio, blocks; no reasoning
                entries.append(_Entry(turns, "attachments", self._line(note)))
            if m.role == "assistant" and (m.text or "").strip():
                conclusion = _Entry(turns, "conclusions", self._line(m.text or ""))
        if conclusion is not None:
            entries.append(conclusion)
        return turns, entries

    def _files(self, request: SummaryRequest) -> FilesTouched:
        return covered_files(self.file_operations, request.covered, request.prior_summary)

    def _line(self, text: str) -> str:
        return _clip(_SPACE.sub(" ", text).strip(), self.entry_chars)

    def _call(self, call: ToolCall, outcome: tuple[ToolResult, bool] | None) -> str:
        head = f"{call.name}({_key_arguments(call.arguments)})"
        if outcome is None:
            return self._line(f"{head} → no result")
        result, failed = outcome
        first = result.content.strip().split("\n", 1)[0]
        verdict = "error" if failed else "ok"
        return self._line(f"{head} → {verdict}" + (f": {first}" if first else ""))

    # -- fitting the cap ----------------------------------------------------------------------

    def _fit(
        self, counter: TokenCounter, turns: int, entries: list[_Entry], files: FilesTouched
    ) -> tuple[str, list[_Entry]]:
        """The summary text within the cap, and the entries it kept."""
        order = sorted(
            range(len(entries)),
            key=lambda i: (entries[i].turn, _DROP_RANK[entries[i].section], i),
        )

        def text(dropped: int, file_limit: int | None) -> tuple[str, list[_Entry]]:
            gone = set(order[:dropped])
            kept = [e for i, e in enumerate(entries) if i not in gone]
            return _render(turns, kept, dropped, files, file_limit), kept

        def fits(dropped: int, file_limit: int | None = None) -> bool:
            summary = text(dropped, file_limit)[0]
            return turn_tokens(counter, self.shadow_prompt, summary) <= self.max_tokens

        dropped = _least(fits, len(entries))
        if dropped is not None:
            return text(dropped, None)
        n_files = len(files.read) + len(files.modified)
        limit = _most(lambda k: fits(len(entries), k), n_files)
        if limit is None:
            least = turn_tokens(counter, self.shadow_prompt, text(len(entries), 0)[0])
            raise InvalidInput(
                f"max_tokens={self.max_tokens} cannot hold an extractive summary: its shadow "
                f"prompt and headings alone take {least} tokens by {counter!r}; raise "
                "max_tokens; nothing was written"
            )
        return text(len(entries), limit)


def _least(ok: Callable[[int], bool], top: int) -> int | None:
    """The least n in 0..top with ok(n) (ok growing with n), or None when ok(top) is false."""
    if not ok(top):
        return None
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _most(ok: Callable[[int], bool], top: int) -> int | None:
    """The greatest n in 0..top with ok(n) (ok shrinking with n), or None when ok(0) is false."""
    if not ok(0):
        return None
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _render(
    turns: int, kept: list[_Entry], dropped: int, files: FilesTouched, file_limit: int | None
) -> str:
    span = f" of turns 1-{turns}" if turns else ""
    lines = [f"Summary{span} (extracted, no model):"]
    if dropped:
        lines.append(f"({dropped} older entries left out to fit the token cap)")
    for section, title in _SECTIONS:
        items = [e for e in kept if e.section == section]
        if items:
            lines.append(title)
            lines += [f"- T{e.turn}: {e.text}" if e.turn else f"- {e.text}" for e in items]
    section = files_section(files, file_limit)
    if section:
        lines.append(section)
    return "\n".join(lines)


def _is_entry(item: object) -> bool:
    return (
        isinstance(item, list)
        and len(item) == 2
        and type(item[0]) is int
        and isinstance(item[1], str)
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _key_arguments(arguments: str, limit: int = 120) -> str:
    """`key=value, ...` for a call's JSON arguments: at most four keys, strings cut at 60
    characters; the raw text, cut, when they are not a JSON object."""
    try:
        args = json.loads(arguments)
    except ValueError:
        return _clip(_SPACE.sub(" ", arguments).strip(), limit)
    if not isinstance(args, dict):
        return _clip(json.dumps(args, ensure_ascii=False), limit)
    parts = []
    for key, value in list(args.items())[:4]:
        if isinstance(value, str):
            shown = _clip(_SPACE.sub(" ", value), 60)
        else:
            shown = _clip(json.dumps(value, ensure_ascii=False), 60)
        parts.append(f"{key}={shown}")
    if len(args) > 4:
        parts.append("…")
    return _clip(", ".join(parts), limit)
