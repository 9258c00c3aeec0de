"""The per-change lane (`make changed`): run what a change can break, selected from the diff against a base.

`pytest --changed=BASE` collects the whole suite as usual, then keeps only:

- the source checks (everything `make check` runs: lint-speed tests that start nothing and build nothing);
- the programs a change touches: a changed program, the programs that import or run it, the program of a changed
  recording, and every program a changed page includes (declared copies are held to their originals by a source
  check; `make sync-copies` then changes the copies' files, which the lane picks up as changed programs);
- the site checks of the pages a change touches: a changed page, and every page that includes a changed program or
  recording (tests parametrized by page keep their items for those pages, in both languages' sense of the page);
  with them one strict build and the checks that read the whole built site;
- a test module, whole, when it changed or when a file it depends on changed (`DEPENDS`); the machinery's own tests
  (`MACHINERY_TESTS`) only then, though unmarked;
- everything, when a change reaches the machinery that every test runs on (`EVERYTHING`), or a path it cannot
  classify: a change the lane cannot place runs the whole suite rather than nothing.

The selection is made the same way on every pytest-xdist worker (from git and the files), and printed in the header.
"""

from __future__ import annotations

import fnmatch
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

from guidekit import ROOT

# A change here can change what any test or program does: run the whole suite.
EVERYTHING = (
    "conftest.py",
    "pyproject.toml",
    "Makefile",
    ".ci/*",
    ".github/*",
    "tests/conftest.py",
    "tests/helpers/*",
    "guidekit/__init__.py",
    "guidekit/runner.py",
    "guidekit/schedule.py",
    "guidekit/spec.py",
    "guidekit/processes.py",
    "guidekit/machine.py",
    "guidekit/outputs.py",
    "guidekit/probe/*",
    "snippets/ruff.toml",
)
# A change here changes how every page is built or checked: every site check, no program.
WHOLE_SITE = (
    "mkdocs.yml",
    "theme/*",
    "docs/stylesheets/*",
    "docs/javascripts/*",
    "docs/*/assets/*",
    "guidekit/pages.py",
    "guidekit/sections.py",
    "guidekit/text.py",
    "guidekit/notebooks.py",
    "guidekit/copies.py",
    "guidekit/glossary.py",
    "guidekit/terminology.py",
    "guidekit/accessibility.py",
    "guidekit/code_layout.py",
    "guidekit/errors.py",
    "guidekit/report.py",
)
# Paths that no test reads: records of runs, notes, the lane's own inputs.
NOTHING = (
    "README.md",
    "CONTRIBUTING.md",
    ".gitignore",
    "tests/MEASUREMENTS.md",
    "tests/durations.json",
    "tests/soak_results/*",
    "tests/repro/*",
)
# Test modules that are neither source checks nor parametrized by page, with what they read besides themselves.
DEPENDS = {
    "tests/site/test_build_guards.py": ("mkdocs.yml", "theme/*"),
    "tests/site/test_accessibility.py": ("mkdocs.yml", "theme/*", "docs/stylesheets/*", "docs/javascripts/*"),
    "tests/site/test_browser.py": ("mkdocs.yml", "theme/*", "docs/stylesheets/*", "docs/javascripts/*"),
    "tests/site/test_search.py": ("mkdocs.yml", "theme/*", "docs/*/glossary.md", "docs/*/index.md"),
    "tests/site/test_calculators.py": (
        "docs/javascripts/calculators.js",
        "docs/*/calculators.md",
        "snippets/large_models/*",
        "snippets/benchmark/*",
        "guidekit/report.py",
    ),
    "tests/site/test_errors.py": ("docs/*/errors.md", "guidekit/errors.py", "page:errors.md"),
    "tests/site/test_home.py": ("docs/*/index.md", "mkdocs.yml", "theme/*", "docs/*/verified.md"),
    "tests/site/test_results.py": ("snippets/benchmark/*", "guidekit/report.py", "docs/*/performance.ipynb"),
    "tests/programs/test_resume_bits.py": ("snippets/fault/train_resumable*.py",),
    "tests/machinery/test_runner.py": ("guidekit/*",),
    "tests/machinery/test_schedule.py": ("guidekit/*",),
    "tests/machinery/test_changed.py": ("guidekit/changed.py",),
    "tests/machinery/test_gpu_box.py": ("guidekit/*",),
    "tests/machinery/test_soak.py": ("guidekit/soak.py", "guidekit/spec.py", "guidekit/outputs.py"),
    "tests/multinode/*": ("tests/multinode/*", "snippets/launch/*", "recordings/multinode/*", "guidekit/processes.py"),
}
SOURCE_MARKERS = ("site", "runs", "browser", "notebooks", "snippet")  # an item with none of these is a source check
# The machinery's own tests start programs, git repositories and pytest runs of their own: unmarked, they are still no
# source checks, and run only when they or what they read change.
MACHINERY_TESTS = tuple(module for module in DEPENDS if module.startswith("tests/machinery/"))


