"""Eviction strategies: seed 004's TTL behaviour exactly, the LRU bound, composites, threads."""

import threading
from datetime import timedelta

import pytest

from turnlog import InvalidInput
from turnlog.toolsearch import (
    AlwaysEvict,
    CompositeEvictionStrategy,
    LruEvictionStrategy,
    NeverEvict,
    ToolIndexEvictionStrategy,
    TtlEvictionStrategy,
)


class Seconds:
    """A float clock that moves only when told to."""

    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def clock():
    return Seconds()


# -- TTL (seed 004) ----------------------------------------------------------------------------


def test_ttl_evicts_sessions_idle_for_the_ttl(clock):
    ttl = TtlEvictionStrategy(timedelta(seconds=60), clock=clock)
    assert ttl.on_access("a") == set()
    clock.advance(30)
    assert ttl.on_access("b") == set()
    clock.advance(30)  # a idle for exactly the ttl: reached; b idle 30 s
    assert ttl.on_access("c") == {"a"}
    clock.advance(29.999)
    assert ttl.on_access("c") == set()
    clock.advance(0.001)
    assert ttl.on_access("c") == {"b"}
    assert len(ttl) == 1


def test_ttl_just_under_the_ttl_is_kept(clock):
    ttl = TtlEvictionStrategy(10, clock=clock)
    ttl.on_access("a")
    clock.advance(9.5)
    assert ttl.on_access("b") == set()


def test_every_access_resets_the_idle_time(clock):
    ttl = TtlEvictionStrategy(10.0, clock=clock)
    ttl.on_access("a")
    for _ in range(5):
        clock.advance(9)
        assert ttl.on_access("a") == set()  # the gap stays below the ttl
        assert ttl.on_access("b") == set()
    clock.advance(10)
    assert ttl.on_access("c") == {"a", "b"}


def test_the_current_session_is_never_returned_even_when_it_expired(clock):
    ttl = TtlEvictionStrategy(5, clock=clock)
    ttl.on_access("a")
    ttl.on_access("b")
    clock.advance(100)
    assert ttl.on_access("a") == {"b"}  # a expired too, but it is the one accessed
    assert len(ttl) == 1


def test_returned_sessions_are_forgotten(clock):
    ttl = TtlEvictionStrategy(5, clock=clock)
    ttl.on_access("a")
    clock.advance(5)
    assert ttl.on_access("b") == {"a"}
    clock.advance(1)
    assert ttl.on_access("b") == set()  # a is not returned twice
    assert ttl.on_access("c") == set()


def test_on_removed_forgets_the_session(clock):
    ttl = TtlEvictionStrategy(5, clock=clock)
    ttl.on_access("a")
    ttl.on_access("b")
    ttl.on_removed("a")
    ttl.on_removed("unknown")  # a no-op
    clock.advance(5)
    assert ttl.on_access("c") == {"b"}


def test_ttl_accepts_timedelta_and_seconds(clock):
    assert TtlEvictionStrategy(timedelta(minutes=2)).ttl == timedelta(minutes=2)
    assert TtlEvictionStrategy(1.5).ttl == timedelta(seconds=1.5)


@pytest.mark.parametrize(
    "bad",
    [
        0,
        -1,
        0.0,
        timedelta(0),
        timedelta(seconds=-3),
        float("nan"),
        float("inf"),  # accepted before, and then `.ttl` raised OverflowError
        10**30,
        True,
        "60",
        None,
    ],
)
def test_a_bad_ttl_raises_invalid_input(bad):
    with pytest.raises(InvalidInput, match="ttl"):
        TtlEvictionStrategy(bad)


def test_the_ttl_takes_the_same_durations_as_a_session_ttl(clock):
    # One rule for every duration in turnlog (issue 7 item 10): seconds or a timedelta.
    assert TtlEvictionStrategy(60).ttl == timedelta(minutes=1)
    ttl = TtlEvictionStrategy(timedelta(milliseconds=1500), clock=clock)
    ttl.on_access("a")
    clock.advance(1.4)
    assert ttl.on_access("b") == set()
    clock.advance(0.1)
    assert ttl.on_access("b") == {"a"}


