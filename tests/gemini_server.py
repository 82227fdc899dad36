"""A real HTTP server that speaks the Gemini API's wire format, for the tests.

`GeminiServer` is a `ScriptedServer` (tests/model_servers.py): it listens on 127.0.0.1, the test
scripts its replies in order (`reply_json(gemini_reply(...))`, `reply_sse(gemini_events(...))`,
`reply_json(gemini_error(...), status)`) and reads the requests it got; the official
`google-genai` client talks to it through `base_url`. It issues thought signatures as Gemini
does (standard base64 of opaque bytes, on function calls, text and thought parts) and, like the
Gemini API, answers 400 to a `generateContent` / `streamGenerateContent` request that breaks its
rules (`gemini_refusal`); the scripted reply then waits for the next request
(`enforce_gemini = False` turns the checks off):

- a part sent with a `thoughtSignature` whose bytes it never issued ("a changed one"), or a
  function call carrying the signature issued with another call;
- a function call of the current turn (the contents after the last user content that answers
  no function call) that it issued with a signature, sent back without it;
- function responses that do not answer the model content before them: not as many as its
  function calls, a name it did not call, or an id that is not the call's.

Signatures are compared as bytes, as Gemini does (the client writes base64 in its own
alphabet).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from model_servers import Reply, Request, ScriptedServer

MODEL = "gemini-test-001"

_ids = itertools.count(1)


def signature(n: int) -> str:
    """An opaque signature as Gemini issues one: standard base64 (with '+' and '/')."""
    return base64.b64encode(b"\xfb\xff\xbf" + f"signature-{n}".encode()).decode()


def text(value: str, sig: str | None = None) -> dict:
    part: dict[str, Any] = {"text": value}
    if sig is not None:
        part["thoughtSignature"] = sig
    return part


def thought(value: str, sig: str | None = None) -> dict:
    part: dict[str, Any] = {"text": value, "thought": True}
    if sig is not None:
        part["thoughtSignature"] = sig
    return part


def call(name: str, args: dict, sig: str | None = None, call_id: str | None = None) -> dict:
    body: dict[str, Any] = {"name": name, "args": args}
    if call_id is not None:
        body["id"] = call_id
    part: dict[str, Any] = {"functionCall": body}
    if sig is not None:
        part["thoughtSignature"] = sig
    return part


def usage_metadata(
    prompt: int = 40, candidates: int = 7, thoughts: int | None = None, cached: int | None = None
) -> dict:
    usage: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": candidates}
    if thoughts is not None:
        usage["thoughtsTokenCount"] = thoughts
    if cached is not None:
        usage["cachedContentTokenCount"] = cached
    usage["totalTokenCount"] = prompt + candidates + (thoughts or 0)
    return usage


def gemini_reply(
    parts: list[dict],
    *,
    finish: str | None = "STOP",
    usage: dict | None = None,
    model: str = MODEL,
    response_id: str | None = None,
) -> dict:
    """A `generateContent` reply of one candidate."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": usage or usage_metadata(),
        "modelVersion": model,
        "responseId": response_id or f"resp-{next(_ids)}",
    }


def gemini_events(
    chunks: list[list[dict]],
    *,
    finish: str | None = "STOP",
    usage: dict | None = None,
    model: str = MODEL,
) -> list[tuple[str | None, Any]]:
    """A streamed reply (`alt=sse`): each chunk's parts in one event; the usage on every
    event, the finishReason on the last (none when `finish` is None: a stream cut short)."""
    response_id = f"resp-{next(_ids)}"
    events = []
    for i, parts in enumerate(chunks):
        last = i == len(chunks) - 1
        body = gemini_reply(
            parts,
            finish=finish if last else None,
            usage=usage,
            model=model,
            response_id=response_id,
        )
        events.append((None, body))
    return events


def gemini_error(code: int, status: str, message: str) -> dict:
    return {"error": {"code": code, "message": message, "status": status}}


# -- the rules -------------------------------------------------------------------------------------

