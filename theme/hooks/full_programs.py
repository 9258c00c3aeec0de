"""Each program a page shows, offered whole once: a collapsed "full program" block with the file byte for byte (copy
button, a download of the copy the site serves, the sibling files it imports or runs), kept out of the search index
(a pass of program_blocks.py; the notebook pages get the same block from notebook_appendix.py).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from shown_programs import insert, offers

from guidekit.sections import as_written, section_names
from guidekit.spec import is_snippet, sibling_files
from guidekit.text import text

CLASS = "full-program"  # of the collapsed block


def _names(paths) -> str:
    return ", ".join(f"`{posixpath.basename(p)}`" for p in paths)


def _importers(path: str, root: Path) -> list[str]:
    """The programs in a helper's folder that import it."""
    folder = (root / path).parent
    return [
        p.relative_to(root).as_posix()
        for p in sorted(folder.glob("*.py"))
        if p.name != "conftest.py" and sibling_files(p, root).get(path) == "imports"
    ]


def download(path: str, lang: str, link) -> str:
    name = posixpath.basename(path)
    return f"[{text(lang)['full_program']['download'].format(name=name)}]({link(path)}){{ download }}"


def block(path: str, lang: str, root: Path, link) -> str:
    """The collapsed block that offers `path` whole: the file byte for byte, download links, what it needs beside it.

    `link(path)` is the address of the site's copy of a file, relative to the page.
    """
    t = text(lang)["full_program"]
    source = (root / path).read_text(encoding="utf-8")
    needs = sibling_files(root / path, root)
    ticks = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", source)), default=0))
    title = t["program" if is_snippet(root / path) else "helper"].format(path=path)
    lines = [f'??? example {CLASS} "{title}"', ""]
    if needs:
        parts = [
            t["needs"][how].format(names=_names(p for p, h in needs.items() if h == how))
            for how in ("imports", "runs")
            if how in needs.values()
        ]
        lines += ["    " + t["needs_sentence"].format(parts=t["needs_join"].join(parts)), ""]
    elif not is_snippet(root / path) and (importers := _importers(path, root)):
        lines += ["    " + t["helped"].format(names=_names(importers)), ""]
    lines.append(f'    {ticks}python title="{path}"')
    lines += [f"    {line}" for line in as_written(source).splitlines()]
    lines += [f"    {ticks}", ""]
    downloads = [download(p, lang, link) for p in [path, *needs]]
    exact = t["exact_markers" if section_names(source) else "exact"]
    lines.append("    " + " · ".join([*downloads, exact]))
    return "\n".join(lines)


def offered(markdown: str, root: Path, lang: str, link) -> str:
    """Each program's full block where the page offers it; only its download where the page showed it whole."""
    return insert(
        markdown,
        [
            (offer, download(offer.path, lang, link) if offer.whole else block(offer.path, lang, root, link))
            for offer in offers(markdown, root)
        ],
    )


CODE_BLOCK = re.compile(r'<div class="language-[\w-]+ highlight"')


def unsearched(html: str) -> str:
    """Code stays out of the search index, which every page loads: the full blocks, and the code and output listings
    too. The index is for the prose, where every API, flag and error message a listing shows is also named (the
    error index quotes each message in a heading); the listings were a third of its bytes."""
    html = html.replace(f'<details class="example {CLASS}">', f'<details class="example {CLASS}" data-search-exclude>')
    return CODE_BLOCK.sub(lambda m: f"{m[0]} data-search-exclude", html)
