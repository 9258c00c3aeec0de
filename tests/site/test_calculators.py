"""The calculators page in a real browser: its numbers against the Python that the repository already asserts.

- memory: the per-rank counts that snippets/parallelism/fsdp2.py asserts and prints (its recorded output), the
  ZeRO paper's 2Ψ + 2Ψ + 12Ψ = 16Ψ that the parallelism page states, and the activation bytes that
  snippets/large_models/memory_breakdown.py measures (its recorded output) and predicts (its activation_bytes());
- step time: predict() of snippets/benchmark/ddp_benchmark.py, the performance page's model, the rows and link
  presets of guidekit/report.py, and DDP's own bucket assignment (torch.distributed);
- every input field: bad input (units, negative, empty, huge) is refused beside the field, and never freezes or
  blanks the page;
- throughput and MFU: model_flops_per_token, hardware_flops_per_token, tokens_per_second and utilization of
  snippets/scaling/flops_mfu.py, whose program checks them against FlopCounterMode, and torchtitan's Llama 3.1 8B
  benchmark that the throughput page works through;
- launch commands: snippets/launch/*.sbatch, k8s_ddp.yaml, the torchrun page's command and the options of
  two_nodes.py.
"""

import ast
import json
import re
import shlex
from types import SimpleNamespace

import pytest
import yaml
from program_functions import functions_of

from guidekit import ROOT, report
from guidekit.pages import LANGS, fences, url_path

pytestmark = pytest.mark.browser

MiB = 2**20
BENCHMARK = ROOT / "snippets" / "benchmark"
LAUNCH = ROOT / "snippets" / "launch"
LARGE = ROOT / "snippets" / "large_models"
LABELS = {  # one label per calculator, as each language's page shows it
    "ko": {
        "mem-params": "파라미터 수(Ψ)",
        "step-grad": "기울기 크기(MiB)",
        "tput-step": "잰 스텝 시간(s)",
        "launch-nodes": "노드 수",
    },
    "en": {
        "mem-params": "Parameters (Ψ)",
        "step-grad": "Gradient size (MiB)",
        "tput-step": "Measured step time (s)",
        "launch-nodes": "Nodes",
    },
}


MODEL = functions_of(BENCHMARK / "ddp_benchmark.py", "ring_factor", "allreduce_ms", "predict")
REPORT = report  # the performance page's tables (guidekit/report.py)
ACT = functions_of(LARGE / "memory_breakdown.py", "activation_bytes")  # the memory page's count
FLOPS = functions_of(  # the throughput page's formulas
    ROOT / "snippets" / "scaling" / "flops_mfu.py",
    "model_flops_per_token",
    "hardware_flops_per_token",
    "tokens_per_second",
    "utilization",
)


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


def breakdown() -> dict:
    """What memory_breakdown.py printed, as recorded: its model, its micro-batch, and each row's predicted and
    measured bytes; the program asserts that every measured figure equals its prediction (exactly, on CPU)."""
    text = (ROOT / "recordings/cpu/large_models/memory_breakdown.txt").read_text(encoding="utf-8")
    model = re.search(r"TinyLM: V=(\d+), d=(\d+), h=(\d+), L=(\d+)", text)
    batch = re.search(r"one micro-batch: (\d+) sequences × (\d+) tokens", text)
    assert model and batch, "the recorded output of memory_breakdown.py changed its wording"
    rows = {
        m[1].strip(): (int(m[2].replace(",", "")), int(m[3].replace(",", "")))
        for m in re.finditer(r"^activations, (.+?)\s+([\d,]+)\s+([\d,]+)$", text, re.M)
    }
    vocab, hidden, heads, layers = map(int, model.groups())
    batch, seq = map(int, batch.groups())
    return dict(vocab=vocab, hidden=hidden, heads=heads, layers=layers, batch=batch, seq=seq, rows=rows)


def fill_model(page, b: dict, **options):
    fill(page, mem_params=1000, mem_dp=1, mem_tp=1, mem_pp=1, mem_batch=b["batch"], mem_seq=b["seq"])
    fill(page, mem_hidden=b["hidden"], mem_layers=b["layers"], mem_heads=b["heads"], mem_vocab=b["vocab"])
    fill(page, mem_ac="none", mem_dropout=False, mem_optimizer="adam", **options)


