"""Token estimates against provider-reported counts (issue 9, item 5), through both adapters.

A scripted conversation (a system prompt; user texts of 5 to 600 words; tool-calling rounds with
JSON arguments and JSON results, one or two calls at a time; 12 tool definitions) is played
through `OpenAIChatModel` and `AnthropicChatModel` over real sockets to a local
`CountingServer` (tests/counting_server.py), which reports the input tokens of the body it
received, counted with o200k by OpenAI's published chat recipe (per-message overhead, role,
content, tool calls, tool definitions). Anthropic's tokenizer is not public: its "reported"
counts are the same o200k recipe over the Anthropic body, so the errors measure what turnlog's
estimate leaves out (formatting, tool definitions, how calls and results are framed), not a
difference of vocabularies.

The bench plays the turn runner: before each request it measures the view, sends
`sent_events(view)`'s messages, and appends the reply with `usage_metadata(...)` (the
provider's counts and the digest of what was sent), then the next user or tool message.
Per request it compares with the reported input tokens:

- the estimate: `event_tokens(O200kCounter()).total(sent_events(view))`;
- the reported trigger's number: `TokenCountTrigger(..., reported=True).tokens(request)`, the
  previous request's reported count plus the estimate of the events appended since (from the
  second request on).

Each conversation runs with the tool definitions and without them.

    python bench/token_estimate.py [--quick] [--seed N]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing, not even bytecode

import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _harness import machine, parse_args, table, words  # noqa: E402
from counting_server import CountingServer, function_tokens  # noqa: E402
from model_servers import anthropic_message, openai_completion  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionRequest,
    MemoryStore,
    Message,
    O200kCounter,
    SessionService,
    TokenCountTrigger,
    ToolResult,
)
from turnlog.compaction import sent_events  # noqa: E402
from turnlog.compaction.reported import latest_report, usage_metadata  # noqa: E402
from turnlog.models import AnthropicChatModel, OpenAIChatModel  # noqa: E402
from turnlog.tokens import event_tokens  # noqa: E402
from turnlog.toolsearch import ToolReference  # noqa: E402


def _tool(name: str, description: str, **params: tuple[str, str] | tuple[str, str, list[str]]):
    properties: dict[str, Any] = {}
    for key, spec in params.items():
        properties[key] = {"type": spec[0], "description": spec[1]}
        if len(spec) == 3:
            properties[key]["enum"] = spec[2]
    schema = {"type": "object", "properties": properties, "required": list(params)[:1]}
    return ToolReference(name, description, schema)


TOOLS = [
    _tool(
        "search_docs",
        "Search the product documentation and return the best passages.",
        query=("string", "What to look for, in plain words."),
        limit=("integer", "How many passages to return (1-20)."),
    ),
    _tool(
        "get_order",
        "Look up one order by its id.",
        order_id=("string", "The order id, for example ORD-1234."),
    ),
    _tool(
        "refund_order",
        "Refund an order in full or in part.",
        order_id=("string", "The order to refund."),
        amount=("number", "The amount, in the order's currency; the whole order when absent."),
        reason=("string", "Why.", ["damaged", "late", "wrong_item", "other"]),
    ),
    _tool(
        "list_invoices",
        "List a customer's invoices, newest first.",
        customer_id=("string", "The customer."),
        status=("string", "Only invoices in this state.", ["open", "paid", "void"]),
        limit=("integer", "At most this many."),
    ),
    _tool(
        "create_ticket",
        "Open a support ticket for the customer.",
        subject=("string", "One line."),
        body=("string", "What happened, in full."),
        priority=("string", "How urgent.", ["low", "normal", "high", "urgent"]),
    ),
    _tool(
        "update_ticket",
        "Change a ticket's status or add a note.",
        ticket_id=("string", "The ticket."),
        status=("string", "The new status.", ["open", "pending", "solved"]),
        note=("string", "A note for the agents."),
    ),
    _tool(
        "send_email",
        "Send an email to the customer from the support address.",
        to=("string", "The address."),
        subject=("string", "The subject line."),
        body=("string", "The message, plain text."),
    ),
    _tool(
        "run_sql",
        "Run a read-only SQL query on the reporting replica.",
        query=("string", "One SELECT statement."),
    ),
    _tool(
        "read_file",
        "Read a file of the customer's upload area.",
        path=("string", "The path, relative to the upload area."),
    ),
    _tool(
        "get_weather",
        "The current weather at a place, for delivery estimates.",
        city=("string", "The city."),
        unit=("string", "Temperature unit.", ["celsius", "fahrenheit"]),
    ),
    _tool(
        "schedule_call",
        "Book a call with the customer.",
        when=("string", "ISO 8601 date and time."),
        minutes=("integer", "How long."),
    ),
    _tool(
        "check_deployment",
        "Report a deployment's status and recent errors.",
        service=("string", "The service name."),
        environment=("string", "Where.", ["staging", "production"]),
    ),
]

SYSTEM = (
    "You are the support agent of an online shop. Answer in the customer's language, briefly, "
    "and cite the documentation passages you used. Use the tools to look things up before "
    "you answer; never guess an order's state. Refunds above 200 need a ticket first. "
    "Escalate anything about security to a human at once."
)


@dataclass(frozen=True)
class Step:
    """One request: the messages appended before it, and the reply the server scripts."""

    inputs: tuple[Message, ...]
    text: str | None
    calls: tuple[tuple[str, str, dict[str, Any]], ...]


def _arguments(rng: random.Random, tool: ToolReference) -> dict[str, Any]:
    out: dict[str, Any] = {}
    properties = (tool.parameters or {})["properties"]
    for key, schema in properties.items():
        if key != next(iter(properties)) and rng.random() < 0.4:
            continue
        if "enum" in schema:
            out[key] = rng.choice(schema["enum"])
        elif schema["type"] == "integer":
            out[key] = rng.randint(1, 20)
        elif schema["type"] == "number":
            out[key] = round(rng.uniform(5, 400), 2)
        else:
            out[key] = words(rng, rng.choice([2, 4, 12, 40]))
    return out


def _result(rng: random.Random, name: str) -> str:
    rows = [
        {
            "id": f"{name[:3].upper()}-{rng.randint(1000, 9999)}",
            "status": rng.choice(["open", "paid", "shipped", "late"]),
            "total": round(rng.uniform(5, 900), 2),
            "note": words(rng, rng.randint(3, 40)),
        }
        for _ in range(rng.choice([1, 2, 5, 12]))
    ]
    return json.dumps({"ok": True, "count": len(rows), "items": rows})


def script(rng: random.Random, turns: int) -> list[Step]:
    """The conversation: `turns` user turns, most of them with tool rounds."""
    steps: list[Step] = []
    n = 0
    for _ in range(turns):
        inputs: tuple[Message, ...] = (Message.user(words(rng, rng.choice([5, 20, 60, 200, 600]))),)
        for _ in range(rng.choice([0, 1, 1, 2])):
            calls = []
            for _ in range(rng.choice([1, 1, 2])):
                n += 1
                tool = rng.choice(TOOLS)
                calls.append((f"call_{n:03d}", tool.name, _arguments(rng, tool)))
            text = words(rng, rng.randint(5, 20)) if rng.random() < 0.3 else None
            steps.append(Step(inputs, text, tuple(calls)))
            inputs = (
                Message.tool([ToolResult(i, name, _result(rng, name)) for i, name, _ in calls]),
            )
        steps.append(Step(inputs, words(rng, rng.randint(20, 150)), ()))
    return steps


def openai_reply(step: Step) -> dict[str, Any]:
    calls = [(i, name, json.dumps(args)) for i, name, args in step.calls]
    return openai_completion(step.text, calls)


def anthropic_reply(step: Step) -> dict[str, Any]:
    return anthropic_message(step.text, list(step.calls))


@dataclass(frozen=True)
class Measure:
    reported: int
    estimate: int
    trigger: int | None
    """The reported trigger's number, when a report was in use (None: it estimated)."""


