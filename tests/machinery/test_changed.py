"""The per-change lane (guidekit/changed.py) selects what a diff can break: tested with faked diffs on this repository's
own graph of pages and programs, with stand-in test items, and end to end in a small git repository."""

import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from guidekit import ROOT
from guidekit.changed import DEPENDS, keep, select
from guidekit.pages import page_programs


def test_a_page_runs_its_programs_and_its_own_checks():
    selection = select(["docs/ko/ddp.md"])
    assert not selection.everything and not selection.whole_site
    assert selection.pages == {("ko", "ddp.md")}
    assert selection.programs == set(page_programs("ko", "ddp.md")) and "snippets/ddp/train_torchrun.py" in (
        selection.programs
    )


def test_a_program_runs_with_the_programs_that_import_it_and_the_pages_that_show_it():
    selection = select(["snippets/ddp/train_torchrun.py"])
    assert selection.programs == {"snippets/ddp/train_torchrun.py", "snippets/ddp/train_spawn.py"}
    assert {("ko", "ddp.md"), ("en", "ddp.md")} <= selection.pages


def test_a_recording_runs_its_program_and_the_pages_that_include_it():
    selection = select(["recordings/cpu/ddp/train_torchrun.txt"])
    assert selection.programs == {"snippets/ddp/train_torchrun.py"}
    assert ("en", "ddp.md") in selection.pages


def test_a_helper_runs_the_programs_that_use_it_and_their_multi_host_tests():
    selection = select(["snippets/launch/_procs.py"])
    assert selection.programs == {"snippets/launch/two_nodes.py", "snippets/launch/slurm_sim.py"}
    assert "tests/multinode/*" in selection.modules


@pytest.mark.parametrize(
    "path", ["guidekit/runner.py", "pyproject.toml", "tests/conftest.py", "tests/helpers/shared.py"]
)
def test_machinery_every_test_runs_on_runs_everything(path):
    assert select([path]).everything


@pytest.mark.parametrize("path", ["foo/bar.txt", "docs/ko/new-image.png", "snippets/x/data.bin.unknown"])
def test_a_change_it_cannot_classify_runs_the_whole_suite_not_nothing(path):
    selection = select([path])
    assert selection.everything and "cannot classify" in selection.everything


def test_the_theme_runs_every_site_check_and_no_program():
    selection = select(["theme/hooks/chapter_map.py"])
    assert selection.whole_site and not selection.programs and not selection.everything
    assert "tests/site/test_build_guards.py" in selection.modules


def test_notes_run_only_the_source_checks():
    selection = select(["README.md", "tests/MEASUREMENTS.md"])
    assert not (selection.everything or selection.whole_site or selection.programs or selection.pages)
    assert not selection.site


def test_a_test_module_runs_whole_when_it_changes():
    assert "tests/site/test_search.py" in select(["tests/site/test_search.py"]).modules


def test_the_error_index_runs_when_a_recording_it_includes_changes():
    errors = ROOT / "docs" / "en" / "errors.md"
    included = next(line for line in errors.read_text(encoding="utf-8").splitlines() if '"recordings/cpu/' in line)
    recording = included.split('"')[1].split(":")[0]
    assert "tests/site/test_errors.py" in select([recording]).modules


class Item(SimpleNamespace):
    """A stand-in for a pytest item: a node id, markers, parameters, a program's spec."""

    def get_closest_marker(self, name):
        return name if name in self.markers else None


def item(nodeid, markers=(), params=None, program=None):
    spec = SimpleNamespace(path=program) if program else None
    callspec = SimpleNamespace(params=params) if params is not None else None
    found = Item(nodeid=nodeid, markers=set(markers), spec=spec)
    if callspec:
        found.callspec = callspec
    return found


