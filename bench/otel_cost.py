"""OpenTelemetry's cost: append and view-read throughput with the API installed and no SDK
configured, against no telemetry at all.

"no telemetry" is the path taken when `opentelemetry-api` is not installed (turnlog.telemetry
resolves nothing and every span is skipped after one check). "API, no SDK" is the default for an
application that has the API installed (by `turnlog[otel]` or by another library) but configures
no SDK: each span is the API's no-op. For context, "SDK, recording" configures a real
TracerProvider and MeterProvider (sampling everything, exporting nowhere), which is what tracing
costs when it is on.

Workloads, on a SQLite file and on the memory store: `SessionService.append_message` of one user
message (blocks of APPENDS), and `SessionService.view` of a 50-event view (blocks of READS). The
modes run interleaved in rounds of small blocks, shuffled each round; the table gives the median
and the fastest block of each. On a loaded machine the medians wander by more than the effect
measured, so the script also times the hooks alone (a span entered and left, with its attributes
or the view-size point) without any I/O: that per-operation cost divided by the operation's time
is the overhead, free of the store's noise.

Target (issue 13): "API, no SDK" throughput within 3% of "no telemetry", for appends and view
reads: the median time per operation at most 1.03x (the verdict column; the fastest block's ratio
is printed beside it). The memory store's blocks are MEMORY_SCALE times longer.

    python bench/otel_cost.py [--quick]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # write nothing outside the temp dir, not even bytecode

import random  # noqa: E402
import tempfile  # noqa: E402
import timeit  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402

from _harness import Block, conversation, interleave, machine, parse_args, table, verdict  # noqa: E402
from turnlog import MemoryStore, Message, SessionService, SqliteStore, telemetry  # noqa: E402
from turnlog.telemetry import _State  # noqa: E402

APPENDS = 50
READS = 50
MEMORY_SCALE = 20
"""The memory store's operations are 3-25 µs: its blocks are this many times longer, so that a
block lasts milliseconds and the timer and the collector pass before it do not swamp it."""
TARGET = 1.03
_FIELDS = [k for k in vars(_State) if not k.startswith("__")]
_HOLDERS = ("_TRACES", "_METERS")  # module globals of turnlog.telemetry: where providers are read


def snapshot() -> dict[str, Any]:
    return {
        **{k: getattr(_State, k) for k in _FIELDS},
        **{k: getattr(telemetry, k) for k in _HOLDERS},
    }


def modes() -> dict[str, dict[str, Any]]:
    """The telemetry state of each mode, to switch between them without re-resolving."""
    telemetry.configure()  # the global providers: the API's no-ops, since no SDK is set
    api = snapshot()
    absent = {
        **api,
        "tracer": None,
        "view_size": None,
        "compactions": None,
        "token_usage": None,
        **dict.fromkeys(_HOLDERS, telemetry._ABSENT),  # what loading without the API sets
    }
    telemetry.configure(TracerProvider(), MeterProvider())
    sdk = snapshot()
    telemetry.configure()
    return {"no telemetry": absent, "API, no SDK": api, "SDK, recording": sdk}


def use(state: dict[str, Any]) -> None:
    for k, v in state.items():
        setattr(telemetry if k in _HOLDERS else _State, k, v)


def contenders(
    svc: SessionService, states: dict[str, dict[str, Any]], seed: int, scale: int
) -> dict[str, Block]:
    rng = random.Random(seed)
    svc.create("view")
    talk = conversation(rng)
    for _ in range(50):
        svc.append_message("view", next(talk))
    for name in states:
        svc.create(f"append-{name}")
        svc.append_message(f"append-{name}", Message.user("hello"))
        svc.append_message(f"append-{name}", Message.assistant("hi"))
    out: dict[str, Block] = {}
    for name, state in states.items():
        out[f"append | {name}"] = _appends(svc, f"append-{name}", state, APPENDS * scale)
        out[f"view | {name}"] = _reads(svc, state, READS * scale)
    return out


def _appends(svc: SessionService, sid: str, state: dict[str, Any], appends: int) -> Block:
    def block() -> int:
        use(state)
        for _ in range(appends // 2):
            svc.append_message(sid, Message.user("how is the deploy going?"))
            svc.append_message(sid, Message.assistant("rolling out, 3 of 8 pods done"))
        return appends

    return block


def _reads(svc: SessionService, state: dict[str, Any], reads: int) -> Block:
    def block() -> int:
        use(state)
        for _ in range(reads):
            svc.view("view")
        return reads

    return block


def run(
    store_name: str, make: Callable[[Path], Any], rounds: int, seed: int, scale: int = 1
) -> list[list[str]]:
    states = modes()
    with tempfile.TemporaryDirectory() as tmp, SessionService(make(Path(tmp))) as svc:
        samples = interleave(contenders(svc, states, seed, scale), rounds, seed)
    use(states["API, no SDK"])
    rows = []
    for op in ("append", "view"):
        base = samples[f"{op} | no telemetry"]
        for name in states:
            mine = samples[f"{op} | {name}"]
            ratio = mine.median / base.median
            best = min(mine.per_op) / min(base.per_op)
            hook = hooks(states, name, op)
            rows.append(
                [
                    f"{store_name} {op}",
                    name,
                    f"{mine.median * 1e6:.1f}",
                    f"{1 / mine.median:,.0f}",
                    f"{ratio:.3f}",
                    f"{best:.3f}",
                    f"{hook * 1e6:.2f}",
                    f"{100 * hook / min(base.per_op):.2f}%",
                    verdict(ratio <= TARGET) if name == "API, no SDK" else "",
                ]
            )
    return rows


def hooks(states: dict[str, dict[str, Any]], name: str, op: str) -> float:
    """Seconds per operation spent in the telemetry hooks alone (best of 5 x 20,000)."""
    use(states[name])
    view: list[Any] = [None] * 50

    def append_hook() -> None:
        with telemetry.span("turnlog.append", "s") as s:
            if s.recording:
                s.set("turnlog.append.events", 1)
                s.set("turnlog.session.version", 7)

    def view_hook() -> None:
        with telemetry.span("turnlog.view", "s") as s:
            telemetry.record_view(s, view)

    hook = append_hook if op == "append" else view_hook
    best = min(timeit.repeat(hook, number=20_000, repeat=5)) / 20_000
    use(states["API, no SDK"])
    return best


def main() -> None:
    args = parse_args(__doc__)
    rounds = 10 if args.quick else 150
    print(machine())
    print(
        f"{rounds} rounds; blocks of {APPENDS} appends / {READS} view reads "
        f"({MEMORY_SCALE}x as many on the memory store)\n"
    )
    rows = run("sqlite", lambda d: SqliteStore(d / "b.db"), rounds, args.seed)
    rows += run("memory", lambda d: MemoryStore(), rounds, args.seed, MEMORY_SCALE)
    headers = [
        "workload",
        "telemetry",
        "median µs/op",
        "ops/s",
        "vs none (median)",
        "vs none (best)",
        "hooks µs/op",
        "hooks / op",
        f"<= {TARGET}x",
    ]
    print(table(headers, rows))
    print(
        "\nvs none: the median (and the fastest) block's time per op over the no-telemetry "
        "mode's; hooks: the telemetry hooks alone, without I/O, and their share of the fastest "
        "no-telemetry op"
    )


if __name__ == "__main__":
    main()
