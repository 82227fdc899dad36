"""Decoding a whole log holds off the cyclic garbage collector (`codec.gc_paused`): the records
hold no cycles, and a collector run per 700 allocations would traverse the application's heap
again and again while 10,000 events are built."""

from __future__ import annotations

import contextlib
import gc
import threading

import turnlog.codec as codec_module
from turnlog import Message, SessionEvent, SessionService, SqliteStore
from turnlog.codec import gc_paused


def test_a_pause_restores_the_collector_and_nests():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_a_collector_the_application_disabled_stays_disabled():
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_pauses_of_several_threads_end_with_the_last():
    inside, release = threading.Barrier(3), threading.Event()

    def pause():
        with gc_paused():
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=pause) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    assert not gc.isenabled()
    release.set()
    for t in threads:
        t.join()
    assert gc.isenabled()


def test_an_exception_inside_a_pause_restores_the_collector():
    with contextlib.suppress(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def collections_while(read):
    runs = []

    def note(phase, info):
        if phase == "start":
            runs.append(info["generation"])

    gc.callbacks.append(note)
    try:
        read()
    finally:
        gc.callbacks.remove(note)
    return len(runs)


def test_a_whole_log_read_runs_far_fewer_collections(tmp_path, monkeypatch):
    with SessionService(SqliteStore(tmp_path / "t.db"), record_tokens=False) as svc:
        svc.create("s")
        events = []
        for n in range(2_500):
            events.append(SessionEvent.for_message("s", Message.user(f"question {n}")))
            events.append(SessionEvent.for_message("s", Message.assistant(f"answer {n}")))
        svc.append_events("s", events, 0)
    store = SqliteStore(tmp_path / "t.db")
    try:
        gc.collect()
        paused = collections_while(lambda: store.events("s"))
        monkeypatch.setattr(codec_module, "gc_paused", contextlib.nullcontext)
        gc.collect()
        unpaused = collections_while(lambda: store.events("s"))
    finally:
        store.close()
    assert unpaused >= 10  # 5,000 events build some 15,000 tracked objects
    assert paused * 3 < unpaused