def test_activations_are_what_memory_breakdown_measures(page):
    b = breakdown()
    rows, tokens, d, L = b["rows"], b["batch"] * b["seq"], b["hidden"], b["layers"]
    assert set(rows) >= {"fp32", "bf16 autocast", "pure bf16", "fp32, dropout 0.1", "fp32, checkpointing"}
    assert all(predicted == measured for predicted, measured in rows.values())
    activations = lambda: number(page, "#mem-activations", "data-bytes")  # noqa: E731

    fill_model(page, b, mem_precision="fp32", mem_layout="ddp")
    assert activations() == rows["fp32"][1]  # byte for byte
    fill(page, mem_ac="full")
    assert activations() == rows["fp32, checkpointing"][1]
    one_block = (rows["fp32"][1] - rows["fp32, checkpointing"][1]) / L  # what backward recomputes at a time
    assert number(page, "#mem-recompute", "data-bytes") == one_block
    fill(page, mem_ac="none")

    # autocast under DDP: the same activations, plus bf16 copies of the matmul weights, which the calculator takes
    # as Ψ × 2 B; TinyLM's matmul weights are 12·d² per block and V·d in the head
    matmul_weights = 12 * d * d * L + b["vocab"] * d
    fill(page, mem_precision="amp", mem_layout="ddp", mem_params=matmul_weights)
    assert activations() + number(page, "#mem-copies", "data-bytes") == rows["bf16 autocast"][1]

    # pure bf16: a GPU keeps LayerNorm's mean and rstd in fp32 (4 stats a token per block, 2 in the last norm),
    # the CPU that made the recording in bf16
    fill(page, mem_precision="bf16")
    assert activations() == rows["pure bf16"][1] + tokens * (4 * L + 2) * (4 - 2)
    # FSDP2's MixedPrecisionPolicy(param_dtype=bf16) computes in bf16: the same count
    fill(page, mem_precision="amp", mem_layout="fsdpTrue", mem_unit=1)
    assert activations() == rows["pure bf16"][1] + tokens * (4 * L + 2) * (4 - 2)

    # dropout: a GPU keeps a 1-byte mask, the CPU the fp32 noise: two masks of n·d per block
    fill(page, mem_precision="fp32", mem_layout="ddp", mem_dropout=True)
    assert activations() == rows["fp32"][1] + 2 * L * tokens * d * 1
    assert rows["fp32, dropout 0.1"][1] == rows["fp32"][1] + 2 * L * tokens * d * 4


def test_activations_are_memory_breakdowns_formula(page):
    """A Llama-2-7B-sized stack (d 4096, 32 blocks, 32 heads, V 32000) at 4096 tokens on TP 2: every precision,
    layout, checkpointing and dropout choice against activation_bytes() of the program."""
    fill(page, mem_params="7B", mem_layout="fsdpTrue", mem_unit="202M", mem_dp=8, mem_tp=2, mem_pp=1)
    fill(page, mem_batch=1, mem_seq=4096, mem_hidden=4096, mem_layers=32, mem_heads=32, mem_vocab=32000)
    for precision, layout, checkpointing, dropout in [
        ("fp32", "ddp", False, False),
        ("amp", "ddp", True, True),  # autocast: fp32 residual stream, bf16 matmuls
        ("bf16", "fsdpTrue", True, False),
        ("amp", "fsdpFalse", False, True),  # MixedPrecisionPolicy: all bf16
    ]:
        fill(page, mem_precision=precision, mem_layout=layout, mem_ac="full" if checkpointing else "none")
        fill(page, mem_dropout=dropout)
        residual = 4 if precision == "fp32" or (precision == "amp" and layout == "ddp") else 2
        compute = 4 if precision == "fp32" else 2
        kwargs = dict(residual=residual, compute=compute, stats=4, mask=1 if dropout else 0)
        want = ACT.activation_bytes(4096, 4096, 32, 32, 32000, **kwargs, checkpointing=checkpointing) / 2  # ÷ TP
        assert number(page, "#mem-activations", "data-bytes") == pytest.approx(want, rel=1e-12), precision


