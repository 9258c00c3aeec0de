"""Accessibility: axe-core's WCAG 2.1 A and AA rules find nothing on any page, light and dark, desktop and phone.

axe-core comes from PyPI: axe-playwright-python ships its axe.min.js (the `test` extra of pyproject.toml).

Each page is loaded once and shown in four views in the same tab, by switching Material's colour scheme (the
`data-md-color-scheme` attribute, to which the site's dark colours are keyed) and the viewport. Collapsed <details> are
opened and every tab of a tabbed block shown, so what a reader opens is checked too. Run as it comes, axe would cost
minutes of CPU here: its cost grows with the boxes of a page, and a chapter has thousands of code tokens. So:
- The two rules that read colours (color-contrast, link-in-text-block) judge a look: the colour of a text, whether it
  is large (24px, or 18.66px and bold, asks 3:1 instead of 4.5:1), its shadow, the opacity and the backgrounds behind
  it, and for a link its decoration and the text around it. In each view the page's texts are grouped by look, and axe
  judges each look it has not passed in this run, on one element that has it, in place. A look passed once passes
  everywhere; one that failed is judged again on every page that has it, so each page reports its own elements, with
  how many have that look.
- The other rules (names, labels, lists, ARIA, focusable scrolling regions, ...) run on the whole page on a phone, and
  on a desktop on what a phone does not show (header, sidebars). Before they run, code tokens and lines (a <span> with
  a class or an id, and its text) are merged into their code block's text: those rules find nothing to judge in them.
- The page's content has the same colours at every width (the site's CSS changes only layout with the viewport), so
  on a phone the colour rules judge what is around the content: header, drawer, footer.
A11Y_FULL=1 runs axe as it comes: every rule on every element in every view.

test_search_annotation_and_menus checks what appears only when used: search results, a code annotation, the language
menu. tests/test_browser.py shows how pages are visited; docs/javascripts/accessibility.js and
docs/stylesheets/extra.css hold what the site does to pass.
"""

import base64
import importlib.resources
import json
import os
import re
from collections import Counter
from urllib.parse import urlsplit

import pytest

from guidekit.pages import LANGS, fences, page_files, pages, site_path, url_path
from guidekit.sections import target_text

pytestmark = pytest.mark.browser

TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
COLOUR_RULES = ["color-contrast", "link-in-text-block"]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
SCHEME = {"light": "default", "dark": "slate"}
# one change from each view to the next
VIEWS = [("light", "desktop"), ("dark", "desktop"), ("dark", "phone"), ("light", "phone")]
FULL = os.environ.get("A11Y_FULL") == "1"

PAGES = [(lang, name) for lang in LANGS for name in sorted(page_files(lang))] + [("ko", "404.html")]

# No transitions (a switched scheme applies at once), every collapsed block open and every tab shown.
PREPARE = """() => {
  const style = document.createElement("style");
  style.textContent = `*, *::before, *::after { transition: none !important; animation: none !important; }
    .tabbed-set > .tabbed-content > .tabbed-block { display: block !important; }`;
  document.head.append(style);
  document.querySelectorAll("details").forEach((d) => (d.open = true));
}"""

# [look, how many elements have it] for the visible texts of the page (outside its content if `around`); one element
# of each look is kept for JUDGE.
LOOKS = r"""(around) => {
  const behind = new Map();
  const backgrounds = (el) => {
    if (!el) return "";
    if (!behind.has(el)) {
      const s = getComputedStyle(el);
      const image = s.backgroundImage === "none" ? "" : s.backgroundImage.slice(0, 80);
      const own = [s.backgroundColor, image, s.opacity, s.filter, s.mixBlendMode].join(" ");
      const clear = own === "rgba(0, 0, 0, 0)  1 none normal";
      const opaque = s.backgroundColor.startsWith("rgb(") && s.opacity === "1";
      const under = opaque ? "" : backgrounds(el.parentElement);
      behind.set(el, clear ? under : opaque ? own : `${own} > ${under}`);
    }
    return behind.get(el);
  };
  const large = (s) => parseFloat(s.fontSize) >= 24 || (parseFloat(s.fontSize) >= 18.66 && parseInt(s.fontWeight) >= 700);
  const lookOf = (el) => {
    const s = getComputedStyle(el);
    let look = [s.color, large(s) ? "large" : "text", s.textShadow, backgrounds(el)].join(" | ");
    const link = el.closest("a[href]");
    if (link) {
      const text = getComputedStyle(link.parentElement);
      look += ` | link ${getComputedStyle(link).textDecorationLine} in ${text.color} ${text.display}`;
    }
    return look;
  };
  const skip = (node) => around && node.nodeType === 1 && node.classList.contains("md-content");
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT, {
    acceptNode: (node) => (skip(node) ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
  });
  const groups = new Map();
  let last = null;
  for (let node; (node = walker.nextNode()); ) {
    if (node.nodeType !== 3 || !node.data.trim()) continue;
    const el = node.parentElement;
    if (el === last) continue;
    last = el;
    if (!el.checkVisibility({ opacityProperty: true, visibilityProperty: true })) continue;
    const look = lookOf(el);
    const group = groups.get(look);
    if (group) group.count += 1;
    else groups.set(look, { el, count: 1 });
  }
  window.__looks = { lookOf, samples: [...groups.values()].map((g) => g.el), counts: new Map([...groups].map(([k, g]) => [k, g.count])) };
  return [...groups].map(([look, g]) => [look, g.count]);
}"""

