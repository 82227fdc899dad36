"""Prompt caching: how much of each request is a repeat of the previous one, per compaction setting.

Providers bill a prompt prefix they have seen recently at a fraction of the price (Anthropic: a
cache read costs 0.1x the input price, a cache write 1.25x). A window that moves every turn
changes the start of the conversation every turn, so little beyond the system prompt repeats; a
trigger that fires rarely and cuts deep leaves the prompt growing append-only between passes.

A scripted 200-turn conversation (seeded: a ~1,400-token system prompt; each turn a user
message, in some turns a tool call and its result, then the assistant's answer; random sizes)
runs through `SessionService` on a `SqliteStore` in a temp dir, once per configuration. A
request is what a turn runner sends before each assistant message (`service.view_messages`);
a tool-calling turn makes two. After each turn, `service.compact(sid, trigger, strategy)`.

For each request: its prompt tokens (o200k over `turnlog.text.message_text` of each message,
summed), and its cacheable prefix: the tokens of the longest run of leading messages equal to
the previous request's leading messages (an exact prefix at message granularity; the first
request has none). "turn starts" averages over the first request of each turn only, the ones
after which the window may have moved. "at a breakpoint" checks that the Anthropic adapter's
breakpoints (`cache_prompt=True`: the system prompt, the end of the summary, the last block)
reach it: the longest leading run that ends where an earlier request put a breakpoint (cache
lifetime and the provider's minimum cacheable size ignored).

Billed tokens: uncached prompt tokens at 1x, cache reads at 0.1x; with writes, the uncached
tokens at 1.25x as well, since the last-block breakpoint writes them to the cache. The cost
columns divide by the prompt tokens of the no-compaction run without caching.

    python bench/prompt_cache.py [--quick] [--seed N]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import random  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

from _harness import machine, parse_args, table, words  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionRequest,
    CompactionWindow,
    ExtractiveSummarizer,
    Message,
    SessionService,
    SqliteStore,
    TokenCountTrigger,
    ToolCall,
    ToolResult,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.compaction.triggers import sent_events  # noqa: E402
from turnlog.text import message_text  # noqa: E402
from turnlog.tokens import O200kCounter  # noqa: E402

READ_PRICE = 0.1
WRITE_PRICE = 1.25
N = 10

Trigger = Callable[[CompactionRequest], bool]


def never(request: CompactionRequest) -> bool:
    return False


@dataclass
class Config:
    name: str
    trigger: Trigger
    strategy: WindowCompactionStrategy


def configs() -> list[Config]:
    def window(w: CompactionWindow, summary: bool) -> WindowCompactionStrategy:
        return WindowCompactionStrategy(w, summarizer=ExtractiveSummarizer() if summary else None)

    last_n, deep = CompactionWindow.last_turns(N), CompactionWindow.last_turns(5)
    budget = CompactionWindow.token_budget(4_000)
    return [
        Config("no compaction", never, window(last_n, False)),
        Config(
            f"keep last {N}: TurnCount({N}) + last_turns({N})",
            TurnCountTrigger(N),
            window(last_n, False),
        ),
        Config("  the same + summary", TurnCountTrigger(N), window(last_n, True)),
        Config("rare: TurnCount(20) + last_turns(5)", TurnCountTrigger(20), window(deep, False)),
        Config("  the same + summary", TurnCountTrigger(20), window(deep, True)),
        Config("rarer: TurnCount(40) + last_turns(5)", TurnCountTrigger(40), window(deep, False)),
        Config("  the same + summary", TurnCountTrigger(40), window(deep, True)),
        Config(
            "tokens: TokenCount(16k) + budget(4k)", TokenCountTrigger(16_000), window(budget, False)
        ),
        Config("  the same + summary", TokenCountTrigger(16_000), window(budget, True)),
    ]


def script(turns: int, seed: int) -> tuple[Message, list[list[Message]]]:
    """The system prompt and the turns: each a list of messages, user first, answer last."""
    rng = random.Random(seed)
    system = Message.system("You are a support agent for a hosting company. " + words(rng, 1_400))
    out = []
    for t in range(turns):
        turn = [Message.user(words(rng, rng.randint(10, 60)))]
        if rng.random() < 0.4:
            call = ToolCall(f"call_{t}", "search_docs", f'{{"query": "{words(rng, 4)}"}}')
            result = words(rng, rng.randint(40, 300))
            turn += [
                Message.assistant(None, [call]),
                Message.tool(ToolResult(call.id, "search_docs", result)),
            ]
        turn.append(Message.assistant(words(rng, rng.randint(20, 120))))
        out.append(turn)
    return system, out


@dataclass
class Run:
    """The requests of one configuration: prompt tokens and cacheable prefixes."""

    prompts: list[int] = field(default_factory=list)
    prefixes: list[int] = field(default_factory=list)
    at_breakpoint: list[int] = field(default_factory=list)
    starts: list[bool] = field(default_factory=list)
    """For each request, whether it is the first of its turn (sent after the user message)."""
    compactions: int = 0

    def mean_share(self, parts: list[int], *, starts_only: bool = False) -> float:
        """The mean share of a request's tokens in `parts`, from the second request on (only
        the first request of each turn with `starts_only`)."""
        rows = zip(parts[1:], self.prompts[1:], self.starts[1:], strict=True)
        pairs = [(p, t) for p, t, start in rows if start or not starts_only]
        return sum(p / t for p, t in pairs) / len(pairs)

    def billed(self, *, writes: bool) -> float:
        miss = WRITE_PRICE if writes else 1.0
        pairs = zip(self.at_breakpoint, self.prompts, strict=True)
        return sum(READ_PRICE * p + miss * (t - p) for p, t in pairs)


class Tokens:
    """o200k tokens of a message's rendering, each distinct rendering tokenized once."""

    def __init__(self) -> None:
        self.counter = O200kCounter()
        self.known: dict[str, int] = {}

    def __call__(self, message: Message) -> int:
        text = message_text(message)
        n = self.known.get(text)
        if n is None:
            n = self.known[text] = self.counter.count(text)
        return n


