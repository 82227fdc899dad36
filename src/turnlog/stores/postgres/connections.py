# Generated from src/turnlog/stores/postgres/connections_async.py by scripts/async_to_sync.py.
# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.
"""The connections of one `PostgresStore`: its pool, opened once, and the warm ones it keeps.

`Connections` owns the store's life cycle: nothing is done when it is made; `open()`
(idempotent; concurrent first calls open once) checks that the server answers, opens the pool
when the store made it, and hands one connection to the store's `prepare` (the schema); every
borrowed connection opens it first when that has not happened yet; `close()` closes the pool
the store made, never a pool of the user's.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import psycopg
from psycopg import errors as pgerrors
from psycopg import pq
from psycopg_pool import ConnectionPool, PoolTimeout

from turnlog.errors import CorruptData, InvalidInput, StoreError
from turnlog.stores.postgres.rows import first_line, where

__all__ = ["Conn", "Connections", "Pool"]

Conn = psycopg.Connection[Any]
Pool = ConnectionPool[Conn]

_KEEP_IDLE_SECONDS: Final = 60.0


class _Borrowed:
    """`with connections.borrow(what, subject) as conn:` borrows a pooled connection and
    gives it back; the store opens first when it has not yet.

    Lost connections and pool timeouts become `StoreError` naming what was being done.
    """

    __slots__ = ("conn", "conns", "lazy", "subject", "what")

    def __init__(
        self, conns: Connections, what: str, subject: str | None, *, lazy: bool = True
    ) -> None:
        self.conns = conns
        self.what = what
        self.subject = subject
        self.lazy = lazy

    @property
    def doing(self) -> str:
        return self.what if self.subject is None else f"{self.what} {self.subject!r}"

    def __enter__(self) -> Conn:
        conns = self.conns
        if conns.closed:
            raise StoreError(f"the PostgresStore on schema {conns.schema!r} is closed")
        if self.lazy and not conns.ready:
            conns.open()
        try:
            self.conn = conns.take()
        except PoolTimeout as exc:
            raise StoreError(
                f"no PostgreSQL connection free or possible within {conns.timeout:g}s while "
                f"{self.doing}: check the server, or raise pool_max"
            ) from exc
        return self.conn

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self.conns.give_back(self.conn)
        if isinstance(exc, psycopg.OperationalError):
            raise StoreError(
                f"PostgreSQL connection lost or refused while {self.doing}: {first_line(exc)}. "
                "A write may or may not have been committed; retrying it with the same event "
                "ids is safe (appends skip ids already stored)"
            ) from exc
        if isinstance(exc, pgerrors.UntranslatableCharacter):
            raise InvalidInput(
                f"PostgreSQL cannot store this text while {self.doing} (jsonb refuses the "
                f"character U+0000): {first_line(exc)}"
            ) from exc
        if isinstance(exc, psycopg.DataError):
            # input is checked before it is sent: a value that cannot be loaded is damage
            raise CorruptData(
                f"PostgreSQL returned a value turnlog cannot read while {self.doing}: "
                f"{first_line(exc)}. The row is damaged (a time out of range?); other sessions "
                "are unaffected. Restore it from a backup, or delete the session."
            ) from exc


class Connections:
    """The pool of one store, the warm connections it keeps, and whether the store is open.

    Args:
        dsn_or_pool: a libpq connection string or URL (a pool is made, and closed by
            `close()`), or a pool of the user's (never closed here).
        schema: the store's schema, for messages.
        pool_min: connections the owned pool keeps open (and warm connections kept).
        pool_max: connections the owned pool opens at most.
        timeout: seconds to wait for the server, and for a free connection.
        prepare: called once with a connection when the store opens (checks the schema).

    Raises:
        InvalidInput: `dsn_or_pool` is a string but not a libpq connection string or URL.
    """

    def __init__(
        self,
        dsn_or_pool: str | Pool,
        *,
        schema: str,
        pool_min: int,
        pool_max: int,
        timeout: float,
        prepare: Callable[[Conn], Any],  # awaited in the store
    ) -> None:
        self.schema = schema
        self.timeout = timeout
        self.closed = False
        self.ready = False  # the store is open: the pool is open and `prepare` succeeded
        self._prepare = prepare
        self._min, self._max = pool_min, pool_max
        self._dsn: str | None = None
        self.pool: Pool | None = None
        if isinstance(dsn_or_pool, str):
            _check_dsn(dsn_or_pool)
            self._dsn = dsn_or_pool
        else:
            self.pool = dsn_or_pool
        self._opening = threading.Lock()
        self._idle: list[Conn] = []  # warm connections, newest last
        self._idle_lock = threading.Lock()
        self._keep_idle = max(1, pool_min)
        self._idle_until = time.monotonic() + _KEEP_IDLE_SECONDS

    def borrow(self, what: str, subject: str | None = None) -> _Borrowed:
        """A pooled connection for one operation; errors become turnlog errors.

        `what` and `subject` (a session id) say what was being done, in error messages.
        """
        return _Borrowed(self, what, subject)

    def open(self) -> None:
        """Open the pool (when owned) and prepare the store, once; a failed open may be retried.

        Raises:
            InvalidInput: a pool without autocommit; what `prepare` raises.
            StoreError: the server cannot be reached; the store is closed; what `prepare` raises.
        """
        if self.ready and not self.closed:
            return
        with self._opening:
            if self.closed:
                raise StoreError(f"the PostgresStore on schema {self.schema!r} is closed")
            if self.ready:
                return
            made = None
            if self._dsn is not None:
                made = self.pool = self._open_pool(self._dsn)
            try:
                with _Borrowed(self, "opening the store", None, lazy=False) as conn:
                    if not conn.autocommit:
                        raise InvalidInput(
                            "PostgresStore needs a pool of autocommit connections: "
                            "ConnectionPool(..., kwargs={'autocommit': True})"
                        )
                    self._prepare(conn)
            except BaseException:
                self._drop_idle()
                if made is not None:
                    made.close()
                raise
            self.ready = True

    def _open_pool(self, dsn: str) -> Pool:
        # The connection that checked the server becomes the pool's first (a fresh store
        # connects once, not twice: 4-7 ms of a worker's first request).
        handed = [_reach(dsn, self.timeout)]
        pool: Pool = ConnectionPool(
            dsn,
            min_size=self._min,
            max_size=self._max,
            connection_class=_HandedConnection,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(2, round(self.timeout)),
                "handed": handed,
            },
            open=False,
            timeout=self.timeout,
            name=f"turnlog-{self.schema}",
        )
        try:
            pool.open(wait=True, timeout=self.timeout)
        except PoolTimeout as exc:
            pool.close()
            raise StoreError(
                f"cannot connect to PostgreSQL within {self.timeout:g}s "
                f"({where(dsn)}): is the server running, and the DSN right?"
            ) from exc
        finally:
            while handed:  # not taken (pool_min 0, or the open failed)
                handed.pop().close()
        return pool

    def close(self) -> None:
        """Close the pool, when the store made it. The store is unusable afterwards."""
        with self._opening:
            self.closed = True
            self._drop_idle()
            if self._dsn is not None and self.pool is not None:
                self.pool.close()

    def _drop_idle(self) -> None:
        with self._idle_lock:
            idle, self._idle = self._idle, []
        if self.pool is not None:
            for conn in idle:
                self.pool.putconn(conn)

    def take(self) -> Conn:
        """A connection: the most recently used one first, then one of the pool's.

        Raises:
            PoolTimeout: none free within the timeout.
        """
        # The most recently used connection first: its server process is warm. psycopg_pool
        # hands out connections in turn, which wakes a cold backend for every operation.
        if self._idle:
            with self._idle_lock:
                if self._idle:
                    return self._idle.pop()
        pool = self.pool
        if pool is None:  # pragma: no cover - the store opens before it borrows
            raise StoreError(f"the PostgresStore on schema {self.schema!r} is not open")
        return pool.getconn(self.timeout)

    def give_back(self, conn: Conn) -> None:
        """Keep up to `pool_min` healthy connections warm; the pool gets the others back, and
        every connection while callers wait in the pool.

        Once a minute every kept connection goes back to the pool too, so that the pool's
        health checks, `max_idle` and `max_lifetime` still apply to them.
        """
        back = [conn]
        pool = self.pool
        assert pool is not None  # a connection was borrowed from it
        if (
            self._dsn is not None
            and not self.closed
            and conn.pgconn.status == pq.ConnStatus.OK
            and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
            # a caller waiting in the pool gets the connection: kept warm, it would wait on
            # (and time out) while later callers took the warm ones in its place
            and not pool.get_stats().get("requests_waiting", 0)
        ):
            with self._idle_lock:
                if time.monotonic() > self._idle_until:
                    back += self._idle
                    self._idle = []
                    self._idle_until = time.monotonic() + _KEEP_IDLE_SECONDS
                elif len(self._idle) < self._keep_idle:
                    self._idle.append(conn)
                    return
        for item in back:
            pool.putconn(item)  # the pool discards a broken connection


def _check_dsn(dsn: str) -> None:
    """Raise `InvalidInput` unless `dsn` is a libpq connection string or URL."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise InvalidInput(f"not a PostgreSQL connection string or URL: {first_line(exc)}") from exc


class _HandedConnection(psycopg.Connection[Any]):
    """The connection class of a pool the store makes: the pool's first `connect` takes the
    connection `_reach` opened, handed over in the pool's kwargs (`handed`, a list it is popped
    from); every later one connects."""

    @classmethod
    def connect(  # type: ignore[override]
        cls, conninfo: str = "", *, handed: list[_HandedConnection] | None = None, **kwargs: Any
    ) -> _HandedConnection:
        if handed:
            with contextlib.suppress(IndexError):  # two workers, one connection
                return handed.pop()
        return super().connect(conninfo, **kwargs)


def _reach(dsn: str, timeout: float) -> _HandedConnection:
    """Connect once, directly, before the pool opens: a wrong address, name or password fails
    at once with one line, instead of the pool retrying (and logging each try) until `timeout`.
    The connection is the pool's first.

    Raises:
        StoreError: the server cannot be reached or refuses the connection.
    """
    try:
        return _HandedConnection.connect(
            dsn, autocommit=True, connect_timeout=max(2, round(timeout))
        )
    except psycopg.OperationalError as exc:
        raise StoreError(
            f"cannot connect to PostgreSQL ({where(dsn)}): {first_line(exc)}. Is the server "
            "running, and the address right?"
        ) from exc
