"""Words for tool search: tool names split into words, query words, and a schema's text.

Pure functions shared by the indexes. Case is folded with `str.lower`, which does not depend
on the process locale.

Scripts written without spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Myanmar)
and Korean, whose words carry their particles ("날씨를" is "날씨" + "를"), are cut into
overlapping pairs of characters, the way Lucene's CJK bigram filter does: "天气预报" is
"天气 气预 预报", so a query "天气" finds it without a dictionary. A combining mark stays with
the letter it follows (Thai vowel and tone marks are not letters of their own).
"""

from __future__ import annotations

import hashlib
import json
import marshal
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from turnlog.errors import InvalidInput
from turnlog.toolsearch.base import ToolReference

__all__ = [
    "STOP_WORDS",
    "check_max_results",
    "check_tools",
    "fold",
    "index_text",
    "name_words",
    "query_words",
    "schema_text",
    "tool_digest",
    "tools_fingerprint",
]

_STOP_WORDS_TEXT: Final = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers him his how i if in into is it its itself just me
more most my no nor not now of off on once only or other our ours out over own same she
should so some such than that the their theirs them then there these they this those
through to too under until up very was we were what when where which while who whom why
will with would you your yours please want need use using
le la les un une des du de au aux et ou où est sont pour par sur dans avec ce cette ces ma mes
qui que quoi je tu il elle nous vous ils elles leur el los las unos unas del al es por para con
en mis su sus lo como qué cómo der das den dem des ein eine einen einem einer und oder ist
sind von zu im auf für ich du er sie wir ihr mein meine bitte gli di da nel della per che
の を に は が で と も へ や か ね よ から まで です ます
"""

STOP_WORDS: Final = frozenset(_STOP_WORDS_TEXT.split())
"""Words dropped from queries: common English words, the articles, pronouns and prepositions
of French, Spanish, German and Italian, and Japanese particles, that say nothing about a tool.
Those that are also English words or units ("die", "mit", "mon", "mi") are kept."""

_SEPARATORS: Final = re.compile(r"[\W_]+")
# Runs of characters from scripts that do not put spaces between words (Korean included, for
# its attached particles), with the combining marks inside those blocks: Thai, Lao, Myanmar,
# Hangul jamo, Khmer, CJK punctuation-free blocks (kana, Han, Hangul syllables, compatibility
# ideographs, half-width katakana) and the supplementary Han planes.
_NO_SPACE_RUN: Final = re.compile(
    "["
    "\u0e01-\u0e4e\u0e80-\u0eff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff"
    "\u3005\u3007\u3041-\u30ff\u3131-\u318e\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
    "]+"
)
_DIACRITICS: Final = re.compile("[\u0300-\u036f]+")


_HIRAGANA: Final = re.compile("([\u3041-\u309f]+)")


def _grams(run: str) -> list[str]:
    """A run of a no-space script as overlapping pairs of characters (a piece of one or two
    characters as itself); a combining mark counts with the character before it. Japanese
    hiragana (particles, verb endings) and the kanji or katakana next to them are cut apart
    first, so "予約を取りたい" gives "予約", "を", "取", "りた", "たい", not "を取"."""
    grams: list[str] = []
    for piece in _HIRAGANA.split(run) if max(run) >= "\u3041" else (run,):
        clusters: list[str] = []
        for ch in piece:
            if clusters and unicodedata.category(ch).startswith("M"):
                clusters[-1] += ch
            else:
                clusters.append(ch)
        if len(clusters) < 3:
            if clusters:
                grams.append("".join(clusters))
        else:
            grams.extend(clusters[i] + clusters[i + 1] for i in range(len(clusters) - 1))
    return grams


def _chunks(text: str) -> list[tuple[str, bool]]:
    """`text` cut into (chunk, is a no-space run) pairs: runs of the no-space scripts, and the
    rest split on everything that is not a letter or digit."""
    if text.isascii():
        return [(c, False) for c in _SEPARATORS.split(text) if c]
    out: list[tuple[str, bool]] = []
    at = 0
    for match in _NO_SPACE_RUN.finditer(text):
        out.extend((c, False) for c in _SEPARATORS.split(text[at : match.start()]) if c)
        out.append((match.group(), True))
        at = match.end()
    out.extend((c, False) for c in _SEPARATORS.split(text[at:]) if c)
    return out


def index_text(text: str) -> str:
    """`text` as an index stores it: runs of the no-space scripts replaced by their character
    pairs, separated by spaces; anything else unchanged (ASCII text is returned as it is)."""
    if text.isascii() or not _NO_SPACE_RUN.search(text):
        return text
    return _NO_SPACE_RUN.sub(lambda m: " " + " ".join(_grams(m.group())) + " ", text)


def fold(text: str) -> str:
    """`text` lower-cased without the accents of Latin, Greek and Cyrillic letters ("Café" is
    "cafe"); the marks of other scripts (Thai, Devanagari) stay, since they change the letter."""
    lowered = text.lower()
    if lowered.isascii():
        return lowered
    return unicodedata.normalize("NFC", _DIACRITICS.sub("", unicodedata.normalize("NFD", lowered)))


_MAX_SCHEMA_DEPTH: Final = 32
_MAX_SCHEMA_PARTS: Final = 2000
_CHILD_KEYS: Final = frozenset(
    ("items", "prefixItems", "anyOf", "oneOf", "allOf", "additionalProperties")
)
_DEFS_KEYS: Final = frozenset(("$defs", "definitions"))


_ASCII_CAMEL: Final = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def _camel_pieces(chunk: str) -> list[str]:
    """`getHTTPResponse2` -> get, HTTP, Response, 2."""
    if chunk.isalpha() and (chunk.islower() or chunk.isupper()):
        return [chunk]
    if chunk.isascii():
        return _ASCII_CAMEL.findall(chunk)
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
    return pieces


def name_words(name: str) -> list[str]:
    """A tool name as lower-case words, for matching by words.

    Splits snake_case, kebab-case, dotted and camelCase names and letters from digits, and
    keeps each compound part too, so both "weather" and "getweatherforecast" find
    `getWeatherForecast`.

    Returns:
        The words, in order, each once.
    """
    return list(_name_words(name))


_NAME_CACHE_MAX: Final = 8192
# The words of the last names split, by name: property names ("location", "unit", "query")
# recur across a catalogue's tools. Emptied when full; read and written without a lock (one
# dictionary operation each, atomic under the GIL; a race only splits a name twice).
_name_cache: dict[str, tuple[str, ...]] = {}


def _name_words(name: str) -> tuple[str, ...]:
    """`name_words`, as a tuple kept in `_name_cache`."""
    words = _name_cache.get(name)
    if words is not None:
        return words
    if name.isascii() and name.isalpha() and (name.islower() or name.isupper()):
        words = (name.lower(),)  # one plain word: the usual property name
    else:
        found: dict[str, None] = {}
        for chunk in _SEPARATORS.split(name):
            if not chunk:
                continue
            pieces = _camel_pieces(chunk)
            for piece in pieces:
                found[piece.lower()] = None
            if len(pieces) > 1:
                found[chunk.lower()] = None
        words = tuple(found)
    if len(_name_cache) >= _NAME_CACHE_MAX:
        _name_cache.clear()
    _name_cache[name] = words
    return words


def query_words(query: str, *, keep_stop_words: bool = False) -> list[str]:
    """The words of a search query, lower-cased, each once, in order.

    Splits on everything that is not a letter or digit (and on camelCase, so a query naming a
    tool finds it); drops 1-character words and, unless `keep_stop_words`, `STOP_WORDS`. Runs
    of the scripts without spaces become their overlapping character pairs ("天气预报" gives
    "天气", "气预", "预报"; a run of one or two characters stays whole).
    """
    words: dict[str, None] = {}
    for chunk, no_space in _chunks(query):
        if no_space:
            for gram in _grams(chunk):
                if keep_stop_words or gram not in STOP_WORDS:
                    words[gram] = None
            continue
        pieces = _camel_pieces(chunk)
        candidates = [chunk, *pieces] if len(pieces) > 1 else pieces
        for piece in candidates:
            word = piece.lower()
            if len(word) < 2 or (not keep_stop_words and word in STOP_WORDS):
                continue
            words[word] = None
    return list(words)


def schema_text(parameters: Mapping[str, Any] | None) -> str:
    """The searchable text of a JSON schema: property names (split into words), titles,
    descriptions and string enum values, recursively through properties, items, anyOf/oneOf/
    allOf and definitions.

    Never raises on an odd schema: what is not a mapping or a list is skipped, and the walk
    stops at 32 levels and 2,000 parts.
    """
    parts: list[str] = []
    if isinstance(parameters, Mapping):
        _walk(parameters, 0, parts)
    return "\n".join(parts)


def _is_mapping(node: object) -> bool:
    return type(node) is dict or isinstance(node, Mapping)


def _is_list(node: object) -> bool:
    return type(node) is list or (
        isinstance(node, Sequence) and not isinstance(node, (str, bytes, bytearray))
    )


# What the walk does with a schema key's value: one dictionary lookup per key.
_TEXT, _PROPERTIES, _ENUM, _CHILD, _DEFS = range(5)
_KEY_KINDS: Final[dict[object, int]] = {
    "title": _TEXT,
    "description": _TEXT,
    "properties": _PROPERTIES,
    "enum": _ENUM,
    **dict.fromkeys(_CHILD_KEYS, _CHILD),
    **dict.fromkeys(_DEFS_KEYS, _DEFS),
}


def _walk(node: object, depth: int, parts: list[str]) -> None:
    # The hot loop of indexing a new tool: exact types tested first, no helper calls for them.
    if depth > _MAX_SCHEMA_DEPTH or len(parts) >= _MAX_SCHEMA_PARTS:
        return
    if type(node) is not dict and not isinstance(node, Mapping):
        if _is_list(node):
            for item in node:  # type: ignore[attr-defined]
                _walk(item, depth + 1, parts)
        return
    kind_of = _KEY_KINDS.get
    for key, value in node.items():
        kind = kind_of(key)
        if kind is None:
            continue
        if kind == _TEXT:
            if type(value) is str or isinstance(value, str):
                parts.append(value)
        elif kind == _PROPERTIES:
            if type(value) is dict or isinstance(value, Mapping):
                below = depth + 1
                for prop, sub in value.items():
                    if type(prop) is str or isinstance(prop, str):
                        parts.append(_property_text(prop))
                    _walk(sub, below, parts)
        elif kind == _ENUM:
            if type(value) is list or _is_list(value):
                parts.extend([v for v in value if type(v) is str or isinstance(v, str)])
        elif kind == _CHILD:
            _walk(value, depth + 1, parts)
        elif _is_mapping(value):  # $defs, definitions
            for sub in value.values():
                _walk(sub, depth + 1, parts)


# A property name's words joined, by name (see _name_cache).
_property_cache: dict[str, str] = {}


def _forget_names() -> None:
    """Empty the caches of names' words (for tests and benchmarks: a process's first tools)."""
    _name_cache.clear()
    _property_cache.clear()


def _property_text(name: str) -> str:
    text = _property_cache.get(name)
    if text is None:
        text = " ".join(_name_words(name))
        if len(_property_cache) >= _NAME_CACHE_MAX:
            _property_cache.clear()
        _property_cache[name] = text
    return text


def _plain(value: object) -> object:
    """Mappings as dicts, for `json.dumps`."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


