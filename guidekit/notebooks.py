"""Chapter notebooks: every program a chapter runs, in one notebook a reader opens in Colab or Jupyter.

    python -m guidekit.notebooks          # list notebooks that differ from what the pages and snippets give now (exit 1)
    python -m guidekit.notebooks --write  # regenerate them (make notebooks-write)

Where they live: ``notebooks/<chapter>.ipynb`` at the repository root, one per Markdown page that includes a program
that runs without a GPU (``practices/mixed-precision.md`` -> ``notebooks/practices-mixed-precision.ipynb``,
``practices/index.md`` -> ``notebooks/practices.ipynb``). Not under ``docs/``: mkdocs-jupyter would render every
``.ipynb`` there as a page, and static-i18n's folder structure would want one copy per language, while the notebook
holds only code, commands and a few bilingual lines. The site serves the same file at the same path
(``/notebooks/<chapter>.ipynb``, as it serves snippets at their repository paths), so the page's download link and its
Colab link (GitHub's copy on ``main``) name one file, linked from the Korean and the English page alike.

What one holds: a markdown intro (Korean and English), an optional ``!pip install torch`` (commented out), a set-up
cell, then per program a ``%%writefile snippets/...`` cell with the whole tested file byte for byte (section markers
included; the files it imports or runs from its folder first) and a cell that runs it with its declared launch
(``!torchrun ...`` / ``!python ...``). Files are written relative to the notebook's working directory, so it runs
anywhere torch is installed. A program that needs GPUs (``# requires:``) gets a note with its command instead of a run.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path, PurePosixPath

from guidekit import ROOT
from guidekit.pages import DEFAULT_LANG, LANGS, headings, mkdocs_setting, page_programs, pages, url_path
from guidekit.spec import is_snippet, parse_spec, sibling_files
from guidekit.text import text

FOLDER = "notebooks"
COLAB = "https://colab.research.google.com/github/{repo}/blob/main/{path}"
WRITE_COMMAND = "make notebooks-write"  # or: python -m guidekit.notebooks --write
SHELL_SPECIAL = re.compile(r"[$`{}\\]")  # IPython expands these in a `!` line: a launch must not contain them

INTRO = """\
# {title}

{en}

{ko}

