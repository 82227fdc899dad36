"""Clearing old tool outputs: turnlog against the OpenAI Agents SDK and LangChain, side by side.

The transcripts are BFCL's multi-turn entries (`multi_turn_base` of the bfcl-eval wheel, read
with `toolsearch_data.wheel`): the users' turns and the ground-truth calls of each turn. BFCL's
own tool outputs are a line or two, so each call gets a realistic output generated here,
deterministically from the entry id and the call: a short acknowledgement for calls that change
state (cd, mkdir, post_tweet, ...) and, for the ones that read (grep, cat, diff, get_*, ...), a
file excerpt, a listing or a JSON payload of 300 to 3,000 tokens (log-uniform). `--chain` entries
make one session (20 by default: about 75 turns, 230 calls, 60k-80k tokens), so the context
fills up.

One request is what is sent before each assistant message: the system prompt and the history,
as each contender edits it. Each contender sees the same transcript:

- turnlog: the messages are appended to a `SessionService`; before each request,
  `service.compact(sid, trigger, strategy)`; the request is `service.view_messages(sid)`;
- OpenAI Agents SDK 0.24: the history as Responses input items through
  `agents.extensions.ToolOutputTrimmer` (the `call_model_input_filter` a `RunConfig` runs);
- LangChain 1.5: the history as LangChain messages through
  `ContextEditingMiddleware(edits=[ClearToolUsesEdit(...)]).wrap_model_call`, whose handler
  records the request it is handed.

Every request is turned back into turnlog messages and measured the same way: its tokens
(o200k over `turnlog.text.message_text` of each message), whether its messages start with all
of the previous request's messages (an unchanged prefix: what a provider's prompt cache can
reuse), the tokens of that common prefix, and whether it obeys the view rules
(`turnlog.rules.check_messages`). Billed tokens count the uncached part at 1x and cached
prefix tokens at 0.1x (Anthropic's cache-read price), writes ignored.

    python bench/tool_outputs.py [--quick] [--seed N] [--chain N] [--budget N]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the cache, not even bytecode

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from _harness import machine, table  # noqa: E402
from toolsearch_data import BFCL_VERSION, wheel  # noqa: E402
from turnlog import (  # noqa: E402
    InvalidInput,
    MemoryStore,
    Message,
    SessionService,
    TokenCountTrigger,
    ToolCall,
    ToolOutputCompactionStrategy,
    ToolResult,
)
from turnlog.rules import check_messages  # noqa: E402
from turnlog.text import message_text  # noqa: E402
from turnlog.tokens import O200kCounter  # noqa: E402

CACHE = Path(__file__).resolve().parent / ".cache"
SHORT_NOTE = "[{tool} output cleared: {tokens} tokens, kept in the log]"
"""The stand-in of the rare-pass configuration: a note, no preview."""
READ_PRICE = 0.1
_WORDS = [
    "budget",
    "analysis",
    "quarter",
    "revenue",
    "report",
    "draft",
    "final",
    "review",
    "section",
    "table",
    "figure",
    "growth",
    "forecast",
    "margin",
    "cost",
    "vendor",
    "invoice",
    "payment",
    "account",
    "balance",
    "ledger",
    "entry",
    "summary",
    "note",
    "customer",
    "order",
    "shipment",
    "region",
    "sales",
    "target",
    "metric",
    "trend",
    "risk",
    "issue",
    "owner",
    "status",
    "open",
    "closed",
    "pending",
    "approved",
    "rejected",
    "update",
    "change",
    "version",
    "release",
    "deploy",
    "server",
    "request",
    "latency",
    "error",
    "warning",
    "info",
    "debug",
    "trace",
    "cache",
    "query",
    "index",
    "record",
    "field",
    "value",
    "total",
]
_LIGHT = re.compile(
    r"^(cd|mkdir|mv|cp|touch|echo|rm|rmdir|post_\w+|set_\w+|login\w*|logout\w*|"
    r"authenticate\w*|add_\w+|send_\w+|close_\w+|create_\w+|delete_\w+|book_\w+|"
    r"cancel_\w+|lock\w*|unlock\w*|start\w*|press\w*|fill\w*|activate\w*|"
    r"follow\w*|comment\w*|mention\w*|retweet\w*|update_\w+|edit_\w+|resolve\w*|"
    r"place_order|make_transaction|fund_account|withdraw\w*|remove_\w+|"
    r"register\w*|purchase\w*|set\w*)$"
)


# -- the transcripts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One BFCL multi-turn entry: its id, and per turn the user's text and the calls made."""

    id: str
    turns: tuple[tuple[str, tuple[str, ...]], ...]


