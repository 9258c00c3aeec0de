"""Chapter notebooks: every program a chapter runs, in one notebook per language a reader opens in Colab or Jupyter.

    python -m guidekit.notebooks          # list notebooks that differ from what the pages and snippets give now (exit 1)
    python -m guidekit.notebooks --write  # regenerate them (make notebooks-write)

Where they live: ``notebooks/<lang>/<chapter>.ipynb`` at the repository root, one per language for each Markdown page
that includes a program that runs without a GPU (``practices/mixed-precision.md`` ->
``notebooks/ko/practices-mixed-precision.ipynb`` and ``notebooks/en/practices-mixed-precision.ipynb``,
``practices/index.md`` -> ``notebooks/<lang>/practices.ipynb``). Not under ``docs/``: mkdocs-jupyter would render
every ``.ipynb`` there as a page. The site serves each file at its repository path (``/notebooks/ko/ddp.ipynb``, as
it serves snippets), so a page's download link and its Colab link (GitHub's copy on ``main``, :func:`colab_url`)
name one file: the Korean page links the Korean notebook, the English page the English one.

What one holds, all of its prose in the reader's language:

* an introduction (the text catalogue's ``chapter_notebook``), which says plainly that on a runtime with one GPU the
  programs that start several ranks run on the CPU;
* a first code cell that checks the torch version against the floor in pyproject.toml, with an install line
  commented out, puts the kernel's own Python first on PATH for ``!python``/``!torchrun`` (its comment in the
  reader's language, like the rest of the cell), and says whether the programs will use a GPU;
* a set-up cell (the folders);
* per program: a Markdown cell with the section heading and the paragraph that introduces the program's first
  include on that language's page (Markdown kept, links made absolute: one source for the words, the page), then a
  ``%%writefile snippets/...`` cell with the whole tested file byte for byte (section markers included; the files it
  imports or runs from its folder first) and a cell that runs it with its declared launch (``!torchrun ...`` /
  ``!python ...``). A program that needs GPUs (``# requires:``) gets a note with its command instead of a run.

Every code cell but the first is the same in both languages (tests/site/test_notebooks.py checks), so `make notebooks`
executes one language's copies. Files are written relative to the notebook's working directory, so it runs anywhere
torch is installed.
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from guidekit import ROOT
from guidekit.pages import (
    DEFAULT_LANG,
    LANGS,
    fences,
    headings,
    mkdocs_setting,
    page_programs,
    pages,
    repo_links,
    url_path,
)
from guidekit.spec import is_snippet, parse_spec, sibling_files
from guidekit.text import text

FOLDER = "notebooks"
COLAB = "https://colab.research.google.com/github/{repo}/blob/{branch}/{path}"
BRANCH = "main"  # the branch Colab opens: the one the site is published from
WRITE_COMMAND = "make notebooks-write"  # or: python -m guidekit.notebooks --write
SHELL_SPECIAL = re.compile(r"[$`{}\\]")  # IPython expands these in a `!` line: a launch must not contain them
LINE_LENGTH = 120  # pyproject.toml's [tool.ruff]: `make lint` formats the notebooks' code cells too
TORCH_FLOOR = re.compile(r"""["']torch\s*>=\s*(\d+)\.(\d+)""")  # pyproject.toml's dependency on torch

# What a page writes around its includes, by the start of a line (outside code fences)
CONTAINER = re.compile(r"^(?P<indent>[ \t]*)(?P<kind>===|!!!|\?\?\?\+?)[ \t]*(?P<rest>.*)$")  # tabs, admonitions
NOT_PROSE = re.compile(r"^\s*(\||#{1,6}\s|<|\*\[|\[\^[^\]]*\]:|\{:|-{3,}\s*$|\*{3,}\s*$|-->)")
ATTR_LIST = re.compile(r"\s*\{:?\s*[.#][^}]*\}\s*$")  # `{ #id }`, `{ .class }` at a line's end
LINK = re.compile(
    r"(?P<image>!?)\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]\((?P<target>[^()\s]+)(?P<title>\s+\"[^\"]*\")?\)"
)
FOOTNOTE_REF = re.compile(r"\[\^[^\]]+\]")
QUOTED = re.compile(r'^"(?P<title>.*)"$')

