"""FileOperations: the files that answered tool calls read and modified.

The property test builds random tool-calling conversations from a list of operations whose
ground truth is known before any event exists (which paths each operation reads or modifies,
whether it gets a result): that list is the oracle, not the extractor's matching of results to
calls.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog import (
    FileOperations,
    FilesTouched,
    InvalidInput,
    Message,
    SessionEvent,
    ToolCall,
    ToolResult,
)
from turnlog.compaction.files import (
    FILES_METADATA_KEY,
    files_metadata,
    files_section,
    patch_paths,
    prior_files,
)

SID = "s"


def events(*messages):
    return [SessionEvent.for_message(SID, m) for m in messages]


def call_and_result(call_id, name, args, result="done"):
    arguments = args if isinstance(args, str) else json.dumps(args)
    return [
        Message.assistant(None, [ToolCall(call_id, name, arguments)]),
        Message.tool(ToolResult(call_id, name, result)),
    ]


def run(*pairs, extractor=None):
    messages = [Message.user("go")]
    for pair in pairs:
        messages += pair
    return (extractor or FileOperations())(events(*messages))


def test_the_default_tools_read_and_modify():
    found = run(
        call_and_result("1", "read_file", {"path": "src/a.py"}),
        call_and_result("2", "write_file", {"path": "out/b.txt", "content": "x"}),
        call_and_result("3", "edit_file", {"file_path": "src/c.py", "old": "a", "new": "b"}),
        call_and_result("4", "read_multiple_files", {"paths": ["d.md", "e.md"]}),
        call_and_result("5", "move_file", {"source": "f.py", "destination": "g.py"}),
        call_and_result("6", "Read", {"file_path": "/abs/h.py"}),
    )
    assert found == FilesTouched(
        read=("/abs/h.py", "d.md", "e.md", "src/a.py"),
        modified=("f.py", "g.py", "out/b.txt", "src/c.py"),
    )
    assert found.read == found[0] and found.modified == found[1]  # a (read, modified) pair


def test_apply_patch_modifies_the_files_its_patch_names():
    envelope = (
        "*** Begin Patch\n*** Update File: src/app.py\n@@\n-old\n+new\n*** Move to: src/main.py\n"
        "*** Add File: docs/new.md\n+hello\n*** Delete File: old.txt\n*** End Patch"
    )
    unified = (
        "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n--- a comment removed\n+y\n"
        "--- a/gone.py\n+++ /dev/null\n--- /dev/null\n+++ b/born.py\n"
    )
    found = run(
        call_and_result("1", "apply_patch", {"input": envelope}),
        call_and_result("2", "apply_patch", {"patch": unified}),
    )
    assert found.modified == (
        "born.py",
        "docs/new.md",
        "gone.py",
        "old.txt",
        "src/app.py",
        "src/main.py",
        "x.py",
    )
    assert found.read == ()
    assert patch_paths("no patch here\n+++ b/lonely.py") == []


def test_a_call_counts_only_when_its_result_is_among_the_events():
    unanswered = Message.assistant(None, [ToolCall("9", "write_file", '{"path": "never.py"}')])
    found = run(call_and_result("1", "read_file", {"path": "a.py"}), [unanswered])
    assert found == FilesTouched(read=("a.py",))
    # the result alone (its call cut away) counts nothing either
    only_result = events(Message.tool(ToolResult("1", "read_file", "x")))
    assert FileOperations()(only_result) == FilesTouched()


def test_a_failed_result_counts_nothing():
    failed = [
        Message.assistant(None, [ToolCall("2", "write_file", '{"path": "locked.py"}')]),
        Message.tool(ToolResult("2", "write_file", "permission denied", is_error=True)),
    ]
    found = run(call_and_result("1", "read_file", {"path": "a.py"}), failed)
    assert found == FilesTouched(read=("a.py",))


def test_a_reused_call_id_is_answered_by_its_own_result_only():
    first = Message.assistant(None, [ToolCall("c", "write_file", '{"path": "first.py"}')])
    answer = Message.tool(ToolResult("c", "write_file", "ok"))
    second = Message.assistant(None, [ToolCall("c", "read_file", '{"path": "second.py"}')])
    found = FileOperations()(
        events(Message.user("go"), first, answer, Message.user("more"), second)
    )
    assert found == FilesTouched(modified=("first.py",))


def test_paths_are_deduplicated_and_a_modified_file_is_not_listed_as_read():
    found = run(
        call_and_result("1", "read_file", {"path": "a.py"}),
        call_and_result("2", "read_file", {"path": " a.py "}),
        call_and_result("3", "edit_file", {"path": "a.py"}),
        call_and_result("4", "read_file", {"path": "b.py"}),
        call_and_result("5", "read_file", {"path": "b.py"}),
    )
    assert found == FilesTouched(read=("b.py",), modified=("a.py",))


@pytest.mark.parametrize(
    "arguments", ["not json", "[1, 2]", '"a.py"', '{"path": 3}', '{"path": ""}', '{"other": "a"}']
)
def test_arguments_without_a_usable_path_count_nothing(arguments):
    assert run(call_and_result("1", "read_file", arguments)) == FilesTouched()


def test_shell_and_unknown_tools_count_nothing():
    found = run(
        call_and_result("1", "bash", {"command": "sed -i s/a/b/ x.py", "path": "x.py"}),
        call_and_result("2", "search", {"path": "src"}),
    )
    assert found == FilesTouched()


def test_the_tool_names_and_path_arguments_are_configurable():
    extractor = FileOperations(
        read_tools={"fetch"}, modify_tools={"save"}, patch_tools=(), path_arguments=["target"]
    )
    found = run(
        call_and_result("1", "fetch", {"target": "a", "path": "ignored"}),
        call_and_result("2", "save", {"target": ["b", "c", 7]}),
        call_and_result("3", "read_file", {"path": "default-tool-is-off"}),
        call_and_result("4", "apply_patch", {"input": "*** Update File: off.py"}),
        extractor=extractor,
    )
    assert found == FilesTouched(read=("a",), modified=("b", "c"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"read_tools": "read_file"},
        {"modify_tools": None},
        {"patch_tools": [""]},
        {"path_arguments": "path"},
        {"path_arguments": [1]},
        {"patch_arguments": {"input"}},
    ],
)
def test_a_configuration_that_is_not_a_collection_of_names_is_refused(kwargs):
    with pytest.raises(InvalidInput):
        FileOperations(**kwargs)


def test_metadata_round_trip_and_merge():
    files = FilesTouched(read=("a", "b"), modified=("c",))
    metadata = files_metadata(files)
    assert metadata == {FILES_METADATA_KEY: {"read": ["a", "b"], "modified": ["c"]}}
    summary = SessionEvent.for_message(SID, Message("assistant", "s", metadata=metadata))
    assert prior_files([summary]) == files
    assert files.merged(FilesTouched(read=("c", "d"), modified=("b",))) == FilesTouched(
        read=("a", "d"), modified=("b", "c")
    )
    assert files_metadata(FilesTouched()) == {}
    broken = Message("assistant", "s", metadata={FILES_METADATA_KEY: {"read": "a", "modified": 3}})
    assert prior_files([SessionEvent.for_message(SID, broken)]) == FilesTouched()


def test_the_files_section_lists_modified_then_read_and_can_be_shortened():
    files = FilesTouched(read=("r1", "r2"), modified=("m1",))
    assert files_section(files) == "Files modified:\n- m1\nFiles read:\n- r1\n- r2"
    assert files_section(files, 2) == "Files modified:\n- m1\nFiles read:\n- r1\n- ... and 1 more"
    assert files_section(FilesTouched()) == ""


# -- the property ---------------------------------------------------------------------------

PATHS = ["a.py", "b.py", "src/c.py", "docs/d.md", "e.txt"]
READERS = ["read_file", "read_text_file", "view_file", "Read"]
WRITERS = ["write_file", "edit_file", "create_file", "delete_file", "Edit"]

operation = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["read", "modify", "move", "patch", "many", "noise", "broken"]),
        "tool": st.integers(0, 99),
        "paths": st.lists(st.sampled_from(PATHS), min_size=1, max_size=3),
        "answered": st.booleans(),
    }
)


def build(op, call_id):
    """(the call, the paths it reads, the paths it modifies) for one operation."""
    kind, paths = op["kind"], op["paths"]
    if kind == "read":
        name = READERS[op["tool"] % len(READERS)]
        return ToolCall(call_id, name, json.dumps({"path": paths[0]})), {paths[0]}, set()
    if kind == "modify":
        name = WRITERS[op["tool"] % len(WRITERS)]
        return ToolCall(call_id, name, json.dumps({"file_path": paths[0]})), set(), {paths[0]}
    if kind == "move":
        args = {"source": paths[0], "destination": paths[-1]}
        return ToolCall(call_id, "move_file", json.dumps(args)), set(), {paths[0], paths[-1]}
    if kind == "patch":
        text = "*** Begin Patch\n" + "".join(f"*** Update File: {p}\n@@\n+x\n" for p in paths)
        return ToolCall(call_id, "apply_patch", json.dumps({"input": text})), set(), set(paths)
    if kind == "many":
        args = {"paths": paths}
        return ToolCall(call_id, "read_multiple_files", json.dumps(args)), set(paths), set()
    if kind == "noise":
        return ToolCall(call_id, "bash", json.dumps({"command": f"cat {paths[0]}"})), set(), set()
    return ToolCall(call_id, "write_file", "{not json"), set(), set()


@settings(max_examples=300, deadline=None)
@given(
    rounds=st.lists(st.lists(operation, min_size=1, max_size=4), min_size=1, max_size=6),
    reuse_ids=st.booleans(),
    shuffle=st.randoms(use_true_random=False),
)
def test_property_the_extractor_agrees_with_the_operations(rounds, reuse_ids, shuffle):
    messages = [Message.user("start")]
    read, modified = set(), set()
    for r, ops in enumerate(rounds):
        calls, results = [], []
        for i, op in enumerate(ops):
            # providers that number calls per message reuse ids across rounds
            call_id = f"call_{i}" if reuse_ids else f"call_{r}_{i}"
            call, reads, modifies = build(op, call_id)
            calls.append(call)
            if op["answered"]:
                results.append(ToolResult(call_id, call.name, "ok"))
                read |= reads
                modified |= modifies
        messages.append(Message.assistant(None, calls))
        shuffle.shuffle(results)
        if results:
            messages.append(Message.tool(results))
        if r % 2:
            messages.append(Message.assistant("thinking"))
            messages.append(Message.user(f"next {r}"))

    found = FileOperations()(events(*messages))

    assert found.modified == tuple(sorted(modified))
    assert found.read == tuple(sorted(read - modified))
    assert len(set(found.read)) == len(found.read)
    # the same events give the same answer
    assert FileOperations()(events(*messages)) == found
