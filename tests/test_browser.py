"""The site as readers meet it: Debian's Chromium, driven by Playwright, against the built site on 127.0.0.1."""

import gzip
import json
import re

import pytest

from guidekit import ROOT
from guidekit.pages import LANGS, fences, page_files, pages, url_path
from guidekit.sections import target_text

pytestmark = pytest.mark.browser

ARTIFACTS = ROOT / "artifacts"
# Bytes a reader downloads for one page into an empty cache, text gzip-compressed as GitHub Pages serves it.
# Measured: Material's CSS + JS + search worker ~75 KB, the search index of the page's language (loaded on every
# page) 116 KB (English) to 135 KB (Korean), 266 KB while one index held both languages, a long chapter's HTML
# ~30 KB, the benchmark notebook page ~130 KB (nbconvert's inline CSS and an SVG plot). 500 KB leaves room for
# growth, and catches a stray image or a font fetched by mistake.
PAGE_BUDGET_BYTES = 500_000
COMPRESSED_TYPES = ("text/", "javascript", "json", "svg", "xml")


class Visit:
    """A page open in a fresh context that records console errors, outside requests and bytes received."""

    def __init__(self, browser, base_url, **context_args):
        self.context = browser.new_context(service_workers="block", **context_args)
        self.errors, self.outside, self.bytes, self.raw_bytes = [], [], {}, {}
        self.context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/]).*"), self._refuse)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("requestfinished", self._count)

    def forget(self):
        """Start recording afresh, for the next page opened in this tab."""
        self.errors.clear(), self.outside.clear(), self.bytes.clear(), self.raw_bytes.clear()

    def _refuse(self, route):
        if not route.request.url.startswith(("data:", "blob:", "about:")):
            self.outside.append(route.request.url)
        route.abort()

    def _count(self, request):
        response = request.response()
        if response is None:
            return
        try:
            body = response.body()
        except Exception:  # redirects and aborted requests have no body
            return
        kind = response.headers.get("content-type", "")
        self.raw_bytes[request.url] = len(body)
        self.bytes[request.url] = len(gzip.compress(body, 6)) if any(t in kind for t in COMPRESSED_TYPES) else len(body)

    def open(self, url):
        self.page.goto(url, wait_until="networkidle")
        return self.page

    def close(self):
        self.context.close()


@pytest.fixture
def visit(browser, base_url):
    opened = []

    def open_visit(**context_args):
        opened.append(Visit(browser, base_url, **context_args))
        return opened[-1]

    yield open_visit
    for v in opened:
        v.close()


def url_of(base_url, lang, name):
    return f"{base_url}/{url_path(lang, name)}"


ALL_PAGES = [(lang, name) for lang in LANGS for name in sorted(page_files(lang))]


@pytest.fixture(scope="module")
def reader_tab(browser, base_url):
    """One tab for every page of the page-load test, its HTTP cache off, so each page arrives whole as into an
    empty cache; a fresh context per page would also start a renderer process each time (0.2 CPU-seconds)."""
    v = Visit(browser, base_url)
    cdp = v.context.new_cdp_session(v.page)
    cdp.send("Network.enable")
    cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
    yield v
    v.close()


@pytest.mark.parametrize("lang,name", ALL_PAGES)
def test_page_loads_offline_without_errors(reader_tab, base_url, lang, name):
    v = reader_tab
    v.forget()
    index = f"{base_url}/{url_path(lang, 'index.md')}search/search_index.json"
    # The index is the last request of a page: Material's bundle starts the search worker once it runs, and the
    # worker fetches it (images and styles come before the load event; fonts are the system's)
    with v.page.expect_request_finished(lambda request: request.url == index):
        v.page.goto(url_of(base_url, lang, name), wait_until="load")
    page = v.page
    assert page.locator("html").get_attribute("lang") == lang
    assert not v.outside, f"requests leaving 127.0.0.1: {v.outside}"
    assert not v.errors, f"console errors: {v.errors}"
    assert index in v.bytes, "the search index a page loads counts towards its weight"
    broken_images = page.evaluate(
        "[...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"
    )
    assert not broken_images, f"images that did not load: {broken_images}"
    if name.endswith(".ipynb"):
        assert page.locator(".jp-OutputArea-output").count() > 0, "notebook outputs are not shown"
    total = sum(v.bytes.values())
    record_weight(lang=lang, page=name, gzip_bytes=total, raw_bytes=sum(v.raw_bytes.values()), requests=len(v.bytes))
    assert total < PAGE_BUDGET_BYTES, f"{total:,} bytes (gzip) transferred, budget {PAGE_BUDGET_BYTES:,}"


def record_weight(**row):
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "page-weight.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