_VALIDATED_MAX: Final = 16_384
# Digests whose content was checked to be JSON, oldest first: a new object equal to a tool seen
# before (a tool list rebuilt from the same definitions) skips the JSON check. Read without the
# lock (one dictionary lookup), written under it.
_validated: OrderedDict[bytes, None] = OrderedDict()
_validated_lock: Final = threading.Lock()
# A lone surrogate as `marshal` writes it (UTF-8, surrogatepass): ED A0..BF. The same bytes
# may come from a length or a number too; then the slow check decides.
_SURROGATE: Final = re.compile(rb"\xed[\xa0-\xbf]")
_to_builtins: Final = msgspec.to_builtins
_sha256: Final = hashlib.sha256
_dumps: Final = marshal.dumps


def tool_digest(tool: ToolReference) -> bytes:
    """A digest of everything about one tool: its name, description and parameters.

    Computed once per `ToolReference` and kept on the object (tools are frozen; their
    parameters must not be edited in place), so a tool prepared again costs an attribute read.
    The first time, the tool is serialized with `marshal` (in C, about 3 us for a BFCL tool)
    and hashed with SHA-256; content never seen before is also checked to be JSON (converted
    by msgspec in C and compared, about 3 us; a tool equal to one checked earlier is not
    checked again; `check_tools` does this for a list's new tools at once). Equal tools built
    the same way have the same digest; two tools with the same digest are equal.

    Returns:
        32 bytes.

    Raises:
        InvalidInput: the tool fails `check_tools`'s checks, or its parameters hold something
            JSON cannot carry, or text that is not valid Unicode.
    """
    digest = tool._digest
    if digest is not None:
        return digest
    _check_tool(tool)  # so that a digested tool is a checked one (see check_tools)
    return _digest(tool)


