"""The Markdown sources: both languages mirror each other, and code reaches pages only by inclusion."""

import re

import pytest

from guidekit import ROOT
from guidekit.pages import (
    LANGS,
    fences,
    headings,
    includes,
    notebook_cells,
    notebooks,
    page_files,
    page_includes,
    pages,
    shown_files,
)
from guidekit.sections import parse_target, section_names
from guidekit.spec import all_snippets, parse_spec

PAGES = sorted(pages("ko"))
LANG_PAGES = [(lang, name) for lang in LANGS for name in sorted(pages(lang))]
SNIPPET_COMMAND = re.compile(r"^(?:python|torchrun)\b.*\bsnippets/\S+\.py\b.*$")


def read(lang: str, name: str) -> str:
    return (ROOT / "docs" / lang / name).read_text(encoding="utf-8")


def test_same_pages_in_both_languages():
    assert page_files("ko") == page_files("en")


@pytest.mark.parametrize("name", PAGES)
def test_same_includes_in_same_order(name):
    assert includes(read("ko", name)) == includes(read("en", name))


@pytest.mark.parametrize("name", PAGES)
def test_same_heading_ids_in_same_order(name):
    ids = {lang: [(level, hid) for level, _, hid in headings(read(lang, name)) if level > 1] for lang in LANGS}
    assert ids["ko"] == ids["en"]


@pytest.mark.parametrize("lang,name", LANG_PAGES)
def test_subheadings_have_fixed_ids(lang, name):
    missing = [text for level, text, hid in headings(read(lang, name)) if level > 1 and hid is None]
    assert not missing, f"headings without '{{ #id }}': {missing}"


@pytest.mark.parametrize("lang,name", LANG_PAGES)
def test_python_reaches_pages_only_by_inclusion(lang, name):
    inline = [
        f"line {f.line}"
        for f in fences(read(lang, name))
        if f.lang in ("python", "py", "python3", "pycon") and not f.is_include
    ]
    assert not inline, f"Python blocks that are not snippet includes: {inline}"


@pytest.mark.parametrize("lang,name", [(lang, name) for lang in LANGS for name in sorted(page_files(lang))])
def test_includes_name_existing_files_and_sections(lang, name):
    for target in map(parse_target, page_includes(lang, name)):
        file = ROOT / target.path
        assert file.is_file(), f"{target}: no such file"
        if target.section:
            assert target.section in section_names(file.read_text(encoding="utf-8")), f"{target}: no such section"


@pytest.mark.parametrize("lang", LANGS)
def test_every_snippet_is_shown(lang):
    snippets = {p.relative_to(ROOT).as_posix() for p in all_snippets()}
    assert not snippets - shown_files(lang), f"snippets no {lang} page includes"


@pytest.mark.parametrize("lang,name", LANG_PAGES)
def test_shell_commands_match_declared_launch(lang, name):
    """A command that runs a snippet is written as the snippet declares it, so the page runs what CI ran."""
    for fence in fences(read(lang, name)):
        if fence.lang not in ("bash", "sh", "shell", "console"):
            continue
        for line in fence.body:
            command = line.strip().removeprefix("$ ").split("  #")[0].strip()
            if not SNIPPET_COMMAND.match(command):
                continue
            path = next(word for word in command.split() if word.startswith("snippets/") and word.endswith(".py"))
            spec = parse_spec(ROOT / path)
            extra = command.removeprefix(spec.command)
            assert command.startswith(spec.command) and (not extra or extra.startswith(" ")), (
                f"page runs '{command}', the snippet declares '{spec.command}'"
            )


@pytest.mark.parametrize("name", sorted(notebooks("ko")))
def test_notebooks_mirror_each_other(name):
    """Same cells in the same order: code identical but for the language argument, headings at the same levels."""
    cells = {lang: notebook_cells(ROOT / "docs" / lang / name) for lang in LANGS}
    assert [kind for kind, _ in cells["ko"]] == [kind for kind, _ in cells["en"]]
    for (kind, ko), (_, en) in zip(cells["ko"], cells["en"]):
        if kind == "code":
            assert ko.replace('lang="ko"', 'lang="en"') == en
        else:
            levels = [
                [len(line) - len(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")]
                for text in (ko, en)
            ]
            assert levels[0] == levels[1]


def test_every_marked_section_is_shown():
    """A section marker no page includes is dead weight in the program a reader copies."""
    shown = {t for lang in LANGS for name in page_files(lang) for t in page_includes(lang, name)}
    unused = [
        f"{path.relative_to(ROOT).as_posix()}:{name}"
        for path in all_snippets()
        for name in section_names(path.read_text(encoding="utf-8"))
        if f"{path.relative_to(ROOT).as_posix()}:{name}" not in shown
    ]
    assert not unused, f"sections no page includes: {unused}"
