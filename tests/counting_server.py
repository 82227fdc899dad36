"""A test server that reports token counts as a provider does, and the recipe it counts by.

`CountingServer` is a `ScriptedServer` whose scripted replies get their `usage` filled in from
the request body it actually received: `prompt_tokens` (OpenAI Chat Completions) or
`input_tokens` (Anthropic Messages) is `prompt_tokens(path, body)`, the output count is the
reply's own text and tool calls counted the same way.

The recipe: OpenAI's published way of counting a Chat Completions prompt with tiktoken
(the "How to count tokens with tiktoken" cookbook, for the gpt-4o family, o200k_base), here
with `turnlog.tokens.O200kCounter`:

- every message costs 3 tokens, plus the tokens of its role, of its text content and of its
  `name` (1 more when there is a name);
- the reply is primed with 3 tokens;
- tool definitions: 7 tokens per function plus the tokens of "name:description" (a final "."
  of the description dropped); when it has parameters, 3 more, and for each property 3 plus
  the tokens of "key:type:description" (an enum: -3, then 3 plus the item's tokens for each
  item); 12 more once for the whole list.

What the cookbook leaves out, chosen here and applied to both formats alike: an assistant's
tool call costs 3 tokens plus the tokens of its function name and of its arguments string;
ids (`tool_call_id`, `tool_use_id`, call ids) cost nothing (the model is not shown them);
Anthropic's `is_error` flag costs nothing.

Anthropic's tokenizer is not public. Its "reported" count is the same o200k recipe over the
Anthropic body: the top-level `system` as a system message, each turn a message whose content
is the sum of its blocks (text; tool_use as a tool call whose arguments are its `input` as
compact JSON; tool_result as its text), tools from `name`, `description` and `input_schema`.
So both counts measure the same model of a tokenizer over each wire format; the gap between
them and turnlog's estimate is what the estimate leaves out (the per-message formatting,
the tool definitions, how calls and results are framed), not a difference of vocabularies.
"""

from __future__ import annotations

import json
from typing import Any

from model_servers import Reply, Request, ScriptedServer
from turnlog.tokens import O200kCounter, TokenCounter

PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
PER_CALL = 3
PER_FUNCTION = 7
PARAMETERS = 3
PER_PROPERTY = 3
ENUM_START = -3
PER_ENUM_ITEM = 3
TOOLS_END = 12


def _text_of(content: Any) -> str:
    """A content field's text: a string, or the text parts/blocks of a list, joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _strip_dot(text: str) -> str:
    return text[:-1] if text.endswith(".") else text


def function_tokens(functions: list[dict[str, Any]], counter: TokenCounter) -> int:
    """The cookbook's count of function definitions (`name`, `description`, `parameters`)."""
    if not functions:
        return 0
    total = 0
    for function in functions:
        total += PER_FUNCTION
        total += counter.count(f"{function['name']}:{_strip_dot(function.get('description', ''))}")
        properties = (function.get("parameters") or {}).get("properties") or {}
        if properties:
            total += PARAMETERS
            for key, schema in properties.items():
                total += PER_PROPERTY
                if "enum" in schema:
                    total += ENUM_START
                    for item in schema["enum"]:
                        total += PER_ENUM_ITEM + counter.count(str(item))
                kind = schema.get("type", "")
                described = _strip_dot(schema.get("description", ""))
                total += counter.count(f"{key}:{kind}:{described}")
    return total + TOOLS_END


def _call_tokens(name: str, arguments: str, counter: TokenCounter) -> int:
    return PER_CALL + counter.count(name) + counter.count(arguments)


def openai_prompt_tokens(body: dict[str, Any], counter: TokenCounter) -> int:
    """The prompt tokens of a Chat Completions request body, by the recipe above."""
    total = REPLY_PRIMING
    for message in body.get("messages", []):
        total += PER_MESSAGE + counter.count(message["role"])
        total += counter.count(_text_of(message.get("content")))
        if isinstance(message.get("name"), str):
            total += PER_NAME + counter.count(message["name"])
        for call in message.get("tool_calls") or []:
            function = call["function"]
            total += _call_tokens(function["name"], function["arguments"], counter)
    tools = [t["function"] for t in body.get("tools") or []]
    return total + function_tokens(tools, counter)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def anthropic_prompt_tokens(body: dict[str, Any], counter: TokenCounter) -> int:
    """The input tokens of a Messages request body, by the same recipe (see the module)."""
    total = REPLY_PRIMING
    system = body.get("system")
    if system is not None:
        total += PER_MESSAGE + counter.count("system") + counter.count(_text_of(system))
    for turn in body.get("messages", []):
        total += PER_MESSAGE + counter.count(turn["role"])
        content = turn["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content:
            if block["type"] == "text":
                total += counter.count(block["text"])
            elif block["type"] == "tool_use":
                total += _call_tokens(block["name"], _compact(block["input"]), counter)
            elif block["type"] == "tool_result":
                total += counter.count(_text_of(block.get("content")))
    tools = [
        {
            "name": t["name"],
            "description": t.get("description", ""),
            "parameters": t["input_schema"],
        }
        for t in body.get("tools") or []
    ]
    return total + function_tokens(tools, counter)


def prompt_tokens(path: str, body: dict[str, Any], counter: TokenCounter) -> int:
    """The prompt's tokens for a request to `path` (Chat Completions or Messages)."""
    if path.rstrip("/").endswith("/chat/completions"):
        return openai_prompt_tokens(body, counter)
    if path.rstrip("/").endswith("/messages"):
        return anthropic_prompt_tokens(body, counter)
    raise ValueError(f"no token recipe for {path}")


def _reply_tokens(body: dict[str, Any], counter: TokenCounter) -> int:
    if "choices" in body:
        message = body["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        return counter.count(_text_of(message.get("content"))) + sum(
            _call_tokens(c["function"]["name"], c["function"]["arguments"], counter) for c in calls
        )
    total = 0
    for block in body.get("content", []):
        if block["type"] == "text":
            total += counter.count(block["text"])
        elif block["type"] == "tool_use":
            total += _call_tokens(block["name"], _compact(block["input"]), counter)
    return total


class CountingServer(ScriptedServer):
    """A `ScriptedServer` that fills in each JSON reply's usage from the request it answers.

    Script whole replies (`reply_json(openai_completion(...))` or `anthropic_message(...)`);
    their `usage` is replaced by the counts of the received body. `counts` holds the prompt
    count of each request, in order.
    """

    def __init__(self, counter: TokenCounter | None = None) -> None:
        super().__init__()
        self.counter = counter if counter is not None else O200kCounter()
        self.counts: list[int] = []
        self.rewrite = self._count

    def _count(self, request: Request, reply: Reply) -> Reply:
        if reply.status != 200 or reply.sse is not None or not isinstance(request.body, dict):
            return reply
        body = json.loads(reply.body)
        prompt = prompt_tokens(request.path, request.body, self.counter)
        output = _reply_tokens(body, self.counter)
        self.counts.append(prompt)
        if "choices" in body:
            body["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": output,
                "total_tokens": prompt + output,
            }
        else:
            body["usage"] = {
                "input_tokens": prompt,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": output,
            }
        return Reply(reply.status, json.dumps(body).encode(), reply.content_type, reply.headers)
