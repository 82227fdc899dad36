"""The text and digests of tools, against plain reference implementations (issue 12, item 1)."""

from __future__ import annotations

import json
import math
import re
import types
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.errors import InvalidInput
from turnlog.toolsearch import ToolReference, words

# -- reference implementations: the rules as the docstrings state them, written plainly -


def ref_name_words(name: str) -> list[str]:
    """Split on non-alphanumerics, then at lower->upper, at an upper run before a capitalized
    word and between letters and digits; each piece, then the compound when it split."""
    out: list[str] = []
    for chunk in re.split(r"[\W_]+", name):
        if not chunk:
            continue
        pieces: list[str] = []
        start = 0
        for i in range(1, len(chunk)):
            prev, cur = chunk[i - 1], chunk[i]
            nxt = chunk[i + 1] if i + 1 < len(chunk) else ""
            if (
                prev.isdigit() != cur.isdigit()
                or (prev.islower() and cur.isupper())
                or (prev.isupper() and cur.isupper() and nxt.islower())
            ):
                pieces.append(chunk[start:i])
                start = i
        pieces.append(chunk[start:])
        for word in [*pieces, chunk] if len(pieces) > 1 else pieces:
            if word.lower() not in out:
                out.append(word.lower())
    return out


CHILD_KEYS = ("items", "prefixItems", "anyOf", "oneOf", "allOf", "additionalProperties")


def ref_schema_text(schema: object) -> str:
    """Titles, descriptions, property names as words and string enum values, in the order of
    each mapping's keys, depth first; stop below 32 levels and at 2,000 parts."""
    parts: list[str] = []

    def is_list(node: object) -> bool:
        return isinstance(node, (list, tuple))

    def walk(node: object, depth: int) -> None:
        if depth > 32 or len(parts) >= 2000:
            return
        if is_list(node):
            for item in node:  # type: ignore[attr-defined]
                walk(item, depth + 1)
            return
        if not isinstance(node, Mapping):
            return
        for key in list(node):
            value = node[key]
            if key in ("title", "description"):
                if isinstance(value, str):
                    parts.append(value)
            elif key == "properties":
                if isinstance(value, Mapping):
                    for prop in list(value):
                        if isinstance(prop, str):
                            parts.append(" ".join(ref_name_words(prop)))
                        walk(value[prop], depth + 1)
            elif key == "enum":
                if is_list(value):
                    parts.extend(v for v in value if isinstance(v, str))
            elif key in CHILD_KEYS:
                walk(value, depth + 1)
            elif key in ("$defs", "definitions") and isinstance(value, Mapping):
                for sub in list(value.values()):
                    walk(sub, depth + 1)

    if isinstance(schema, Mapping):
        walk(schema, 0)
    return "\n".join(parts)


def is_json(value: object) -> bool:
    """Whether the standard library writes `value` as JSON in UTF-8, keys sorted, Mappings as
    objects (what turnlog did before the quick check, so a mix of key types is refused)."""

    def plain(v: object) -> object:
        if isinstance(v, Mapping):
            return dict(v)
        raise TypeError(type(v).__name__)

    try:
        json.dumps(value, sort_keys=True, ensure_ascii=False, default=plain).encode("utf-8")
    except (TypeError, ValueError):
        return False
    return True


# -- strategies --------------------------------------------------------------------------------

NAMES = st.one_of(
    st.sampled_from(
        ["location", "unit", "getWeatherForecast", "HTTPServer_error", "sha256sum", "v2", "ÜberX"]
    ),
    st.text(alphabet="aZ_9.-ü天", max_size=12),
    st.text(max_size=8),
)
KEYS = st.one_of(
    st.sampled_from(
        [
            "title",
            "description",
            "properties",
            "enum",
            "type",
            "default",
            "required",
            "$defs",
            "definitions",
            *CHILD_KEYS,
        ]
    ),
    NAMES,
)
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=6)
)
SCHEMAS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(KEYS, inner, max_size=5),
    ),
    max_leaves=40,
)


# -- name_words and schema_text ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(NAMES)
def test_name_words_match_the_reference_split_cold_and_cached(name):
    words._forget_names()
    assert words.name_words(name) == ref_name_words(name)
    assert words.name_words(name) == ref_name_words(name)  # from the cache now


