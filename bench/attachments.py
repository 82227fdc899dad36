"""Attachments on the embedded stores (issue 25): reads beside 100 MB of images, the same image
stored once, and memory while 10,000 attachments are read.

Run on `MemoryStore` and `SqliteStore` (PostgreSQL and Redis have bench/attachments_postgres.py
and bench/attachments_redis.py). Three measures:

(a) **Reads with 100 MB of images in the covered history.** Two sessions, each in a store of its
    own, with the same text: a system prompt, 100 turns whose user message carries a distinct
    1 MiB PNG of noise (valid, stored uncompressed, so incompressible), then 10 turns of text
    alone; the other session has the same turns without the images. Both are appended through
    `SessionService.append_message` (token counts included) and compacted by
    `service.compact` with `WindowCompactionStrategy(CompactionWindow.last_turns(4))`, so every
    image is covered. Timed, interleaved in rounds: `service.view` (the view: the system prompt
    and 4 text turns) and `service.events` (the whole log: the image parts come back as
    `ImagePart(ref=...)`, no bytes; the benchmark asserts it). Target: images / text <= 1.1x,
    for both reads, on every store, judged on the median of the per-round ratios (the two
    reads of a pair ran in the same round).
(b) **The same image in 100 events.** One 1 MiB noise PNG in 100 user messages (each followed by
    an assistant reply) of one session, and in 10 sessions of 10 such messages each, appended by
    `store.append_events` in batches, each message with its own copy of the bytes (as when a
    client decodes each request anew). Bytes added: SQLite, the file's `page_count * page_size`
    after the store is closed (its WAL checkpointed), less that of the same messages without
    the image (the `dbstat` size of the attachment tables is shown beside it); memory, the
    tracemalloc growth over the same appends, less that of the text-only ones. For contrast, the
    same appends with the threshold above the image's size (`AttachmentLimits(threshold=2 MiB)`),
    so the bytes stay inline in every event. Target: at most 1.1 MB added.
(c) **Memory flat while attachments are read.** 10,000 distinct 17 KiB noise PNGs (over the
    16 KiB threshold), one per user message of one session; then `service.attachment` reads
    each once and drops it, with tracemalloc's traced memory and the process's RSS sampled every
    1,000 reads. Target: the traced memory grows by less than 1 MiB from the 1,000th read to the
    10,000th (a cache holding what was read would grow by 153 MB).

    python bench/attachments.py [--quick] [--stores memory,sqlite]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import argparse  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import struct  # noqa: E402
import tempfile  # noqa: E402
import tracemalloc  # noqa: E402
import zlib  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

from _harness import Block, interleave, machine, ms, table, verdict, words  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionWindow,
    ImagePart,
    MemoryStore,
    Message,
    Session,
    SessionEvent,
    SessionService,
    SqliteStore,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.stores.attachments import AttachmentLimits  # noqa: E402

MIB = 1024 * 1024
READ_TARGET = 1.1
DEDUP_TARGET = 1.1e6  # bytes: "at most 1.1 MB"
FLAT_LIMIT = MIB
KEEP_TURNS = 4
STORES = ("memory", "sqlite")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 MB, 1,000 reads")
    parser.add_argument("--seed", type=int, default=2, help="seed for content and round order")
    parser.add_argument("--stores", default=",".join(STORES), help="memory,sqlite (default)")
    args = parser.parse_args(argv)
    args.stores = [s for s in args.stores.split(",") if s]
    unknown = set(args.stores) - set(STORES)
    if unknown:
        parser.error(f"unknown stores {sorted(unknown)}: pick from {', '.join(STORES)}")
    return args


# -- content -----------------------------------------------------------------------------------


def noise_png(rng: random.Random, width: int, height: int) -> bytes:
    """A valid RGB PNG of random pixels, its IDAT stored without compression (level 0), so its
    bytes are as incompressible as noise: 1 + 3 * width bytes a row, and some 70 bytes more."""
    stride = 1 + 3 * width
    raw = bytearray(rng.randbytes(stride * height))
    raw[::stride] = bytes(height)  # filter type 0 (None) at the start of every row

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(raw), 0))
        + chunk(b"IEND", b"")
    )


def one_mib_png(rng: random.Random) -> bytes:
    return noise_png(rng, 512, 682)  # 1,048,234 bytes of pixel rows: ~1.00 MiB


def small_png(rng: random.Random) -> bytes:
    return noise_png(rng, 64, 90)  # 17,370 bytes of rows: just over the 16 KiB threshold


def turns(rng: random.Random, images: Iterator[bytes] | None, count: int) -> Iterator[Message]:
    """`count` turns: a user message (with the next image of `images`, while there is one), and
    either a tool-calling answer (call, result, reply) or a plain reply, by turns."""
    for n in range(count):
        text = words(rng, rng.randint(10, 40))
        image = next(images, None) if images is not None else None
        if image is not None:
            yield Message.user(text, ImagePart("image/png", data=image))
        else:
            yield Message.user(text)
        if n % 2 == 0:
            call = f"call_{n}"
            yield Message.assistant(
                tool_calls=[ToolCall(call, "search_docs", f'{{"query": "{words(rng, 4)}"}}')]
            )
            yield Message.tool(ToolResult(call, "search_docs", words(rng, rng.randint(30, 120))))
        yield Message.assistant(words(rng, rng.randint(20, 60)))


def new_store(kind: str, path: Path, limits: AttachmentLimits | None = None) -> object:
    extra = {} if limits is None else {"attachments": limits}
    if kind == "memory":
        return MemoryStore(**extra)
    return SqliteStore(path, **extra)


def always(request: object) -> bool:
    return True


def image_parts(events: list[SessionEvent]) -> list[ImagePart]:
    return [
        p
        for e in events
        if e.message is not None
        for p in e.message.parts
        if isinstance(p, ImagePart)
    ]


# -- (a) reads beside 100 MB of images -----------------------------------------------------------


def read_session(
    kind: str, path: Path, seed: int, images: int, image_turns: int, text_turns: int
) -> tuple[SessionService, str]:
    """A service over a new store holding one compacted session (see (a) in the docstring)."""
    service = SessionService(new_store(kind, path))  # type: ignore[arg-type]
    sid = service.create("bench-read").id
    content = random.Random(seed)
    pixels = random.Random(seed + 1)
    noise = (one_mib_png(pixels) for _ in range(images)) if images else None
    service.append_message(sid, Message.system("You are a careful support assistant."))
    for message in turns(content, noise, image_turns + text_turns):
        service.append_message(sid, message)
    result = service.compact(
        sid, always, WindowCompactionStrategy(CompactionWindow.last_turns(KEEP_TURNS))
    )
    assert result.boundary is not None and not result.conflict, result
    return service, sid


def reads_beside_images(args: argparse.Namespace, tmp: str) -> list[list[str]]:
    images = 10 if args.quick else 100
    image_turns, text_turns = images, 10
    rounds = 7 if args.quick else 61
    services: dict[str, tuple[SessionService, str]] = {}
    for kind in args.stores:
        for tag, n in (("images", images), ("text", 0)):
            path = Path(tmp, f"read-{kind}-{tag}.db")
            services[f"{kind} {tag}"] = read_session(
                kind, path, args.seed, n, image_turns, text_turns
            )
    stored_image_bytes = 0
    for name, (service, sid) in services.items():
        view, log = service.view(sid), service.events(sid)
        assert not image_parts(view), "an image is in the view: the boundary did not cover it"
        parts = image_parts(log)
        assert all(p.data is None and p.ref is not None for p in parts), "a log read has bytes"
        assert len(parts) == (images if name.endswith("images") else 0)
        stored_image_bytes = max(stored_image_bytes, sum(p.size or 0 for p in parts))
    twin = {k: services[k.replace("images", "text")] for k in services if k.endswith("images")}
    for name, (service, sid) in twin.items():  # same text, message for message
        other = services[name][0].view(services[name][1])
        assert [e.message for e in service.view(sid)] == [e.message for e in other]

    def timer(read: Callable[[str], object], sid: str, inner: int) -> Block:
        def block() -> int:
            for _ in range(inner):
                read(sid)
            return inner

        return block

    contenders: dict[str, Block] = {}
    for name, (service, sid) in services.items():
        memory = name.startswith("memory")
        contenders[f"{name} view"] = timer(service.view, sid, 2_000 if memory else 60)
        contenders[f"{name} log"] = timer(service.events, sid, 1_000 if memory else 10)
    timed = interleave(contenders, rounds, args.seed)
    for service, _ in services.values():
        service.close()

    print()
    print(
        f"(a) {images} images of 1 MiB ({stored_image_bytes / MIB:,.1f} MiB) in the covered "
        f"history: {image_turns} image turns, {text_turns} text turns, last_turns({KEEP_TURNS}) "
        f"kept; {rounds} rounds, ms per read (median, p10, p90)"
    )
    rows, summary = [], []
    for kind in args.stores:
        for read, label in (("view", "service.view"), ("log", "service.events")):
            with_images = timed[f"{kind} images {read}"]
            text_only = timed[f"{kind} text {read}"]
            ratio = with_images.median / text_only.median
            paired = statistics.median(
                a / b for a, b in zip(with_images.per_op, text_only.per_op, strict=True)
            )
            rows.append(
                [
                    f"{kind}: {label}",
                    ms(text_only.median),
                    ms(with_images.median),
                    ms(with_images.quantile(0.1)),
                    ms(with_images.quantile(0.9)),
                    f"{ratio:.3f}x",
                    f"{paired:.3f}x",
                ]
            )
            summary.append([f"(a) {kind} {read} read, {images} MB covered", paired])
    print(
        table(
            ["read", "text only", "images", "p10", "p90", "images / text", "paired median"],
            rows,
        )
    )
    for name, ratio in summary:
        print(f"{name}: {ratio:.3f}x (target <= {READ_TARGET}): {verdict(ratio <= READ_TARGET)}")
    return [[name, f"{ratio:.3f}x", verdict(ratio <= READ_TARGET)] for name, ratio in summary]


# -- (b) the same image in 100 events -----------------------------------------------------------


def dedup_events(
    sid: str, image: bytes | None, start: int, count: int, rng: random.Random
) -> list[SessionEvent]:
    """`count` user messages (each holding its own copy of `image`) and their replies."""
    out = []
    for n in range(start, start + count):
        text = words(rng, 20)
        if image is None:
            user = Message.user(text)
        else:  # a copy of its own: what a client decoding each request would hold
            user = Message.user(text, ImagePart("image/png", data=bytes(memoryview(image))))
        out.append(SessionEvent.for_message(sid, user, event_id=f"{sid}-u{n}"))
        reply = Message.assistant(words(rng, 20))
        out.append(SessionEvent.for_message(sid, reply, event_id=f"{sid}-a{n}"))
    return out


def fill_dedup(
    store: object, image: bytes | None, sessions: int, per_session: int, seed: int
) -> None:
    rng = random.Random(seed)  # the same text whatever the image
    for s in range(sessions):
        sid = f"dedup-{s}"
        store.create_session(Session(sid, created_at=datetime.now(UTC)))  # type: ignore[attr-defined]
        version = 0
        for start in range(0, per_session, 10):  # 10 messages with their replies per append
            events = dedup_events(sid, image, start, min(10, per_session - start), rng)
            version = store.append_events(sid, events, version)  # type: ignore[attr-defined]
            del events


def sqlite_bytes(path: Path) -> tuple[int, int | None]:
    """The file's pages in bytes (after the store closed and checkpointed), and the bytes of
    the attachment tables and their indexes by dbstat (None where SQLite lacks it)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        try:
            row = conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master "
                "WHERE tbl_name IN ('turnlog_attachments', 'turnlog_session_attachments'))"
            ).fetchone()
            tables = row[0]
        except sqlite3.OperationalError:
            tables = None
    finally:
        conn.close()
    return pages * size, tables


