"""Python-Markdown extensions the site's pages use: plain Markdown machinery rather than MkDocs hooks, so that any
builder that runs Python-Markdown extensions (MkDocs today, its successors) renders them (CONTRIBUTING.md, "What the
site is built with").

- ``<!-- chapter-map LANG -->``: the home page's map of chapters in language LANG, one line per nav section with its
  pages linked in the nav's order (guidekit.pages.chapter_map), so adding a page touches the nav and nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path

from markdown import Extension
from markdown.preprocessors import Preprocessor

from guidekit import ROOT
from guidekit.pages import chapter_map

CHAPTER_MAP = re.compile(r"^<!-- chapter-map (?P<lang>\w+) -->$")


class ChapterMap(Preprocessor):
    def __init__(self, md, root: Path):
        super().__init__(md)
        self.root = root

    def run(self, lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            match = CHAPTER_MAP.match(line.strip())
            out.extend(chapter_map(match["lang"], self.root).splitlines() if match else [line])
        return out


class ChapterMapExtension(Extension):
    def __init__(self, **kwargs):
        self.config = {"root": [str(ROOT), "the repository whose mkdocs.yml holds the nav"]}
        super().__init__(**kwargs)

    def extendMarkdown(self, md):
        # before pymdownx.snippets (32) and the HTML block processor (20): the map is Markdown, not a comment
        md.preprocessors.register(ChapterMap(md, Path(self.getConfig("root"))), "chapter_map", 40)


def makeExtension(**kwargs):
    return ChapterMapExtension(**kwargs)
