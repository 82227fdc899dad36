"""What content parts cost text-only sessions, counted in instructions (issue 25): deterministic.

bench/parts_overhead.py times this checkout against the one before content parts (c729f2f) in
CPU time; on a shared 2-core machine its per-round ratios move by several per cent from run to
run (a model server or a test suite beside it moves them by 10%). This script counts what the
same work executes instead, under valgrind's callgrind: for each contender and each checkout, a
fresh interpreter builds the same text-only content from the same seed, does the work once to
warm up, and is counted twice, doing the work 0 and N times after the warm-up; the difference
over N is the instructions per operation, and head / base their ratio. The collector is
disabled during the counted work, `PYTHONHASHSEED=0`. Target: within 5% (head / base <= 1.05).

Contenders, on `SqliteStore` (WAL, synchronous=NORMAL) and `MemoryStore`, text only:
`store.append_events` of 1 and of 100 events a call (per event), `service.append_message`
(tokens counted), `service.events` of a 1,050-event log compacted to 50, and `service.view` of
a 300-event session never compacted.

    python bench/parts_overhead_instructions.py [--baseline c729f2f] [--head REV]

Needs valgrind (Debian's package) and git; about 5 minutes.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import argparse  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.05

# argv: src, contender, n. Builds the content, warms up, then does the work n times.
WORKER = r"""
import gc, random, sys, tempfile
from datetime import UTC, datetime
src, contender, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, src)
import turnlog
assert turnlog.__file__.startswith(src), turnlog.__file__
from turnlog import (CompactionWindow, MemoryStore, Message, Session, SessionEvent,
                     SessionService, SqliteStore, WindowCompactionStrategy)
rng = random.Random(1)
WORDS = "the deploy runs at noon and the rollback plan is in the wiki page of the team".split()
def words(k): return " ".join(rng.choice(WORDS) for _ in range(k))
def message(i): return Message.user(words(20)) if i % 2 == 0 else Message.assistant(words(30))
kind, _, what = contender.partition(" ")
path = tempfile.mkdtemp() + "/bench.db"
store = MemoryStore() if kind == "memory" else SqliteStore(path)
if what.startswith("append_events"):
    size = int(what.split("/")[1])
    store.create_session(Session("s", datetime.now(UTC)))
    batches = [[SessionEvent.for_message("s", message(k * size + i)) for i in range(size)]
               for k in range(12 if size > 1 else 1200)]
    version = store.append_events("s", batches[0], 0)
    todo = batches[1 : 2 + n]
    def work():
        global version
        version = store.append_events("s", todo.pop(0), version)
    ops = size
else:
    service = SessionService(store)
    service.create("s")
    if what == "append_message":
        texts = [words(20) for _ in range(n + 1)]
        def work():
            service.append_message("s", Message.user(texts.pop()))
        ops = 1
    else:
        for i in range(1050 if what == "events" else 300):
            service.append_message("s", message(i))
        if what == "events":
            service.compact("s", lambda r: True,
                            WindowCompactionStrategy(CompactionWindow.last_events(50)))
        read = service.events if what == "events" else service.view
        def work():
            read("s")
        ops = 1
work()
gc.disable()
for _ in range(n):
    work()
"""

CONTENDERS = {
    "sqlite append_events/1": 200,
    "sqlite append_events/100": 10,
    "sqlite append_message": 200,
    "sqlite events": 10,
    "sqlite view": 10,
    "memory append_events/1": 200,
    "memory append_message": 200,
}


def count(worker: Path, src: Path, contender: str, n: int) -> int:
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         str(worker), str(src), contender, str(n)],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found, done.stderr[-2000:]
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--baseline", default="c729f2f")
    parser.add_argument(
        "--head", default=None, help="a commit to count instead of this checkout's src/"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp, "base")
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), args.baseline],
            check=True,
        )
        head = Path(tmp, "head")
        if args.head is not None:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(head), args.head],
                check=True,
            )
        try:
            worker = Path(tmp, "worker.py")
            worker.write_text(WORKER, "utf-8")
            sources = {"base": tree / "src", "head": head / "src" if args.head else ROOT / "src"}
            print(f"base: {args.baseline}; head: {args.head or ROOT / 'src'}")
            print(f"{'contender':28s} {'base':>12s} {'head':>12s} {'head/base':>10s}")
            worst = 0.0
            for contender, n in CONTENDERS.items():
                per = {}
                for name, src in sources.items():
                    subprocess.run([sys.executable, str(worker), str(src), contender, "1"],
                                   check=True)  # fmt: skip
                    none = count(worker, src, contender, 0)
                    some = count(worker, src, contender, n)
                    ops = 100 if contender.endswith("/100") else 1
                    per[name] = (some - none) / (n * ops)
                ratio = per["head"] / per["base"]
                worst = max(worst, ratio)
                print(f"{contender:28s} {per['base']:12,.0f} {per['head']:12,.0f} {ratio:9.3f}x")
            met = "MET" if worst <= TARGET else "MISSED"
            print(f"worst head/base: {worst:.3f}x (target <= {TARGET}x): {met}")
        finally:
            for made in (tree, head) if args.head else (tree,):
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(made)],
                    check=False,
                )


if __name__ == "__main__":
    main()
