"""How a compaction pass is recorded: one appended boundary, then the summary events.

Follows "How a pass is recorded" of the compaction guide, on real stores.
"""

import pytest

from turnlog import (
    CharCounter,
    CompactionBoundary,
    CompactionRequest,
    CompactionWindow,
    CorruptData,
    EventType,
    InvalidInput,
    MemoryStore,
    Message,
    SessionEvent,
    SessionNotFound,
    SessionService,
    SqliteStore,
    WindowCompactionStrategy,
    event_text,
)
from turnlog.events import new_id

AUDIT = EventType.of("ACME.AUDIT")


def always(request):
    return True


def strategy(window, summarizer=None):
    return WindowCompactionStrategy(window, summarizer=summarizer, token_counter=CharCounter())


def new_summary(request):
    return [Message.user("new summary")]


def seed_log(service):
    """U1 A1 ⊥1 Σold U2 A2 U3 A3, where ⊥1 names only Σold (built by hand, as in the guide).

    A summary turn starts with a user message (a view rule): here it is that one message.
    """
    sid = service.create().id
    ev = {}
    ev["U1"] = service.append_message(sid, Message.user("u1"))
    ev["A1"] = service.append_message(sid, Message.assistant("a1"))
    old = SessionEvent.for_message(sid, Message.user("old summary"), synthetic=True)
    b1 = CompactionBoundary(
        id=new_id(),
        pinned_event_ids=(),
        summary_event_ids=(old.id,),
        preserved_event_ids=(),
        covered_event_count=2,
        tokens_estimated_saved=0,
        strategy="by hand",
    )
    assert service.append_events(sid, [b1.to_event(sid), old], 2) == 4
    log = service.events(sid)
    ev["B1"], ev["Σold"] = log[2], log[3]
    for name in ("U2", "A2", "U3", "A3"):
        role = Message.user if name[0] == "U" else Message.assistant
        ev[name] = service.append_message(sid, role(name.lower()))
    return sid, ev


def test_the_recorded_pass_of_the_guide(service):
    sid, ev = seed_log(service)
    log_before = service.events(sid)
    names = ["U1", "A1", "B1", "Σold", "U2", "A2", "U3", "A3"]
    assert log_before == [ev[n] for n in names]
    assert [e.seq for e in log_before] == list(range(1, 9))
    assert service.view(sid) == [ev[n] for n in ("Σold", "U2", "A2", "U3", "A3")]

    result = service.compact(sid, always, strategy(CompactionWindow.last_events(2), new_summary))

    assert not result.unchanged
    assert result.covered_events == (ev["Σold"], ev["U2"], ev["A2"])
    assert result.pinned_events == ()
    assert result.preserved_events == (ev["U3"], ev["A3"])
    assert result.summary == (Message.user("new summary"),)

    log_after = service.events(sid)
    assert len(log_after) == 10
    # every earlier event identical: same id, seq, timestamp and content, in place
    assert log_after[:8] == log_before
    for old, new in zip(log_before, log_after, strict=False):
        assert (old.id, old.seq, old.message, old.payload) == (
            new.id,
            new.seq,
            new.message,
            new.payload,
        )
    b2, new = log_after[8], log_after[9]
    assert b2.type == EventType.COMPACTION and b2.seq == 9
    assert new.synthetic and new.seq == 10 and new.message == Message.user("new summary")
    assert result.summary_events[0].id == new.id

    assert service.view(sid) == [new, ev["U3"], ev["A3"]]
    saved = sum(len(event_text(e)) for e in result.covered_events) - len(event_text(new))
    assert saved == 21
    assert b2.payload == {
        "pinned_event_ids": [],
        "summary_event_ids": [new.id],
        "preserved_event_ids": [ev["U3"].id, ev["A3"].id],
        "covered_event_count": 3,
        "tokens_estimated_saved": saved,
        "strategy": "window:last_events(2)+summary",
    }
    # Σold stays in the log: the old boundary still shows what the model was told
    assert CompactionBoundary.project(log_after[:8]) == [
        ev[n] for n in ("Σold", "U2", "A2", "U3", "A3")
    ]


def test_boundary_lists_ids_in_view_order(service):
    sid = service.create().id
    service.append_message(sid, Message.user("u1"))
    system = service.append_message(sid, Message.system("sys"))
    for text in ("a1", "u2", "a2", "u3", "a3"):
        role = Message.user if text[0] == "u" else Message.assistant
        service.append_message(sid, role(text))

    result = service.compact(sid, always, strategy(CompactionWindow.last_turns(1), new_summary))

    boundary = CompactionBoundary.newest(service.events(sid))
    assert boundary == result.boundary
    view = service.view(sid)
    assert list(boundary.view_event_ids) == [e.id for e in view]
    assert boundary.pinned_event_ids == (system.id,)
    assert [e.message.text for e in view] == ["sys", "new summary", "u3", "a3"]


