"""The snippet runner (guidekit.runner) and the suite's scheduler (guidekit.schedule), run by pytest's own `pytester`
on a scratch repository of planted programs: each outcome as a reader's pytest run reports it."""

import json
import re
import subprocess
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.runs  # starts programs: left out of `make check`

HOLDS_ITS_GROUP = textwrap.dedent(
    """\
    import os, time
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=0, world_size=1)
    import torch.distributed.nn
    dist.destroy_process_group()
    # gloo's threads name themselves once they run: on a loaded machine, wait until they have (10 s at most)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
        open(f"/proc/self/task/{t}/comm").read().strip() == "pt_gloo_runloop" for t in os.listdir("/proc/self/task")
    ):
        time.sleep(0.01)
    print("destroyed")
    """
)


# In the command line of a rank that outlives its timeout, of a process a snippet leaves behind; unique to this
# process, so that planted runs of other pytest-xdist workers are not seen.
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
    # Joins a one-rank gloo group: the manifest records what the program used, from its own report.
    "one_rank_group.py": textwrap.dedent(
        """\
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=0, world_size=1)
        dist.destroy_process_group()
        """
    ),
    # Still holds its group after destroy_process_group(): torch.distributed.nn, imported once the group exists,
    # keeps it as the default argument of its functions. No collective runs, so no finished work can race the exit.
    "holds_its_group.py": HOLDS_ITS_GROUP,
    # The same, declared as a known defect: it passes, with a warning in every report.
    "holds_its_group_declared.py": "# holds-group-at-exit: torch.distributed.nn imported after init_process_group\n"
    + HOLDS_ITS_GROUP,
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
    # leave torch unimported (1.5 CPU-seconds each). torchrun itself imports torch, which on a loaded two-core
    # machine can outlast the timeout: whether the ranks have started by then is not known.
    "hangs.py": textwrap.dedent(
        f"""\
        # launch: torchrun --standalone --nproc-per-node=2 snippets/planted/hangs.py {HANG_MARKER}
        # timeout: 10
        import os
        import time


        def wait_for_a_peer_that_never_comes():
            time.sleep(3600)


        print(f"rank {{os.environ['RANK']}} started", flush=True)
        wait_for_a_peer_that_never_comes()
        """
    ),
    # The same hang in two processes that a Python parent starts: they start in milliseconds, so both wait in
    # wait_for_a_peer_that_never_comes long before the timeout, and where they wait is in the report.
    "hangs_in_two_processes.py": textwrap.dedent(
        f"""\
        # timeout: 10
        import subprocess
        import sys
        import time


        def wait_for_a_peer_that_never_comes():
            time.sleep(3600)


        if sys.argv[1:2] == ["rank"]:
            print(f"rank {{sys.argv[2]}} started", flush=True)
            wait_for_a_peer_that_never_comes()
        else:
            ranks = [
                subprocess.Popen([sys.executable, __file__, "rank", str(rank), "{HANG_MARKER}"])
                for rank in range(2)
            ]
            for process in ranks:
                process.wait()
        """
    ),
}


RECORDED = {  # what `make outputs` would have written for the planted snippets that print and pass
    "passes.txt": "ok\n",
    "two_ranks.txt": "2 ranks ready\n",
    "prints.txt": "loss 0.25 after 3 steps\n",
    "holds_its_group.txt": "destroyed\n",
    "holds_its_group_declared.txt": "destroyed\n",
    "prints_changed.txt": "loss 0.25 after 3 steps\n",
    "uses_temp.txt": "wrote a temp file\n",
}
INI = "[pytest]\nmarkers =\n    snippet\n    gpu(n)\n    world_size(n)\n"


