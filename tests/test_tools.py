"""Tools from functions: schemas from signatures and docstrings, running, and what fails."""

import asyncio
import dataclasses
import json
from typing import Literal

import msgspec
import pytest

from turnlog.errors import InvalidInput
from turnlog.events import ToolCall
from turnlog.tools import Tool, as_tools, run_tool, run_tool_async, tool_content


def search_files(pattern: str, limit: int = 10, kind: Literal["file", "dir"] = "file") -> list:
    """Find files by a glob pattern.

    Searches the project tree, newest first.

    Args:
        pattern: a glob, like ``*.py``.
        limit: at most this many
            paths (continued on a second line).
        kind: files or directories.

    Returns:
        The paths.
    """
    return [pattern] * min(limit, 2)


def sphinx_style(city: str, days: int | None = None) -> str:
    """Forecast for a city.

    :param city: the city's name.
    :param days: how many days ahead.
    :returns: the forecast.
    """
    return city


@dataclasses.dataclass
class Point:
    x: float
    y: float


def distance(a: Point, b: Point) -> float:
    """Distance between two points."""
    return ((a.x - b.x) ** 2 + (a.y - b.y) ** 2) ** 0.5


def test_the_schema_comes_from_the_signature_and_the_description_from_the_docstring():
    tool = Tool.from_function(search_files)
    assert tool.name == "search_files"
    assert (
        tool.description
        == "Find files by a glob pattern.\n\nSearches the project tree, newest first."
    )
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "a glob, like ``*.py``."},
            "limit": {
                "type": "integer",
                "default": 10,
                "description": "at most this many paths (continued on a second line).",
            },
            "kind": {
                "enum": ["dir", "file"],
                "default": "file",
                "description": "files or directories.",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    reference = tool.reference
    assert reference.name == "search_files" and reference.parameters == tool.parameters


def test_sphinx_docstrings_and_optional_parameters():
    tool = Tool.from_function(sphinx_style)
    assert tool.description == "Forecast for a city."
    props = tool.parameters["properties"]
    assert props["city"]["description"] == "the city's name."
    assert props["days"]["description"] == "how many days ahead."
    assert props["days"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert tool.parameters["required"] == ["city"]


def test_nested_types_are_defined_under_defs_and_decoded_into_their_type():
    tool = Tool.from_function(distance)
    assert tool.parameters["properties"]["a"] == {"$ref": "#/$defs/Point"}
    assert tool.parameters["$defs"]["Point"]["required"] == ["x", "y"]
    call = ToolCall("c", "distance", json.dumps({"a": {"x": 0, "y": 0}, "b": {"x": 3, "y": 4}}))
    assert run_tool(as_tools([distance]), call).content == "5.0"


def test_name_and_description_can_be_given():
    tool = Tool.from_function(search_files, name="find", description="Find.")
    assert (tool.name, tool.description) == ("find", "Find.")


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (lambda *args: None, "named parameters only"),
        (lambda **kwargs: None, "named parameters only"),
        (len, "named parameters only"),
        ("not a function", "must be a function"),
    ],
)
def test_functions_a_model_cannot_call_by_name_are_refused(function, message):
    with pytest.raises(InvalidInput, match=message):
        Tool.from_function(function)


def test_a_parameter_type_without_a_json_schema_is_refused():
    def f(when: object, sock: asyncio.AbstractEventLoop) -> None:
        """F."""

    with pytest.raises(InvalidInput, match="tool 'f'"):
        Tool.from_function(f)


def test_explicit_definitions_take_the_arguments_as_keywords():
    tool = Tool(
        "add",
        "Add two numbers.",
        {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
        lambda a, b: a + b,
    )
    tools = as_tools([tool])
    assert run_tool(tools, ToolCall("c", "add", '{"a": 1, "b": 2.5}')).content == "3.5"
    bad = run_tool(tools, ToolCall("c", "add", "[1, 2]"))
    assert bad.is_error and "JSON object" in bad.content
    with pytest.raises(InvalidInput, match="type 'object'"):
        Tool("x", "", {"type": "string"}, print)
    with pytest.raises(InvalidInput, match="tool name"):
        Tool("has space", "", {"type": "object"}, print)


def test_arguments_are_checked_before_the_call():
    ran = []

    def f(n: int) -> int:
        """F."""
        ran.append(n)
        return n

    tools = as_tools([f])
    for arguments, expected in [
        ('{"n": "3"}', "Expected `int`, got `str`"),
        ('{"n": 1, "m": 2}', "unknown field"),
        ("{}", "missing required field"),
        ("{not json", "not valid JSON"),
    ]:
        result = run_tool(tools, ToolCall("c", "f", arguments))
        assert result.is_error and expected in result.content, result.content
    assert ran == []
    assert run_tool(tools, ToolCall("c", "f", "")).is_error  # empty arguments mean {}
    assert run_tool(tools, ToolCall("c", "f", ' {"n": 4} ')).content == "4"


def test_async_tools_run_in_both_runners_and_blocking_tools_leave_the_loop_free():
    async def slow(x: int) -> dict:
        """Slow."""
        await asyncio.sleep(0)
        return {"x": x}

    def blocking(x: int) -> str:
        """Blocking."""
        return f"x={x}"

    tools = as_tools([slow, blocking])
    call = ToolCall("c", "slow", '{"x": 2}')
    assert run_tool(tools, call).content == '{"x":2}'
    assert asyncio.run(run_tool_async(tools, call)).content == '{"x":2}'
    other = ToolCall("d", "blocking", '{"x": 3}')

    async def both():
        return await asyncio.gather(run_tool_async(tools, other), run_tool_async(tools, call))

    assert [r.content for r in asyncio.run(both())] == ["x=3", '{"x":2}']


def test_what_a_tool_returns_becomes_text():
    class Opaque:
        def __str__(self):
            return "opaque!"

    class Shape(msgspec.Struct):
        sides: int

    assert tool_content("as is") == "as is"
    assert tool_content({"a": [1, None]}) == '{"a":[1,null]}'
    assert tool_content(Shape(3)) == '{"sides":3}'
    assert tool_content(Point(1, 2)) == '{"x":1,"y":2}'
    assert tool_content(None) == "null"
    assert tool_content(Opaque()) == "opaque!"


def test_a_raising_tool_reports_its_exception_and_base_exceptions_propagate():
    def fails(path: str) -> str:
        """Fails."""
        raise PermissionError(f"denied: {path}")

    def interrupted() -> str:
        """Interrupted."""
        raise KeyboardInterrupt

    tools = as_tools([fails, interrupted])
    result = run_tool(tools, ToolCall("c", "fails", '{"path": "/etc"}'))
    assert result.is_error and result.content == "PermissionError: denied: /etc"
    with pytest.raises(KeyboardInterrupt):
        run_tool(tools, ToolCall("c", "interrupted", "{}"))
