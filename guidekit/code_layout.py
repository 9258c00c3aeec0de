"""Code blocks and Korean words as Chromium lays them out, measured by tests/site/test_every_page.py on every page.

A block in the content column shows 80 characters at 1280 px (Material's code font, 13.6 px, in DejaVu Sans Mono,
the widest of the monospace fonts readers get: Menlo has its metrics, SF Mono and Consolas are narrower), so
snippets/ruff.toml sets the programs' line length to 80 (tests/site/test_code_width.py checks the programs' lines without a
browser). Comments and strings the formatter cannot wrap are kept short by hand. Output (text) and shell (bash)
blocks, and the collapsed full programs, wrap their long lines in CSS (docs/stylesheets/extra.css) instead. Korean
text breaks lines between words, never inside one (extra.css: keep-all).
"""

# Every block laid out as a reader sees it once opened: every collapsed block open, the blocks of every tab shown, and
# no transitions (a colour scheme switched by guidekit/accessibility.py applies at once).
REVEAL = """() => {
  const style = document.createElement("style");
  style.textContent = `*, *::before, *::after { transition: none !important; animation: none !important; }
    .tabbed-set > .tabbed-content > .tabbed-block { display: block !important; }`;
  document.head.append(style);
  document.querySelectorAll("details").forEach((d) => (d.open = true));
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