FOUND = """(v) => v.nodes.map((n) => ({ rule: v.id, target: n.target.join(" "), html: n.html.slice(0, 160),
  why: n.any.concat(n.all, n.none).map((c) => c.message).join("; "), element: n.element }))"""

JUDGE = f"""async ([picks, options]) => {{
  const looks = window.__looks;
  const results = await axe.run({{ include: picks.map((i) => looks.samples[i]) }}, {{ ...options, elementRef: true }});
  return results.violations.flatMap({FOUND}).map(({{ element, ...v }}) => {{
    const look = looks.lookOf(element);
    return {{ ...v, look, count: looks.counts.get(look) || 1 }};
  }});
}}"""

# axe on the page (or on the elements `within` selects), element references dropped
RUN = f"""async ([options, within]) => {{
  const context = within ? {{ include: [...document.querySelectorAll(within)] }} : document;
  return (await axe.run(context, {{ ...options, elementRef: true }})).violations.flatMap({FOUND})
    .map(({{ element, ...v }}) => ({{ ...v, count: 1 }}));
}}"""

# what a phone shows in its drawer, the same templates
DESKTOP_ONLY = ".md-header, .md-tabs, .md-sidebar"

MERGE_CODE = """() => {
  for (const token of document.querySelectorAll("pre > code > span > span")) token.replaceWith(...token.childNodes);
  for (const line of document.querySelectorAll("pre > code > span[id]")) line.replaceWith(...line.childNodes);
}"""

NEXT_FRAMES = "async () => { for (let i = 0; i < 3; i++) await new Promise((done) => requestAnimationFrame(done)); }"


def options(rules=None, skip=()):
    chosen = {"runOnly": {"type": "rule", "values": rules}} if rules else {"runOnly": {"type": "tag", "values": TAGS}}
    return {**chosen, "rules": {rule: {"enabled": False} for rule in skip}, "resultTypes": ["violations"]}


@pytest.fixture(scope="module")
def axe_script():
    try:
        return (importlib.resources.files("axe_playwright_python") / "axe.min.js").read_text(encoding="utf-8")
    except ModuleNotFoundError:
        pytest.fail("axe-core is missing: pip install -e '.[test]' (axe-playwright-python ships it)")


def empty_search_index(context, page, built_site):
    """Each page gets its language's search index without the pages: Material's worker would build the real one on
    every page load (half of a load's CPU time), and nothing here searches. A failed request would not do: Material's
    code blocks then stop taking focus. Request routing would turn the HTTP cache off: Chrome's Fetch domain does not."""
    cdp = context.new_cdp_session(page)
    bodies = {}
    for lang in LANGS:
        index = built_site / url_path(lang, "index.md") / "search" / "search_index.json"
        config = json.loads(index.read_text(encoding="utf-8"))["config"]
        body = json.dumps({"config": config, "docs": []}).encode()
        bodies[f"/{url_path(lang, 'index.md')}search/search_index.json"] = base64.b64encode(body).decode()

    def fulfil(event):
        path = urlsplit(event["request"]["url"]).path.removeprefix(site_path())
        headers = [{"name": "Content-Type", "value": "application/json"}]
        request = {"requestId": event["requestId"], "responseCode": 200, "body": bodies[path]}
        cdp.send("Fetch.fulfillRequest", {**request, "responseHeaders": headers})

    cdp.on("Fetch.requestPaused", fulfil)
    cdp.send("Fetch.enable", {"patterns": [{"urlPattern": "*/search/search_index.json"}]})


