"""`AsyncRedisClusterStore`: sessions in a Redis Cluster, and its event-id claims.

A session's keys share one hash tag, so all of a session lives in one slot and its writes are
`AsyncRedisStore`'s Lua scripts. Event-id claim keys (`<prefix>:id:<escaped id>`) hash to other
slots, so no script can cover them with the session: the ids are claimed (`SET NX GET`) just
before the append script, and fenced by the session's incarnation, which the script checks
(docs/redis.md, "Event ids, unique across sessions").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from turnlog.errors import InvalidInput, SessionNotFound, StoreError
from turnlog.events import SessionEvent
from turnlog.stores.redis.core_async import ATTEMPTS, DRIVER
from turnlog.stores.redis.layout import index_member
from turnlog.stores.redis.store_async import AsyncRedisStore
from turnlog.stores.url import refuse_own_parameters

try:
    from redis.asyncio.cluster import ClusterNode
    from redis.asyncio.cluster import RedisCluster as _RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import RedisClusterException, RedisError
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "AsyncRedisClusterStore needs redis-py: pip install 'turnlog[redis]'"
    ) from exc

__all__ = ["AsyncRedisClusterStore"]


class AsyncRedisClusterStore(AsyncRedisStore):
    """Sessions in a Redis Cluster (7 or newer). Safe to share between threads (the blocking
    store) or between the tasks of one event loop (the asyncio one).

    A session's keys share one hash tag, so each session lives in one slot and its writes stay
    atomic Lua scripts. Event ids live in other slots: they are claimed (SET NX) just before
    the append and fenced by the session's incarnation, see docs/redis.md.

    Args:
        url_or_client: `redis+cluster://[user:password@]host:port,host:port,...` (any nodes of
            the cluster; `rediss+cluster://` for TLS), or a `redis.asyncio.cluster.RedisCluster`
            client.
        **kwargs: as for `AsyncRedisStore`.

    Raises:
        InvalidInput: a bad URL, prefix or client.
        StoreError: no seed node answers (from `open()` or the first call: the client learns
            the cluster's layout then).
    """

    def _connect(
        self, target: str | Any, timeout: float, connect_timeout: float, retries: int
    ) -> tuple[Any, bool, str]:
        if isinstance(target, _RedisCluster):
            borrowed: Any = target  # get_encoder is untyped in redis-py's blocking client
            if borrowed.get_encoder().decode_responses:
                raise InvalidInput(
                    "AsyncRedisClusterStore needs a client with decode_responses=False"
                )
            return target, False, "Redis Cluster"
        if not isinstance(target, str):
            raise InvalidInput(
                "AsyncRedisClusterStore takes a redis+cluster:// URL or a RedisCluster client, not "
                f"{type(target).__name__}"
            )
        parts = urlsplit(target)
        if parts.scheme not in ("redis+cluster", "rediss+cluster"):
            raise InvalidInput(
                f"a Redis Cluster URL reads redis+cluster://host:port,host:port: {target!r}"
            )
        refuse_own_parameters(target, "AsyncRedisClusterStore")
        node: Any = ClusterNode  # untyped in redis-py's blocking client
        nodes = []
        for seed in parts.netloc.rpartition("@")[2].split(","):
            host, _, port = seed.strip().rpartition(":")
            if not host or not port.isdigit():
                raise InvalidInput(f"a cluster seed reads host:port, not {seed!r}")
            nodes.append(node(host.strip("[]"), int(port)))
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        where = "redis+cluster://" + ",".join(f"{n.host}:{n.port}" for n in nodes)
        try:
            client = _RedisCluster(
                startup_nodes=nodes,
                username=unquote(user) or None,
                password=unquote(password) or None,
                ssl=parts.scheme == "rediss+cluster",
                retry=Retry(NoBackoff(), retries),
                socket_timeout=timeout,
                socket_connect_timeout=connect_timeout,
                **DRIVER,
            )
        except (RedisError, RedisClusterException) as exc:
            raise StoreError(f"cannot reach the Redis Cluster at {where}: {exc}") from exc
        return client, True, where

    async def _prepare(self) -> None:
        """What `open` does on the cluster: learn its layout from the seed nodes (a blocking
        store's client did that when it was built)."""
        if True:  # ASYNC
            try:
                await self._client.initialize()
            except (RedisError, RedisClusterException) as exc:
                raise StoreError(f"cannot reach the Redis Cluster at {self._where}: {exc}") from exc

    async def _attempt(
        self,
        session_id: str,
        batch: list[SessionEvent],
        expected: int,
        tail: list[Any],
        fence: str = "",
        media: Sequence[str] = (),
        sends: Sequence[tuple[Any, ...]] = (),
    ) -> Any:
        """Claim the batch's ids for the session's incarnation (`fence` when given), then run
        the append script fenced by that incarnation (its keys: the session's, then the
        attachment keys `media`, all in the session's slot), after the commands `sends` that
        send the bytes of attachments ahead of it (to the same node).

        Returns the script's reply, or None to run it again (the incarnation was dead: its
        claims are released; with a `fence`, the 'changed' reply itself).

        Raises:
            InvalidInput: an id is claimed by another live session.
        """
        inc = fence or await self._incarnation(session_id)
        owner = index_member(session_id, inc)
        fresh = await self._reserve(session_id, batch, owner)
        keys = [*self._keys.session(session_id)[:2], *media]
        reply = await self._run_after(
            sends, "append", keys, [expected, inc, session_id, "0", *tail]
        )
        if reply[0] in (b"changed", b"nosession"):
            self._forget(session_id)  # a dead incarnation: its claims can go
            await self._release((self._keys.event(i), owner) for i in fresh)
            if reply[0] == b"changed" and not fence:
                return None
        return reply

    # -- event-id claims ----------------------------------------------------------------------

    async def _incarnation(self, session_id: str) -> str:
        with self._incs_lock:
            inc = self._incs.get(session_id)
        if inc is None:
            raw = await self._client.hget(self._keys.session(session_id)[0], "inc")
            if raw is None:
                raise SessionNotFound(session_id)
            inc = raw.decode()
            self._remember(session_id, inc)
        return inc

    async def _reserve(self, session_id: str, batch: list[SessionEvent], owner: bytes) -> list[str]:
        """Claim each event id for this incarnation (SET NX); returns the ids claimed now.

        A claim of a live session (its incarnation still exists) is respected; a claim of a
        dead incarnation is released and taken.

        Raises:
            InvalidInput: an id is claimed by another live session.
        """
        fresh: list[str] = []
        todo = [e.id for e in batch]
        for _ in range(ATTEMPTS):
            if len(todo) == 1:  # the common case: one message, one command
                replies = [
                    await self._client.set(self._keys.event(todo[0]), owner, nx=True, get=True)
                ]
            else:
                replies = await self._pipeline(
                    [("SET", self._keys.event(i), owner, "NX", "GET") for i in todo], get=True
                )
            again: list[str] = []
            dead: list[tuple[str, bytes]] = []
            for event_id, old in zip(todo, replies, strict=True):
                if old is None:
                    fresh.append(event_id)
                elif old != owner:
                    if await self._live(old):
                        await self._park(session_id, fresh)
                        raise InvalidInput(
                            f"event id {event_id!r} belongs to another session; ids are unique "
                            "across sessions"
                        )
                    dead.append((self._keys.event(event_id), old))
                    again.append(event_id)
            if not again:
                return fresh
            await self._release(dead)
            todo = again
        raise StoreError("event ids kept changing hands while they were being claimed; retry")

    async def _park(self, session_id: str, fresh: list[str]) -> None:
        """Record this attempt's claims in the session, so that deleting it frees them: the
        append script does that when it refuses a batch (r = -1), before writing anything."""
        if fresh:
            inc = await self._incarnation(session_id)
            await self._run(
                "append",
                self._keys.session(session_id)[:2],
                [
                    -1,
                    inc,
                    session_id,
                    "0",
                    len(fresh),
                    -1,
                    *(x for i in fresh for x in (i, "E", b"", 0)),
                ],
            )
