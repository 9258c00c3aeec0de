"""The home page's map of chapters: ``<!-- chapter-map -->`` becomes one line per nav section with its pages linked
in the nav's order (guidekit.pages.chapter_map), so adding a page touches the nav and nothing else."""

from __future__ import annotations

from pathlib import Path

from guidekit.pages import chapter_map

PLACEHOLDER = "<!-- chapter-map -->"


def on_page_markdown(markdown, page, config, files):
    if PLACEHOLDER not in markdown:
        return markdown
    lang = getattr(page.file, "locale", None) or config["theme"]["language"]
    return markdown.replace(PLACEHOLDER, chapter_map(lang, Path(config.config_file_path).parent))
