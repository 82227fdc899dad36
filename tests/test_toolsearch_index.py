"""Tool indexes (regex baseline and BM25): ranking, word splitting, safety, sessions."""

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog import InvalidInput
from turnlog.toolsearch import Bm25ToolIndex, RegexToolIndex, ToolIndex, ToolReference
from turnlog.toolsearch.bm25 import match_expression
from turnlog.toolsearch.words import name_words, query_words, schema_text

WEATHER = ToolReference(
    "getWeatherForecast",
    "Forecast of the next days for a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
)
EMAIL = ToolReference(
    "send_email",
    "Send an email message to a recipient.",
    {
        "type": "object",
        "properties": {
            "to": {"type": "string", "description": "Recipient address"},
            "attachments": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"mime_type": {"description": "Content type such as pdf"}},
                },
            },
        },
    },
)
STOCKS = ToolReference("stocks.quote.latest", "Latest stock price for a ticker symbol.")
CALENDAR = ToolReference(
    "calendar-create-event",
    "Create an event in the user's calendar; can also check the weather at the venue.",
    {"type": "object", "properties": {"title": {"type": "string"}}},
)
DB = ToolReference(
    "run_sql",
    "Run a query on the warehouse.",
    {
        "type": "object",
        "properties": {"query": {"description": "The SQL; use LIMIT for pagination"}},
    },
)
TOOLS = [WEATHER, EMAIL, STOCKS, CALENDAR, DB]


@pytest.fixture(params=["bm25", "regex"])
def index(request):
    idx = Bm25ToolIndex() if request.param == "bm25" else RegexToolIndex()
    idx.index_tools("s", TOOLS)
    yield idx
    if isinstance(idx, Bm25ToolIndex):
        idx.close()


def names(hits):
    return [h.name for h in hits]


def test_both_indexes_meet_the_protocol(index):
    assert isinstance(index, ToolIndex)


def test_a_name_match_ranks_above_a_description_match(index):
    hits = index.search("s", "weather")
    assert names(hits)[:2] == ["getWeatherForecast", "calendar-create-event"]
    assert hits[0].score > hits[1].score > 0


def test_snake_camel_dotted_and_kebab_names_are_split_into_words(index):
    assert names(index.search("s", "weather forecast"))[0] == "getWeatherForecast"
    assert names(index.search("s", "email"))[0] == "send_email"
    assert names(index.search("s", "quote"))[0] == "stocks.quote.latest"
    assert names(index.search("s", "create event"))[0] == "calendar-create-event"
    assert names(index.search("s", "getWeatherForecast"))[0] == "getWeatherForecast"


def test_parameter_names_descriptions_and_enums_are_searched(index):
    assert names(index.search("s", "recipient address"))[0] == "send_email"
    assert names(index.search("s", "mime"))[0] == "send_email"  # nested in items
    assert names(index.search("s", "fahrenheit")) == ["getWeatherForecast"]
    assert names(index.search("s", "pagination")) == ["run_sql"]


def test_bm25_stems_words():
    idx = Bm25ToolIndex()
    idx.index_tools("s", TOOLS)
    assert names(idx.search("s", "forecasts"))[0] == "getWeatherForecast"
    assert names(idx.search("s", "sending emails"))[0] == "send_email"
    assert names(idx.search("s", "quotes"))[0] == "stocks.quote.latest"


def test_regex_is_a_baseline_without_stemming_but_with_substrings():
    idx = RegexToolIndex()
    idx.index_tools("s", TOOLS)
    assert idx.search("s", "forecasts") == []
    assert names(idx.search("s", "forecast"))[0] == "getWeatherForecast"


def test_case_does_not_matter(index):
    assert names(index.search("s", "WEATHER"))[0] == "getWeatherForecast"
    assert names(index.search("s", "Stock Price"))[0] == "stocks.quote.latest"


def test_max_results(index):
    assert len(index.search("s", "weather email stock event query", max_results=2)) == 2
    assert len(index.search("s", "weather email stock event query")) == 5
    with pytest.raises(InvalidInput):
        index.search("s", "weather", max_results=0)


def test_the_default_max_results_is_configurable():
    for idx in (Bm25ToolIndex(max_results=1), RegexToolIndex(max_results=1)):
        idx.index_tools("s", TOOLS)
        assert len(idx.search("s", "weather email stock")) == 1


