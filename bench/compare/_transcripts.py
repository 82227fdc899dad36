"""Tool-calling transcripts from BFCL's multi-turn data, a common message form, and an oracle.

Not a benchmark itself. `transcripts()` reads the multi-turn categories of the `bfcl-eval` wheel
(fetched once by `bench/toolsearch_data.py` into `bench/.cache/`): each entry's `question` is a
list of turns, each a list of user messages; the same line of `possible_answer/` holds, per
turn, the ground-truth calls as Python call expressions (`"mv(source='a', destination='b')"`).
A turn becomes: the user's message; when the ground truth has calls, one assistant message
making all of them (parallel calls), one tool result each (deterministic text, generated from
the call), then the assistant's answer; without calls, the answer alone.

`Msg` is the common form every framework's prompt is converted to before `breaks` judges it.
`breaks` is written from the providers' rules, apart from `turnlog.rules` and from
tests/prompt_rules.py.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))

from toolsearch_data import BFCL_VERSION, wheel  # noqa: E402

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param")
"""The multi-turn categories read by default (200 conversations each)."""

SYSTEM = (
    "You operate the user's tools: a file system, messaging, ticketing, trading, travel booking "
    "and vehicle control. Call the tools the request needs, then say what you did."
)

_FILLER = [
    "entry",
    "record",
    "status",
    "value",
    "field",
    "item",
    "total",
    "path",
    "line",
    "node",
    "index",
    "batch",
    "result",
    "detail",
    "owner",
    "created",
    "updated",
    "size",
    "count",
    "level",
    "label",
    "group",
    "order",
    "balance",
    "ticket",
    "message",
    "vehicle",
]

KINDS = ("orphan result", "unanswered call", "first not user", "empty", "lost request")
"""The five ways a prompt is counted as broken, in table order."""


@dataclass(frozen=True)
class Call:
    """One tool call: its id, the function's name and its JSON arguments."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Msg:
    """A message as a provider receives it.

    `uid` names the transcript message it came from, so a prompt can be checked for the user's
    newest request whatever the framework's types did to it.
    """

    role: str
    text: str = ""
    calls: tuple[Call, ...] = ()
    call_id: str | None = None
    name: str = ""
    uid: str = ""


@dataclass
class Turn:
    """One user turn of a transcript: the user's message and what follows it."""

    user: Msg
    calls: Msg | None
    results: list[Msg]
    answer: Msg


@dataclass
class Transcript:
    """A whole conversation: its BFCL id, the system prompt and its turns."""

    id: str
    system: Msg
    turns: list[Turn] = field(default_factory=list)

    def messages(self) -> Iterator[Msg]:
        """Every message in order, the system prompt first."""
        yield self.system
        for turn in self.turns:
            yield turn.user
            if turn.calls is not None:
                yield turn.calls
                yield from turn.results
            yield turn.answer


@dataclass(frozen=True)
class Request:
    """A model request of a transcript: the turn it belongs to and what it follows.

    `stage` 0 is the request right after the user's message; 1 the one after the tool results.
    """

    turn: int
    stage: int


def requests(transcript: Transcript) -> Iterator[Request]:
    """Every model request of `transcript`, in order."""
    for i, turn in enumerate(transcript.turns):
        yield Request(i, 0)
        if turn.calls is not None:
            yield Request(i, 1)


def history_at(transcript: Transcript, request: Request) -> list[Msg]:
    """Everything said before `request`, the system prompt first: the untrimmed history."""
    out = [transcript.system]
    for turn in transcript.turns[: request.turn]:
        out += [turn.user, *([turn.calls] if turn.calls else []), *turn.results, turn.answer]
    turn = transcript.turns[request.turn]
    out.append(turn.user)
    if request.stage == 1:
        assert turn.calls is not None
        out += [turn.calls, *turn.results]
    return out


def _digest(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode()).digest()[:8], "big")


def _words(seed: int, n: int) -> str:
    return " ".join(_FILLER[((seed >> (i % 48)) + 7 * i) % len(_FILLER)] for i in range(n))


def parse_call(source: str) -> tuple[str, dict[str, Any]]:
    """A ground-truth call expression as (function name, keyword arguments).

    Positional arguments, which BFCL uses now and then (`sort('final_report.pdf')`), are named
    `arg0`, `arg1`, ...
    """
    node = ast.parse(source.strip(), mode="eval").body
    if not isinstance(node, ast.Call):
        raise ValueError(f"not a call: {source!r}")
    func = node.func
    name = func.id if isinstance(func, ast.Name) else ast.unparse(func)
    arguments: dict[str, Any] = {f"arg{i}": ast.literal_eval(a) for i, a in enumerate(node.args)}
    for keyword in node.keywords:
        arguments[str(keyword.arg)] = ast.literal_eval(keyword.value)
    return name, arguments


