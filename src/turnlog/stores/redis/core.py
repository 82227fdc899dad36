# Generated from src/turnlog/stores/redis/core_async.py by scripts/async_to_sync.py.
# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.
"""`RedisCore`: what both Redis stores share below their operations: the arguments,
the client (built from a URL, or the caller's), opening and closing, the Lua scripts (EVALSHA,
reloaded on NOSCRIPT), pipelines, and redis-py errors turned into `StoreError`.
"""

from __future__ import annotations

import functools
import hashlib
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Final, Self, TypeVar, cast
from urllib.parse import urlsplit

from turnlog.durations import Duration, to_seconds
from turnlog.errors import InvalidInput, StoreError
from turnlog.stores.attachments import DEFAULT_LIMITS, AttachmentLimits
from turnlog.stores.base import Clock, TailMemory, utc_now
from turnlog.stores.redis.layout import SCRIPTS, Keys, check_prefix
from turnlog.stores.url import refuse_own_parameters

try:
    import redis
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster as _RedisCluster
    from redis.exceptions import ConnectionError as _ConnectionError
    from redis.exceptions import (
        MaxConnectionsError,
        NoScriptError,
        RedisClusterException,
        RedisError,
        ResponseError,
    )
    from redis.exceptions import TimeoutError as _TimeoutError
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("RedisStore needs redis-py: pip install 'turnlog[redis]'") from exc

# The client library's name and version, given to redis-py, which would otherwise look its own
# version up in the installed distributions on the first connection (importlib.metadata: about
# 10 ms of a worker's first request). redis-py before 7 has no DriverInfo and reads its version
# when it is imported.
DRIVER: dict[str, Any] = {}
try:
    from redis.driver_info import DriverInfo

    DRIVER["driver_info"] = DriverInfo(name="redis-py", lib_version=redis.__version__)
except ImportError:  # pragma: no cover - depends on redis-py's version
    pass

__all__ = ["ATTEMPTS", "DRIVER", "RACES", "RedisCore", "guarded", "pause"]

ATTEMPTS: Final = 16
RACES: Final = 100  # lost races of one `append_event` (each one means another writer got in)
_FIRST_PAUSE: Final = 0.000_5  # seconds
_MAX_PAUSE: Final = 0.05
PIPE: Final = 1_000  # commands per pipeline round trip
_MAX_GRACE: Final = 100 * 365 * 86_400  # seconds: a century
_F = TypeVar("_F", bound=Callable[..., Any])

# Methods that never write: a lost connection during one of them cannot have changed anything.
_READS: Final = frozenset(
    {
        "find_session",
        "list_sessions",
        "find_by_metadata",
        "events",
        "version",
        "view",
        "view_lazy",
        "read_attachment",
    }
)