@pytest.fixture(scope="module")
def tab(browser, base_url, built_site, axe_script):
    """One tab for every page (a context per page would start a renderer each time), axe in every page it opens."""
    context = browser.new_context(viewport=DESKTOP, service_workers="block")
    context.add_init_script(axe_script)
    page = context.new_page()
    empty_search_index(context, page, built_site)
    yield page
    context.close()


@pytest.fixture(scope="module")
def judged():
    """The looks the colour rules judged in this run: look -> passed."""
    return {}


def show(page, scheme, viewport):
    page.evaluate(f"document.body.setAttribute('data-md-color-scheme', '{SCHEME[scheme]}')")
    if page.viewport_size != (DESKTOP if viewport == "desktop" else PHONE):
        page.set_viewport_size(DESKTOP if viewport == "desktop" else PHONE)
        # a resize reaches Material's observers and docs/javascripts/accessibility.js within three frames
        page.evaluate(NEXT_FRAMES)


def colour_rules(page, judged, around=False):
    looks = page.evaluate(LOOKS, around)
    picks = [i for i, (look, _) in enumerate(looks) if not judged.get(look)]
    if not picks:
        return []
    found = page.evaluate(JUDGE, [picks, options(COLOUR_RULES)])
    failed = {v["look"] for v in found}
    for i in picks:
        judged[looks[i][0]] = looks[i][0] not in failed
    for look in failed:
        judged[look] = False
    return found


def report(where, found):
    lines = [f"{len(found)} WCAG 2.1 A/AA violations on {where} (axe-core):"]
    lines += [f"  {rule}: {n}" for rule, n in sorted(Counter(v["rule"] for v in found).items())]
    for v in found:
        same = f", and {v['count'] - 1} more elements with this look" if v["count"] > 1 else ""
        lines.append(f"- {v['rule']} [{v['view']}] {v['target']}{same}\n    {v['html']}\n    {v['why']}")
    return "\n".join(lines)


@pytest.mark.parametrize("lang,name", PAGES)
def test_no_wcag_violations(tab, base_url, judged, lang, name):
    path = "404.html" if name == "404.html" else url_path(lang, name)
    tab.goto(f"{base_url}/{path}", wait_until="load")  # on a desktop: where the previous page ended
    tab.evaluate(PREPARE)
    found = []
    for scheme, viewport in VIEWS:
        show(tab, scheme, viewport)
        view = f"{scheme} {viewport}"
        if FULL:
            found += [{**v, "view": view} for v in tab.evaluate(RUN, [options(), None])]
        else:
            found += [{**v, "view": view} for v in colour_rules(tab, judged, around=viewport == "phone")]
    if not FULL:
        tab.evaluate(MERGE_CODE)
        found += [{**v, "view": "light phone"} for v in tab.evaluate(RUN, [options(skip=COLOUR_RULES), None])]
    show(tab, "light", "desktop")
    assert not found, report(f"{lang}/{name}", found)


def annotated_page(lang):
    """A page whose code carries a Material annotation (a '# (1)!' marker in an included snippet)."""
    for name, path in sorted(pages(lang).items()):
        text = path.read_text(encoding="utf-8")
        if any(re.search(r"#\s*\(\d+\)!", target_text(t)) for f in fences(text) for t in f.targets):
            return name
    return None


@pytest.mark.parametrize("lang", LANGS)
def test_search_annotation_and_menus(browser, base_url, axe_script, lang):
    """What a reader opens: search results, a code annotation, the language menu; and on a desktop the header and
    sidebars, which the page test leaves to the phone's drawer (the same templates). Every rule, four views."""
    context = browser.new_context(viewport=DESKTOP, service_workers="block")
    context.add_init_script(axe_script)
    page = context.new_page()
    found = []

    def check(what, within, views=VIEWS):
        for scheme, viewport in views:
            show(page, scheme, viewport)
            found.extend({**v, "view": f"{what}, {scheme} {viewport}"} for v in page.evaluate(RUN, [options(), within]))

    page.goto(f"{base_url}/{url_path(lang, 'index.md')}", wait_until="networkidle")
    page.evaluate(PREPARE)
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
    page.evaluate(PREPARE)
    show(page, "light", "desktop")
    page.locator(".md-annotation").first.click()
    page.wait_for_selector(".md-tooltip--active")
    check("an open code annotation", ".md-annotation", VIEWS[:2])
    context.close()
    assert not found, report(f"{lang}: search, annotation, menu", found)
