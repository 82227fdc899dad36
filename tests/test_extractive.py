"""ExtractiveSummarizer: deterministic sections from the covered events, a token cap, merged
with the prior summary over many passes; through the service in its 4 modes."""

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnlog
import turnlog.compaction
from test_summarizer import add, answer, question, turns
from turnlog import (
    CharCounter,
    ChatModelSummarizer,
    CompactionWindow,
    ExtractiveSummarizer,
    InvalidInput,
    Message,
    O200kCounter,
    Session,
    SessionEvent,
    SummaryRequest,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
    event_text,
)
from turnlog.compaction._budget import turn_tokens
from turnlog.compaction.extractive import EXTRACT_METADATA_KEY, looks_like_error
from turnlog.compaction.files import (
    DEFAULT_MODIFY_TOOLS,
    DEFAULT_PATCH_TOOLS,
    DEFAULT_PATH_ARGUMENTS,
    DEFAULT_READ_TOOLS,
    FILES_METADATA_KEY,
)
from turnlog.compaction.summary import DEFAULT_SHADOW_PROMPT
from turnlog.rules import check_messages
from turnlog.stores.base import utc_now
from turnlog.testing import ScriptedChatModel
from turnlog.tokens import ByteEstimateCounter


def compact(service, sid, summarizer, window=None, counter=None):
    strategy = WindowCompactionStrategy(
        window or CompactionWindow.last_turns(1),
        summarizer=summarizer,
        token_counter=counter or CharCounter(),
    )
    return service.compact(sid, lambda r: True, strategy)


def call(call_id, name, **args):
    return ToolCall(call_id, name, json.dumps(args))


# what read_file returns: the whole file (the summary keeps its first line, as the docs show)
PARSER_PY = """\
def parse():
    # the records on stdin: one a line, fields split at commas
    records = []
    for line in sys.stdin:
        if not line.strip():
            continue
        records.append(line.rstrip("\\n").split(","))
    return records
"""


def coding_turn():
    return [
        Message.system("You are a coding assistant."),
        Message.user("Please fix the bug in   parser.py\nthanks"),
        Message.assistant("Looking.", [call("c1", "read_file", path="src/parser.py")]),
        Message.tool(ToolResult("c1", "read_file", PARSER_PY)),
        Message.assistant(
            None,
            [call("c2", "edit_file", path="src/parser.py", old="x", new="y"), call("c3", "test")],
        ),
        Message.tool(
            [
                ToolResult("c3", "test", "Error: 2 failed\ndetails"),
                ToolResult("c2", "edit_file", ""),
            ]
        ),
        Message.assistant("Fixed the parser; 2 tests still fail."),
    ]


EXPECTED = """\
Summary of turns 1-1 (extracted, no model):
User requests:
- T1: Please fix the bug in parser.py thanks
Tool calls:
- T1: read_file(path=src/parser.py) → ok: def parse():
- T1: edit_file(path=src/parser.py, old=x, new=y) → ok
- T1: test() → error: Error: 2 failed
Errors:
- T1: test: Error: 2 failed details
Conclusions:
- T1: Fixed the parser; 2 tests still fail.
Files modified:
- src/parser.py"""


def test_the_summary_turn_holds_fixed_sections(service):
    sid = service.create().id
    add(service, sid, *coding_turn(), *turns(2))

    result = compact(service, sid, ExtractiveSummarizer())

    shadow, summary = result.summary
    assert shadow == Message.user(DEFAULT_SHADOW_PROMPT)
    assert summary.text == EXPECTED
    assert summary.metadata[FILES_METADATA_KEY] == {"read": [], "modified": ["src/parser.py"]}
    record = summary.metadata[EXTRACT_METADATA_KEY]
    assert record["turns"] == 1 and record["requests"] == [
        [1, "Please fix the bug in parser.py thanks"]
    ]
    stored = service.events(sid)[-1]
    assert stored.synthetic and stored.message == summary  # metadata survives the store
    view = service.view_messages(sid)
    assert [m.role for m in view] == ["system", "user", "assistant", "user", "assistant"]
    check_messages(view)  # the view rules hold