def matches(path: str, patterns) -> bool:
    return any(fnmatch.fnmatch(path, pattern) for pattern in patterns)


def git_changes(base: str, root: Path = ROOT) -> list[str]:
    """Repository paths that differ between `base` and the working tree (commits since, staged, unstaged), and
    untracked files that git does not ignore; both sides of a rename."""

    def git(*args: str) -> list[str]:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
        return [line for line in done.stdout.splitlines() if line]

    changed = git("diff", "--name-only", "--no-renames", base)
    return sorted({*changed, *git("ls-files", "--others", "--exclude-standard")})


@dataclass
class Selection:
    everything: str = ""  # why the whole suite runs, or empty
    whole_site: str = ""  # why every site check runs, or empty
    programs: set[str] = field(default_factory=set)  # repository paths of programs to run
    pages: set[tuple[str, str]] = field(default_factory=set)  # (lang, page inside docs/<lang>/)
    modules: set[str] = field(default_factory=set)  # test modules (or module patterns) to run whole
    touched: list[str] = field(default_factory=list)  # the changed paths

    @property
    def site(self) -> bool:
        """The site must be built: a page, program, recording or the site machinery changed."""
        return bool(self.everything or self.whole_site or self.pages)

    def describe(self) -> list[str]:
        if self.everything:
            return [f"changed: {len(self.touched)} file(s); the whole suite runs ({self.everything})"]
        lines = [f"changed: {len(self.touched)} file(s): " + (", ".join(self.touched[:8]) or "none")]
        if len(self.touched) > 8:
            lines[-1] += f" and {len(self.touched) - 8} more"
        lines.append(f"programs: {', '.join(sorted(self.programs)) or 'none'}")
        if self.whole_site:
            lines.append(f"pages: every page ({self.whole_site})")
        else:
            lines.append(f"pages: {', '.join(f'{lang}/{name}' for lang, name in sorted(self.pages)) or 'none'}")
        lines.append(f"test modules run whole: {', '.join(sorted(self.modules)) or 'none'}; plus the source checks")
        return lines


class Graph:
    """What includes, imports and copies what: the edges the lane follows, read from the files."""

    def __init__(self, root: Path):
        from guidekit import notebooks
        from guidekit.pages import LANGS, page_files, page_includes, page_programs
        from guidekit.sections import parse_target
        from guidekit.spec import all_snippets, sibling_files

        self.root = root
        docs = root / "docs"
        self.pages_of: dict[str, set[tuple[str, str]]] = {}  # included file -> pages including it
        for lang in LANGS:
            for name in page_files(lang, docs):
                for target in page_includes(lang, name, docs):
                    self.pages_of.setdefault(parse_target(target).path, set()).add((lang, name))
        self.programs_of_page = {
            (lang, name): set(page_programs(lang, name, docs)) for lang in LANGS for name in page_files(lang, docs)
        }
        self.users: dict[str, set[str]] = {}  # file -> programs that import or run it
        for program in all_snippets(root):
            rel = program.relative_to(root).as_posix()
            for needed in sibling_files(program, root):
                self.users.setdefault(needed, set()).add(rel)
        self.notebook_pages = {path: key for key, path in notebooks.chapters(root).items()}
        self.programs = {p.relative_to(root).as_posix() for p in all_snippets(root)}


def _program_closure(path: str, graph: Graph) -> set[str]:
    """A changed snippets/ file: itself if a program, and the programs that import or run it."""
    return ({path} | graph.users.get(path, set())) & graph.programs