def tool_output(conversation: str, call: Call) -> str:
    """A deterministic tool result for `call`: 10-150 words of JSON, seeded by the call."""
    seed = _digest(conversation, call.id, call.name, call.arguments)
    size = 10 + seed % 141
    body = {"function": call.name, "status": "ok", "output": _words(seed, size)}
    return json.dumps(body)


def _build(entry_id: str, question: Sequence[Any], truth: Sequence[Any]) -> Transcript:
    transcript = Transcript(entry_id, Msg("system", SYSTEM, uid=f"{entry_id}/system"))
    for index, (asked, calls) in enumerate(zip(question, truth, strict=False)):
        texts = [str(m.get("content", "")) for m in asked if m.get("role") == "user"]
        if not texts:
            continue  # a miss_func turn that only hands the model a missing function
        uid = f"{entry_id}/{index}"
        user = Msg("user", "\n".join(texts), uid=f"{uid}/user")
        made = []
        for n, source in enumerate(calls):
            name, arguments = parse_call(source)
            made.append(Call(f"call_{index}_{n}", name, json.dumps(arguments, sort_keys=True)))
        seed = _digest(entry_id, str(index))
        if made:
            call_msg = Msg("assistant", "", tuple(made), uid=f"{uid}/calls")
            results = [
                Msg(
                    "tool", tool_output(entry_id, c), call_id=c.id, name=c.name, uid=f"{uid}/{c.id}"
                )
                for c in made
            ]
            said = "Done: " + ", ".join(c.name for c in made) + ". " + _words(seed, 8 + seed % 30)
        else:
            call_msg, results = None, []
            said = "I cannot do that with the tools I have. " + _words(seed, 8 + seed % 30)
        answer = Msg("assistant", said, uid=f"{uid}/answer")
        transcript.turns.append(Turn(user, call_msg, results, answer))
    return transcript


def _lines(archive: zipfile.ZipFile, member: str) -> Iterator[dict[str, Any]]:
    for line in archive.read(member).decode("utf-8").splitlines():
        if line.strip():
            yield json.loads(line)


def transcripts(
    categories: Sequence[str] = CATEGORIES, limit: int | None = None
) -> list[Transcript]:
    """The transcripts of `categories` (the first `limit` of each when given)."""
    path = wheel(BENCH / ".cache")
    out: list[Transcript] = []
    with zipfile.ZipFile(path) as archive:
        for category in categories:
            entries = list(_lines(archive, f"bfcl_eval/data/BFCL_v4_{category}.json"))
            answers = {
                a["id"]: a["ground_truth"]
                for a in _lines(archive, f"bfcl_eval/data/possible_answer/BFCL_v4_{category}.json")
            }
            for entry in entries[:limit]:
                out.append(_build(entry["id"], entry["question"], answers[entry["id"]]))
    return out


def merge_assistant(messages: Sequence[Msg]) -> list[Msg]:
    """Consecutive assistant messages as one (text, then all calls), as a chat API receives
    items that each carry one call (the Agents SDK's `function_call` items)."""
    out: list[Msg] = []
    for m in messages:
        if m.role == "assistant" and out and out[-1].role == "assistant":
            prev = out[-1]
            text = " ".join(t for t in (prev.text, m.text) if t)
            out[-1] = Msg("assistant", text, prev.calls + m.calls, uid=prev.uid or m.uid)
        else:
            out.append(m)
    return out


def breaks(prompt: Sequence[Msg], newest_user: str) -> set[str]:
    """The kinds of `KINDS` that `prompt` breaks; `newest_user` is the uid of the user's newest
    message in the untrimmed history."""
    found: set[str] = set()
    rest = [m for m in prompt if m.role != "system"]
    if not rest:
        found.add("empty")
    elif rest[0].role != "user":
        found.add("first not user")
    if not any(m.role == "user" and m.uid == newest_user for m in rest):
        found.add("lost request")
    open_calls: set[str] = set()
    answered: set[str] = set()
    for m in rest:
        if m.role == "tool":
            if m.call_id not in open_calls or m.call_id in answered:
                found.add("orphan result")
            answered.add(str(m.call_id))
            continue
        if open_calls - answered:
            found.add("unanswered call")
        open_calls = {c.id for c in m.calls} if m.role == "assistant" else set()
        answered = set()
    if open_calls - answered:
        found.add("unanswered call")  # a prompt may not end on an open call either
    return found


__all__ = [
    "BFCL_VERSION",
    "CATEGORIES",
    "KINDS",
    "SYSTEM",
    "Call",
    "Msg",
    "Request",
    "Transcript",
    "breaks",
    "history_at",
    "merge_assistant",
    "requests",
    "transcripts",
]
