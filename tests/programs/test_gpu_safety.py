"""The bugs only a GPU box shows, caught on CPUs (guidekit/gpu_safety.py, guidekit/probe/): every program passes the
static checks, and each check catches its planted fault, the review's own rows among them
(reviews/gpu-readiness-2026-12-06.md, the table's rows 1-4)."""

import importlib.util
import textwrap

import pytest

from guidekit import ROOT, gpu_safety
from guidekit.spec import all_snippets, is_snippet


def programs_and_helpers() -> list[str]:
    """Every program, and the helpers pages show (parallelism/_mesh.py is a page's copy of setup code)."""
    helpers = [
        p for p in (ROOT / "snippets").rglob("_*.py") if not p.name.startswith("__") and not is_snippet(p)
    ]  # fmt: skip
    return sorted(p.relative_to(ROOT).as_posix() for p in [*all_snippets(), *helpers])


@pytest.mark.parametrize("path", programs_and_helpers())
def test_every_program_passes_the_gpu_checks(path):
    if is_snippet(ROOT / path):
        found = gpu_safety.check_program(ROOT / path)
    else:
        found = gpu_safety.check_sources({path: (ROOT / path).read_text(encoding="utf-8")})
    assert not found, "\n".join(map(str, found))


def rules(source: str, inductor: str | None = None) -> list[tuple[int, str]]:
    """(line, rule) of each finding in a planted program."""
    found = gpu_safety.check_sources({"snippets/planted/prog.py": textwrap.dedent(source)}, inductor)
    return [(f.line, f.rule) for f in found]


IMPORTS = "import torch\nimport torch.distributed as dist\nfrom torch.distributed.device_mesh import init_device_mesh\n"


# The process group: a backend, before any mesh (row 2)

# The review's row 2, as parallelism/_mesh.py was (9f47cdf): the mesh creates the group, with no backend.
MESH_CREATES_THE_GROUP = (
    IMPORTS
    + """
def setup_mesh():
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    mesh = init_device_mesh(device.type, (int(os.environ["WORLD_SIZE"]),))
    return mesh, device
"""
)


def test_a_mesh_that_creates_the_default_group_is_caught():
    assert rules(MESH_CREATES_THE_GROUP) == [(11, "mesh-before-group")]


def test_a_group_made_in_only_one_branch_is_caught():
    source = MESH_CREATES_THE_GROUP.replace(
        "torch.cuda.set_device(device)\n", 'torch.cuda.set_device(device)\n        dist.init_process_group("nccl")\n'
    )
    assert rules(source) == [(12, "mesh-before-group")]


def test_a_group_made_in_both_branches_or_by_a_setup_called_first_passes():
    both = MESH_CREATES_THE_GROUP.replace(
        "torch.cuda.set_device(device)\n", 'torch.cuda.set_device(device)\n        dist.init_process_group("nccl")\n'
    ).replace(
        'device = torch.device("cpu")\n', 'device = torch.device("cpu")\n        dist.init_process_group("gloo")\n'
    )
    assert rules(both) == []
    by_setup = IMPORTS + textwrap.dedent(
        """
        def setup():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend)

        def make_mesh():
            return init_device_mesh("cpu", (2,))

        def main():
            setup()
            with torch.no_grad():
                mesh = make_mesh()

        def early():
            mesh = make_mesh()  # called before setup(): every path must have a group
            setup()
        """
    )
    assert rules(by_setup) == [(10, "mesh-before-group")]  # make_mesh: early() reaches it without a group
    assert rules(by_setup.replace("mesh = make_mesh()  # called", "setup()  # called")) == []


def test_a_group_without_a_backend_is_caught():
    assert rules(IMPORTS + "dist.init_process_group()\ndist.init_process_group(backend=None)\n") == [
        (4, "backend"),
        (5, "backend"),
    ]
    assert rules(IMPORTS + 'dist.init_process_group("fake", rank=0, world_size=8)\n') == []


# Collectives get tensors on the group's device (row 1)