INTRO = """\
# {title}

{intro}

{gpus}
"""

CHECK = """\
# {first}
# {install}
# !pip install "torch>={floor}"
import os
import sys

import torch

# {path_note}
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
MINIMUM = {minimum}  # {minimum_note}
version = tuple(int(part) for part in torch.__version__.split(".")[:2])
gpus = torch.cuda.device_count()
{found}
if version < MINIMUM:
{old}
if gpus == 0:
{none}
elif gpus == 1:
{one}
else:
{many}"""

SETUP = """\
import os

{makedirs}"""


# -- which notebooks, where ----------------------------------------------------------------------------------------


def notebook_path(lang: str, name: str) -> str:
    """Repository path of the `lang` notebook of page `name` (a path inside docs/<lang>/)."""
    stem = PurePosixPath(name).with_suffix("")
    if stem.name == "index":
        stem = stem.parent
    return f"{FOLDER}/{lang}/{'-'.join(stem.parts) or 'index'}.ipynb"


def colab_url(path: str, root: Path = ROOT) -> str:
    """Colab's address of the repository file `path` on main, e.g. for notebooks/ko/ddp.ipynb: the only place that
    builds one (the repository comes from mkdocs.yml's repo_url)."""
    repo = mkdocs_setting("repo_url", root).removeprefix("https://github.com/").strip("/")
    return COLAB.format(repo=repo, branch=BRANCH, path=path)


def runs_on_cpu(path: str, root: Path = ROOT) -> bool:
    """A program (not a helper) whose declarations need no GPU."""
    return is_snippet(root / path) and not parse_spec(root / path, root).gpus


def has_notebook(name: str, root: Path = ROOT) -> bool:
    """Page `name` is a Markdown page that includes a program that runs on a CPU.

    Notebook pages (``.ipynb``) are notebooks already. Pages include the same programs in every language (a test
    checks), so the default language's page decides.
    """
    if not name.endswith(".md"):
        return False
    programs = page_programs(DEFAULT_LANG, name, root / "docs")
    return any((root / p).is_file() and runs_on_cpu(p, root) for p in programs)


def chapter_notebook(lang: str, name: str, root: Path = ROOT) -> str | None:
    """The repository path of the `lang` notebook of page `name`, or None for a page without one."""
    return notebook_path(lang, name) if has_notebook(name, root) else None


def chapter_pages(root: Path = ROOT) -> list[str]:
    """Every page that gets notebooks (one per language), by its path inside docs/<lang>/."""
    return [name for name in pages(DEFAULT_LANG, root / "docs") if has_notebook(name, root)]


def chapters(root: Path = ROOT) -> dict[tuple[str, str], str]:
    """(language, page) -> the notebook's repository path, for every page that gets notebooks."""
    return {(lang, name): notebook_path(lang, name) for name in chapter_pages(root) for lang in LANGS}


def torch_floor(root: Path = ROOT) -> tuple[int, int]:
    """The oldest torch the guide supports: pyproject.toml's ``torch>=X.Y``."""
    found = TORCH_FLOOR.search((root / "pyproject.toml").read_text(encoding="utf-8"))
    if not found:
        raise ValueError("pyproject.toml: no 'torch>=X.Y' dependency")
    return int(found[1]), int(found[2])


# -- the words: from the page that introduces each program -----------------------------------------------------------


@dataclass(frozen=True)
class Intro:
    """Where a page first includes a program: its section (title, URL) and the prose that leads to the include."""

    section: str
    url: str
    prose: str


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def heading_text(title: str) -> str:
    """A heading as a reader sees it: without its attribute list (`{ #id }`)."""
    return ATTR_LIST.sub("", title).strip()


