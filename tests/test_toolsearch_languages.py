"""Tool search beyond English: words of scripts without spaces, accents, and the language set."""

import json
from pathlib import Path

import pytest

from turnlog.toolsearch import Bm25ToolIndex, RegexToolIndex, ToolReference
from turnlog.toolsearch.bm25 import match_expression
from turnlog.toolsearch.words import fold, index_text, query_words

FIXTURE = Path(__file__).parent / "fixtures" / "toolsearch_languages.json"
DATA = json.loads(FIXTURE.read_text(encoding="utf-8"))
LANGUAGES = ("zh", "ja", "ko", "th", "fr", "de", "es")


def catalogue(lang: str) -> list[ToolReference]:
    return [
        ToolReference(
            t["name"],
            t["description"][lang],
            {"type": "object", "properties": {p: {"type": "string"} for p in t["params"]}},
        )
        for t in DATA["tools"]
    ]


# --------------------------------------------------------------------------------------------
# Words.


def test_chinese_runs_become_overlapping_pairs():
    assert query_words("明天的天气预报") == ["明天", "天的", "的天", "天气", "气预", "预报"]
    assert query_words("天气") == ["天气"]  # two characters stay whole
    assert query_words("雨") == ["雨"]  # and one character is a word here, unlike in English
    assert query_words("PDF文件") == ["pdf", "文件"]  # Latin and Han are cut apart


def test_japanese_hiragana_is_cut_from_kanji_and_particles_are_dropped():
    assert query_words("歯医者の予約を取りたい") == ["歯医", "医者", "予約", "取", "りた", "たい"]
    assert query_words("の を") == []
    assert query_words("の を", keep_stop_words=True) == ["の", "を"]


def test_korean_words_lose_their_particles_by_pairs():
    assert query_words("날씨를 알려줘") == ["날씨", "씨를", "알려", "려줘"]


def test_thai_pairs_keep_vowel_and_tone_marks_with_their_consonant():
    words = query_words("ที่นี่")  # ที่ นี่: each a consonant with two marks
    assert words == ["ที่นี่"]
    assert query_words("เช็คยอด") == ["เช็", "ช็ค", "คย", "ยอ", "อด"]
    assert all(not w[0].isspace() and "\u0e48" not in w[:1] for w in words)


def test_index_text_pairs_the_same_way_and_leaves_other_text_alone():
    text = "Weather 天气预报, naïve café"
    assert index_text(text) == "Weather  天气 气预 预报 , naïve café"
    assert index_text("plain ascii_text") == "plain ascii_text"
    assert index_text("déjà vu") == "déjà vu"


def test_fold_drops_latin_accents_but_not_thai_marks():
    assert fold("Crème Brûlée ÉTÉ") == "creme brulee ete"
    assert fold("ที่") == "ที่"
    assert fold("İstanbul") == "istanbul"


def test_match_expression_quotes_pairs():
    assert match_expression("天气预报") == '"天气" OR "气预" OR "预报"'


# --------------------------------------------------------------------------------------------
# The indexes find tools described in those languages.


@pytest.mark.parametrize(
    ("lang", "query", "expected"),
    [
        ("zh", "明天上海的天气预报", "get_weather_forecast"),
        ("zh", "我的银行卡丢了，要挂失", "block_bank_card"),
        ("ja", "トヨタの株価はいくら？", "get_stock_price"),
        ("ja", "京都のホテルを二泊予約", "book_hotel"),
        ("ko", "내일 부산 날씨 어때?", "get_weather_forecast"),
        ("ko", "택배 배송 조회", "track_package"),
        ("th", "พยากรณ์อากาศกรุงเทพพรุ่งนี้", "get_weather_forecast"),
        ("th", "จ่ายค่าไฟเดือนนี้", "pay_bill"),
        ("fr", "météo à Lyon demain", "get_weather_forecast"),
        ("fr", "itineraire a pied jusqu'a la gare", "get_route_directions"),  # accents left out
        ("es", "perdí mi tarjeta, hay que bloquearla", "block_bank_card"),
        ("de", "Kontostand anzeigen", "check_account_balance"),
    ],
)
@pytest.mark.parametrize("kind", [Bm25ToolIndex, RegexToolIndex])
def test_a_query_finds_its_tool(kind, lang, query, expected):
    """BM25 ranks it first; the regex baseline, which has no word weights, in its top 5."""
    index = kind()
    index.index_tools(lang, catalogue(lang))
    names = [h.name for h in index.search(lang, query, max_results=5)]
    if kind is Bm25ToolIndex:
        assert names[:1] == [expected], names
    else:
        assert expected in names


def test_thai_marks_stay_in_their_words_in_fts5():
    """unicode61 by default treats combining marks as separators: "ป่า" (forest) and "ป้า"
    (aunt), which differ only by their tone mark, would both be the letters ป and า."""
    index = Bm25ToolIndex()
    index.index_tools(
        "s",
        [
            ToolReference("forest_map", "แผนที่ป่า"),  # a map of the forest
            ToolReference("call_aunt", "โทรหาป้า"),  # call auntie
        ],
    )
    assert [h.name for h in index.search("s", "ป่า")] == ["forest_map"]
    assert [h.name for h in index.search("s", "ป้า")] == ["call_aunt"]


@pytest.mark.parametrize("kind", [Bm25ToolIndex, RegexToolIndex])
def test_recall_at_5_on_the_language_set_is_at_least_085(kind):
    index = kind()
    for lang in LANGUAGES:
        index.index_tools(lang, catalogue(lang))
    found = [
        q["expected"] in [h.name for h in index.search(q["lang"], q["text"], max_results=5)]
        for q in DATA["queries"]
    ]
    assert len(found) == 84
    assert sum(found) / len(found) >= 0.85


def test_the_language_set_is_whole():
    names = {t["name"] for t in DATA["tools"]}
    assert len(names) == len(DATA["tools"]) == 24
    for tool in DATA["tools"]:
        assert set(tool["description"]) == {"en", *LANGUAGES}
    for lang in LANGUAGES:
        queries = [q for q in DATA["queries"] if q["lang"] == lang]
        assert len(queries) == 12 and all(q["expected"] in names for q in queries)