*Generated from the repository by `{command}` (`guidekit/notebooks.py`): edit the snippets, not this notebook.*
"""


def _pip() -> str:
    """The optional install cell, in both languages (the text catalogue's ``chapter_notebook``)."""
    en, ko = (text(lang)["chapter_notebook"] for lang in ("en", "ko"))
    return f"# {en['optional']} / {ko['optional']}: {en['pip']}\n# {ko['pip']}\n# !pip install torch\n"


SETUP = """\
import os
import sys

# `!python` and `!torchrun` below: this kernel's own Python environment comes first on PATH
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
{makedirs}"""
HELPER_NOTE = "A helper module the programs of this chapter import from their folder."


def notebook_path(name: str) -> str:
    """Repository path of the notebook of page `name` (a path inside docs/<lang>/)."""
    stem = PurePosixPath(name).with_suffix("")
    if stem.name == "index":
        stem = stem.parent
    return f"{FOLDER}/{'-'.join(stem.parts) or 'index'}.ipynb"


def colab_url(path: str, root: Path = ROOT) -> str:
    """Colab's address of the repository file `path` on main, e.g. for notebooks/ddp.ipynb."""
    repo = mkdocs_setting("repo_url", root).removeprefix("https://github.com/").strip("/")
    return COLAB.format(repo=repo, path=path)


def runs_on_cpu(path: str, root: Path = ROOT) -> bool:
    """A program (not a helper) whose declarations need no GPU."""
    return is_snippet(root / path) and not parse_spec(root / path, root).gpus


def chapter_notebook(name: str, root: Path = ROOT) -> str | None:
    """The repository path of page `name`'s notebook, or None for a page without a program that runs on a CPU.

    Notebook pages (``.ipynb``) are notebooks already. Pages include the same programs in every language (a test
    checks), so the default language's page decides.
    """
    if not name.endswith(".md"):
        return None
    programs = page_programs(DEFAULT_LANG, name, root / "docs")
    if not any((root / p).is_file() and runs_on_cpu(p, root) for p in programs):
        return None
    return notebook_path(name)


def chapters(root: Path = ROOT) -> dict[str, str]:
    """Every page that gets a notebook -> the notebook's repository path."""
    return {name: path for name in pages(DEFAULT_LANG, root / "docs") if (path := chapter_notebook(name, root))}


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _markdown(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": _lines(text.strip("\n"))}


def _code(text: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": _lines(text)}


def _summary(path: Path) -> str:
    """The first paragraph of a program's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _title(lang: str, name: str, root: Path) -> str:
    text = (root / "docs" / lang / name).read_text(encoding="utf-8")
    return next((t for level, t, _ in headings(text) if level == 1), name)


def _writefile(path: str, root: Path) -> dict:
    """A cell that writes the file byte for byte: IPython hands a cell magic everything after its first line."""
    text = (root / path).read_text(encoding="utf-8")
    if not text.endswith("\n"):
        raise ValueError(f"{path}: must end with a newline (IPython would add one, and the copy would differ)")
    return _code(f"%%writefile {path}\n{text}")


def _run(command: str, path: str) -> dict:
    if SHELL_SPECIAL.search(command):
        raise ValueError(f"{path}: IPython would expand part of its launch in a `!` line: {command}")
    return _code(f"!{command}")


def build(name: str, root: Path = ROOT) -> str:
    """The notebook of page `name`, as the JSON text to commit."""
    site = mkdocs_setting("site_url", root).rstrip("/") + "/"
    titles = {lang: _title(lang, name, root) for lang in LANGS}
    words = {lang: text(lang)["chapter_notebook"] for lang in ("en", "ko")}
    texts = {lang: words[lang]["intro"].format(title=titles[lang], url=site + url_path(lang, name)) for lang in words}
    title = titles["en"] if titles["en"] == titles["ko"] else f"{titles['en']} · {titles['ko']}"
    programs = [p for p in page_programs(DEFAULT_LANG, name, root / "docs") if p.endswith(".py")]
    needed = {p: sibling_files(root / p, root) for p in programs}
    files = list(dict.fromkeys(f for p in programs for f in [*needed[p], p]))
    folders = sorted({PurePosixPath(f).parent.as_posix() for f in files})
    makedirs = "".join(f'os.makedirs("{folder}", exist_ok=True)\n' for folder in folders)
    cells = [
        _markdown(INTRO.format(title=title, command=WRITE_COMMAND, **texts)),
        _code(_pip().rstrip("\n")),
        _code(SETUP.format(makedirs=makedirs).rstrip("\n")),
    ]
    written: set[str] = set()
    for path in programs:
        if path in written:
            continue
        header = f"## `{path}`\n\n{_summary(root / path)}"
        spec = parse_spec(root / path, root) if is_snippet(root / path) else None
        if spec is None:
            header += f"\n\n{HELPER_NOTE}"
        elif spec.gpus:
            notes = [words[lang]["gpu_note"].format(gpus=spec.gpus, command=spec.command) for lang in words]
            header += "\n\n" + "\n\n".join(notes) + "\n"
        cells.append(_markdown(header))
        for file in [*needed[path], path]:
            if file not in written:
                cells.append(_writefile(file, root))
                written.add(file)
        if spec is not None and not spec.gpus:
            cells.append(_run(spec.command, path))
    for n, cell in enumerate(cells):
        cell["id"] = f"cell-{n:02d}"
    notebook = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def stale(root: Path = ROOT) -> list[str]:
    """Notebooks that differ from what `build` gives now, are missing, or belong to no page any more."""
    want = {path: build(name, root) for name, path in chapters(root).items()}
    found = {p.relative_to(root).as_posix() for p in (root / FOLDER).glob("*.ipynb")}
    differ = [p for p, text in want.items() if not (root / p).is_file() or (root / p).read_text("utf-8") != text]
    return sorted(differ + [p for p in found if p not in want])


def write(root: Path = ROOT) -> list[str]:
    """Regenerate every chapter notebook and remove those of no page; return the paths changed."""
    changed = stale(root)
    want = chapters(root)
    (root / FOLDER).mkdir(exist_ok=True)
    for name, path in want.items():
        (root / path).write_text(build(name, root), encoding="utf-8")
    for path in changed:
        if path not in want.values():
            (root / path).unlink()
    return changed


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        changed = write()
        print("\n".join(("wrote " if (ROOT / p).is_file() else "removed ") + p for p in changed) or "up to date")
    else:
        bad = stale()
        print("\n".join(f"out of date: {p}" for p in bad) or "every chapter notebook is up to date")
        if bad:
            print(f"regenerate them with `{WRITE_COMMAND}` (python -m guidekit.notebooks --write)")
        sys.exit(1 if bad else 0)
