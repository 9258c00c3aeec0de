"""Notebooks readers can run.

The page notebooks (performance.ipynb) show every cell they run (no set-up hidden: the report they call comes from
the installed guidekit), and offer their own .ipynb. Every chapter page that runs programs has a generated notebook
per language (guidekit/notebooks.py) that is up to date; it holds each program byte for byte with its declared launch,
after the paragraph that introduces it on that language's page; its first code cell checks torch and says whether a
GPU will be used; the page links it (Colab, download), Korean pages the Korean notebook. The two languages' code cells
are the same but for that first cell, so `make notebooks` executes the Korean copies only (marker `notebooks`, not in
the default run: minutes on 2 cores), and the first cell of each language is executed here against a stand-in torch.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import types
import uuid
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from guidekit import ROOT, notebooks
from guidekit.pages import DEFAULT_LANG, LANGS, built_path, headings, mkdocs_setting, page_programs, pages
from guidekit.pages import notebooks as page_notebooks
from guidekit.processes import FAULTHANDLER, RUN_TAG, dump_stacks, kill_tagged, tagged
from guidekit.spec import is_snippet, parse_spec, sibling_files
from guidekit.text import text

CHAPTERS = notebooks.chapters()  # (lang, page) -> notebooks/<lang>/<chapter>.ipynb
PAGES = notebooks.chapter_pages()
SITE = mkdocs_setting("site_url").rstrip("/") + "/"
HANGUL = re.compile(r"[\uac00-\ud7a3]")
MD_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^()\s]+)[^)]*\)")
NOTEBOOK_PAGES = [(lang, name) for lang in LANGS for name in sorted(page_notebooks(lang))]
LINE = re.compile(r'<p class="page-notebook"[^>]*>(.*?)</p>', re.S)
WRITEFILE = "%%writefile "


class Links(HTMLParser):
    """Every <a> in a piece of HTML: its attributes and its text; and whether it holds an image."""

    def __init__(self, text: str):
        super().__init__()
        self.links: list[tuple[dict, str]] = []
        self.images = 0
        self._open: list[tuple[dict, list[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._open.append((dict(attrs), []))
        elif tag in ("img", "svg", "picture"):
            self.images += 1

    def handle_data(self, data):
        for _, parts in self._open:
            parts.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._open:
            attrs, parts = self._open.pop()
            self.links.append((attrs, "".join(parts)))


def page_html(site: Path, lang: str, name: str) -> str:
    return (site / built_path(lang, name)).read_text(encoding="utf-8")


def page_text(source: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", source))


def notebook_lines(source: str) -> list[str]:
    """The 'page-notebook' lines of a built page (the line under its title)."""
    return LINE.findall(source)


def target(site: Path, lang: str, name: str, href: str) -> Path:
    """The file a relative link on a built page points to."""
    assert "://" not in href and not href.startswith("/"), f"expected a link relative to the page: {href}"
    return ((site / built_path(lang, name)).parent / href).resolve()


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]


def cells(lang: str, name: str) -> list[tuple[str, str]]:
    """(kind, source) of every cell of the `lang` notebook of page `name`."""
    nb = json.loads((ROOT / CHAPTERS[lang, name]).read_text(encoding="utf-8"))
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


def colab_prefix() -> str:
    """What Colab's address of a file on main starts with, from the repository named in mkdocs.yml."""
    repo = mkdocs_setting("repo_url").removeprefix("https://github.com/").strip("/")
    return f"https://colab.research.google.com/github/{repo}/blob/main/"


def plain(markdown: str) -> str:
    """Markdown's words for comparing texts: links reduced to their text, lines joined, spaces collapsed."""
    return " ".join(MD_LINK.sub(r"\1", markdown).split())


# -- the page notebooks: every cell shown, their .ipynb offered -------------------------------------------------


def test_mkdocs_jupyter_shows_every_cell():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    jupyter = next(p["mkdocs-jupyter"] for p in config["plugins"] if isinstance(p, dict) and "mkdocs-jupyter" in p)
    assert "remove_tag_config" not in jupyter, "no cell is run unseen"
    assert jupyter["include_source"] is True


