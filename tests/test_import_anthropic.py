"""`turnlog import` of Anthropic Messages transcripts: every block kind read back into its part
(hand-written transcripts, hand-built oracles), the round trip through `turnlog export --format
anthropic` both ways, how the format is told apart from OpenAI's, and one-line errors. Real
SQLite files, the real CLI."""

from __future__ import annotations

import base64
import json

import pytest

from turnlog import (
    FilePart,
    ImagePart,
    Message,
    ProviderPart,
    ReasoningPart,
    SessionService,
    SqliteStore,
    TextPart,
    ToolCall,
    ToolResult,
)
from turnlog.cli import main


def _png() -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (3, 2), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


PNG = _png()
PDF = b"%PDF-1.4 a tiny document\n%%EOF\n"
SIGNATURE = "EqQBCkYIBxgCKkB+signature/with=padding=="
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
SEARCH = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [{"type": "web_search_result", "url": "https://example.com", "title": "Ex"}],
}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def stored(db, session_id="s"):
    with SessionService(SqliteStore(db)) as svc:
        return svc.get(session_id), [e.message for e in svc.events(session_id)]


# A transcript as the Messages API takes it, written by hand; `export --format anthropic
# --log` of what it imports is this very document.
TRANSCRIPT = {
    "system": "You are a careful analyst.",
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare the chart with the report."},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)},
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.com/c.gif"}},
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)},
                    "title": "report.pdf",
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "a, b\n1, 2\n"},
                    "title": "table.csv",
                },
                {"type": "document", "source": {"type": "url", "url": "https://example.com/r.pdf"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "The chart may be stale.", "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": REDACTED},
                {"type": "text", "text": "Let me zoom in."},
                {"type": "tool_use", "id": "toolu_1", "name": "zoom", "input": {"x": 10, "y": 2}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "zoomed:"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": b64(PNG),
                            },
                        },
                    ],
                },
                {"type": "text", "text": "And the totals?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Search for the totals.", "signature": "sig2"},
                SEARCH,
                {"type": "text", "text": "The totals match."},
            ],
        },
    ],
}

EXPECTED = [
    Message.system("You are a careful analyst."),
    Message.user(
        "Compare the chart with the report.",
        ImagePart("image/png", data=PNG),
        ImagePart("image/gif", url="https://example.com/c.gif"),
        FilePart("application/pdf", data=PDF, name="report.pdf"),
        FilePart("text/plain", data=b"a, b\n1, 2\n", name="table.csv"),
        FilePart("application/pdf", url="https://example.com/r.pdf"),
    ),
    Message.assistant(
        parts=[
            ReasoningPart("anthropic", "The chart may be stale.", signature=SIGNATURE),
            ReasoningPart("anthropic", encrypted=REDACTED, redacted=True),
            "Let me zoom in.",
        ],
        tool_calls=[ToolCall("toolu_1", "zoom", '{"x":10,"y":2}')],
    ),
    Message.tool(
        ToolResult(
            "toolu_1", "zoom", "", parts=(TextPart("zoomed:"), ImagePart("image/png", data=PNG))
        )
    ),
    Message.user("And the totals?"),
    Message.assistant(
        parts=[
            ReasoningPart("anthropic", "Search for the totals.", signature="sig2"),
            ProviderPart("anthropic", "web_search_tool_result", SEARCH),
            "The totals match.",
        ]
    ),
]


def test_every_block_kind_imports_as_its_part(tmp_path, capsys):
    path = tmp_path / "claude.json"
    path.write_text(json.dumps(TRANSCRIPT), encoding="utf-8")
    db = tmp_path / "a.db"
    code, out, err = run(capsys, "--db", db, "import", path, "--session", "s")
    assert code == 0, err
    assert out == "imported 6 events into session s (anthropic)\n"
    session, messages = stored(db)
    assert messages == EXPECTED
    assert session.metadata == {"imported_from": "claude.json", "format": "anthropic"}
    thinking = messages[2].parts[0]
    assert type(thinking) is ReasoningPart and thinking.signature == SIGNATURE  # verbatim