def _digest(tool: ToolReference) -> bytes:
    """`tool_digest` of a tool `_check_tool` passed, kept on the tool."""
    triple = (tool.name, tool.description, tool.parameters)
    try:
        # Version 2: no back-references and no interning flags, so equal content built alike
        # gives the same bytes. marshal takes only the exact built-in types (no subclass, no
        # Mapping but dict), so that the digest tells a tuple from a list and a set from both.
        data = b"m" + _dumps(triple, 2)  # type: ignore[arg-type]
    except ValueError:  # a Mapping that is not a dict, an enum, something not JSON...
        data = b"j" + _json_bytes(tool)
        digest = _sha256(data).digest()
    else:
        digest = _sha256(data).digest()
        if digest not in _validated:
            if not _plain_json(tool.parameters, data):
                _json_bytes(tool)  # raises when the standard library cannot write it
            with _validated_lock:
                _remember((digest,))
    object.__setattr__(tool, "_digest", digest)
    return digest


def _remember(digests: Iterable[bytes]) -> None:
    """Keep `digests` as checked, dropping the oldest beyond the bound (lock held)."""
    for digest in digests:
        _validated[digest] = None
    while len(_validated) > _VALIDATED_MAX:
        _validated.popitem(last=False)


def _plain_json(parameters: object, data: bytes) -> bool:
    """Whether parameters `marshal` took (`data`, its bytes) are plain JSON, checked in C.

    msgspec converts them to what it would write (`to_builtins`): the result equals the
    original only when every mapping is a dict with string keys and every value a list, a
    tuple, a string, a number, a boolean or None (marshal let through no other mapping and no
    subclass; a set, bytes or an integer key come back as something else, a complex number
    or Ellipsis raises). Lone surrogates, which msgspec passes, are looked for in `data`.
    False means "not shown": the standard library's JSON then decides (`_json_bytes`).
    """
    if _SURROGATE.search(data) is not None:
        return False
    try:
        return bool(_to_builtins(parameters, str_keys=True) == parameters)
    except Exception:  # whatever msgspec refuses, json.dumps decides
        return False