def test_ttl_keeps_expiry_exact_when_sessions_are_touched_out_of_order(clock):
    ttl = TtlEvictionStrategy(10, clock=clock)
    for name in "abcd":
        ttl.on_access(name)
        clock.advance(1)
    ttl.on_access("a")  # a (now 1004) moves behind d (1003)
    clock.advance(6)  # b idle 9, c 8, d 7, a 6
    assert ttl.on_access("x") == set()
    clock.advance(1)  # b idle 10
    assert ttl.on_access("x") == {"b"}
    clock.advance(2)  # c 11, d 10, a 9
    assert ttl.on_access("x") == {"c", "d"}
    clock.advance(1)
    assert ttl.on_access("x") == {"a"}


def test_a_clock_that_goes_back_is_treated_as_standing_still(clock):
    ttl = TtlEvictionStrategy(10, clock=clock)
    ttl.on_access("a")
    clock.advance(-100)
    assert ttl.on_access("b") == set()
    clock.advance(110)
    assert ttl.on_access("c") == {"a", "b"}


def test_accesses_while_the_clock_is_behind_count_as_the_latest_time_seen(clock):
    """After the clock jumps back, accesses are stamped with the latest time seen, not the
    earlier reading: nothing expires early, and expiry resumes once the clock catches up."""
    ttl = TtlEvictionStrategy(10, clock=clock)
    ttl.on_access("a")  # 1000
    clock.now = 900.0
    assert ttl.on_access("b") == set()  # stamped 1000, not 900
    clock.now = 905.0
    assert ttl.on_access("a") == set()  # b is now the oldest entry
    clock.now = 910.0
    assert ttl.on_access("x") == set()  # b idle 10 by the raw clock: must be kept
    clock.now = 1009.5
    assert ttl.on_access("x") == set()
    clock.now = 1010.0
    assert ttl.on_access("y") == {"a", "b"}  # x was touched at 1009.5


# -- LRU ---------------------------------------------------------------------------------------


def test_lru_returns_the_least_recently_used_beyond_the_bound():
    lru = LruEvictionStrategy(max_sessions=2)
    assert lru.on_access("a") == set()
    assert lru.on_access("b") == set()
    assert lru.on_access("a") == set()  # a is now the most recent
    assert lru.on_access("c") == {"b"}
    assert lru.on_access("d") == {"a"}
    assert len(lru) == 2


def test_lru_of_one_never_returns_the_current_session():
    lru = LruEvictionStrategy(1)
    assert lru.on_access("a") == set()
    assert lru.on_access("a") == set()
    assert lru.on_access("b") == {"a"}
    assert lru.on_access("a") == {"b"}


def test_lru_on_removed_frees_a_slot():
    lru = LruEvictionStrategy(2)
    lru.on_access("a")
    lru.on_access("b")
    lru.on_removed("a")
    lru.on_removed("nobody")
    assert lru.on_access("c") == set()
    assert lru.on_access("d") == {"b"}


def test_lru_default_bound_is_1000():
    lru = LruEvictionStrategy()
    assert lru.max_sessions == 1000
    evicted = set()
    for i in range(1001):
        evicted |= lru.on_access(f"s{i}")
    assert evicted == {"s0"}


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, None, "10"])
def test_a_bad_lru_bound_raises_invalid_input(bad):
    with pytest.raises(InvalidInput):
        LruEvictionStrategy(bad)


# -- composite, never, always ------------------------------------------------------------------


