"""Offer every notebook on its page: a chapter's generated notebook, and the page notebooks themselves.

A chapter page that runs programs (guidekit/notebooks.py decides which) gets one line under its title: "Open in
Colab" and a download of ``notebooks/<chapter>.ipynb``, which the site serves at its repository path. Plain links:
no badge image, nothing loads from another host. A notebook page (``performance.ipynb``) gets a download of its own
``.ipynb``, which mkdocs-jupyter's ``include_source`` copies next to the page (``performance/performance.ipynb``,
``en/performance/performance.ipynb``: theme/hooks/i18n_notebooks.py keeps the language-aware destination it copies to).
"""

import html
import posixpath
from pathlib import Path
from urllib.parse import urlsplit

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

from guidekit import notebooks
from guidekit.pages import served_path, title_line

CLASS = "page-notebook"
TEXT = {
    "ko": {
        "chapter": "이 장의 프로그램을 노트북으로 실행해 볼 수 있습니다: [Colab에서 열기]({colab}) · [`{file}` 내려받기]({link}){{ download }}",
        "page": '<a href="{link}" download>노트북 내려받기(<code>{file}</code>)</a> · 저장소의 파일을 읽으므로 저장소를 '
        "클론한 폴더 안에서 실행하세요.",
    },
    "en": {
        "chapter": "Run this chapter's programs as a notebook: [open in Colab]({colab}) · [download `{file}`]({link}){{ download }}",
        "page": '<a href="{link}" download>Download the notebook (<code>{file}</code>)</a> · it reads files of the '
        "repository, so run it inside a clone of it.",
    },
}


def _lang(page, config) -> str:
    return getattr(page.file, "locale", None) or config["theme"]["language"]


@event_priority(-200)  # after i18n_notebooks (-150) wrapped the pages' notebooks: these stay static files
def on_files(files, config):
    """Serve every chapter notebook at its repository path, one copy for both languages."""
    root = Path(config.config_file_path).parent
    for path in sorted(set(notebooks.chapters(root).values())):
        files.append(File.generated(config, served_path(path).as_posix(), abs_src_path=str(root / path)))
    return files


def on_page_markdown(markdown, page, config, files):
    lang = _lang(page, config)
    root = Path(config.config_file_path).parent
    path = notebooks.chapter_notebook(page.file.src_uri.removeprefix(f"{lang}/"), root)
    at = title_line(markdown) if path else None
    if at is None:
        return markdown
    here = posixpath.dirname(page.file.src_uri)  # MkDocs turns links relative to the source into page URLs
    link = posixpath.relpath(served_path(path).as_posix(), here or ".")
    text = TEXT.get(lang, TEXT["en"])["chapter"]
    line = text.format(colab=notebooks.colab_url(path, root), file=posixpath.basename(path), link=link)
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
    text = TEXT.get(_lang(page, config), TEXT["en"])["page"]
    line = text.format(link=html.escape(link), file=html.escape(posixpath.basename(link)))
    return f'{head}{end}\n<p class="{CLASS}" data-search-exclude>{line}</p>{rest}'
