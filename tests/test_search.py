"""Search as readers use it: type into the real search box, read the real result list (Korean and English)."""

import pytest
from searchbox import run_query, search_pages

from guidekit.pages import LANGS, site_path, url_path

pytestmark = pytest.mark.browser

# (query, page expected among the top 3). Korean pages chosen where the Korean text is about the word.
KOREAN = [
    ("기울기", "training-loop.md"),  # single words: "no_sync로 기울기 누적하기"
    ("재현성", "practices/reproducibility.md"),
    ("파이프라인", "parallelism.md"),  # "파이프라인 병렬화"
    ("타임아웃", "debugging.md"),  # "타임아웃: 멈춤을 실패로 바꾸기"
    ("기울기 누적", "training-loop.md"),  # multi-word
    ("혼합 정밀도", "practices/mixed-precision.md"),
    ("기울기를", "training-loop.md"),  # particle attached: searched as "기울기"
    ("파이프라인을", "parallelism.md"),  # particle forms the pages never use: the noun is searched
    ("타임아웃으로", "debugging.md"),
    ("체크포", "training-loop.md"),  # partial: "체크포인트: 저장은 랭크 0, ..."
    ("DDP 체크포인트", "training-loop.md"),  # mixed scripts
]
ENGLISH = [
    ("timeout", "debugging.md"),
    ("reproducibility", "practices/reproducibility.md"),
    ("pipeline", "parallelism.md"),
    ("gradient accumulation", "training-loop.md"),
    ("checkpo", "training-loop.md"),
    ("DDP checkpoint", "training-loop.md"),
]


@pytest.fixture(scope="module")
def search_page(browser, base_url):
    """One page per language with the search open, reused between queries."""
    context, open_search = search_pages(browser, base_url)
    yield open_search
    context.close()


def search(page, query):
    """Type the query as a reader does and return the result pages, best first."""
    return list(dict.fromkeys(links[0].split("#")[0] for links in run_query(page, query) if links))


@pytest.mark.parametrize("lang,query,expected", [("ko", *q) for q in KOREAN] + [("en", *q) for q in ENGLISH])
def test_typed_query_finds_the_page(search_page, lang, query, expected):
    page = search_page(lang)
    top = search(page, query)[:3]
    want = f"{site_path()}/{url_path(lang, expected)}"
    assert want in top, f"{query!r} on the {lang} site: top 3 {top}, expected {want}"


@pytest.mark.parametrize("lang", LANGS)
def test_results_stay_in_the_readers_language(search_page, lang):
    """A page loads its own language's index (theme/hooks/search_per_language.py), so words both languages use
    find the pages of the language being read and no others."""
    page = search_page(lang)
    home = f"{site_path()}/{url_path(lang, 'index.md')}"
    loaded = page.evaluate("performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)")
    assert [p for p in loaded if p.endswith("search_index.json")] == [f"{home}search/search_index.json"], loaded
    others = [f"{site_path()}/{url_path(other, 'index.md')}" for other in LANGS if other != lang]
    for query in ("torchrun", "DDP", "NCCL"):
        found = search(page, query)
        assert found, f"{query!r} found nothing on the {lang} site"
        wrong = [
            p for p in found if not p.startswith(home) or any(p.startswith(o) and len(o) > len(home) for o in others)
        ]
        assert not wrong, f"{query!r} on the {lang} site found pages of another language: {wrong}"
