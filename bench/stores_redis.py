"""Redis and Redis Cluster store benchmarks: appends/s against a bare redis-py loop, Lua against
WATCH/MULTI, view and log reads.

Appends: `append_events(session, [event], version)`, one message per call with the version it
expects, against two bare redis-py loops doing the same writes with no checks, on the same server
(so the same persistence settings, printed): per append one `HSET` of the record, the id -> seq
field and the version into the session hash, and a `SET` of the event-id key, either in one
`MULTI`/`EXEC` or in one EVALSHA of a script that only writes; the ratio is against the faster of
the two. One round trip each, as the store's one EVALSHA. On the cluster the event-id key lives in
another slot, so every side takes two round trips: the store claims the id (`SET NX GET`) and
runs its script; the bare loops run `SET NX` and then the session-slot `HSET`. Records are
precomputed for the bare loops; the store encodes its own. One writer on one session, and 8
writer threads on 8 sessions. Contenders run interleaved in rounds, shuffled each round; the
tables give medians.

Also on Redis: the store's Lua append against a version-checked WATCH/MULTI append doing the same
checks (version, id already stored, id of another session) and writes: `WATCH`, the reads in one
pipeline, then `MULTI`/`EXEC` (three round trips instead of one).

Targets (issue 3): store appends/s / bare appends/s >= 0.7, for 1 writer and for 8 writers;
median(view read, 100,000 covered) / median(view read, 100 covered) <= 1.5.

And the time to read a whole 10,000-event log with `events()`, against one bare `HMGET` of the
same records decoded by the same codec.

    python bench/stores_redis.py [--quick] [--url=redis://127.0.0.1:6379/0] [--no-cluster]

The cluster is started for the run (3 masters on free loopback ports, see
tests/redis_cluster.py). Every key is written under a prefix of its own, deleted at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # write nothing but the bench keys, not even bytecode
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # redis_cluster

import argparse  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import uuid  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402

from _harness import (  # noqa: E402
    Block,
    Cursor,
    conversation,
    interleave,
    machine,
    message_events,
    ms,
    per_second,
    store_writer,
    table,
    verdict,
)
from redis_cluster import RedisCluster  # noqa: E402
from turnlog import CompactionBoundary, Session, SessionEvent  # noqa: E402
from turnlog.codec import decode_event, encode_body, to_micros  # noqa: E402
from turnlog.stores.redis import RedisClusterStore, RedisStore  # noqa: E402

URL = os.environ.get("TURNLOG_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
APPEND_TARGET = 0.7
VIEW_TARGET = 1.5
WRITERS = 8
VIEW_EVENTS = 50


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--seed", type=int, default=2, help="seed for content and round order")
    parser.add_argument("--url", default=URL, help="the standalone Redis server")
    parser.add_argument("--no-cluster", action="store_true", help="skip the Redis Cluster")
    return parser.parse_args()


def record(event: SessionEvent, now: int) -> bytes:
    """The record the store writes for `event` (header line, then the codec body)."""
    head = f'["{event.id}","{event.type.name}",{now},{int(event.synthetic)}]'.encode()
    return head + b"\n" + encode_body(event)


BARE_SCRIPT = """
if #KEYS > 1 then redis.call('SET', KEYS[2], ARGV[1]) end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3], '#' .. ARGV[4], 'M' .. ARGV[2], 'v', ARGV[2])
"""


def bare_writer(
    client: Any, cluster: bool, how: str, keys: Any, session: str, events: list[Any]
) -> Any:
    """The same writes as the store's append, without its checks: one `MULTI`/`EXEC`, or one
    EVALSHA of a script that only writes (`how`). On a cluster the event-id key is set first
    (`SET NX`): it lives in another slot."""
    state = keys.session(session)[0]
    now = to_micros(datetime.now(UTC))
    rows = [(e.id, keys.event(e.id), record(e, now)) for e in events]
    owner = session.encode() + b"\x00bench"
    script = client.register_script(BARE_SCRIPT)
    cur = Cursor()

    def run(n: int) -> None:
        for seq, (event_id, id_key, body) in enumerate(rows[cur.at : cur.at + n], cur.at + 1):
            if cluster:
                client.set(id_key, owner, nx=True)
            if how == "evalsha":
                more = [] if cluster else [id_key]
                script(keys=[state, *more], args=[owner, seq, body, event_id])
                continue
            pipe = client.pipeline(transaction=True)
            if not cluster:
                pipe.set(id_key, owner)
            pipe.hset(state, mapping={seq: body, f"#{event_id}": f"M{seq}", "v": seq})
            pipe.execute()
        cur.at += n

    return run


def watch_writer(client: Any, keys: Any, session: str, events: list[SessionEvent]) -> Any:
    """A version-checked append by WATCH/MULTI: the store's checks and writes, no Lua."""
    state = keys.session(session)[0]
    owner = session.encode() + b"\x00bench"
    cur = Cursor()

    def run(n: int) -> None:
        now = to_micros(datetime.now(UTC))
        for event in events[cur.at : cur.at + n]:
            id_key = keys.event(event.id)
            body = record(event, now)
            with client.pipeline(transaction=True) as pipe:
                pipe.watch(state, id_key)
                reads = client.pipeline(transaction=False)  # another connection, one trip
                reads.hmget(state, "v", f"#{event.id}").get(id_key)
                (version, stored), claim = reads.execute()
                assert int(version or 0) == cur.version and stored is None
                assert claim in (None, owner)
                seq = cur.version + 1
                pipe.multi()
                pipe.hset(state, mapping={seq: body, f"#{event.id}": f"M{seq}", "v": seq})
                pipe.set(id_key, owner)
                pipe.execute()
            cur.version = seq
        cur.at += n

    return run