@pytest.fixture
def repo(pytester, monkeypatch):
    """A scratch repository: the planted programs, their recordings, GPUs hidden (the outcomes hold on any machine)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    pytester.makeini(INI)
    for name, source in PLANTED.items():
        path = pytester.path / "snippets" / "planted" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    recorded = pytester.path / "recordings" / "cpu" / "planted"
    recorded.mkdir(parents=True)
    for name, text in RECORDED.items():
        (recorded / name).write_text(text)
    return pytester


def run(repo, *args, timeout=300):
    """pytest in the scratch repository, in a process of its own, with the runner and scheduler plugins."""
    return repo.runpytest_subprocess(
        "-p", "guidekit.runner", "-p", "guidekit.schedule", "-rs", "--no-header", *args, timeout=timeout
    )


def planted(name: str) -> str:
    return f"snippets/planted/{name}.py"


def test_each_snippet_is_its_own_test(repo):
    result = run(repo, "snippets", "--collect-only", "-q")
    names = sorted(name.removesuffix(".py") for name in PLANTED)
    result.stdout.fnmatch_lines([f"{planted(name)}::{name}" for name in names])


@pytest.mark.parametrize("name", ["passes", "two_ranks", "prints"])
def test_passing_programs_pass(repo, name):
    run(repo, planted(name)).assert_outcomes(passed=1)


def test_what_a_snippet_leaves_in_the_temp_folder_goes_with_it(repo):
    """torchrun's logs, a snapshot: each run gets a temp folder of its own, removed after it."""
    run(repo, planted("uses_temp")).assert_outcomes(passed=1)
    used = Path((repo.path / "temp-used.txt").read_text())
    assert used.parent != Path(tempfile.gettempdir()) and used.parent.name.startswith("snippet-"), used
    assert not used.exists() and not used.parent.exists(), f"{used} is still there"


def test_printing_something_else_than_the_recording_fails_with_a_diff(repo):
    result = run(repo, planted("prints_changed"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*printed something else than recordings/cpu/planted/prints_changed.txt*",
            "-loss 0.25 after 3 steps",
            "+loss 0.25 after 4 steps",
        ]
    )