@pytest.mark.parametrize("lang,name", NOTEBOOK_PAGES)
def test_page_notebook_has_no_plumbing(lang, name):
    """No hidden set-up cell and no sys.path: the first code cell imports the report from the installed guidekit."""
    cells = code_cells(ROOT / "docs" / lang / name)
    assert "".join(cells[0]["source"]) == "from guidekit import report"
    for cell in cells:
        assert not cell["metadata"].get("tags"), f"a tagged cell: {''.join(cell['source'])}"
        assert "sys.path" not in "".join(cell["source"])


@pytest.mark.parametrize("lang,name", NOTEBOOK_PAGES)
def test_notebook_page_offers_its_own_ipynb(built_site, lang, name):
    lines = notebook_lines(page_html(built_site, lang, name))
    assert len(lines) == 1, f"expected one line offering the notebook, found {len(lines)}"
    downloads = [attrs["href"] for attrs, _ in Links(lines[0]).links if "download" in attrs]
    assert len(downloads) == 1, lines[0]
    file = target(built_site, lang, name, downloads[0])
    assert file.is_file(), f"{downloads[0]} -> {file.relative_to(built_site)}: not in the built site"
    assert file.read_bytes() == (ROOT / "docs" / lang / name).read_bytes(), "the download is not this notebook"


# -- chapter notebooks: generated, fresh, complete ---------------------------------------------------------------


def test_chapter_notebooks_are_fresh():
    stale = notebooks.stale()
    assert not stale, (
        f"out of date with the pages and snippets: {stale}; "
        "regenerate with `make notebooks-write` (python -m guidekit.notebooks --write) and commit them"
    )


def test_every_chapter_with_a_program_for_the_cpu_has_one_per_language():
    with_cpu_programs = {
        name
        for name in pages("ko")
        if any(is_snippet(ROOT / p) and not parse_spec(ROOT / p).gpus for p in page_programs("ko", name))
    }
    assert set(PAGES) == with_cpu_programs
    assert set(CHAPTERS) == {(lang, name) for lang in LANGS for name in PAGES}
    assert len(set(CHAPTERS.values())) == len(CHAPTERS), "two pages share a notebook"
    for lang in LANGS:
        assert CHAPTERS[lang, "practices/index.md"] == f"notebooks/{lang}/practices.ipynb"
        assert CHAPTERS[lang, "practices/mixed-precision.md"] == f"notebooks/{lang}/practices-mixed-precision.ipynb"
    assert notebooks.found() == sorted(CHAPTERS.values()), "a notebook of no page under notebooks/"


@pytest.mark.parametrize("lang,name", sorted(CHAPTERS))
def test_chapter_notebook_writes_every_program_whole_and_runs_it_as_declared(lang, name):
    markdown = [source for kind, source in cells(lang, name) if kind == "markdown"]
    code = [source for kind, source in cells(lang, name) if kind == "code"]
    major, minor = notebooks.torch_floor()
    assert f'# !pip install "torch>={major}.{minor}"' in code[0].splitlines(), "the first cell offers an install"
    assert "import torch" in code[0] and "torch.cuda.device_count()" in code[0], "the first cell checks torch"
    # beyond torch, one cell installs the project's packages the chapter's programs import, and nothing else installs
    packages = notebooks.imported_packages(notebooks.chapter_files(name))
    installs = [c for c in code[1:] if "pip install" in c]
    assert installs == ([f"%pip install -q {' '.join(packages)}"] if packages else []), installs
    written = [source.split("\n", 1)[0].removeprefix(WRITEFILE) for source in code if source.startswith(WRITEFILE)]
    assert len(written) == len(set(written)), f"a file written twice: {written}"

    def write_cell(file: str) -> int:
        whole = f"{WRITEFILE}{file}\n" + (ROOT / file).read_text(encoding="utf-8")
        assert whole in code, f"{file}: no %%writefile cell holding the file byte for byte"
        return code.index(whole)

    programs = [p for p in page_programs("ko", name) if p.endswith(".py")]
    for path in programs:
        writes = [write_cell(file) for file in [*sibling_files(ROOT / path), path]]
        if not notebooks.runs_on_cpu(path):
            assert not [source for source in code if source.startswith("!") and path in source], f"{path}: run cell"
            if is_snippet(ROOT / path):
                spec = parse_spec(ROOT / path)
                note = text(lang)["chapter_notebook"]["gpu_note"].format(gpus=spec.gpus, command=spec.command)
                assert any(note in source for source in markdown), f"{path}: no note that it needs GPUs"
            continue
        run = f"!{parse_spec(ROOT / path).command}"  # the declared launch, unchanged
        assert run in code, f"{path}: no cell running {run}"
        assert max(writes) < code.index(run), f"{path} runs before all its files are written"
    runs = [source for source in code if source.startswith("!")]
    assert runs == [f"!{parse_spec(ROOT / p).command}" for p in programs if notebooks.runs_on_cpu(p)]


