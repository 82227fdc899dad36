"""scripts/async_to_sync.py: names renamed through its explicit map only, articles that follow
the rename, and the hand-written sync branch of an `if True:  # ASYNC` block copied as written."""

import importlib.util
from pathlib import Path

import libcst as cst
import pytest

_PATH = Path(__file__).resolve().parent.parent / "scripts" / "async_to_sync.py"
_SPEC = importlib.util.spec_from_file_location("async_to_sync", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
generator = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(generator)


def transform(code):
    return cst.parse_module(code).visit(generator.AsyncToSync()).code


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("service must be an AsyncSessionService", "service must be a SessionService"),
        ("tool_search must be an AsyncToolSearch", "tool_search must be a ToolSearch"),
        ("An AsyncSessionChat runs turns", "A SessionChat runs turns"),
        ("an `AsyncSessionService`", "a `SessionService`"),
        ("an AsyncOpenAIChatModel", "an OpenAIChatModel"),
        (
            "a AsyncOpenAIChatModel or an AsyncAnthropicChatModel",
            "an OpenAIChatModel or an AnthropicChatModel",
        ),
        ("see run_tool_async and aclose()", "see run_tool and close()"),
        ("an asyncio model", "an asyncio model"),
        ("await chat.send(...)", "chat.send(...)"),
    ],
)
def test_text_is_renamed_through_the_map_with_its_article(text, expected):
    assert generator.rename_text(text) == expected


@pytest.mark.parametrize("name", ["AsyncNewThing", "frobnicate_async"])
def test_an_async_looking_name_missing_from_the_map_stops_the_script(name):
    with pytest.raises(SystemExit, match="add it to RENAMES"):
        generator.rename(name)
    with pytest.raises(SystemExit, match="add it to RENAMES"):
        generator.rename_text(f"see {name}")


def test_other_names_are_left_alone():
    assert generator.rename("Asynchronous") == "Asynchronous"
    assert generator.rename("asyncio") == "asyncio"


def test_the_sync_branch_of_an_async_block_is_copied_as_written():
    code = transform(
        "async def f(model):\n"
        "    if True:  # ASYNC\n"
        '        raise ValueError("a blocking model goes with SessionChat")\n'
        "    else:\n"
        '        raise ValueError("an asyncio model goes with AsyncSessionChat")  # AsyncX\n'
    )
    assert code == (
        "def f(model):\n"
        '    raise ValueError("an asyncio model goes with AsyncSessionChat")  # AsyncX\n'
    )
