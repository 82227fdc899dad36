"""turnlog's own time per turn of `SessionChat` with a reasoning model's tool loop (issue 26).

A turn is `chat.send(session, text)` where the model (scripted, answering at once, so the time
is turnlog's alone) calls a tool five times, each call after a reasoning part of about 2,000
tokens with its signature (as Anthropic's thinking comes back), and then answers; every round
appends the model's message and the tool's result, and builds the next prompt, which carries the
turn's reasoning so far (the default reasoning policy, "current_turn", sends the reasoning of
the turn in progress). The twin turn is the same tool loop without reasoning parts: the same
calls, results and answer, text only.

Each session starts with a 10,000-event log of realistic conversation (bench/_harness.py)
compacted to a 50-event view, on the embedded SQLite store; the runner compacts when the view
passes 60 events, back to `last_events(50)`, so the view stays bounded while the log grows, and
the reasoning of finished turns leaves the view. Contenders are interleaved in rounds; medians.
Each block is timed in wall time and in the process's CPU time; the verdicts read the CPU time
(the work is CPU-bound: SQLite at synchronous=NORMAL does not wait for the disk), since on a
shared 2-core machine the wall time of a block swings with the other jobs, and the ratio is the
median of the per-round ratios (the two turns of a pair ran in the same round).

The issue's targets: at most 2 ms of turnlog's time per model round of the reasoning turn (a
turn here has 6 model calls, 5 tool runs, 11 appends), and the reasoning turn within 1.5x of the
same turn without reasoning.

    python bench/reasoning_turn.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import itertools  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

from _harness import Block, interleave, machine, ms, parse_args, table, verdict, words  # noqa: E402
from chat_turn import VIEW, lookup, seeded, view_over  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionWindow,
    Message,
    ReasoningPart,
    SessionService,
    SqliteStore,
    ToolCall,
    WindowCompactionStrategy,
)
from turnlog.chat import SessionChat  # noqa: E402
from turnlog.models.base import Usage  # noqa: E402
from turnlog.testing.fakes import ScriptedChatModel  # noqa: E402

ROUNDS_PER_TURN = 5
MODEL_CALLS = ROUNDS_PER_TURN + 1
REASONING_WORDS = 1_950  # about 2,000 o200k tokens of the harness's words (measured below)
PER_ROUND_TARGET = 0.002
RATIO_TARGET = 1.5


def loop_model(reasoning: bool, rng: random.Random) -> ScriptedChatModel:
    """A model that calls `lookup` ROUNDS_PER_TURN times in a turn, then answers; with
    `reasoning`, each message it returns starts with a reasoning part of ~2,000 tokens."""
    counter = itertools.count()
    thoughts = [words(rng, REASONING_WORDS) for _ in range(8)]
    answer_text = words(rng, 40)

    def answer(messages: list[Message]) -> Message:
        last_user = max(i for i, m in enumerate(messages) if m.role == "user")
        rounds = sum(1 for m in messages[last_user:] if m.role == "tool")
        n = next(counter)
        parts: list[ReasoningPart] = []
        if reasoning:
            parts = [ReasoningPart("anthropic", thoughts[n % 8], signature=f"sig-{n:08d}" * 8)]
        if rounds < ROUNDS_PER_TURN:
            call = ToolCall(f"c{n}", "lookup", json.dumps({"key": f"k{rounds}"}))
            if parts:
                return Message.assistant(None, [call], parts=parts)
            return Message.assistant(None, [call])
        if parts:
            return Message.assistant(parts=[*parts, answer_text])
        return Message.assistant(answer_text)

    return ScriptedChatModel(
        [answer], usage=lambda messages, tools: Usage(1200, 60, 1000), provider="anthropic"
    )


def main() -> None:
    args = parse_args(__doc__)
    size = 2_000 if args.quick else 10_000
    rounds = 20 if args.quick else 120
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        service = SessionService(SqliteStore(Path(tmp) / "bench.db"))
        contenders: dict[str, Block] = {}
        chats: dict[str, tuple[SessionChat, str]] = {}
        for kind in ("reasoning", "text only"):
            session_id = f"{kind.replace(' ', '-')}-{size}"
            seeded(service, session_id, size, rng)
            chat = SessionChat(
                service,
                loop_model(kind == "reasoning", rng),
                system="You are a helpful assistant for the platform team.",
                tools=[lookup],
                trigger=view_over(VIEW + 10),
                strategy=WindowCompactionStrategy(CompactionWindow.last_events(VIEW)),
                max_tool_rounds=ROUNDS_PER_TURN + 1,
            )
            texts = itertools.cycle([words(rng, 20) for _ in range(50)])
            chats[kind] = (chat, session_id)

            def block(
                chat: SessionChat = chat, sid: str = session_id, texts: Iterator[str] = texts
            ) -> int:
                turn = chat.send(sid, next(texts))
                assert len(turn.tool_runs) == ROUNDS_PER_TURN, turn
                return 1

            contenders[f"{kind} tool loop, {size:,}-event log"] = block
        samples = interleave(contenders, rounds, args.seed)
        sid = chats["reasoning"][1]
        reasoning_counts = [
            e.tokens.count
            for e in service.events(sid)[-2 * MODEL_CALLS :]
            if e.role == "assistant" and e.tokens is not None
        ]
        sent = chats["reasoning"][0].model.calls[-1]  # type: ignore[attr-defined]
        sent_reasoning = sum(1 for m in sent for p in m.parts if isinstance(p, ReasoningPart))
        logs = {kind: service.version(s) for kind, (_, s) in chats.items()}
        views = {kind: len(service.view(s)) for kind, (_, s) in chats.items()}
        service.close()
    print(machine())
    print(
        f"{rounds} rounds, interleaved; the model answers at once (scripted); a turn is "
        f"{ROUNDS_PER_TURN} tool rounds and an answer: {MODEL_CALLS} model calls\n"
    )
    rows = []
    for name, s in samples.items():
        kind = "reasoning" if name.startswith("reasoning") else "text only"
        rows.append(
            [
                name,
                ms(s.median),
                ms(s.quantile(0.95)),
                ms(s.cpu_median),
                ms(s.cpu_median / MODEL_CALLS),
                views[kind],
                f"{logs[kind]:,}",
            ]
        )
    headers = ["turn", "wall", "wall p95", "CPU", "CPU per model call", "view at end", "log at end"]
    print(table(headers, rows))
    print(
        f"\nreasoning messages' stored counts (tokens, reasoning and text): "
        f"{min(reasoning_counts):,}-{max(reasoning_counts):,}; reasoning parts in the last "
        f"prompt: {sent_reasoning} (the turn in progress's)"
    )
    with_reasoning = samples[f"reasoning tool loop, {size:,}-event log"]
    text_only = samples[f"text only tool loop, {size:,}-event log"]
    per_round = with_reasoning.cpu_median / MODEL_CALLS
    paired = statistics.median(
        a / b for a, b in zip(with_reasoning.cpu_per_op, text_only.cpu_per_op, strict=True)
    )
    wall = statistics.median(
        a / b for a, b in zip(with_reasoning.per_op, text_only.per_op, strict=True)
    )
    print(
        f"reasoning turn at {size:,} events: {ms(with_reasoning.cpu_median)} ms of CPU a turn, "
        f"{ms(per_round)} ms per model round (target <= 2 ms) "
        f"{verdict(per_round <= PER_ROUND_TARGET)}"
    )
    print(
        f"reasoning / text only, CPU: {paired:.2f}x (target <= {RATIO_TARGET}x) "
        f"{verdict(paired <= RATIO_TARGET)}; wall: {wall:.2f}x"
    )


if __name__ == "__main__":
    main()
