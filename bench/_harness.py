"""What the benchmarks share: interleaved timing, medians, tables, conversations, machine facts.

Not a benchmark itself. Each `bench/<name>.py` imports it after setting
`sys.dont_write_bytecode`, so running a benchmark writes nothing outside its temp dir.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import turnlog
from turnlog import Message, SessionEvent, ToolCall, ToolResult

Block = Callable[[], int]
"""Runs one timed block and returns how many operations it did."""

_WORD_TEXT = (
    "the of and to in is that for it with as on be at by this had not are but from or have an "
    "they which one you were all we when there can been has more if will would who so no out up "
    "into its time than two may first only new some could these see other then way over use "
    "water long little very after words called just where most know get through back much go "
    "good before find because any day same right look think also around another came come work "
    "three word must does part even place well such here take why things help put years "
    "different away again off went old number great tell men say small every found still between "
    "name should home big give air line set own under read last never us left end along while "
    "might next sound below saw something thought both few those always looked show large often "
    "together asked house world going want school important until form food keep children feet "
    "land side without boy once animals life enough took sometimes four head above kind began "
    "almost live page got earth need far hand high year mother light parts country father let "
    "night following picture being study second eyes soon times story boys since white days "
    "ever paper hard near sentence better best across during today others however sure means "
    "knew whether kubernetes deployment latency postgres invoice refund timeout retry webhook "
    "migration schema index replica cluster"
)
_WORDS = _WORD_TEXT.split()


def parse_args(doc: str | None, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line every benchmark takes: `--quick` and `--seed`."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a fast smoke run: smaller sizes, fewer rounds"
    )
    parser.add_argument("--seed", type=int, default=2, help="seed for content and round order")
    return parser.parse_args(argv)


def machine() -> str:
    """Two lines: cores, Python, SQLite, platform; and which turnlog was measured."""
    return (
        f"nproc {os.cpu_count()} | Python {platform.python_version()} | "
        f"SQLite {sqlite3.sqlite_version} | {platform.system()} {platform.machine()}\n"
        f"turnlog {turnlog.__version__} from {os.path.dirname(turnlog.__file__)}"
    )


@dataclass
class Samples:
    """Seconds per operation, one sample per timed block."""

    name: str
    per_op: list[float] = field(default_factory=list)
    cpu_per_op: list[float] = field(default_factory=list)
    """The same blocks in the process's CPU time (`time.process_time`), for a machine whose
    other jobs make the wall time swing."""

    @property
    def median(self) -> float:
        return statistics.median(self.per_op)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_per_op)

    def quantile(self, q: float) -> float:
        ordered = sorted(self.per_op)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def interleave(contenders: dict[str, Block], rounds: int, seed: int) -> dict[str, Samples]:
    """Time every contender once per round, in a shuffled order each round.

    Each contender runs one untimed warm-up block first. The garbage collector is collected
    before and disabled during each timed block (as `timeit` does).
    """
    rng = random.Random(seed)
    samples = {name: Samples(name) for name in contenders}
    for block in contenders.values():
        block()
    order = list(contenders)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            gc.collect()
            gc.disable()
            try:
                start, cpu = time.perf_counter(), time.process_time()
                ops = contenders[name]()
                elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            finally:
                gc.enable()
            samples[name].per_op.append(elapsed / ops)
            samples[name].cpu_per_op.append(cpu / ops)
    return samples


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table: the first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest])

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def verdict(met: bool) -> str:
    return "MET" if met else "MISSED"


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def conversation(rng: random.Random, *, prefix: str = "") -> Iterator[Message]:
    """An endless, realistic conversation: plain turns and tool-calling turns, in cycles of six
    events (user, assistant with a tool call, tool result, assistant; user, assistant).

    Texts are 10-60 words, tool results up to 120, so an event is 15-200 tokens.
    """
    n = 0
    while True:
        n += 1
        call_id = f"call_{prefix}{n}"
        yield Message.user(words(rng, rng.randint(10, 40)))
        yield Message.assistant(
            tool_calls=[ToolCall(call_id, "search_docs", f'{{"query": "{words(rng, 4)}"}}')]
        )
        yield Message.tool(ToolResult(call_id, "search_docs", words(rng, rng.randint(30, 120))))
        yield Message.assistant(words(rng, rng.randint(20, 60)))
        yield Message.user(words(rng, rng.randint(5, 25)))
        yield Message.assistant(words(rng, rng.randint(15, 50)))


def message_events(
    session_id: str, messages: Iterator[Message], count: int, *, id_prefix: str
) -> list[SessionEvent]:
    """`count` message events of `session_id`, with readable ids `<id_prefix>-<n>`."""
    return [
        SessionEvent.for_message(session_id, next(messages), event_id=f"{id_prefix}-{i}")
        for i in range(count)
    ]


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def per_second(seconds_per_op: float) -> str:
    return f"{1 / seconds_per_op:,.0f}"


class Cursor:
    """Where a writer is in its pre-built events, and the version it expects next."""

    def __init__(self) -> None:
        self.at = 0
        self.version = 0


def store_writer(store: Any, session: str, events: list[SessionEvent]) -> Callable[[int], None]:
    """A writer that appends the next `n` events, one per call, each with its expected version."""
    cur = Cursor()

    def run(n: int) -> None:
        version = cur.version
        for event in events[cur.at : cur.at + n]:
            version = store.append_events(session, [event], version)
        cur.at += n
        cur.version = version

    return run
