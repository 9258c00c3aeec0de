"""Read the Markdown pages as the site tests need them: fences, includes, heading ids, shell commands."""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LANGS = ("ko", "en")

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")
INCLUDE = re.compile(r'^\s*--8<--\s+"(?P<target>[^"]+)"\s*$')
HEADING = re.compile(r"^(?P<level>#{1,6})\s+(?P<text>.*?)\s*$")
HEADING_ID = re.compile(r"\{\s*[^}]*#(?P<id>[\w\-]+)[^}]*\}\s*$")


def load_spec_module():
    """snippets/_spec.py: the declarations every snippet makes (launch, requires, timeout)."""
    if "snippet_spec" not in sys.modules:
        loader = importlib.util.spec_from_file_location("snippet_spec", ROOT / "snippets" / "_spec.py")
        module = sys.modules["snippet_spec"] = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    return sys.modules["snippet_spec"]


@dataclass
class Fence:
    info: str  # what follows the opening fence: language and attributes
    body: list[str]
    line: int  # 1-based line of the opening fence

    @property
    def lang(self) -> str:
        return self.info.split()[0].lstrip(".{").lower() if self.info.split() else ""


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
        body = [line[len(indent):] if line.startswith(indent) else line for line in lines[i + 1 : end]]
        found.append(Fence(match["info"].strip(), body, i + 1))
        i = end + 1
    return found


def includes(text: str) -> list[str]:
    """Every ``--8<-- "path[:section]"`` target inside a fence, in page order."""
    return [m["target"] for f in fences(text) for line in f.body if (m := INCLUDE.match(line))]


def outside_fences(text: str) -> list[str]:
    lines = text.splitlines()
    inside = set()
    for fence in fences(text):
        inside.update(range(fence.line - 1, fence.line + len(fence.body) + 1))
    return [line for n, line in enumerate(lines) if n not in inside]


def headings(text: str) -> list[tuple[int, str, str | None]]:
    """(level, text, fixed id or None) of every Markdown heading outside code fences."""
    found = []
    for line in outside_fences(text):
        match = HEADING.match(line)
        if match:
            id_match = HEADING_ID.search(match["text"])
            found.append((len(match["level"]), match["text"], id_match["id"] if id_match else None))
    return found


def pages(lang: str) -> dict[str, Path]:
    """Markdown pages of one language, keyed by their path inside the language folder."""
    base = DOCS / lang
    return {p.relative_to(base).as_posix(): p for p in sorted(base.rglob("*.md"))}


def page_files(lang: str) -> set[str]:
    base = DOCS / lang
    return {p.relative_to(base).as_posix() for p in base.rglob("*") if p.suffix in (".md", ".ipynb")}


NOTEBOOK_SOURCE = re.compile(r"""\bsource\(\s*["']([^"']+)["']""")


def notebook_cells(path: Path) -> list[tuple[str, str]]:
    import json

    return [(c["cell_type"], "".join(c["source"])) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]


def notebook_includes(path: Path) -> list[str]:
    """Snippet sections a notebook shows through its report helper's ``source("path:section")``."""
    return [t for kind, text in notebook_cells(path) if kind == "code" for t in NOTEBOOK_SOURCE.findall(text)]


def notebooks(lang: str) -> dict[str, Path]:
    base = DOCS / lang
    return {p.relative_to(base).as_posix(): p for p in sorted(base.rglob("*.ipynb"))}


def site_path() -> str:
    """The path the site is published under (site_url in mkdocs.yml), e.g. '/guide'."""
    from urllib.parse import urlsplit

    site_url = re.search(r"^site_url:\s*(\S+)", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M).group(1)
    return urlsplit(site_url).path.rstrip("/")
