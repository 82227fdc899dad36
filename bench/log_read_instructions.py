"""The log read beside 100 MiB of images, counted in instructions (issue 25): deterministic.

bench/attachments.py (a) times `service.events` of two SQLite sessions, one whose 100 user
messages each carry a 1 MiB image stored apart, and its twin without the images; on a shared
2-core machine its timings swing by several per cent from run to run. This script counts what
the same reads execute instead: it builds the two sessions as (a) does, then runs each read in
a fresh interpreter under valgrind's callgrind (`valgrind --tool=callgrind`), once with no read
and once with `--reads` reads after a warm-up read, and reports the instructions per read (the
difference over the reads) and their ratio. The collector is disabled during the reads, as the
timed blocks of bench/_harness.py do, and `PYTHONHASHSEED=0`. Needs valgrind (Debian's
package); about 2 minutes.

    python bench/log_read_instructions.py [--reads 20]
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

from attachments import read_session  # noqa: E402

TARGET = 1.1

READER = """
import gc, sys
from turnlog import SessionService, SqliteStore
path, sid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
service = SessionService(SqliteStore(path))
service.events(sid)
gc.disable()
for _ in range(n):
    service.events(sid)
"""


def instructions(reader: Path, path: Path, sid: str, reads: int, out: Path) -> int:
    """The instructions callgrind counts for a run of `reader` doing `reads` reads."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            str(reader),
            str(path),
            sid,
            str(reads),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found, done.stderr[-2000:]
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    with tempfile.TemporaryDirectory() as tmp:
        reader = Path(tmp, "reader.py")
        reader.write_text(READER, "utf-8")
        per_read = {}
        for name, images in (("images", 100), ("text only", 0)):
            path = Path(tmp, f"{name.replace(' ', '-')}.db")
            service, sid = read_session("sqlite", path, args.seed, images, 100, 10)
            events = len(service.events(sid))
            service.close()
            for warm in range(2):  # the first run of a checkout may compile; not counted
                instructions(reader, path, sid, 0, Path(tmp, f"warm{warm}.out"))
            none = instructions(reader, path, sid, 0, Path(tmp, "none.out"))
            some = instructions(reader, path, sid, args.reads, Path(tmp, "some.out"))
            per_read[name] = (some - none) / args.reads
            print(f"{name}: {events} events, {per_read[name]:,.0f} instructions per log read")
    ratio = per_read["images"] / per_read["text only"]
    met = "MET" if ratio <= TARGET else "MISSED"
    print(f"images / text only: {ratio:.4f}x (target <= {TARGET}x): {met}")


if __name__ == "__main__":
    main()
