"""The reader's way in: the home page starts the reader on its first screen, names every chapter within the first
two screens of a phone, and turns the questions readers come with into links; the nav follows the reading order and
ends with the conclusion; what ran where is counted by the build, on its own page."""

import re
import sys

import pytest

from guidekit import ROOT
from guidekit.pages import LANGS, chapter_map, nav, nav_translations, page_files, pages, url_path
from guidekit.spec import all_snippets

sys.path.insert(0, str(ROOT / "theme" / "hooks"))
import verified_table  # a hook, imported as MkDocs imports it: its folder on the path

HOME = "index.md"
HANGUL = re.compile(r"[\uac00-\ud7a3]")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
# What the first screens must hold: (viewport, is a phone)
SCREENS = {"desktop": ({"width": 1280, "height": 800}, False), "phone": ({"width": 390, "height": 844}, True)}
# The questions readers come with, and the page that answers each, in the order the home page asks them
QUESTIONS = [
    "conclusion.md",  # which one to use: the choice table
    "performance.ipynb",  # I added GPUs and it isn't faster
    "large-models/index.md",  # my model doesn't fit
    "debugging.md",  # my job hangs
    "torchrun.md",  # several nodes
    "errors.md",  # an error message
    "scaling/compile.md",  # faster steps, longer sequences
    "fault-tolerance.md",  # survive a failure
    "scaling/async-checkpoint.md",  # saving a checkpoint stalls training
    "scaling/variable-length.md",  # the loss changes with accumulation or the number of GPUs
    "job.md",  # all of it in one training job
]


def nav_pages() -> list[str]:
    return [page for _, page, _ in nav() if page]


def section(lang: str, heading_id: str) -> str:
    """The Markdown of one `## ... { #id }` section of the home page."""
    text = pages(lang)[HOME].read_text(encoding="utf-8")
    match = re.search(rf"^## [^\n]*\{{ #{heading_id} \}}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"{lang}/{HOME} has no section #{heading_id}"
    return match[1]


def links(markdown: str) -> list[str]:
    return [target for target in LINK.findall(markdown) if "://" not in target]


@pytest.mark.parametrize("lang", LANGS)
def test_the_map_links_every_page_of_the_nav_in_its_order(lang):
    """On a phone the sidebar hides behind a button: the home page's map is the only map, so it misses no page
    (the error index and the glossary included) and lists them in the reading order of the nav. The map is made
    from the nav by a Markdown extension (guidekit/markdown.py): the page holds only its placeholder."""
    assert section(lang, "chapters").strip() == f"<!-- chapter-map {lang} -->"
    listed = list(dict.fromkeys(links(chapter_map(lang))))
    expected = [page for page in nav_pages() if page != HOME]
    assert listed == expected, (
        f"{lang}: the map lacks {sorted(set(expected) - set(listed))}, has {sorted(set(listed) - set(expected))}"
        f"{'' if set(listed) != set(expected) else ', in another order than the nav'}"
    )


@pytest.mark.parametrize("lang", LANGS)
def test_the_questions_link_the_chapters_that_answer_them(lang):
    asked = links(section(lang, "questions"))
    answered = [page for page in asked if page in QUESTIONS]
    assert list(dict.fromkeys(answered)) == QUESTIONS, f"{lang}: the questions link {asked}"


def test_both_languages_ask_the_same_questions():
    first, *others = LANGS
    for lang in others:
        assert links(section(lang, "questions")) == links(section(first, "questions"))


def test_the_nav_follows_the_reading_order_and_ends_with_the_conclusion():
    """Every page is in the nav once, the conclusion last (a reader who follows "next" never finds chapters after
    the end), and every Korean label has its English name."""
    entries = nav()
    listed = [page for _, page, _ in entries if page]
    assert listed[0] == HOME and listed[-1] == "conclusion.md", listed
    assert sorted(listed) == sorted(set(listed)) == sorted(page_files("ko")), (
        "the nav and docs/ko/ hold different pages"
    )
    for page in ("why-multi-gpu.md", "ddp.md", "training-loop.md", "torchrun.md"):  # the reading path of the home
        assert listed.index(page) < listed.index("large-models/index.md"), page
    english = nav_translations("en")
    untranslated = [label for label, _, _ in entries if HANGUL.search(label) and label not in english]
    assert not untranslated, f"nav labels without an English name (nav_translations): {untranslated}"


def test_the_verified_table_has_a_row_per_program_and_the_summary_counts_them():
    """The table of what ran where (on its own page) and the one-line summary the home page shows: counted by the
    hook from the manifest and the programs' declarations, never typed."""
    for lang in LANGS:
        rows = verified_table.table(lang, ROOT).splitlines()[2:]
        assert len(rows) == len(all_snippets(ROOT)), f"{lang}: {len(rows)} rows"
        figures = verified_table.counts(ROOT)
        summary = verified_table.summary(lang, ROOT)
        for name in ("programs", "cpu", "gpu"):
            assert str(figures[name]) in summary, f"{lang}: {name}={figures[name]} not in {summary!r}"
        assert figures["programs"] == len(all_snippets(ROOT)) and 0 < figures["cpu"] <= figures["programs"]
    for name in (HOME, "verified.md"):
        for lang in LANGS:
            assert verified_table.SUMMARY in pages(lang)[name].read_text(encoding="utf-8"), f"{lang}/{name}"
    for lang in LANGS:
        assert verified_table.PLACEHOLDER in pages(lang)["verified.md"].read_text(encoding="utf-8")
        assert verified_table.PLACEHOLDER not in pages(lang)[HOME].read_text(encoding="utf-8")


@pytest.mark.parametrize("lang", LANGS)
def test_the_built_home_shows_the_summary_and_links_the_table(built_site, lang):
    home = (built_site / url_path(lang, HOME) / "index.html").read_text(encoding="utf-8")
    summary = verified_table.summary(lang, ROOT)
    assert summary.split(". ")[0] in re.sub(r"\s+", " ", home), f"{lang}: the summary is not on the home page"
    assert 'href="verified/"' in home
    table = (built_site / url_path(lang, "verified.md") / "index.html").read_text(encoding="utf-8")
    assert table.count("<tr>") == len(all_snippets(ROOT)) + 1


def box(page, selector: str) -> dict:
    found = page.locator(selector)
    assert found.count() == 1, f"{selector}: {found.count()} elements"
    return found.bounding_box()


@pytest.mark.browser
@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("lang", LANGS)
def test_start_link_and_map_are_on_the_first_screens(browser, base_url, lang, screen):
    """Desktop 1280×800 and phone 390×844: the start-here link is whole on the first screen; the chapter map
    begins on the first screen and ends within the first two; the questions begin within the first two."""
    viewport, phone = SCREENS[screen]
    context = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone, service_workers="block")
    try:
        page = context.new_page()
        page.goto(f"{base_url}/{url_path(lang, HOME)}", wait_until="networkidle")
        height = viewport["height"]
        start = box(page, "article a#start-here")
        assert page.locator("article a#start-here").is_visible()
        assert start["y"] >= 0 and start["y"] + start["height"] <= height, f"start link at {start}"
        heading, chapters = box(page, "article h2#chapters"), box(page, "article h2#chapters + ul")
        assert heading["y"] < height, f"the map begins {heading['y'] / height:.2f} screens down"
        end = chapters["y"] + chapters["height"]
        assert end <= 2 * height, f"the map ends {end / height:.2f} screens down"
        questions = box(page, "article h2#questions")
        assert questions["y"] < 2 * height, f"the questions begin {questions['y'] / height:.2f} screens down"
    finally:
        context.close()