@pytest.mark.parametrize(
    "query",
    [
        "NEAR(",
        '"',
        "*",
        "AND OR NOT",
        "-",
        'weather" OR "email',
        "weather NEAR(email, 2)",
        "name_words: weather",
        "^weather",
        "{description}: x",
        "(((",
        "[a-z]+",
        "\\",
        "'; DROP TABLE tools; --",
        "weather*",
        "\x00",
    ],
)
def test_operators_and_syntax_in_queries_never_raise(index, query):
    hits = index.search("s", query)
    assert isinstance(hits, list)
    if "weather" in query.lower():
        assert "getWeatherForecast" in names(hits)


@pytest.mark.parametrize("query", ["", "   ", "?!", "x y z", "a b c d"])
def test_a_query_without_usable_words_finds_nothing(index, query):
    assert index.search("s", query) == []


def test_stop_words_alone_count_only_for_bm25():
    regex, bm25 = RegexToolIndex(), Bm25ToolIndex()
    for idx in (regex, bm25):
        idx.index_tools("s", TOOLS)
    assert regex.search("s", "of the") == []
    assert "getWeatherForecast" in names(bm25.search("s", "of the"))  # better than nothing
    assert names(bm25.search("s", "the weather of the city"))[0] == "getWeatherForecast"


def test_bm25_numbers_in_a_query_do_not_match_numbers_in_tools():
    currency = ToolReference(
        "currency_convert",
        "Convert an amount between currencies (euros, dollars, yen).",
        {"type": "object", "properties": {"amount": {"type": "number"}}},
    )
    status = ToolReference(
        "http_status",
        "Explain an HTTP status code such as 404 or 500.",
        {"type": "object", "properties": {"code": {"type": "integer", "default": 2023}}},
    )
    bm25 = Bm25ToolIndex()
    bm25.index_tools("s", [status, currency])
    assert names(bm25.search("s", "how much are 500 euros in yen on 2023-10-01")) == [
        "currency_convert"
    ]
    assert names(bm25.search("s", "500")) == ["http_status"]  # nothing else: numbers count
    # The pieces of "sha256" are words too; its "256" is not.
    assert match_expression("sha256 of the mp3 from 2023") == '"sha256" OR "sha" OR "mp3" OR "mp"'


def test_an_over_long_regex_pattern_finds_nothing():
    idx = RegexToolIndex()
    idx.index_tools("s", TOOLS)
    query = " ".join(f"word{i}" for i in range(500)) + " weather"
    assert idx.search("s", query) == []


def test_a_long_bm25_query_uses_its_first_words():
    idx = Bm25ToolIndex()
    idx.index_tools("s", TOOLS)
    assert names(idx.search("s", "weather " + "filler " * 5000))[0] == "getWeatherForecast"
    expression = match_expression(" ".join(f"w{i}" for i in range(500)))
    assert expression.count(" OR ") == 63


def test_an_unknown_session_finds_nothing(index):
    assert index.search("nobody", "weather") == []
    assert index.size("nobody") == 0
    index.clear("nobody")  # a no-op


def test_size_clear_and_replace(index):
    assert index.size("s") == 5
    index.index_tools("s", [STOCKS])
    assert index.size("s") == 1
    assert index.search("s", "weather") == []
    index.clear("s")
    assert index.size("s") == 0
    assert index.search("s", "stock") == []
    index.index_tools("s", [])
    assert index.size("s") == 0
    assert index.search("s", "stock") == []


def test_sessions_are_isolated(index):
    index.index_tools("t", [STOCKS, DB])
    assert names(index.search("t", "weather")) == []
    assert "getWeatherForecast" in names(index.search("s", "weather"))
    index.clear("t")
    assert index.size("s") == 5
    assert names(index.search("s", "stock"))[0] == "stocks.quote.latest"


def test_sessions_with_the_same_tools_share_rows_but_not_their_lifetime():
    idx = Bm25ToolIndex()
    for i in range(100):
        idx.index_tools(f"s{i}", TOOLS)
    idx.index_tools("other", [STOCKS])
    assert idx.sessions() == 101 and idx.tool_sets() == 2
    for i in range(99):
        idx.clear(f"s{i}")
    assert idx.tool_sets() == 2
    assert names(idx.search("s99", "weather"))[0] == "getWeatherForecast"
    idx.index_tools("s99", [DB])  # the last user of the shared set moves on
    assert idx.tool_sets() == 2
    assert names(idx.search("s99", "warehouse")) == ["run_sql"]
    assert idx.search("s99", "weather") == []