def test_an_imported_transcript_exports_back_as_the_same_document(tmp_path, capsys):
    path = tmp_path / "claude.json"
    path.write_text(json.dumps(TRANSCRIPT), encoding="utf-8")
    db = tmp_path / "a.db"
    assert run(capsys, "--db", db, "import", path, "--session", "s")[0] == 0
    code, out, err = run(capsys, "--db", db, "export", "s", "--log", "--format", "anthropic")
    assert code == 0, err
    assert json.loads(out) == TRANSCRIPT


def test_stored_parts_survive_an_anthropic_export_and_import(tmp_path, capsys):
    """The other direction: messages stored first (the oracle), exported, imported back."""
    sent = [
        *EXPECTED[:4],
        Message.assistant(
            parts=[
                ReasoningPart("anthropic", "", signature="sig3"),
                ProviderPart(
                    "anthropic", "server_tool_use", {"type": "server_tool_use", "id": "x"}
                ),
                "Done.",
            ]
        ),
        Message.user("Thanks."),
        Message.assistant("You're welcome."),
    ]
    db = tmp_path / "a.db"
    with SessionService(SqliteStore(db)) as svc:
        svc.create("s")
        for m in sent:
            svc.append_message("s", m)
    out = tmp_path / "s.json"
    args = ("--db", db, "export", "s", "--log", "--format", "anthropic", "-o", out)
    assert run(capsys, *args)[0] == 0
    other = tmp_path / "b.db"
    code, _, err = run(capsys, "--db", other, "import", out, "--session", "s")
    assert code == 0, err
    assert stored(other)[1] == sent


def test_a_list_or_jsonl_of_anthropic_messages_imports_without_a_system(tmp_path, capsys):
    turns = TRANSCRIPT["messages"][:3]
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(turns), encoding="utf-8")
    lines = tmp_path / "lines.jsonl"
    lines.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    db = tmp_path / "a.db"
    for path in (listed, lines):
        code, out, err = run(capsys, "--db", db, "import", path)
        assert code == 0, err
        assert out.endswith("(anthropic)\n")
        assert stored(db, path.stem)[1] == EXPECTED[1:5]


def test_text_blocks_of_one_turn_stay_one_message_and_cache_control_is_dropped(tmp_path, capsys):
    doc = {
        "system": [
            {"type": "text", "text": "Rule one."},
            {"type": "text", "text": "Rule two.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<doc>long</doc>"},
                    {"type": "text", "text": "Summarize.", "cache_control": {"type": "ephemeral"}},
                ],
            },
            {"role": "assistant", "content": "Short."},
        ],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    db = tmp_path / "a.db"
    assert run(capsys, "--db", db, "import", path, "--session", "s")[0] == 0
    assert stored(db)[1] == [
        Message.system("Rule one.\n\nRule two."),
        Message.user("<doc>long</doc>\nSummarize."),
        Message.assistant("Short."),
    ]


def test_openai_files_still_import_as_openai(tmp_path, capsys):
    """Text alone, or any OpenAI-only field, keeps a file OpenAI's; a top-level "system" makes
    it Anthropic's even with text alone (what `export --format anthropic` writes)."""
    db = tmp_path / "a.db"
    cases = {
        "plain": ({"messages": [{"role": "user", "content": "hi"}]}, "openai"),
        "with system": (
            {"system": None, "messages": [{"role": "user", "content": "hi"}]}, "anthropic"
        ),
        "tool role": (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "c", "content": "ok"},
            ],
            "openai",
        ),
    }  # fmt: skip
    for name, (doc, kind) in cases.items():
        path = tmp_path / f"{name.replace(' ', '-')}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        code, out, err = run(capsys, "--db", db, "import", path)
        assert code == 0, err
        assert out.endswith(f"({kind})\n"), name


USER_ASKS = {"role": "user", "content": "q"}
CALL_T = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
}


def image(media_type: str, data: str) -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def user(*blocks: dict) -> dict:
    return {"role": "user", "content": list(blocks)}


