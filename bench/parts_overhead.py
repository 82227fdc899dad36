"""What content parts cost text-only sessions (issue 25): appends and view reads of this checkout
against the checkout before parts, in the same run.

Two worker processes run the same workload, one importing turnlog from this checkout's `src/`,
the other from the baseline's (by default a temporary `git worktree` of c729f2f, the commit
before content parts; `--baseline SRC` names another checkout's `src/`). Each worker builds the
same content from the same seed, then waits for the parent, which asks for one timed block at a
time: for every round, the contenders in a shuffled order, each run in the baseline and in
this checkout back to back (which one goes first alternates by round), so both see the same
moment of a busy machine. A worker collects the garbage before and disables the collector
during a block; each contender has one untimed warm-up block first.

The contenders, on `MemoryStore` and `SqliteStore` (a file per contender, WAL,
synchronous=NORMAL), text only:

- `store.append_events(sid, [event], version)`: one message per call, the events built before
  (the store and the codec alone);
- `store.append_events(sid, events, version)` with 100 events per call;
- `service.append_message(sid, Message.user(text))`: what an application calls, the message
  built in the block and its tokens counted (o200k);
- `service.view(sid)` of a 50-event view behind a boundary, over 1,000 covered events;
- `service.view(sid)` of a 300-event session never compacted (the view is the whole log);
- `service.events(sid)`, the whole 1,050-event log of the compacted session (context).

A block is timed in CPU time of the worker (`time.process_time`: user and system) and in wall
time. Both workloads are CPU-bound (SQLite at synchronous=NORMAL writes to the page cache, no
fsync), and on a shared machine the CPU time leaves out the waits for a core that other jobs
cause, which swing the wall time by 2x from one block to the next. Reported per contender: the
median CPU and wall time per operation in each checkout, and the median of the per-round
head / base ratios (each pair ran back to back), of CPU time (the verdict) and of wall time.
Target: within 5% (head / base <= 1.05).

`--profile NAME` runs that contender under cProfile in both workers after the rounds, three
blocks each, and prints each one's functions by own time (cProfile's own cost per call
inflates small functions: read it for where, and the table for how much).

    python bench/parts_overhead.py [--quick] [--baseline SRC] [--profile 'memory append 1/call']

About 5-10 minutes on two busy cores (41 rounds); --quick about 30 s.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

BASE_COMMIT = "c729f2f"
TARGET = 1.05
HERE = Path(__file__).resolve().parent
HEAD_SRC = HERE.parent / "src"
SESSION = "bench-session"
PROFILED = 3  # blocks run under cProfile by --profile

# contender -> operations per timed block, per store; each worker builds what its blocks use
KINDS = ("memory", "sqlite")
WORKLOADS = {
    "append 1/call": {"memory": 1_000, "sqlite": 200},
    "append 100/call": {"memory": 10, "sqlite": 5},
    "append_message": {"memory": 200, "sqlite": 100},
    "view, 50 behind a boundary": {"memory": 2_000, "sqlite": 40},
    "view, 300 never compacted": {"memory": 1_000, "sqlite": 5},
    "events, 1,050-event log": {"memory": 1_000, "sqlite": 3},
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few rounds")
    parser.add_argument("--seed", type=int, default=2, help="seed for content and round order")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 41; quick 5)")
    parser.add_argument(
        "--baseline",
        default=None,
        help=f"the baseline checkout's src/ (default: a temporary worktree of {BASE_COMMIT})",
    )
    parser.add_argument(
        "--head", default=str(HEAD_SRC), help="this side's src/ (default: this checkout's)"
    )
    parser.add_argument("--profile", default=None, help="a contender to profile in both, after")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# -- the worker: one checkout's turnlog ----------------------------------------------------------


class Workload:
    """The contenders of one worker, built from the seed (the same in both checkouts)."""

    def __init__(self, tmp: Path, seed: int, rounds: int) -> None:
        from _harness import conversation, message_events, words
        from turnlog import (
            CompactionBoundary,
            MemoryStore,
            Message,
            Session,
            SessionService,
            SqliteStore,
        )
        from turnlog.events import new_id

        self.blocks: dict[str, Callable[[], int]] = {}
        rng = random.Random(seed)
        n = 0

        def store(kind: str) -> Any:
            nonlocal n
            n += 1
            made = MemoryStore() if kind == "memory" else SqliteStore(tmp / f"s{n}.db")
            made.create_session(Session(SESSION, created_at=datetime.now(UTC)))
            return made

        def events(count: int, tag: str) -> list[Any]:
            return message_events(
                SESSION, conversation(random.Random(rng.random()), prefix=tag), count, id_prefix=tag
            )

        for kind in KINDS:
            inner = {name: sizes[kind] for name, sizes in WORKLOADS.items()}
            blocks = rounds + 1 + PROFILED  # the warm-up, the rounds, the profiled blocks

            s1 = store(kind)
            self.blocks[f"{kind} append 1/call"] = _singles(
                s1, events(blocks * inner["append 1/call"], f"{kind}1"), inner["append 1/call"]
            )
            s100 = store(kind)
            self.blocks[f"{kind} append 100/call"] = _batches(
                s100,
                events(blocks * inner["append 100/call"] * 100, f"{kind}b"),
                inner["append 100/call"],
            )
            service = SessionService(store(kind))
            texts = [
                words(rng, rng.randint(10, 40)) for _ in range(blocks * inner["append_message"])
            ]
            self.blocks[f"{kind} append_message"] = _messages(
                service, Message, texts, inner["append_message"]
            )

            compacted = store(kind)
            covered = events(1_000, f"{kind}c")
            compacted.append_events(SESSION, covered, 0, check_rules=False)
            tail = events(50, f"{kind}v")
            assert tail[0].starts_turn
            compacted.append_events(SESSION, tail, 1_000, check_rules=False)
            boundary = CompactionBoundary(
                id=new_id(),
                pinned_event_ids=(),
                summary_event_ids=(),
                preserved_event_ids=tuple(e.id for e in tail),
                covered_event_count=1_000,
                tokens_estimated_saved=0,
                strategy="window:last_events(50)",
            )
            compacted.append_events(SESSION, [boundary.to_event(SESSION)], 1_050)
            reader = SessionService(compacted)
            self.blocks[f"{kind} view, 50 behind a boundary"] = _reads(
                reader.view, inner["view, 50 behind a boundary"], 50
            )
            self.blocks[f"{kind} events, 1,050-event log"] = _reads(
                reader.events, inner["events, 1,050-event log"], 1_051
            )
            whole = store(kind)
            whole.append_events(SESSION, events(300, f"{kind}w"), 0)
            self.blocks[f"{kind} view, 300 never compacted"] = _reads(
                SessionService(whole).view, inner["view, 300 never compacted"], 300
            )

    def run(self, name: str) -> tuple[float, float]:
        """One timed block: (wall seconds, CPU seconds of this process) per operation."""
        block = self.blocks[name]
        gc.collect()
        gc.disable()
        try:
            cpu = time.process_time()
            start = time.perf_counter()
            ops = block()
            elapsed = time.perf_counter() - start
            cpu = time.process_time() - cpu
        finally:
            gc.enable()
        return elapsed / ops, cpu / ops

    def profile(self, name: str) -> str:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        ops = 0
        profiler.enable()
        for _ in range(PROFILED):
            ops += self.blocks[name]()
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        out.write(f"{ops} operations\n")
        stats.sort_stats("tottime").print_stats(25)
        return out.getvalue()


def _singles(store: Any, events: list[Any], per_block: int) -> Callable[[], int]:
    state = {"at": 0, "version": 0}

    def block() -> int:
        version, at = state["version"], state["at"]
        for event in events[at : at + per_block]:
            version = store.append_events(SESSION, [event], version)
        state["at"], state["version"] = at + per_block, version
        return per_block

    return block


def _batches(store: Any, events: list[Any], batches: int) -> Callable[[], int]:
    state = {"at": 0, "version": 0}

    def block() -> int:
        version, at = state["version"], state["at"]
        for _ in range(batches):
            version = store.append_events(SESSION, events[at : at + 100], version)
            at += 100
        state["at"], state["version"] = at, version
        return 100 * batches

    return block


def _messages(service: Any, message: Any, texts: list[str], per_block: int) -> Callable[[], int]:
    """Alternating user and assistant messages, built in the block, through the service."""
    state = {"at": 0}

    def block() -> int:
        at = state["at"]
        for i, text in enumerate(texts[at : at + per_block], start=at):
            built = message.user(text) if i % 2 == 0 else message.assistant(text)
            service.append_message(SESSION, built)
        state["at"] = at + per_block
        return per_block

    return block


def _reads(read: Callable[[str], list[Any]], times: int, expect: int) -> Callable[[], int]:
    def block() -> int:
        for _ in range(times):
            got = read(SESSION)
        assert len(got) == expect, (len(got), expect)
        return times

    return block


def worker(src: str, rounds: int, seed: int) -> None:
    """Serve blocks on stdin/stdout, one JSON line each way."""
    import turnlog

    where = os.path.realpath(os.path.dirname(turnlog.__file__))
    assert where.startswith(os.path.realpath(src)), f"turnlog from {where}, not {src}"
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        work = Workload(Path(tmp), seed, rounds)
        print(json.dumps({"ready": where, "names": list(work.blocks)}), flush=True)
        for line in sys.stdin:
            ask = json.loads(line)
            if ask["op"] == "run":
                wall, cpu = work.run(ask["name"])
                print(json.dumps({"wall": wall, "cpu": cpu}), flush=True)
            elif ask["op"] == "profile":
                print(json.dumps({"text": work.profile(ask["name"])}), flush=True)
            else:
                break


# -- the parent ---------------------------------------------------------------------------------


class Worker:
    def __init__(self, src: str, rounds: int, seed: int) -> None:
        env = dict(os.environ, PYTHONPATH=src, PYTHONDONTWRITEBYTECODE="1")
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", src]
        command += ["--rounds", str(rounds), "--seed", str(seed)]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        ready = self._read()
        self.where, self.names = ready["ready"], ready["names"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"a worker stopped (exit {self.proc.wait()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, op: str, name: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "name": name}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def med(side: list[dict[str, float]], clock: str) -> float:
    return statistics.median(x[clock] for x in side)


def paired(head: list[dict[str, float]], base: list[dict[str, float]], clock: str) -> float:
    """The median of the per-round head / base ratios."""
    return statistics.median(x[clock] / y[clock] for x, y in zip(head, base, strict=True))


@contextmanager
def baseline_src(given: str | None) -> Iterator[str]:
    """`given`, or the src/ of a temporary worktree of BASE_COMMIT (removed afterwards)."""
    if given is not None:
        yield given
        return
    repo = HERE.parent
    with tempfile.TemporaryDirectory(prefix="turnlog-base-") as tmp:
        tree = Path(tmp, "tree")
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), BASE_COMMIT],
            check=True,
            capture_output=True,
        )
        try:
            yield str(tree / "src")
        finally:
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )


def main() -> None:
    args = parse()
    rounds = args.rounds or (5 if args.quick else 41)
    if args.worker is not None:
        worker(args.worker, rounds, args.seed)
        return
    from _harness import machine, table, verdict

    quick = " (--quick: not the reported figures)" if args.quick else ""
    print(f"Content parts' cost to text-only sessions: this checkout against the one before{quick}")
    print(machine().splitlines()[0])
    with baseline_src(args.baseline) as base_src:
        base = Worker(base_src, rounds, args.seed)
        head = Worker(args.head, rounds, args.seed)
        print(f"base: turnlog from {base.where}\nhead: turnlog from {head.where}")
        names = list(head.names)
        assert names == base.names
        samples: dict[str, dict[str, list[dict[str, float]]]] = {
            n: {"base": [], "head": []} for n in names
        }
        for name in names:  # warm-up
            base.ask("run", name)
            head.ask("run", name)
        rng = random.Random(args.seed)
        started = time.perf_counter()
        for r in range(rounds):
            order = names[:]
            rng.shuffle(order)
            for name in order:
                pair = [("base", base), ("head", head)]
                for side, w in pair if r % 2 else reversed(pair):
                    samples[name][side].append(w.ask("run", name))
        took = time.perf_counter() - started
        profiles = {}
        if args.profile is not None:
            profiles = {
                side: w.ask("profile", args.profile)["text"]
                for side, w in (("base", base), ("head", head))
            }
        base.close()
        head.close()

    print(
        f"\n{rounds} rounds in {took:.0f} s; us of CPU per operation (an append: per event), "
        "medians; head/base: the median of the per-round ratios, of CPU time (the verdict) and "
        "of wall-clock time"
    )
    rows = []
    worst = 0.0
    for name in names:
        b, h = samples[name]["base"], samples[name]["head"]

        cpu = paired(h, b, "cpu")
        worst = max(worst, cpu)
        rows.append(
            [
                name,
                f"{med(b, 'cpu') * 1e6:,.2f}",
                f"{med(h, 'cpu') * 1e6:,.2f}",
                f"{cpu:.3f}x",
                f"{paired(h, b, 'wall'):.3f}x",
                f"{med(b, 'wall') * 1e6:,.2f}",
                f"{med(h, 'wall') * 1e6:,.2f}",
                verdict(cpu <= TARGET),
            ]
        )
    print(
        table(
            [
                "contender",
                "base CPU us",
                "head CPU us",
                "head/base CPU",
                "head/base wall",
                "base wall us",
                "head wall us",
                f"<= {TARGET}",
            ],
            rows,
        )
    )
    print(f"\nworst head/base (CPU): {worst:.3f}x (target <= {TARGET}): {verdict(worst <= TARGET)}")
    for side, text in profiles.items():
        print(f"\n--- cProfile, {side}: {args.profile} ---\n{text}")


if __name__ == "__main__":
    main()
