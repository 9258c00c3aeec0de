"""The real Material search box, driven as a reader drives it: shared by the browser tests that search the site."""

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from guidekit.pages import url_path

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
RESULT_LINKS = """
[...document.querySelectorAll('.md-search-result__item')].map(item =>
  [...item.querySelectorAll('a')].map(a => { const u = new URL(a.href); return u.pathname + u.hash; }))
"""


def search_pages(browser, base_url):
    """A context manager's worth of state: `open_search(lang)` returns one page per language, reused."""
    context = browser.new_context(service_workers="block")
    context.add_init_script(WATCH_WORKER)
    opened = {}

    def open_search(lang):
        if lang not in opened:
            page = context.new_page()
            page.goto(f"{base_url}/{url_path(lang, 'index.md')}", wait_until="networkidle")
            opened[lang] = page
        return opened[lang]

    return context, open_search


def run_query(page, query, paste=False):
    """Clear the box, type (or paste) the query, wait for the worker's answer; the links of each result item.

    Returns one list per result item, best first, each with the item's links (path + #fragment) in order.
    """
    box = page.locator("input.md-search__input")
    box.click()
    box.press("Control+a")
    box.press("Backspace")
    if paste:
        box.fill(query)  # one input event, as a paste makes it (forwarded to Material as a keyup)
    else:
        page.keyboard.type(query)  # Hangul arrives as committed text (as from an IME), Latin as key presses
    try:
        page.wait_for_function(ANSWERED, arg=query, timeout=5_000)
    except PlaywrightTimeout:
        sent = page.evaluate("searchLog.queries.at(-1)")
        shown = page.locator(".md-search-result__meta").inner_text()
        pytest.fail(f"{'pasted' if paste else 'typed'} {query!r}, but the search ran for {sent!r} and shows {shown!r}")
    return page.evaluate(RESULT_LINKS)