def memory_bytes(
    image: bytes | None,
    sessions: int,
    per_session: int,
    seed: int,
    limits: AttachmentLimits | None,
) -> tuple[int, MemoryStore]:
    """The tracemalloc growth of a new MemoryStore over the appends (the store is kept alive)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store = new_store("memory", Path(), limits)
        fill_dedup(store, image, sessions, per_session, seed)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before, store  # type: ignore[return-value]


def same_image(args: argparse.Namespace, tmp: str) -> list[list[str]]:
    image = one_mib_png(random.Random(args.seed + 7))
    inline = AttachmentLimits(threshold=2 * MIB)
    layouts = [("1 session x 100", 1, 100), ("10 sessions x 10", 10, 10)]
    rows, summary = [], []
    for kind in args.stores:
        for label, sessions, per in layouts:
            sizes: dict[str, int] = {}
            tables: int | None = None
            for tag, img, limits in (
                ("text", None, None),
                ("once", image, None),
                ("inline", image, inline),
            ):
                if kind == "sqlite":
                    path = Path(tmp, f"dedup-{sessions}-{tag}.db")
                    store = new_store(kind, path, limits)
                    fill_dedup(store, img, sessions, per, args.seed)
                    store.close()  # type: ignore[attr-defined]
                    sizes[tag], tabled = sqlite_bytes(path)
                    if tag == "once":
                        tables = tabled
                    path.unlink()
                else:
                    sizes[tag], held = memory_bytes(img, sessions, per, args.seed, limits)
                    del held
            added = sizes["once"] - sizes["text"]
            rows.append(
                [
                    f"{kind}: {label}",
                    f"{len(image):,}",
                    f"{sizes['text']:,}",
                    f"{added:,}",
                    "-" if tables is None else f"{tables:,}",
                    f"{sizes['inline'] - sizes['text']:,}",
                    f"{added / len(image):.3f}x",
                ]
            )
            summary.append([f"(b) {kind}, same 1 MiB image, {label} events", added])
    print()
    print(
        "(b) the same 1 MiB noise PNG in 100 user messages (each with an assistant reply); "
        "bytes added against the same messages without it"
    )
    print(
        table(
            [
                "store, events",
                "image bytes",
                "text only",
                "added",
                "attachment tables",
                "added if inline",
                "added / image",
            ],
            rows,
        )
    )
    out = []
    for name, added in summary:
        met = verdict(added <= DEDUP_TARGET)
        print(f"{name}: {added / 1e6:.3f} MB added (target <= 1.1 MB): {met}")
        out.append([name, f"{added / 1e6:.3f} MB", met])
    return out


# -- (c) memory while 10,000 attachments are read ---------------------------------------------


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def flat_reads(args: argparse.Namespace, tmp: str) -> list[list[str]]:
    count = 1_000 if args.quick else 10_000
    every = count // 10
    results = []
    rows = []
    for kind in args.stores:
        store = new_store(kind, Path(tmp, "flat.db"))
        service = SessionService(store, record_tokens=False)  # type: ignore[arg-type]
        sid = service.create("bench-flat").id
        rng = random.Random(args.seed + 11)
        version = 0
        for start in range(0, count, 100):  # 100 messages, each with its image, per append
            events = []
            for n in range(start, start + 100):
                user = Message.user(f"picture {n}", ImagePart("image/png", data=small_png(rng)))
                events.append(SessionEvent.for_message(sid, user, event_id=f"u{n}"))
                reply = Message.assistant(f"noted {n}")
                events.append(SessionEvent.for_message(sid, reply, event_id=f"a{n}"))
            version = service.append_events(sid, events, version)
        del events
        refs = [p.ref for p in image_parts(service.events(sid))]
        assert len(set(refs)) == count, "the attachments are not distinct"
        size = len(service.attachment(sid, refs[0]))
        gc.collect()
        tracemalloc.start()
        samples = [(0, tracemalloc.get_traced_memory()[0], rss())]
        read = 0
        for i, ref in enumerate(refs, start=1):
            data = service.attachment(sid, ref)  # type: ignore[arg-type]
            read += len(data)
            del data
            if i % every == 0:
                gc.collect()
                samples.append((i, tracemalloc.get_traced_memory()[0], rss()))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        service.close()
        if kind == "sqlite":
            Path(tmp, "flat.db").unlink()
        first = samples[1]
        last = samples[-1]
        growth = last[1] - first[1]
        rows.extend(
            [f"{kind}", f"{n:,}", f"{traced / 1024:,.1f}", f"{(r - samples[0][2]) / MIB:+,.2f}"]
            for n, traced, r in samples
        )
        met = verdict(growth < FLAT_LIMIT)
        results.append(
            [
                f"(c) {kind}, {count:,} attachments of {size:,} B read and dropped",
                f"traced {growth / 1024:+,.1f} KiB from read {first[0]:,} to {last[0]:,}; "
                f"RSS {(last[2] - first[2]) / MIB:+,.2f} MiB; peak {peak / 1024:,.0f} KiB; "
                f"{read / MIB:,.0f} MiB read",
                met,
            ]
        )
    print()
    print(
        f"(c) {count:,} distinct attachments read one by one with service.attachment and dropped: "
        "tracemalloc's traced memory (since the reads began) and RSS growth, every "
        f"{every:,} reads"
    )
    print(table(["store", "reads", "traced KiB", "RSS MiB"], rows))
    print(f"(RSS of the process at the end: {rss() / MIB:,.0f} MiB)")
    for name, text, met in results:
        print(f"{name}: {text} (target: < {FLAT_LIMIT // 1024:,} KiB traced growth): {met}")
    return results


def main() -> None:
    args = parse()
    quick = " (--quick: not the reported figures)" if args.quick else ""
    print(f"Attachments on the embedded stores{quick}")
    print(machine())
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        verdicts = reads_beside_images(args, tmp)
        verdicts += same_image(args, tmp)
        verdicts += flat_reads(args, tmp)
    print()
    print(table(["measure", "result", "target"], verdicts))


if __name__ == "__main__":
    main()