def play(
    steps: Sequence[Step],
    model: OpenAIChatModel | AnthropicChatModel,
    server: CountingServer,
    reply: Callable[[Step], dict[str, Any]],
    tools: Sequence[ToolReference],
) -> list[Measure]:
    """Play `steps` through `model` as the turn runner would; one measure per request."""
    counter = O200kCounter()
    estimate = event_tokens(counter)
    trigger = TokenCountTrigger(1, counter)
    service = SessionService(MemoryStore())
    sid = service.create().id
    service.append_message(sid, Message.system(SYSTEM))
    out = []
    for step in steps:
        for message in step.inputs:
            service.append_message(sid, message)
        view = service.view(sid)
        sent = sent_events(view)
        guess = estimate.total(sent)
        reported_now = trigger.tokens(CompactionRequest.of(service.get(sid), view))
        used = latest_report(sent) is not None
        server.reply_json(reply(step))
        response = model.respond([e.message for e in sent if e.message is not None], tools)
        assert response.usage.input_tokens == server.counts[-1]
        expected_calls = [(i, name) for i, name, _ in step.calls]
        assert [(c.id, c.name) for c in response.message.tool_calls] == expected_calls
        metadata = usage_metadata(
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            cached_input_tokens=response.usage.cached_input_tokens,
            model=response.model,
            stop_reason=response.stop_reason,
            prompt=sent,
        )
        service.append_message(sid, response.message, metadata=metadata)
        out.append(Measure(server.counts[-1], guess, reported_now if used else None))
    service.close()
    return out


