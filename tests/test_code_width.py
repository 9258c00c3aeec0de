"""Code that fits: on a desktop (1280×800) no code block scrolls sideways, on any page, in either language; and
Korean text breaks lines between words, never inside one (docs/stylesheets/extra.css: keep-all).

A block in the content column shows 80 characters at 1280 px (Material's code font, 13.6 px, in DejaVu Sans Mono,
the widest of the monospace fonts readers get: Menlo has its metrics, SF Mono and Consolas are narrower), so
snippets/ruff.toml sets the programs' line length to 80. Comments and strings the formatter cannot wrap are kept
short by hand. Output (text) and shell (bash) blocks, and the collapsed full programs, wrap their long lines in CSS
(docs/stylesheets/extra.css) instead.
"""

import re
import unicodedata

import pytest

from guidekit import ROOT
from guidekit.pages import LANGS, page_files, url_path
from guidekit.spec import DECLARATION, HEADER_LINES

DESKTOP = {"width": 1280, "height": 800}
# Python 3.10 has no tomllib: the one setting, read with a pattern
RUFF_TOML = (ROOT / "snippets" / "ruff.toml").read_text(encoding="utf-8")
LINE_LENGTH = int(re.search(r"^line-length\s*=\s*(\d+)", RUFF_TOML, re.M)[1])

# Every block laid out as a reader sees it once opened: the blocks of every tab, the collapsed full programs.
REVEAL = """() => {
    for (const details of document.querySelectorAll(".md-content details")) details.open = true;
    const style = document.createElement("style");
    style.textContent = ".md-content .tabbed-block { display: block !important; }";
    document.head.append(style);
}"""

# For each block: how far its content reaches past the box that scrolls it (Material scrolls the <code> inside a
# <pre>; a <pre> that does not scroll counts when nothing inside it does, its text would spill out), the heading it
# sits under, its title (a program's file) and the start of its longest line. A code annotation's tooltip may reach
# past a <pre> that does not scroll: it is laid out there, hidden, and does not make the block scroll.
MEASURE = """() => [...document.querySelectorAll(".md-content pre")].map((pre, index) => {
    const scrolls = (box) => ["auto", "scroll"].includes(getComputedStyle(box).overflowX);
    const scrollers = [pre, ...pre.querySelectorAll(":scope > code")].filter(scrolls);
    const boxes = scrollers.length ? scrollers : [pre];
    const overflow = Math.max(...boxes.map((box) => box.scrollWidth - box.clientWidth));
    let heading = null;
    for (const h of document.querySelectorAll(".md-content h1[id], .md-content h2[id], .md-content h3[id]")) {
        if (h.compareDocumentPosition(pre) & Node.DOCUMENT_POSITION_FOLLOWING) heading = h.id;
    }
    const block = pre.closest(".highlight");
    const title = block?.querySelector(":scope > .filename")?.textContent ?? "";
    const kind = [...(block?.classList ?? [])].find((c) => c.startsWith("language-")) ?? "";
    const lines = pre.textContent.split("\\n");
    const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), "");
    return {index, overflow, heading, title, kind, longest: longest.trim().slice(0, 60), width: pre.clientWidth};
})"""


# Words of Korean prose (spaces delimit them) whose letters sit on more than one line though they fit their box.
BROKEN_WORDS = """() => {
    const skip = "pre, code, script, style, .md-annotation__index, .headerlink";
    const walker = document.createTreeWalker(document.querySelector(".md-content"), NodeFilter.SHOW_TEXT, {
        acceptNode: (node) => node.parentElement.closest(skip) ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT,
    });
    const range = document.createRange(), broken = [];
    const rects = (start, end) => {
        range.setStart(walker.currentNode, start);
        range.setEnd(walker.currentNode, end);
        return [...range.getClientRects()].filter((r) => r.width > 0);
    };
    for (let node; (node = walker.nextNode()); ) {
        const box = node.parentElement.closest("td, th, li, p, h1, h2, h3, h4, summary, div");
        const style = getComputedStyle(box);
        const room = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
        // a word is what spaces delimit (keep-all keeps "FSDP2·텐서" whole); only a break between two syllables counts
        for (const word of node.data.matchAll(/\\S+/g)) {
            const wide = rects(word.index, word.index + word[0].length).reduce((sum, r) => sum + r.width, 0);
            for (const run of word[0].matchAll(/[\\uac00-\\ud7a3]{2,}/g)) {
                const start = word.index + run.index;
                const lines = new Set(rects(start, start + run[0].length).map((r) => Math.round(r.top)));
                if (lines.size > 1 && wide < room) broken.push(run[0] + " in <" + box.tagName.toLowerCase() + ">");
            }
        }
    }
    return broken;
}"""


@pytest.fixture(scope="module")
def desktop(browser):
    context = browser.new_context(viewport=DESKTOP, service_workers="block")
    context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/]).*"), lambda route: route.abort())
    yield context.new_page()
    context.close()


@pytest.mark.browser
@pytest.mark.parametrize("lang", LANGS)
def test_no_code_block_scrolls_sideways_on_a_desktop(desktop, base_url, lang):
    """One page load per page: the code blocks' widths, and (Korean) words broken across lines."""
    overflowing, measured, broken = [], 0, []
    for name in sorted(page_files(lang)):
        desktop.goto(f"{base_url}/{url_path(lang, name)}", wait_until="load")
        if lang == "ko":
            broken += [f"{name}: {word}" for word in desktop.evaluate(BROKEN_WORDS)]
        desktop.evaluate(REVEAL)
        blocks = desktop.evaluate(MEASURE)
        measured += sum(b["width"] > 0 for b in blocks)
        overflowing += [
            f"{lang}/{name}#{b['heading'] or ''} block {b['index'] + 1} {b['kind']} {b['title']}: "
            f"{b['overflow']} px too wide ({b['longest']!r}...)"
            for b in blocks
            if b["overflow"] > 0
        ]
    assert measured > 300, f"only {measured} code blocks measured: did the page structure change?"
    assert not overflowing, f"{len(overflowing)} code blocks scroll sideways at 1280 px:\n" + "\n".join(overflowing)
    assert not broken, f"{len(broken)} Korean words broken across lines at 1280 px:\n" + "\n".join(broken[:40])


def columns(line: str) -> int:
    """Columns a line takes as ruff counts them: East Asian wide characters (Hangul) take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def test_program_lines_fit_the_code_column():
    """The static half, without a browser: every line of a program fits, but its declarations (`# launch: ...`)."""
    long = []
    for path in sorted((ROOT / "snippets").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            declaration = number <= HEADER_LINES and DECLARATION.match(line)
            if columns(line) > LINE_LENGTH and not declaration:
                long.append(f"{path.relative_to(ROOT)}:{number}: {columns(line)} columns")
    assert not long, f"{len(long)} lines longer than {LINE_LENGTH} (snippets/ruff.toml):\n" + "\n".join(long)
