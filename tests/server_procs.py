"""What the test servers (pg_server.py, redis_cluster.py) share: free loopback ports, temp dirs
that a later run cleans up if this one was killed, and child processes that die with the test run.

A server started here is a child of the test process that
- receives a signal when that process dies, however it dies (Linux `PR_SET_PDEATHSIG`; elsewhere
  only the normal teardown and `atexit` stop it), and
- keeps its files in `<tmp>/turnlog-<kind>-*/`, next to an `owner` file with the test process's
  pid: `scratch_dir()` removes the dirs of dead owners before making a new one.
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class ServerUnavailable(RuntimeError):
    """A test server could not be started: its binary is missing, or it did not come up."""


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_ports(n: int, *, bus: bool = False) -> list[int]:
    """`n` distinct free loopback ports in 20000-29999 (and, with `bus`, their Redis cluster bus
    ports, +10000, free too).

    Raises:
        ServerUnavailable: no such ports were found in 1,000 tries.
    """
    rng = random.Random()
    ports: list[int] = []
    for _ in range(1000):
        port = rng.randrange(20000, 30000)
        if port in ports or (bus and port + 10000 in ports):
            continue
        if _free(port) and (not bus or _free(port + 10000)):
            ports.append(port)
            if len(ports) == n:
                return ports
    raise ServerUnavailable(f"found no {n} free loopback ports")


def die_with_parent(sig: signal.Signals) -> Callable[[], None]:
    """A `preexec_fn` that makes the child receive `sig` when the test process dies.

    Call it after any change of user (subprocess's `user=`/`group=` are applied before
    `preexec_fn`), since a change of credentials clears the setting.
    """
    parent = os.getpid()

    def guard() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
            if os.getppid() != parent:  # the parent died before the guard was set
                os._exit(1)

    return guard


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep(kind: str) -> None:
    """Remove the scratch dirs of `kind` whose owning test process is gone."""
    for path in Path(tempfile.gettempdir()).glob(f"turnlog-{kind}-*"):
        try:
            owner = int((path / "owner").read_text())
        except (OSError, ValueError):
            continue  # not ours, or being created right now
        if not _alive(owner):
            shutil.rmtree(path, ignore_errors=True)


def scratch_dir(kind: str) -> Path:
    """A new temp dir `turnlog-<kind>-*` owned by this process (after sweeping dead ones)."""
    _sweep(kind)
    path = Path(tempfile.mkdtemp(prefix=f"turnlog-{kind}-"))
    (path / "owner").write_text(str(os.getpid()))
    return path


def log_tail(path: Path, size: int = 2000) -> str:
    """The last `size` characters of a log file ("" when it cannot be read)."""
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""
