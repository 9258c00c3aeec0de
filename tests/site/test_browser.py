"""What a reader does on the site, in Debian's Chromium driven by Playwright against the built site on 127.0.0.1:
switch language, copy code, open the navigation on a phone; screenshots for a person to look at. What every page
must be is checked in one pass over the pages: tests/site/test_every_page.py."""

import re

import pytest
from visits import ARTIFACTS, Visit, url_of

from guidekit import ROOT
from guidekit.pages import LANGS, fences
from guidekit.sections import target_text

pytestmark = pytest.mark.browser


@pytest.fixture
def visit(browser, base_url):
    opened = []

    def open_visit(**context_args):
        opened.append(Visit(browser, base_url, **context_args))
        return opened[-1]

    yield open_visit
    for v in opened:
        v.close()


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