def test_a_snippet_without_a_recording_fails(repo):
    result = run(repo, planted("unrecorded"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no recording of its output*make outputs*"])


def test_a_recording_run_writes_recordings_and_the_manifest(repo):
    given = [planted(name) for name in ("prints_changed", "needs_two_gpus", "one_rank_group")]
    result = run(repo, *given, "--record-output")
    result.assert_outcomes(passed=2, skipped=1)
    recordings = repo.path / "recordings"
    assert (recordings / "cpu" / "planted" / "prints_changed.txt").read_text() == "loss 0.25 after 4 steps\n"
    manifest = json.loads((recordings / "manifest.json").read_text())["cpu"]
    assert manifest[planted("prints_changed")]["outcome"] == "passed"
    # what the programs reported: no process group at all, and a one-rank gloo group
    assert {k: manifest[planted("prints_changed")][k] for k in ("backend", "device", "ranks")} == {
        "backend": "none",
        "device": "CPU",
        "ranks": 1,
    }
    assert {k: manifest[planted("one_rank_group")][k] for k in ("backend", "device", "ranks")} == {
        "backend": "gloo",
        "device": "CPU",
        "ranks": 1,
    }
    assert manifest[planted("needs_two_gpus")]["reason"] == "needs 2 CUDA GPU(s), this machine has 0"
    assert (recordings / "cpu" / "_pytest_header.txt").read_text().startswith("torch ")


def test_a_failing_snippet_fails_and_shows_its_output(repo):
    result = run(repo, planted("fails"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*exited with code 1*", "before the failure", "*planted wrong result*"])


def test_a_syntax_error_fails(repo):
    result = run(repo, planted("syntax_error"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*SyntaxError*"])


def test_a_group_still_held_at_exit_fails_though_the_program_passed(repo):
    """Such a program aborts at exit by chance (the debugging page, #exit-abort): the runner fails it every time."""
    result = run(repo, planted("holds_its_group"))
    result.assert_outcomes(failed=1)
    result.stdout.re_match_lines(
        [r".*passed, but gloo's threads were still running when Python began to exit \(rank 0: [1-9]\d*\)"]
    )


def test_a_group_declared_as_held_at_exit_passes_with_a_warning(repo):
    result = run(repo, planted("holds_its_group_declared"))
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*holds_its_group_declared.py: passed, but gloo's threads were still running*(declared: torch.distributed.nn*"]
    )


def test_a_hang_fails_at_its_timeout_and_leaves_no_rank_behind(repo):
    result = run(repo, planted("hangs"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 10 s (all its processes killed*"])
    # torchrun is there from the start: its threads are in the report, wherever it was by then
    result.stdout.fnmatch_lines(["*Fatal Python error: Aborted*", "*most recent call first*"])
    assert_no_survivors()


def test_a_hang_shows_where_each_process_waits(repo):
    result = run(repo, planted("hangs_in_two_processes"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 10 s (all its processes killed*"])
    # Python's faulthandler, on the SIGABRT the runner sends before it kills; the failure's report, before
    # pytest's own copy of the captured output
    report = result.stdout.str().split("Captured stdout call")[0]
    waits = re.findall(
        r"thread 0x[0-9a-f]+ .*\n +File .*hangs_in_two_processes.py\", line \d+ in wait_for_a_peer", report
    )
    assert len(waits) == 2, report[-3000:]
    assert_no_survivors()


def assert_no_survivors():
    survivors = subprocess.run(["pgrep", "-af", HANG_MARKER], capture_output=True, text=True).stdout
    assert not survivors.strip(), f"processes outlived the timeout: {survivors}"


def test_a_snippet_that_leaves_a_process_running_fails_and_the_process_is_killed(repo):
    result = run(repo, planted("leaves_orphan"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*exited 0 but left 1 process(es) running (now killed)*"])
    survivors = subprocess.run(["pgrep", "-af", ORPHAN_MARKER], capture_output=True, text=True).stdout
    assert not survivors.strip(), f"the orphan survived: {survivors}"


def test_missing_gpus_skip_with_a_visible_reason(repo):
    result = run(repo, planted("needs_two_gpus"))
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*needs 2 CUDA GPU(s), this machine has 0"])


def test_declared_needs_become_markers(repo):
    gpu_only = run(repo, "snippets", "--collect-only", "-q", "-m", "gpu")
    gpu_only.stdout.fnmatch_lines([f"{planted('needs_two_gpus')}::needs_two_gpus"])
    gpu_only.stdout.no_fnmatch_line("*two_ranks*")
    multi_rank = run(repo, "snippets", "--collect-only", "-q", "-m", "world_size")
    multi_rank.stdout.fnmatch_lines([f"{planted('two_ranks')}::two_ranks"])


def test_a_bad_declaration_is_an_error_not_a_pass(repo):
    repo.path.joinpath("snippets", "planted_bad").mkdir()
    repo.path.joinpath("snippets", "planted_bad", "bad_launch.py").write_text(
        "# launch: python elsewhere.py\nassert True\n"
    )
    result = run(repo, "snippets/planted_bad")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*'# launch:' must be*"])


def test_an_unchecked_run_says_so(repo):
    result = run(repo, planted("prints_changed"), "--no-output-check")
    result.assert_outcomes(passed=1)  # its asserts pass; only the printed text changed
    result.stdout.fnmatch_lines(["outputs: not compared with the recordings (--no-output-check)"])


def test_files_outside_snippets_are_not_programs(repo):
    """The runner is registered for every run; only files under snippets/ are programs."""
    repo.path.joinpath("tests").mkdir()
    repo.path.joinpath("tests", "helper.py").write_text("raise SystemExit('a helper module must not run')\n")
    result = run(repo, "tests", "snippets/planted/passes.py")
    result.assert_outcomes(passed=1)


def test_the_longest_recorded_scopes_run_first(repo):
    """`pytest -n` starts the scopes in the order of their seconds in tests/durations.json, longest first; a scope
    with no record counts as the median (ties keep the collection order). One worker runs them one by one, so its
    report lists them in the order they ran."""
    seconds = {f"{planted(name)}::{name}": s for name, s in [("prints", 9), ("fails", 2), ("passes", 1)]}
    repo.path.joinpath("tests").mkdir()
    repo.path.joinpath("tests", "durations.json").write_text(json.dumps({"seconds": seconds}))
    given = [planted(name) for name in ("passes", "fails", "syntax_error", "prints")]
    result = run(repo, *given, "-n", "1", "-v")
    result.assert_outcomes(passed=2, failed=2)
    ran = [line.split("::")[1].split()[0] for line in result.outlines if line.startswith("[gw0]") and "::" in line]
    assert ran == ["prints", "fails", "syntax_error", "passes"], result.outlines