BAD = {
    "thinking in a user turn": (
        [user({"type": "thinking", "thinking": "x", "signature": "s"})],
        "entry 1: content block 1 (thinking) is reasoning in a user turn",
    ),
    "a result for no call": (
        [user({"type": "tool_result", "tool_use_id": "toolu_9"})],
        "entry 1: content block 1: tool_use_id 'toolu_9' answers no earlier tool_use block",
    ),
    "bad base64": (
        [user(image("image/png", "***"))],
        "entry 1: content block 1 has data that is not base64",
    ),
    "an image that is no image": (
        [user(image("text/html", "PGI+"))],
        "entry 1: content block 1 (image) is malformed: an image part media_type",
    ),
    "thinking without signature": (
        [USER_ASKS, {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]}],
        "entry 2: content block 1's thinking block has no valid 'signature'",
    ),
    "a system role": (
        {"system": "s", "messages": [{"role": "system", "content": "x"}]},
        "entry 1: role 'system' in an Anthropic transcript",
    ),
    "tool_use from the user": (
        {"system": None, "messages": [user(CALL_T["content"][0])]},
        "entry 1: content block 1 is a tool_use block in a user turn",
    ),
    "empty content": (
        {"system": None, "messages": [user()]},
        "entry 1: a user turn needs content",
    ),
    "a block without type": (
        {"system": None, "messages": [user({"text": "x"})]},
        'entry 1: content block 1 is not an object with a "type"',
    ),
    "a bad system": (
        {"system": 3, "messages": [USER_ASKS]},
        '"system" must be a string',
    ),
    "a tool result holding reasoning": (
        [USER_ASKS, CALL_T, user({"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "redacted_thinking", "data": "x"}]})],
        "entry 3: content block 1 (tool_result), its block 1 is reasoning",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_transcript_is_one_line_exit_2_and_writes_nothing(case, tmp_path, capsys):
    doc, expected = BAD[case]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    fresh = tmp_path / "fresh.db"
    code, out, err = run(capsys, "--db", fresh, "import", path)
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1, err
    assert str(path) in err and expected in err, err
    assert not fresh.exists()


def test_a_broken_anthropic_transcript_imports_with_allow_broken(tmp_path, capsys):
    """Text before the results in a user turn: the user message comes first, in order, which
    leaves the call unanswered before the next message (refused unless --allow-broken)."""
    failed = {"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": True}
    doc = [USER_ASKS, CALL_T, user({"type": "text", "text": "never mind"}, failed)]
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    db = tmp_path / "a.db"
    code, _, err = run(capsys, "--db", db, "import", path, "--session", "s")
    assert code == 2 and "--allow-broken" in err
    code, _, err = run(capsys, "--db", db, "import", path, "--session", "s", "--allow-broken")
    assert code == 0, err
    assert stored(db)[1] == [
        Message.user("q"),
        Message.assistant(tool_calls=[ToolCall("t", "f", "{}")]),
        Message.user("never mind"),
        Message.tool(ToolResult("t", "f", "boom", is_error=True)),
    ]


def test_an_interleaved_thinking_turn_imports_and_exports_in_its_own_order(tmp_path, capsys):
    interleaved = {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo and Bergen?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Oslo first.", "signature": "s1"},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "weather",
                        "input": {"c": "Oslo"},
                    },
                    {"type": "thinking", "thinking": "Now Bergen.", "signature": "s2"},
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "weather",
                        "input": {"c": "Bergen"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "5 C"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "7 C"},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Cold in both."}]},
        ],
    }
    path = tmp_path / "claude.json"
    path.write_text(json.dumps(interleaved), encoding="utf-8")
    db = tmp_path / "a.db"
    assert run(capsys, "--db", db, "import", path, "--session", "s")[0] == 0
    code, out, err = run(capsys, "--db", db, "export", "s", "--log", "--format", "anthropic")
    assert code == 0, err
    assert json.loads(out) == interleaved  # the thinking between the calls stays between them
