"""Offer every notebook on its page: a chapter's generated notebook, and the page notebooks themselves.

A chapter page that runs programs (guidekit/notebooks.py decides which) gets one line under its title: "Open in
Colab" and a download of the notebook in the page's language, ``notebooks/<lang>/<chapter>.ipynb`` (the Korean page
links the Korean notebook), which the site serves at its repository path (served_files.py). Plain links: no badge
image, nothing loads from another host. A notebook page (``performance.ipynb``) gets a download of its own
``.ipynb``, which mkdocs-jupyter's ``include_source`` copies next to the page (``performance/performance.ipynb``,
``en/performance/performance.ipynb``: theme/hooks/i18n_notebooks.py keeps the language-aware destination it copies
to).
"""

import html
import posixpath
from pathlib import Path
from urllib.parse import urlsplit

from guidekit import notebooks
from guidekit.pages import served_path, title_line
from guidekit.text import text

CLASS = "page-notebook"


def _lang(page, config) -> str:
    return getattr(page.file, "locale", None) or config["theme"]["language"]


def on_page_markdown(markdown, page, config, files):
    lang = _lang(page, config)
    root = Path(config.config_file_path).parent
    path = notebooks.chapter_notebook(lang, page.file.src_uri.removeprefix(f"{lang}/"), root)
    at = title_line(markdown) if path else None
    if at is None:
        return markdown
    here = posixpath.dirname(page.file.src_uri)  # MkDocs turns links relative to the source into page URLs
    link = posixpath.relpath(served_path(path).as_posix(), here or ".")
    line = text(lang)["notebook_links"]["chapter"].format(
        colab=notebooks.colab_url(path, root), file=posixpath.basename(path), link=link
    )
    lines = markdown.split("\n")
    lines[at + 1 : at + 1] = ["", line, f"{{: .{CLASS} data-search-exclude }}", ""]
    return "\n".join(lines)


def on_page_content(content, page, config, files):
    """Under a notebook page's title, the download of the notebook that include_source copied beside the page."""
    nb_url = getattr(page, "nb_url", None)  # set by mkdocs-jupyter on the pages it renders
    if not nb_url or not config.plugins["mkdocs-jupyter"].config["include_source"]:
        return content
    head, end, rest = content.partition("</h1>")
    if not end:
        return content
    link = posixpath.relpath(urlsplit(nb_url).path, urlsplit(page.abs_url).path)
    line = text(_lang(page, config))["notebook_links"]["page"].format(
        link=html.escape(link), file=html.escape(posixpath.basename(link))
    )
    return f'{head}{end}\n<p class="{CLASS}" data-search-exclude>{line}</p>{rest}'
