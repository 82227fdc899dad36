"""Which files a conversation's tool calls read and modified, for summaries.

`FileOperations` reads the tool calls of a list of events: a call to a reading tool (e.g.
`read_file`) reads the paths in its arguments, a call to a modifying tool (e.g. `write_file`)
modifies them, and a patch tool (e.g. `apply_patch`) modifies the files its patch names. A call
counts only when its result is among the events given: a call that never ran, or whose turn was
cut short, touched nothing. Shell commands are out of scope: a `bash("sed -i ...")` is not read.

The sets a summary was written with ride along in the summary message's metadata
(`FILES_METADATA_KEY`), so a later pass merges them back (`prior_files`) and the lists survive
any number of compactions. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Final, NamedTuple

from turnlog.compaction._checks import describe
from turnlog.errors import InvalidInput
from turnlog.events import JsonValue, SessionEvent, ToolCall

__all__ = [
    "DEFAULT_FILE_OPERATIONS",
    "DEFAULT_MODIFY_TOOLS",
    "DEFAULT_PATCH_ARGUMENTS",
    "DEFAULT_PATCH_TOOLS",
    "DEFAULT_PATH_ARGUMENTS",
    "DEFAULT_READ_TOOLS",
    "FILES_METADATA_KEY",
    "FileOperations",
    "FilesTouched",
    "files_metadata",
    "files_section",
    "prior_files",
]

FILES_METADATA_KEY: Final = "turnlog.files"
"""The key of a summary message's metadata that holds `{"read": [...], "modified": [...]}`."""

DEFAULT_READ_TOOLS: Final = frozenset(
    {
        "read_file",
        "read_text_file",
        "read_multiple_files",
        "read_many_files",
        "view_file",
        "open_file",
        "get_file_contents",
        "Read",
    }
)
"""Tool names that read the files in their path arguments."""

DEFAULT_MODIFY_TOOLS: Final = frozenset(
    {
        "write_file",
        "edit_file",
        "create_file",
        "delete_file",
        "remove_file",
        "move_file",
        "rename_file",
        "append_file",
        "append_to_file",
        "replace_in_file",
        "str_replace",
        "multi_edit",
        "Write",
        "Edit",
        "MultiEdit",
        "NotebookEdit",
    }
)
"""Tool names that modify (create, change, delete, move) the files in their path arguments."""

DEFAULT_PATCH_TOOLS: Final = frozenset({"apply_patch", "apply_diff", "patch"})
"""Tool names whose patch text names the files they modify."""

DEFAULT_PATH_ARGUMENTS: Final = (
    "path",
    "paths",
    "file_path",
    "file_paths",
    "filepath",
    "filename",
    "file",
    "files",
    "target_file",
    "notebook_path",
    "source",
    "destination",
    "old_path",
    "new_path",
)
"""The argument names that hold a path (a string) or several (a list of strings)."""

DEFAULT_PATCH_ARGUMENTS: Final = ("input", "patch", "diff")
"""The argument names of a patch tool that hold the patch text."""

# "*** Update File: a.py", "*** Move to: b.py": the apply_patch envelope
_ENVELOPE: Final = re.compile(r"^\*\*\* (?:(?:Add|Update|Delete) File|Move to): (.+?)\s*$")
# "--- a/a.py" then "+++ b/a.py": a unified diff's file header
_OLD: Final = re.compile(r"^--- (.+?)(?:\t.*)?\s*$")
_NEW: Final = re.compile(r"^\+\+\+ (.+?)(?:\t.*)?\s*$")


class FilesTouched(NamedTuple):
    """The files a conversation read and modified, each sorted and without repeats.

    A file that was modified is listed under `modified` only, even if it was read too.
    """

    read: tuple[str, ...] = ()
    """Files read and never modified."""
    modified: tuple[str, ...] = ()
    """Files created, changed, deleted or moved."""

    def merged(self, other: FilesTouched) -> FilesTouched:
        """Both sets together (a file modified in either is modified)."""
        return _touched(set(self.read) | set(other.read), set(self.modified) | set(other.modified))

    def __bool__(self) -> bool:
        return bool(self.read or self.modified)


