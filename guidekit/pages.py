"""The pages: where they live, what their Markdown holds (fences, includes, headings), where they land on the site.

Pages are ``docs/<lang>/<name>.md`` (and notebooks ``.ipynb``), the same names in every language. Korean is the
default language, built at ``/``; English at ``/en/``. The site is published under the path of ``site_url``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from guidekit import ROOT
from guidekit.sections import Target, include_target, parse_target

LANGS = ("ko", "en")
DEFAULT_LANG = "ko"
DOCS = ROOT / "docs"

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")
HEADING = re.compile(r"^(?P<level>#{1,6})\s+(?P<text>.*?)\s*$")
HEADING_ID = re.compile(r"\{\s*[^}]*#(?P<id>[\w\-]+)[^}]*\}\s*$")
NOTEBOOK_SOURCE = re.compile(r"""\bsource\(\s*["']([^"']+)["']""")  # a notebook's report.source("path:section")


@dataclass
class Fence:
    info: str  # what follows the opening fence: language and attributes
    body: list[str]
    line: int  # 1-based line of the opening fence
    indent: str = ""
    marker: str = "```"
    end_line: int = 0  # 1-based line of the closing fence

    @property
    def lang(self) -> str:
        words = self.info.split()
        return words[0].lstrip(".{").lower() if words else ""

    @property
    def targets(self) -> list[Target]:
        return [t for line in self.body if (t := include_target(line))]

    @property
    def is_include(self) -> bool:
        """Only include lines (and blank lines) inside: the block shows snippet code and nothing typed."""
        lines = [line for line in self.body if line.strip()]
        return bool(lines) and all(include_target(line) for line in lines)


def fences(text: str) -> list[Fence]:
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = match["indent"], match["fence"]
        close = re.compile(rf"^{re.escape(indent)}{fence[0]}{{{len(fence)},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), len(lines))
        body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : end]]
        found.append(Fence(match["info"].strip(), body, i + 1, indent, fence, end + 1))
        i = end + 1
    return found


def includes(text: str) -> list[str]:
    """Every include target inside a fence, in page order, as written (``path`` or ``path:section``)."""
    return [str(t) for f in fences(text) for t in f.targets]


def _fenced(text: str) -> set[int]:
    """0-based indexes of the lines inside code fences, opening and closing lines included."""
    inside = set()
    for fence in fences(text):
        inside.update(range(fence.line - 1, fence.end_line))
    return inside


def outside_fences(text: str) -> list[str]:
    inside = _fenced(text)
    return [line for n, line in enumerate(text.splitlines()) if n not in inside]


def title_line(text: str) -> int | None:
    """0-based index of the page's title: its first level-1 heading outside code fences (None if it has none)."""
    inside = _fenced(text)
    for n, line in enumerate(text.splitlines()):
        if n not in inside and (match := HEADING.match(line)) and len(match["level"]) == 1:
            return n
    return None


def headings(text: str) -> list[tuple[int, str, str | None]]:
    """(level, text, fixed id or None) of every Markdown heading outside code fences."""
    found = []
    for line in outside_fences(text):
        match = HEADING.match(line)
        if match:
            id_match = HEADING_ID.search(match["text"])
            found.append((len(match["level"]), match["text"], id_match["id"] if id_match else None))
    return found


def pages(lang: str, docs: Path = DOCS) -> dict[str, Path]:
    """Markdown pages of one language, keyed by their path inside the language folder."""
    base = docs / lang
    return {p.relative_to(base).as_posix(): p for p in sorted(base.rglob("*.md"))}


def notebooks(lang: str, docs: Path = DOCS) -> dict[str, Path]:
    base = docs / lang
    return {p.relative_to(base).as_posix(): p for p in sorted(base.rglob("*.ipynb"))}


def page_files(lang: str, docs: Path = DOCS) -> set[str]:
    return set(pages(lang, docs)) | set(notebooks(lang, docs))


def notebook_cells(path: Path) -> list[tuple[str, str]]:
    return [(c["cell_type"], "".join(c["source"])) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]


def notebook_includes(path: Path) -> list[str]:
    """Snippet sections a notebook shows through ``report.source("path:section")`` (guidekit/report.py)."""
    return [t for kind, text in notebook_cells(path) if kind == "code" for t in NOTEBOOK_SOURCE.findall(text)]


def page_includes(lang: str, name: str, docs: Path = DOCS) -> list[str]:
    """What a page (Markdown or notebook) includes, in order."""
    path = docs / lang / name
    return notebook_includes(path) if name.endswith(".ipynb") else includes(path.read_text(encoding="utf-8"))


def shown_files(lang: str, docs: Path = DOCS) -> set[str]:
    """Repository paths of every file some page of `lang` includes."""
    return {parse_target(t).path for name in page_files(lang, docs) for t in page_includes(lang, name, docs)}


def page_programs(lang: str, name: str, docs: Path = DOCS) -> list[str]:
    """Repository paths of the Python files a page includes, by section or whole, in order of first inclusion."""
    found = (parse_target(t).path for t in page_includes(lang, name, docs))
    return list(dict.fromkeys(p for p in found if p.endswith(".py")))


def served_path(path: str) -> PurePosixPath:
    """Where the site serves a snippet file for download, relative to the site root: its repository path.

    One copy for every language (``snippets/x/y.py``), linked from the pages of both.
    """
    return PurePosixPath(path)


def built_path(lang: str, name: str) -> PurePosixPath:
    """Where docs/<lang>/<name> lands in the built site: Korean at the root, other languages under /<lang>/."""
    stem = PurePosixPath(name).with_suffix("")
    path = stem.parent / "index.html" if stem.name == "index" else stem / "index.html"
    return path if lang == DEFAULT_LANG else PurePosixPath(lang) / path


def url_path(lang: str, name: str) -> str:
    """The page's URL path relative to the site root, e.g. 'en/ddp/' ('' for the Korean home)."""
    return built_path(lang, name).as_posix().removesuffix("index.html")


def mkdocs_setting(key: str, root: Path = ROOT) -> str:
    """A top-level one-word setting of mkdocs.yml, e.g. 'site_url' or 'repo_url'."""
    return re.search(rf"^{key}:\s*(\S+)", (root / "mkdocs.yml").read_text(encoding="utf-8"), re.M).group(1)


# Pages link the repository through one setting (mkdocs.yml's repo_url): `repo:snippets/x.py` is a file on main,
# `repo:snippets/x/` a folder, `repo:#readme` the README, `repo:.git` the clone address (inside code too).
REPO_LINK = re.compile(r"(?<![\w/:])repo:(?P<path>[\w./#-]*)")


def repo_address(path: str, repo_url: str) -> str:
    """What `repo:<path>` stands for, given the repository's address."""
    repo = repo_url.rstrip("/")
    if not path or path.startswith(("#", ".git")):
        return repo + path
    return f"{repo}/{'tree' if path.endswith('/') else 'blob'}/main/{path.rstrip('/')}"


def repo_links(markdown: str, repo_url: str) -> str:
    """Every `repo:` reference of a page as the repository's address."""
    return REPO_LINK.sub(lambda m: repo_address(m["path"], repo_url), markdown)


def site_path(root: Path = ROOT) -> str:
    """The path the site is published under (site_url in mkdocs.yml), e.g. '/guide'."""
    return urlsplit(mkdocs_setting("site_url", root)).path.rstrip("/")


def nav(root: Path = ROOT) -> list[tuple[str, str | None, int]]:
    """(label, page or None for a section, depth) of every entry of mkdocs.yml's nav, in order; labels in the default
    language."""
    import yaml  # the site's dependency, as MkDocs reads it

    def walk(entries: list, depth: int):
        for entry in entries:
            ((label, value),) = entry.items()
            if isinstance(value, list):
                yield label, None, depth
                yield from walk(value, depth + 1)
            else:
                yield label, value, depth

    config = yaml.safe_load((root / "mkdocs.yml").read_text(encoding="utf-8"))
    return list(walk(config["nav"], 0))


def nav_translations(lang: str, root: Path = ROOT) -> dict[str, str]:
    """The nav's labels in `lang` (mkdocs.yml's i18n nav_translations); empty for the default language."""
    import yaml

    config = yaml.safe_load((root / "mkdocs.yml").read_text(encoding="utf-8"))
    i18n = next(p["i18n"] for p in config["plugins"] if isinstance(p, dict) and "i18n" in p)
    language = next(entry for entry in i18n["languages"] if entry["locale"] == lang)
    return language.get("nav_translations") or {}


def chapter_map(lang: str, root: Path = ROOT) -> str:
    """The home page's map of chapters, from the nav: one line per section, its pages linked in nav order."""
    names = nav_translations(lang, root)
    lines: list[str] = []
    for label, page, depth in nav(root):
        if page is None and depth == 0:
            lines.append(f"- **{names.get(label, label)}**:")
        elif page is not None and depth > 0:
            sep = " " if lines[-1].endswith(":") else " · "
            lines[-1] += f"{sep}[{names.get(label, label)}]({page})"
    return "\n".join(lines)