def errors(pairs: Sequence[tuple[int, int]]) -> list[float]:
    """Signed % errors of (measured, reported) pairs."""
    return [100 * (measured - reported) / reported for measured, reported in pairs]


def main() -> None:
    args = parse_args(__doc__)
    turns = 6 if args.quick else 20
    steps = script(random.Random(args.seed), turns)
    print(f"Token estimates vs reported counts{' (--quick)' if args.quick else ''}")
    print(machine())
    counter = O200kCounter()
    openai_tools = [t.as_openai_tool()["function"] for t in TOOLS]
    print(
        f"\n{len(steps)} requests, {turns} user turns, "
        f"{sum(len(s.calls) for s in steps)} tool calls, {len(TOOLS)} tools "
        f"({function_tokens(openai_tools, counter)} tokens of definitions by the recipe)"
    )
    began = time.perf_counter()
    rows: list[list[str]] = []
    for adapter in ("OpenAIChatModel", "AnthropicChatModel"):
        for tools in (TOOLS, []):
            server = CountingServer(counter)
            try:
                if adapter == "OpenAIChatModel":
                    with OpenAIChatModel(
                        "gpt-bench", base_url=server.url + "/v1", api_key="k", max_retries=0
                    ) as openai_model:
                        measures = play(steps, openai_model, server, openai_reply, tools)
                else:
                    with AnthropicChatModel(
                        "claude-bench", base_url=server.url, api_key="k", max_retries=0
                    ) as anthropic_model:
                        measures = play(steps, anthropic_model, server, anthropic_reply, tools)
            finally:
                server.close()
            plain = errors([(m.estimate, m.reported) for m in measures])
            nxt = errors([(m.trigger, m.reported) for m in measures if m.trigger is not None])
            rows.append(
                [
                    f"{adapter}, {len(tools)} tools",
                    f"{len(measures)}",
                    f"{statistics.mean(m.reported for m in measures):,.0f}",
                    f"{statistics.mean(plain):+.1f}",
                    f"{statistics.mean(abs(e) for e in plain):.1f}",
                    f"{max(abs(e) for e in plain):.1f}",
                    f"{max(range(len(plain)), key=lambda i: abs(plain[i])) + 1}",
                    f"{statistics.mean(abs(e) for e in plain[len(plain) // 2 :]):.1f}",
                    f"{len(nxt)}",
                    f"{statistics.mean(abs(e) for e in nxt):.2f}",
                    f"{max(abs(e) for e in nxt):.2f}",
                ]
            )
    print()
    print("% error against the reported input tokens, per request (mean over requests)")
    print(
        table(
            [
                "adapter",
                "requests",
                "mean tokens",
                "est signed",
                "est |err|",
                "est max",
                "at req",
                "est |err| 2nd half",
                "with report",
                "rep+est |err|",
                "rep+est max",
            ],
            rows,
        )
    )
    print(f"\n{time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