@pytest.mark.parametrize("precision,param,reduce", [("fp32", 4, 4), ("amp", 2, 4), ("bf16", 2, 2)])
def test_fsdp2_backward_holds_a_units_gradients_and_reduce_scatter_buffer(page, precision, param, reduce):
    """In backward FSDP2 holds a unit's unsharded gradients (param_dtype) and copies them into a reduce-scatter
    input (reduce_dtype; fp32 as the parallelism page recommends), 1 such buffer in flight by default
    (set_reduce_scatter_max_input_buffers)."""
    fill(page, mem_params="7B", mem_precision=precision, mem_layout="fsdpTrue", mem_dp=8, mem_tp=1, mem_pp=1)
    fill(page, mem_unit="202M", mem_ac="none")
    assert number(page, "#mem-backward", "data-bytes") == 202e6 * (param + reduce)
    fill(page, mem_tp=2)
    assert number(page, "#mem-backward", "data-bytes") == 202e6 * (param + reduce) / 2
    fill(page, mem_layout="fsdpFalse", mem_tp=1)
    assert number(page, "#mem-backward", "data-bytes") == 202e6 * (param + reduce)
    fill(page, mem_layout="ddp")
    assert page.locator("#mem-backward").count() == 0


# ---- DDP step time -----------------------------------------------------------------------------------------


STEP_CASES = [  # gradient MiB, cap MiB, first bucket MiB, link GB/s, efficiency %, alpha µs, GPUs, compute ms, backward %
    (1024, 25, 1, 450, 80, 0, 8, 200, 67),
    (1024, 25, 1, 31.5, 80, 50, 8, 80, 67),  # communication-bound: the chain of all-reduces outlasts backward
    (64.03125, 25, 25, 31.5, 80, 20, 4, 10, 100),
    (0.5, 25, 1, 63, 80, 30, 16, 1.5, 60),
    (100, 25, 1, 450, 80, 10, 1, 50, 67),  # one GPU: the latency of each bucket's all-reduce alone
    (4, 0.5, 0.5, 1.1, 100, 650, 2, 12, 70),  # many small buckets on a slow link: latency-bound
]


def calculator_fit(busbw: float, alpha_us: float, world: int) -> dict:
    """The calculator's all-reduce in the benchmark's terms: alpha, and beta = 2(n-1)/n / busbw seconds per byte."""
    return dict(alpha_us=alpha_us, beta_s_per_byte=MODEL.ring_factor(world) / (busbw * 1e9))


@pytest.mark.parametrize("grad,cap,first,rate,eff,alpha,world,compute,share", STEP_CASES)
def test_step_time_is_the_benchmarks_predict(page, grad, cap, first, rate, eff, alpha, world, compute, share):
    fill(page, step_grad=grad, step_bucket=cap, step_first=first, step_embed=0, step_rate=rate, step_eff=eff)
    fill(page, step_alpha=alpha, step_world=world, step_compute=compute, step_backward=share)
    buckets = values(page, "buckets")
    assert sum(buckets) == pytest.approx(grad * MiB, rel=1e-12)
    assert buckets[0] == min(first, grad) * MiB and all(b == cap * MiB for b in buckets[1:-1])
    assert 0 < buckets[-1] <= max(cap, first) * MiB
    busbw = values(page, "busbw")
    assert busbw == pytest.approx(rate * eff / 100, rel=1e-12)
    fit = calculator_fit(busbw, alpha, world)
    backward = compute * share / 100
    phases = dict(forward=compute - backward, backward=backward, optimizer=0.0)  # predict() adds the two
    assert values(page, "comm") == pytest.approx(sum(MODEL.allreduce_ms(b, fit) for b in buckets), rel=1e-9)
    assert values(page, "last") == pytest.approx(MODEL.allreduce_ms(buckets[-1], fit), rel=1e-9)
    steps = [MODEL.predict(phases, buckets, fit, overlap) for overlap in (False, True)]
    assert [values(page, "no-overlap"), values(page, "overlap")] == pytest.approx(steps, rel=1e-9)
    assert values(page, "speedup") == pytest.approx([world * compute / s for s in steps], rel=1e-9)
    assert values(page, "efficiency") == pytest.approx([compute / s for s in steps], rel=1e-9)


