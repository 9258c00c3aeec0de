"""The built site: both languages, notebooks rendered, included code really on the page, links resolve."""

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from guidekit import ROOT, outputs
from guidekit.pages import LANGS, built_path, includes, page_files, page_programs, pages, site_path, url_path
from guidekit.sections import target_text
from guidekit.spec import is_snippet
from guidekit.text import text


def built_page(site: Path, lang: str, name: str) -> Path:
    return site / built_path(lang, name)


class Anchors(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.refs = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and attrs.get("rel") in ("alternate", "canonical")):
                self.refs.append(attrs[key])


def parse(path: Path) -> Anchors:
    parser = Anchors()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def shown_lines(target: str) -> list[str]:
    """The non-blank lines an include puts on the page, stripped (the HTML keeps no indentation we compare)."""
    return [line.strip() for line in target_text(target).splitlines() if line.strip()]


def page_text(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("lang", LANGS)
def test_every_page_is_built_in_its_language(built_site, lang):
    for name in page_files(lang):
        page = built_page(built_site, lang, name)
        assert page.is_file(), f"{name} not built at {page.relative_to(built_site)}"
        assert f'<html lang="{lang}"' in page.read_text(encoding="utf-8")
    assert not (built_site / "ko").exists(), "Korean is the default language: served at /, not /ko/"


@pytest.mark.parametrize("lang", LANGS)
def test_notebooks_render_as_notebooks_with_outputs(built_site, lang):
    notebooks = sorted(n for n in page_files(lang) if n.endswith(".ipynb"))
    assert notebooks, "the site has notebook pages"
    for name in notebooks:
        source = built_page(built_site, lang, name).read_text(encoding="utf-8")
        assert "jupyter-wrapper" in source, f"{name} was not rendered by mkdocs-jupyter"
        assert re.search(r'class="[^"]*jp-OutputArea-output', source), f"{name} shows no cell output"
        assert not (built_site / ("" if lang == "ko" else "en") / name).exists(), f"{name} copied raw"


@pytest.mark.parametrize("lang,name", [(lang, n) for lang in LANGS for n in sorted(pages(lang))])
def test_included_code_is_on_the_built_page(built_site, lang, name):
    text = page_text(built_page(built_site, lang, name))
    for target in includes((ROOT / "docs" / lang / name).read_text(encoding="utf-8")):
        missing = [line for line in shown_lines(target) if line not in text]
        assert not missing, f"{target}: lines not on the page, e.g. {missing[:3]}"


@pytest.mark.parametrize("lang", LANGS)
def test_internal_links_and_anchors_resolve(built_site, lang):
    root = built_site if lang == "ko" else built_site / "en"
    files = [p for p in root.rglob("*.html") if lang == "en" or "en" not in p.relative_to(built_site).parts[:1]]
    published = site_path()
    parsed: dict[Path, Anchors] = {}

    def anchors_of(path: Path) -> set[str]:
        if path not in parsed:
            parsed[path] = parse(path)
        return parsed[path].ids

    broken = []
    for page in files:
        anchors_of(page)
        for ref in parsed[page].refs:
            parts = urlsplit(ref)
            if parts.scheme or parts.netloc or ref.startswith(("mailto:", "javascript:", "data:")):
                continue
            if parts.path.startswith("/"):  # absolute: valid only under the published path
                if not parts.path.startswith(published + "/"):
                    broken.append(f"{page.relative_to(built_site)} -> {ref} (outside {published}/)")
                    continue
                target = built_site / unquote(parts.path.removeprefix(published + "/"))
            else:
                target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if parts.path.endswith("/") or target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(built_site)} -> {ref}")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html" and fragment not in anchors_of(target):
                broken.append(f"{page.relative_to(built_site)} -> {ref} (no such anchor)")
    assert not broken, "\n".join(broken[:30])


@pytest.mark.parametrize("name", sorted(page_files("ko")))
def test_built_pages_share_section_ids(built_site, name):
    """A link to a section works in both languages: the same ids, in the same order, none empty."""
    ids = {
        lang: re.findall(r'<h[2-4][^>]*\sid="([^"]*)"', built_page(built_site, lang, name).read_text(encoding="utf-8"))
        for lang in LANGS
    }
    assert ids["ko"] == ids["en"]
    assert all(ids["ko"]), f"empty heading ids: {ids['ko']}"