# The review's row 1, as benchmark/ddp_benchmark.py was (9f47cdf): its group is "nccl" where GPUs are.
BENCHMARK_ROW_1 = (
    IMPORTS
    + """
def setup(world, rank, device):
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world)

def train(model, cfg, width, device, rank=0, world=1):
    ms = timer.ms()
    names = [*PHASES, "step"]
    times = torch.tensor([ms[k] for k in names], dtype=torch.float64)
    if world > 1:  # a step is as slow as its slowest rank
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return dict(zip(names, times.tolist()))

def bench_allreduce(world, device, max_bytes):
    rows, size = [], 4096
    while size <= max_bytes:
        buf = torch.zeros(size // 4, device=device)
        for _ in range(2):
            dist.all_reduce(buf)
        start = time.perf_counter()
        sec = torch.tensor(
            (time.perf_counter() - start) / iters, dtype=torch.float64
        )
        dist.all_reduce(sec, op=dist.ReduceOp.MAX)
        algbw = size / sec.item() / 1e9
"""
)


def test_the_benchmarks_cpu_tensors_on_an_nccl_group_are_caught():
    assert rules(BENCHMARK_ROW_1) == [(14, "collective-device"), (27, "collective-device")]
    fixed = BENCHMARK_ROW_1.replace("dtype=torch.float64)", "dtype=torch.float64, device=device)").replace(
        "dtype=torch.float64\n", "dtype=torch.float64, device=device\n"
    )
    assert rules(fixed) == []


def test_tensors_brought_to_the_cpu_or_made_in_a_list_are_caught():
    source = IMPORTS + textwrap.dedent(
        """
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        device = torch.device("cuda", 0)
        x = torch.ones(4, device=device)
        dist.all_reduce(x.cpu())
        parts = [torch.zeros(4) for _ in range(2)]
        dist.all_gather(parts, x)
        moved = [torch.zeros(4).to(device) for _ in range(2)]
        dist.all_gather(moved, x)
        """
    )
    assert rules(source) == [(8, "collective-device"), (10, "collective-device")]


def test_cpu_tensors_on_a_gloo_group_or_in_a_gloo_only_program_pass():
    side_group = IMPORTS + textwrap.dedent(
        """
        dist.init_process_group("nccl")
        watch = dist.new_group(backend="gloo")

        def timeout_message(group):
            dist.all_reduce(torch.ones(4), group=group)

        timeout_message(watch)
        dist.all_reduce(torch.ones(4), group=watch)
        """
    )
    assert rules(side_group) == []
    assert rules(IMPORTS + 'dist.init_process_group("gloo")\ndist.all_reduce(torch.ones(4))\n') == []


# Comparisons on one device (rows 3 and 4)

# The review's row 4, as large_models/load_pretrained_sharded.py was (9f47cdf).
EXACT_ACROSS_DEVICES = (
    IMPORTS
    + """
def check(model, device, path):
    dist.init_process_group("nccl")
    tokens = torch.arange(16, device=device) * 31 % 512
    out = model(tokens)
    plain = TinyLM()
    plain.load_state_dict(torch.load(path, weights_only=True))
    assert torch.equal(out.cpu(), plain(tokens.cpu()))
"""
)


def test_bitwise_equality_across_devices_is_caught():
    assert rules(EXACT_ACROSS_DEVICES) == [(11, "exact-across-devices")]
    close = EXACT_ACROSS_DEVICES.replace(
        "assert torch.equal(out.cpu(), plain(tokens.cpu()))",
        "torch.testing.assert_close(out, plain.to(device)(tokens))",
    )
    assert rules(close) == []
    moved_back = EXACT_ACROSS_DEVICES.replace("plain(tokens.cpu())", "plain.to(device)(tokens).cpu()")
    assert rules(moved_back) == []


def test_a_cpu_tensor_compared_with_a_device_tensor_is_caught():
    source = IMPORTS + textwrap.dedent(
        """
        device = torch.device("cuda", 0)
        expected = torch.arange(4.0)
        got = expected.to(device) * 1
        assert torch.equal(got, expected)
        torch.testing.assert_close(got.cpu(), expected)
        """
    )
    assert rules(source) == [(8, "cross-device")]


# The review's row 3, as large_models/zero_optimizer.py was (9f47cdf).
OPTIMIZER_STEP = (
    IMPORTS
    + """
def load_checkpoint(path, device):
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    model = TinyLM().to(device)
    model.load_state_dict(checkpoint["model"])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer

def run(device, path):
    dist.init_process_group("nccl")
    ddp = make_ddp(device)
    adam = torch.optim.Adam(ddp.parameters(), lr=1e-2)
    plain, resumed = load_checkpoint(path, device)
    for a, b in zip(plain.parameters(), ddp.parameters()):
        assert torch.equal(a, b)
    for i, st in adam.state_dict()["state"].items():
        got = resumed.state_dict()["state"][i]
        assert all(torch.equal(got[k], v) for k, v in st.items())
"""
)


