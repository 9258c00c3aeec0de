"""Notebooks readers can run.

The page notebooks (performance.ipynb) show every cell they run (no set-up hidden: the report they call comes from
the installed guidekit), and offer their own .ipynb. Every chapter page that runs programs has a generated notebook (guidekit/notebooks.py) that is up to date,
holds each program byte for byte with its declared launch, and is linked from the page in both languages (Colab,
download). `make notebooks` executes every chapter notebook as a reader would (marker `notebooks`, not in the default
run: minutes on 2 cores).
"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from guidekit import ROOT, notebooks
from guidekit.pages import LANGS, built_path, page_programs, pages
from guidekit.pages import notebooks as page_notebooks
from guidekit.spec import is_snippet, parse_spec, sibling_files

COLAB = "https://colab.research.google.com/github/multi-gpu-pytorch/guide/blob/main/"
CHAPTERS = notebooks.chapters()
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


def test_every_chapter_with_a_program_for_the_cpu_has_one():
    with_cpu_programs = {
        name
        for name in pages("ko")
        if any(is_snippet(ROOT / p) and not parse_spec(ROOT / p).gpus for p in page_programs("ko", name))
    }
    assert set(CHAPTERS) == with_cpu_programs
    assert len(set(CHAPTERS.values())) == len(CHAPTERS), "two pages share a notebook"
    assert CHAPTERS["practices/index.md"] == "notebooks/practices.ipynb"
    assert CHAPTERS["practices/mixed-precision.md"] == "notebooks/practices-mixed-precision.ipynb"


@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_chapter_notebook_writes_every_program_whole_and_runs_it_as_declared(name):
    cells = json.loads((ROOT / CHAPTERS[name]).read_text(encoding="utf-8"))["cells"]
    markdown = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    assert "# !pip install torch" in code[0].splitlines(), "the first cell offers an optional install"
    assert all(line.startswith("#") for line in code[0].splitlines()), "the install cell runs nothing unless asked"
    written = [text.split("\n", 1)[0].removeprefix(WRITEFILE) for text in code if text.startswith(WRITEFILE)]
    assert len(written) == len(set(written)), f"a file written twice: {written}"

    def write_cell(file: str) -> int:
        whole = f"{WRITEFILE}{file}\n" + (ROOT / file).read_text(encoding="utf-8")
        assert whole in code, f"{file}: no %%writefile cell holding the file byte for byte"
        return code.index(whole)

    programs = [p for p in page_programs("ko", name) if p.endswith(".py")]
    for path in programs:
        writes = [write_cell(file) for file in [*sibling_files(ROOT / path), path]]
        if not notebooks.runs_on_cpu(path):
            assert not [text for text in code if text.startswith("!") and path in text], f"{path}: no run cell"
            if is_snippet(ROOT / path):
                spec = parse_spec(ROOT / path)
                assert any(path in text and f"Needs {spec.gpus} CUDA GPU" in text for text in markdown), path
            continue
        run = f"!{parse_spec(ROOT / path).command}"  # the declared launch, unchanged
        assert run in code, f"{path}: no cell running {run}"
        assert max(writes) < code.index(run), f"{path} runs before all its files are written"
    runs = [text for text in code if text.startswith("!")]
    assert runs == [f"!{parse_spec(ROOT / p).command}" for p in programs if notebooks.runs_on_cpu(p)]


# -- the generator itself, on a planted repository ---------------------------------------------------------------


def plant(root: Path) -> None:
    (root / "mkdocs.yml").write_text(
        "site_url: https://example.org/guide/\nrepo_url: https://github.com/someone/guide\n", encoding="utf-8"
    )
    files = {
        "snippets/x/_helper.py": '"""A helper."""\n\nVALUE = 1\n',
        "snippets/x/prog.py": '"""Prints one."""\n# launch: torchrun --standalone --nproc-per-node=2 snippets/x/prog.py\n'
        "from _helper import VALUE\n\nassert VALUE == 1\n",
        "snippets/x/gpu.py": '"""Needs GPUs."""\n# requires: gpus=2\nassert True\n',
    }
    for lang, title in (("ko", "제목"), ("en", "Title")):
        files[f"docs/{lang}/x.md"] = f'# {title}\n\n```python\n--8<-- "snippets/x/prog.py"\n```\n'
        files[f"docs/{lang}/gpu.md"] = f'# {title}\n\n```python\n--8<-- "snippets/x/gpu.py"\n```\n'
        files[f"docs/{lang}/index.md"] = f"# {title}\n"
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")


def test_generator_finds_writes_and_flags_stale_notebooks(tmp_path):
    plant(tmp_path)
    assert notebooks.chapters(tmp_path) == {"x.md": "notebooks/x.ipynb"}  # gpu.md: nothing runs on a CPU
    assert notebooks.stale(tmp_path) == ["notebooks/x.ipynb"]  # missing
    assert notebooks.write(tmp_path) == ["notebooks/x.ipynb"]
    assert notebooks.stale(tmp_path) == []
    nb = json.loads((tmp_path / "notebooks/x.ipynb").read_text(encoding="utf-8"))
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert code[-3:] == [
        "%%writefile snippets/x/_helper.py\n" + (tmp_path / "snippets/x/_helper.py").read_text(),
        "%%writefile snippets/x/prog.py\n" + (tmp_path / "snippets/x/prog.py").read_text(),
        "!torchrun --standalone --nproc-per-node=2 snippets/x/prog.py",
    ]
    assert 'os.makedirs("snippets/x", exist_ok=True)' in code[1]
    intro = "".join(nb["cells"][0]["source"])
    assert (
        "# Title · 제목" in intro
        and "https://example.org/guide/en/x/" in intro
        and "https://example.org/guide/x/" in intro
    )
    assert notebooks.colab_url("notebooks/x.ipynb", tmp_path) == (
        "https://colab.research.google.com/github/someone/guide/blob/main/notebooks/x.ipynb"
    )
    # a snippet changes: the notebook is stale until rewritten; a notebook of no page is stale and removed
    (tmp_path / "snippets/x/_helper.py").write_text('"""A helper."""\n\nVALUE = 1  # changed\n', encoding="utf-8")
    (tmp_path / "notebooks/old.ipynb").write_text("{}", encoding="utf-8")
    assert notebooks.stale(tmp_path) == ["notebooks/old.ipynb", "notebooks/x.ipynb"]
    notebooks.write(tmp_path)
    assert notebooks.stale(tmp_path) == [] and not (tmp_path / "notebooks/old.ipynb").exists()


def test_a_launch_ipython_would_expand_is_refused(tmp_path):
    plant(tmp_path)
    prog = tmp_path / "snippets/x/prog.py"
    prog.write_text(prog.read_text().replace("snippets/x/prog.py\n", "snippets/x/prog.py --out=$HOME\n", 1))
    with pytest.raises(ValueError, match="expand"):
        notebooks.build("x.md", tmp_path)


# -- the chapter pages link their notebook ------------------------------------------------------------------------


@pytest.mark.parametrize("lang,name", [(lang, name) for lang in LANGS for name in sorted(CHAPTERS)])
def test_chapter_page_links_colab_and_a_download_of_its_notebook(built_site, lang, name):
    lines = notebook_lines(page_html(built_site, lang, name))
    assert len(lines) == 1, f"expected one line offering the notebook, found {len(lines)}"
    parsed = Links(lines[0])
    assert parsed.images == 0, "a plain link: no badge image (the page loads nothing from another host)"
    hrefs = [attrs["href"] for attrs, _ in parsed.links]
    assert COLAB + CHAPTERS[name] in hrefs, hrefs
    downloads = [attrs["href"] for attrs, _ in parsed.links if "download" in attrs]
    assert len(downloads) == 1, hrefs
    file = target(built_site, lang, name, downloads[0])
    assert file.is_file(), f"{downloads[0]} -> {file}: not in the built site"
    assert file.read_bytes() == (ROOT / CHAPTERS[name]).read_bytes(), "the download is not the chapter's notebook"


@pytest.mark.parametrize("lang", LANGS)
def test_pages_without_a_notebook_offer_none(built_site, lang):
    offered = [
        name for name in pages(lang) if name not in CHAPTERS and notebook_lines(page_html(built_site, lang, name))
    ]
    assert not offered


# -- make notebooks: run every chapter notebook as a reader would -------------------------------------------------

CHECK_EXIT = "assert _exit_code == 0, f'the command above exited with {_exit_code}'"  # IPython sets it after `!`


@pytest.mark.notebooks
@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_chapter_notebook_runs(name, tmp_path):
    """Executed in an empty folder on CPU with nbclient; `!` ignores failures, so a check follows every command."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(ROOT / CHAPTERS[name], as_version=4)
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type == "code" and cell.source.startswith("!"):
            cells.append(nbformat.v4.new_code_cell(CHECK_EXIT))
    nb.cells = cells
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError as error:
        ran = [c for c in nb.cells if c.cell_type == "code" and c.get("outputs")]
        last = "".join(o.get("text", "") for o in ran[-2].outputs) if len(ran) > 1 else ""
        pytest.fail(f"{CHAPTERS[name]}: {str(error)[-1500:]}\noutput of the command before:\n{last[-6000:]}")
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith(WRITEFILE):
            path = cell.source.split("\n", 1)[0].removeprefix(WRITEFILE)
            assert (tmp_path / path).read_bytes() == (ROOT / path).read_bytes(), f"{path} was not written byte for byte"
    assert sum(c.source == CHECK_EXIT for c in nb.cells) == sum(map(notebooks.runs_on_cpu, page_programs("ko", name)))