def together(pool: ThreadPoolExecutor, runs: list[Any], n: int) -> Block:
    """A block in which every writer of `runs` appends `n` events, each in its own thread."""

    def block() -> int:
        for future in [pool.submit(run, n) for run in runs]:
            future.result()
        return n * len(runs)

    return block


def appends(
    name: str,
    make: Any,
    client: Any,
    cluster: bool,
    talk: Any,
    rounds: int,
    per_block: int,
    seed: int,
) -> list[list[object]]:
    """Store and bare, 1 writer and 8 writers; returns table rows."""
    need = (rounds + 1) * per_block
    stores = [make() for _ in range(WRITERS)]
    sessions = [f"append-{w}" for w in range(WRITERS)]
    sides = ("store", "evalsha", "multi")
    runs: dict[str, list[Any]] = {side: [] for side in sides}
    for w, session in enumerate(sessions):
        stores[w].create_session(Session(session, datetime.now(UTC)))
        own = conversation(random.Random(w), prefix=f"s{w}")  # one per session (view rules)
        events = message_events(session, own, need, id_prefix=f"s{w}")
        runs["store"].append(store_writer(stores[w], session, events))
        for how in ("evalsha", "multi"):
            bare = f"{how}-{w}"
            events = message_events(bare, talk, need, id_prefix=f"{how}{w}")
            runs[how].append(bare_writer(client, cluster, how, stores[w]._keys, bare, events))
    rows: list[list[object]] = []
    with ThreadPoolExecutor(WRITERS) as pool:
        for writers in (1, WRITERS):
            contenders = {
                side: together(pool, runs[side][:writers], per_block // writers) for side in sides
            }
            timed = interleave(contenders, rounds, seed)
            floor = min(timed["evalsha"].median, timed["multi"].median)
            ratio = floor / timed["store"].median
            rows.append(
                [
                    f"{name}, {writers} writer{'s' if writers > 1 else ''}",
                    per_second(timed["store"].median),
                    per_second(timed["evalsha"].median),
                    per_second(timed["multi"].median),
                    f"{ratio:.2f}x",
                    verdict(ratio >= APPEND_TARGET),
                ]
            )
    for store in stores:
        store.close()
    return rows


def lua_vs_watch(
    store: RedisStore, client: Any, talk: Any, rounds: int, per_block: int, seed: int
) -> list[object]:
    need = (rounds + 1) * per_block
    store.create_session(Session("lua", datetime.now(UTC)))
    store.create_session(Session("watch", datetime.now(UTC)))
    contenders = {
        "lua": together_one(
            store_writer(
                store,
                "lua",
                message_events("lua", conversation(random.Random(seed)), need, id_prefix="l"),
            ),
            per_block,
        ),
        "watch": together_one(
            watch_writer(
                client, store._keys, "watch", message_events("watch", talk, need, id_prefix="w")
            ),
            per_block,
        ),
    }
    timed = interleave(contenders, rounds, seed)
    ratio = timed["watch"].median / timed["lua"].median
    return [
        "Redis, 1 writer",
        per_second(timed["lua"].median),
        per_second(timed["watch"].median),
        f"{ratio:.2f}x",
    ]


def together_one(run: Any, n: int) -> Block:
    def block() -> int:
        run(n)
        return n

    return block


def build_view(store: RedisStore, session: str, covered: int, seed: int) -> list[str]:
    """A session logging `covered` events, the 50 of the view, and a boundary keeping them."""
    store.create_session(Session(session, datetime.now(UTC)))
    history = conversation(random.Random(seed), prefix="old")
    version = 0
    for start in range(0, covered, 1_000):
        n = min(1_000, covered - start)
        batch = message_events(session, history, n, id_prefix=f"{session}-old{start}")
        version = store.append_events(session, batch, version, check_rules=False)  # setup
    tail = message_events(
        session,
        conversation(random.Random(seed + 1), prefix="new"),
        VIEW_EVENTS,
        id_prefix=f"{session}-new",
    )
    version = store.append_events(session, tail, version, check_rules=False)
    ids = tuple(e.id for e in tail)
    boundary = CompactionBoundary(
        uuid.uuid4().hex, (), (), ids, covered, 0, "window:last_events(50)"
    )
    store.append_events(session, [boundary.to_event(session)], version)
    assert [e.id for e in store.view(session)] == list(ids)
    return list(ids)


def view_reads(store: RedisStore, session: str, times: int) -> Block:
    def block() -> int:
        for _ in range(times):
            view = store.view(session)
        assert len(view) == VIEW_EVENTS
        return times

    return block


def views(
    name: str, store: RedisStore, sizes: list[int], rounds: int, inner: int, seed: int
) -> list[object]:
    for size in sizes:
        build_view(store, f"view-{size}", size, seed)
    timed = interleave({f"{s}": view_reads(store, f"view-{s}", inner) for s in sizes}, rounds, seed)
    small, large = timed[f"{sizes[0]}"].median, timed[f"{sizes[-1]}"].median
    return [
        name,
        ms(small),
        ms(large),
        f"{large / small:.2f}x",
        verdict(large / small <= VIEW_TARGET),
    ]


def whole_log(
    name: str, store: RedisStore, client: Any, size: int, rounds: int, seed: int
) -> list[object]:
    session = "whole"
    store.create_session(Session(session, datetime.now(UTC)))
    talk = conversation(random.Random(seed), prefix="whole")
    version = 0
    for start in range(0, size, 1_000):
        version = store.append_events(
            session, message_events(session, talk, 1_000, id_prefix=f"whole{start}"), version
        )
    ev = store._keys.session(session)[0]

    def read_store() -> int:
        assert len(store.events(session)) == size
        return 1

    def read_bare() -> int:
        records = client.hmget(ev, [str(s) for s in range(1, size + 1)])
        out = []
        for seq, raw in enumerate(records, start=1):
            head, _, body = raw.partition(b"\n")
            event_id, type_name, stamp, synthetic = head[1:-1].split(b",")
            out.append(
                decode_event(
                    event_id=event_id[1:-1].decode(),
                    session_id=session,
                    seq=seq,
                    type_name=type_name[1:-1].decode(),
                    timestamp_micros=int(stamp),
                    synthetic=synthetic == b"1",
                    body=body,
                )
            )
        assert len(out) == size
        return 1

    timed = interleave({"store": read_store, "bare": read_bare}, rounds, seed)
    return [name, f"{size:,}", ms(timed["store"].median), ms(timed["bare"].median)]


def run_all(name: str, make: Any, cluster: bool, args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    rounds, per_block = (3, 40) if q else (21, 200)
    view_rounds, inner = (3, 5) if q else (31, 20)
    sizes = [100, 10_000] if q else [100, 100_000]
    whole = 2_000 if q else 10_000
    talk = conversation(random.Random(args.seed))
    out: dict[str, Any] = {}
    with make() as store:
        client = store.client
        try:
            out["appends"] = appends(
                name, make, client, cluster, talk, rounds, per_block, args.seed
            )
            if not cluster:
                out["lua"] = lua_vs_watch(store, client, talk, rounds, per_block // 2, args.seed)
            out["view"] = views(name, store, sizes, view_rounds, inner, args.seed)
            out["whole"] = whole_log(name, store, client, whole, 3 if q else 11, args.seed)
        finally:
            keys = list(client.scan_iter(match=f"{store.prefix}:*", count=1000))
            for at in range(0, len(keys), 1000):
                pipe = client.pipeline(transaction=False)
                for key in keys[at : at + 1000]:
                    pipe.unlink(key)
                pipe.execute()
    out["sizes"] = sizes
    return out


def persistence(client: Any) -> str:
    config = client.config_get("appendonly")
    config.update(client.config_get("appendfsync"))
    config.update(client.config_get("save"))
    return ", ".join(
        f"{k.decode() if isinstance(k, bytes) else k}={v!r}" for k, v in config.items()
    )


def main() -> None:
    args = parse()
    quick = " (--quick: not the reported figures)" if args.quick else ""
    print(f"Redis and Redis Cluster stores{quick}")
    print(machine())
    probe = redis.Redis.from_url(args.url)
    info = probe.info("server")
    print(f"Redis {info['redis_version']} at {args.url}: {persistence(probe)}")
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    probe.close()
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    results = {"Redis": run_all("Redis", lambda: RedisStore(args.url, prefix=prefix), False, args)}
    if not args.no_cluster:
        with RedisCluster.start() as cluster:
            print(
                f"Redis Cluster: 3 masters on {', '.join(map(str, cluster.ports))}, no persistence"
            )
            results["Redis Cluster"] = run_all(
                "Redis Cluster", lambda: RedisClusterStore(cluster.url, prefix=prefix), True, args
            )
    print(f"load average at end: {os.getloadavg()[0]:.2f}\n")

    print(f"Appends/s with version checks, one event per call (target: ratio >= {APPEND_TARGET})")
    rows = [row for r in results.values() for row in r["appends"]]
    headers = ["", "store/s", "bare EVALSHA/s", "bare MULTI/s", "store/faster bare", ""]
    print(table(headers, rows), "\n")

    if "lua" in results["Redis"]:
        print("Lua append vs WATCH/MULTI version-checked append (the issue measured 2.5x)")
        print(table(["", "Lua/s", "WATCH/s", "Lua/WATCH"], [results["Redis"]["lua"]]), "\n")

    sizes = results["Redis"]["sizes"]
    print(f"Active-view read, {VIEW_EVENTS}-event view, ms (target: ratio <= {VIEW_TARGET})")
    rows = [r["view"] for r in results.values()]
    headers = ["", f"{sizes[0]:,} covered", f"{sizes[-1]:,} covered", "ratio", ""]
    print(table(headers, rows), "\n")

    print("Whole-log read with events(), ms (bare: one HMGET, same codec)")
    rows = [r["whole"] for r in results.values()]
    print(table(["", "events", "store", "bare"], rows))


if __name__ == "__main__":
    main()