def _digest_plain(tools: list[ToolReference]) -> None:
    """Digest, in a few C calls over the batch, the new tools that are plainly fine.

    A tool is left undigested, for `check_tools`'s own loop (which raises its error in
    order), unless it is a `ToolReference` with a non-blank string name, a string description
    and parameters that are None or a dict, its text valid Unicode (no lone surrogate in the
    bytes marshal wrote) and its content JSON. Never raises.
    """
    plain = [
        t
        for t in tools
        if type(t) is ToolReference
        and type(t.name) is str
        and type(t.description) is str
        and (t.parameters is None or type(t.parameters) is dict)
        and t.name
        and not t.name.isspace()
    ]
    if not plain:
        return
    try:
        datas = [
            b"m" + _dumps((t.name, t.description, t.parameters), 2)  # type: ignore[arg-type]
            for t in plain
        ]
    except ValueError:  # something marshal does not take: that tool goes the usual way
        kept: list[ToolReference] = []
        datas = []
        for t in plain:
            try:
                datas.append(b"m" + _dumps((t.name, t.description, t.parameters), 2))  # type: ignore[arg-type]
            except ValueError:
                continue
            kept.append(t)
        plain = kept
    digests = [_sha256(data).digest() for data in datas]
    validated = _validated
    new = [i for i, digest in enumerate(digests) if digest not in validated]
    if new:
        parameters = [plain[i].parameters for i in new]
        joined = b"".join([datas[i] for i in new])
        if _SURROGATE.search(joined) is not None or not _plain_json(parameters, b""):
            # Some tool needs the slow check: find which, one by one.
            bad = {i for i in new if not _plain_json(plain[i].parameters, datas[i])}
            new = [i for i in new if i not in bad]
        else:
            bad = set()
        with _validated_lock:
            _remember([digests[i] for i in new])
    else:
        bad = set()
    setattr_ = object.__setattr__
    for i, (tool, digest) in enumerate(zip(plain, digests, strict=True)):
        if i not in bad:
            setattr_(tool, "_digest", digest)


