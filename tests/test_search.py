"""Search as readers use it: type into the real search box, read the real result list (Korean and English)."""

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from guidekit.pages import site_path, url_path

pytestmark = pytest.mark.browser

# Counts the queries sent to Material's search worker and the results it sends back, so a test reads the
# result list only once the worker has answered the last query; the list itself is read from the page.
WATCH_WORKER = """
window.searchLog = {queries: [], results: 0};
window.Worker = class extends window.Worker {
  constructor(...args) {
    super(...args);
    this.addEventListener("message", (ev) => Array.isArray(ev.data?.data?.items) && window.searchLog.results++);
  }
  postMessage(message, ...rest) {
    if (typeof message?.data === "string") window.searchLog.queries.push(message.data);
    super.postMessage(message, ...rest);
  }
};
"""
ANSWERED = "q => searchLog.queries.at(-1) === searchQuery(q) && searchLog.results === searchLog.queries.length"

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
    context = browser.new_context(service_workers="block")
    context.add_init_script(WATCH_WORKER)
    opened = {}

    def open_search(lang):
        if lang not in opened:
            page = context.new_page()
            page.goto(f"{base_url}/{url_path(lang, 'index.md')}", wait_until="networkidle")
            opened[lang] = page
        return opened[lang]

    yield open_search
    context.close()


def search(page, query):
    """Clear the box, type the query as a reader does, and return the result pages, best first."""
    box = page.locator("input.md-search__input")
    box.click()
    box.press("Control+a")
    box.press("Backspace")
    page.keyboard.type(query)  # Hangul arrives as committed text (as from an IME), Latin as key presses
    try:
        page.wait_for_function(ANSWERED, arg=query, timeout=5_000)
        answered = True
    except PlaywrightTimeout:
        answered = False
    if not answered:
        sent = page.evaluate("searchLog.queries.at(-1)")
        shown = page.locator(".md-search-result__meta").inner_text()
        pytest.fail(f"typed {query!r}, but the search ran for {sent!r} and shows {shown!r}")
    found = page.evaluate(
        "[...document.querySelectorAll('.md-search-result__item > a')].map(a => new URL(a.href).pathname)"
    )
    return list(dict.fromkeys(found))  # one entry per page


@pytest.mark.parametrize("lang,query,expected", [("ko", *q) for q in KOREAN] + [("en", *q) for q in ENGLISH])
def test_typed_query_finds_the_page(search_page, lang, query, expected):
    page = search_page(lang)
    top = search(page, query)[:3]
    want = f"{site_path()}/{url_path(lang, expected)}"
    assert want in top, f"{query!r} on the {lang} site: top 3 {top}, expected {want}"