def _absolute(markdown: str, lang: str, name: str, site: str) -> str:
    """Links of a page's Markdown as absolute URLs of the built site (a notebook has no neighbouring pages)."""
    page = site + url_path(lang, name)

    def resolve(match: re.Match) -> str:
        target = match["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            return match[0]
        path, _, anchor = target.partition("#")
        if not path:
            url = page
        else:
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), path))
            if resolved.endswith((".md", ".ipynb")):
                url = site + url_path(lang, resolved)
            else:  # an asset of the language's folder, built beside the pages
                url = site + ("" if lang == DEFAULT_LANG else f"{lang}/") + resolved
        url += f"#{anchor}" if anchor else ""
        return f"{match['image']}[{match['text']}]({url}{match['title'] or ''})"

    # `repo:` links become the repository's address first (as the site's hook does), then the rest resolve
    markdown = repo_links(markdown, mkdocs_setting("repo_url"))
    return FOOTNOTE_REF.sub("", LINK.sub(resolve, markdown))


def _paragraph_before(lines: list[str], end: int, indent: int, fenced: set[int]) -> tuple[int, list[str]] | None:
    """The paragraph that ends above line `end` (0-based, exclusive) at indentation `indent`, climbing out of the
    tabs and admonitions that hold the include: (its first line, its lines dedented), or None where a heading, code,
    a table or the like comes first."""
    i = end - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    if i < 0 or i in fenced:
        return None
    line = lines[i]
    if _indent(line) < indent:  # the include sits inside a container whose opening line this is
        container = CONTAINER.match(line)
        if not container:
            return None
        outer = _indent(line)
        if container["kind"] == "===":  # a tab: the paragraph comes before the whole group of tabs
            j = i - 1
            while j >= 0 and (
                not lines[j].strip()
                or _indent(lines[j]) > outer
                or (_indent(lines[j]) == outer and lines[j].lstrip().startswith("==="))
            ):
                j -= 1
            return _paragraph_before(lines, j + 1, outer, fenced)
        found = _paragraph_before(lines, i, outer, fenced)
        title = QUOTED.match(container["rest"].split(" ", 1)[1].strip()) if " " in container["rest"] else None
        return found or ((i, [title["title"]]) if title else None)
    if CONTAINER.match(line) or NOT_PROSE.match(line):
        return None
    start = i
    while start - 1 >= 0 and lines[start - 1].strip() and start - 1 not in fenced:
        above = lines[start - 1]
        if _indent(above) < indent or CONTAINER.match(above) or NOT_PROSE.match(above):
            break
        start -= 1
    if _indent(lines[start]) != indent:  # the body of an admonition or list above, not a paragraph of its own
        return None
    return start, [line[indent:] if line[:indent].strip() == "" else line.lstrip() for line in lines[start : i + 1]]


def page_intro(lang: str, name: str, program: str, root: Path = ROOT) -> Intro:
    """How page `name` of `lang` introduces `program`: the paragraph just above its first include (above the tabs or
    admonition that hold it; an admonition's title where nothing else comes first), and the section that holds it."""
    source = (root / "docs" / lang / name).read_text(encoding="utf-8")
    lines = source.splitlines()
    all_fences = fences(source)
    fenced = {n for f in all_fences for n in range(f.line - 1, f.end_line)}
    fence = next((f for f in all_fences if any(t.path == program for t in f.targets)), None)
    if fence is None:
        raise ValueError(f"docs/{lang}/{name}: does not include {program}")
    indent = len(fence.indent.expandtabs())
    found = _paragraph_before(lines, fence.line - 1, indent, fenced)
    site = mkdocs_setting("site_url", root).rstrip("/") + "/"
    above = "\n".join(line for n, line in enumerate(lines[: fence.line - 1]) if n not in fenced)
    sections = [(level, title, anchor) for level, title, anchor in headings(above)]
    level, title, anchor = sections[-1] if sections else (1, name, None)
    url = site + url_path(lang, name) + (f"#{anchor}" if anchor and level > 1 else "")
    prose = "\n".join(found[1]).strip() if found else ""
    return Intro(heading_text(title), url, _absolute(prose, lang, name, site))


