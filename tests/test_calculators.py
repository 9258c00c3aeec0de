"""The calculators page in a real browser: its numbers against the Python that the repository already asserts.

- memory: the per-rank counts that snippets/parallelism/fsdp2.py asserts and prints (its recorded output), and the
  ZeRO paper's 2Ψ + 2Ψ + 12Ψ = 16Ψ that the parallelism page states;
- step time: predict() of snippets/benchmark/ddp_benchmark.py, the performance page's model, and the rows and link
  presets of snippets/benchmark/_report.py;
- launch commands: snippets/launch/*.sbatch, k8s_ddp.yaml, the torchrun page's command and the options of
  two_nodes.py.
"""

import ast
import importlib.util
import json
import math
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from guidekit import ROOT
from guidekit.pages import LANGS, fences, url_path

pytestmark = pytest.mark.browser

MiB = 2**20
BENCHMARK = ROOT / "snippets" / "benchmark"
LAUNCH = ROOT / "snippets" / "launch"
LABELS = {  # one label per calculator, as each language's page shows it
    "ko": {"mem-params": "파라미터 수(Ψ)", "step-grad": "기울기 크기(MiB)", "launch-nodes": "노드 수"},
    "en": {"mem-params": "Parameters (Ψ)", "step-grad": "Gradient size (MiB)", "launch-nodes": "Nodes"},
}


def functions_of(path: Path, *names: str) -> SimpleNamespace:
    """Top-level functions of a program, compiled from its own source without running its imports (torch)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    assert sorted(f.name for f in found) == sorted(names), f"{path.name} lacks one of {names}"
    namespace = {"math": math}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)
    return SimpleNamespace(**{name: namespace[name] for name in names})


def module_of(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODEL = functions_of(BENCHMARK / "ddp_benchmark.py", "ring_factor", "busbw_at", "predict")
REPORT = module_of(BENCHMARK / "_report.py")  # standard library only


@pytest.fixture(scope="module")
def opened(browser, base_url):
    """Both languages' calculators page, opened once in one context; console errors and outside requests kept."""
    context = browser.new_context(service_workers="block")
    seen = SimpleNamespace(errors=[], outside=[], pages={})

    def refuse(route):
        seen.outside.append(route.request.url)
        route.abort()

    context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/]|data:|blob:|about:).*"), refuse)
    for lang in LANGS:
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and seen.errors.append(m.text))
        page.on("pageerror", lambda e: seen.errors.append(str(e)))
        page.goto(f"{base_url}/{url_path(lang, 'calculators.md')}", wait_until="networkidle")
        seen.pages[lang] = page
    yield seen
    context.close()


@pytest.fixture
def page(opened):
    return opened.pages["en"]


def fill(page, **values):
    """Set inputs by id (underscores for dashes): selects by value, checkboxes by bool, text fields by text."""
    for key, value in values.items():
        selector = "#" + key.replace("_", "-")
        kind = page.eval_on_selector(selector, "e => e.tagName === 'SELECT' ? 'select' : e.type")
        if kind == "select":
            page.select_option(selector, str(value))
        elif kind == "checkbox":
            page.set_checked(selector, bool(value))
        else:
            page.fill(selector, str(value))


def number(page, selector: str, attribute: str) -> float:
    return float(page.get_attribute(selector, attribute))


def values(page, key: str):
    return json.loads(page.get_attribute(f"#step-{key}", "data-value"))  # a number or a list of numbers


# ---- memory per GPU ----------------------------------------------------------------------------------------


def fsdp2_counts() -> dict:
    """What fsdp2.py printed, as recorded; the program asserts params * world == full and adam == 2 * params."""
    text = (ROOT / "recordings/cpu/parallelism/fsdp2.txt").read_text(encoding="utf-8")
    m = re.search(r"parameters: (\d+) in all, (\d+) on each of (\d+) ranks; Adam state: (\d+) per rank", text)
    assert m, "the recorded output of fsdp2.py changed its wording"
    full, params, world, adam = map(int, m.groups())
    return dict(full=full, params=params, world=world, adam=adam)


FP32 = 4  # fsdp2.py asserts that the shards and their gradients are fp32, with and without the bf16 policy