@pytest.mark.parametrize("lang", LANGS)
def test_every_example_says_what_it_was_verified_with(built_site, lang):
    """The line under each program a page shows carries the manifest's torch, backend and date for that snippet, and
    says "never run on a GPU yet" until a GPU box has recorded it."""
    word, never_on_gpu = text(lang)["note"]["verified"], text(lang)["note"]["no_gpu_run"]
    manifest = outputs.read_manifest()
    notes = 0
    for name in pages(lang):
        source = built_page(built_site, lang, name).read_text(encoding="utf-8")
        for note in re.findall(r'<p class="snippet-note">(.*?)</p>', source, re.S):
            notes += 1
            snippet = re.search(r'/blob/main/(snippets/[^"]+)"', note)[1]
            verified = note.split(f" · {word}: ", 1)[1]
            cpu, cuda = manifest["cpu"].get(snippet, {}), manifest["cuda"].get(snippet, {})
            if cpu.get("outcome") == "passed":
                assert verified.startswith(f"torch {cpu['torch']} · "), f"{name}: {snippet}: {verified}"
                assert cpu["date"] in verified, f"{name}: {snippet}: {verified}"
            # every program says whether a GPU box has run it (GPU-only ones and the rest alike)
            assert (never_on_gpu in verified) == (cuda.get("outcome") != "passed"), f"{name}: {snippet}: {verified}"
    programs = sum(is_snippet(ROOT / p) for name in pages(lang) for p in page_programs(lang, name))
    assert notes == programs > 30, f"{notes} notes for {programs} programs on the {lang} pages"


def test_each_language_has_its_own_search_index(built_site):
    """theme/hooks/search_per_language.py: a language's index holds its pages and nothing else, located from its
    own root (where its pages' search looks), so a reader downloads and searches one language only."""
    for lang in LANGS:
        root = built_site / url_path(lang, "index.md")
        docs = json.loads((root / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
        pages_found = {doc["location"].split("#")[0] for doc in docs}
        expected = {url_path(lang, name).removeprefix(url_path(lang, "index.md")) for name in page_files(lang)}
        assert pages_found == expected, (
            f"{lang}: index pages {sorted(pages_found ^ expected)} differ from the built pages"
        )
        for name in page_files(lang):
            base = re.search(r'"base": "([^"]*)"', built_page(built_site, lang, name).read_text(encoding="utf-8"))[1]
            resolved = (built_page(built_site, lang, name).parent / base).resolve()
            assert resolved == root.resolve(), f"{lang}/{name}: search base {base} is not {lang}'s root"


ASSET = re.compile(r'(?:href|src)="(?P<path>[^":]+\.(?:css|js))(?:\?[^"]*)?"')
OWN_ASSETS = ("javascripts/", "stylesheets/")  # the site's own scripts and styles (docs/), not Material's bundle


@pytest.mark.parametrize("lang", LANGS)
def test_a_page_loads_only_the_scripts_and_styles_it_uses(built_site, lang):
    """Page weight: the calculators' script and style (about 48 KB, a seventh of a page's transfer) load on the
    calculators page only (theme/overrides/main.html), and every own asset a page names exists."""
    for name in page_files(lang):
        page = built_page(built_site, lang, name)
        named = {m["path"] for m in ASSET.finditer(page.read_text(encoding="utf-8"))}
        own = {path for path in named if path.lstrip("./").startswith(OWN_ASSETS)}
        for path in own:
            assert (page.parent / path).resolve().is_file(), f"{lang}/{name} names {path}, which was not built"
        calculators = {path for path in own if Path(path).stem == "calculators"}
        if Path(name).stem == "calculators":
            assert len(calculators) == 2, f"{lang}/{name} misses the calculators' script or style: {sorted(own)}"
        else:
            assert not calculators, f"{lang}/{name} loads {sorted(calculators)}, which only the calculators use"


def test_the_404_page_menu_leads_to_each_languages_home(built_site):
    """The 404 page is rendered after the last page (mkdocs-static-i18n#284): left alone, its language menu would lead
    to that page in each language, and its head links would make Material fetch sitemaps that are not there."""
    built = (built_site / "404.html").read_text(encoding="utf-8")
    head = built.partition("</head>")[0]
    assert 'rel="alternate"' not in head, "the 404 page's head still has hreflang links"
    menu = dict((lang, href) for href, lang in re.findall(r'<a href="([^"]*)" hreflang="([^"]*)"', built))
    root = site_path() + "/"
    assert menu == {"ko": root, "en": f"{root}en/"}, f"the 404 page's language menu leads to {menu}"
