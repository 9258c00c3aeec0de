"""The snippet runner itself: planted faults must give the right outcome, as a reader's pytest run reports it."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from guidekit import ROOT

# In the command line of a rank that outlives its timeout, of a process a snippet leaves behind. Unique to this
# process: where pytest-xdist spreads this module's tests over workers (`pytest -n 3 tests`: the scope scheduler
# lives in snippets/conftest.py), each worker makes its own planted runs, whose processes this one must not see.
RUN_ID = uuid.uuid4().hex[:8]
HANG_MARKER = f"planted-hang-{RUN_ID}"
ORPHAN_MARKER = f"planted-orphan-{RUN_ID}"
PLANTED = {
    "passes.py": "assert 1 + 1 == 2\nprint('ok')\n",
    "fails.py": "print('before the failure')\nassert 1 + 1 == 3, 'planted wrong result'\n",
    "needs_two_gpus.py": "# requires: gpus=2\nimport torch\nassert torch.cuda.device_count() >= 2\n",
    "syntax_error.py": "def broken(:\n    pass\n",
    # Two ranks under torchrun: what is tested is the launch and rank 0's output reaching the report, not a
    # collective, so the ranks leave torch unimported (1.5 CPU-seconds each); torchrun itself imports it.
    "two_ranks.py": textwrap.dedent(
        """\
        # launch: torchrun --standalone --nproc-per-node=2 snippets/planted/two_ranks.py
        import os
        assert os.environ["WORLD_SIZE"] == "2" and os.environ["LOCAL_RANK"] in ("0", "1")
        if os.environ["RANK"] == "0":
            print("2 ranks ready")
        """
    ),
    # Print what their recordings say, once changed, once with no recording at all.
    "prints.py": "print('loss 0.25 after 3 steps')\n",
    "prints_changed.py": "print('loss 0.25 after 4 steps')\n",
    "unrecorded.py": "print('nothing recorded this')\n",
    # Exits 0 but leaves a process running in a session of its own, out of reach of the snippet's process tree.
    "leaves_orphan.py": textwrap.dedent(
        f"""\
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{ORPHAN_MARKER}"],
                         start_new_session=True)
        print("started a process and left")
        """
    ),
    # Writes into the temp folder and says where (in the repository, the runner's working directory).
    "uses_temp.py": textwrap.dedent(
        """\
        import pathlib, tempfile
        path = pathlib.Path(tempfile.gettempdir(), "planted-temp-file")
        path.write_text("left here")
        pathlib.Path("temp-used.txt").write_text(str(path))
        print("wrote a temp file")
        """
    ),
    # Two ranks that never finish. What is tested is the runner's timeout and cleanup, not a collective: the ranks
    # leave torch unimported (1.5 CPU-seconds each).
    "hangs.py": textwrap.dedent(
        f"""\
        # launch: torchrun --standalone --nproc-per-node=2 snippets/planted/hangs.py {HANG_MARKER}
        # timeout: 10
        import os
        import time
        print(f"rank {{os.environ['RANK']}} started", flush=True)
        time.sleep(3600)
        """
    ),
}


RECORDED = {  # what `make outputs` would have written for the planted snippets that print and pass
    "passes.txt": "ok\n",
    "two_ranks.txt": "2 ranks ready\n",
    "prints.txt": "loss 0.25 after 3 steps\n",
    "prints_changed.txt": "loss 0.25 after 3 steps\n",
    "uses_temp.txt": "wrote a temp file\n",
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A scratch repository holding the real runner and one planted snippet per outcome."""
    repo = tmp_path_factory.mktemp("planted_repo")
    snippets = repo / "snippets"
    (snippets / "planted").mkdir(parents=True)
    shutil.copy(ROOT / "snippets" / "conftest.py", snippets / "conftest.py")
    for name, source in PLANTED.items():
        (snippets / "planted" / name).write_text(source)
    recorded = snippets / "outputs" / "cpu" / "planted"
    recorded.mkdir(parents=True)
    for name, text in RECORDED.items():
        (recorded / name).write_text(text)
    (repo / "pytest.ini").write_text(
        f"[pytest]\npythonpath = {ROOT}\nmarkers =\n    snippet\n    gpu(n)\n    world_size(n)\n"
    )
    return repo


def run_pytest(repo, *args, timeout=600):
    """pytest on the planted repository with this interpreter, GPUs hidden: the outcomes hold on any machine."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=repo,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def outcomes(planted):
    """name -> (outcome, message + captured text) from one run over every planted snippet."""
    run = run_pytest(planted, "snippets", "-rs", "--junitxml=report.xml")
    assert run.returncode == 1, run.stdout  # some planted snippets must fail
    found = {}
    for case in ET.parse(planted / "report.xml").iter("testcase"):
        outcome, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                text = (child.get("message") or "") + (child.text or "")
        found[case.get("name")] = (outcome, text)
    return found


def test_each_snippet_is_its_own_test(outcomes):
    assert set(outcomes) == {name.removesuffix(".py") for name in PLANTED}


@pytest.mark.parametrize("name", ["passes", "two_ranks", "prints", "uses_temp"])
def test_passing_programs_pass(outcomes, name):
    outcome, text = outcomes[name]
    assert outcome == "passed", text


def test_what_a_snippet_leaves_in_the_temp_folder_goes_with_it(planted, outcomes):
    """torchrun's logs, a snapshot: each run gets a temp folder of its own, removed after it."""
    used = Path((planted / "temp-used.txt").read_text())
    assert used.parent != Path(tempfile.gettempdir()) and used.parent.name.startswith("snippet-"), used
    assert not used.exists() and not used.parent.exists(), f"{used} is still there"


