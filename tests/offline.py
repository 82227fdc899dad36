"""Run a Python snippet in a fresh interpreter whose sockets refuse to connect: proves that
loading a packaged model downloads nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_REFUSE = textwrap.dedent(
    """
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network access attempted")

    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
    """
)


def run_offline(script: str, timeout: float = 120) -> str:
    """Run `script` (dedented) with no network and no hub variables; its standard output.

    Fails the test (AssertionError with its stderr) when it exits non-zero."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    result = subprocess.run(
        [sys.executable, "-c", _REFUSE + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