def select(paths: list[str], root: Path = ROOT) -> Selection:
    """What to run for these changed paths (see the module's docstring)."""
    selection = Selection(touched=sorted(paths))
    graph = None
    for path in selection.touched:
        if matches(path, EVERYTHING):
            selection.everything = f"{path} is machinery every test runs on"
            return selection
        if matches(path, NOTHING):
            continue
        selection.modules |= {module for module, reads in DEPENDS.items() if matches(path, reads)}
        if path.startswith("tests/") and path.endswith(".py"):
            selection.modules.add(path)
            continue
        if matches(path, WHOLE_SITE):
            selection.whole_site = selection.whole_site or f"{path} changed"
            continue
        graph = graph or Graph(root)
        pure = PurePosixPath(path)
        if path.startswith("guidekit/"):
            continue  # a guidekit module the lists above do not name: its own tests (DEPENDS) and the source checks
        if pure.parts[0] == "snippets":
            programs = _program_closure(path, graph)
            pages = set().union(*(graph.pages_of.get(p, set()) for p in {path} | programs))
            if not (programs or pages or matches(path, [r for reads in DEPENDS.values() for r in reads])):
                selection.everything = f"{path}: a change the lane cannot classify (no program, page or test uses it)"
                return selection
            selection.programs |= programs
            selection.pages |= pages
        elif pure.parts[0] == "recordings" and pure.suffix == ".txt" and len(pure.parts) > 2:
            if pure.parts[1] == "multinode":
                selection.pages |= graph.pages_of.get(path, set())
                continue
            from guidekit.outputs import snippet_of

            program = snippet_of(root / path, root)
            selection.programs |= {program} & graph.programs
            selection.pages |= graph.pages_of.get(path, set()) | graph.pages_of.get(program, set())
        elif path == "recordings/manifest.json":
            selection.pages |= {(lang, "verified.md") for lang in ("ko", "en")} | {
                (lang, "index.md") for lang in ("ko", "en")
            }
        elif pure.parts[0] == "docs" and len(pure.parts) > 2 and pure.suffix in (".md", ".ipynb"):
            key = (pure.parts[1], PurePosixPath(*pure.parts[2:]).as_posix())
            selection.pages.add(key)
            selection.programs |= graph.programs_of_page.get(key, set()) & graph.programs
        elif path in graph.notebook_pages:
            selection.pages.add(graph.notebook_pages[path])
        else:
            selection.everything = f"{path}: a change the lane cannot classify"
            return selection
    for _lang, name in list(selection.pages):  # DEPENDS entries that name a page ("page:errors.md")
        selection.modules |= {module for module, reads in DEPENDS.items() if f"page:{name}" in reads}
    return selection


def _item_keys(item) -> tuple[set[tuple[str, str]], set[str], set[str]]:
    """The pages (lang, name), page names and programs an item is parametrized with."""
    from guidekit.pages import LANGS

    params = getattr(getattr(item, "callspec", None), "params", {})
    values = list(params.values())
    strings = [v for v in values if isinstance(v, str)]
    langs = [v for v in strings if v in LANGS]
    names = {v for v in strings if v.endswith((".md", ".ipynb")) and not v.startswith("docs/")}
    programs = set()
    pages = {(lang, name) for lang in langs for name in names}
    for value in values:
        text = value.as_posix() if isinstance(value, Path) else value if isinstance(value, str) else ""
        if isinstance(value, Path) and value.is_absolute() and value.is_relative_to(ROOT):
            text = value.relative_to(ROOT).as_posix()
        if text.startswith("snippets/") and text.endswith(".py"):
            programs.add(text)
        parts = PurePosixPath(text).parts
        if len(parts) > 2 and parts[0] == "docs" and parts[1] in LANGS:
            pages.add((parts[1], PurePosixPath(*parts[2:]).as_posix().split(" (")[0]))
    return pages, names, programs


def _module(item) -> str:
    return item.nodeid.split("::")[0]


def keep(item, selection: Selection) -> bool:
    if selection.everything:
        return True
    module = _module(item)
    if any(fnmatch.fnmatch(module, pattern) for pattern in selection.modules):
        return True
    if item.get_closest_marker("snippet"):
        return item.spec.path in selection.programs
    if module in MACHINERY_TESTS:
        return False  # its module and what it reads did not change (`selection.modules`)
    if not any(item.get_closest_marker(name) for name in SOURCE_MARKERS):
        return True  # a source check: `make check` runs it on every change
    if module in DEPENDS or any(fnmatch.fnmatch(module, m) for m in DEPENDS if "*" in m):
        return False  # a module with its own dependencies, none of which changed
    if not selection.site:
        return False
    if selection.whole_site:
        return True
    pages, names, programs = _item_keys(item)
    if pages or names or programs:
        chosen = {name for _, name in selection.pages}
        by_page = pages & selection.pages if pages else names & chosen  # a language's page, or a page in any
        return bool(by_page or programs & selection.programs)
    return not item.get_closest_marker("browser")  # whole-site checks of the built site: cheap once it is built


def pytest_addoption(parser):
    parser.addoption(
        "--changed",
        metavar="BASE",
        default=None,
        help="run only what a change against BASE (a git ref) can break: the per-change lane (make changed)",
    )


_selections: dict[str, Selection] = {}


def selection_for(config) -> Selection | None:
    base = config.getoption("--changed", default=None)
    if not base:
        return None
    if base not in _selections:
        _selections[base] = select(git_changes(base, config.rootpath), config.rootpath)
    return _selections[base]


def pytest_report_header(config):
    selection = selection_for(config)
    return [f"--changed={config.getoption('--changed')}: " + line for line in selection.describe()] if selection else []


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    selection = selection_for(config)
    if selection is None:
        return
    kept, dropped = [], []
    for item in items:
        (kept if keep(item, selection) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
