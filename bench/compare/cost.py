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
- turnlog through each framework's adapter, at the peer's durability where it has one:
  `TurnlogSession` (`get_items()`, then `add_items(turn)`) on
  `AsyncSqliteStore(synchronous="FULL")` beside `SQLiteSession`;
  `TurnlogChatMessageHistory` (`.messages`, then `add_messages(turn)`) on
  `SqliteStore(synchronous="FULL")` (the durability a SQL history would have) and on
  `MemoryStore` beside the in-memory history; `load_history`, then `save_history(turn)` and
  `service.compact` (as an application does around `agent.run`) on
  `SqliteStore(synchronous="OFF")` beside the JSON file (no fsync either).
- turnlog through `SessionService` directly (`--no-direct` leaves these out): read
  `view_messages(sid)`, append the turn with `append_events` (one version-checked write), then
  `compact`, on `SqliteStore` FULL and OFF and on `MemoryStore`.

Every turnlog row compacts the same way: a trigger that fires when the view passes 60 events,
back to `last_events(50)` (no summarizer; a pass writes every few turns). Each turnlog log is
seeded in writes of 1,000 items through the same interface, compacted to a 50-event view.

After each timed turn the peers' stores are put back to their size, untimed (`pop_item`, list
truncation, the file rewritten), so a size stays that size; turnlog's logs keep growing (by 4
events a turn) while their views stay at 50-60 events. The last column sets each adapter row
beside its framework's native store at the largest size. Rounds interleave the contenders in a
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
    AsyncSessionService,
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
from turnlog.stores.sqlite_async import AsyncSqliteStore  # noqa: E402

SIZES = (100, 1_000, 10_000)
VIEW = 50
AGENTS = "Agents SDK SQLiteSession, get_items()"
LANGCHAIN = "LangChain InMemoryChatMessageHistory"
PYDANTIC = "pydantic-ai JSON file (ModelMessagesTypeAdapter)"

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
    """One store at one size: `turn` is timed, `restore` is not.

    `peer` names the native store a turnlog row is set beside (its ratio at the largest size is
    reported); `ours` marks the turnlog rows, which the 1.5x target applies to.
    """

    def __init__(
        self,
        name: str,
        size: int,
        turn: Turn,
        restore: Turn | None = None,
        *,
        ours: bool = False,
        peer: str = "",
    ) -> None:
        self.name, self.size, self.turn, self.restore = name, size, turn, restore
        self.ours, self.peer = ours, peer
        self.samples: list[float] = []


def compaction() -> tuple[Callable[[CompactionRequest], bool], WindowCompactionStrategy]:
    """The compaction of every turnlog row: past 60 events in the view, back to 50."""
    return view_over(VIEW + 10), WindowCompactionStrategy(CompactionWindow.last_events(VIEW))


def in_view(n: int) -> bool:
    """The size a turnlog view may have after a turn: 50-60 events, give or take a turn."""
    return VIEW - 8 <= n <= VIEW + 14


def seed_of(size: int, content: Content, shape: Callable[[dict[str, Any]], list[Any]]) -> list[Any]:
    seed: list[Any] = []
    while len(seed) < size:
        seed += shape(content.turn())
    return seed[:size]


def chunks(items: list[Any]) -> list[list[Any]]:
    """`items` in writes of 1,000 (whole turns: 1,000 is a multiple of 4)."""
    return [items[start : start + 1000] for start in range(0, len(items), 1000)]


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

    name = AGENTS + ("" if limit is None else f" limit={limit}")
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

    return Contender(LANGCHAIN, size, turn, restore)


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

    return Contender(PYDANTIC, size, turn, restore)


def turnlog(service: SessionService, label: str, size: int, content: Content) -> Contender:
    sid = f"{label}-{size}"
    service.create(sid)
    messages: list[Message] = []
    while len(messages) < size:
        messages += turnlog_turn(content.turn())
    events = [SessionEvent.for_message(sid, m) for m in messages[:size]]
    for start in range(0, size, 1000):
        service.append_events(sid, events[start : start + 1000], service.version(sid))
    trigger, strategy = compaction()
    service.compact(sid, lambda request: True, strategy)

    async def turn() -> None:
        seen = service.view_messages(sid)
        assert in_view(len(seen))
        new = [SessionEvent.for_message(sid, m) for m in turnlog_turn(content.turn())]
        service.append_events(sid, new, service.version(sid))
        service.compact(sid, trigger, strategy)

    return Contender(f"turnlog SessionService, {label}", size, turn, ours=True)


# -- turnlog through each framework's adapter -------------------------------------------------


async def agents_turnlog(service: AsyncSessionService, size: int, content: Content) -> Contender:
    """`TurnlogSession`: `get_items()` (the view), then `add_items(turn)`, which compacts."""
    from turnlog.integrations.openai_agents import TurnlogSession

    trigger, strategy = compaction()
    session = TurnlogSession(f"agents-{size}", service, trigger=trigger, strategy=strategy)
    for chunk in chunks(seed_of(size, content, agents_turn)):
        await session.add_items(chunk)

    async def turn() -> None:
        seen = await session.get_items()
        assert in_view(len(seen))
        await session.add_items(agents_turn(content.turn()))

    name = "turnlog TurnlogSession, AsyncSqliteStore FULL"
    return Contender(name, size, turn, ours=True, peer=AGENTS)