def test_composite_returns_the_union_of_its_delegates(clock):
    both = CompositeEvictionStrategy(AlwaysEvict(), LruEvictionStrategy(1))
    assert both.on_access("a") == {"a"}
    assert both.on_access("b") == {"a", "b"}

    ttl = TtlEvictionStrategy(10, clock=clock)
    lru = LruEvictionStrategy(3)
    both = CompositeEvictionStrategy(ttl, lru)
    for name in "abc":
        both.on_access(name)
    clock.advance(10)
    assert both.on_access("d") == {"a", "b", "c"}  # the TTL names all three, the LRU only a


def test_composite_on_removed_reaches_every_delegate(clock):
    ttl = TtlEvictionStrategy(10, clock=clock)
    lru = LruEvictionStrategy(2)
    both = CompositeEvictionStrategy(ttl, lru)
    both.on_access("a")
    both.on_access("b")
    evicted = both.on_access("c")  # the LRU evicts a; the TTL still tracks it
    assert evicted == {"a"}
    for name in evicted:
        both.on_removed(name)
    assert len(ttl) == 2 and len(lru) == 2
    clock.advance(10)
    assert both.on_access("c") == {"b"}  # the TTL no longer knows a


def test_composite_never_raises_and_still_reaches_the_other_delegates(caplog):
    class Broken:
        def on_access(self, session_id):
            raise RuntimeError("boom")

        def on_removed(self, session_id):
            raise RuntimeError("boom")

    lru = LruEvictionStrategy(1)
    both = CompositeEvictionStrategy(Broken(), lru)
    assert both.on_access("a") == set()
    assert both.on_access("b") == {"a"}
    both.on_removed("b")
    assert len(lru) == 0
    assert "boom" in caplog.text


def test_composite_refuses_what_is_not_a_strategy():
    with pytest.raises(InvalidInput):
        CompositeEvictionStrategy(LruEvictionStrategy(), "ttl")


def test_an_empty_composite_never_evicts():
    assert CompositeEvictionStrategy().on_access("a") == set()


def test_never_and_always():
    never, always = NeverEvict(), AlwaysEvict()
    for i in range(100):
        assert never.on_access(f"s{i}") == set()
    assert always.on_access("a") == {"a"}
    assert always.on_access("b") == {"b"}
    never.on_removed("a")
    always.on_removed("a")
    assert "unbounded" in (NeverEvict.__doc__ or "").lower()


@pytest.mark.parametrize(
    "strategy",
    [
        TtlEvictionStrategy(1),
        LruEvictionStrategy(),
        CompositeEvictionStrategy(),
        NeverEvict(),
        AlwaysEvict(),
    ],
)
def test_every_strategy_meets_the_protocol(strategy):
    assert isinstance(strategy, ToolIndexEvictionStrategy)


# -- threads -----------------------------------------------------------------------------------


def _hammer(strategy, threads=8, per_thread=2000, sessions=300):
    errors = []
    evicted = []
    start = threading.Barrier(threads)

    def run(t):
        try:
            start.wait()
            for i in range(per_thread):
                sid = f"s{(i * 7 + t * 13) % sessions}"
                out = strategy.on_access(sid)
                if sid in out:
                    errors.append(f"{sid} evicted while being accessed")
                for other in out:
                    strategy.on_removed(other)
                evicted.append(len(out))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    return sum(evicted)


def test_lru_is_thread_safe_and_keeps_its_bound():
    lru = LruEvictionStrategy(50)
    assert _hammer(lru) > 0
    assert len(lru) <= 50


def test_ttl_is_thread_safe():
    clock = Seconds()
    lock = threading.Lock()

    def ticking():
        with lock:
            clock.now += 0.01
            return clock.now

    ttl = TtlEvictionStrategy(1, clock=ticking)
    assert _hammer(ttl) > 0
    assert len(ttl) <= 300


def test_composite_is_thread_safe():
    lru = LruEvictionStrategy(40)
    ttl = TtlEvictionStrategy(3600)
    _hammer(CompositeEvictionStrategy(ttl, lru))
    assert len(lru) <= 40