@pytest.mark.parametrize("precision", ["fp32", "amp"])
@pytest.mark.parametrize("layout", ["fsdpTrue", "fsdpFalse"])
def test_fsdp2_memory_is_what_the_fsdp2_example_counts(page, precision, layout):
    c = fsdp2_counts()
    assert (c["full"], c["params"], c["world"], c["adam"]) == (33672, 16836, 2, 33672)
    fill(page, mem_params=c["full"], mem_precision=precision, mem_optimizer="adam", mem_layout=layout)
    fill(page, mem_dp=c["world"], mem_tp=1, mem_pp=1)
    assert number(page, "#mem-weights", "data-bytes") == c["params"] * FP32
    assert number(page, "#mem-grads", "data-bytes") == c["params"] * FP32
    assert number(page, "#mem-opt", "data-bytes") == c["adam"] * FP32
    assert f"{c['full']:,} × 4 / (2·1·1)" in page.inner_text("#mem-weights")


def zero_bytes_per_parameter() -> int:
    """The parallelism page's count for mixed-precision Adam, after ZeRO §3.1: '2Ψ + 2Ψ + 12Ψ = 16Ψ'."""
    text = (ROOT / "docs/en/parallelism.md").read_text(encoding="utf-8")
    m = re.search(r"(\d+)Ψ \+ (\d+)Ψ \+ (\d+)Ψ = (\d+)Ψ", text)
    assert m and sum(map(int, m.groups()[:3])) == int(m[4])
    return int(m[4])


def test_mixed_precision_adam_is_zeros_16_bytes_per_parameter(page):
    per_parameter = zero_bytes_per_parameter()
    fill(page, mem_params="1.5B", mem_precision="amp", mem_optimizer="adam", mem_layout="ddp")
    fill(page, mem_dp=8, mem_tp=1, mem_pp=1, mem_bucket_view=True)
    assert number(page, "#mem-states", "data-bytes") == per_parameter * 1.5e9 == 24e9  # the page's 24 GB
    assert number(page, "#mem-transient", "data-bytes") == 0  # buckets are the gradients
    fill(page, mem_bucket_view=False)
    assert number(page, "#mem-transient", "data-bytes") == FP32 * 1.5e9  # buckets: one more gradient's size
    assert f"= {per_parameter} B" in page.inner_text("#mem-summary")
    # ZeRO stage 3 = FSDP2: 16Ψ/N, e.g. the paper's 7.5B parameters on 64 GPUs (Figure 1: 1.9 GB)
    fill(page, mem_params="7.5e9", mem_layout="fsdpTrue", mem_dp=64)
    assert number(page, "#mem-states", "data-bytes") == pytest.approx(per_parameter * 7.5e9 / 64, rel=1e-12)


# ---- DDP step time -----------------------------------------------------------------------------------------


STEP_CASES = [  # gradient MiB, bucket cap MiB, first bucket MiB, link GB/s, efficiency %, GPUs, compute ms
    (1024, 25, 1, 450, 80, 8, 200),
    (64.03125, 25, 25, 31.5, 80, 4, 10),
    (0.5, 25, 1, 63, 80, 16, 1.5),
    (100, 25, 1, 450, 80, 1, 50),
]


@pytest.mark.parametrize("grad,cap,first,rate,eff,world,compute", STEP_CASES)
def test_step_time_is_the_benchmarks_predict(page, grad, cap, first, rate, eff, world, compute):
    fill(page, step_grad=grad, step_bucket=cap, step_first=first, step_rate=rate, step_eff=eff)
    fill(page, step_world=world, step_compute=compute)
    buckets = values(page, "buckets")
    assert sum(buckets) == pytest.approx(grad * MiB, rel=1e-12)
    assert buckets[0] == min(first, grad) * MiB and all(b == cap * MiB for b in buckets[1:-1])
    assert 0 < buckets[-1] <= max(cap, first) * MiB
    busbw = values(page, "busbw")
    assert busbw == pytest.approx(rate * eff / 100, rel=1e-12)
    expected = MODEL.predict(compute, buckets, world, [{"bytes": 1, "busbw_gbs": busbw}])  # one busbw for all
    for key, name in [("comm", "comm_ms"), ("no-overlap", "no_overlap_ms"), ("overlap", "overlap_ms")]:
        assert values(page, key) == pytest.approx(expected[name], rel=1e-9), key
    steps = [expected["no_overlap_ms"], expected["overlap_ms"]]
    assert values(page, "speedup") == pytest.approx([world * compute / s for s in steps], rel=1e-9)
    assert values(page, "efficiency") == pytest.approx([compute / s for s in steps], rel=1e-9)