def test_the_search_reads_only_the_sessions_tools_among_many():
    idx = Bm25ToolIndex()
    for i in range(300):
        idx.index_tools(f"s{i}", [ToolReference(f"tool_{i}", "weather report")])
    assert names(idx.search("s123", "weather")) == ["tool_123"]


@pytest.mark.parametrize(
    "bad",
    [
        [ToolReference("a", "x"), ToolReference("a", "y")],
        [{"name": "a", "description": "x"}],
        [ToolReference("  ", "x")],
        [ToolReference("a", None)],
        [ToolReference("a", "x", {"bad": object()})],
        [ToolReference("a", "lone \ud800 surrogate")],
        [ToolReference("a", "x", {"properties": {"p": {"description": "\udfff"}}})],
        "not a list",
    ],
)
def test_bad_tools_raise_invalid_input_and_leave_the_index_alone(index, bad):
    with pytest.raises(InvalidInput):
        index.index_tools("s", bad)
    assert index.size("s") == 5


def test_a_closed_bm25_index_says_so():
    idx = Bm25ToolIndex()
    idx.close()
    idx.close()
    with pytest.raises(InvalidInput, match="closed"):
        idx.search("s", "weather")


@pytest.mark.parametrize("weight", [-1, float("inf"), float("nan"), "2"])
def test_bad_bm25_weights_raise(weight):
    with pytest.raises(InvalidInput):
        Bm25ToolIndex(name_weight=weight)


def test_name_words():
    assert name_words("getWeatherForecast") == ["get", "weather", "forecast", "getweatherforecast"]
    assert name_words("HTTPServer_error") == ["http", "server", "httpserver", "error"]
    assert name_words("weather.v2.get-daily") == ["weather", "v", "2", "v2", "get", "daily"]
    assert name_words("getÜberWetter") == ["get", "über", "wetter", "getüberwetter"]
    assert name_words("sha256sum") == ["sha", "256", "sum", "sha256sum"]


def test_query_words():
    assert query_words("What's the weather in Paris?") == ["weather", "paris"]
    assert query_words("the a of") == []
    assert query_words("the a of", keep_stop_words=True) == ["the", "of"]
    assert query_words("getWeather") == ["getweather", "get", "weather"]
    assert query_words("İstanbul STRASSE") == ["i̇stanbul", "strasse"]


def test_schema_text_survives_odd_schemas():
    assert schema_text(None) == ""
    assert schema_text({"properties": ["not", "a", "mapping"], "items": 3}) == ""
    deep: dict = {}
    node = deep
    for _ in range(100):
        node["items"] = {"description": "deep"}
        node = node["items"]
    assert schema_text(deep).count("deep") <= 33
    cyclic: dict = {"description": "loop"}
    cyclic["items"] = cyclic
    assert schema_text(cyclic).count("loop") == 33


_BM25 = Bm25ToolIndex()
_BM25.index_tools("s", TOOLS)
_REGEX = RegexToolIndex()
_REGEX.index_tools("s", TOOLS)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(query):
    for idx in (_BM25, _REGEX):
        hits = idx.search("s", query)
        assert all(h.name in {t.name for t in TOOLS} for h in hits)


