"""What a GPU box brings, checked on CPUs: TF32 overrides, GPUs that are there but unusable, Inductor's build needs,
recordings per GPU count, a reader's other torch, and `make gpu-check` (guidekit/gpu_check.py) planning, finishing,
stopping whole trees. Nothing here needs a GPU; where one matters it is faked."""

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from guidekit import gpu_check, machine, outputs, runner
from guidekit.processes import CHECK_TAG, tagged
from guidekit.spec import Spec, launch_env, tf32_overrides

RUN_ID = uuid.uuid4().hex[:8]
INI = "[pytest]\nmarkers =\n    snippet\n    gpu(n)\n    world_size(n)\n"


@pytest.fixture
def no_gpus(monkeypatch):
    """GPUs hidden, caches cleared before and after: the outcomes hold on any machine."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    machine.cuda_devices.cache_clear()
    yield
    machine.cuda_devices.cache_clear()


# TF32 overrides


def test_tf32_overrides_are_removed_for_the_programs_and_named_in_the_header(monkeypatch):
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    env = launch_env(29999)
    assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE" not in env and "NVIDIA_TF32_OVERRIDE" not in env
    assert tf32_overrides() == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1", "NVIDIA_TF32_OVERRIDE": "0"}
    said = next(line for line in runner.environment_lines() if line.startswith("TF32"))
    assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1" in said and "NVIDIA_TF32_OVERRIDE=0" in said and "removed" in said
    monkeypatch.delenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE")
    assert next(line for line in runner.environment_lines() if line.startswith("TF32")).startswith(
        "TF32 overrides: none"
    )


# GPUs present but unusable


@pytest.fixture
def gpu_files_but_no_cuda(monkeypatch, tmp_path):
    """A GPU device file, and a torch that cannot use it (this machine has no GPU: torch.cuda.is_available() is
    False, as on a box whose driver is older than the wheel's CUDA)."""
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine's torch sees a GPU")
    (tmp_path / "nvidia0").write_text("")
    monkeypatch.setattr(machine, "GPU_DEVICE_FILES", (str(tmp_path / "nvidia[0-9]*"),))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    machine.cuda_devices.cache_clear()
    yield tmp_path / "nvidia0"
    machine.cuda_devices.cache_clear()


def test_gpus_present_but_unusable_are_reported_not_run_on_cpu_in_silence(gpu_files_but_no_cuda, tmp_path):
    assert machine.cuda_devices() == 0 and machine.platform() == "cpu"
    reason = machine.unusable_gpus()
    assert str(gpu_files_but_no_cuda) in reason and "torch.cuda.is_available() is False" in reason
    assert any(line.startswith("GPUS NOT USABLE") for line in runner.environment_lines())
    # gpu-check refuses to record (it would write this box's text over recordings/cpu) and says why
    out = tmp_path / "out"
    assert gpu_check.main(["--out", str(out), "--root", str(tmp_path)]) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert "is_available() is False" in summary["refused"] and "--dry-run" in summary["refused"]


def test_gpus_hidden_on_purpose_are_not_unusable(gpu_files_but_no_cuda, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    machine.cuda_devices.cache_clear()
    assert machine.cuda_devices() == 0 and machine.unusable_gpus() == ""


def test_gpu_check_refuses_to_record_without_gpus(no_gpus, tmp_path):
    out = tmp_path / "out"
    assert gpu_check.main(["--out", str(out), "--root", str(tmp_path)]) == 2
    assert "no GPU" in json.loads((out / "summary.json").read_text())["refused"]
    assert not (tmp_path / "recordings").exists()


# Inductor's needs


def test_inductor_needs_a_compiler_and_python_headers(monkeypatch, tmp_path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(machine.shutil, "which", lambda name: None)
    monkeypatch.setattr(machine, "python_headers", lambda: tmp_path / "Python.h")
    missing = machine.inductor_missing(cpu=True)
    assert [m.split(" (")[0] for m in missing] == ["a C compiler", "a C++ compiler", "Python's headers"]
    monkeypatch.setenv("CC", "/usr/bin/cc")
    (tmp_path / "Python.h").write_text("")
    assert machine.inductor_missing() == []


def test_when_a_program_needs_inductor():
    spec = Spec("snippets/x/c.py", ["python", "snippets/x/c.py"], 0, 2, 120, inductor="gpus")
    assert not spec.needs_inductor(0) and not spec.needs_inductor(1) and spec.needs_inductor(2)
    assert Spec("snippets/x/c.py", ["python"], 0, 1, 120, inductor="always").needs_inductor(0)


# Recordings per GPU count


def test_recordings_are_keyed_by_the_boxs_gpu_count(monkeypatch):
    monkeypatch.setattr(machine, "cuda_devices", lambda: 8)
    monkeypatch.delenv(machine.BOX_GPUS, raising=False)
    assert machine.platform() == "cuda-8"
    monkeypatch.setattr(machine, "cuda_devices", lambda: 2)  # a gpu-check run on 2 of the box's 8 GPUs
    monkeypatch.setenv(machine.BOX_GPUS, "8")
    assert machine.platform() == "cuda-8"
    monkeypatch.setattr(machine, "cuda_devices", lambda: 0)
    assert machine.platform() == "cpu"


def test_one_and_eight_gpu_boxes_keep_their_own_recordings(tmp_path):
    assert outputs.recording_path("snippets/ddp/a.py", "cuda-1", tmp_path) != outputs.recording_path(
        "snippets/ddp/a.py", "cuda-8", tmp_path
    )
    ran = {"outcome": "passed", "torch": "2.15.0", "backend": "nccl", "device": "H100", "date": "2026-12-07"}
    outputs.write_manifest({"cuda-8": {"snippets/a.py": {**ran, "ranks": 8}}}, tmp_path)
    outputs.write_manifest({"cuda-1": {"snippets/a.py": {**ran, "ranks": 1}, "snippets/b.py": ran}}, tmp_path)
    outputs.write_manifest({"cpu": {"snippets/a.py": {**ran, "backend": "gloo"}}}, tmp_path)
    manifest = outputs.read_manifest(tmp_path)
    assert list(manifest) == ["cpu", "cuda-1", "cuda-8", "cuda"]
    assert manifest["cuda-8"]["snippets/a.py"]["ranks"] == 8 and manifest["cuda-1"]["snippets/a.py"]["ranks"] == 1
    assert manifest["cuda"]["snippets/a.py"]["ranks"] == 8  # any GPU: the largest box it passed on
    assert outputs.gpu_platforms(manifest) == ["cuda-1", "cuda-8"]
    assert '"cuda":' not in (tmp_path / "recordings" / "manifest.json").read_text()  # a view, never written
    with pytest.raises(ValueError, match="not a platform"):
        outputs.write_manifest({"cuda": {"snippets/a.py": ran}}, tmp_path)


def _write_entries(root: str, start: int) -> None:
    for i in range(start, start + 15):
        outputs.write_manifest({"cpu": {f"snippets/p{i}.py": {"outcome": "passed"}}}, Path(root))


def test_runs_that_record_at_once_lose_no_entry(tmp_path):
    """gpu-check's side-by-side runs each merge into the manifest as each program ends: the file is locked."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_entries, args=(str(tmp_path), start)) for start in (0, 100, 200)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert len(outputs.read_manifest(tmp_path)["cpu"]) == 45


# A reader's torch (issue 38, item 7)

PRINTS = "print('loss 0.25 after 4 steps')\n"


def other_torch_repo(pytester, monkeypatch, recorded_on: str):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    pytester.makeini(INI)
    program = pytester.path / "snippets" / "planted" / "prints.py"
    program.parent.mkdir(parents=True)
    program.write_text(PRINTS)
    recording = pytester.path / "recordings" / "cpu" / "planted" / "prints.txt"
    recording.parent.mkdir(parents=True)
    recording.write_text("loss 0.25 after 3 steps\n")
    entry = {"outcome": "passed", "torch": recorded_on, "backend": "none", "device": "CPU", "ranks": 1}
    outputs.write_manifest({"cpu": {"snippets/planted/prints.py": {**entry, "date": "2026-12-06"}}}, pytester.path)
    return pytester.runpytest_subprocess("-p", "guidekit.runner", "--no-header", "snippets/planted/prints.py")


@pytest.mark.runs
def test_a_recording_made_on_another_torch_shows_the_difference_and_passes(pytester, monkeypatch):
    result = other_torch_repo(pytester, monkeypatch, "2.99.0")
    result.assert_outcomes(passed=1, warnings=1)
    this = runner.torch_version()
    result.stdout.fnmatch_lines(
        [
            "*outputs recorded on another torch (shown, not failed)*",
            f"snippets/planted/prints.py: printed other text than recordings/cpu/planted/prints.txt, recorded on "
            f"torch 2.99.0; this run has torch {this}",
            "    -loss 0.25 after 3 steps",
            "    +loss 0.25 after 4 steps",
        ]
    )


@pytest.mark.runs
def test_a_recording_made_on_this_torch_fails_on_any_difference(pytester, monkeypatch):
    result = other_torch_repo(pytester, monkeypatch, runner.torch_version())
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*printed something else than recordings/cpu/planted/prints.txt*"])
    result.stdout.no_fnmatch_line("*recorded on another torch*")


# make gpu-check: its plan


def spec(path: str, world: int = 1, gpus: int = 0, uses_all: bool = False, timeout: float = 120) -> Spec:
    return Spec(f"snippets/{path}.py", ["python", f"snippets/{path}.py"], gpus, world, timeout, uses_all_gpus=uses_all)


PROGRAMS = [
    spec("ddp/two_ranks", world=2),
    spec("ddp/spawns", world=2, uses_all=True),
    spec("large/four_ranks", world=4),
    spec("practices/one_gpu", gpus=1),
    spec("gpu_box/two_gpus", world=2, gpus=2),
    spec("debugging/nine_ranks", world=9),
    spec("why/cpu_only"),
]


def lanes(devices: int, per_run: int) -> dict[str, list[str]]:
    planned = gpu_check.plan(PROGRAMS, devices, per_run)
    return {lane: [job.spec.path.split("/")[-1].removesuffix(".py") for job in jobs] for lane, jobs in planned.items()}


def test_on_eight_gpus_small_programs_run_side_by_side_and_wide_ones_alone():
    assert lanes(8, 2) == {
        "gpus": ["two_ranks", "one_gpu", "two_gpus", "cpu_only"],
        "all-gpus": ["spawns", "four_ranks"],
        "cpu": ["nine_ranks"],
    }


def test_on_one_gpu_programs_with_more_ranks_run_on_cpus_beside_it():
    assert lanes(1, 1) == {
        "cpu": ["two_ranks", "four_ranks", "two_gpus", "nine_ranks"],  # gloo; two_gpus is skipped with its reason
        "all-gpus": ["spawns"],
        "gpus": ["one_gpu", "cpu_only"],
    }


def test_side_by_side_runs_get_disjoint_gpus_named_as_the_owner_named_them():
    assert gpu_check.slots(8, 2, {}) == ["0,1", "2,3", "4,5", "6,7"]
    owner = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert gpu_check.slots(4, 2, owner) == ["4,5", "6,7"]
    mig = {"CUDA_VISIBLE_DEVICES": "MIG-a,MIG-b,MIG-c"}
    assert gpu_check.slots(3, 2, mig) == ["MIG-a,MIG-b"]  # the third runs nothing side by side
    used = [gpu for slot in gpu_check.slots(8, 2, {}) for gpu in slot.split(",")]
    assert len(used) == len(set(used))


def test_the_named_programs_then_the_never_run_on_a_gpu_go_first():
    manifest = {"cuda": {"snippets/why/cpu_only.py": {"outcome": "passed"}}, "cuda-8": {}}
    seconds = {f"{s.path}::{Path(s.path).stem}": 1.0 for s in PROGRAMS}
    seconds["snippets/ddp/two_ranks.py::two_ranks"] = 50.0
    ordered = gpu_check.order(PROGRAMS, ["snippets/gpu_box", "snippets/large"], manifest, "cuda-8", seconds)
    names = [s.path.split("/")[-1].removesuffix(".py") for s in ordered]
    assert names[:3] == ["two_gpus", "four_ranks", "two_ranks"]  # named first; then the longest never run
    assert names[-1] == "cpu_only"  # it has a GPU run


# make gpu-check: runs (a scratch repository of planted programs; GPUs hidden)

ORPHAN = f"planted-gpu-check-orphan-{RUN_ID}"
PLANTED = {
    "passes.py": "print('ok')\n",
    "two_ranks.py": textwrap.dedent(
        """\
        # launch: torchrun --standalone --nproc-per-node=2 snippets/planted/two_ranks.py
        import os
        if os.environ["RANK"] == "0":
            print("2 ranks ready")
        """
    ),
    # Past its own timeout, with a child in a session of its own: the whole tree must go.
    "sleeps.py": textwrap.dedent(
        f"""\
        # timeout: 3
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{ORPHAN}"], start_new_session=True)
        print("sleeping", flush=True)
        time.sleep(600)
        """
    ),
    # A long timeout of its own: only the run's --deadline stops it.
    "slow.py": textwrap.dedent(
        f"""\
        # timeout: 600
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{ORPHAN}-slow"])
        time.sleep(600)
        """
    ),
}


@pytest.fixture
def scratch(tmp_path, no_gpus):
    (tmp_path / "pytest.ini").write_text(INI)
    for name, source in PLANTED.items():
        path = tmp_path / "snippets" / "planted" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return tmp_path


def gpu_check_run(root: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict]:
    out = root / "out"
    env = {k: v for k, v in os.environ.items() if k != CHECK_TAG}
    done = subprocess.run(
        [sys.executable, "-m", "guidekit.gpu_check", "--out", str(out), "--root", str(root), "--dry-run"]
        + ["--no-benchmark", "--cpu-workers", "2", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, json.loads((out / "summary.json").read_text())


def survivors(marker: str) -> str:
    return subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout.strip()


@pytest.mark.runs
def test_gpu_check_dry_run_on_cpus_writes_its_summary(scratch):
    done, summary = gpu_check_run(
        scratch, "--programs", "snippets/planted/passes.py", "snippets/planted/two_ranks.py", "--only"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary["dry_run"] and summary["platform"] == "cpu" and not summary["partial"]
    assert {path: entry["outcome"] for path, entry in summary["programs"].items()} == {
        "snippets/planted/passes.py": "passed",
        "snippets/planted/two_ranks.py": "passed",
    }
    assert summary["counts"] == {"passed": 2} and summary["left_running"] == []
    log = (scratch / "out" / summary["programs"]["snippets/planted/two_ranks.py"]["log"]).read_text()
    assert "--no-output-check" in log and "1 passed" in log
    assert not (scratch / "recordings").exists()  # a dry run records nothing


@pytest.mark.runs
def test_gpu_check_kills_a_timed_out_programs_whole_tree(scratch):
    done, summary = gpu_check_run(scratch, "--programs", "snippets/planted/sleeps.py", "--only")
    assert done.returncode == 1
    entry = summary["programs"]["snippets/planted/sleeps.py"]
    assert entry["outcome"] == "failed" and "timed out after 3 s" in entry["reason"], entry
    assert not survivors(ORPHAN), "a process of the timed-out program survived"
    assert not tagged(summary["tag"], CHECK_TAG), "a process with the run's tag survived"


@pytest.mark.runs
def test_gpu_check_stopped_at_its_deadline_keeps_a_partial_summary(scratch):
    done, summary = gpu_check_run(
        scratch, "--programs", "snippets/planted/slow.py", "snippets/planted/passes.py", "--only",
        "--deadline", "8", "--cpu-workers", "1",
    )  # fmt: skip
    assert done.returncode == 1 and summary["partial"]
    programs = summary["programs"]
    assert programs["snippets/planted/slow.py"]["outcome"] == "stopped", programs
    assert programs["snippets/planted/passes.py"]["outcome"] == "not run", programs
    assert not survivors(f"{ORPHAN}-slow") and not tagged(summary["tag"], CHECK_TAG)


SEEN = textwrap.dedent(
    """\
    {header}
    import os, pathlib, time
    start = time.time()
    time.sleep(8)  # long enough for all four to start on a loaded machine
    seen = pathlib.Path("seen")
    seen.mkdir(exist_ok=True)
    line = f"{{os.environ.get('CUDA_VISIBLE_DEVICES')}} {{start}} {{time.time()}}"
    (seen / "{name}.txt").write_text(line)
    """
)


@pytest.mark.runs
def test_gpu_check_runs_small_programs_side_by_side_on_disjoint_gpus(tmp_path, monkeypatch, capsys):
    """Eight GPUs faked for gpu_check (each program's own run sees none): four one-process programs run side by side,
    each with two GPUs of the owner's list; the program that uses every GPU runs after them, with the whole list."""
    (tmp_path / "pytest.ini").write_text(INI)
    folder = tmp_path / "snippets" / "planted"
    folder.mkdir(parents=True)
    for name in "abcd":
        (folder / f"{name}.py").write_text(SEEN.format(header="", name=name))
    (folder / "every_gpu.py").write_text(SEEN.format(header="# uses-gpus: all", name="every_gpu"))
    owner = ",".join(str(10 + i) for i in range(8))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", owner)
    monkeypatch.setattr(gpu_check, "cuda_devices", lambda: 8)
    monkeypatch.setattr(gpu_check, "write_environment", lambda out, root, record: None)
    out = tmp_path / "out"
    code = gpu_check.main(["--out", str(out), "--root", str(tmp_path), "--dry-run", "--no-benchmark"])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0, (summary, capsys.readouterr().out)
    seen = {}
    for path in (tmp_path / "seen").glob("*.txt"):
        visible, start, end = path.read_text().split()
        seen[path.stem] = (visible, float(start), float(end))
    small = {name: seen[name] for name in "abcd"}
    assert {v for v, _, _ in small.values()} == {"10,11", "12,13", "14,15", "16,17"}  # disjoint, the owner's GPUs
    assert max(start for _, start, _ in small.values()) < min(end for _, _, end in small.values())  # side by side
    visible, start, _ = seen["every_gpu"]
    assert visible == owner and start > max(end for _, _, end in small.values())  # alone, after them
    assert summary["programs"]["snippets/planted/every_gpu.py"]["lane"] == "all-gpus"


@pytest.mark.runs
def test_a_program_that_needs_inductor_fails_first_where_its_tools_are_missing(pytester, monkeypatch):
    """`# inductor: always` on a machine with no C compiler on PATH: the runner fails it before it starts, naming
    what is missing; `# inductor: gpus` does not need Inductor on a machine without GPUs, and runs."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("PATH", str(pytester.path / "no-tools"))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    pytester.makeini(INI)
    folder = pytester.path / "snippets" / "planted"
    folder.mkdir(parents=True)
    (folder / "always.py").write_text("# inductor: always\nprint('compiled')\n")
    (folder / "on_gpus.py").write_text("# inductor: gpus\nprint('compiled')\n")
    args = ["-p", "guidekit.runner", "--no-header", "--no-output-check"]
    result = pytester.runpytest_subprocess(*args, "snippets/planted/always.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*compiles with Inductor on CPUs*lacks: a C compiler*a C++ compiler*"])
    result.stdout.no_fnmatch_line("compiled")
    pytester.runpytest_subprocess(*args, "snippets/planted/on_gpus.py").assert_outcomes(passed=1)