def benchmark_rows():
    """Every DDP row of the committed results (every model size, world size and bucket cap), with the fit of its
    world size."""
    for path in sorted((BENCHMARK / "results").glob("*.json")):
        res = REPORT.load(path.name)
        fits = {f["world_size"]: f for f in res["fits"]}
        for run in res["runs"]:
            if run["mode"] == "DDP":
                cap = f"-cap{run['bucket_cap_mb']:g}" if run["bucket_cap_mb"] else ""
                yield pytest.param(
                    run, fits[run["world_size"]], id=f"{path.stem}-{run['model']}-{run['world_size']}{cap}"
                )


@pytest.mark.parametrize("run,fit", list(benchmark_rows()))
def test_step_time_reproduces_the_performance_pages_prediction(page, run, fit):
    """The row's inputs typed into the calculator: its buckets (first bucket and cap as DDP built them), the fit's
    alpha and busbw, its compute time and backward's share. Both steps are the benchmark's stored predictions."""
    sizes = [b / MiB for b in run["buckets"]]
    phases = run["compute_phases_ms"]
    compute = sum(phases.values())
    busbw = fit["busbw_gbs"] or 1.0  # one rank: no byte crosses a link, so any rate gives the same
    fill(page, step_grad=repr(sum(sizes)), step_first=repr(sizes[0]), step_bucket=repr(max(sizes[1:], default=1)))
    fill(page, step_embed=0, step_rate=repr(busbw), step_eff=100, step_alpha=repr(fit["alpha_us"]))
    fill(page, step_world=run["world_size"], step_compute=repr(compute))
    fill(page, step_backward=repr(100 * phases["backward"] / compute))
    assert values(page, "buckets") == run["buckets"], "the calculator's buckets are not the ones DDP built"
    for key, name in [("comm", "comm_ms"), ("no-overlap", "no_overlap_ms"), ("overlap", "overlap_ms")]:
        assert values(page, key) == pytest.approx(run["predicted"][name], rel=1e-9), key


def test_only_the_backward_pass_hides_communication(page):
    """The review's case: 1 GiB of gradients, 8 GPUs on PCIe Gen4 at 80%, 80 ms of compute, two thirds of it
    backward. DDP launches a bucket's all-reduce from backward and waits at its end: forward and the optimizer step
    hide nothing."""
    fill(page, step_grad=1024, step_bucket=25, step_first=1, step_embed=0, step_rate=31.5, step_eff=80)
    fill(page, step_alpha=0, step_world=8, step_compute=80, step_backward=100)
    whole = values(page, "overlap")  # as if the whole step could hide communication
    fill(page, step_backward=67)
    comm, last, overlap = values(page, "comm"), values(page, "last"), values(page, "overlap")
    backward = 80 * 0.67
    assert comm > backward  # communication-bound: the all-reduces, one after another, outlast backward
    assert overlap >= 80 - backward + comm  # the chain starts no earlier than the backward pass
    assert overlap >= 80 + last  # the last bucket starts no earlier than the end of backward
    assert 80 + last <= whole < 80 + 2 * last  # with the whole step as backward, about the last bucket is exposed
    assert values(page, "efficiency")[1] == pytest.approx(80 / overlap, rel=1e-12)
    assert values(page, "efficiency")[1] < 0.85 < 80 / whole  # the gap the review measured: about 79% against 98%


def test_latency_counts_once_per_bucket(page):
    """alpha is paid per bucket: on one GPU the all-reduces cost alpha each; a smaller cap makes more of them."""
    fill(page, step_grad=100, step_bucket=25, step_first=1, step_embed=0, step_rate=450, step_eff=80)
    fill(page, step_alpha=100, step_world=1, step_compute=50, step_backward=67)
    n = len(values(page, "buckets"))
    assert n == 5 and values(page, "comm") == pytest.approx(n * 0.1, rel=1e-12)
    fill(page, step_bucket=5)
    more = len(values(page, "buckets"))
    assert more > n and values(page, "comm") == pytest.approx(more * 0.1, rel=1e-12)