def test_a_pinned_system_message_is_named_by_every_later_boundary(service):
    sid = service.create().id
    system = service.append_message(sid, Message.system("you are terse"))
    ids = []
    for turn in range(1, 5):
        service.append_message(sid, Message.user(f"u{turn}"))
        service.append_message(sid, Message.assistant(f"a{turn}"))
        if turn >= 2:
            summarizer = new_summary if turn % 2 else None
            window = CompactionWindow.last_turns(1)
            result = service.compact(sid, always, strategy(window, summarizer))
            assert not result.unchanged
            ids.append(result.boundary.id)

    log = service.events(sid)
    boundaries = [CompactionBoundary.from_event(e) for e in log if e.type == EventType.COMPACTION]
    assert [b.id for b in boundaries] == ids and len(ids) == 3
    assert system.seq == 1 and all(b.pinned_event_ids[0] == system.id for b in boundaries)
    assert service.view(sid)[0] == system


def test_project_of_the_whole_log_equals_the_view(service):
    sid, _ = seed_log(service)
    service.append_event(SessionEvent.for_payload(sid, AUDIT, {"who": "ops"}))
    service.compact(sid, always, strategy(CompactionWindow.last_events(2), new_summary))
    service.append_event(SessionEvent.for_payload(sid, AUDIT, [1, 2, 3]))
    service.append_message(sid, Message.user("u4"))

    log = service.events(sid)
    view = service.view(sid)
    assert CompactionBoundary.project(log) == view
    assert [e.message.text for e in view] == ["new summary", "u3", "a3", "u4"]
    assert all(e.type == EventType.MESSAGE for e in view)


def test_from_event_refuses_other_event_types(service):
    sid, ev = seed_log(service)
    with pytest.raises(InvalidInput, match="not a COMPACTION event"):
        CompactionBoundary.from_event(ev["U1"])
    custom = service.append_event(SessionEvent.for_payload(sid, AUDIT, {"a": 1}))
    with pytest.raises(InvalidInput):
        CompactionBoundary.from_event(custom)


def test_newest_is_none_when_never_compacted(service):
    sid = service.create().id
    service.append_message(sid, Message.user("u1"))
    service.append_event(SessionEvent.for_payload(sid, AUDIT, None))
    assert CompactionBoundary.newest(service.events(sid)) is None
    assert CompactionBoundary.newest([]) is None


def test_newest_picks_the_last_boundary(service):
    sid, ev = seed_log(service)
    log = service.events(sid)
    assert CompactionBoundary.newest(log).id == ev["B1"].id
    result = service.compact(sid, always, strategy(CompactionWindow.last_events(2)))
    assert CompactionBoundary.newest(service.events(sid)) == result.boundary


def test_payload_round_trip(service):
    sid, ev = seed_log(service)
    boundary = CompactionBoundary(
        id=new_id(),
        pinned_event_ids=("a", "b"),
        summary_event_ids=("c",),
        preserved_event_ids=("d", "e", "f"),
        covered_event_count=7,
        tokens_estimated_saved=-3,
        strategy="window:last_turns(2)",
    )
    event = boundary.to_event(sid)
    assert event.type == EventType.COMPACTION and event.id == boundary.id
    assert CompactionBoundary.from_event(event) == boundary
    assert CompactionBoundary.from_payload(boundary.id, boundary.to_payload()) == boundary
    # and through a store: what is read back is what was written
    stored = CompactionBoundary.from_event(ev["B1"])
    assert stored.summary_event_ids == (ev["Σold"].id,)
    assert stored.strategy == "by hand"


@pytest.mark.parametrize(
    "payload",
    [
        None,
        [],
        {"pinned_event_ids": []},
        {
            "pinned_event_ids": "abc",
            "summary_event_ids": [],
            "preserved_event_ids": [],
            "covered_event_count": 0,
            "tokens_estimated_saved": 0,
            "strategy": "x",
        },
        {
            "pinned_event_ids": [],
            "summary_event_ids": [],
            "preserved_event_ids": [""],
            "covered_event_count": 0,
            "tokens_estimated_saved": 0,
            "strategy": "x",
        },
        {
            "pinned_event_ids": [],
            "summary_event_ids": [],
            "preserved_event_ids": [],
            "covered_event_count": True,
            "tokens_estimated_saved": 0,
            "strategy": "x",
        },
        {
            "pinned_event_ids": [],
            "summary_event_ids": [],
            "preserved_event_ids": [],
            "covered_event_count": 0,
            "tokens_estimated_saved": 0,
            "strategy": 5,
        },
    ],
)
def test_a_damaged_payload_is_corrupt_data(payload):
    with pytest.raises(CorruptData, match="damaged"):
        CompactionBoundary.from_payload("b1", payload)