def test_items_are_kept_by_program_page_and_kind():
    selection = select(["docs/ko/ddp.md"])
    ran = item("snippets/ddp/train_torchrun.py::train_torchrun", ["snippet"], program="snippets/ddp/train_torchrun.py")
    other = item("snippets/why/gradient_average.py::x", ["snippet"], program="snippets/why/gradient_average.py")
    assert keep(ran, selection) and not keep(other, selection)
    assert keep(item("tests/site/test_pages.py::test_ids[ko-ddp.md]", [], {"lang": "ko", "name": "ddp.md"}), selection)
    page_check = "tests/site/test_every_page.py::test_page"
    assert keep(item(page_check, ["site", "browser"], {"lang": "ko", "name": "ddp.md"}), selection)
    assert not keep(item(page_check, ["site", "browser"], {"lang": "ko", "name": "security.md"}), selection)
    assert not keep(item(page_check, ["site", "browser"], {"lang": "en", "name": "ddp.md"}), selection)
    assert keep(item("tests/site/test_site.py::test_links", ["site"]), selection)  # whole-site: the site is built
    assert not keep(item("tests/site/test_search.py::test_q", ["site", "browser"]), selection)  # its deps unchanged
    assert keep(item("tests/site/test_terminology.py::test_x", []), selection)  # a source check always runs
    assert not keep(item("tests/multinode/test_slurm.py::test_x", ["runs"]), selection)


def test_machinery_tests_run_only_when_they_or_what_they_read_change():
    """Unmarked, they would pass for source checks; they start programs and git repositories of their own."""
    gpu_box = item("tests/machinery/test_gpu_box.py::test_dry_run", [])
    assert not keep(gpu_box, select(["docs/ko/ddp.md", "snippets/ddp/train_torchrun.py"]))
    assert keep(gpu_box, select(["guidekit/gpu_check.py"]))
    assert keep(gpu_box, select(["tests/machinery/test_gpu_box.py"]))
    assert not keep(item("tests/machinery/test_changed.py::test_x", []), select(["guidekit/gpu_check.py"]))
    assert keep(item("tests/machinery/test_guidekit.py::test_x", []), select(["docs/ko/ddp.md"]))  # a source check


def test_with_nothing_to_build_no_site_check_runs():
    selection = select(["README.md"])
    assert not keep(item("tests/site/test_site.py::test_links", ["site"]), selection)
    assert keep(item("tests/site/test_terminology.py::test_x", []), selection)


def test_every_dependency_entry_names_a_test_module():
    for module in DEPENDS:
        assert list(ROOT.glob(module)), f"{module}: no such test module"


def test_the_lane_deselects_end_to_end_in_a_git_repository(pytester):
    """A repository with two programs and a page each; one program changes; only it runs, and the header says why."""
    program = textwrap.dedent(
        '''\
        """A program."""
        # --8<-- [start:main]
        assert True
        print("ok")
        # --8<-- [end:main]
        '''
    )
    for name in ("one", "two"):
        pytester.makefile(".py", **{f"snippets/a/{name}": program})
        pytester.makefile(".txt", **{f"recordings/cpu/a/{name}": "ok\n"})
        for lang in ("ko", "en"):
            page = f'# {name}\n\n```python\n--8<-- "snippets/a/{name}.py:main"\n```\n'
            pytester.makefile(".md", **{f"docs/{lang}/{name}": page})
    pytester.makeini("[pytest]\ntestpaths = snippets\nmarkers =\n    snippet\n    world_size\n")
    pytester.makefile(
        "", **{".gitignore": "runpytest-*\nstdout\nstderr\n__pycache__/\n"}
    )  # pytester's own scratch files

    def git(*args):
        subprocess.run(["git", *args], cwd=pytester.path, check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    one = Path(pytester.path, "snippets/a/one.py")
    one.write_text(one.read_text() + "# changed\n")
    result = pytester.runpytest_subprocess(
        "-p", "guidekit.runner", "-p", "guidekit.changed", "--changed=HEAD", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*--changed=HEAD: programs: snippets/a/one.py*"])
