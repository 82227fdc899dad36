"""The provider's reported counts (`turnlog.compaction.reported`) and `TokenCountTrigger`'s use
of them, on real events read back from a store.

The oracle is hand arithmetic: with `CharCounter` an event costs the length of its
`event_text` ("User: hello" is 11), so every expected total below is a sum written out in the
test, not a call to the code under test.
"""

import pytest
from msgspec.structs import replace

from turnlog import (
    CharCounter,
    CompactionRequest,
    CompactionWindow,
    Message,
    TokenCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.compaction import sent_events
from turnlog.compaction.reported import (
    USAGE_KEY,
    Reported,
    latest_report,
    prompt_digest,
    usage_metadata,
)

COUNTER = CharCounter()

# Lengths of the event_text of the messages the tests append (the oracle):
SYS = 9  # "System: S"
U1 = 11  # "User: hello"
A1 = 19  # "Assistant: hi there"
U2 = 10  # "User: more"
A2 = 15  # "Assistant: sure"
U3 = 10  # "User: last"


def usage(prompt, tokens):
    """What the runner stores on an assistant event, for `tokens` counted over `prompt`."""
    return usage_metadata(
        input_tokens=tokens,
        output_tokens=7,
        cached_input_tokens=0,
        model="gpt-test",
        stop_reason="stop",
        prompt=prompt,
    )


def sent(service, sid):
    return sent_events(service.view(sid))


def request_for(service, sid):
    return CompactionRequest.of(service.get(sid), service.view(sid))


def tokens(service, sid, **kwargs):
    return TokenCountTrigger(1, COUNTER, **kwargs).tokens(request_for(service, sid))


def reply(service, sid, text, reported):
    """Append the assistant's reply as the runner does: with the count of what was sent."""
    return service.append_message(
        sid, Message.assistant(text), metadata=usage(sent(service, sid), reported)
    )


def first_exchange(service):
    """System, user, a reported reply (1,000 tokens for [system, user]), a new user message."""
    sid = service.create().id
    service.append_message(sid, Message.system("S"))
    service.append_message(sid, Message.user("hello"))
    reply(service, sid, "hi there", 1_000)
    service.append_message(sid, Message.user("more"))
    return sid


def test_the_oracle_lengths_are_right(service):
    # Guards the constants above: if event_text changes, these fail first.
    sid = first_exchange(service)
    assert tokens(service, sid, reported=False) == SYS + U1 + A1 + U2 == 49


# -- a report is used while the view is that prompt plus later events ---------------------------


def test_a_report_counts_the_prompt_and_the_estimate_covers_what_came_after(service):
    sid = first_exchange(service)
    view = sent(service, sid)

    assert latest_report(view) == Reported(index=2, input_tokens=1_000)
    # reported [system, user] + estimated [assistant, user]
    assert tokens(service, sid) == 1_000 + A1 + U2 == 1_029


def test_a_report_on_the_last_event_adds_only_that_reply(service):
    sid = service.create().id
    service.append_message(sid, Message.system("S"))
    service.append_message(sid, Message.user("hello"))
    reply(service, sid, "hi there", 1_000)

    assert tokens(service, sid) == 1_000 + A1


def test_the_stored_metadata_round_trips(service):
    sid = first_exchange(service)
    stored = service.view(sid)[2].metadata[USAGE_KEY]
    assert stored == {
        "input_tokens": 1_000,
        "output_tokens": 7,
        "cached_input_tokens": 0,
        "model": "gpt-test",
        "stop_reason": "stop",
        "prompt": prompt_digest(service.view(sid)[:2]),
    }


def test_the_newest_report_wins(service):
    sid = first_exchange(service)
    reply(service, sid, "sure", 2_000)  # counted over [system, user, assistant, user]
    service.append_message(sid, Message.user("last"))

    assert latest_report(sent(service, sid)) == Reported(index=4, input_tokens=2_000)
    assert tokens(service, sid) == 2_000 + A2 + U3 == 2_025


def test_reported_false_ignores_the_report(service):
    sid = first_exchange(service)
    assert tokens(service, sid, reported=False) == SYS + U1 + A1 + U2 == 49


def test_the_trigger_fires_at_the_threshold_exactly(service):
    sid = first_exchange(service)
    request = request_for(service, sid)
    assert TokenCountTrigger(1_029, COUNTER)(request)
    assert not TokenCountTrigger(1_030, COUNTER)(request)
    # the estimate alone is far below: the same threshold does not fire without the report
    assert not TokenCountTrigger(1_029, COUNTER, reported=False)(request)
    assert TokenCountTrigger(49, COUNTER, reported=False)(request)
    assert not TokenCountTrigger(50, COUNTER, reported=False)(request)


def test_an_under_reported_count_never_reads_below_the_estimate(service):
    """A server that leaves cached tokens out of its count (LiteLLM's streamed Messages API
    reported about 20 input tokens for a 265-token prompt): the estimate is the floor, so the
    trigger still fires at what the view really holds."""
    sid = service.create().id
    service.append_message(sid, Message.system("S"))
    service.append_message(sid, Message.user("hello"))
    reply(service, sid, "hi there", 3)  # 3 "tokens" reported for [S, hello], 20 characters
    service.append_message(sid, Message.user("more"))

    assert latest_report(sent(service, sid)) == Reported(index=2, input_tokens=3)
    # reported + after = 3 + 19 + 10 = 32; every event estimated = 9 + 11 + 19 + 10 = 49
    assert tokens(service, sid) == SYS + U1 + A1 + U2 == 49
    assert TokenCountTrigger(49, COUNTER)(request_for(service, sid))
    # a count above the estimate is still believed
    reply(service, sid, "sure", 500)
    assert tokens(service, sid) == 500 + A2


# -- a report is ignored when the view no longer starts with its prompt -------------------------


def test_after_a_compaction_the_report_is_stale_until_the_next_reply(service):
    sid = first_exchange(service)
    reply(service, sid, "sure", 2_000)
    service.append_message(sid, Message.user("last"))
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(2), token_counter=COUNTER)
    result = service.compact(sid, lambda request: True, strategy)
    assert not result.unchanged
    view = sent(service, sid)
    assert [e.message.text for e in view] == ["S", "more", "sure", "last"]

    # "sure" was counted over [S, hello, hi there, more]; the view now sends [S, more] before it
    assert latest_report(view) is None
    assert tokens(service, sid) == SYS + U2 + A2 + U3 == 44

    # the next reply is counted over the compacted view: reports are used again
    reply(service, sid, "ok", 300)
    assert tokens(service, sid) == 300 + len("Assistant: ok")