def test_the_words_of_names_are_kept_for_a_bounded_number_of_names(monkeypatch):
    monkeypatch.setattr(words, "_NAME_CACHE_MAX", 4)
    words._forget_names()
    for i in range(20):
        assert words.name_words(f"getItem{i}") == ["get", "item", str(i), f"getitem{i}"]
        assert words.schema_text({"properties": {f"p{i}Q": {}}}) == f"p {i} q p{i}q"
        assert len(words._name_cache) <= 4 and len(words._property_cache) <= 4
    # The list handed out is a copy: editing it changes nothing kept.
    listed = words.name_words("getItem19")
    listed.append("x")
    assert words.name_words("getItem19") == ["get", "item", "19", "getitem19"]


@settings(max_examples=400, deadline=None)
@given(SCHEMAS, st.booleans())
def test_schema_text_matches_the_reference_walk(schema, cold):
    if cold:
        words._forget_names()
    assert words.schema_text(schema) == ref_schema_text(schema)


def test_schema_text_keeps_the_order_of_a_mappings_keys():
    first = {"properties": {"city": {"enum": ["a"], "description": "d"}}, "title": "T"}
    assert words.schema_text(first) == "city\na\nd\nT"
    second = {"title": "T", "properties": {"city": {"description": "d", "enum": ["a"]}}}
    assert words.schema_text(second) == "T\ncity\nd\na"


def test_schema_text_reads_a_mapping_that_is_not_a_dict():
    inner = types.MappingProxyType({"description": "the city", "type": "string"})
    schema = types.MappingProxyType({"properties": types.MappingProxyType({"cityName": inner})})
    assert words.schema_text(schema) == "city name cityname\nthe city"


# -- the JSON check of a new tool --------------------------------------------------------------

ODD_LEAVES = st.one_of(
    LEAVES,
    st.floats(),  # NaN and infinities: json.dumps writes them
    st.integers(),  # beyond 64 bits too
    st.binary(max_size=3),
    st.complex_numbers(max_magnitude=3),
    st.frozensets(st.integers(0, 3), max_size=2),
    st.sampled_from(["lone \ud800", "\udfff", "fine"]),
)
ODD_VALUES = st.recursive(
    ODD_LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.sets(st.integers(0, 3), max_size=2),
        st.dictionaries(
            st.one_of(st.text(max_size=3), st.integers(0, 3), st.none()), inner, max_size=3
        ),
        st.dictionaries(st.text(max_size=3), inner, max_size=3).map(types.MappingProxyType),
    ),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(max_size=4), ODD_VALUES, max_size=3))
def test_a_new_tool_is_refused_exactly_when_json_cannot_carry_it(parameters):
    tool = ToolReference("t", "x", parameters)
    if is_json(["t", "x", parameters]):
        assert len(words.tool_digest(tool)) == 32
    else:
        with pytest.raises(InvalidInput):
            words.tool_digest(tool)


def one_by_one(tools):
    """What checking `tools` gave before the batch: each tool alone, in order, then its name's
    uniqueness; the digests, or the InvalidInput raised."""
    seen = set()
    digests = []
    try:
        for tool in tools:
            digests.append(words.tool_digest(tool))
            if tool.name in seen:
                raise InvalidInput(f"two tools are named {tool.name!r}: tool names must be unique")
            seen.add(tool.name)
    except InvalidInput as exc:
        return str(exc)
    return digests


BATCH_TOOLS = st.lists(
    st.builds(
        ToolReference,
        st.sampled_from(["a", "b", "c", "d", " ", "lone \ud800"]),
        st.one_of(st.text(max_size=5), st.just("x \udfff"), st.integers(0, 1)),
        st.one_of(
            st.none(),
            st.dictionaries(st.text(max_size=4), ODD_VALUES, max_size=3),
            st.just(types.MappingProxyType({"type": "object"})),
        ),
    ),
    min_size=2,
    max_size=6,
)


@settings(max_examples=500, deadline=None)
@given(BATCH_TOOLS)
def test_a_batch_of_new_tools_is_checked_as_each_tool_alone(tools):
    # check_tools digests the plain new tools of a list together (a few C calls); the odd
    # ones are left to the tool-by-tool path. Same digests, or the same first error.
    def copy(t):
        return ToolReference(t.name, t.description, t.parameters)

    expected = one_by_one([copy(t) for t in tools])
    try:
        got = [t._digest for t in words.check_tools([copy(t) for t in tools])]
    except InvalidInput as exc:
        got = str(exc)
    assert got == expected
    if isinstance(got, list):
        assert all(is_json([t.name, t.description, t.parameters]) for t in tools)


