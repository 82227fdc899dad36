"""What storing token counts at append costs (issue 11, item 1), on SQLite.

Since token counts are stored with the events, `SessionService.append_message` counts each
message with the service's counter (o200k by default) and the store writes the count in the
event's body. This script times that against the same appends without counting
(`SessionService(..., record_tokens=False)`, what every append did before), one message per call
as an application appends, on two durabilities (synchronous=NORMAL, the store's default, and
FULL, the peers'), each contender on its own file, interleaved in rounds, medians. The o200k
vocabulary is loaded before timing (a process loads it once; bench/README.md and
docs/benchmarks.md give its load time).

Also: `SqliteStore.append_events` of events that already carry their count against the same
events without one (the bigger body alone), and the o200k count of one message through the
tokenizer object against toktok's batch function that O200kCounter called before.

Target (issue 11, item 1): the counting append within 10% of the append without counting.

    python bench/append_counts.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import random  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Literal  # noqa: E402

from _harness import (  # noqa: E402
    Block,
    conversation,
    interleave,
    machine,
    message_events,
    parse_args,
    per_second,
    table,
    verdict,
)
from turnlog import Message, O200kCounter, SessionEvent, SessionService, SqliteStore  # noqa: E402
from turnlog.text import event_text  # noqa: E402
from turnlog.tokens import event_tokens  # noqa: E402

SESSION = "bench-session"
LIMIT = 0.10


def service_appender(svc: SessionService, messages: list[Message], per_block: int) -> Block:
    at = [0]

    def block() -> int:
        for message in messages[at[0] : at[0] + per_block]:
            svc.append_message(SESSION, message)
        at[0] += per_block
        return per_block

    return block


def store_appender(store: SqliteStore, events: list[SessionEvent], per_block: int) -> Block:
    at, version = [0], [0]

    def block() -> int:
        v = version[0]
        for event in events[at[0] : at[0] + per_block]:
            v = store.append_events(SESSION, [event], v)
        at[0] += per_block
        version[0] = v
        return per_block

    return block


def main() -> None:
    args = parse_args(__doc__)
    rounds, per_block = (5, 40) if args.quick else (31, 200)
    full_rounds, full_block = (3, 10) if args.quick else (61, 50)
    counter = O200kCounter()
    counter.count("load the vocabulary")  # once per process, not timed here

    def messages(n: int, tag: str) -> list[Message]:
        talk = conversation(random.Random(f"{args.seed}-{tag}"), prefix=tag)
        return [next(talk) for _ in range(n)]

    services: dict[str, SessionService] = {}

    def services_for(
        sync: Literal["NORMAL", "FULL"], n_rounds: int, block: int
    ) -> dict[str, Block]:
        """A counting and a not-counting service at `sync`, each on its own file."""
        out: dict[str, Block] = {}
        for mode in ("counting", "not counting"):
            svc = SessionService(
                SqliteStore(Path(tmp, f"{sync}-{mode}.db".replace(" ", "-")), synchronous=sync),
                token_counter=counter,
                record_tokens=mode == "counting",
            )
            svc.create(SESSION)
            services[f"{sync} {mode}"] = svc
            need = (n_rounds + 1) * block
            out[f"{sync} {mode}"] = service_appender(svc, messages(need, sync), block)
        return out

    quick = " (--quick: not the reported figures)" if args.quick else ""
    print(f"Token counts stored at append, SQLite{quick}")
    print(machine())
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        contenders: dict[str, Block] = {}
        contenders.update(services_for("NORMAL", rounds, per_block))
        # the store alone: events that carry their count vs the same events without
        need = (rounds + 1) * per_block
        plain = message_events(
            SESSION, conversation(random.Random(args.seed), prefix="store"), need, id_prefix="p"
        )
        counted_src = message_events(
            SESSION, conversation(random.Random(args.seed), prefix="store"), need, id_prefix="c"
        )
        counted = event_tokens(counter).counted(counted_src)
        stores = {}
        for name, events in (("store, counted events", counted), ("store, plain", plain)):
            store = SqliteStore(Path(tmp, name.replace(" ", "-").replace(",", "") + ".db"))
            SessionService(store).create(SESSION)
            stores[name] = store
            contenders[name] = store_appender(store, events, per_block)
        timed = interleave(contenders, rounds, args.seed)

        full = services_for("FULL", full_rounds, full_block)
        timed.update(interleave(full, full_rounds, args.seed))

        counted_back = services["NORMAL counting"].events(SESSION)
        assert all(e.tokens is not None for e in counted_back)
        assert all(e.tokens is None for e in services["NORMAL not counting"].events(SESSION))
        for svc in services.values():
            svc.close()
        for store in stores.values():
            store.close()

    texts = [event_text(e) for e in plain[:2000]]
    import toktok

    t = time.perf_counter()
    for text in texts:
        toktok.batch_count((text,), "o200k_base", 1)
    batch_us = (time.perf_counter() - t) / len(texts) * 1e6
    t = time.perf_counter()
    for text in texts:
        counter.count(text)
    object_us = (time.perf_counter() - t) / len(texts) * 1e6

    def ratio(a: str, b: str) -> float:
        return timed[a].median / timed[b].median

    rows = []
    for name in timed:
        rows.append([name, per_second(timed[name].median), f"{timed[name].median * 1e6:.1f}"])
    print()
    print(f"{rounds} rounds of {per_block} appends (FULL: {full_rounds} of {full_block}); medians")
    print(table(["contender", "appends/s", "us/append"], rows))
    normal = ratio("NORMAL counting", "NORMAL not counting") - 1
    fullc = ratio("FULL counting", "FULL not counting") - 1
    body = ratio("store, counted events", "store, plain") - 1
    print()
    print(
        f"NORMAL: counting at append costs {normal:+.1%} (limit +{LIMIT:.0%}): "
        f"{verdict(normal <= LIMIT)}"
    )
    print(
        f"FULL: counting at append costs {fullc:+.1%} (limit +{LIMIT:.0%}): "
        f"{verdict(fullc <= LIMIT)}"
    )
    print(f"the store alone, a body with its count: {body:+.1%} (no target)")
    print(
        f"one o200k count of a message: {object_us:.1f} us through the tokenizer object, "
        f"{batch_us:.1f} us through toktok.batch_count (what O200kCounter called before)"
    )


if __name__ == "__main__":
    main()
