"""What counting at append costs in instructions (issue 11, item 1), under valgrind's callgrind.

bench/append_counts.py times the counting append against the plain one; on a shared machine
its ratio moves by several percent from run to run. Instructions do not: callgrind counts the
same total for the same program and inputs whatever else the machine does. This script runs
`SessionService.append_message` on SQLite (synchronous=NORMAL, the file in /dev/shm when there
is one, so no disk wait is hidden in either) in a child under callgrind, with PYTHONHASHSEED
fixed, twice per contender: its setup alone (the vocabulary built, the store opened, 50 appends
done the contender's way), then the same setup plus N appends. An append's instructions are
(run - setup) / N. Contenders: appends counting (o200k) and storing the count, the same appends
without counting (`record_tokens=False`), and with `--baseline SRC` the plain append of another
checkout's `src/` (issue 11 was filed at b093174: "stays within 10% of today" compares with that).

What it cannot see: cache misses and waits. Read it beside bench/append_counts.py.

    python bench/append_instructions.py [--appends N] [--baseline SRC]   # 2-4 minutes; valgrind
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
    kind, n, folder, made = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[5])
    talk = conversation(random.Random(1))
    messages = [next(talk) for _ in range(SETUP + made)]  # the setup makes them all too
    counter = O200kCounter()
    counter.count("build the vocabulary in the setup")
    store = SqliteStore(os.path.join(folder, f"{kind}-{n}.db"))
    if kind == "baseline":  # another checkout: its SessionService may not take these options
        service = SessionService(store)
    else:
        service = SessionService(store, record_tokens=kind == "counting", token_counter=counter)
    service.create("s")
    for message in messages[: SETUP + n]:
        service.append_message("s", message)
    service.close()
    """
).replace("SETUP", str(SETUP))


def instructions(kind: str, appends: int, made: int, folder: str, source: str | None = None) -> int:
    """Callgrind's total for one child: `kind`'s setup (which makes `made` more messages too)
    then `appends` more appends."""
    out = Path(folder) / f"callgrind.{kind}.{appends}.{made}"
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    if source is not None:
        env["PYTHONPATH"] = source
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-c",
            CHILD,
            kind,
            str(appends),
            folder,
            str(Path(__file__).parent),
            str(made),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the {kind} run ({appends} appends) failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_append(kind: str, appends: int, folder: str, source: str | None = None) -> float:
    """Instructions per append of `kind`, its own setup subtracted."""
    setup = instructions(kind, 0, appends, folder, source)
    return (instructions(kind, appends, appends, folder, source) - setup) / appends


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--appends", type=int, default=1_000)
    parser.add_argument(
        "--baseline",
        metavar="SRC",
        help="another checkout's src/ folder: its plain append is counted too",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    print("instructions per append, SQLite NORMAL, callgrind")
    print(machine())
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-", dir=base) as folder:
        counting = per_append("counting", args.appends, folder)
        plain = per_append("plain", args.appends, folder)
        before = (
            None
            if args.baseline is None
            else per_append("baseline", args.appends, folder, args.baseline)
        )
    print(f"{args.appends:,} appends (after {SETUP} in each setup)")
    print(f"counting: {counting:,.0f} instructions per append")
    print(f"plain:    {plain:,.0f} instructions per append")
    extra = counting / plain - 1
    verdict = "MET" if extra <= LIMIT else "MISSED"
    print(f"counting against plain: {extra:+.1%} (limit +{LIMIT:.0%}): {verdict}")
    if before is not None:
        print(f"baseline: {before:,.0f} instructions per append ({args.baseline})")
        extra = counting / before - 1
        verdict = "MET" if extra <= LIMIT else "MISSED"
        print(
            f"counting against the baseline's plain append: {extra:+.1%} (limit +{LIMIT:.0%}): "
            f"{verdict}"
        )


if __name__ == "__main__":
    main()
