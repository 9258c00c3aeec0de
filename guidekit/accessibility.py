"""Accessibility checks in a browser tab, shared by tests/site/test_every_page.py (every page, four views) and
tests/site/test_accessibility.py (what appears only when used): axe-core's WCAG 2.1 A and AA rules.

axe-core comes from PyPI: axe-playwright-python ships its axe.min.js (the `test` extra of pyproject.toml).

A page is shown in four views in the same tab, by switching Material's colour scheme (the `data-md-color-scheme`
attribute, to which the site's dark colours are keyed) and the viewport. Collapsed <details> are opened and every tab
of a tabbed block shown (REVEAL), so what a reader opens is checked too. Run as it comes, axe would cost minutes of CPU
here: its cost grows with the boxes of a page, and a chapter has thousands of code tokens. So:
- The two rules that read colours (color-contrast, link-in-text-block) judge a look: the colour of a text, whether it
  is large (24px, or 18.66px and bold, asks 3:1 instead of 4.5:1), its shadow, the opacity and the backgrounds behind
  it, and for a link its decoration and the text around it. In each view the page's texts are grouped by look, and axe
  judges each look it has not passed in this run, on one element that has it, in place. A look passed once passes
  everywhere; one that failed is judged again on every page that has it, so each page reports its own elements, with
  how many have that look.
- The other rules (names, labels, lists, ARIA, focusable scrolling regions, ...) run on the whole page on a phone, and
  on a desktop on what a phone does not show (header, sidebars: tests/site/test_accessibility.py). Before they run, code
  tokens and lines (a <span> with a class or an id, and its text) are merged into their code block's text: those rules
  find nothing to judge in them.
- The page's content has the same colours at every width (the site's CSS changes only layout with the viewport), so
  on a phone the colour rules judge what is around the content: header, drawer, footer.
A11Y_FULL=1 runs axe as it comes: every rule on every element in every view.

docs/javascripts/accessibility.js and docs/stylesheets/extra.css hold what the site does to pass.
"""

import functools
import importlib.resources
import os
from collections import Counter

import pytest

TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
COLOUR_RULES = ["color-contrast", "link-in-text-block"]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
SCHEME = {"light": "default", "dark": "slate"}
# one change from each view to the next
VIEWS = [("light", "desktop"), ("dark", "desktop"), ("dark", "phone"), ("light", "phone")]
FULL = os.environ.get("A11Y_FULL") == "1"

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


@functools.cache
def axe_script() -> str:
    try:
        return (importlib.resources.files("axe_playwright_python") / "axe.min.js").read_text(encoding="utf-8")
    except ModuleNotFoundError:
        pytest.fail("axe-core is missing: pip install -e '.[test]' (axe-playwright-python ships it)")


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


def page_violations(page, judged: dict) -> list[dict]:
    """axe on a page already open on a desktop, REVEAL applied: the colour rules in four views (the looks not yet
    judged in this run), then every other rule on a phone; the tab is left as it was: light, desktop."""
    found = []
    for scheme, viewport in VIEWS:
        show(page, scheme, viewport)
        view = f"{scheme} {viewport}"
        if FULL:
            found += [{**v, "view": view} for v in page.evaluate(RUN, [options(), None])]
        else:
            found += [{**v, "view": view} for v in colour_rules(page, judged, around=viewport == "phone")]
    if not FULL:
        page.evaluate(MERGE_CODE)
        found += [{**v, "view": "light phone"} for v in page.evaluate(RUN, [options(skip=COLOUR_RULES), None])]
    show(page, "light", "desktop")
    return found
