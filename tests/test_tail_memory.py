"""`stores.base.TailMemory`: the per-handle memory of the logs' ends, bounded and thread-safe."""

import threading

from turnlog.rules import EMPTY_TAIL, STARTED, Tail
from turnlog.stores.base import TailMemory


def test_remember_get_forget():
    memory = TailMemory()
    assert memory.get("s") is None
    memory.remember("s", 2, "e2", Tail(("c1",), True))
    assert memory.get("s") == (2, "e2", Tail(("c1",), True))
    memory.remember("s", 3, "e3", STARTED)  # a newer append replaces the entry
    assert memory.get("s") == (3, "e3", STARTED)
    memory.forget("s")
    memory.forget("s")  # forgetting twice is fine
    assert memory.get("s") is None


def test_the_memory_is_bounded():
    memory = TailMemory(limit=3)
    for n in range(3):
        memory.remember(f"s{n}", 1, "e", STARTED)
    memory.remember("s2", 2, "e", STARTED)  # an update at the limit keeps the others
    assert len(memory) == 3
    memory.remember("s3", 1, "e", STARTED)  # a new session at the limit: start over
    assert len(memory) == 1
    assert memory.get("s3") is not None and memory.get("s0") is None
    memory.clear()
    assert len(memory) == 0


def test_threads_share_one_memory():
    memory = TailMemory(limit=50)
    errors: list[BaseException] = []

    def work(w: int) -> None:
        try:
            for n in range(2_000):
                sid = f"s{(w * 7 + n) % 120}"
                memory.remember(sid, n, f"e{n}", EMPTY_TAIL)
                memory.get(sid)
                if n % 5 == 0:
                    memory.forget(sid)
        except BaseException as exc:  # pragma: no cover - what the test looks for
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(memory) <= 50