@pytest.mark.parametrize("name", ["ddp.md", "performance.ipynb"])
def test_language_switcher_keeps_page_and_section(visit, base_url, name):
    ko, en = url_of(base_url, "ko", name), url_of(base_url, "en", name)
    page = visit().open(ko)
    anchor = page.locator("article h2[id]").nth(1).get_attribute("id")
    page.goto(f"{ko}#{anchor}", wait_until="networkidle")
    page.locator(".md-header__option .md-select").hover()
    page.locator('a[hreflang="en"]').click()
    page.wait_for_url(f"{en}#{anchor}")
    assert page.locator(f"h2#{anchor}").count() == 1
    page.locator(".md-header__option .md-select").hover()
    page.locator('a[hreflang="ko"]').click()
    page.wait_for_url(f"{ko}#{anchor}")


def copied_text(page, block_index):
    page.locator("button.md-code__button[data-md-type=copy]").nth(block_index).click()
    return page.evaluate("navigator.clipboard.readText()")


@pytest.mark.parametrize("lang", LANGS)
def test_copy_button_copies_exactly_the_runnable_code(visit, base_url, lang):
    v = visit(permissions=["clipboard-read", "clipboard-write"])
    page = v.open(url_of(base_url, lang, "ddp.md"))
    first = next(f for f in fences((ROOT / "docs" / lang / "ddp.md").read_text(encoding="utf-8")) if f.is_include)
    copied = copied_text(page, 0)
    shown = [line.strip() for t in first.targets for line in target_text(t).splitlines() if line.strip()]
    expected = [re.sub(r"\s*# \(\d+\)!?$", "", line) for line in shown]
    got = [line.strip() for line in copied.splitlines() if line.strip()]
    assert got == [line for line in expected if line], "the copy button must give the snippet's code, nothing else"
    assert not re.search(r"# \(\d+\)", copied), "annotation markers leaked into the copied code"


def test_phone_can_open_navigation_and_read_code(visit, base_url):
    v = visit(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = v.open(f"{base_url}/ddp/")
    drawer = page.locator("nav.md-nav--primary")
    assert not drawer.is_visible() or drawer.bounding_box()["x"] < 0
    page.locator('.md-header label[for="__drawer"]').click()
    page.wait_for_timeout(400)
    box = drawer.bounding_box()
    assert box and box["x"] >= 0 and box["width"] > 200, "the navigation drawer did not open"
    page.reload(wait_until="networkidle")  # drawer closed again
    code = page.locator("pre code").first
    code.scroll_into_view_if_needed()
    width = page.evaluate("document.documentElement.clientWidth")
    block = page.locator("pre").first.bounding_box()
    assert block["x"] >= 0 and block["x"] + block["width"] <= width + 1, "code overflows the screen"
    overflow = page.evaluate("getComputedStyle(document.querySelector('pre code')).overflowX")
    assert overflow in ("auto", "scroll"), "long code lines must scroll inside the block"


SCREENSHOT_PAGES = ["index.md", "ddp.md", "performance.ipynb"]


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("lang", LANGS)
def test_screenshots(visit, base_url, lang, scheme):
    """Saved to artifacts/screenshots/ for a person to look at; the test checks the scheme was applied."""
    out = ARTIFACTS / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    v = visit(color_scheme=scheme, viewport={"width": 1280, "height": 900})
    for name in SCREENSHOT_PAGES:
        page = v.open(url_of(base_url, lang, name))
        applied = page.locator("body").get_attribute("data-md-color-scheme")
        assert applied == ("slate" if scheme == "dark" else "default")
        page.screenshot(path=str(out / f"{lang}-{name.split('.')[0]}-{scheme}.png"))


@pytest.fixture(scope="session", autouse=True)
def fresh_weight_log():
    log = ARTIFACTS / "page-weight.jsonl"
    if log.exists():
        log.unlink()
    yield
    if log.exists():
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        print(f"\npage weight (gzip / raw bytes, requests), {len(rows)} pages:")
        for r in sorted(rows, key=lambda r: -r["gzip_bytes"]):
            print(f"  {r['lang']}/{r['page']:<32} {r['gzip_bytes']:>9,} / {r['raw_bytes']:>9,}  {r['requests']}")


def annotated(lang: str, name: str) -> bool:
    """A page includes code that carries Material annotation markers ('# (1)!')."""
    text = (ROOT / "docs" / lang / name).read_text(encoding="utf-8")
    return any(re.search(r"#\s*\(\d+\)!", target_text(t)) for f in fences(text) for t in f.targets)


ANNOTATED = [(lang, name) for lang in LANGS for name in sorted(pages(lang)) if annotated(lang, name)]


@pytest.mark.parametrize("lang,name", ANNOTATED)
def test_code_annotations_render(visit, base_url, lang, name):
    """Annotation markers in snippets become Material's annotation buttons, not literal '# (1)!' text."""
    page = visit().open(url_of(base_url, lang, name))
    assert page.locator(".md-annotation").count() > 0, "annotations were not attached to their code block"
    assert not re.search(r"# \(\d+\)!", page.locator("article").inner_text())