def guarded(method: _F) -> _F:
    """Refuse calls on a closed store, open it on first use, turn redis-py errors into
    `StoreError`."""
    write = method.__name__ not in _READS

    @functools.wraps(method)
    def wrapper(self: RedisCore, /, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise StoreError(f"the store on {self._where} is closed")
        if not self._ready:
            self.open()
        try:
            return method(self, *args, **kwargs)
        except (RedisError, RedisClusterException) as exc:
            raise self._translate(exc, write=write) from exc

    return cast(_F, wrapper)


def pause(attempt: int) -> None:
    """Wait a random while after losing race number `attempt` (0 first): up to 0.5 ms, twice
    that after each further loss, at most 50 ms; racing writers spread out instead of losing
    again together (in the asyncio stores, other tasks run meanwhile)."""
    delay = random.uniform(0, min(_MAX_PAUSE, _FIRST_PAUSE * 2**attempt))
    time.sleep(delay)


def _connecting(exc: BaseException) -> bool:
    """Whether redis-py raised `exc` while opening a connection, before any command was sent
    on it (the frames of `Connection.connect` are on its traceback)."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name in ("connect", "connect_check_health") and "redis" in code.co_filename:
            return True
        tb = tb.tb_next
    return False


class RedisCore:
    """The client, scripts and errors of `RedisStore` and `RedisClusterStore`; see
    `RedisStore` for the arguments."""

    def __init__(
        self,
        url_or_client: str | Any,
        *,
        prefix: str = "turnlog",
        clock: Clock = utc_now,
        expiry_grace: Duration | None = timedelta(days=1),
        indexed_keys: Iterable[str] | None = ("owner", "user_id", "principal"),
        timeout: Duration = 10.0,
        connect_timeout: Duration | None = None,
        retries: int = 0,
        attachments: AttachmentLimits = DEFAULT_LIMITS,
    ) -> None:
        check_prefix(prefix)
        if not isinstance(attachments, AttachmentLimits):
            raise InvalidInput(
                f"attachments takes an AttachmentLimits, not {type(attachments).__name__}"
            )
        self._limits = attachments
        grace = (
            None
            if expiry_grace is None
            else to_seconds(expiry_grace, "expiry_grace", most=_MAX_GRACE)
        )
        timeout = to_seconds(timeout, "timeout", most=86_400)
        connect_timeout = (
            timeout
            if connect_timeout is None
            else to_seconds(connect_timeout, "connect_timeout", most=86_400)
        )
        self._closed = False
        self._ready = False
        self._where = "Redis"
        self._retries = retries
        self._client, self._owned, self._where = self._connect(
            url_or_client, timeout, connect_timeout, retries
        )
        self._keys = Keys(prefix)
        self._clock = clock
        self._grace_ms = None if grace is None else max(1, int(grace * 1000))
        self._indexed = None if indexed_keys is None else frozenset(indexed_keys)
        self._shas = {
            name: hashlib.sha1(text.encode()).hexdigest() for name, text in SCRIPTS.items()
        }
        self._incs: dict[str, str] = {}
        self._incs_lock = threading.Lock()
        # (session id, reference) of attachments this handle stored or saw stored: an append
        # naming them again does not send their bytes (the script says when it lacks them).
        self._held: dict[tuple[str, str], None] = {}
        self._tails = TailMemory()  # fenced by the session's incarnation
        self._opening = threading.Lock()
        self.open()

    @property
    def client(self) -> Any:
        """The redis-py client the store uses."""
        return self._client

    @property
    def prefix(self) -> str:
        """The prefix of every key of this store."""
        return self._keys.prefix

    # -- connections ------------------------------------------------------------------------

    def _connect(
        self, target: str | Any, timeout: float, connect_timeout: float, retries: int
    ) -> tuple[Any, bool, str]:
        """The client for `target` (built without I/O), whether the store owns it, and the
        address errors name."""
        if isinstance(target, _RedisCluster) or (
            isinstance(target, str) and "+cluster://" in target
        ):
            raise InvalidInput("this is a Redis Cluster: use RedisClusterStore for it")
        if isinstance(target, str):
            refuse_own_parameters(target, "RedisStore")
            parts = urlsplit(target)
            where = f"{parts.scheme}://{parts.hostname or ''}:{parts.port or ''}{parts.path}"
            try:
                client = redis.Redis.from_url(
                    target,
                    retry=Retry(NoBackoff(), retries),
                    socket_timeout=timeout,
                    socket_connect_timeout=connect_timeout,
                    **DRIVER,
                )
            except ValueError as exc:
                raise InvalidInput(f"not a Redis URL: {exc}") from exc
            return client, True, where
        if isinstance(target, redis.Redis):
            borrowed: Any = target  # untyped in redis-py's asyncio client
            kw = borrowed.get_connection_kwargs()
            if kw.get("decode_responses"):
                raise InvalidInput("RedisStore needs a client with decode_responses=False")
            return target, False, f"redis://{kw.get('host', '')}:{kw.get('port', '')}"
        raise InvalidInput(
            f"RedisStore takes a redis:// URL or a redis.Redis client, not {type(target).__name__}"
        )

    def open(self) -> Self:
        """Reach the server now (the first call does otherwise); returns the store. Idempotent.

        Raises:
            StoreError: the store is closed, or the server cannot be reached.
        """
        if self._closed:
            raise StoreError(f"the store on {self._where} is closed")
        if self._ready:
            return self
        with self._opening:
            if self._closed:  # closed while this call waited
                raise StoreError(f"the store on {self._where} is closed")
            if not self._ready:
                try:
                    self._prepare()
                except (RedisError, RedisClusterException) as exc:
                    raise self._translate(exc, write=False) from exc
                self._ready = True
        return self

    def _prepare(self) -> None:
        """What `open` does on the server: a PING (a blocking store connects lazily, on its
        first command, as it always did)."""

    def close(self) -> None:
        """Close the connection pool when the store opened it; the store is unusable after."""
        if self._closed:
            return
        self._closed = True
        if self._owned:
            self._client.close()

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _translate(self, exc: Exception, *, write: bool) -> StoreError:
        """The StoreError for a redis-py error; `write`: the failed call was a write.

        Only a write whose command may have reached the server says it may have landed: a
        read, or a connection that never opened (with no retries), changed nothing.
        """
        if isinstance(exc, MaxConnectionsError):
            return StoreError(
                f"every connection the client may open to {self._where} is in use ({exc}); "
                "nothing was sent. Make fewer calls at once, or pass a client with a larger "
                "max_connections (redis's cluster client allows 100 per node)"
            )
        if isinstance(exc, (_ConnectionError, _TimeoutError)):
            if _connecting(exc):
                unsent = "" if not write or self._retries == 0 else " A write may have landed."
                return StoreError(
                    f"cannot reach {self._where} ({exc}): is the server running, and the "
                    f"address right?{unsent}"
                )
            if not write:
                return StoreError(
                    f"lost the connection to {self._where} ({exc}) during a read: check that "
                    "the server is up and reachable, and retry"
                )
            return StoreError(
                f"lost the connection to {self._where} ({exc}): check that the server is up and "
                "reachable. A write may or may not have landed; retrying an append with the "
                "same event ids is safe, it never stores an event twice"
            )
        if isinstance(exc, ResponseError):
            return StoreError(f"{self._where} refused a command: {exc}")
        return StoreError(f"Redis error on {self._where}: {exc}")

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA the script `name`; load it and run it again on NOSCRIPT (a restarted or
        failed-over server, a SCRIPT FLUSH; on a cluster SCRIPT LOAD reaches every master)."""
        sha = self._shas[name]
        try:
            return self._client.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        except NoScriptError:
            self._client.script_load(SCRIPTS[name])
        try:
            return self._client.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        except NoScriptError:  # flushed again between the load and the call: send the text
            return self._client.execute_command("EVAL", SCRIPTS[name], len(keys), *keys, *args)

    def _run_after(
        self,
        commands: Sequence[tuple[Any, ...]],
        name: str,
        keys: Sequence[str],
        args: Sequence[Any],
    ) -> Any:
        """`_run`, sent in one pipeline after `commands`, which the server runs first (all
        of them on the keys of one slot, so on the script's node, in order).

        Raises:
            RedisError: the first error of `commands`, or the script's.
        """
        if not commands:
            return self._run(name, keys, args)
        pipe = self._client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        pipe.execute_command("EVALSHA", self._shas[name], len(keys), *keys, *args)
        results = pipe.execute(raise_on_error=False)
        for result in results[:-1]:
            if isinstance(result, Exception):
                raise result
        if isinstance(results[-1], NoScriptError):  # what `commands` wrote stays: run it now
            return self._run(name, keys, args)
        if isinstance(results[-1], Exception):
            raise results[-1]
        return results[-1]

    def _note_held(self, session_id: str, refs: Iterable[str]) -> None:
        if len(self._held) >= 10_000:
            self._held.clear()
        for ref in refs:
            self._held[session_id, ref] = None

    def _held_of(self, session_id: str, refs: Iterable[str]) -> set[str]:
        """Those of `refs` this handle believes the session holds."""
        return {ref for ref in refs if (session_id, ref) in self._held}

    def _pipeline(self, commands: Sequence[tuple[Any, ...]], **options: Any) -> list[Any]:
        """Run commands in pipelines of `PIPE`; EVALSHA of `release` is reloaded on NOSCRIPT.

        `options` go to redis-py's reply parsers (`get=True` for SET ... GET).
        """
        out: list[Any] = []
        for at in range(0, len(commands), PIPE):
            chunk = commands[at : at + PIPE]
            for _ in range(2):
                pipe = self._client.pipeline(transaction=False)
                for command in chunk:
                    pipe.execute_command(*command, **options)
                results = pipe.execute(raise_on_error=False)
                if not any(isinstance(r, NoScriptError) for r in results):
                    break
                self._client.script_load(SCRIPTS["release"])
            for r in results:
                if isinstance(r, Exception):
                    raise r
            out += results
        return out

    def _release(self, claims: Iterable[tuple[str, bytes]]) -> None:
        """Delete each event-id key that still holds the given claim."""
        sha = self._shas["release"]
        self._pipeline([("EVALSHA", sha, 1, key, owner) for key, owner in claims])

    def _remember(self, session_id: str, inc: str) -> None:
        with self._incs_lock:
            if len(self._incs) >= 10_000:
                self._incs.clear()
            self._incs[session_id] = inc

    def _forget(self, session_id: str) -> None:
        with self._incs_lock:
            self._incs.pop(session_id, None)
