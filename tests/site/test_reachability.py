"""No page is an island: every page of a chapter is linked from at least one page of another chapter, so a reader who
meets its problem elsewhere finds it. The home page and the error index link nearly everything, so their links do
not count; neither does the nav."""

import posixpath
import re

import pytest

from guidekit.pages import LANGS, nav, notebook_cells, notebooks, pages

NOT_COUNTED = {"index.md", "errors.md"}  # pages whose links reach every chapter by design
LINK = re.compile(r"\]\(([^)\s#]*)(?:#[^)\s]*)?(?:\s+\"[^\"]*\")?\)")


def chapters() -> dict[str, str]:
    """page -> the nav section (chapter) it belongs to."""
    found, section = {}, ""
    for label, page, depth in nav():
        if page is None and depth == 0:
            section = label
        elif page is not None:
            found[page] = section if depth > 0 else page
    return found


def links_of(lang: str) -> dict[str, set[str]]:
    """page -> the pages of the same language it links (relative links, resolved; anchors dropped)."""
    texts = {name: path.read_text(encoding="utf-8") for name, path in pages(lang).items()}
    for name, path in notebooks(lang).items():
        texts[name] = "\n".join(source for kind, source in notebook_cells(path) if kind == "markdown")
    found = {}
    for name, text in texts.items():
        here = posixpath.dirname(name)
        targets = {posixpath.normpath(posixpath.join(here, t)) for t in LINK.findall(text) if t and "://" not in t}
        found[name] = {t for t in targets if t.endswith((".md", ".ipynb"))}
    return found


def islands(lang: str, chapter_of: dict[str, str], links: dict[str, set[str]]) -> list[str]:
    reached = {
        target
        for source, targets in links.items()
        if source not in NOT_COUNTED
        for target in targets
        if chapter_of.get(target) != chapter_of.get(source)
    }
    return sorted(page for page in chapter_of if page not in NOT_COUNTED and page not in reached)


@pytest.mark.parametrize("lang", LANGS)
def test_every_chapter_page_is_linked_from_another_chapter(lang):
    found = islands(lang, chapters(), links_of(lang))
    assert not found, f"{lang}: no page outside its chapter (home and error index aside) links {found}"


def test_an_island_is_found():
    chapter_of = {"a.md": "A", "b.md": "A", "c.md": "B", "index.md": "index.md"}
    links = {"a.md": {"b.md"}, "b.md": {"c.md"}, "c.md": set(), "index.md": {"a.md", "b.md", "c.md"}}
    assert islands("ko", chapter_of, links) == ["a.md", "b.md"]  # b.md's link from a.md is inside its chapter
    links["c.md"] = {"a.md"}
    assert islands("ko", chapter_of, links) == ["b.md"]
