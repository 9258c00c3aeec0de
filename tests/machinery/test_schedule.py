"""Decisions the machinery makes from the machine, with the device count faked: where programs may share GPUs, and
what the manifest says a run used."""

import json

import pytest

from guidekit import machine, runner, schedule


@pytest.fixture
def gpus(monkeypatch):
    """`gpus(n)`: this machine now has n GPUs, as far as the machinery asks."""

    def fake(n: int) -> None:
        monkeypatch.setattr(schedule, "cuda_devices", lambda: n)
        monkeypatch.setattr(runner, "cuda_devices", lambda: n)

    return fake


def test_on_cpus_every_program_is_a_scope_of_its_own(gpus):
    gpus(0)
    assert schedule.scope_of("snippets/ddp/train_spawn.py::train_spawn") == "snippets/ddp/train_spawn.py::train_spawn"
    assert schedule.scope_of("tests/site/test_site.py::test_x[ko]") == "tests/site/test_site.py"


@pytest.mark.parametrize("n", [1, 2, 8])
def test_programs_that_would_use_gpus_run_one_at_a_time(gpus, n):
    """Programs whose ranks each get a GPU (or that require one) share one scope: side by side, two of them could
    put ranks on one device. Programs with more ranks than GPUs run on CPUs with gloo, each a scope of its own."""
    gpus(n)
    programs = {  # ranks
        "data_parallel/basic": 1,
        "ddp/train_spawn": 2,
        "launch/two_nodes": 2,
        "debugging/flight_recorder": 3,
        "large_models/mesh_fsdp_tp": 4,
    }
    for program, ranks in programs.items():
        nodeid = f"snippets/{program}.py::{program.split('/')[1]}"
        assert schedule.scope_of(nodeid) == ("gpus" if ranks <= n else nodeid), (program, ranks, n)
    required = "snippets/practices/amp_fp16_cuda.py::amp_fp16_cuda"  # requires: cuda
    assert schedule.scope_of(required) == "gpus"
    assert schedule.scope_of("tests/site/test_site.py::test_x") == "tests/site/test_site.py"


def test_no_gpu_device_file_means_no_gpu_without_importing_torch(monkeypatch):
    monkeypatch.setattr(machine, "GPU_DEVICE_FILES", ("/nonexistent/nvidia[0-9]*",))
    machine.cuda_devices.cache_clear()
    try:
        assert machine.cuda_devices() == 0
    finally:
        machine.cuda_devices.cache_clear()


def test_the_manifest_says_what_the_processes_reported():
    reports = [
        {"rank": 1, "world_size": 2, "backend": "gloo", "device": "CPU"},
        {"rank": 0, "world_size": 2, "backend": "gloo", "device": "CPU"},
    ]
    assert runner.used(reports) == {"backend": "gloo", "device": "CPU", "ranks": 2}
    assert runner.used([]) == {"backend": "none", "device": "CPU", "ranks": 1}
    nccl = [{"rank": r, "world_size": 2, "backend": "nccl", "device": "NVIDIA H100"} for r in range(2)]
    assert runner.used(nccl) == {"backend": "nccl", "device": "NVIDIA H100", "ranks": 2}


def _procs():
    import importlib.util

    from guidekit import ROOT

    spec = importlib.util.spec_from_file_location("_procs", ROOT / "snippets" / "launch" / "_procs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "gpus,nodes,per_node,expected",
    [
        (0, 2, 1, ["", ""]),  # CPU only: gloo
        (1, 2, 1, ["", ""]),  # one GPU, two nodes: sharing it would put two NCCL ranks on it
        (2, 2, 1, ["0", "1"]),
        (3, 2, 2, ["", ""]),
        (4, 2, 2, ["0,1", "2,3"]),
        (8, 2, 2, ["0,1", "2,3"]),
    ],
)
def test_simulated_nodes_never_share_a_gpu(gpus, nodes, per_node, expected):
    """launch/two_nodes.py and launch/slurm_sim.py start nodes on one machine: each gets GPUs of its own, or none."""
    visible = _procs().node_devices(gpus, nodes, per_node)
    assert visible == expected
    used = [gpu for v in visible if v for gpu in v.split(",")]
    assert len(used) == len(set(used)), "two nodes see the same GPU"


@pytest.mark.parametrize("dry_run", [True, False])
def test_gpu_check_runs_every_program_then_the_benchmark_and_gathers_them(gpus, monkeypatch, tmp_path, dry_run):
    """`make gpu-check`'s steps, their commands only (the steps themselves run on the GPU machine): every program,
    several at a time, recorded unless a dry run; the benchmark's full sweep unless a dry run; the recordings copied
    into the folder to commit."""
    from guidekit import gpu_check

    gpus(0)
    commands = []

    def run(cmd, log, timeout):
        commands.append(cmd)
        return {"command": " ".join(cmd), "exit": 0, "seconds": 0.0, "log": log.name}

    monkeypatch.setattr(gpu_check, "run", run)
    monkeypatch.setattr(gpu_check, "gpu_label", lambda: "cpu")
    out = tmp_path / "gpu-check"
    assert gpu_check.main(["--out", str(out), *(["--dry-run"] if dry_run else [])]) == 0
    programs, benchmark = commands
    assert programs[programs.index("pytest") + 1] == "snippets" and "-n" in programs
    assert ("--no-output-check" in programs) == dry_run and ("--record-output" in programs) != dry_run
    assert benchmark[1].endswith("snippets/benchmark/ddp_benchmark.py") and ("--full" in benchmark) != dry_run
    assert (out / "recordings" / "manifest.json").is_file() != dry_run
    assert json.loads((out / "summary.json").read_text())["steps"].keys() == {"programs", "benchmark"}