def ddp_buckets(sizes_mib: list[float], first_mib: float, cap_mib: float) -> list[float]:
    """DDP's own assignment (the reducer's, on rebuilt buckets): parameters in the order their gradients become
    ready, a bucket closed once it reaches its cap, the first one capped smaller. Meta tensors: sizes only."""
    import torch
    import torch.distributed as dist

    tensors = [torch.empty(round(s * MiB) // 4, device="meta") for s in sizes_mib]
    groups, _ = dist._compute_bucket_assignment_by_size(tensors, [round(first_mib * MiB), round(cap_mib * MiB)])
    return [sum(tensors[i].numel() * 4 for i in group) / MiB for group in groups]


@pytest.mark.parametrize(
    "sizes",
    [
        [1, 25, 25, 10, 147.25],  # GPT-2 small's token embedding (50257 × 768 × 4 B) comes last, into the open bucket
        [1, 25, 25, 25, 147.25],  # the open bucket just filled: the embedding gets a bucket of its own
        [0.5, 147.25],  # everything but the embedding fits in the first bucket
    ],
)
def test_last_bucket_holds_the_first_layers_as_in_ddp(page, sizes):
    fill(page, step_grad=sum(sizes), step_bucket=25, step_first=1, step_embed=sizes[-1], step_world=8)
    fill(page, step_backward=67)
    got = [b / MiB for b in values(page, "buckets")]
    assert got == pytest.approx(ddp_buckets(sizes, 1, 25), rel=1e-12)


def test_a_large_first_layer_is_exposed_after_backward(page):
    """The review's GPT-2 small case: 474.6 MiB of fp32 gradients, wte 147.2 MiB, 8 GPUs on PCIe Gen4 at 80%: the last
    bucket's all-reduce, which nothing can hide, takes over 10 ms, not the remainder's 1.7 ms."""
    fill(page, step_grad=474.6, step_bucket=25, step_first=1, step_embed=0, step_rate=31.5, step_eff=80)
    fill(page, step_alpha=0, step_world=8, step_compute=100, step_backward=67)
    assert values(page, "last") < 2
    fill(page, step_embed=147.2)
    assert values(page, "last") > 10.7
    assert values(page, "buckets")[-1] / MiB >= 147.2


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
    fill(
        page,
        step_bucket=1024,
        step_first=1024,
        step_embed=0,
        step_eff=f"{REPORT.LINK_EFFICIENCY * 100:g}",
        step_alpha=0,
    )
    fill(page, step_world=8)
    for row, (_, rate, _) in zip(rows, REPORT.LINKS):
        cells = [cell.strip() for cell in row.strip("|").split("|")][2:]
        assert len(cells) == len(grads)
        fill(page, step_rate=f"{rate:g}")
        for grad, cell in zip(grads, cells):
            fill(page, step_grad=repr(grad))
            assert f"{values(page, 'comm'):.3f} ms" == cell, (rate, grad)


# ---- throughput and MFU ------------------------------------------------------------------------------------

THROUGHPUT_CASES = [  # N, L, d, s, V, tokens per step, step s, GPUs, peak TFLOP/s, checkpointing
    (7_505_924_096, 32, 4096, 8192, 128256, 131072, 2.84, 8, 989, "none"),  # torchtitan's Llama 3.1 8B, FSDP
    (6_476_267_520, 32, 4096, 4096, 32000, 4 * 1024 * 1024, 5.5, 256, 312, "full"),  # a 7B on A100s, checkpointed
    (114_688, 2, 64, 31, 256, 124, 0.02, 1, 0.025, "full"),  # flops_mfu.py's TinyGPT on a CPU
    (70e9, 80, 8192, 8192, 128256, 16 * 8192 * 64, 10, 512, 2250, "none"),
]


@pytest.mark.parametrize("n,layers,hidden,seq,vocab,tokens,step,gpus,peak,ac", THROUGHPUT_CASES)
def test_mfu_is_the_programs_utilization(page, n, layers, hidden, seq, vocab, tokens, step, gpus, peak, ac):
    fill(page, tput_params=repr(n), tput_layers=layers, tput_hidden=hidden, tput_seq=seq, tput_vocab=vocab)
    fill(page, tput_tokens=tokens, tput_step=repr(step), tput_gpus=gpus, tput_peak=repr(peak), tput_ac=ac)
    value = lambda key: float(page.get_attribute(f"#tput-{key}", "data-value"))  # noqa: E731
    model = FLOPS.model_flops_per_token(n, layers, hidden, seq)
    # every block checkpointed: the calculator recomputes all matmuls but the output layer (V x d)
    recomputed = n - vocab * hidden if ac == "full" else 0
    hardware = FLOPS.hardware_flops_per_token(n, layers, hidden, seq, recomputed)
    assert value("model") == pytest.approx(model, rel=1e-12)
    assert value("hardware") == pytest.approx(hardware, rel=1e-12)
    assert value("tps") == pytest.approx(FLOPS.tokens_per_second(tokens, step, gpus), rel=1e-12)
    assert value("mfu") == pytest.approx(FLOPS.utilization(model, tokens, step, gpus, peak * 1e12), rel=1e-12)
    assert value("hfu") == pytest.approx(FLOPS.utilization(hardware, tokens, step, gpus, peak * 1e12), rel=1e-12)
    assert (value("hfu") > value("mfu")) and (ac == "none" or value("hfu") - value("mfu") > 0.01)


def test_mfu_of_torchtitans_benchmark_is_the_pages(page):
    """The throughput page: Llama 3.1 8B at 5,762 and 6,667 tokens/s per GPU on H100s, 'MFU 33.7%' and '39.0%'."""
    text = (ROOT / "recordings/cpu/scaling/flops_mfu.txt").read_text(encoding="utf-8")
    shown = dict(re.findall(r"^Llama 3\.1 8B, ([\d,]+) tokens/s per GPU: MFU ([\d.]+)%", text, re.M))
    assert set(shown) == {"5,762", "6,667"}, "the recorded output of flops_mfu.py changed its wording"
    page.select_option("#tput-gpu", "0")  # the H100 preset
    assert page.input_value("#tput-peak") == "989"
    n = 8_030_261_248 - 128_256 * 4_096  # all parameters but the embedding, as the program's N
    fill(page, tput_params=n, tput_layers=32, tput_hidden=4096, tput_seq=8192, tput_ac="none", tput_step=1, tput_gpus=1)
    for tps, mfu in shown.items():
        fill(page, tput_tokens=tps.replace(",", ""))
        assert f"{100 * float(page.get_attribute('#tput-mfu', 'data-value')):.1f}" == mfu


def test_step_time_takes_seconds_only(page):
    for good, seconds in [("2.84", 2.84), ("2.84 s", 2.84), ("3s", 3.0)]:
        fill(page, tput_step=good, tput_tokens=100, tput_gpus=1)
        assert not page.locator("#tput-step-problem").is_visible(), good
        assert float(page.get_attribute("#tput-tps", "data-value")) == pytest.approx(100 / seconds, rel=1e-12)
    for bad in ["2840 ms", "2840ms", "3 µs", "2 h"]:
        fill(page, tput_step=bad)
        assert page.locator("#tput-step-problem").is_visible(), bad
    fill(page, tput_step="2.84", tput_tokens=131072, tput_gpus=8)


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


# ---- every input field ---------------------------------------------------------------------------------------

BAD = ["7 apples", "-5", "", "1e400"]  # a unit, negative, empty, huge
OWN_UNITS = {
    "step-grad": "512 MiB",
    "step-bucket": "25 MiB",
    "step-first": "1MiB",
    "step-embed": "0 MiB",
    "step-rate": "450 GB/s",
    "step-eff": "80%",
    "step-alpha": "50 µs",
    "step-compute": "200 ms",
    "step-backward": "67 %",
}


def text_fields(page) -> list[str]:
    return page.eval_on_selector_all(".calc input[type=text]", "es => es.map(e => e.id)")


# Types `text` into a field as the browser does (value, then an input event, which recomputes the calculator), and
# reports what the page shows: the message beside the field, whether the output holds an error or a result, and
# how long the recomputation took.
TYPE = """([id, text]) => {
    const field = document.getElementById(id);
    const started = performance.now();
    field.value = text;
    field.dispatchEvent(new Event("input", { bubbles: true }));
    const ms = performance.now() - started;
    const problem = document.getElementById(id + "-problem");
    const out = field.closest(".calc").querySelector(".calc-output");
    return {
        problem: problem && !problem.hidden ? problem.textContent.trim() : "",
        invalid: field.getAttribute("aria-invalid") === "true",
        error: out.querySelectorAll(".calc-error").length,
        result: out.querySelectorAll("table, pre").length,
        ms,
    };
}"""


def type_into(page, field_id: str, text: str) -> dict:
    return page.evaluate(TYPE, [field_id, text])


def test_every_field_refuses_bad_input_beside_it(opened):
    page = opened.pages["en"]
    page.select_option("#mem-layout", "fsdpTrue")  # enables the unit field
    ids = text_fields(page)
    assert len(ids) >= 20 and "step-grad" in ids and "mem-seq" in ids
    for field_id in ids:
        good = page.input_value(f"#{field_id}")
        for bad in [""] if field_id == "launch-script-path" else BAD:
            shown = type_into(page, field_id, bad)
            assert shown["problem"] and shown["invalid"], (field_id, bad, shown)
            assert shown["error"] == 1 and shown["result"] == 0, (field_id, bad, shown)  # a message, not a blank
        shown = type_into(page, field_id, good)
        assert not shown["problem"] and not shown["invalid"] and shown["error"] == 0 and shown["result"] == 1, field_id
    assert not opened.errors, f"console errors: {opened.errors}"


def test_seven_billion_in_any_field_is_read_or_refused_at_once(opened):
    """The reader's review: 7B typed into the gradient size (MiB) froze the tab for 3.5 s, then blanked the output."""
    page = opened.pages["en"]
    page.select_option("#mem-layout", "fsdpTrue")
    for field_id in text_fields(page):
        good = page.input_value(f"#{field_id}")
        shown = type_into(page, field_id, "7B")
        assert shown["ms"] < 200, (field_id, shown)
        assert bool(shown["problem"]) != bool(shown["result"]), (field_id, shown)  # a result, or why there is none
        type_into(page, field_id, good)
    fill(page, step_grad=1024, step_first=1, step_embed=0)
    shown = type_into(page, "step-bucket", "0.000001")  # a valid cap that would make a billion buckets
    assert "buckets" in shown["problem"] and shown["ms"] < 200
    fill(page, step_bucket=25)
    assert not opened.errors, f"console errors: {opened.errors}"


def test_fields_take_their_own_unit_and_refuse_others(page):
    for field_id, text in OWN_UNITS.items():
        good = page.input_value(f"#{field_id}")
        page.fill(f"#{field_id}", text)
        assert not page.locator(f"#{field_id}-problem").is_visible(), (field_id, text)
        assert page.locator("#step-output table").count() == 1
        page.fill(
            f"#{field_id}",
            text.replace("MiB", "GB").replace("ms", "s").replace("%", "x").replace("GB/s", "Gb/s").replace("µs", "ms"),
        )
        assert page.locator(f"#{field_id}-problem").is_visible(), field_id
        page.fill(f"#{field_id}", good)
    fill(page, mem_params="1.5e9", mem_dp="8", mem_seq="4k")  # suffixes: k, M, B
    assert number(page, "#mem-weights", "data-bytes") > 0
    fill(page, mem_seq=4096)


# ---- both languages ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGS)
def test_calculators_load_in_each_language(opened, lang):
    page = opened.pages[lang]
    assert page.get_attribute("html", "lang") == lang
    for field, label in LABELS[lang].items():
        assert page.inner_text(f"label[for={field}]") == label
    for output in ("#mem-weights", "#step-overlap", "#tput-mfu", "#launch-script"):
        assert page.locator(output).count() == 1, f"{output} missing"
    fill(page, mem_params="seven")
    assert LABELS[lang]["mem-params"] in page.inner_text("#mem-output .calc-error")
    fill(page, mem_params="7B")
    fill(page, mem_dp="-1")  # the reason beside the field, in the page's language
    want = {"ko": "음수", "en": "negative"}[lang]
    assert want in page.inner_text("#mem-dp-problem")
    fill(page, mem_dp=8)
    assert not opened.outside, f"requests leaving 127.0.0.1: {opened.outside}"
    assert not opened.errors, f"console errors: {opened.errors}"