def test_project_reports_a_boundary_naming_a_missing_event():
    sid = "s1"
    u = SessionEvent.for_message(sid, Message.user("u"))
    boundary = CompactionBoundary(new_id(), (), (), ("missing",), 0, 0, "x")
    with pytest.raises(CorruptData, match="missing"):
        CompactionBoundary.project([u, boundary.to_event(sid)])


@pytest.mark.parametrize("role", ["pinned", "summary", "preserved"])
@pytest.mark.parametrize("where", ["before", "after"])
def test_project_refuses_a_boundary_naming_a_custom_event(role, where):
    """Only message events are ever in a view: a boundary that names an event of the
    application's own type (stored before it, or after it as a summary would be) is damage."""
    sid = "s1"
    u = SessionEvent.for_message(sid, Message.user("u"))
    audit = SessionEvent.for_payload(sid, AUDIT, {"k": 1})
    ids = {"pinned": (), "summary": (), "preserved": ()}
    ids[role] = (audit.id,)
    boundary = CompactionBoundary(
        new_id(), ids["pinned"], ids["summary"], ids["preserved"], 1, 0, "x"
    ).to_event(sid)
    log = [u, audit, boundary] if where == "before" else [u, boundary, audit]
    with pytest.raises(CorruptData, match=audit.id):
        CompactionBoundary.project(log)


def test_project_without_a_boundary_is_the_message_events():
    sid = "s1"
    u = SessionEvent.for_message(sid, Message.user("u"))
    audit = SessionEvent.for_payload(sid, AUDIT, {"k": 1})
    a = SessionEvent.for_message(sid, Message.assistant("a"))
    log = [u, audit, a]
    view = CompactionBoundary.project(log)
    assert view == [u, a]
    assert view is not log


def test_without_a_summarizer_a_prior_summary_is_pinned_and_carried_forward(service):
    sid, ev = seed_log(service)
    log_before = service.events(sid)

    result = service.compact(sid, always, strategy(CompactionWindow.last_events(2)))

    assert result.pinned_events == (ev["Σold"],)
    assert result.covered_events == (ev["U2"], ev["A2"])
    assert result.preserved_events == (ev["U3"], ev["A3"])
    assert result.summary == () and result.summary_events == ()
    log_after = service.events(sid)
    assert log_after[:8] == log_before and len(log_after) == 9  # only the boundary
    assert result.boundary.pinned_event_ids == (ev["Σold"].id,)
    assert result.boundary.summary_event_ids == ()
    assert service.view(sid) == [ev["Σold"], ev["U3"], ev["A3"]]

    # carried forward again by the next plain pass
    u4 = service.append_message(sid, Message.user("u4"))
    a4 = service.append_message(sid, Message.assistant("a4"))
    service.compact(sid, always, strategy(CompactionWindow.last_turns(1)))
    assert service.view(sid) == [ev["Σold"], u4, a4]


def test_compact_an_unknown_session(service):
    with pytest.raises(SessionNotFound):
        service.compact("nope", always, strategy(CompactionWindow.last_events(2)))


class RacingStrategy:
    """Lets another writer append while the pass is being decided."""

    def __init__(self, service, inner):
        self.service, self.inner = service, inner
        self.name = inner.name

    def compact(self, request):
        self.service.append_message(request.session.id, Message.user("sneaked in"))
        return self.inner.compact(request)


def test_a_pass_that_loses_the_race_writes_nothing(sync_service):
    service = sync_service
    sid = service.create().id
    for text in ("u1", "a1", "u2", "a2"):
        role = Message.user if text[0] == "u" else Message.assistant
        service.append_message(sid, role(text))
    racing = RacingStrategy(service, strategy(CompactionWindow.last_turns(1), new_summary))

    result = service.compact(sid, always, racing)

    assert result.conflict and result.unchanged and result.boundary is None
    log = service.events(sid)
    assert len(log) == 5 and log[-1].message == Message.user("sneaked in")
    assert not any(e.type == EventType.COMPACTION for e in log)
    assert [e.message.text for e in service.view(sid)][-1] == "sneaked in"


def test_an_unchanged_result_carries_the_current_view(service):
    sid = service.create().id
    service.append_message(sid, Message.user("u1"))
    result = service.compact(sid, always, strategy(CompactionWindow.last_events(5)))
    assert result.unchanged and list(result.view) == service.view(sid)