def _touched(read: Iterable[str], modified: Iterable[str]) -> FilesTouched:
    changed = set(modified)
    return FilesTouched(tuple(sorted(set(read) - changed)), tuple(sorted(changed)))


def _names(value: object, what: str) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidInput(f"{what} must be a collection of strings, got {describe(value)}")
    names = list(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"{what} must hold non-empty strings, got {describe(name)}")
    return frozenset(names)


class FileOperations:
    """Extracts the files that tool calls read and modified from a list of events.

    Call it with events (oldest first) to get a `FilesTouched`. A call counts only when a tool
    result answers it among those events (a result answers the latest earlier call with its
    `call_id`). Its arguments are parsed as JSON; every path argument present is taken, a string
    as one path and a list as several (other values, and arguments that are not a JSON object,
    are skipped). Paths are kept as given, stripped of surrounding spaces; none is resolved.

    Args:
        read_tools: tool names that read the files in their path arguments.
        modify_tools: tool names that modify them.
        patch_tools: tool names whose patch text (in `patch_arguments`) names the files they
            modify: the `*** Update File:` envelope of apply_patch, or a unified diff's
            `---`/`+++` lines. Their path arguments count too.
        path_arguments: the argument names that hold paths.
        patch_arguments: the argument names that hold a patch's text.

    Raises:
        InvalidInput: an argument is not a collection of non-empty strings (a bare string is
            refused: pass `{"read_file"}`, not `"read_file"`).
    """

    def __init__(
        self,
        *,
        read_tools: Iterable[str] = DEFAULT_READ_TOOLS,
        modify_tools: Iterable[str] = DEFAULT_MODIFY_TOOLS,
        patch_tools: Iterable[str] = DEFAULT_PATCH_TOOLS,
        path_arguments: Sequence[str] = DEFAULT_PATH_ARGUMENTS,
        patch_arguments: Sequence[str] = DEFAULT_PATCH_ARGUMENTS,
    ) -> None:
        self.read_tools = _names(read_tools, "read_tools")
        self.modify_tools = _names(modify_tools, "modify_tools")
        self.patch_tools = _names(patch_tools, "patch_tools")
        self.path_arguments = tuple(dict.fromkeys(_ordered(path_arguments, "path_arguments")))
        self.patch_arguments = tuple(dict.fromkeys(_ordered(patch_arguments, "patch_arguments")))

    def __repr__(self) -> str:
        return (
            f"FileOperations(read_tools={sorted(self.read_tools)!r}, "
            f"modify_tools={sorted(self.modify_tools)!r}, "
            f"patch_tools={sorted(self.patch_tools)!r})"
        )

    def __call__(self, events: Iterable[SessionEvent]) -> FilesTouched:
        """The files the answered tool calls of `events` read and modified."""
        read: set[str] = set()
        modified: set[str] = set()
        for call in answered_calls(events):
            if call.name in self.read_tools:
                read.update(self.paths(call))
            elif call.name in self.modify_tools or call.name in self.patch_tools:
                modified.update(self.paths(call))
        return _touched(read, modified)

    def paths(self, call: ToolCall) -> list[str]:
        """The paths named by `call`'s arguments (and its patch, for a patch tool)."""
        args = _arguments(call)
        if args is None:
            return []
        found = [p for key in self.path_arguments for p in _strings(args.get(key))]
        if call.name in self.patch_tools:
            for key in self.patch_arguments:
                text = args.get(key)
                if isinstance(text, str):
                    found += patch_paths(text)
        return [p for p in (p.strip() for p in found) if p]