def test_after_a_compaction_with_a_summary_the_report_is_stale(service):
    sid = first_exchange(service)
    reply(service, sid, "sure", 2_000)
    service.append_message(sid, Message.user("last"))

    def summarize(request):
        return [Message.user("sum"), Message.assistant("hello")]  # 25 for the covered 30

    strategy = WindowCompactionStrategy(
        CompactionWindow.last_turns(2), summarizer=summarize, token_counter=COUNTER
    )
    assert not service.compact(sid, lambda request: True, strategy).unchanged
    view = sent(service, sid)
    assert [e.synthetic for e in view] == [False, True, True, False, False, False]

    assert latest_report(view) is None
    summary = len("User: sum") + len("Assistant: hello")
    assert tokens(service, sid) == SYS + summary + U2 + A2 + U3


def test_a_new_system_prompt_makes_the_report_stale(service):
    sid = first_exchange(service)
    service.append_message(sid, Message.system("S2"))  # sent first, in place of "S"

    assert latest_report(sent(service, sid)) is None
    assert tokens(service, sid) == len("System: S2") + U1 + A1 + U2


def test_a_report_made_for_another_prompt_is_not_used(service):
    sid = service.create().id
    service.append_message(sid, Message.system("S"))
    service.append_message(sid, Message.user("hello"))
    prompt = sent(service, sid)
    service.append_message(
        sid, Message.assistant("hi there"), metadata=usage(list(reversed(prompt)), 1_000)
    )
    assert latest_report(sent(service, sid)) is None
    assert tokens(service, sid) == SYS + U1 + A1