def benchmark_rows():
    """DDP rows of the committed results with one bucket: the calculator's single busbw is then the model's."""
    for path in sorted((BENCHMARK / "results").glob("*.json")):
        res = REPORT.load(path.name)
        for run in res["runs"]:
            if run["mode"] == "DDP" and run["world_size"] > 1 and len(run["buckets"]) == 1:
                allreduce = [a for a in res["allreduce"] if a["world_size"] == run["world_size"]]
                yield pytest.param(run, allreduce, id=f"{path.stem}-{run['model']}-{run['world_size']}")


@pytest.mark.parametrize("run,allreduce", list(benchmark_rows()))
def test_step_time_reproduces_the_performance_pages_prediction(page, run, allreduce):
    (size,) = run["buckets"]
    busbw = MODEL.busbw_at(allreduce, size)  # measured busbw at this bucket's size
    fill(page, step_grad=repr(size / MiB), step_first=repr(size / MiB), step_bucket=25)
    fill(page, step_rate=repr(busbw), step_eff=100, step_world=run["world_size"], step_compute=repr(run["compute_ms"]))
    for key, name in [("comm", "comm_ms"), ("no-overlap", "no_overlap_ms"), ("overlap", "overlap_ms")]:
        assert values(page, key) == pytest.approx(run["predicted"][name], rel=1e-9), key


def test_link_presets_are_the_performance_pages(page):
    options = page.eval_on_selector_all("#step-link option", "os => os.map(o => o.textContent)")
    for (name, rate, _), option in zip(REPORT.LINKS, options):
        assert option == f"{name}: {rate:g} GB/s"
    page.select_option("#step-link", "0")
    assert page.input_value("#step-rate") == f"{REPORT.LINKS[0][1]:g}"
    # The page's table: all-reduce of each model's whole gradient (one bucket) on 8 GPUs at 80% of the link rate
    name = sorted((BENCHMARK / "results").glob("*.json"))[0].name
    rows = REPORT.gpu_prediction(name, "en").splitlines()[2:]
    grads = sorted({r["grad_mib"] for r in REPORT.load(name)["runs"]})
    assert len(rows) == len(REPORT.LINKS)
    fill(page, step_bucket=1024, step_first=1024, step_eff=f"{REPORT.LINK_EFFICIENCY * 100:g}", step_world=8)
    for row, (_, rate, _) in zip(rows, REPORT.LINKS):
        cells = [cell.strip() for cell in row.strip("|").split("|")][2:]
        assert len(cells) == len(grads)
        fill(page, step_rate=f"{rate:g}")
        for grad, cell in zip(grads, cells):
            fill(page, step_grad=repr(grad))
            assert f"{values(page, 'comm'):.3f} ms" == cell, (rate, grad)


# ---- launch commands ---------------------------------------------------------------------------------------


def command_lines(script: str) -> list[str]:
    """The #SBATCH lines and the commands: continuations joined, trailing comments, comments and blanks dropped."""
    lines = []
    for line in re.sub(r"\\\n\s*", " ", script).splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line and (line.startswith("#SBATCH") or not line.startswith("#")):
            lines.append(line)
    return lines


def sbatch_option(text: str, name: str) -> int:
    return int(re.search(rf"^#SBATCH --{name}=(\d+)", text, re.M)[1])


def built(page, nodes, gpus, launcher, script) -> str:
    fill(page, launch_launcher=launcher, launch_nodes=nodes, launch_gpus=gpus, launch_script_path=script)
    return page.text_content("#launch-script")


@pytest.mark.parametrize(
    "launcher,name", [("slurmTorchrun", "slurm_train.sbatch"), ("slurmPython", "slurm_srun.sbatch")]
)
def test_slurm_scripts_are_the_committed_ones(page, launcher, name):
    committed = (LAUNCH / name).read_text(encoding="utf-8")
    nodes, gpus = sbatch_option(committed, "nodes"), sbatch_option(committed, "gpus-per-node")
    script = re.search(r"(snippets/\S+\.py)", committed)[1]
    generated = built(page, nodes, gpus, launcher, script)
    want = command_lines(committed)
    assert any(line.startswith("srun ") for line in want) and sum(line.startswith("#SBATCH") for line in want) >= 5
    assert command_lines(generated) == want
    assert generated + "\n" == committed, "the page says the calculator prints exactly this file"
    # other inputs change only what depends on them
    other = command_lines(built(page, 4, 2, launcher, script))
    assert "#SBATCH --nodes=4" in other and "#SBATCH --gpus-per-node=2" in other
    assert len(other) == len(want)


