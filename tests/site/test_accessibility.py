"""Accessibility of what appears only when used: search results, a code annotation, the language menu; and on a
desktop the header and sidebars, which the pass over every page (tests/site/test_every_page.py) leaves to the phone's drawer
(the same templates). Every rule of axe-core's WCAG 2.1 A and AA, in the views of guidekit/accessibility.py."""

import re

import pytest

from guidekit.accessibility import DESKTOP, DESKTOP_ONLY, RUN, VIEWS, axe_script, options, report, show
from guidekit.code_layout import REVEAL
from guidekit.pages import LANGS, fences, pages, url_path
from guidekit.sections import target_text

pytestmark = pytest.mark.browser


def annotated_page(lang):
    """A page whose code carries a Material annotation (a '# (1)!' marker in an included snippet)."""
    for name, path in sorted(pages(lang).items()):
        text = path.read_text(encoding="utf-8")
        if any(re.search(r"#\s*\(\d+\)!", target_text(t)) for f in fences(text) for t in f.targets):
            return name
    return None


@pytest.mark.parametrize("lang", LANGS)
def test_search_annotation_and_menus(browser, base_url, lang):
    context = browser.new_context(viewport=DESKTOP, service_workers="block")
    context.add_init_script(axe_script())
    page = context.new_page()
    found = []

    def check(what, within, views=VIEWS):
        for scheme, viewport in views:
            show(page, scheme, viewport)
            found.extend({**v, "view": f"{what}, {scheme} {viewport}"} for v in page.evaluate(RUN, [options(), within]))

    page.goto(f"{base_url}/{url_path(lang, 'index.md')}", wait_until="networkidle")
    page.evaluate(REVEAL)
    check("header and sidebars", DESKTOP_ONLY, VIEWS[:2])
    page.locator(".md-header__option .md-select").hover()
    check("language menu", ".md-select", VIEWS[:2])
    page.locator("input.md-search__input").click()
    page.keyboard.type("DDP")
    page.wait_for_selector(".md-search-result__item")
    check("search results", ".md-search")
    page.keyboard.press("Escape")

    name = annotated_page(lang)
    assert name, "no page has a code annotation to check"
    page.goto(f"{base_url}/{url_path(lang, name)}", wait_until="load")
    page.evaluate(REVEAL)
    show(page, "light", "desktop")
    page.locator(".md-annotation").first.click()
    page.wait_for_selector(".md-tooltip--active")
    check("an open code annotation", ".md-annotation", VIEWS[:2])
    context.close()
    assert not found, report(f"{lang}: search, annotation, menu", found)