def entries(path: Path, category: str = "multi_turn_base") -> list[Entry]:
    """The entries of `category` with their ground-truth calls."""
    with zipfile.ZipFile(path) as archive:
        rows = archive.read(f"bfcl_eval/data/BFCL_v4_{category}.json").decode("utf-8")
        answers = archive.read(f"bfcl_eval/data/possible_answer/BFCL_v4_{category}.json")
    truth = {a["id"]: a["ground_truth"] for a in map(json.loads, answers.decode().splitlines())}
    out = []
    for line in rows.splitlines():
        entry = json.loads(line)
        turns = []
        for question, calls in zip(entry["question"], truth[entry["id"]], strict=False):
            text = " ".join(m["content"] for m in question if m.get("role") == "user")
            turns.append((text or "Go on.", tuple(calls)))
        out.append(Entry(entry["id"], tuple(turns)))
    return out


def _rng(*parts: str) -> random.Random:
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def tool_output(entry_id: str, at: int, call: str) -> str:
    """The output of `call`: short for a call that changes state, else 300-3,000 tokens."""
    name = call.split("(", 1)[0].strip()
    rng = _rng(entry_id, str(at), call)
    if _LIGHT.match(name):
        return json.dumps(
            {"status": "ok", "call": name, "detail": " ".join(rng.choices(_WORDS, k=8))}
        )
    tokens = int(math.exp(rng.uniform(math.log(300), math.log(3000))))
    kind = rng.choice(["lines", "json", "listing"])
    parts: list[str] = []
    size = 0
    while size < tokens:
        if kind == "lines":
            line = f"{name}.txt:{len(parts) + 1}: " + " ".join(rng.choices(_WORDS, k=12))
        elif kind == "json":
            record = {
                "id": rng.randrange(10**6),
                "name": " ".join(rng.choices(_WORDS, k=3)),
                "value": round(rng.uniform(0, 10_000), 2),
                "note": " ".join(rng.choices(_WORDS, k=8)),
            }
            line = json.dumps(record)
        else:
            line = (
                f"-rw-r--r-- 1 user staff {rng.randrange(100, 99_999):>6} "
                f"{'_'.join(rng.choices(_WORDS, k=2))}_{rng.randrange(100)}."
                + rng.choice(["pdf", "txt", "csv"])
            )
        parts.append(line)
        size += len(line) // 3  # about 3 characters a token here; the bench counts exactly
    return "\n".join(parts)


def _arguments(call: str) -> str:
    inside = call.split("(", 1)[1].rsplit(")", 1)[0] if "(" in call else ""
    return json.dumps({"args": inside})


def transcript(chain: Sequence[Entry]) -> Iterator[tuple[Message, bool]]:
    """The messages of one session, each with whether a request is sent before it (True before
    each assistant message)."""
    n = 0
    for entry in chain:
        for text, calls in entry.turns:
            yield Message.user(text), False
            for at, call in enumerate(calls):
                n += 1
                name = call.split("(", 1)[0].strip()
                tc = ToolCall(f"call_{n}", name, _arguments(call))
                yield Message.assistant(None, [tc]), True
                yield Message.tool(ToolResult(tc.id, name, tool_output(entry.id, at, call))), False
            done = ", ".join(c.split("(", 1)[0] for c in calls) or "nothing to do"
            yield Message.assistant(f"Done ({done})."), True


SYSTEM = Message.system(
    "You are an agent operating a file system, a messaging service and a trading account "
    "through tools. Call one tool at a time, read its output, and answer briefly. "
    + " ".join(_rng("system").choices(_WORDS, k=300))
)


# -- the contenders ----------------------------------------------------------------------------

Contender = Callable[[list[Message]], list[Message]]
"""Given the whole history so far (system prompt first), the request it sends."""


class Turnlog:
    """A SessionService that appends as the history grows and compacts before each request."""

    def __init__(self, trigger: Callable[..., bool], strategy: Any) -> None:
        self.trigger, self.strategy = trigger, strategy
        self.service = SessionService(MemoryStore())
        self.sid = self.service.create().id
        self.seen = 0
        self.passes = 0

    def __call__(self, history: list[Message]) -> list[Message]:
        for message in history[self.seen :]:
            self.service.append_message(self.sid, message)
        self.seen = len(history)
        if self.strategy is not None:
            result = self.service.compact(self.sid, self.trigger, self.strategy)
            self.passes += not result.unchanged
        return self.service.view_messages(self.sid)


