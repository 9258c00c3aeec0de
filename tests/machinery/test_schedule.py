"""Decisions the machinery makes from the machine, with the device count faked: where programs may share GPUs, and
what the manifest says a run used."""

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
    notebook = "tests/site/test_notebooks.py::test_chapter_notebook_runs[ddp.md]"
    assert schedule.scope_of(notebook) == notebook  # `make notebooks -n`: chapters side by side
    assert schedule.scope_of("tests/site/test_notebooks.py::test_x[ko]") == "tests/site/test_notebooks.py"


def test_with_gpus_the_chapter_notebooks_run_one_at_a_time_with_the_gpu_programs(gpus):
    gpus(2)
    notebook = "tests/site/test_notebooks.py::test_chapter_notebook_runs[ddp.md]"
    assert schedule.scope_of(notebook) == "gpus"


@pytest.mark.parametrize("n", [1, 2, 8])
def test_programs_that_would_use_gpus_run_one_at_a_time(gpus, n):
    """Programs whose ranks each get a GPU (or that require one) share one scope: side by side, two of them could
    put ranks on one device. Programs with more ranks than GPUs run on CPUs with gloo, each a scope of its own."""
    gpus(n)
    programs = {  # ranks
        "ddp/train_torchrun": 2,
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


def planted(tmp_path, monkeypatch, name: str, header: str) -> str:
    """A program under a scratch root that the scheduler reads; its node id."""
    path = tmp_path / "snippets" / "x" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{header}\nprint('ok')\n")
    monkeypatch.setattr(schedule, "ROOT", tmp_path)
    return f"snippets/x/{name}.py::{name}"


@pytest.mark.parametrize("n", [0, 1, 2, 8])
def test_a_program_that_uses_every_gpu_runs_with_the_gpu_programs_wherever_there_is_one(gpus, tmp_path, monkeypatch, n):
    """`# uses-gpus: all` (mp.spawn of device_count() processes, DataParallel over every GPU): on a 1-GPU box its two
    declared ranks outnumber the GPUs, yet it uses cuda:0, so it must not run beside the GPU scope."""
    gpus(n)
    spawn = planted(tmp_path, monkeypatch, "spawns", "# ranks: 2\n# uses-gpus: all")
    plain = planted(tmp_path, monkeypatch, "plain", "# ranks: 2")
    assert schedule.scope_of(spawn) == ("gpus" if n else spawn)
    assert schedule.scope_of(plain) == ("gpus" if n >= 2 else plain)


@pytest.mark.parametrize("program", ["ddp/train_spawn", "benchmark/ddp_benchmark", "data_parallel/basic"])
def test_the_programs_that_use_every_gpu_say_so(program):
    """The review's finding (gpu-readiness, 1b): train_spawn starts device_count() processes, the benchmark
    min(max_world, GPUs), DataParallel spreads over every visible GPU; none of them requires a GPU."""
    from guidekit import ROOT
    from guidekit.spec import parse_spec

    assert parse_spec(ROOT / "snippets" / f"{program}.py").uses_all_gpus, f"{program}: add '# uses-gpus: all'"


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


@pytest.mark.parametrize(
    "parent,expected",
    [
        ("4,5,6,7", ["4,5", "6,7"]),  # the box owner's GPUs, not physical 0-3
        ("GPU-a,GPU-b,GPU-c,GPU-d", ["GPU-a,GPU-b", "GPU-c,GPU-d"]),  # UUIDs too
        (None, ["0,1", "2,3"]),
    ],
)
def test_simulated_nodes_get_gpus_from_the_owners_list(parent, expected):
    """A CUDA_VISIBLE_DEVICES the owner set is mapped through (gpu-readiness review, 1b): CUDA numbers the GPUs it
    shows from 0, so handing the nodes 0..n-1 would give them GPUs that were never theirs."""
    assert _procs().node_devices(4, 2, 2, parent) == expected


def test_recorded_durations_keep_the_scopes_a_run_left_out_but_not_removed_programs(tmp_path):
    (tmp_path / "snippets/x").mkdir(parents=True)
    (tmp_path / "snippets/x/kept.py").write_text("", encoding="utf-8")
    old = {
        "snippets/x/kept.py::kept": 10.0,
        "snippets/x/gone.py::gone": 20.0,
        "gpus": 5.0,
        "snippets/x/ran.py::ran": 1.0,
    }
    new = {"snippets/x/ran.py::ran": 2.345}
    assert schedule.merged(old, new, tmp_path) == {
        "snippets/x/kept.py::kept": 10.0,
        "gpus": 5.0,
        "snippets/x/ran.py::ran": 2.3,
    }