def keys(messages: list[Message]) -> Iterator[tuple[object, ...]]:
    """A key for each leading run of `messages` (1, 2, ... messages): runs that send the same
    content have equal keys (metadata, which is never sent, is left out)."""
    key: tuple[object, ...] = ()
    for m in messages:
        key = (key, m.role, m.text, m.tool_calls, m.tool_results)
        yield key


def drive(
    service: SessionService,
    config: Config,
    system: Message,
    turns: list[list[Message]],
    tokens: Tokens,
) -> Run:
    sid = service.create().id
    service.append_message(sid, system)
    run = Run()
    previous: list[Message] = []
    written: set[tuple[object, ...]] = set()  # the prefixes earlier requests put a breakpoint after
    for turn in turns:
        for message in turn:
            service.append_message(sid, message)
            if message.role == "assistant":
                continue
            request = service.view_messages(sid)
            sizes = [tokens(m) for m in request]
            same = 0
            while same < min(len(request), len(previous)) and request[same] == previous[same]:
                same += 1
            run.prompts.append(sum(sizes))
            run.starts.append(message.role == "user")
            run.prefixes.append(sum(sizes[:same]))
            prefix_keys = list(keys(request))
            hit = max((i + 1 for i, k in enumerate(prefix_keys) if k in written), default=0)
            run.at_breakpoint.append(sum(sizes[:hit]))
            written.update(prefix_keys[i - 1] for i in breakpoints(service, sid, request) if i > 0)
            previous = request
        if not service.compact(sid, config.trigger, config.strategy).unchanged:
            run.compactions += 1
    return run


def breakpoints(service: SessionService, sid: str, request: list[Message]) -> list[int]:
    """How many leading messages each of the adapter's breakpoints ends after: the system
    prompt, the summary (the last synthetic message, which the turn runner marks) and the end."""
    sent = sent_events(service.view(sid))
    assert len(sent) == len(request)  # the view keeps the rules: nothing repaired
    ends = [1 if request and request[0].role == "system" else 0, len(request)]
    synthetic = [i + 1 for i, e in enumerate(sent) if e.synthetic]
    return ends + synthetic[-1:]


def main() -> None:
    args = parse_args(__doc__)
    n_turns = 60 if args.quick else 200
    quick = " (--quick: not the reported figures)" if args.quick else ""
    print(f"Prompt caching over {n_turns} turns{quick}")
    print(machine())
    system, turns = script(n_turns, args.seed)
    tokens = Tokens()
    started = time.perf_counter()
    runs: list[tuple[str, Run]] = []
    with (
        tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp,
        SessionService(SqliteStore(Path(tmp) / "cache.db")) as service,
    ):
        for config in configs():
            runs.append((config.name, drive(service, config, system, turns, tokens)))
    baseline = runs[0][1]
    base = sum(baseline.prompts)
    print(
        f"{len(baseline.prompts)} requests per run; system prompt {tokens(system):,} tokens; "
        f"{time.perf_counter() - started:.1f} s"
    )
    print()
    rows = []
    for name, run in runs:
        rows.append(
            [
                name,
                run.compactions,
                f"{run.mean_share(run.prefixes):.1%}",
                f"{run.mean_share(run.prefixes, starts_only=True):.1%}",
                f"{run.mean_share(run.at_breakpoint):.1%}",
                f"{sum(run.prompts) / 1000:,.0f}k",
                f"{max(run.prompts):,}",
                f"{sum(run.prompts) / base:.3f}",
                f"{run.billed(writes=False) / base:.3f}",
                f"{run.billed(writes=True) / base:.3f}",
            ]
        )
    print(
        table(
            [
                "configuration",
                "passes",
                "prefix ratio",
                "turn starts",
                "at a breakpoint",
                "prompt tokens",
                "max prompt",
                "cost, no cache",
                "reads 0.1x",
                "+ writes 1.25x",
            ],
            rows,
        )
    )
    print()
    print(
        "prefix ratio: the exact message prefix shared with the previous request, as a share "
        "of the request's tokens, mean over requests 2 on (turn starts: over the first request "
        "of each turn only); at a breakpoint: the same for the prefix read at an earlier "
        "request's breakpoint. Costs: billed input tokens over the no-compaction run's prompt "
        "tokens."
    )


if __name__ == "__main__":
    main()