def test_the_same_events_give_the_same_summary(service):
    texts = []
    for _ in range(3):
        sid = service.create().id
        add(service, sid, *coding_turn(), *turns(2))
        texts.append(compact(service, sid, ExtractiveSummarizer()).summary)
    assert texts[0] == texts[1] == texts[2]


def test_an_unanswered_call_is_listed_without_a_result_and_its_file_is_not():
    summary = summarize(
        [
            Message.user("write it"),
            Message.assistant("ok", [call("c1", "write_file", path="never.py", content="x")]),
        ]
    )
    assert "- T1: write_file(path=never.py, content=x) → no result" in summary.text
    assert "never.py" not in summary.text.split("Conclusions:")[1]
    assert FILES_METADATA_KEY not in summary.metadata


def test_long_text_and_arguments_are_cut():
    long = "word " * 100
    args = {f"k{i}": "v" * 100 for i in range(6)}
    summary = summarize(
        [
            Message.user(long),
            Message.assistant(None, [ToolCall("c", "tool", json.dumps(args))]),
            Message.tool(ToolResult("c", "tool", "fine")),
            Message.assistant(long),
        ],
        ExtractiveSummarizer(max_tokens=5000, entry_chars=80),
    )
    for line in summary.text.splitlines():
        assert len(line) <= len("- T1: ") + 80
    assert "k0=" + "v" * 59 + "…" in summary.text


def test_a_prior_summary_of_another_summarizer_becomes_an_earlier_entry(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    compact(service, sid, ChatModelSummarizer(ScriptedChatModel(["The user asked about X."])))
    add(service, sid, *turns(3))

    result = compact(service, sid, ExtractiveSummarizer())

    text = result.summary[-1].text
    assert text.startswith("Summary of turns 1-1 (")
    earlier = "Earlier summary:\n- The user asked about X.\nUser requests:\n"
    assert f"{earlier}- T1: {question(2)}" in text


def test_the_summary_builds_on_the_prior_one_over_many_passes(service):
    sid = service.create().id
    add(service, sid, *coding_turn(), *turns(2))
    summarizer = ExtractiveSummarizer(max_tokens=10_000)
    compact(service, sid, summarizer)
    for n in range(3, 13):
        add(service, sid, *turns(n))
        compact(service, sid, summarizer)

    view = service.view(sid)
    summary = view[2].message  # system prompt, shadow prompt, summary, turn 12
    assert summary.text.startswith("Summary of turns 1-11 (")
    requests = summary.text.split("User requests:\n")[1].split("\nTool calls:")[0]
    assert requests.splitlines() == [
        "- T1: Please fix the bug in parser.py thanks",
        *(f"- T{n}: {question(n)}" for n in range(2, 12)),
    ]
    assert "- T11: " + answer(11)[:150] in summary.text  # cut at 200 characters
    assert summary.metadata[FILES_METADATA_KEY]["modified"] == ["src/parser.py"]
    assert summary.text.endswith("Files modified:\n- src/parser.py")
    assert [e.message.text for e in view[3:]] == [question(12), answer(12)]


def test_a_small_cap_keeps_the_newest_entries_on_every_pass(service):
    sid = service.create().id
    cap = 400
    summarizer = ExtractiveSummarizer(max_tokens=cap)
    add(service, sid, *coding_turn(), *turns(2))
    for n in range(3, 15):
        compact(service, sid, summarizer)
        summary = service.view(sid)[2].message
        assert turn_tokens(CharCounter(), DEFAULT_SHADOW_PROMPT, summary.text) <= cap
        assert f"- T{n - 2}: {question(n - 2)}" in summary.text or n == 3
        add(service, sid, *turns(n))
    assert "older entries left out to fit the token cap" in summary.text
    assert "T1:" not in summary.text  # the oldest went first
    # the files never leave: the metadata and the text keep them
    assert summary.metadata[FILES_METADATA_KEY]["modified"] == ["src/parser.py"]
    assert "- src/parser.py" in summary.text


def test_files_beyond_the_cap_are_counted_and_kept_in_the_metadata():
    messages = [Message.user("read them all")]
    for i in range(40):
        messages += [
            Message.assistant(None, [call(f"c{i}", "read_file", path=f"dir/file{i:02}.py")]),
            Message.tool(ToolResult(f"c{i}", "read_file", "x")),
        ]
    summary = summarize(messages, ExtractiveSummarizer(max_tokens=300))
    assert turn_tokens(CharCounter(), DEFAULT_SHADOW_PROMPT, summary.text) <= 300
    assert "more" in summary.text.splitlines()[-1]
    assert len(summary.metadata[FILES_METADATA_KEY]["read"]) == 40


def test_a_cap_that_cannot_hold_the_headings_is_invalid_input(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    log = service.events(sid)
    with pytest.raises(InvalidInput, match="max_tokens=50 cannot hold"):
        compact(service, sid, ExtractiveSummarizer(max_tokens=50))
    assert service.events(sid) == log


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0},
        {"max_tokens": None},
        {"max_tokens": 2.5},
        {"shadow_prompt": " "},
        {"shadow_prompt": None},
        {"entry_chars": 5},
        {"entry_chars": True},
        {"file_operations": "read_file"},
        {"is_error": ...},
    ],
)
def test_arguments_are_checked_when_built(kwargs):
    with pytest.raises(InvalidInput):
        ExtractiveSummarizer(**kwargs)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("Error: no such file", True),
        ("  traceback (most recent call last)", True),
        ("FAILED: 3 tests", True),
        ('{"error": "denied"}', True),
        ('{"is_error": true, "x": 1}', True),
        ('{"error": null, "data": 1}', False),
        ("{not json", False),
        ("no errors found", False),
        ("errors.py", False),
    ],
)
def test_looks_like_error(content, error):
    assert looks_like_error(ToolResult("c", "t", content)) is error