@pytest.mark.parametrize("name", PAGES)
def test_languages_differ_in_their_words_only(name):
    """The same cells in the same order; every code cell but the first (the check, in the reader's language) is the
    same in both languages, so running one language's copies runs the other's programs."""
    kinds = {lang: [kind for kind, _ in cells(lang, name)] for lang in LANGS}
    code = {lang: [source for kind, source in cells(lang, name) if kind == "code"] for lang in LANGS}
    first, *others = LANGS
    for lang in others:
        assert kinds[lang] == kinds[first]
        assert code[lang][1:] == code[first][1:], f"{lang} and {first} run different code"
    for lang in LANGS:
        assert code[lang][0] == notebooks.check_cell(lang)


@pytest.mark.parametrize("lang,name", sorted(CHAPTERS))
def test_notebook_speaks_the_readers_language_in_the_pages_words(lang, name):
    """Every Markdown cell is in the notebook's language. Each program follows the words that introduce it on that
    language's page (taken from the page, never typed twice) and a link to its section there."""
    page = (ROOT / "docs" / lang / name).read_text(encoding="utf-8")
    page_words = plain("\n".join(line.strip() for line in page.splitlines()))
    sections = {notebooks.heading_text(title) for _, title, _ in headings(page)}
    markdown = [source for kind, source in cells(lang, name) if kind == "markdown"]
    for source in markdown:
        if lang == "ko":
            assert HANGUL.search(source), f"a Markdown cell without Korean: {source[:200]}"
        else:
            assert not HANGUL.search(source), f"Korean in the {lang} notebook: {source[:200]}"
    words = text(lang)["chapter_notebook"]
    programs = [p for p in page_programs("ko", name) if p.endswith(".py")]
    for n, path in enumerate(programs):
        about = notebooks.page_intro(lang, name, path)
        line = words["program"].format(path=path, section=about.section, url=about.url)
        cell = next((source for source in markdown if line in source), None)
        if not is_snippet(ROOT / path) and any(path in sibling_files(ROOT / p) for p in programs[:n]):
            assert cell is None, f"{path}: a helper written beside an earlier program needs no cell of its own"
            continue
        assert cell, f"{path}: no cell naming it with a link to its section"
        assert about.url.startswith(SITE + ("" if lang == DEFAULT_LANG else f"{lang}/"))
        assert about.section in sections, f"{path}: '{about.section}' is not a heading of the page"
        assert about.prose, f"{path}: nothing on the page introduces it"
        assert about.prose in cell
        assert plain(about.prose) in page_words, f"{path}: the words before it are not the page's"


@pytest.mark.parametrize("lang,name", sorted(CHAPTERS))
def test_links_in_a_notebook_are_absolute_and_stay_in_its_language(lang, name):
    for kind, source in cells(lang, name):
        if kind != "markdown":
            continue
        for _, target in MD_LINK.findall(source):
            assert re.match(r"https?://", target), f"a relative link (the notebook has no neighbours): {target}"
            if target.startswith(SITE):
                inside = target.removeprefix(SITE)
                assert inside.startswith("en/") == (lang == "en"), f"a {lang} notebook links {target}"


