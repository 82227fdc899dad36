"""Start and stop real Redis servers for the tests and benchmarks: a 3-master cluster, or one
private standalone server (for tests that pause or kill clients, which must not disturb the shared
server).

Each server is a `redis-server` subprocess on a free loopback port, with its files in a temp dir,
no persistence, and `--daemonize no`, so stopping the process stops the server. Every wait is
bounded, and `stop()` kills what is left even when the start failed half-way.

    with RedisCluster.start() as cluster:
        cluster.url          # "redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"

Outside CI, a missing `redis-server`/`redis-cli` skips the tests that need them; in CI it fails
them (the same rule as the `redis_url` fixture in conftest.py).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
START_TIMEOUT = 20.0


class ServerUnavailable(RuntimeError):
    """The Redis binaries are missing, or the servers did not come up in time."""


def binaries() -> tuple[str, str]:
    """The paths of `redis-server` and `redis-cli`.

    Raises:
        ServerUnavailable: one of them is not on PATH.
    """
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        raise ServerUnavailable("redis-server and redis-cli must be on PATH to start test servers")
    return server, cli


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_ports(n: int, *, bus: bool) -> list[int]:
    """`n` distinct free loopback ports in 20000-29999 (and their cluster bus ports, +10000)."""
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


def _cli(cli: str, port: int, *args: str, timeout: float = 5.0) -> str:
    done = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.stdout + done.stderr


class _Servers:
    """Redis server processes in one temp dir."""

    def __init__(self) -> None:
        self.server, self.cli = binaries()
        self.dir = Path(tempfile.mkdtemp(prefix="turnlog-redis-"))
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, port: int, *extra: str) -> None:
        log = open(self.dir / f"redis-{port}.log", "wb")  # noqa: SIM115 - closed below
        try:
            proc = subprocess.Popen(
                [
                    self.server,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                    "--dir",
                    str(self.dir),
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        self.ports.append(port)
        self.procs.append(proc)

    def wait_ping(self, deadline: float) -> None:
        for port, proc in zip(self.ports, self.procs, strict=True):
            while "PONG" not in _cli(self.cli, port, "ping", timeout=2):
                if proc.poll() is not None:
                    raise ServerUnavailable(f"redis-server on {port} exited: {self.log(port)}")
                if time.monotonic() > deadline:
                    raise ServerUnavailable(f"redis-server on {port} did not answer in time")
                time.sleep(0.05)

    def log(self, port: int) -> str:
        try:
            return (self.dir / f"redis-{port}.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """A running 3-master Redis Cluster on loopback ports (no replicas, no persistence)."""

    def __init__(self, servers: _Servers) -> None:
        self._servers = servers
        self.ports = list(servers.ports)

    @property
    def url(self) -> str:
        """The `redis+cluster://` URL naming every master as a seed."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @classmethod
    @contextmanager
    def start(cls, masters: int = 3) -> Iterator[RedisCluster]:
        """Start the cluster, yield it, stop it (the processes die even when starting failed)."""
        servers = _Servers()
        try:
            for port in free_ports(masters, bus=True):
                conf = servers.dir / f"nodes-{port}.conf"
                servers.spawn(
                    port,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(conf),
                    "--cluster-node-timeout",
                    "5000",
                )
            deadline = time.monotonic() + START_TIMEOUT
            servers.wait_ping(deadline)
            out = _cli(
                servers.cli,
                servers.ports[0],
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in servers.ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
                timeout=START_TIMEOUT,
            )
            if "[OK] All 16384 slots covered" not in out:
                raise ServerUnavailable(f"redis-cli --cluster create failed: {out[-2000:]}")
            for port in servers.ports:
                while "cluster_state:ok" not in _cli(servers.cli, port, "cluster", "info"):
                    if time.monotonic() > deadline:
                        raise ServerUnavailable(f"cluster node {port} never reached state ok")
                    time.sleep(0.05)
            yield cls(servers)
        finally:
            servers.stop()


class RedisServer:
    """A private standalone Redis server on a free loopback port (no persistence)."""

    def __init__(self, servers: _Servers) -> None:
        self._servers = servers
        self.port = servers.ports[0]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    @contextmanager
    def start(cls) -> Iterator[RedisServer]:
        """Start the server, yield it, stop it."""
        servers = _Servers()
        try:
            servers.spawn(free_ports(1, bus=False)[0])
            servers.wait_ping(time.monotonic() + START_TIMEOUT)
            yield cls(servers)
        finally:
            servers.stop()


def skip_or_fail(reason: str) -> None:
    """Skip the test (outside CI) or fail it (in CI), saying why."""
    import pytest

    if IN_CI:
        pytest.fail(f"{reason}; in CI this is a failure, not a skip", pytrace=False)
    pytest.skip(reason)