def test_it_is_exported():
    assert turnlog.ExtractiveSummarizer is turnlog.compaction.ExtractiveSummarizer
    assert "ExtractiveSummarizer" in turnlog.__all__
    assert "FileOperations" in turnlog.__all__ and "FilesTouched" in turnlog.__all__


# -- the cap, as a property -------------------------------------------------------------------


def summarize(messages, summarizer=None, prior=(), counter=None):
    session = Session("s", utc_now())
    covered = tuple(SessionEvent.for_message("s", m) for m in messages)
    request = SummaryRequest(session, tuple(prior), covered, (), counter or CharCounter())
    shadow, summary = (summarizer or ExtractiveSummarizer(max_tokens=5000))(request)
    assert shadow.role == "user" and summary.role == "assistant"
    return summary


words = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)


@st.composite
def conversation(draw):
    messages = []
    for t in range(draw(st.integers(1, 6))):
        messages.append(Message.user(draw(words)))
        for c in range(draw(st.integers(0, 3))):
            cid = f"c{t}_{c}"
            name = draw(st.sampled_from(["read_file", "write_file", "search", "apply_patch"]))
            messages.append(Message.assistant(None, [call(cid, name, path=draw(words))]))
            if draw(st.booleans()):
                messages.append(Message.tool(ToolResult(cid, name, draw(words))))
        if draw(st.booleans()):
            messages.append(Message.assistant(draw(words)))
    return messages


@settings(max_examples=120, deadline=None)
@given(
    passes=st.lists(conversation(), min_size=1, max_size=5),
    cap=st.integers(250, 1500),
    bytes_counter=st.booleans(),
)
def test_property_every_pass_fits_the_cap_and_is_deterministic(passes, cap, bytes_counter):
    counter = ByteEstimateCounter() if bytes_counter else CharCounter()
    summarizer = ExtractiveSummarizer(max_tokens=cap)
    prior = ()
    for messages in passes:
        summary = summarize(messages, summarizer, prior, counter)
        assert turn_tokens(counter, DEFAULT_SHADOW_PROMPT, summary.text) <= cap
        again = summarize(messages, summarizer, prior, counter)
        assert again == summary
        prior = (
            SessionEvent.for_message("s", Message.user(DEFAULT_SHADOW_PROMPT), synthetic=True),
            SessionEvent.for_message("s", summary, synthetic=True),
        )


# -- the docs stay true ---------------------------------------------------------------------