def _ordered(value: object, what: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInput(f"{what} must be a sequence of strings, got {describe(value)}")
    return sorted(_names(value, what), key=list(value).index)


def _arguments(call: ToolCall) -> Mapping[str, JsonValue] | None:
    try:
        args = json.loads(call.arguments)
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


def _strings(value: JsonValue) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def patch_paths(text: str) -> list[str]:
    """The files a patch names: apply_patch's `*** Add/Update/Delete File:` and `*** Move to:`
    lines; or, in a patch without them, each `---` line directly followed by a `+++` line (a
    unified diff's header: the new path, or the old one for a deleted file, without its `a/` or
    `b/` prefix)."""
    lines = text.splitlines()
    envelope = [m.group(1) for m in map(_ENVELOPE.match, lines) if m]
    if envelope:
        return envelope
    out: list[str] = []
    for old_line, new_line in pairwise(lines):
        old, new = _OLD.match(old_line), _NEW.match(new_line)
        if old and new:
            path = new.group(1) if new.group(1) != "/dev/null" else old.group(1)
            if path != "/dev/null":
                out.append(path[2:] if path[:2] in ("a/", "b/") else path)
    return out


def answered_calls(events: Iterable[SessionEvent]) -> list[ToolCall]:
    """The tool calls of `events` that a successful tool result among them answers, in call
    order.

    A result answers the latest earlier call with its `call_id` that no result answered yet;
    a result with no such call answers nothing. A failed result (`is_error`) answers its call
    without counting it: the tool did not do what it was asked.
    """
    calls: list[ToolCall] = []
    answered: list[bool] = []
    open_calls: dict[str, list[int]] = {}
    for event in events:
        m = event.message
        if m is None:
            continue
        for call in m.tool_calls:
            open_calls.setdefault(call.id, []).append(len(calls))
            calls.append(call)
            answered.append(False)
        for result in m.tool_results:
            waiting = open_calls.get(result.call_id)
            if waiting:
                answered[waiting.pop()] = not result.is_error
    return [c for c, ok in zip(calls, answered, strict=True) if ok]


def prior_files(prior_summary: Iterable[SessionEvent]) -> FilesTouched:
    """The files recorded in the metadata of a prior summary's messages (see
    `FILES_METADATA_KEY`); entries that are not lists of strings are ignored."""
    read: set[str] = set()
    modified: set[str] = set()
    for event in prior_summary:
        record = event.message.metadata.get(FILES_METADATA_KEY) if event.message else None
        if isinstance(record, dict):
            for paths, found in ((read, record.get("read")), (modified, record.get("modified"))):
                if isinstance(found, list):
                    paths.update(p for p in found if isinstance(p, str) and p)
    return _touched(read, modified)


def covered_files(
    file_operations: Callable[[Sequence[SessionEvent]], object] | None,
    covered: Sequence[SessionEvent],
    prior_summary: Iterable[SessionEvent],
) -> FilesTouched:
    """What a summarizer lists: the files `covered` read and modified (by `file_operations`),
    merged with those recorded on the prior summary; none without `file_operations`.

    Raises:
        InvalidInput: `file_operations` returned something else than a `FilesTouched`.
    """
    if file_operations is None:
        return FilesTouched()
    found = file_operations(covered)
    if not isinstance(found, FilesTouched):
        raise InvalidInput(
            f"file_operations returned {describe(found)}, not a FilesTouched; nothing was written"
        )
    return prior_files(prior_summary).merged(found)


def files_metadata(files: FilesTouched) -> dict[str, JsonValue]:
    """The metadata that records `files` on a summary message; `{}` when there are none."""
    if not files:
        return {}
    return {FILES_METADATA_KEY: {"read": list(files.read), "modified": list(files.modified)}}


def files_section(files: FilesTouched, limit: int | None = None) -> str:
    """`files` as text: a "Files read:" and a "Files modified:" list, one path per line.

    Args:
        files: the files.
        limit: at most this many paths in all (modified first); the rest are counted in a
            "... and N more" line. None lists every path.

    Returns:
        The section, or "" when there are no files.
    """
    if not files:
        return ""
    room = len(files.read) + len(files.modified) if limit is None else max(limit, 0)
    parts: list[str] = []
    for title, paths in (("Files modified:", files.modified), ("Files read:", files.read)):
        if not paths:
            continue
        shown = paths[:room]
        room -= len(shown)
        lines = [title, *(f"- {p}" for p in shown)]
        if len(shown) < len(paths):
            lines.append(f"- ... and {len(paths) - len(shown)} more")
        parts.append("\n".join(lines))
    return "\n".join(parts)


DEFAULT_FILE_OPERATIONS: Final = FileOperations()
"""The extractor the summarizers use unless told otherwise: every default above."""
