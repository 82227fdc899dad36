"""Cost: per-turn memory overhead of each framework's native store against turnlog's.

A turn's memory work is what a run does around the model: read what the model will see, then
append the turn (the user's message, a tool call, its result, the answer: 4 items) in one
write. Each store starts with 100, 1,000 or 10,000 stored items of the same shape.

- OpenAI Agents SDK `SQLiteSession` on a file (WAL, the SDK's setting, and SQLite's default
  `synchronous=FULL`; one commit per `add_items`): `get_items()` (the default: everything) and
  `get_items(limit=50)`, then `add_items(turn)`.
- LangChain: no SQL chat history is installed (`langchain_community` is not), so its core
  `InMemoryChatMessageHistory`: `.messages`, then `add_messages(turn)`. Not durable.
- pydantic-ai's JSON persistence as its docs show it: the history read back with
  `ModelMessagesTypeAdapter.validate_json(path.read_bytes())`, the turn added, the whole list
  written with `to_json` (`path.write_bytes`, no fsync).
- turnlog through `SessionService` directly (the adapters are on other branches): read
  `view_messages(sid)`, append the turn with `append_events` (one version-checked write), then
  `compact` (a trigger that fires when the view passes 60 events, back to `last_events(50)`; a
  pass writes every few turns). Same durability as each peer: `SqliteStore(synchronous="FULL")`
  beside `SQLiteSession`, `synchronous="OFF"` beside the JSON file (no fsync either), and
  `MemoryStore` beside the in-memory history. Each store's log starts at the size given,
  compacted to a 50-event view.

After each timed turn the peers' stores are put back to their size, untimed (`pop_item`, list
truncation, the file rewritten), so a size stays that size; turnlog's log keeps growing (by 4
events a turn) while its view stays at 50-60 events. Rounds interleave the contenders in a
shuffled order; medians, milliseconds. The issue's target: turnlog at 10,000 items within 1.5x
of its cost at 100.

    python bench/compare/cost.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True

import argparse  # noqa: E402
import asyncio  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))

from validity import versions  # noqa: E402

from _harness import table, words  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionRequest,
    CompactionWindow,
    MemoryStore,
    Message,
    SessionEvent,
    SessionService,
    SqliteStore,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
)

SIZES = (100, 1_000, 10_000)
VIEW = 50

Turn = Callable[[], Awaitable[None]]


class Content:
    """The same turns for every store: user text, a call, its result, an answer."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0

    def turn(self) -> dict[str, Any]:
        self.n += 1
        r = self.rng
        return {
            "user": words(r, r.randint(10, 60)),
            "call": f"call_{self.n}",
            "args": json.dumps({"query": words(r, 4)}),
            "output": words(r, r.randint(40, 150)),
            "answer": words(r, r.randint(20, 80)),
        }


def agents_turn(t: dict[str, Any]) -> list[Any]:
    return [
        {"role": "user", "content": t["user"]},
        {"type": "function_call", "call_id": t["call"], "name": "lookup", "arguments": t["args"]},
        {"type": "function_call_output", "call_id": t["call"], "output": t["output"]},
        {
            "id": f"msg_{t['call']}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": t["answer"], "annotations": []}],
        },
    ]