def test_adams_step_loaded_onto_the_device_is_caught():
    assert rules(OPTIMIZER_STEP) == [(22, "optimizer-step")]  # the parameters (line 19) are on one device
    on_cpu = OPTIMIZER_STEP.replace("map_location=device", 'map_location="cpu"')
    assert rules(on_cpu) == []


# Inductor's needs declared


def test_a_program_that_compiles_with_inductor_must_say_so():
    source = 'backend = "inductor" if device.type == "cuda" else "aot_eager"\n'
    assert rules(source, inductor="") == [(1, "inductor-declared")]
    assert rules(source, inductor="gpus") == []


# The run-time side: what each program's group would get on a CUDA machine (guidekit/probe/)


def probe():
    spec = importlib.util.spec_from_file_location("guide_probe", ROOT / "guidekit" / "probe" / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_group_without_a_backend_gets_no_cpu_backend_where_cuda_is():
    """What the check relies on, as the review found it in torch 2.15: BackendConfig('undefined') with a CUDA
    accelerator faked present gives {'cuda': 'nccl'}; a named backend keeps the CPU."""
    import torch.distributed.distributed_c10d as c10d

    on_a_cuda_box = probe()._on_a_cuda_box
    assert on_a_cuda_box(c10d, "gloo") == ["cpu", "cuda"]
    assert "cpu" in on_a_cuda_box(c10d, "cpu:gloo,cuda:nccl")
    without = on_a_cuda_box(c10d, None)
    if "cpu" in without:
        pytest.skip(f"this torch gives a group without a backend {without} on a CUDA machine")
    assert without == ["cuda"]


RUNS = {
    # the review's row 2 at run time: one rank, the mesh makes the group
    "mesh_makes_group.py": textwrap.dedent(
        """\
        import os
        from torch.distributed.device_mesh import init_device_mesh
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        mesh = init_device_mesh("cpu", (1,))
        print("mesh ready")
        """
    ),
    "group_then_mesh.py": textwrap.dedent(
        """\
        import os
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        dist.init_process_group("gloo")
        mesh = init_device_mesh("cpu", (1,))
        dist.destroy_process_group()
        getattr(mesh, "_pg_registry", {}).clear()  # as the guide's teardown_mesh: the mesh lets go of the group
        print("mesh ready")
        """
    ),
}


@pytest.mark.runs
def test_a_cpu_run_whose_group_would_have_no_cpu_backend_on_a_gpu_box_fails(pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    pytester.makeini("[pytest]\nmarkers =\n    snippet\n    gpu(n)\n    world_size(n)\n")
    for name, source in RUNS.items():
        path = pytester.path / "snippets" / "planted" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    args = ["-p", "guidekit.runner", "--no-header", "--no-output-check"]
    import torch.distributed.distributed_c10d as c10d

    if "cpu" in probe()._on_a_cuda_box(c10d, None):
        pytest.skip("this torch keeps a CPU backend in a group made without one")
    bad = pytester.runpytest_subprocess(*args, "snippets/planted/mesh_makes_group.py")
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines(
        ["*created its process group with backend 'undefined'*backends for ?'cuda'? only*"]
    )  # fnmatch: ? for the brackets
    pytester.runpytest_subprocess(*args, "snippets/planted/group_then_mesh.py").assert_outcomes(passed=1)


def test_a_device_result_compared_with_made_data_passes():
    """A tensor made on the CPU (torch.tensor, torch.full) is data, not a CPU computation: comparing a device
    result brought back with .cpu() against it bit for bit is a fair check (an all-reduce of small integers)."""
    source = IMPORTS + textwrap.dedent(
        """
        dist.init_process_group("nccl")
        device = torch.device("cuda", 0)
        total = torch.ones(2, device=device) * 2
        dist.all_reduce(total)
        assert torch.equal(total.cpu(), torch.full((2,), 4.0))
        """
    )
    assert rules(source) == []
