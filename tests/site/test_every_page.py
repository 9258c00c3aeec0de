"""Every page, opened once in Debian's Chromium (driven by Playwright) against the built site on 127.0.0.1, as a reader
opens it into an empty cache, and checked for all that a page must be:
- it loads offline: no console error, no request leaving 127.0.0.1, no broken image, a notebook's outputs shown;
- its weight (bytes transferred, gzip as GitHub Pages serves text) stays under the budget, and is logged;
- its code annotations became Material's annotation buttons;
- (Korean) no word is broken across lines at 1280 px (guidekit/code_layout.py);
- no code block scrolls sideways at 1280 px, with every collapsed block open and every tab shown;
- axe-core finds no WCAG 2.1 A/AA violation, light and dark, desktop and phone (guidekit/accessibility.py).
One page load does all of it: a load, and every view after it a new layout of thousands of highlighted code spans,
is most of what the browser tests cost (tests/MEASUREMENTS.md). A page's problems are reported together, whichever
check finds them.
"""

import json
import re

import pytest
from visits import ARTIFACTS, Visit

from guidekit import ROOT
from guidekit.accessibility import DESKTOP, page_violations, report
from guidekit.accessibility import axe_script as axe_core
from guidekit.code_layout import BROKEN_WORDS, MEASURE, REVEAL
from guidekit.pages import LANGS, fences, page_files, url_path
from guidekit.sections import target_text

pytestmark = pytest.mark.browser

# Bytes a reader downloads for one page into an empty cache, text gzip-compressed as GitHub Pages serves it.
# What goes into it: Material's CSS + JS + search worker, the search index of the page's language (loaded on every
# page; code listings are kept out of it, theme/hooks/full_programs.py), the page's HTML (tests/MEASUREMENTS.md has
# the figures). 500 KB leaves room for growth, and catches a stray image or a font fetched by mistake.
PAGE_BUDGET_BYTES = 500_000
WEIGHT_LOG = ARTIFACTS / "page-weight.jsonl"

# The 404 page is rendered once, after the last language (English) is built (mkdocs-static-i18n#284): its menus are
# English, its search Korean (theme/hooks/language_links.py)
PAGES = [(lang, name) for lang in LANGS for name in sorted(page_files(lang))] + [("en", "404.html")]


def source_of(lang, name) -> str:
    return "" if name == "404.html" else (ROOT / "docs" / lang / name).read_text(encoding="utf-8")


def annotated(lang: str, name: str) -> bool:
    """A page includes code that carries Material annotation markers ('# (1)!')."""
    text = source_of(lang, name) if name.endswith(".md") else ""
    return any(re.search(r"#\s*\(\d+\)!", target_text(t)) for f in fences(text) for t in f.targets)


@pytest.fixture(scope="module")
def tab(browser, base_url):
    """One tab for every page (a context per page would start a renderer each time), its HTTP cache
    off, so each page arrives whole as into an empty cache; axe-core in every page it opens."""
    v = Visit(browser, base_url, viewport=DESKTOP)
    v.context.add_init_script(axe_core())
    cdp = v.context.new_cdp_session(v.page)
    cdp.send("Network.enable")
    cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
    yield v
    v.close()


@pytest.fixture(scope="module")
def judged():
    """The looks axe's colour rules judged in this run: look -> passed (guidekit/accessibility.py)."""
    return {}


@pytest.fixture(scope="module")
def weight_log():
    WEIGHT_LOG.parent.mkdir(exist_ok=True)
    WEIGHT_LOG.unlink(missing_ok=True)
    yield
    if WEIGHT_LOG.exists():
        rows = [json.loads(line) for line in WEIGHT_LOG.read_text().splitlines()]
        print(f"\npage weight (gzip / raw bytes, requests), {len(rows)} pages:")
        for r in sorted(rows, key=lambda r: -r["gzip_bytes"]):
            print(f"  {r['lang']}/{r['page']:<32} {r['gzip_bytes']:>9,} / {r['raw_bytes']:>9,}  {r['requests']}")


def load(tab, base_url, lang, name) -> list[str]:
    """Open the page; what is wrong with its loading and its weight."""
    tab.forget()
    path = "404.html" if name == "404.html" else url_path(lang, name)
    # The search index is the last request of a page: Material's bundle starts the search worker once it runs, and
    # the worker fetches it (images and styles come before the load event; fonts are the system's)
    is_index = re.compile(r"/search/search_index\.json$").search
    with tab.page.expect_request_finished(lambda request: is_index(request.url)) as indexed:
        tab.page.goto(f"{base_url}/{path}", wait_until="load")
    index = indexed.value.url
    page, problems = tab.page, []
    if page.locator("html").get_attribute("lang") != lang:
        problems.append(f"<html lang> is {page.locator('html').get_attribute('lang')!r}, not {lang!r}")
    problems += [f"request leaving 127.0.0.1: {url}" for url in tab.outside]
    problems += [f"console error: {error}" for error in tab.errors]
    broken = page.evaluate("[...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")
    problems += [f"image that did not load: {src}" for src in broken]
    if name.endswith(".ipynb") and page.locator(".jp-OutputArea-output").count() == 0:
        problems.append("the notebook's outputs are not shown")
    total = sum(tab.bytes.values())
    row = {"lang": lang, "page": name, "gzip_bytes": total, "raw_bytes": sum(tab.raw_bytes.values())}
    with open(WEIGHT_LOG, "a", encoding="utf-8") as out:
        out.write(json.dumps({**row, "requests": len(tab.bytes)}) + "\n")
    if index not in tab.bytes:
        problems.append("the search index a page loads did not count towards its weight")
    if total >= PAGE_BUDGET_BYTES:
        problems.append(f"{total:,} bytes (gzip) transferred, budget {PAGE_BUDGET_BYTES:,}")
    return problems


def annotations(page, lang, name) -> list[str]:
    """Annotation markers in snippets become Material's annotation buttons, not literal '# (1)!' text."""
    if not annotated(lang, name):
        return []
    problems = []
    if page.locator(".md-annotation").count() == 0:
        problems.append("code annotations were not attached to their code block")
    if re.search(r"# \(\d+\)!", page.locator("article").inner_text()):
        problems.append("an annotation marker '# (n)!' is shown as text")
    return problems


def code_widths(page, lang, name) -> list[str]:
    """Every code block, opened, fits 1280 px; the measure found the blocks the page's source has."""
    blocks = page.evaluate(MEASURE)
    problems = [
        f"code block {b['index'] + 1} {b['kind']} {b['title']} under #{b['heading'] or ''} is {b['overflow']} px "
        f"too wide at 1280 px ({b['longest']!r}...)"
        for b in blocks
        if b["overflow"] > 0
    ]
    if fences(source_of(lang, name)) and not any(b["width"] > 0 for b in blocks):
        problems.append("the page's source has code blocks, but none was measured: did the page structure change?")
    return problems


@pytest.mark.parametrize("lang,name", PAGES)
def test_page(tab, base_url, judged, weight_log, lang, name):
    problems = load(tab, base_url, lang, name)
    page = tab.page
    problems += annotations(page, lang, name)
    if lang == "ko":
        problems += [f"Korean word broken across lines at 1280 px: {word}" for word in page.evaluate(BROKEN_WORDS)]
    page.evaluate(REVEAL)
    problems += code_widths(page, lang, name)
    found = page_violations(page, judged)
    if found:
        problems.append(report(f"{lang}/{name}", found))
    assert not problems, f"{lang}/{name}: {len(problems)} problems\n" + "\n".join(problems)