class AppendsAfterTheFirstRead:
    """A real store whose first `version()` or `view()` read, once armed, is followed by an
    append from another handle on the same data: a writer that lands between compact's reads."""

    def __init__(self, inner, other):
        self.inner, self.other = inner, other
        self.armed_for = None
        self.reads = []

    def arm(self, session_id):
        self.armed_for = session_id

    def _after_read(self, what, session_id):
        self.reads.append(what)
        if self.armed_for == session_id:
            self.armed_for = None
            self.other.append_event(
                SessionEvent.for_message(session_id, Message.user("between the reads"))
            )

    def version(self, session_id):
        out = self.inner.version(session_id)
        self._after_read("version", session_id)
        return out

    def view(self, session_id):
        out = self.inner.view(session_id)
        self._after_read("view", session_id)
        return out

    def view_lazy(self, session_id):  # what a compaction pass reads
        out = self.inner.view_lazy(session_id)
        self._after_read("view", session_id)
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture(params=["memory", "sqlite"])
def racing_store(request, tmp_path):
    if request.param == "memory":
        inner = MemoryStore()
        other = inner  # one process, one dict: the same object is the other handle
    else:
        inner = SqliteStore(tmp_path / "race.db")
        other = SqliteStore(tmp_path / "race.db")
    yield AppendsAfterTheFirstRead(inner, other)
    if other is not inner:
        other.close()
    inner.close()


def test_an_append_between_the_version_and_the_view_reads_is_a_conflict(racing_store):
    """The version must be read before the view: then a writer landing between the two reads
    makes the version stale and the append conflicts. Read the other way round, the pass would
    compact a view that lacks the new message at the new version, and silently drop it."""
    service = SessionService(racing_store)
    sid = service.create().id
    for text in ("u1", "a1", "u2", "a2"):
        role = Message.user if text[0] == "u" else Message.assistant
        service.append_message(sid, role(text))

    racing_store.arm(sid)
    result = service.compact(sid, always, strategy(CompactionWindow.last_turns(1), new_summary))

    assert result.conflict and result.unchanged and result.boundary is None
    assert racing_store.reads[:2] == ["version", "view"]
    log = service.events(sid)
    assert len(log) == 5 and not any(e.type == EventType.COMPACTION for e in log)
    assert [e.message.text for e in service.view(sid)][-1] == "between the reads"

    again = service.compact(sid, always, strategy(CompactionWindow.last_turns(1), new_summary))
    assert not again.conflict and again.boundary is not None
    assert [e.message.text for e in service.view(sid)][-1] == "between the reads"


# -- issue 24 item 10: why nothing was written, and a pair that would fire again --------------


def test_every_unchanged_result_says_why(service):
    sid = service.create().id
    assert service.compact(sid, always, strategy(CompactionWindow.last_turns(1))).reason == (
        "the view holds no turn to cut at"
    )
    service.append_message(sid, Message.user("u1"))
    service.append_message(sid, Message.assistant("a1"))
    never = service.compact(sid, lambda request: False, strategy(CompactionWindow.last_turns(1)))
    assert never.unchanged and never.reason == "the trigger did not fire"
    fits = service.compact(sid, always, strategy(CompactionWindow.last_turns(3)))
    assert fits.unchanged and fits.reason == "the turns fit the window last_turns(3)"
    service.append_message(sid, Message.user("u2"))
    declined = service.compact(
        sid, always, strategy(CompactionWindow.last_turns(1), summarizer=lambda request: [])
    )
    assert declined.unchanged and declined.reason == "the summarizer declined"
    cut = service.compact(sid, always, strategy(CompactionWindow.last_turns(1)))
    assert not cut.unchanged and cut.reason == ""


def test_a_pair_that_fires_again_on_what_it_wrote_is_flagged(service, caplog):
    """A 30-character trigger and a window that keeps more than 30 characters: the pass writes,
    and the very next check would compact again; a trigger that stops firing is not flagged.
    The service itself logs nothing (a direct `compact` is often meant to run every time)."""
    from turnlog import TokenCountTrigger

    sid = service.create().id
    for n in range(4):
        service.append_message(sid, Message.user(f"question number {n}"))  # 25 characters
        service.append_message(sid, Message.assistant(f"answer number {n}"))
    trigger = TokenCountTrigger(30, CharCounter())
    with caplog.at_level("WARNING", logger="turnlog"):
        again = service.compact(sid, trigger, strategy(CompactionWindow.last_turns(2)))
    assert not again.unchanged and again.refires
    assert trigger(CompactionRequest.of(service.get(sid), service.view(sid)))  # the oracle
    assert not caplog.records

    roomy = TokenCountTrigger(60, CharCounter())  # the view holds about 100; one turn, 49
    once = service.compact(sid, roomy, strategy(CompactionWindow.last_turns(1)))
    assert not once.unchanged and not once.refires
    assert not roomy(CompactionRequest.of(service.get(sid), service.view(sid)))
