"""Shared fixtures: the addresses of the real servers the store tests use.

PostgreSQL and Redis tests read `TURNLOG_TEST_POSTGRES_DSN` and `TURNLOG_TEST_REDIS_URL`
(defaulting to the local servers). Outside CI they skip, saying why, when no server answers; in
CI (`CI=true`) an unreachable server fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import pytest

from turnlog import MemoryStore, SessionService, SqliteStore

POSTGRES_DSN = os.environ.get(
    "TURNLOG_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("TURNLOG_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _answers(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 2
        ):
            return True
    except OSError:
        return False


def require_server(url: str, default_port: int, what: str, env: str) -> str:
    """`url` if its server answers; else skip (outside CI) or fail (in CI)."""
    if _answers(url, default_port):
        return url
    message = f"no {what} server answers at {url} (set {env} to point at one)"
    if IN_CI:
        pytest.fail(f"{message}; in CI this is a failure, not a skip", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    """The DSN of a reachable PostgreSQL server."""
    return require_server(POSTGRES_DSN, 5432, "PostgreSQL", "TURNLOG_TEST_POSTGRES_DSN")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The URL of a reachable Redis server."""
    return require_server(REDIS_URL, 6379, "Redis", "TURNLOG_TEST_REDIS_URL")


@pytest.fixture(params=["memory", "sqlite"])
def service(request, tmp_path):
    """A SessionService on a MemoryStore and on a SQLite file (the test runs once with each)."""
    store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "t.db")
    with SessionService(store) as svc:
        yield svc