def test_printing_something_else_than_the_recording_fails_with_a_diff(outcomes):
    outcome, text = outcomes["prints_changed"]
    assert outcome == "failed" and "printed something else than recordings/cpu/planted/prints_changed.txt" in text
    assert "-loss 0.25 after 3 steps" in text and "+loss 0.25 after 4 steps" in text


def test_a_snippet_without_a_recording_fails(outcomes):
    outcome, text = outcomes["unrecorded"]
    assert outcome == "failed" and "no recording of its output" in text and "make outputs" in text


def test_a_recording_run_writes_recordings_and_the_manifest(planted, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(planted, repo)
    shutil.rmtree(repo / "snippets" / "outputs")
    run = run_pytest(
        repo, "snippets/planted/prints_changed.py", "snippets/planted/needs_two_gpus.py", "--record-output"
    )
    assert run.returncode == 0, run.stdout
    outputs_dir = repo / "snippets" / "outputs"
    assert (outputs_dir / "cpu" / "planted" / "prints_changed.txt").read_text() == "loss 0.25 after 4 steps\n"
    manifest = json.loads((outputs_dir / "manifest.json").read_text())["cpu"]
    assert manifest["snippets/planted/prints_changed.py"]["outcome"] == "passed"
    assert manifest["snippets/planted/prints_changed.py"]["backend"] == "gloo"
    assert manifest["snippets/planted/needs_two_gpus.py"]["reason"] == "needs 2 CUDA GPU(s), this machine has 0"
    assert (outputs_dir / "cpu" / "_pytest_header.txt").read_text().startswith("torch ")


def test_a_failing_snippet_fails_and_shows_its_output(outcomes):
    outcome, text = outcomes["fails"]
    assert outcome == "failed"
    assert "planted wrong result" in text and "before the failure" in text


def test_a_syntax_error_fails(outcomes):
    outcome, text = outcomes["syntax_error"]
    assert outcome == "failed" and "SyntaxError" in text


def test_a_hang_fails_at_its_timeout_and_leaves_no_rank_behind(outcomes):
    outcome, text = outcomes["hangs"]
    assert outcome == "failed" and "timed out after 10 s (all its processes killed)" in text
    survivors = subprocess.run(["pgrep", "-af", HANG_MARKER], capture_output=True, text=True).stdout
    assert not survivors.strip(), f"ranks outlived the timeout: {survivors}"


def test_a_snippet_that_leaves_a_process_running_fails_and_the_process_is_killed(outcomes):
    outcome, text = outcomes["leaves_orphan"]
    assert outcome == "failed" and "exited 0 but left 1 process(es) running (now killed)" in text
    survivors = subprocess.run(["pgrep", "-af", ORPHAN_MARKER], capture_output=True, text=True).stdout
    assert not survivors.strip(), f"the orphan survived: {survivors}"


def test_missing_gpus_skip_with_a_visible_reason(outcomes):
    outcome, text = outcomes["needs_two_gpus"]
    assert outcome == "skipped" and "needs 2 CUDA GPU(s), this machine has 0" in text


def test_declared_needs_become_markers(planted):
    gpu_only = run_pytest(planted, "snippets", "--collect-only", "-q", "-m", "gpu")
    assert "needs_two_gpus.py::needs_two_gpus" in gpu_only.stdout
    assert "two_ranks.py" not in gpu_only.stdout
    multi_rank = run_pytest(planted, "snippets", "--collect-only", "-q", "-m", "world_size")
    assert "two_ranks.py::two_ranks" in multi_rank.stdout


def test_a_bad_declaration_is_an_error_not_a_pass(planted):
    bad = planted / "snippets" / "planted_bad"
    bad.mkdir(exist_ok=True)
    (bad / "bad_launch.py").write_text("# launch: python elsewhere.py\nassert True\n")
    try:
        run = run_pytest(planted, "snippets/planted_bad")
    finally:
        shutil.rmtree(bad)
    assert run.returncode != 0 and "'# launch:' must be" in run.stdout


def test_an_unchecked_run_says_so(planted):
    run = run_pytest(planted, "snippets/planted/prints_changed.py", "--no-output-check")
    assert run.returncode == 0, run.stdout  # its asserts pass; only the printed text changed
    assert "outputs: not compared with the recordings (--no-output-check)" in run.stdout


def test_the_longest_recorded_scopes_run_first(planted, tmp_path):
    """`pytest -n` starts the scopes in the order of their seconds in tests/durations.json, longest first; a scope
    with no record counts as the median (ties keep the collection order). One worker runs them one by one, so its
    report lists them in the order they ran."""
    repo = tmp_path / "repo"
    shutil.copytree(planted, repo)
    (repo / "tests").mkdir()
    seconds = {f"snippets/planted/{name}.py::{name}": s for name, s in [("prints", 9), ("fails", 2), ("passes", 1)]}
    (repo / "tests" / "durations.json").write_text(json.dumps({"seconds": seconds}))
    given = [f"snippets/planted/{name}.py" for name in ("passes", "fails", "syntax_error", "prints")]
    run = run_pytest(repo, *given, "-n", "1", "--junitxml=order.xml")
    assert run.returncode == 1, run.stdout  # two of them fail
    ran = [case.get("name") for case in ET.parse(repo / "order.xml").iter("testcase")]
    assert ran == ["prints", "fails", "syntax_error", "passes"], ran
