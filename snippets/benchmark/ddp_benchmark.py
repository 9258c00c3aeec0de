"""Time one device vs DataParallel vs DDP (world sizes
1..N) and an all-reduce sweep; fit latency and bandwidth,
and predict every DDP step from its measured parts."""
# launch: python snippets/benchmark/ddp_benchmark.py
# ranks: 2
# uses-gpus: all
# timeout: 150
# output-varies: ^(\{.*\})$
# output-varies: ^(  (?:single|DDP|DataParallel)\b.*)$
# output-varies: ^(\s+\d+\s+\d+\s+\d.*)$
# output-varies: ^(  world \d+: .*)$
#
# Default: a tiny run (seconds; the test). The real run, on GPUs (NCCL) or
# CPU ranks (gloo):
#   python snippets/benchmark/ddp_benchmark.py --full \
#     --out snippets/benchmark/results/cpu-2core.json

import argparse
import contextlib
import datetime
import io
import json
import math
import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import (
    noop_hook,
)
from torch.nn.parallel import DistributedDataParallel as DDP

TINY = dict(
    widths=[32, 128],
    depth=2,
    global_batch=16,
    warmup=1,
    steps=5,
    ar_max_bytes=1 << 18,
    max_world=2,
    cap_width=128,  # the bucket_cap_mb sweep: this model,
    caps=[0.02, 0.1],  # these caps (MiB), at the largest world
)
FULL = dict(
    widths=[128, 512, 1024, 2048],
    depth=4,
    global_batch=64,
    warmup=3,
    steps=20,
    ar_max_bytes=1 << 26,
    cap_width=512,
    caps=[0.5, 2, 25],
)


def make_model(width: int, depth: int) -> nn.Module:
    torch.manual_seed(0)  # every mode starts from the same weights
    layers = []
    for i in range(depth):
        layers += (
            [nn.Linear(width, width), nn.ReLU()]
            if i < depth - 1
            else [nn.Linear(width, width)]
        )
    return nn.Sequential(*layers)