class Trimmer:
    """`agents.extensions.ToolOutputTrimmer` over the history as Responses input items."""

    def __init__(self, **options: Any) -> None:
        from agents.extensions import ToolOutputTrimmer

        self.filter = ToolOutputTrimmer(**options)

    def __call__(self, history: list[Message]) -> list[Message]:
        from agents.run_config import CallModelData, ModelInputData

        items: list[Any] = []
        names: dict[str, str] = {}
        for m in history[1:]:
            if m.role in ("user", "assistant") and m.text is not None:
                items.append({"role": m.role, "content": m.text})
            for c in m.tool_calls:
                names[c.id] = c.name
                items.append(
                    {"type": "function_call", "call_id": c.id, "name": c.name,
                     "arguments": c.arguments}
                )  # fmt: skip
            for r in m.tool_results:
                items.append({"type": "function_call_output", "call_id": r.call_id,
                              "output": r.content})  # fmt: skip
        data = CallModelData(ModelInputData(items, history[0].text), agent=None, context=None)  # type: ignore[arg-type]
        out = self.filter(data)
        messages = [Message.system(out.instructions or "")]
        for item in out.input:
            if item.get("type") == "function_call":
                call = ToolCall(item["call_id"], item["name"], item["arguments"])
                messages.append(Message.assistant(None, [call]))
            elif item.get("type") == "function_call_output":
                call_id = item["call_id"]
                messages.append(Message.tool(ToolResult(call_id, names[call_id], item["output"])))
            else:
                messages.append(Message(item["role"], item["content"]))
        return messages


class ClearToolUses:
    """LangChain's `ContextEditingMiddleware` with a `ClearToolUsesEdit`, run per request."""

    def __init__(self, counter: Counter, **options: Any) -> None:
        from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

        def count(messages: Sequence[Any]) -> int:
            return sum(counter(_from_langchain(m)) for m in messages)

        self.middleware = ContextEditingMiddleware(
            edits=[ClearToolUsesEdit(**options)], token_counter=count
        )
        self.model = GenericFakeChatModel(messages=iter(()))

    def __call__(self, history: list[Message]) -> list[Message]:
        from langchain.agents.middleware.types import ModelRequest
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

        lc: list[Any] = []
        for m in history[1:]:
            if m.role == "user":
                lc.append(HumanMessage(m.text or ""))
            elif m.role == "assistant":
                calls = [
                    {"id": c.id, "name": c.name, "args": json.loads(c.arguments)}
                    for c in m.tool_calls
                ]
                lc.append(AIMessage(m.text or "", tool_calls=calls))
            else:
                for r in m.tool_results:
                    lc.append(ToolMessage(r.content, tool_call_id=r.call_id, name=r.name))
        seen: list[Any] = []

        def handler(request: Any) -> Any:
            seen.append(request)
            return AIMessage("ok")

        request = ModelRequest(
            model=self.model, messages=lc, system_message=SystemMessage(history[0].text or "")
        )
        self.middleware.wrap_model_call(request, handler)
        return [Message.system(history[0].text or ""), *map(_from_langchain, seen[0].messages)]


def _from_langchain(m: Any) -> Message:
    kind = type(m).__name__
    if kind == "HumanMessage":
        return Message.user(m.content)
    if kind == "ToolMessage":
        return Message.tool(ToolResult(m.tool_call_id, m.name or "tool", m.content))
    if kind == "SystemMessage":
        return Message.system(m.content)
    calls = [ToolCall(c["id"], c["name"], json.dumps(c["args"])) for c in m.tool_calls]
    return Message.assistant(m.content or None, calls)


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class Tally:
    """The requests of one contender over all sessions."""

    prompts: list[int] = field(default_factory=list)
    prefixes: list[int] = field(default_factory=list)
    unchanged: list[bool] = field(default_factory=list)
    invalid: int = 0
    sessions: list[int] = field(default_factory=list)
    passes: int = 0

    def row(self, name: str, base: Tally) -> list[object]:
        total = sum(self.prompts)
        billed = sum(
            p - c + READ_PRICE * c for p, c in zip(self.prompts, self.prefixes, strict=True)
        )
        base_billed = sum(
            p - c + READ_PRICE * c for p, c in zip(base.prompts, base.prefixes, strict=True)
        )
        return [
            name,
            f"{total / len(self.prompts):,.0f}",
            f"{max(self.prompts):,}",
            f"{total / 1e6:,.2f}M",
            f"{1 - total / sum(base.prompts):.0%}",
            f"{sum(self.unchanged) / len(self.unchanged):.1%}",
            f"{sum(self.prefixes) / total:.1%}",
            f"{billed / base_billed:.2f}",
            self.passes if self.passes else "-",
            self.invalid,
        ]


class Counter:
    """o200k tokens of a message's rendering, remembered by message."""

    def __init__(self) -> None:
        self.counter = O200kCounter()
        self.memo: dict[str, int] = {}

    def __call__(self, m: Message) -> int:
        text = message_text(m)
        n = self.memo.get(text)
        if n is None:
            n = self.memo[text] = self.counter.count(text)
        return n