DOCS = Path(__file__).parent.parent / "docs" / "compaction.md"


def test_the_docs_example_is_what_the_summarizer_writes():
    text = DOCS.read_text()
    block = text.split("It writes fixed sections, one line per entry")[1].split("```")[1]
    assert block.strip("\n") == EXPECTED


def test_the_docs_table_lists_the_default_tools_and_arguments():
    text = DOCS.read_text().split("### The files read and modified")[1].split("###")[0]
    rows = [
        set(re.findall(r"`([^`]+)`", line.split("|")[1]))
        for line in text.splitlines()
        if line.startswith("| `")
    ]
    assert rows == [DEFAULT_READ_TOOLS, DEFAULT_MODIFY_TOOLS, DEFAULT_PATCH_TOOLS]
    arguments = text.split("The path arguments are")[1].split(": every one present")[0]
    assert re.findall(r"`([^`]+)`", arguments) == list(DEFAULT_PATH_ARGUMENTS)


def test_window_plus_cap_bounds_the_view_through_the_service(service):
    counter = CharCounter()
    window, cap = 600, 500
    sid = service.create().id
    summarizer = ExtractiveSummarizer(max_tokens=cap)
    passes = 0
    for n in range(1, 30):
        add(service, sid, *coding_turn()[1:], *turns(n))
        result = compact(service, sid, summarizer, CompactionWindow.token_budget(window), counter)
        view = service.view(sid)
        passes += not result.unchanged
        assert sum(counter.count(event_text(e)) for e in view) <= window + cap
    assert passes >= 25
    assert view[0].synthetic
    assert turn_tokens(counter, DEFAULT_SHADOW_PROMPT, view[1].message.text) <= cap


def test_the_cap_holds_with_the_default_o200k_counter():
    counter = O200kCounter()
    messages = []
    for n in range(60):
        messages += coding_turn()[1:]
        messages.append(Message.user(f"more {n}: " + "détails " * n))
    summary = summarize(messages, ExtractiveSummarizer(max_tokens=700), counter=counter)
    assert 600 < turn_tokens(counter, DEFAULT_SHADOW_PROMPT, summary.text) <= 700


# -- content parts: the attachments of covered events are named (issue 25 item 4) -------------


def test_the_attachments_of_covered_turns_are_listed_and_reasoning_is_not(service):
    import hashlib

    from turnlog import ImagePart, ReasoningPart, TextPart

    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 5_000  # the bytes need not decode to be named
    jpeg = b"\xff\xd8" + b"\1" * 48_211  # large: the store keeps it apart, the part by its ref
    ref = "sha256:" + hashlib.sha256(jpeg).hexdigest()
    sid = service.create().id
    shot = ToolResult(
        "c1", "screenshot", "", parts=(TextPart("the page"), ImagePart("image/png", data=png))
    )
    add(
        service,
        sid,
        Message.user(
            "What is in this picture?",
            ImagePart("image/jpeg", data=jpeg, filename="cat.jpg"),
        ),
        Message.assistant(
            parts=[ReasoningPart("anthropic", "secret thoughts", signature="sig")],
            tool_calls=[call("c1", "screenshot")],
        ),
        Message.tool(shot),
        Message.assistant(answer(1)),
        *turns(2),
    )

    result = compact(service, sid, ExtractiveSummarizer())

    summary = result.summary[1].text
    attachments = summary.split("Attachments:\n")[1].split("\n")[:2]
    assert attachments == [
        f"- T1: [image: image/jpeg, cat.jpg, 48,213 bytes, {ref[:19]}]",
        "- T1: [image: image/png, 5,008 bytes]",
    ]
    assert "secret thoughts" not in summary and "reasoning" not in summary
    record = result.summary[1].metadata[EXTRACT_METADATA_KEY]
    assert [e[1] for e in record["attachments"]] == [a[len("- T1: ") :] for a in attachments]
    # the next pass carries them forward from the record
    add(service, sid, *turns(3))
    again = compact(service, sid, ExtractiveSummarizer())
    assert f"[image: image/jpeg, cat.jpg, 48,213 bytes, {ref[:19]}]" in again.summary[1].text