def test_single_node_torchrun_is_the_torchrun_pages_command(page):
    text = (ROOT / "docs/en/torchrun.md").read_text(encoding="utf-8")
    shown = [line for f in fences(text) if f.lang == "bash" for line in f.body if line.startswith("torchrun ")]
    assert shown, "the torchrun page shows no torchrun command"
    for line in shown:
        gpus = int(re.search(r"--nproc-per-node=(\d+)", line)[1])
        script = line.split()[-1]
        assert built(page, 1, gpus, "torchrun", script) == line


def source_string(node: ast.expr) -> str:
    """A string literal as written: an f-string keeps its {fields}; anything else is its source."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else f"{{{ast.unparse(v.value)}}}" for v in node.values)
    return ast.unparse(node)


def two_nodes_options() -> list[str]:
    """The torchrun options of two_nodes.py's node_command, f-strings kept as source text."""
    tree = ast.parse((LAUNCH / "two_nodes.py").read_text(encoding="utf-8"))
    command = next(
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "node_command"
    )
    words = [source_string(e) for e in command.elts]
    return [w for w in words[words.index("torch.distributed.run") + 1 :] if w.startswith("--")]


def test_multi_node_torchrun_has_the_two_node_simulations_options(page):
    want = two_nodes_options()
    nodes, gpus = int(want[0].removeprefix("--nnodes=")), int(want[1].removeprefix("--nproc-per-node="))
    words = shlex.split(" ".join(command_lines(built(page, nodes, gpus, "torchrun", "train.py"))))
    assert words[0] == "torchrun" and words[-1] == "train.py"
    got = words[1:-1]
    assert [w.split("=")[0] for w in got] == [w.split("=")[0] for w in want]
    same = ("--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-conf", "--max-restarts")
    assert [w for w in got if w.startswith(same)] == [w for w in want if w.startswith(same)]
    assert "--rdzv-endpoint=$HEAD_NODE:29400" in got  # two_nodes.py: "on a cluster: a fixed one, e.g. 29400"


def test_kubernetes_command_uses_the_completion_index_and_the_headless_service(page):
    generated = built(page, 4, 8, "k8s", "train.py")
    assert "# Each pod asks for nvidia.com/gpu: 8;" in generated  # the GPUs go into the pod's limit
    words = shlex.split(" ".join(command_lines(generated)), posix=False)
    assert words == [
        "torchrun",
        "--nnodes=4",
        '--nproc-per-node="${NPROC_PER_NODE:-gpu}"',  # one worker per GPU the pod gets
        '--node-rank="$JOB_COMPLETION_INDEX"',
        "--rdzv-backend=static",  # c10d ignores --node-rank (the torchrun page)
        "--rdzv-endpoint=ddp-0.ddp:29500",
        "train.py",
    ]
    assert "snippets/launch/k8s_ddp.yaml" in page.inner_text("#launch-note")


def test_kubernetes_command_is_the_manifests(page):
    """The page says: for the manifest's nodes and GPUs, the calculator prints the command of its pods."""
    job = next(
        d for d in yaml.safe_load_all((LAUNCH / "k8s_ddp.yaml").read_text(encoding="utf-8")) if d and d["kind"] == "Job"
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    nodes, gpus = job["spec"]["completions"], container["resources"]["limits"]["nvidia.com/gpu"]
    shell, flag, script = container["command"]
    assert (shell, flag, nodes, gpus) == ("/bin/sh", "-c", 2, 4)  # the note's "2 nodes of 4 GPUs"
    fill(page, launch_launcher="torchrun", launch_script_path="snippets/ddp/train_torchrun.py")  # its default
    fill(page, launch_launcher="k8s")  # a default script follows the launcher: the manifest's path in the image
    assert page.input_value("#launch-script-path") == script.split()[-1]
    generated = built(page, nodes, gpus, "k8s", script.split()[-1])
    assert generated.splitlines()[-len(script.splitlines()) :] == script.splitlines()
    assert command_lines(generated) == command_lines(script)


# ---- both languages ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGS)
def test_calculators_load_in_each_language(opened, lang):
    page = opened.pages[lang]
    assert page.get_attribute("html", "lang") == lang
    for field, label in LABELS[lang].items():
        assert page.inner_text(f"label[for={field}]") == label
    for output in ("#mem-weights", "#step-overlap", "#launch-script"):
        assert page.locator(output).count() == 1, f"{output} missing"
    fill(page, mem_params="seven")
    assert LABELS[lang]["mem-params"] in page.inner_text("#mem-output .calc-error")
    fill(page, mem_params="7B")
    assert not opened.outside, f"requests leaving 127.0.0.1: {opened.outside}"
    assert not opened.errors, f"console errors: {opened.errors}"
