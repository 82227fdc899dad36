"""The Berkeley Function Calling Leaderboard data for the tool-search benchmark.

Gets the `bfcl-eval` wheel from PyPI with `pip download --no-deps` into a cache directory (once),
and reads the categories' JSON-lines files straight from the wheel with `zipfile`: each line of
`bfcl_eval/data/BFCL_v4_<category>.json` holds an id, the user's question and the candidate
functions; the same line of `bfcl_eval/data/possible_answer/BFCL_v4_<category>.json` names the
expected call. Not a benchmark itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnlog.toolsearch.base import ToolReference

BFCL_VERSION = "2026.3.23"
"""The bfcl-eval release the figures in docs/benchmarks.md were measured on."""

CATEGORIES = ("simple_python", "multiple")
"""The categories whose questions are asked and whose functions form the catalogue."""

DISTRACTORS = ("parallel", "parallel_multiple", "live_simple", "live_multiple")
"""Categories whose functions only enlarge the catalogue (to about 1,300), for a harder run."""

# BFCL's own type names, mapped to JSON-schema types the way its OpenAI handler does.
_JSON_TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "list": "array",
    "any": "string",
    "bool": "boolean",
    "double": "number",
    "long": "integer",
    "short": "integer",
    "byte": "integer",
    "char": "string",
}


@dataclass(frozen=True)
class Question:
    """One BFCL entry: its id, the user's text and the function the answer calls."""

    id: str
    text: str
    expected: str


def wheel(cache_dir: Path, version: str = BFCL_VERSION) -> Path:
    """The bfcl-eval wheel in `cache_dir`, downloaded with pip the first time.

    Raises:
        RuntimeError: pip could not get it.
    """
    name = f"bfcl_eval-{version}-py3-none-any.whl"
    path = cache_dir / name
    if path.exists():
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--quiet",
        "--dest",
        str(cache_dir),
        f"bfcl-eval=={version}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not path.exists():
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr.strip()}")
    return path


def _lines(archive: zipfile.ZipFile, member: str) -> Iterator[dict[str, Any]]:
    for line in archive.read(member).decode("utf-8").splitlines():
        if line.strip():
            yield json.loads(line)


def _user_text(question: object) -> str:
    """The user's messages of a BFCL question (a list of turns, each a list of messages)."""
    texts: list[str] = []
    for turn in question if isinstance(question, list) else []:
        for message in turn if isinstance(turn, list) else [turn]:
            if isinstance(message, Mapping) and message.get("role") == "user":
                texts.append(str(message.get("content", "")))
    return "\n".join(texts)


def _tool(function: Mapping[str, Any]) -> ToolReference:
    return ToolReference(
        function["name"], function.get("description", ""), function.get("parameters")
    )


def load(path: Path, *, distractors: bool = False) -> tuple[list[Question], list[ToolReference]]:
    """The questions of `CATEGORIES` and the union of their functions (and, with
    `distractors`, of the functions of `DISTRACTORS` too).

    Functions are deduplicated by name; the first description and parameters seen are kept.
    """
    questions: list[Question] = []
    tools: dict[str, ToolReference] = {}
    with zipfile.ZipFile(path) as archive:
        for category in CATEGORIES:
            entries = _lines(archive, f"bfcl_eval/data/BFCL_v4_{category}.json")
            answers = {
                a["id"]: a["ground_truth"]
                for a in _lines(archive, f"bfcl_eval/data/possible_answer/BFCL_v4_{category}.json")
            }
            for entry in entries:
                for function in entry["function"]:
                    tools.setdefault(function["name"], _tool(function))
                (expected,) = answers[entry["id"]][0].keys()
                questions.append(Question(entry["id"], _user_text(entry["question"]), expected))
        for category in DISTRACTORS if distractors else ():
            for entry in _lines(archive, f"bfcl_eval/data/BFCL_v4_{category}.json"):
                for function in entry["function"]:
                    tools.setdefault(function["name"], _tool(function))
    return questions, list(tools.values())


def _json_schema(node: object) -> object:
    if isinstance(node, Mapping):
        out: dict[str, object] = {}
        for key, value in node.items():
            if key == "type" and isinstance(value, str):
                out[key] = _JSON_TYPES.get(value, value)
            elif key == "optional":
                continue  # BFCL-only marker; "required" says it already
            else:
                out[key] = _json_schema(value)
        return out
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    return node


def openai_tool(tool: ToolReference) -> dict[str, object]:
    """The tool as a chat API receives it: an OpenAI function tool with a JSON schema.

    Dots in names become underscores, as BFCL does for OpenAI models (their names allow
    `[a-zA-Z0-9_-]` only).
    """
    parameters = _json_schema(tool.parameters or {"type": "object", "properties": {}})
    return {
        "type": "function",
        "function": {
            "name": tool.name.replace(".", "_"),
            "description": tool.description,
            "parameters": parameters,
        },
    }
