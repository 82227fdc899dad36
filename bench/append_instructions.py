"""What counting at append costs in instructions (issue 11, item 1), under valgrind's callgrind.

bench/append_counts.py times the counting append against the plain one; on a shared machine
its ratio moves by several percent from run to run. Instructions do not: callgrind counts the
same total for the same program and inputs whatever else the machine does. This script runs
`SessionService.append_message` on SQLite (synchronous=NORMAL, the file in /dev/shm when there
is one, so no disk wait is hidden in either) three times in a child under callgrind, with
PYTHONHASHSEED fixed: the setup alone, then the setup plus N appends counting (o200k), then the
setup plus N appends without counting (`record_tokens=False`). An append's instructions are
(run - setup) / N; the vocabulary is built in the setup of all three (so not counted).

What it cannot see: cache misses and waits. Read it beside bench/append_counts.py.

    python bench/append_instructions.py [--appends N]     # about 2 minutes; needs valgrind
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
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

from _harness import machine  # noqa: E402

LIMIT = 0.10
SETUP = 50  # appends in the setup of every run, counting or not as the run does

CHILD = textwrap.dedent(
    """
    import os, random, sys
    sys.path.insert(0, sys.argv[4])
    from _harness import conversation
    from turnlog import O200kCounter, SessionService, SqliteStore
    mode, n, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    talk = conversation(random.Random(1))
    messages = [next(talk) for _ in range(SETUP + n)]
    counter = O200kCounter()
    counter.count("build the vocabulary in the setup")
    store = SqliteStore(os.path.join(folder, mode + ".db"))
    service = SessionService(store, record_tokens=mode == "counting", token_counter=counter)
    service.create("s")
    for message in messages[:SETUP]:
        service.append_message("s", message)
    if mode != "setup":
        for message in messages[SETUP:]:
            service.append_message("s", message)
    service.close()
    """
).replace("SETUP", str(SETUP))


def instructions(mode: str, appends: int, folder: str) -> int:
    out = Path(folder) / f"callgrind.{mode}"
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-c",
            CHILD,
            mode,
            str(appends),
            folder,
            str(Path(__file__).parent),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"},
        check=False,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the {mode} run failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--appends", type=int, default=1_000)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    print("instructions per append, SQLite NORMAL, callgrind")
    print(machine())
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-", dir=base) as folder:
        setup = instructions("setup", args.appends, folder)
        counting = (instructions("counting", args.appends, folder) - setup) / args.appends
        plain = (instructions("plain", args.appends, folder) - setup) / args.appends
    extra = counting / plain - 1
    print(f"{args.appends:,} appends (after {SETUP} in the setup)")
    print(f"counting: {counting:,.0f} instructions per append")
    print(f"plain:    {plain:,.0f} instructions per append")
    verdict = "MET" if extra <= LIMIT else "MISSED"
    print(f"counting at append costs {extra:+.1%} instructions (limit +{LIMIT:.0%}): {verdict}")


if __name__ == "__main__":
    main()