def test_indexes_are_thread_safe(index):
    errors = []

    def run(t):
        try:
            for i in range(100):
                sid = f"t{t}-{i % 5}"
                index.index_tools(sid, TOOLS[: 1 + (i % 5)])
                index.search(sid, "weather email stock")
                index.search("s", "weather")
                if i % 3 == 0:
                    index.clear(sid)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    workers = [threading.Thread(target=run, args=(t,)) for t in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert index.size("s") == 5


def _catalogue(n):
    topics = [
        "weather",
        "stock",
        "email",
        "calendar",
        "invoice",
        "flight",
        "hotel",
        "translate",
        "image",
        "file",
    ]
    return [
        ToolReference(
            f"{topics[i % 10]}_action_{i}",
            f"Does {topics[i % 10]} work number {i} with {topics[(i * 7) % 10]} data.",
            {
                "type": "object",
                "properties": {
                    f"arg{i}": {"type": "string", "description": f"{topics[(i * 3) % 10]} id"}
                },
            },
        )
        for i in range(n)
    ]


def test_a_thousand_tools_index_and_search(index):
    """Timings are printed (run with -s), never asserted: they depend on the machine."""
    tools = _catalogue(1000)
    started = time.perf_counter()
    index.index_tools("big", tools)
    indexed = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(100):
        hits = index.search("big", "book a hotel and a flight")
    per_query = (time.perf_counter() - started) / 100
    print(
        f"\n{type(index).__name__}: 1,000 tools in {indexed * 1e3:.1f} ms, "
        f"a query in {per_query * 1e6:.0f} µs"
    )
    assert index.size("big") == 1000
    assert hits and hits[0].name.split("_")[0] in {"hotel", "flight"}


# -- BM25 ranking: the input order never matches the expected order ---------------------------


def described(name, description, parameters=None):
    return ToolReference(name, description, parameters)


def ranked(tools, query, **weights):
    with Bm25ToolIndex(**weights) as idx:
        idx.index_tools("s", tools)
        hits = idx.search("s", query, max_results=len(tools))
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    return hits


FILLERS = [
    described("alpha_tool", "unrelated widget adjuster"),
    described("beta_tool", "another gadget fixer"),
    described("gamma_tool", "sprocket maker for plants"),
]


def test_bm25_more_occurrences_of_the_word_rank_higher():
    once = described("first_tool", "report summary for finance team")
    twice = described("second_tool", "report report for finance team")
    hits = ranked([once, *FILLERS, twice], "report")
    assert names(hits) == ["second_tool", "first_tool"]
    assert hits[0].score > hits[1].score > 0


def test_bm25_a_rare_word_outweighs_a_common_one():
    common = [described(f"c{i}_tool", f"common thing number {w}") for i, w in enumerate("xyz")]
    rare = described("rare_tool", "rare thing number w")
    hits = ranked([*common, *FILLERS, rare], "common rare")
    assert names(hits)[0] == "rare_tool"
    assert set(names(hits)[1:]) == {"c0_tool", "c1_tool", "c2_tool"}
    assert hits[0].score > hits[1].score


def test_bm25_a_shorter_text_with_the_word_ranks_higher():
    long = described("long_tool", "ledger export with many more words about nothing at all")
    short = described("short_tool", "ledger export")
    assert names(ranked([long, *FILLERS, short], "ledger")) == ["short_tool", "long_tool"]


def test_bm25_matching_more_query_words_ranks_higher():
    one = described("one_tool", "shows the weather")
    two = described("two_tool", "shows the weather forecast")
    three = described("three_tool", "shows the weather forecast per city")
    hits = ranked([one, two, *FILLERS, three], "weather forecast city")
    assert names(hits) == ["three_tool", "two_tool", "one_tool"]


def test_bm25_field_weights_decide_between_name_description_and_parameters():
    in_params = described(
        "sync_files",
        "copies things",
        {"type": "object", "properties": {"invoice": {"type": "string"}}},
    )
    in_description = described("fetch_records", "finds an invoice")
    in_name = described("invoice_lookup", "finds records")
    tools = [in_params, in_description, *FILLERS, in_name]
    assert names(ranked(tools, "invoice")) == ["invoice_lookup", "fetch_records", "sync_files"]
    turned = {"name_weight": 1.0, "description_weight": 2.0, "parameters_weight": 8.0}
    assert names(ranked(tools, "invoice", **turned))[0] == "sync_files"
    no_names = {"name_weight": 0.0, "description_weight": 4.0, "parameters_weight": 1.0}
    assert names(ranked(tools, "invoice", **no_names))[0] == "fetch_records"


def test_bm25_ties_keep_the_indexed_order():
    same = [described(n, "convert currency amounts") for n in ("x_one", "x_two", "x_three")]
    with Bm25ToolIndex() as idx:
        idx.index_tools("forward", [*FILLERS, *same])
        idx.index_tools("backward", [*reversed(same), *FILLERS])
        forward = idx.search("forward", "currency")
        backward = idx.search("backward", "currency")
    assert names(forward) == ["x_one", "x_two", "x_three"]
    assert names(backward) == ["x_three", "x_two", "x_one"]
    assert len({h.score for h in forward + backward}) == 1
