"""The error index: each message is real, each entry links its explanation and its program, search finds it."""

import importlib.util
from pathlib import Path

import pytest
from searchbox import run_query, search_pages

from guidekit import ROOT
from guidekit.errors import PAGE, REPO, entries, page_entries, parse_mark
from guidekit.outputs import recorded_lines, recording_path
from guidekit.pages import LANGS, headings, site_path, url_path

TORCH_SPEC = importlib.util.find_spec("torch")  # its folder, without importing it at collection
if TORCH_SPEC is None:
    pytest.skip("torch is not installed", allow_module_level=True)
TORCH = Path(TORCH_SPEC.origin).parent
ENTRIES = {lang: page_entries(lang) for lang in LANGS}
IDS = [e.id for e in ENTRIES["ko"]]


def by_id(lang: str) -> dict:
    return {e.id: e for e in ENTRIES[lang]}


def where_found(entry) -> str:
    """The text the entry's checked part must be in: the recording, the snippet's source, or a torch file."""
    if entry.kind == "recorded":
        return "\n".join(recorded_lines(recording_path(entry.snippet, "cpu").read_text(encoding="utf-8")))
    if entry.kind == "asserted":
        return (ROOT / entry.snippet).read_text(encoding="utf-8")
    raise ValueError(f"{entry.id}: a quoted entry is not reproduced")


def test_enough_entries_marked_alike_in_both_languages():
    assert len(IDS) >= 15
    assert len(set(IDS)) == len(IDS)
    for lang in LANGS:
        text = (ROOT / "docs" / lang / PAGE).read_text(encoding="utf-8")
        level2 = [hid for level, _, hid in headings(text) if level == 2]
        assert level2 == [e.id for e in ENTRIES[lang]], f"{lang}: a level-2 heading without its error mark"
    strip = lambda e: (e.id, e.kind, e.text, e.snippet, e.check, e.source)  # noqa: E731
    assert [strip(e) for e in ENTRIES["ko"]] == [strip(e) for e in ENTRIES["en"]]


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("entry_id", IDS)
def test_heading_quotes_the_message(lang, entry_id):
    entry = by_id(lang)[entry_id]
    assert entry.text in entry.heading and entry.heading.startswith("`"), entry.heading


@pytest.mark.parametrize("entry_id", [e.id for e in ENTRIES["ko"] if e.reproduced])
def test_reproduced_message_is_what_the_snippet_produces(entry_id):
    entry = by_id("ko")[entry_id]
    assert entry.checked in where_found(entry), f"{entry.checked!r} not in what {entry.snippet} {entry.kind}"


@pytest.mark.parametrize(
    "entry_id", [e.id for e in ENTRIES["ko"] if e.source and not e.source.startswith(("http", REPO))]
)
def test_message_is_in_the_torch_source(entry_id):
    entry = by_id("ko")[entry_id]
    source = TORCH.parent / entry.source
    assert source.is_file(), f"{entry.source}: not in the installed torch"
    assert entry.text in source.read_text(encoding="utf-8"), f"{entry.text!r} not in {entry.source}"


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("entry_id", IDS)
def test_entry_links_its_section_and_program(lang, entry_id):
    """A page section (the site's link check resolves it) and, for a reproduced message, its snippet on GitHub."""
    entry = by_id(lang)[entry_id]
    sections = [u for u in entry.links if "://" not in u and ".md#" in u]
    assert sections, f"{entry_id}: no link to the page section that explains it"
    ours = [u.removeprefix(REPO) for u in entry.links if u.startswith(REPO)]
    for path in ours:
        assert (ROOT / path).is_file(), f"{entry_id}: links {REPO}{path}, no such file"
    if entry.snippet:
        assert entry.snippet in ours, f"{entry_id}: no link to {entry.snippet}"
    if entry.source:
        github = (
            entry.source
            if "://" in entry.source or entry.source.startswith(REPO)
            else f"https://github.com/pytorch/pytorch/blob/main/{entry.source}"
        )
        assert github in entry.links, f"{entry_id}: no link to its source {github}"


def test_a_wrong_message_is_caught():
    """A planted mismatch fails: a recorded entry whose text the recording does not hold."""
    page = (ROOT / "docs" / "en" / PAGE).read_text(encoding="utf-8")
    planted = page.replace('text="failed to pass monitoredBarrier"', 'text="failed to pass monitoredbarrier"', 1)
    entry = next(e for e in entries(planted) if e.id == "monitored-barrier-failed")
    assert entry.checked not in where_found(entry)
    with pytest.raises(ValueError, match="names its snippet"):
        parse_mark('<!-- error: recorded text="x" -->')


@pytest.fixture(scope="module")
def search_page(browser, base_url):
    context, open_search = search_pages(browser, base_url)
    yield open_search
    context.close()


@pytest.mark.browser
@pytest.mark.parametrize("lang", LANGS)
def test_pasted_message_finds_its_entry_first(search_page, lang):
    """Each message pasted into the real search box: the first result is the entry's own heading."""
    page = search_page(lang)
    want_page = f"{site_path()}/{url_path(lang, PAGE)}"
    wrong = []
    for entry in ENTRIES[lang]:
        items = run_query(page, entry.text, paste=True)
        first = items[0] if items else []
        sections = [link for link in first if link.startswith(want_page + "#")]
        if not sections or sections[0] != f"{want_page}#{entry.id}":
            wrong.append(f"{entry.text!r}: first result {first[:3]}, expected {want_page}#{entry.id}")
    assert not wrong, "\n".join(wrong)