def _json_bytes(tool: ToolReference) -> bytes:
    """The tool as canonical JSON in UTF-8.

    Raises:
        InvalidInput: not JSON, or not valid Unicode.
    """
    try:
        text = _canonical([tool.name, tool.description, tool.parameters])
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"the parameters of tool {tool.name!r} are not a JSON schema: {exc}"
        ) from exc
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"a tool's definition holds text that is not valid Unicode (a lone surrogate?): {exc}"
        ) from exc


def tools_fingerprint(tools: Sequence[ToolReference], *, ordered: bool) -> str:
    """A digest of everything about `tools`: names, descriptions and parameters.

    Built from each tool's `tool_digest`, so it costs one cached attribute per tool already
    seen and one serialization per new tool, never a serialization of the whole set.

    Args:
        tools: checked tools (see `check_tools`).
        ordered: whether the order of the tools counts.

    Returns:
        A SHA-256 hex digest.

    Raises:
        InvalidInput: see `tool_digest`.
    """
    digests = [t._digest or tool_digest(t) for t in tools]
    if not ordered:
        digests.sort()
    return hashlib.sha256(b"".join(digests)).hexdigest()


def _canonical(value: object) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_plain
    )


def check_tools(tools: Iterable[ToolReference]) -> list[ToolReference]:
    """`tools` as a list, checked, each tool digested (`tool_digest`).

    A tool that already has its digest was checked then: only its name's uniqueness is
    checked again. A new one is checked and digested here, so `tools_fingerprint` of the list
    reads one attribute per tool.

    Raises:
        InvalidInput: an item is not a `ToolReference`, has a blank name, a non-string
            description, text that is not valid Unicode or parameters JSON cannot carry, or
            two tools share a name.
    """
    if isinstance(tools, (str, bytes, Mapping)):
        raise InvalidInput(f"tools must be a sequence of ToolReference, got {type(tools).__name__}")
    checked = list(tools)
    fresh = [t for t in checked if type(t) is not ToolReference or t._digest is None]
    if len(fresh) > 1:
        _digest_plain(fresh)
    seen: set[str] = set()
    for tool in checked:
        if type(tool) is not ToolReference or tool._digest is None:
            _check_tool(tool)
            if tool._digest is None:
                _digest(tool)
        if tool.name in seen:
            raise InvalidInput(f"two tools are named {tool.name!r}: tool names must be unique")
        seen.add(tool.name)
    return checked


def _check_tool(tool: object) -> None:
    if not isinstance(tool, ToolReference):
        raise InvalidInput(
            f"tools must be ToolReference objects, got {type(tool).__name__} "
            "(build one with ToolReference(name, description, parameters))"
        )
    if not isinstance(tool.name, str) or not tool.name.strip():
        raise InvalidInput(f"a tool name must be a non-blank string, got {tool.name!r}")
    if not isinstance(tool.description, str):
        raise InvalidInput(f"the description of tool {tool.name!r} must be a string")
    try:
        if not tool.name.isascii():
            tool.name.encode("utf-8")
        if not tool.description.isascii():
            tool.description.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"tool {tool.name!r} has text that is not valid Unicode (a lone surrogate?)"
        ) from exc
    if tool.parameters is not None and not isinstance(tool.parameters, Mapping):
        raise InvalidInput(
            f"the parameters of tool {tool.name!r} must be a JSON-schema mapping or None"
        )


def check_max_results(max_results: int | None, default: int) -> int:
    """`max_results`, or `default` for None.

    Raises:
        InvalidInput: not a positive integer.
    """
    if max_results is None:
        return default
    if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
        raise InvalidInput(f"max_results must be a positive integer, got {max_results!r}")
    return max_results