def measure(make: Callable[[], Contender], chains: list[list[Entry]], count: Counter) -> Tally:
    tally = Tally()
    for chain in chains:
        contender = make()
        history = [SYSTEM]
        previous: list[Message] = []
        for message, request_before in transcript(chain):
            if request_before:
                sent = contender(history)
                tokens = [count(m) for m in sent]
                common = 0
                while (
                    common < len(previous)
                    and common < len(sent)
                    and _same(previous[common], sent[common])
                ):
                    common += 1
                tally.prompts.append(sum(tokens))
                tally.prefixes.append(sum(tokens[:common]) if previous else 0)
                tally.unchanged.append(bool(previous) and common == len(previous))
                try:
                    check_messages(sent)
                except InvalidInput:
                    tally.invalid += 1
                previous = sent
            history.append(message)
        tally.passes += getattr(contender, "passes", 0)
    return tally


def _same(a: Message, b: Message) -> bool:
    """Equal as a provider sees them (turnlog's metadata is not sent)."""
    return message_text(a) == message_text(b) and a.role == b.role


def contenders(budget: int, count: Counter) -> dict[str, Callable[[], Contender]]:
    """Equivalent settings: the trimmer's (the last 2 turns kept, outputs over 500 characters
    cut to a 200-character preview) every request, and its kept turns and size threshold in rare
    passes (from 20% of the budget, at least 7.5% cleared, a short note); LangChain's (from 70%
    of the budget, the newest 3 results kept, at least 20% of the budget cleared, or no
    minimum)."""
    at = int(budget * 0.7)
    least = budget // 5
    counter = count.counter

    def tl(**options: Any) -> Callable[[], Contender]:
        then = options.pop("then", None)
        trigger = options.pop("trigger", lambda request: True)
        options.setdefault("token_counter", counter)
        return lambda: Turnlog(trigger, ToolOutputCompactionStrategy(**options, then=then))

    trigger = TokenCountTrigger(at, counter, reported=False)
    low, some = budget // 5, budget * 3 // 40
    rare = TokenCountTrigger(low, counter, reported=False)
    trim = {"keep_last": 0, "keep_turns": 2, "min_tokens": 125}
    return {
        "no editing": lambda: Turnlog(lambda request: False, None),
        "OpenAI ToolOutputTrimmer(recent_turns=2, max_output_chars=500, preview_chars=200)": (
            lambda: Trimmer(recent_turns=2, max_output_chars=500, preview_chars=200)
        ),
        "turnlog, the same: keep_turns=2, min_tokens=125, preview_head=200, every request": tl(
            preview_head=200, **trim
        ),
        f"turnlog, the same in rare passes: TokenCount({low}), clear_at_least={some}, note": tl(
            trigger=rare, clear_at_least=some, placeholder=SHORT_NOTE, **trim
        ),
        f"LangChain ClearToolUsesEdit(trigger={at}, keep=3)": (
            lambda: ClearToolUses(count, trigger=at, keep=3)
        ),
        f"LangChain ClearToolUsesEdit(trigger={at}, keep=3, clear_at_least={least})": (
            lambda: ClearToolUses(count, trigger=at, keep=3, clear_at_least=least)
        ),
        f"turnlog, the same: TokenCount({at}), keep_last=3, clear_at_least={least}": tl(
            trigger=trigger, keep_last=3, clear_at_least=least, min_tokens=1
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 sessions, for a smoke run")
    parser.add_argument("--seed", type=int, default=0, help="which entries make each session")
    parser.add_argument("--chain", type=int, default=20, help="BFCL entries per session")
    parser.add_argument("--budget", type=int, default=40_000, help="the context budget, tokens")
    args = parser.parse_args(argv)
    print(machine())
    path = wheel(CACHE)
    pool = entries(path)
    random.Random(args.seed).shuffle(pool)
    sessions = 2 if args.quick else len(pool) // args.chain
    chains = [pool[i * args.chain : (i + 1) * args.chain] for i in range(sessions)]
    count = Counter()
    plain = [m for chain in chains[:1] for m, _ in transcript(chain)]
    print(
        f"bfcl-eval {BFCL_VERSION} multi_turn_base: {len(pool)} entries, {sessions} sessions of "
        f"{args.chain}; budget {args.budget:,} tokens; first session: {len(plain)} messages, "
        f"{sum(count(m) for m in plain):,} tokens"
    )
    results: dict[str, Tally] = {}
    for name, make in contenders(args.budget, count).items():
        started = time.perf_counter()
        results[name] = measure(make, chains, count)
        print(f"  {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    base = results["no editing"]
    headers = [
        "contender",
        "tokens/request",
        "max",
        "total",
        "saved",
        "prefix unchanged",
        "cached tokens",
        "billed vs none",
        "passes",
        "invalid",
    ]
    print(f"{len(base.prompts):,} requests per contender")
    print(table(headers, [t.row(name, base) for name, t in results.items()]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