def test_the_torch_floor_is_pyprojects():
    assert re.search(r'"torch>=2\.10"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert notebooks.torch_floor() == (2, 10)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize(
    "version,gpus,says",
    [
        ("2.9.1", 0, ["old", "none"]),
        ("2.10.0a0+git1234", 1, ["one"]),
        ("2.14.1+cu128", 1, ["one"]),
        ("2.15.0", 4, ["many"]),
    ],
)
def test_first_cell_says_which_torch_and_whether_a_gpu_will_be_used(monkeypatch, capsys, lang, version, gpus, says):
    """The first cell, run against a stand-in torch: the version, and on one GPU that multi-rank programs use the
    CPU."""
    torch = types.SimpleNamespace(__version__=version, cuda=types.SimpleNamespace(device_count=lambda: gpus))
    monkeypatch.setitem(sys.modules, "torch", torch)
    exec(compile(notebooks.check_cell(lang), f"check-{lang}", "exec"), {})
    words = text(lang)["chapter_notebook"]["check"]
    floor = "{}.{}".format(*notebooks.torch_floor())
    expected = [words["found"].format(version=version, gpus=gpus)]
    expected += [words[key].format(minimum=floor, gpus=gpus) for key in says]
    assert capsys.readouterr().out.splitlines() == expected


