"""A notebook page offers the programs it shows at its end, as a Markdown page does after their includes: the full
block and the note of each (a pass of program_blocks.py). The hooks cannot reach a notebook's cells, so the page's
programs are those its cells show through ``report.source("path:section")`` (guidekit.pages.page_programs).
"""

from __future__ import annotations

import posixpath
from pathlib import Path

import markdown as md
from full_programs import block
from program_notes import note

from guidekit import outputs
from guidekit.pages import page_programs, served_path
from guidekit.spec import is_snippet, parse_spec


def appended(html: str, page, config, root: Path, lang: str, blob: str) -> str:
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    manifest = outputs.read_manifest(root)
    name = page.file.src_uri.removeprefix(f"{lang}/")

    def link(path: str) -> str:  # our own Markdown below: relative to the page's URL
        return posixpath.relpath(served_path(path).as_posix(), page.url.rstrip("/") or ".")

    parts = []
    for path in page_programs(lang, name, root / "docs"):
        if (root / path).is_file():
            parts.append(block(path, lang, root, link))
            if is_snippet(root / path):
                parts.append(note(parse_spec(root / path, root), lang, blob + path, manifest))
    if not parts:
        return html
    extensions = {"extensions": config.markdown_extensions, "extension_configs": config.mdx_configs}
    return html + md.Markdown(**extensions).convert("".join(f"\n\n{part}" for part in parts))
