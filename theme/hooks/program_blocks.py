"""Every program a page shows: its block titled with its file, then offered once, whole and with a note on how it was
tested. One pass per job, each a function of the page's text, chained here (the shape of pydantic-ai's
docs/.hooks/main.py):

- block_titles.py: the block's title is the program's file;
- program_notes.py: the line under the program: launch command, how CI tests it, last recorded runs, source;
- full_programs.py: the collapsed block with the whole file and its downloads, kept out of the search index;
- notebook_appendix.py: the same blocks and notes at the end of a notebook page, whose cells no pass can reach.

Where a program is offered is decided once, in shown_programs.py.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from block_titles import titled
from full_programs import offered, unsearched
from notebook_appendix import appended
from program_notes import noted

from guidekit.pages import served_path


def _lang(page, config) -> str:
    return getattr(page.file, "locale", None) or config["theme"]["language"]


def _root(config) -> Path:
    return Path(config.config_file_path).parent  # programs are read from the repository being built


def _blob(config) -> str:
    return config.get("repo_url", "").rstrip("/") + "/blob/main/"


def on_page_markdown(markdown, page, config, files):
    root, lang = _root(config), _lang(page, config)
    here = posixpath.dirname(page.file.src_uri)  # MkDocs turns links relative to the source into page URLs

    def link(path: str) -> str:
        return posixpath.relpath(served_path(path).as_posix(), here or ".")

    markdown = titled(markdown, root)
    markdown = noted(markdown, root, lang, _blob(config))
    markdown = offered(markdown, root, lang, link)  # each full block goes between its include and the note above
    return markdown


def on_page_content(html, page, config, files):
    html = appended(html, page, config, _root(config), _lang(page, config), _blob(config))
    html = unsearched(html)
    return html