@pytest.mark.parametrize("lang", LANGS)
def test_first_cell_is_as_ruff_formats_it(lang):
    """`make lint` checks the notebooks' code cells: the generator writes the check as ruff formats it there."""
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(rf"^line-length = {notebooks.LINE_LENGTH}$", config, re.M), "the generator's line length"
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.is_file():
        pytest.skip("ruff is not installed beside this Python")
    result = subprocess.run(
        [ruff, "format", "--check", "--diff", "--stdin-filename", "notebooks/check.py", "-"],
        input=notebooks.check_cell(lang) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("lang", LANGS)
def test_intro_says_a_one_gpu_runtime_runs_multi_rank_programs_on_the_cpu(lang):
    name = PAGES[0]
    intro = cells(lang, name)[0][1]
    assert text(lang)["chapter_notebook"]["gpus"] in intro
    assert cells(lang, name)[1][0] == "code", "the check is the first code cell, right after the introduction"


# -- the generator itself, on a planted repository ---------------------------------------------------------------

INTROS = {
    "ko": "아래 프로그램은 1을 출력합니다. [다른 장](gpu.md#gpu)과 [위](#top)도 보세요.",
    "en": "The program below prints one. See [the other chapter](gpu.md#gpu) and [above](#top) too.",
}


def plant(root: Path) -> None:
    (root / "mkdocs.yml").write_text(
        "site_url: https://example.org/guide/\nrepo_url: https://github.com/someone/guide\n", encoding="utf-8"
    )
    (root / "pyproject.toml").write_text('dependencies = ["torch>=2.7"]\n', encoding="utf-8")
    shutil.copytree(ROOT / "theme" / "text", root / "theme" / "text")
    files = {
        "snippets/x/_helper.py": '"""A helper."""\n\nVALUE = 1\n',
        "snippets/x/prog.py": '"""Prints one."""\n# launch: torchrun --standalone --nproc-per-node=2 snippets/x/prog.py\n'
        "from _helper import VALUE\n\nassert VALUE == 1\n",
        "snippets/x/gpu.py": '"""Needs GPUs."""\n# requires: gpus=2\nassert True\n',
    }
    for lang, title in (("ko", "제목"), ("en", "Title")):
        files[f"docs/{lang}/x.md"] = (
            f'# {title}\n\n## {title} 1 {{ #one }}\n\n{INTROS[lang]}\n\n```python\n--8<-- "snippets/x/prog.py"\n```\n'
        )
        files[f"docs/{lang}/gpu.md"] = f'# {title}\n\n```python\n--8<-- "snippets/x/gpu.py"\n```\n'
        files[f"docs/{lang}/index.md"] = f"# {title}\n"
    for path, source in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(source, encoding="utf-8")


def test_generator_finds_writes_and_flags_stale_notebooks(tmp_path):
    plant(tmp_path)
    paths = ["notebooks/en/x.ipynb", "notebooks/ko/x.ipynb"]
    # gpu.md: nothing runs on a CPU
    assert notebooks.chapters(tmp_path) == {("ko", "x.md"): paths[1], ("en", "x.md"): paths[0]}
    assert notebooks.stale(tmp_path) == paths  # missing
    assert notebooks.write(tmp_path) == paths
    assert notebooks.stale(tmp_path) == []
    nb = {lang: json.loads((tmp_path / f"notebooks/{lang}/x.ipynb").read_text(encoding="utf-8")) for lang in LANGS}
    code = {lang: ["".join(c["source"]) for c in nb[lang]["cells"] if c["cell_type"] == "code"] for lang in LANGS}
    assert code["ko"][-3:] == [
        "%%writefile snippets/x/_helper.py\n" + (tmp_path / "snippets/x/_helper.py").read_text(),
        "%%writefile snippets/x/prog.py\n" + (tmp_path / "snippets/x/prog.py").read_text(),
        "!torchrun --standalone --nproc-per-node=2 snippets/x/prog.py",
    ]
    assert code["ko"][1:] == code["en"][1:]
    assert '# !pip install "torch>=2.7"' in code["ko"][0] and "MINIMUM = (2, 7)" in code["ko"][0]
    assert 'os.makedirs("snippets/x", exist_ok=True)' in code["ko"][1]
    markdown = {
        lang: ["".join(c["source"]) for c in nb[lang]["cells"] if c["cell_type"] == "markdown"] for lang in LANGS
    }
    assert markdown["ko"][0].startswith("# 제목\n") and "https://example.org/guide/x/" in markdown["ko"][0]
    assert markdown["en"][0].startswith("# Title\n") and "https://example.org/guide/en/x/" in markdown["en"][0]
    assert markdown["ko"][1] == (
        "## 제목 1\n\n아래 프로그램은 1을 출력합니다. [다른 장](https://example.org/guide/gpu/#gpu)과 "
        "[위](https://example.org/guide/x/#top)도 보세요.\n\n"
        "`snippets/x/prog.py` · 페이지에서 읽기: [제목 1](https://example.org/guide/x/#one)"
    )
    assert "[the other chapter](https://example.org/guide/en/gpu/#gpu)" in markdown["en"][1]
    assert notebooks.colab_url("notebooks/ko/x.ipynb", tmp_path) == (
        "https://colab.research.google.com/github/someone/guide/blob/main/notebooks/ko/x.ipynb"
    )
    # a snippet changes: the notebooks are stale until rewritten; a notebook of no page is stale and removed
    (tmp_path / "snippets/x/_helper.py").write_text('"""A helper."""\n\nVALUE = 1  # changed\n', encoding="utf-8")
    (tmp_path / "notebooks/old.ipynb").write_text("{}", encoding="utf-8")
    assert notebooks.stale(tmp_path) == ["notebooks/en/x.ipynb", "notebooks/ko/x.ipynb", "notebooks/old.ipynb"]
    notebooks.write(tmp_path)
    assert notebooks.stale(tmp_path) == [] and not (tmp_path / "notebooks/old.ipynb").exists()


def test_generator_installs_the_project_packages_a_chapter_imports_and_no_other(tmp_path):
    """A package pyproject.toml asks for is installed where a program or the helper it imports needs it; torch, numpy
    and a package no program imports are not."""
    plant(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        'dependencies = [\n    "torch>=2.7",\n    "numpy>=1.26",\n    "safetensors>=0.4",\n    "torchao>=0.18",\n]\n'
        '[project.optional-dependencies]\ntest = [\n    "Transformers>=4.46",  # test-only\n    "pytest>=8",\n]\n',
        encoding="utf-8",
    )
    helper, prog = tmp_path / "snippets/x/_helper.py", tmp_path / "snippets/x/prog.py"
    helper.write_text(helper.read_text() + "import numpy\nfrom safetensors.torch import save_file\n", encoding="utf-8")
    prog.write_text(prog.read_text() + "import transformers.models\nimport torch.nn\n", encoding="utf-8")
    assert notebooks.project_packages(tmp_path) == {"safetensors", "torchao", "transformers", "pytest"}
    assert notebooks.chapter_files("x.md", tmp_path) == ["snippets/x/_helper.py", "snippets/x/prog.py"]
    notebooks.write(tmp_path)
    for lang in LANGS:
        nb = json.loads((tmp_path / f"notebooks/{lang}/x.ipynb").read_text(encoding="utf-8"))
        installs = ["".join(c["source"]) for c in nb["cells"] if "pip install" in "".join(c["source"])]
        assert installs[1:] == ["%pip install -q safetensors transformers"], installs  # [0]: the check's comment


@pytest.mark.parametrize(
    "page,intro",
    [
        # inside a tab: the paragraph before the whole group of tabs
        (
            'Two ways.\n\n=== "A"\n\n    ```python\n    --8<-- "snippets/x/gpu.py"\n    ```\n\n'
            '=== "B"\n\n    ```python\n    --8<-- "snippets/x/prog.py"\n    ```\n',
            "Two ways.",
        ),
        # inside an admonition, a paragraph of its own first
        (
            'Before.\n\n??? info "Title"\n\n    Inside.\n\n    ```python\n    --8<-- "snippets/x/prog.py"\n    ```\n',
            "Inside.",
        ),
        # an admonition with nothing before the code, after code: its title
        (
            '```python\n--8<-- "snippets/x/gpu.py"\n```\n\n??? info "`prog.py`: the title"\n\n'
            '    ```python\n    --8<-- "snippets/x/prog.py"\n    ```\n',
            "`prog.py`: the title",
        ),
        # a table or an admonition's body right above: no paragraph of the section introduces it
        ('| a |\n|---|\n| b |\n\n```python\n--8<-- "snippets/x/prog.py"\n```\n', ""),
        ('!!! note\n\n    A note.\n\n```python\n--8<-- "snippets/x/prog.py"\n```\n', ""),
        # a paragraph of several lines, and a list item
        ('Line one\nline two:\n\n```python\n--8<-- "snippets/x/prog.py:s"\n```\n', "Line one\nline two:"),
        (
            'Intro.\n\n- a point\n  that goes on\n\n```python\n--8<-- "snippets/x/prog.py"\n```\n',
            "- a point\n  that goes on",
        ),
    ],
    ids=["tabs", "admonition", "admonition-title", "table", "note-body", "lines", "list"],
)
def test_the_words_before_a_program_on_its_page(tmp_path, page, intro):
    plant(tmp_path)
    (tmp_path / "docs/en/t.md").write_text(f"# T\n\n## S {{ #s }}\n\n{page}", encoding="utf-8")
    about = notebooks.page_intro("en", "t.md", "snippets/x/prog.py", tmp_path)
    assert (about.prose, about.section, about.url) == (intro, "S", "https://example.org/guide/en/t/#s")


def test_a_launch_ipython_would_expand_is_refused(tmp_path):
    plant(tmp_path)
    prog = tmp_path / "snippets/x/prog.py"
    prog.write_text(prog.read_text().replace("snippets/x/prog.py\n", "snippets/x/prog.py --out=$HOME\n", 1))
    with pytest.raises(ValueError, match="expand"):
        notebooks.build("ko", "x.md", tmp_path)


# -- the chapter pages link their notebook, in their language ------------------------------------------------------


@pytest.mark.parametrize("lang,name", sorted(CHAPTERS))
def test_chapter_page_links_colab_and_a_download_of_its_notebook(built_site, lang, name):
    lines = notebook_lines(page_html(built_site, lang, name))
    assert len(lines) == 1, f"expected one line offering the notebook, found {len(lines)}"
    parsed = Links(lines[0])
    assert parsed.images == 0, "a plain link: no badge image (the page loads nothing from another host)"
    hrefs = [attrs["href"] for attrs, _ in parsed.links]
    assert CHAPTERS[lang, name].startswith(f"notebooks/{lang}/")
    assert colab_prefix() + CHAPTERS[lang, name] in hrefs, hrefs
    downloads = [attrs["href"] for attrs, _ in parsed.links if "download" in attrs]
    assert len(downloads) == 1, hrefs
    file = target(built_site, lang, name, downloads[0])
    assert file.is_file(), f"{downloads[0]} -> {file}: not in the built site"
    assert file.read_bytes() == (ROOT / CHAPTERS[lang, name]).read_bytes(), "the download is not this notebook"


@pytest.mark.parametrize("lang", LANGS)
def test_pages_without_a_notebook_offer_none(built_site, lang):
    offered = [name for name in pages(lang) if name not in PAGES and notebook_lines(page_html(built_site, lang, name))]
    assert not offered


# -- make notebooks: run every chapter notebook as a reader would -------------------------------------------------

CHECK_EXIT = "assert _exit_code == 0, f'the command above exited with {_exit_code}'"  # IPython sets it after `!`
CELL_TIMEOUT_S = 600
STACKS_BEFORE_S = 30  # a cell still running this long before its timeout: every Python process below it prints where


def run_notebook(nb, folder: Path, timeout_s: float = CELL_TIMEOUT_S, stacks_before_s: float = STACKS_BEFORE_S):
    """Execute nb in folder with nbclient, a check after every `!` command (`!` ignores failures). A cell that hangs
    does not only time out: shortly before, every Python process it started gets SIGABRT with Python's faulthandler
    on (guidekit/processes.py), so the command's output shows each thread's traceback and the check after it fails.
    Returns the error the run raised, if any."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    run = []
    for cell in nb.cells:
        run.append(cell)
        if cell.cell_type == "code" and cell.source.startswith("!"):
            run.append(nbformat_cell(CHECK_EXIT))
    nb.cells = run
    tag, running, finished = uuid.uuid4().hex, {}, threading.Event()
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3", resources={"metadata": {"path": str(folder)}})
    client.on_cell_execute = lambda cell, cell_index: running.update(cell=cell_index, since=time.monotonic())

    def watch():
        dumped = None
        while not finished.wait(1):  # until the run ends, at most every cell's timeout
            late = running and time.monotonic() - running["since"] > timeout_s - stacks_before_s
            if late and dumped != running["cell"]:
                dumped = running["cell"]
                dump_stacks([pid for pid, command in tagged(tag).items() if "ipykernel" not in command])

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        client.execute(env={**os.environ, **FAULTHANDLER, RUN_TAG: tag})
    except (CellExecutionError, CellTimeoutError) as error:
        return error
    finally:
        finished.set()
        watcher.join()
        kill_tagged(tag, grace_s=0)
    return None


def nbformat_cell(source: str):
    import nbformat

    return nbformat.v4.new_code_cell(source)


def failure(nb, path: str, error) -> str:
    ran = [c for c in nb.cells if c.cell_type == "code" and c.get("outputs")]
    last = "".join(o.get("text", "") for o in ran[-2].outputs) if len(ran) > 1 else ""
    return f"{path}: {str(error)[-1500:]}\noutput of the command before:\n{last[-6000:]}"


@pytest.mark.notebooks
@pytest.mark.parametrize("name", PAGES)
def test_chapter_notebook_runs(name, tmp_path):
    """The default language's copy, executed in an empty folder on CPU (the other languages differ in the first cell
    only: test_languages_differ_in_their_words_only)."""
    import nbformat

    path = CHAPTERS[DEFAULT_LANG, name]
    nb = nbformat.read(ROOT / path, as_version=4)
    if error := run_notebook(nb, tmp_path):
        pytest.fail(failure(nb, path, error))
    first = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert first.startswith("torch "), f"the first cell printed: {first}"
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith(WRITEFILE):
            written = cell.source.split("\n", 1)[0].removeprefix(WRITEFILE)
            assert (tmp_path / written).read_bytes() == (ROOT / written).read_bytes(), f"{written} not byte for byte"
    assert sum(c.source == CHECK_EXIT for c in nb.cells) == sum(map(notebooks.runs_on_cpu, page_programs("ko", name)))


HUNG = """import time


def wait_for_a_peer_that_never_comes():
    time.sleep(600)


wait_for_a_peer_that_never_comes()
"""


@pytest.mark.runs
def test_a_hung_command_in_a_notebook_shows_where_it_waits(tmp_path):
    """What `make notebooks` reports when a program hangs: its traceback, before the cell's timeout."""
    import nbformat

    nb = nbformat.v4.new_notebook(
        cells=[nbformat_cell(f"%%writefile hung.py\n{HUNG}"), nbformat_cell("!python hung.py")]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    started = time.monotonic()
    error = run_notebook(nb, tmp_path, timeout_s=40, stacks_before_s=30)
    assert time.monotonic() - started < 40, "the hang was cut short by the timeout, not by the stacks"
    report = failure(nb, "hung.ipynb", error) if error else ""
    assert "the command above exited with" in report, report
    assert re.search(r'File "[^"]*hung.py", line 5 in wait_for_a_peer_that_never_comes', report), report