def test_a_batch_refuses_a_lone_surrogate_and_a_set_among_plain_tools():
    plain = [ToolReference(f"t{i}", "x", {"type": "object", "n": i}) for i in range(5)]
    for odd, match in (
        ({"description": "lone \ud800"}, "not valid Unicode"),
        ({"enum": {1, 2}}, "not a JSON schema"),
        ({"enum": {"a": 1, 2: "b"}}, "not a JSON schema"),  # keys json.dumps cannot sort
    ):
        tools = [*plain[:2], ToolReference("odd", "x", odd), *plain[2:]]
        with pytest.raises(InvalidInput, match=match):
            words.check_tools([ToolReference(t.name, t.description, t.parameters) for t in tools])


def test_new_plain_tools_are_checked_in_one_conversion_odd_ones_one_by_one(monkeypatch):
    calls = []
    real = words._plain_json

    def counted(parameters, data):
        calls.append(parameters)
        return real(parameters, data)

    monkeypatch.setattr(words, "_plain_json", counted)
    fresh = [
        ToolReference(f"n{i}", "never seen 7f3a", {"type": "object", "i": i}) for i in range(50)
    ]
    words.check_tools(fresh)
    assert len(calls) == 1 and len(calls[0]) == 50  # the batch, at once
    calls.clear()
    odd = ToolReference("odd", "never seen 7f3a", {"enum": {1: "a"}})  # the slow way accepts
    words.check_tools(
        [ToolReference(f"m{i}", "never seen 7f3a", {"i": i}) for i in range(9)] + [odd]
    )
    assert len(calls) == 1 + 10 + 1  # the batch fails, then each tool, then the odd one again
    assert odd._digest is not None and all(c is not None for c in calls)
    calls.clear()
    # marshal refuses a mapping that is not a dict: that tool goes alone, the others together.
    proxy = ToolReference("proxy", "never seen 7f3a", {"x": types.MappingProxyType({"a": 1})})
    words.check_tools(
        [ToolReference(f"p{i}", "never seen 7f3b", {"i": i}) for i in range(9)] + [proxy]
    )
    assert [len(c) for c in calls] == [9] and proxy._digest is not None


def test_nan_and_integer_keys_pass_the_slow_way_and_sets_do_not():
    for parameters in ({"default": math.nan}, {"enum": {1: "a"}}, {"x": (1, 2)}):
        words.tool_digest(ToolReference("t", "x", parameters))
    with pytest.raises(InvalidInput, match="not a JSON schema"):
        words.tool_digest(ToolReference("t", "x", {"x": [1, {2}]}))


def test_checked_content_is_kept_by_digest_for_a_bounded_number_of_tools(monkeypatch):
    monkeypatch.setattr(words, "_VALIDATED_MAX", 3)
    monkeypatch.setattr(words, "_validated", type(words._validated)())
    tools = [ToolReference(f"t{i}", "x", {"type": "object"}) for i in range(5)]
    digests = [words.tool_digest(t) for t in tools]
    assert list(words._validated) == digests[2:]  # the oldest dropped first

    def refuse(parameters, data):
        raise InvalidInput("checked again")

    monkeypatch.setattr(words, "_plain_json", refuse)
    # New objects equal to the last three are not checked again; the first two are.
    for tool in tools[2:]:
        words.tool_digest(ToolReference(tool.name, tool.description, tool.parameters))
    for tool in tools[:2]:
        with pytest.raises(InvalidInput, match="checked again"):
            words.tool_digest(ToolReference(tool.name, tool.description, tool.parameters))


def test_check_tools_digests_new_tools_so_the_fingerprint_serializes_nothing(monkeypatch):
    tools = [ToolReference("a", "new content 1", {"type": "object"}), ToolReference("b", "2")]
    checked = words.check_tools(tools)
    assert all(t._digest is not None for t in checked)
    monkeypatch.setattr(words, "marshal", types.SimpleNamespace(dumps=None))
    monkeypatch.setattr(words, "_check_tool", None)
    assert len(words.tools_fingerprint(checked, ordered=False)) == 64


def test_the_recent_cache_reads_and_writes_in_batches_least_recent_out_first():
    from turnlog.toolsearch._sets import RecentCache

    cache: RecentCache[str, int] = RecentCache(3)
    cache.put_many([("a", 1), ("b", 2), ("c", 3)])
    assert cache.get_many(["a", "x", "c"]) == [1, None, 3]  # a and c now the most recent
    cache.put_many([("d", 4)])
    assert cache.get_many(["b"]) == [None]  # b was the least recent
    cache.put_many([("e", 5), ("f", 6), ("g", 7), ("h", 8)])
    assert len(cache) == 3 and cache.get_many(["f", "g", "h"]) == [6, 7, 8]