_OPAQUE = {"args", "response", "parametersJsonSchema", "parameters", "responseJsonSchema"}
"""Fields whose value is the caller's JSON (a Struct, a schema): their keys are kept as sent."""


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def wire(value: Any) -> Any:
    """A request body as Gemini reads it: field names in lowerCamelCase. Google's JSON parsers
    take a field's proto name (snake_case) too, which the client sends for some nested fields
    (`inline_data.mime_type`, `parameters_json_schema`)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            name = _camel(key)
            out[name] = item if name in _OPAQUE else wire(item)
        return out
    if isinstance(value, list):
        return [wire(item) for item in value]
    return value


def _bytes(sig: Any) -> bytes | None:
    if not isinstance(sig, str):
        return None
    try:
        return base64.b64decode(sig.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None


def _call_key(part: dict) -> tuple[str, str, Any]:
    body = part.get("functionCall") or {}
    return body.get("name"), json.dumps(body.get("args"), sort_keys=True), body.get("id")


@dataclass
class IssuedSignatures:
    """The signatures the server gave out: every one, and those of function calls by call."""

    any: set[bytes] = field(default_factory=set)
    calls: dict[tuple[str, str, Any], bytes] = field(default_factory=dict)

    def take(self, parts: list[Any]) -> None:
        for part in parts:
            if not isinstance(part, dict):
                continue
            sig = _bytes(part.get("thoughtSignature"))
            if sig is None:
                continue
            self.any.add(sig)
            if "functionCall" in part:
                self.calls[_call_key(part)] = sig


def _reply_parts(reply: Reply) -> list[Any]:
    bodies: list[Any] = []
    if reply.sse is None:
        try:
            bodies.append(json.loads(reply.body))
        except ValueError:
            return []
    else:
        for chunk in reply.sse:
            for line in chunk.decode(errors="replace").split("\n"):
                if line.startswith("data: "):
                    with contextlib.suppress(ValueError):
                        bodies.append(json.loads(line[6:]))
    parts: list[Any] = []
    for body in bodies:
        candidates = body.get("candidates") if isinstance(body, dict) else None
        for candidate in candidates or []:
            parts += ((candidate.get("content") or {}).get("parts")) or []
    return parts


def gemini_refusal(body: Any, issued: IssuedSignatures) -> str | None:
    """What the Gemini API says (400) to a request `body` that breaks its rules (see the module
    docstring); None when it keeps them."""
    if not isinstance(body, dict):
        return None
    contents = body.get("contents") or []
    answers = [
        i
        for i, c in enumerate(contents)
        if c.get("role") == "user"
        and not any("functionResponse" in p for p in c.get("parts") or [])
    ]
    turn_start = answers[-1] if answers else 0
    for i, content in enumerate(contents):
        parts = content.get("parts") or []
        for j, part in enumerate(parts):
            sig = part.get("thoughtSignature")
            if sig is not None and _bytes(sig) not in issued.any:
                return (
                    f"Corrupted thought signature in contents[{i}].parts[{j}]: it is not one "
                    "the model issued."
                )
            if "functionCall" in part:
                key = _call_key(part)
                expected = issued.calls.get(key)
                if sig is not None and expected != _bytes(sig):
                    return (
                        f"Thought signature of contents[{i}].parts[{j}] was issued with "
                        "another function call."
                    )
                if sig is None and expected is not None and i > turn_start:
                    return (
                        f"Function call `{key[0]}` in the {i + 1}. content block is missing a "
                        "thought_signature. See "
                        "https://ai.google.dev/gemini-api/docs/thought-signatures"
                    )
        if content.get("role") != "model":
            continue
        calls = [p["functionCall"] for p in parts if "functionCall" in p]
        if not calls:
            continue
        after = contents[i + 1] if i + 1 < len(contents) else None
        answer = (after or {}).get("parts") or []
        responses = [p["functionResponse"] for p in answer if "functionResponse" in p]
        if after is None:
            continue  # the last content: nothing answers it yet (not a request Gemini takes)
        if len(responses) != len(calls):
            return (
                "Please ensure that the number of function response parts is equal to the "
                f"number of function call parts of the function call turn (contents[{i}] has "
                f"{len(calls)}, contents[{i + 1}] {len(responses)})."
            )
        names = sorted(c.get("name") for c in calls)
        if sorted(r.get("name") for r in responses) != names:
            return f"The function responses in contents[{i + 1}] do not name the calls."
        ids = {c.get("id") for c in calls if c.get("id")}
        if {r.get("id") for r in responses if r.get("id")} != ids:
            return f"The function response ids in contents[{i + 1}] do not match the calls."
    for i, content in enumerate(contents):
        has_responses = any("functionResponse" in p for p in content.get("parts") or [])
        before = contents[i - 1] if i else {}
        if has_responses and not any(
            "functionCall" in p for p in before.get("parts") or [] if before.get("role") == "model"
        ):
            return f"contents[{i}] holds function responses that answer no function call."
    return None


class GeminiServer(ScriptedServer):
    """A `ScriptedServer` that keeps the Gemini API's rules (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.enforce_gemini = True
        """Answer 400 as the Gemini API does to a request that breaks its rules."""
        self.signatures = IssuedSignatures()
        """The signatures of every reply sent (JSON or SSE)."""
        self.refusals: list[str] = []
        """What each refused request was told."""
        self.rewrite = self._gemini

    def _gemini(self, request: Request, reply: Reply) -> Reply:
        if ":generateContent" not in request.path and ":streamGenerateContent" not in request.path:
            return reply
        body = wire(request.body)
        refused = gemini_refusal(body, self.signatures) if self.enforce_gemini else None
        if refused is not None:
            self.replies.appendleft(reply)  # it waits for a request the server takes
            self.refusals.append(refused)
            error = gemini_error(400, "INVALID_ARGUMENT", refused)
            return Reply(400, json.dumps(error).encode())
        if reply.status == 200:
            self.signatures.take(_reply_parts(reply))
        return reply

    def body(self, index: int) -> Any:
        """Request `index`'s body as Gemini reads it (`wire`)."""
        return wire(self.requests[index].body)

    def last_body(self) -> Any:
        return self.body(-1)