def test_only_the_newest_report_is_tried(service):
    # The newest report does not describe the view: an older one that does is not used either.
    sid = first_exchange(service)
    service.append_message(sid, Message.assistant("sure"), metadata=usage([], 2_000))
    assert latest_report(sent(service, sid)) is None
    assert tokens(service, sid) == SYS + U1 + A1 + U2 + A2


# -- malformed metadata is no report --------------------------------------------------------------


def valid_entry(service, sid):
    return dict(usage(sent(service, sid), 1_000)[USAGE_KEY])


MALFORMED = {
    "bool count": {"input_tokens": True},
    "negative count": {"input_tokens": -1},
    "string count": {"input_tokens": "1000"},
    "float count": {"input_tokens": 1000.0},
    "no count": {"input_tokens": None},
    "digest not a string": {"prompt": 12},
    "no digest": {"prompt": None},
}


@pytest.mark.parametrize("change", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_metadata_falls_back_to_the_estimate(service, change):
    sid = service.create().id
    service.append_message(sid, Message.system("S"))
    service.append_message(sid, Message.user("hello"))
    entry = valid_entry(service, sid)
    entry.update(change)
    entry = {k: v for k, v in entry.items() if v is not None}  # None means: leave the key out
    service.append_message(sid, Message.assistant("hi there"), metadata={USAGE_KEY: entry})

    assert latest_report(sent(service, sid)) is None
    assert tokens(service, sid) == SYS + U1 + A1 == 39


@pytest.mark.parametrize("entry", ["1000", [1000], 1000, None], ids=repr)
def test_a_usage_key_that_is_no_object_is_no_report(service, entry):
    sid = service.create().id
    service.append_message(sid, Message.user("hello"))
    service.append_message(sid, Message.assistant("hi there"), metadata={USAGE_KEY: entry})
    assert latest_report(sent(service, sid)) is None
    assert tokens(service, sid) == U1 + A1


def test_usage_metadata_drops_counts_that_are_not_integers():
    entry = usage_metadata(
        input_tokens=True,  # type: ignore[arg-type]
        output_tokens="7",  # type: ignore[arg-type]
        cached_input_tokens=None,
        model="m",
        stop_reason=None,
        prompt=[],
    )[USAGE_KEY]
    assert entry["input_tokens"] is None
    assert entry["output_tokens"] is None
    assert entry["cached_input_tokens"] is None


def test_a_malformed_newest_report_leaves_the_older_one_in_use(service):
    sid = first_exchange(service)
    service.append_message(
        sid, Message.assistant("sure"), metadata={USAGE_KEY: {"input_tokens": -1, "prompt": "x"}}
    )
    assert latest_report(sent(service, sid)) == Reported(index=2, input_tokens=1_000)
    assert tokens(service, sid) == 1_000 + A1 + U2 + A2


def test_a_report_on_a_user_event_is_not_a_report(service):
    sid = service.create().id
    service.append_message(sid, Message.system("S"))
    # counted over exactly what precedes it, so only its role makes it no report
    service.append_message(sid, Message.user("hello"), metadata=usage(sent(service, sid), 1_000))
    assert latest_report(sent(service, sid)) is None
    assert tokens(service, sid) == SYS + U1


# -- the digest and the trigger's surface --------------------------------------------------------


def test_the_digest_is_of_the_ids_in_order(service):
    sid = first_exchange(service)
    view = service.view(sid)
    same_ids = [replace(e, message=Message.user("other"), metadata={}) for e in view]
    assert prompt_digest(view) == prompt_digest(same_ids)  # ids, not contents
    assert prompt_digest(view) != prompt_digest(view[::-1])
    assert prompt_digest(view[:2]) != prompt_digest(view[:3])
    assert prompt_digest([]) != prompt_digest(view[:1])
    assert latest_report([]) is None


def test_repr_shows_reported_false():
    assert repr(TokenCountTrigger(100)) == "TokenCountTrigger(100)"
    assert repr(TokenCountTrigger(100, reported=False)) == "TokenCountTrigger(100, reported=False)"