def langchain_turn(t: dict[str, Any]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    call = {"name": "lookup", "args": json.loads(t["args"]), "id": t["call"], "type": "tool_call"}
    return [
        HumanMessage(t["user"]),
        AIMessage(content="", tool_calls=[call]),
        ToolMessage(content=t["output"], tool_call_id=t["call"]),
        AIMessage(t["answer"]),
    ]


def pydantic_turn(t: dict[str, Any]) -> list[Any]:
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    return [
        ModelRequest(parts=[UserPromptPart(t["user"])]),
        ModelResponse(parts=[ToolCallPart("lookup", t["args"], t["call"])]),
        ModelRequest(parts=[ToolReturnPart("lookup", t["output"], t["call"])]),
        ModelResponse(parts=[TextPart(t["answer"])]),
    ]


def turnlog_turn(t: dict[str, Any]) -> list[Message]:
    return [
        Message.user(t["user"]),
        Message.assistant(None, [ToolCall(t["call"], "lookup", t["args"])]),
        Message.tool(ToolResult(t["call"], "lookup", t["output"])),
        Message.assistant(t["answer"]),
    ]


def view_over(n: int) -> Callable[[CompactionRequest], bool]:
    def trigger(request: CompactionRequest) -> bool:
        return len(request.view) > n

    return trigger


class Contender:
    """One store at one size: `turn` is timed, `restore` is not."""

    def __init__(self, name: str, size: int, turn: Turn, restore: Turn | None = None) -> None:
        self.name, self.size, self.turn, self.restore = name, size, turn, restore
        self.samples: list[float] = []


async def agents(tmp: Path, size: int, content: Content, limit: int | None) -> Contender:
    from agents import SQLiteSession

    session = SQLiteSession("s", tmp / f"agents-{size}-{limit}.db")
    seed: list[Any] = []
    while len(seed) < size:
        seed += agents_turn(content.turn())
    await session.add_items(seed[:size])

    async def turn() -> None:
        seen = await session.get_items(limit=limit)
        assert len(seen) == (size if limit is None else limit)
        await session.add_items(agents_turn(content.turn()))

    async def restore() -> None:
        for _ in range(4):
            await session.pop_item()

    name = "Agents SDK SQLiteSession, get_items()" + ("" if limit is None else f" limit={limit}")
    return Contender(name, size, turn, restore)


async def langchain(size: int, content: Content) -> Contender:
    from langchain_core.chat_history import InMemoryChatMessageHistory

    with warnings.catch_warnings():  # deprecated in langchain-core 1.6.4; still the only one here
        warnings.simplefilter("ignore")
        history = InMemoryChatMessageHistory()
    seed: list[Any] = []
    while len(seed) < size:
        seed += langchain_turn(content.turn())
    history.add_messages(seed[:size])

    async def turn() -> None:
        seen = history.messages
        assert len(seen) == size
        history.add_messages(langchain_turn(content.turn()))

    async def restore() -> None:
        history.messages = history.messages[:size]

    return Contender("LangChain InMemoryChatMessageHistory", size, turn, restore)


async def pydantic(tmp: Path, size: int, content: Content) -> Contender:
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_core import to_json

    path = tmp / f"pydantic-{size}.json"
    seed: list[Any] = []
    while len(seed) < size:
        seed += pydantic_turn(content.turn())
    kept = path.with_suffix(".seed")
    kept.write_bytes(to_json(seed[:size]))
    path.write_bytes(kept.read_bytes())

    async def turn() -> None:
        history = ModelMessagesTypeAdapter.validate_json(path.read_bytes())
        assert len(history) == size
        path.write_bytes(to_json([*history, *pydantic_turn(content.turn())]))

    async def restore() -> None:
        path.write_bytes(kept.read_bytes())

    return Contender("pydantic-ai JSON file (ModelMessagesTypeAdapter)", size, turn, restore)


def turnlog(service: SessionService, label: str, size: int, content: Content) -> Contender:
    sid = f"{label}-{size}"
    service.create(sid)
    messages: list[Message] = []
    while len(messages) < size:
        messages += turnlog_turn(content.turn())
    events = [SessionEvent.for_message(sid, m) for m in messages[:size]]
    for start in range(0, size, 1000):
        service.append_events(sid, events[start : start + 1000], service.version(sid))
    strategy = WindowCompactionStrategy(CompactionWindow.last_events(VIEW))
    service.compact(sid, lambda request: True, strategy)
    trigger = view_over(VIEW + 10)

    async def turn() -> None:
        seen = service.view_messages(sid)
        assert VIEW - 8 <= len(seen) <= VIEW + 14
        new = [SessionEvent.for_message(sid, m) for m in turnlog_turn(content.turn())]
        service.append_events(sid, new, service.version(sid))
        service.compact(sid, trigger, strategy)

    return Contender(f"turnlog SessionService, {label}", size, turn)


async def measure(contenders: list[Contender], rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    for c in contenders:  # one untimed warm-up turn each
        await c.turn()
        if c.restore:
            await c.restore()
    order = list(contenders)
    for _ in range(rounds):
        rng.shuffle(order)
        for c in order:
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                await c.turn()
                c.samples.append(time.perf_counter() - start)
            finally:
                gc.enable()
            if c.restore:
                await c.restore()


async def run(rounds: int, sizes: tuple[int, ...], seed: int, only: str = "") -> tuple[str, bool]:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        content = Content(seed)
        full = SessionService(SqliteStore(tmp / "turnlog-full.db", synchronous="FULL"))
        off = SessionService(SqliteStore(tmp / "turnlog-off.db", synchronous="OFF"))
        memory = SessionService(MemoryStore())
        contenders: list[Contender] = []
        for size in sizes:
            contenders += [
                await agents(tmp, size, content, None),
                await agents(tmp, size, content, VIEW),
                turnlog(full, "SQLite synchronous=FULL", size, content),
                await pydantic(tmp, size, content),
                turnlog(off, "SQLite synchronous=OFF", size, content),
                await langchain(size, content),
                turnlog(memory, "MemoryStore", size, content),
            ]
        contenders = [c for c in contenders if only in c.name]
        await measure(contenders, rounds, seed)
        for service in (full, off, memory):
            service.close()
    names = list(dict.fromkeys(c.name for c in contenders))
    cell = {(c.name, c.size): statistics.median(c.samples) * 1000 for c in contenders}
    rows = []
    met = True
    for name in names:
        first, last = cell[(name, sizes[0])], cell[(name, sizes[-1])]
        ratio = last / first
        if name.startswith("turnlog"):
            met = met and ratio <= 1.5
        rows.append(
            [name, *(f"{cell[(name, s)]:.3f}" for s in sizes), f"{ratio:.2f}x"],
        )
    headers = ["store (ms per turn, median)", *(f"{s:,} items" for s in sizes), "last / first"]
    return table(headers, rows), met


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="15 rounds, 100 and 1,000 items")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--only", default="", help="only the stores whose name holds this text")
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    print(versions())
    sizes = SIZES[:2] if args.quick else SIZES
    rounds = 15 if args.quick else args.rounds
    print(f"{rounds} rounds, sizes {', '.join(f'{s:,}' for s in sizes)}")
    text, met = asyncio.run(run(rounds, sizes, args.seed, args.only))
    print(text)
    verdict = "MET" if met else "MISSED"
    print(f"turnlog at {sizes[-1]:,} items within 1.5x of {sizes[0]:,}: {verdict}")
    print(f"run time {time.perf_counter() - started:.1f} s, load average at the end ", end="")
    print(f"{os.getloadavg()[0]:.1f}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
