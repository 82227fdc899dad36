"""turnlog's own time per turn of `SessionChat`: everything but the model call.

A turn is `chat.send(session, text)`: find the session, read the view, append the user message,
build the prompt, call the model (a scripted model that answers at once), append the reply with
its usage metadata, then evaluate the compaction trigger and, every few turns, compact. Two
kinds of turn: a text turn (one model call) and a tool turn (the model calls a tool, the tool
runs, its result is stored, a second model call answers).

Each session starts with a long log (100 or 10,000 events of realistic conversation, from
bench/_harness.py) compacted to a 50-event view; the runner keeps it at 50-60 events (a
trigger that fires past 60, and `CompactionWindow.last_events(50)`), so the view stays the same
size while the log keeps growing. The issue's targets: at most 2 ms per turn on the embedded
SQLite store with a 10,000-event log, and within 1.5x of the same turn on a 100-event log.
Contenders are interleaved in rounds; medians.

    python bench/chat_turn.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import itertools  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

from _harness import (  # noqa: E402
    Block,
    conversation,
    interleave,
    machine,
    ms,
    parse_args,
    table,
    verdict,
    words,
)
from turnlog import (  # noqa: E402
    CompactionRequest,
    CompactionTrigger,
    CompactionWindow,
    Message,
    SessionEvent,
    SessionService,
    SqliteStore,
    ToolCall,
    WindowCompactionStrategy,
)
from turnlog.chat import SessionChat  # noqa: E402
from turnlog.models.base import Usage  # noqa: E402
from turnlog.testing.fakes import ScriptedChatModel  # noqa: E402

VIEW = 50


def lookup(key: str) -> str:
    """Look a key up in the team's notes."""
    return f"notes for {key}: the deploy runs at noon, the rollback plan is in the wiki"


def seeded(service: SessionService, session_id: str, size: int, rng: random.Random) -> None:
    """A session whose log holds `size` events, compacted to a view of about `VIEW` events."""
    service.create(session_id)
    size = -(-size // 6) * 6  # whole cycles of the conversation: no call left open
    events = [
        SessionEvent.for_message(session_id, m)
        for m in itertools.islice(conversation(rng, prefix=session_id), size)
    ]
    for start in range(0, size, 1000):
        service.append_events(session_id, events[start : start + 1000], service.version(session_id))
    strategy = WindowCompactionStrategy(CompactionWindow.last_events(VIEW))
    service.compact(session_id, lambda request: True, strategy)


def view_over(n: int) -> CompactionTrigger:
    """Fires when the view holds more than `n` events."""

    def trigger(request: CompactionRequest) -> bool:
        return len(request.view) > n

    return trigger


def turn_model(kind: str, rng: random.Random) -> ScriptedChatModel:
    """A model that answers at once: with text, or with a tool call and then text."""
    counter = itertools.count()
    reply = words(rng, 40)

    def answer(messages: list[Message]) -> Message:
        if kind == "tool" and messages[-1].role == "user":
            n = next(counter)
            return Message.assistant(None, [ToolCall(f"c{n}", "lookup", json.dumps({"key": "x"}))])
        return Message.assistant(reply)

    return ScriptedChatModel([answer], usage=lambda messages, tools: Usage(1200, 60, 1000))


def main() -> None:
    args = parse_args(__doc__)
    sizes = [100, 2_000] if args.quick else [100, 10_000]
    rounds = 30 if args.quick else 300
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        service = SessionService(SqliteStore(Path(tmp) / "bench.db"))
        contenders: dict[str, Block] = {}
        for size, kind in itertools.product(sizes, ["text", "tool"]):
            session_id = f"{kind}-{size}"
            seeded(service, session_id, size, rng)
            chat = SessionChat(
                service,
                turn_model(kind, rng),
                system="You are a helpful assistant for the platform team.",
                tools=[lookup],
                trigger=view_over(VIEW + 10),
                strategy=WindowCompactionStrategy(CompactionWindow.last_events(VIEW)),
            )
            texts = itertools.cycle([words(rng, 20) for _ in range(50)])

            def block(
                chat: SessionChat = chat, sid: str = session_id, texts: Iterator[str] = texts
            ) -> int:
                chat.send(sid, next(texts))
                return 1

            contenders[f"{kind} turn, {size:,}-event log"] = block
        samples = interleave(contenders, rounds, args.seed)
        views = {
            name: len(service.view(f"{name.split()[0]}-{size}"))
            for name, size in zip(contenders, [s for s in sizes for _ in range(2)], strict=True)
        }
        logs = {
            name: service.version(f"{name.split()[0]}-{size}")
            for name, size in zip(contenders, [s for s in sizes for _ in range(2)], strict=True)
        }
        service.close()
    small, large = sizes
    rows = []
    for name, s in samples.items():
        kind, size = name.split()[0], int(name.split(", ")[1].split("-")[0].replace(",", ""))
        base = samples[f"{kind} turn, {small:,}-event log"].median
        rows.append(
            [
                name,
                ms(s.median),
                ms(s.quantile(0.95)),
                f"{s.median / base:.2f}x",
                views[name],
                f"{logs[name]:,}",
            ]
        )
    print(machine())
    print(f"{rounds} rounds, interleaved; the model answers at once (scripted)\n")
    print(
        table(
            ["turn", "median", "p95", f"vs {small:,}-event log", "view at end", "log at end"], rows
        )
    )
    text_large = samples[f"text turn, {large:,}-event log"].median
    ratio = text_large / samples[f"text turn, {small:,}-event log"].median
    tool_ratio = (
        samples[f"tool turn, {large:,}-event log"].median
        / samples[f"tool turn, {small:,}-event log"].median
    )
    print()
    met = verdict(text_large <= 0.002)
    print(f"text turn at {large:,} events: {ms(text_large)} ms (target <= 2 ms) {met}")
    met = verdict(max(ratio, tool_ratio) <= 1.5)
    print(f"{large:,} vs {small:,} events: text {ratio:.2f}x, tool {tool_ratio:.2f}x ", end="")
    print(f"(target <= 1.5x) {met}")


if __name__ == "__main__":
    main()