# -- the cells ---------------------------------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _markdown(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": _lines(text.strip("\n"))}


def _code(text: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": _lines(text)}


def _title(lang: str, name: str, root: Path) -> str:
    source = (root / "docs" / lang / name).read_text(encoding="utf-8")
    return heading_text(next((t for level, t, _ in headings(source) if level == 1), name))


def _string(template: str, **fields: str) -> str:
    """A catalogue message as a Python string literal in a code cell; `fields` name the expressions it shows."""
    value = template.format(**{k: "{" + v + "}" for k, v in fields.items()})
    literal = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"f{literal}" if fields and any("{" + v + "}" in value for v in fields.values()) else literal


def _width(line: str) -> int:
    """Columns a line takes as ruff counts them: East Asian wide characters (Hangul) take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def _print(literal: str, indent: str = "") -> str:
    """`print(literal)` as ruff formats it: on its own lines where one line would pass the line length."""
    line = f"{indent}print({literal})"
    return line if _width(line) <= LINE_LENGTH else f"{indent}print(\n{indent}    {literal}\n{indent})"


def check_cell(lang: str, root: Path = ROOT) -> str:
    """The first code cell: which torch is installed, and whether the programs will use a GPU here."""
    words = text(lang, root)["chapter_notebook"]["check"]
    major, minor = torch_floor(root)
    floor = f"{major}.{minor}"
    plain = {key: words[key].format(minimum=floor) for key in ("first", "install", "minimum")}
    return CHECK.format(
        first=plain["first"],
        install=plain["install"],
        floor=floor,
        minimum=repr((major, minor)),
        minimum_note=plain["minimum"],
        path_note=text(lang, root)["chapter_notebook"]["path"],
        found=_print(_string(words["found"], version="torch.__version__", gpus="gpus")),
        old=_print(_string(words["old"].format(minimum=floor)), "    "),
        none=_print(_string(words["none"]), "    "),
        one=_print(_string(words["one"]), "    "),
        many=_print(_string(words["many"], gpus="gpus"), "    "),
    )


def _writefile(path: str, root: Path) -> dict:
    """A cell that writes the file byte for byte: IPython hands a cell magic everything after its first line."""
    source = (root / path).read_text(encoding="utf-8")
    if not source.endswith("\n"):
        raise ValueError(f"{path}: must end with a newline (IPython would add one, and the copy would differ)")
    return _code(f"%%writefile {path}\n{source}")


def _run(command: str, path: str) -> dict:
    if SHELL_SPECIAL.search(command):
        raise ValueError(f"{path}: IPython would expand part of its launch in a `!` line: {command}")
    return _code(f"!{command}")


# a quoted requirement in pyproject.toml (a regex, not tomllib: the project supports Python 3.10)
PROJECT_PACKAGE = re.compile(r'^\s*"(?P<name>[A-Za-z0-9_.-]+)\s*[<>=~!]', re.M)
ALWAYS_THERE = {"torch", "numpy", "multi-gpu-pytorch-guide"}  # torch is the check cell's; numpy comes with it


def project_packages(root: Path = ROOT) -> set[str]:
    """The packages pyproject.toml asks for (dependencies and extras) that a runtime may lack: not torch, numpy or
    the project itself, nor the site's and the tests' tools that no program imports."""
    return {m["name"].lower() for m in PROJECT_PACKAGE.finditer((root / "pyproject.toml").read_text("utf-8"))} - (
        ALWAYS_THERE
    )


def imported_packages(files: list[str], root: Path = ROOT) -> list[str]:
    """The project's packages that these programs import (top-level imports of their modules), sorted: what a
    notebook installs before it runs them."""
    wanted = project_packages(root)
    found = set()
    for file in files:
        for node in ast.walk(ast.parse((root / file).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return sorted(found & wanted)


def chapter_programs(name: str, root: Path = ROOT) -> list[str]:
    """The Python files page `name` includes, in page order (the default language's page: both include the same)."""
    return [p for p in page_programs(DEFAULT_LANG, name, root / "docs") if p.endswith(".py")]


def chapter_files(name: str, root: Path = ROOT) -> list[str]:
    """Every file the notebook of page `name` writes: each program after the siblings it imports, each file once."""
    return list(dict.fromkeys(f for p in chapter_programs(name, root) for f in [*sibling_files(root / p, root), p]))


def build(lang: str, name: str, root: Path = ROOT) -> str:
    """The `lang` notebook of page `name`, as the JSON text to commit."""
    site = mkdocs_setting("site_url", root).rstrip("/") + "/"
    words = text(lang, root)["chapter_notebook"]
    title = _title(lang, name, root)
    programs = chapter_programs(name, root)
    needed = {p: sibling_files(root / p, root) for p in programs}
    files = chapter_files(name, root)
    folders = sorted({PurePosixPath(f).parent.as_posix() for f in files})
    makedirs = "".join(f'os.makedirs("{folder}", exist_ok=True)\n' for folder in folders)
    intro = words["intro"].format(title=title, url=site + url_path(lang, name))
    cells = [
        _markdown(INTRO.format(title=title, intro=intro, gpus=words["gpus"])),
        _code(check_cell(lang, root)),
    ]
    if packages := imported_packages(files, root):  # beyond torch: installed where the runtime lacks them
        cells.append(_code(f"%pip install -q {' '.join(packages)}"))
    cells.append(_code(SETUP.format(makedirs=makedirs).rstrip("\n")))
    written: set[str] = set()
    section = None
    for path in programs:
        spec = parse_spec(root / path, root) if is_snippet(root / path) else None
        if spec is None and path in written:  # a helper, written already beside the program that imports it
            continue
        about = page_intro(lang, name, path, root)
        parts = [] if about.section == section else [f"## {about.section}"]
        section = about.section
        parts += [about.prose] if about.prose else []
        parts.append(words["program"].format(path=path, section=about.section, url=about.url))
        if spec is None:
            parts.append(words["helper"])
        elif spec.gpus:
            parts.append(words["gpu_note"].format(gpus=spec.gpus, command=spec.command))
        cells.append(_markdown("\n\n".join(parts)))
        for file in [*needed[path], path]:  # a program another one runs is written with that one, and runs here
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
            "guidekit": {"page": f"docs/{lang}/{name}", "generated_by": WRITE_COMMAND},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


# -- generate and check ------------------------------------------------------------------------------------------


def found(root: Path = ROOT) -> list[str]:
    """Every notebook under notebooks/, as repository paths."""
    return sorted(p.relative_to(root).as_posix() for p in (root / FOLDER).rglob("*.ipynb"))


def stale(root: Path = ROOT) -> list[str]:
    """Notebooks that differ from what `build` gives now, are missing, or belong to no page any more."""
    want = {path: build(lang, name, root) for (lang, name), path in chapters(root).items()}
    differ = [p for p, nb in want.items() if not (root / p).is_file() or (root / p).read_text("utf-8") != nb]
    return sorted(differ + [p for p in found(root) if p not in want])


def write(root: Path = ROOT) -> list[str]:
    """Regenerate every chapter notebook and remove those of no page; return the paths changed."""
    changed = stale(root)
    want = chapters(root)
    for (lang, name), path in want.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(build(lang, name, root), encoding="utf-8")
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