def langchain_turnlog(
    service: SessionService, label: str, size: int, content: Content
) -> Contender:
    """`TurnlogChatMessageHistory`: `.messages` (the view), then `add_messages(turn)`."""
    from turnlog.integrations.langchain import TurnlogChatMessageHistory

    trigger, strategy = compaction()
    history = TurnlogChatMessageHistory(
        f"langchain-{size}", service, trigger=trigger, strategy=strategy
    )
    for chunk in chunks(seed_of(size, content, langchain_turn)):
        history.add_messages(chunk)

    async def turn() -> None:
        seen = history.messages
        assert in_view(len(seen))
        history.add_messages(langchain_turn(content.turn()))

    name = f"turnlog TurnlogChatMessageHistory, {label}"
    return Contender(name, size, turn, ours=True, peer=LANGCHAIN)


def pydantic_turnlog(service: SessionService, size: int, content: Content) -> Contender:
    """`load_history` (the view), then `save_history(turn)` and `compact`, as around a run."""
    from turnlog.integrations.pydantic_ai import load_history, save_history

    trigger, strategy = compaction()
    sid = f"pydantic-{size}"
    for chunk in chunks(seed_of(size, content, pydantic_turn)):
        save_history(service, sid, chunk)
        service.compact(sid, trigger, strategy)

    async def turn() -> None:
        history = load_history(service, sid)
        assert in_view(len(history))
        save_history(service, sid, pydantic_turn(content.turn()))
        service.compact(sid, trigger, strategy)

    name = "turnlog load_history/save_history, SQLite OFF"
    return Contender(name, size, turn, ours=True, peer=PYDANTIC)


async def measure(contenders: list[Contender], rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    for c in contenders:  # one untimed warm-up turn each
        await c.turn()
        if c.restore:
            await c.restore()
    # The seeded histories hold many objects: keep them out of the collections made
    # before each sample, which would otherwise walk them all every time.
    gc.collect()
    gc.freeze()
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
    gc.unfreeze()


async def run(
    rounds: int, sizes: tuple[int, ...], seed: int, only: str = "", direct: bool = True
) -> tuple[str, bool]:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        content = Content(seed)

        def sqlite(file: str, synchronous: Any) -> SessionService:
            return SessionService(SqliteStore(tmp / file, synchronous=synchronous))

        full, off, memory = sqlite("full.db", "FULL"), sqlite("off.db", "OFF"), MemoryStore()
        services = [full, off, SessionService(memory)]
        agents_store = AsyncSqliteStore(tmp / "agents.db", synchronous="FULL")
        agents_service = AsyncSessionService(agents_store)
        adapters = [
            sqlite("langchain.db", "FULL"),
            SessionService(MemoryStore()),
            sqlite("pydantic.db", "OFF"),
        ]
        contenders: list[Contender] = []
        for size in sizes:
            contenders += [
                await agents(tmp, size, content, None),
                await agents(tmp, size, content, VIEW),
                await agents_turnlog(agents_service, size, content),
                await langchain(size, content),
                langchain_turnlog(adapters[0], "SQLite FULL", size, content),
                langchain_turnlog(adapters[1], "MemoryStore", size, content),
                await pydantic(tmp, size, content),
                pydantic_turnlog(adapters[2], size, content),
            ]
            if direct:
                contenders += [
                    turnlog(services[0], "SQLite synchronous=FULL", size, content),
                    turnlog(services[1], "SQLite synchronous=OFF", size, content),
                    turnlog(services[2], "MemoryStore", size, content),
                ]
        contenders = [c for c in contenders if only in c.name]
        await measure(contenders, rounds, seed)
        for service in (*services, *adapters):
            service.close()
        await agents_service.close()
    return report(contenders, sizes)


def report(contenders: list[Contender], sizes: tuple[int, ...]) -> tuple[str, bool]:
    """The table of medians, and whether every turnlog row met the 1.5x target."""
    names = list(dict.fromkeys(c.name for c in contenders))
    cell = {(c.name, c.size): statistics.median(c.samples) * 1000 for c in contenders}
    first_of = {c.name: c for c in contenders}
    rows = []
    met = True
    for name in names:
        first, last = cell[(name, sizes[0])], cell[(name, sizes[-1])]
        ratio = last / first
        peer = first_of[name].peer
        against = "-"
        if (peer, sizes[-1]) in cell:
            against = f"{last / cell[(peer, sizes[-1])]:.2f}x"
        if first_of[name].ours:
            met = met and ratio <= 1.5
        rows.append(
            [name, *(f"{cell[(name, s)]:.3f}" for s in sizes), f"{ratio:.2f}x", against],
        )
    headers = [
        "store (ms per turn, median)",
        *(f"{s:,} items" for s in sizes),
        "last / first",
        "/ native at last",
    ]
    return table(headers, rows), met


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="15 rounds, 100 and 1,000 items")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--only", default="", help="only the stores whose name holds this text")
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument(
        "--no-direct",
        action="store_true",
        help="leave out the rows of turnlog through SessionService without an adapter",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    print(versions())
    sizes = SIZES[:2] if args.quick else SIZES
    rounds = 15 if args.quick else args.rounds
    print(f"{rounds} rounds, sizes {', '.join(f'{s:,}' for s in sizes)}")
    text, met = asyncio.run(run(rounds, sizes, args.seed, args.only, not args.no_direct))
    print(text)
    verdict = "MET" if met else "MISSED"
    print(f"turnlog at {sizes[-1]:,} items within 1.5x of {sizes[0]:,}: {verdict}")
    print(f"run time {time.perf_counter() - started:.1f} s, load average at the end ", end="")
    print(f"{os.getloadavg()[0]:.1f}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