def make_batch(
    step: int, width: int, global_batch: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same global batch for every mode: step -> (inputs, targets)."""
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(global_batch, width, generator=gen)
    return x, x.roll(1, dims=1).sin()


# --8<-- [start:timing]
PHASES = ("forward", "backward", "optimizer")


class StepTimer:
    """Wall time of each phase of each step: CUDA events on
    GPU (no sync inside the loop), perf_counter on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.steps = []  # per step: a mark at each phase boundary

    def mark(self, new_step: bool = False):
        if new_step:
            self.steps.append([])
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.steps[-1].append(event)
        else:
            self.steps[-1].append(time.perf_counter())

    def ms(self) -> dict[str, list[float]]:
        """Per phase, and for the whole step: ms per step."""
        if self.cuda:
            torch.cuda.synchronize()
            dt = lambda a, b: a.elapsed_time(b)  # noqa: E731
        else:
            dt = lambda a, b: (b - a) * 1e3  # noqa: E731
        out = {
            name: [dt(s[i], s[i + 1]) for s in self.steps]
            for i, name in enumerate(PHASES)
        }
        out["step"] = [dt(s[0], s[-1]) for s in self.steps]
        return out


def train(model, cfg, width, device, rank=0, world=1):
    """warmup + steps SGD steps on this rank's slice of the
    global batch; returns ms per step, whole and per phase."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    per_rank = cfg["global_batch"] // world
    timer = StepTimer(device)
    for step in range(cfg["warmup"] + cfg["steps"]):
        x, y = make_batch(step, width, cfg["global_batch"])
        x, y = (
            x[rank * per_rank : (rank + 1) * per_rank].to(device),
            y[rank * per_rank : (rank + 1) * per_rank].to(device),
        )
        if step == cfg["warmup"]:
            timer.steps.clear()
        timer.mark(new_step=True)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        timer.mark()
        # DDP all-reduces gradient buckets while backward runs,
        # and waits for all of them at its end
        loss.backward()
        timer.mark()
        optimizer.step()
        timer.mark()
    ms = timer.ms()
    names = [*PHASES, "step"]
    # on the group's device: NCCL all-reduces CUDA tensors only
    times = torch.tensor(
        [ms[k] for k in names], dtype=torch.float64, device=device
    )
    if world > 1:  # a step is as slow as its slowest rank
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return dict(zip(names, times.tolist()))


# --8<-- [end:timing]


def ring_factor(world: int) -> float:
    """Bytes each link carries in a ring all-reduce, per byte
    of the message: 2(n-1)/n (nccl-tests' busbw factor)."""
    return 2 * (world - 1) / world


def bench_allreduce(
    world: int, device: torch.device, max_bytes: int
) -> list[dict]:
    """nccl-tests style: algbw = bytes / time, busbw =
    algbw * ring_factor (comparable with the link rate)."""
    rows, size = [], 4096
    while size <= max_bytes:
        buf = torch.zeros(size // 4, device=device)
        iters = max(5, min(50, (1 << 24) // size))
        for _ in range(2):
            dist.all_reduce(buf)
        if device.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        if device.type == "cuda":
            torch.cuda.synchronize()
        sec = torch.tensor(
            (time.perf_counter() - start) / iters,
            dtype=torch.float64,
            device=device,
        )
        dist.all_reduce(sec, op=dist.ReduceOp.MAX)
        algbw = size / sec.item() / 1e9
        rows.append(
            dict(
                world_size=world,
                bytes=size,
                time_us=sec.item() * 1e6,
                algbw_gbs=algbw,
                busbw_gbs=algbw * ring_factor(world),
            )
        )
        size *= 2
    return rows


def peak_mem_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    # Linux: KiB; process peak so far
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().cpu() for p in model.parameters()])


def run_single_modes(cfg, width, device, tmp: Path) -> list[dict]:
    """World size 1 without DDP: the baseline, plus
    DataParallel (>= 2 GPUs) or all cores in one process (CPU)."""
    rows = []
    reset_peak(device)
    model = make_model(width, cfg["depth"]).to(device)
    rows.append(
        dict(
            mode="single",
            ms=train(model, cfg, width, device),
            mem=peak_mem_mib(device),
            threads=1,
        )
    )
    torch.save(flat_params(model), tmp / f"single-{width}.pt")
    if device.type == "cuda" and torch.cuda.device_count() >= 2:
        reset_peak(device)
        dp = nn.DataParallel(make_model(width, cfg["depth"]).to(device))
        rows.append(
            dict(
                mode="DataParallel",
                ms=train(dp, cfg, width, device),
                mem=peak_mem_mib(device),
                gpus=torch.cuda.device_count(),
                weights_match=bool(
                    torch.allclose(
                        flat_params(dp.module),
                        flat_params(model),
                        rtol=1e-4,
                        atol=1e-5,
                    )
                ),
            )
        )
    elif device.type == "cpu" and cfg["max_world"] > 1:
        # the same cores as the DDP ranks, as intra-op threads
        torch.set_num_threads(cfg["max_world"])
        model = make_model(width, cfg["depth"])
        rows.append(
            dict(
                mode="single",
                ms=train(model, cfg, width, device),
                mem=peak_mem_mib(device),
                threads=cfg["max_world"],
            )
        )
        torch.set_num_threads(1)
    return rows


def run_ddp(cfg, width, device, rank, world, tmp, cap=None, hook=None):
    """One DDP run: step and phase times, the buckets DDP
    built, and whether it trained the single-device weights."""
    ids = [device.index] if device.type == "cuda" else None
    reset_peak(device)
    model = DDP(
        make_model(width, cfg["depth"]).to(device),
        device_ids=ids,
        bucket_cap_mb=cap,  # None: the default, 25 MiB
    )
    if hook:
        model.register_comm_hook(None, hook)
    ms = train(model, cfg, width, device, rank, world)
    # private API: bytes per bucket, in all-reduce order
    info = model._get_ddp_logging_data()
    buckets = info.get("rebuilt_bucket_sizes") or info.get("bucket_sizes", "")
    single = torch.load(tmp / f"single-{width}.pt", weights_only=True)
    return dict(
        mode="DDP",
        width=width,
        bucket_cap_mb=cap,
        ms=ms,
        mem=peak_mem_mib(device),
        buckets=[int(b) for b in str(buckets).split(",") if b.strip()],
        weights_match=bool(
            torch.allclose(
                flat_params(model.module), single, rtol=1e-4, atol=1e-5
            )
        ),
    )


def measure(
    rank: int, world: int, cfg: dict, tmp: Path, device: torch.device
) -> dict:
    """This rank's figures at one world size;
    every DDP model lives and dies in here."""
    out = dict(
        world_size=world,
        backend=dist.get_backend(),
        device=str(device),
        runs=[],
        # world 1 too: DDP all-reduces there as well
        allreduce=bench_allreduce(world, device, cfg["ar_max_bytes"]),
    )
    for width in cfg["widths"]:
        if world == 1:
            out["runs"] += [
                dict(r, width=width)
                for r in run_single_modes(cfg, width, device, tmp)
            ]
        # Compute only: the same DDP step, all ranks busy at
        # once, with a comm hook that skips the all-reduce
        # (DDP's own copies into and out of buckets remain).
        compute = run_ddp(cfg, width, device, rank, world, tmp, hook=noop_hook)
        out["runs"].append(
            dict(
                run_ddp(cfg, width, device, rank, world, tmp),
                compute_ms=compute["ms"],
            )
        )
        if world == cfg["max_world"] and width == cfg["cap_width"]:
            out["runs"] += [
                dict(
                    run_ddp(cfg, width, device, rank, world, tmp, cap),
                    compute_ms=compute["ms"],
                )
                for cap in cfg["caps"]
            ]
    return out


def worker(rank: int, world: int, cfg: dict, tmp: str) -> None:
    tmp = Path(tmp)
    if torch.cuda.is_available() and torch.cuda.device_count() >= world:
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
        torch.set_num_threads(1)  # one thread per rank: ranks share the cores
    # A FileStore per world size: no port to pick,
    # no clash between the sequential launches.
    init = f"file://{tmp / f'store-{world}'}"
    dist.init_process_group(
        backend,
        init_method=init,
        rank=rank,
        world_size=world,
        device_id=device if backend == "nccl" else None,
    )
    try:
        out = measure(rank, world, cfg, tmp, device)
        if rank == 0:
            (tmp / f"world-{world}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


# --8<-- [start:model]
def fit_alpha_beta(allreduce: list[dict], world: int) -> dict:
    """Hockney's model of one all-reduce, time = alpha + beta *
    bytes, fitted to the sweep by least squares on the relative
    error (small messages weigh as much as large ones)."""
    # minimise sum(((alpha + beta * b) / t - 1) ** 2): with
    # u = 1/t and v = b/t, solve the 2x2 normal equations
    u = [1e6 / r["time_us"] for r in allreduce]
    v = [r["bytes"] * x for r, x in zip(allreduce, u)]
    uu, uv, vv = (
        sum(x * y for x, y in zip(*p)) for p in ((u, u), (u, v), (v, v))
    )
    det = uu * vv - uv * uv
    beta = (sum(v) * uu - sum(u) * uv) / det if world > 1 else 0.0  # s/B
    if beta <= 0:  # one rank (no byte crosses a link), or a
        # sweep too small to see the bandwidth: latency alone
        alpha, beta = sum(u) / uu, 0.0
    else:
        alpha = (sum(u) * vv - sum(v) * uv) / det  # s
    return dict(alpha_us=alpha * 1e6, beta_s_per_byte=beta)


def allreduce_ms(nbytes: int, fit: dict) -> float:
    return fit["alpha_us"] / 1e3 + fit["beta_s_per_byte"] * nbytes * 1e3


def predict(
    phases_ms: dict, buckets: list[int], fit: dict, overlap: bool
) -> float:
    """DDP step = forward + backward + optimizer, plus an
    all-reduce of alpha + beta * bytes for each gradient bucket.

    DDP starts a bucket's all-reduce from a backward hook once
    its gradients are ready, one after another, and waits for
    them all when backward ends: forward and the optimizer step
    hide nothing. overlap=True: a bucket is ready once backward
    has made the gradients up to its end (the last bucket, the
    first layers, when backward ends). overlap=False: nothing
    hides, as when gloo's threads need the cores that compute
    uses: the all-reduces run after backward.
    """
    total, done, free = sum(buckets), 0, 0.0  # ms after backward starts
    for size in buckets:  # in all-reduce order
        done += size
        ready = phases_ms["backward"] * (done / total if overlap else 1)
        free = max(ready, free) + allreduce_ms(size, fit)
    return (
        phases_ms["forward"]
        + max(phases_ms["backward"], free)
        + phases_ms["optimizer"]
    )


# --8<-- [end:model]


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def environment(label: str, world_sizes: list[int]) -> dict:
    cuda = torch.cuda.is_available()
    cpu_model = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else ""
    )
    return dict(
        machine=label,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        ),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        nccl=".".join(map(str, torch.cuda.nccl.version()))
        if cuda and dist.is_nccl_available()
        else None,
        gpus=[],  # gpu_names(), once the children are done
        cpu=cpu_model,
        cpu_count=os.cpu_count(),
        cpus_usable=len(os.sched_getaffinity(0)),
        threads_per_rank=1,
        python=platform.python_version(),
        os=platform.platform(),
        loadavg_start=os.getloadavg()[0],
        world_sizes=world_sizes,
    )


def gpu_names() -> list[str]:
    """Starts CUDA in this process: call it after the ranks
    have run, so no context of ours sits on GPU 0 beside them."""
    if not torch.cuda.is_available():
        return []
    return [
        torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
    ]


def fits_per_world(parts: list[dict]) -> list[dict]:
    """The alpha-beta fit of each world size's all-reduce
    sweep, the link rate it implies, and whether
    communication can overlap backward there."""
    fits = []
    for part in parts:
        n = part["world_size"]
        fit = fit_alpha_beta(part["allreduce"], n)
        # the link rate the fit implies, nccl-tests' busbw
        beta = fit["beta_s_per_byte"]
        busbw = ring_factor(n) / beta / 1e9 if beta else None
        # NCCL communicates on its own CUDA stream; gloo's threads
        # need the CPU cores that compute uses (a rank per core)
        overlap = part["backend"] == "nccl"
        fits.append(dict(fit, world_size=n, busbw_gbs=busbw, overlap=overlap))
    return fits


def summary_row(part: dict, run: dict, cfg: dict) -> dict:
    """One run's statistics: step time, phases,
    throughput and memory, with what it trained."""
    width, world = (
        run["width"],
        part["world_size"] if run["mode"] == "DDP" else 1,
    )
    params = cfg["depth"] * (width * width + width)
    gb = cfg["global_batch"]
    ms = run["ms"]["step"]
    row = dict(
        model=f"mlp {cfg['depth']}x{width}",
        width=width,
        params=params,
        grad_mib=params * 4 / 2**20,
        mode=run["mode"],
        backend=part["backend"] if run["mode"] == "DDP" else "-",
        device=part["device"],
        world_size=world,
        threads=run.get("threads", 1),
        gpus=run.get("gpus"),
        batch_per_rank=gb // world,
        global_batch=gb,
        step_ms=dict(
            median=statistics.median(ms),
            p10=pct(ms, 0.1),
            p90=pct(ms, 0.9),
        ),
        phases_ms={k: statistics.median(run["ms"][k]) for k in PHASES},
        peak_mem_mib=run["mem"],
        weights_match=run.get("weights_match"),
    )
    row["samples_per_s"] = gb / row["step_ms"]["median"] * 1e3
    return row


def add_prediction(row: dict, run: dict, fit: dict) -> None:
    """A DDP row: the model's step time, from the compute-only
    run's phases, the buckets DDP built and the fit."""
    compute = {k: statistics.median(run["compute_ms"][k]) for k in PHASES}
    serial, overlapped = (
        predict(compute, run["buckets"], fit, overlap)
        for overlap in (False, True)
    )
    model = overlapped if fit["overlap"] else serial
    row.update(
        bucket_cap_mb=run["bucket_cap_mb"],
        compute_ms=sum(compute.values()),
        compute_phases_ms=compute,
        buckets=run["buckets"],
        predicted=dict(
            comm_ms=sum(allreduce_ms(b, fit) for b in run["buckets"]),
            no_overlap_ms=serial,
            overlap_ms=overlapped,
            model_ms=model,
        ),
        model_error=model / row["step_ms"]["median"] - 1,
    )


def add_speedups(rows: list[dict]) -> None:
    """Speedup over the same model on one device and one
    thread, and efficiency: the speedup per worker."""
    for row in rows:
        base = next(
            r
            for r in rows
            if r["width"] == row["width"]
            and r["mode"] == "single"
            and r["threads"] == 1
        )
        row["speedup"] = base["step_ms"]["median"] / row["step_ms"]["median"]
        workers = (
            row["world_size"]
            if row["mode"] == "DDP"
            else (row["gpus"] or row["threads"])
        )
        row["efficiency"] = row["speedup"] / workers


def summarize(parts: list[dict], cfg: dict) -> tuple[list[dict], list]:
    """One row per (model, mode, world size, bucket cap) with
    the statistics, and the model's prediction for DDP rows;
    the alpha-beta fit per world size."""
    fits = fits_per_world(parts)
    fit_of = {f["world_size"]: f for f in fits}
    rows = []
    for part in parts:
        for run in part["runs"]:
            row = summary_row(part, run, cfg)
            if run["mode"] == "DDP":
                add_prediction(row, run, fit_of[row["world_size"]])
            rows.append(row)
    add_speedups(rows)
    return rows, fits


def print_table(result: dict) -> None:
    cols = (
        "mode backend world batch/rank|global step-ms-median[p10-p90] "
        "samples/s speedup eff grad-MiB buckets "
        "compute-ms(fwd+bwd+opt) pred-ms error peak-MiB"
    )
    for width in result["config"]["widths"]:
        rows = [r for r in result["runs"] if r["width"] == width]
        print(
            f"\n{rows[0]['model']}: {rows[0]['params'] / 1e6:.2f} M "
            f"params, gradients {rows[0]['grad_mib']:.2f} MiB"
        )
        print("  " + cols)
        for r in rows:
            s, p = r["step_ms"], r.get("predicted")
            mode = r["mode"] + (
                f" ({r['threads']} thr)"
                if r["mode"] == "single"
                else f" (cap {r['bucket_cap_mb']})"
                if r.get("bucket_cap_mb")
                else ""
            )
            pred = f"{p['model_ms']:.2f} {r['model_error']:+5.0%}" if p else "-"
            comp = (
                "+".join(f"{v:.2f}" for v in r["compute_phases_ms"].values())
                if p
                else "-"
            )
            print(
                f"  {mode:<16} {r['backend']:<5} {r['world_size']:>2} "
                f"{r['batch_per_rank']:>4}|{r['global_batch']:<4}"
                f" {s['median']:8.2f} [{s['p10']:.2f}-{s['p90']:.2f}] "
                f"{r['samples_per_s']:9.0f}"
                f" {r['speedup']:5.2f}x {r['efficiency']:5.0%} "
                f"{r['grad_mib']:7.2f} {len(r.get('buckets', [])):>2} "
                f"{comp:>20} {pred:>14}"
                f" {r['peak_mem_mib']:7.0f}"
            )
    if result["skipped"]:
        print("\nskipped: " + "; ".join(result["skipped"]))
    print(
        "\nall-reduce (nccl-tests definitions): world, bytes, time us, "
        "algbw GB/s, busbw GB/s"
    )
    for a in result["allreduce"]:
        print(
            f"  {a['world_size']:>2} {a['bytes']:>10} "
            f"{a['time_us']:10.1f} {a['algbw_gbs']:7.3f} "
            f"{a['busbw_gbs']:7.3f}"
        )
    print("\nfit per world size: time = alpha + beta * bytes")
    for f in result["fits"]:
        link = f", busbw {f['busbw_gbs']:.3f} GB/s" if f["busbw_gbs"] else ""
        print(
            f"  world {f['world_size']}: alpha {f['alpha_us']:.1f} us, "
            f"beta {f['beta_s_per_byte'] * 1e9:.4f} ns/byte{link}; "
            f"overlap with backward: {f['overlap']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--full",
        action="store_true",
        help="the real sweep (default: a tiny test run)",
    )
    parser.add_argument(
        "--max-world",
        type=int,
        help="largest world size (default: GPUs, else usable CPU cores)",
    )
    parser.add_argument(
        "--machine",
        default="",
        help="a description of this machine, stored in the result",
    )
    parser.add_argument(
        "--out", type=Path, help="write the result as JSON here"
    )
    args = parser.parse_args()

    cfg = dict(FULL if args.full else TINY)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cfg["max_world"] = (
        args.max_world
        or cfg.get("max_world")
        or gpus
        or len(os.sched_getaffinity(0))
    )
    if gpus:
        cfg["max_world"] = min(cfg["max_world"], gpus)
    result = run(cfg, args.machine)
    with contextlib.redirect_stdout(io.StringIO()) as text:
        print_table(result)
    print(json.dumps(result["env"]) + text.getvalue())
    if args.out:  # the JSON, and the table as printed (for pages)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".txt").write_text(text.getvalue().lstrip("\n"))
        print(f"\nwrote {args.out} and {args.out.with_suffix('.txt')}")
    check(result)


def run(cfg: dict, machine: str = "") -> dict:
    """Every world size, one launch each; the result file."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    world_sizes = list(range(1, cfg["max_world"] + 1))
    env = environment(machine, world_sizes)
    skipped = (
        []
        if gpus >= 2
        else [
            "DataParallel: needs >= 2 GPUs (without GPUs nn.DataParallel "
            "just calls the module)"
        ]
    )
    with tempfile.TemporaryDirectory() as tmp:
        parts = []
        # one launch per world size; world 1 also runs the single-device modes
        for world in world_sizes:
            if world == 1 and not gpus:
                worker(0, 1, cfg, tmp)  # in this process: one start-up less
            else:
                # with GPUs, world 1 too: CUDA never starts in this
                # process, so no context of ours holds GPU memory
                mp.spawn(
                    worker, args=(world, cfg, tmp), nprocs=world, join=True
                )
            parts.append(
                json.loads((Path(tmp) / f"world-{world}.json").read_text())
            )
    env["loadavg_end"] = os.getloadavg()[0]
    env["gpus"] = gpu_names()
    runs, fits = summarize(parts, cfg)
    return dict(
        env=env,
        config=cfg,
        skipped=skipped,
        runs=runs,
        allreduce=[a for p in parts for a in p["allreduce"]],
        fits=fits,
    )


def check(result: dict) -> None:
    """What this program guarantees (never a speedup or a
    prediction's accuracy: those depend on the machine)."""
    cfg, runs = result["config"], result["runs"]
    world_sizes = result["env"]["world_sizes"]
    ddp = [r for r in runs if r["mode"] == "DDP"]
    assert {
        (r["width"], r["world_size"]) for r in ddp if not r["bucket_cap_mb"]
    } == {(w, n) for w in cfg["widths"] for n in world_sizes}, (
        "a DDP run is missing"
    )
    assert sorted(r["bucket_cap_mb"] for r in ddp if r["bucket_cap_mb"]) == (
        sorted(cfg["caps"])
    ), "a bucket_cap_mb run is missing"
    assert all(
        r["weights_match"] for r in runs if r["weights_match"] is not None
    ), (
        "DDP/DataParallel weights differ from the single-device run on "
        "the same data"
    )
    assert all(
        r["step_ms"]["p10"] <= r["step_ms"]["median"] <= r["step_ms"]["p90"]
        for r in runs
    )
    assert all(
        len(r["buckets"]) >= 1
        and sum(r["buckets"]) == r["params"] * 4
        and math.isfinite(r["model_error"])
        for r in ddp
    )
    assert [f["world_size"] for f in result["fits"]] == world_sizes
    assert all(a["algbw_gbs"] > 0 for a in result["allreduce"])
    print(
        f"OK: DDP at world sizes {world_sizes} trained the same weights "
        "as one device, for every model size and bucket cap"
    )


if __name__ == "__main__":
    main()
