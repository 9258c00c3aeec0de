"""Time one device vs DataParallel vs DDP (world sizes
1..N), all-reduce bandwidth, and a performance model."""
# launch: python snippets/benchmark/ddp_benchmark.py
# ranks: 2
# timeout: 150
# output-varies: ^(\{.*\})$
# output-varies: ^(  (?:single|DDP|DP) .*)$
# output-varies: ^(\s+\d+\s+\d+\s+\d.*)$
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
from torch.nn.parallel import DistributedDataParallel as DDP

TINY = dict(
    widths=[32, 128],
    depth=2,
    global_batch=16,
    warmup=1,
    steps=5,
    ar_max_bytes=1 << 18,
    max_world=2,
)
FULL = dict(
    widths=[128, 512, 1024, 2048],
    depth=4,
    global_batch=64,
    warmup=3,
    steps=20,
    ar_max_bytes=1 << 26,
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
class StepTimer:
    """Wall time per step: CUDA events on GPU (no
    sync inside the loop), perf_counter on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks = []

    def start(self):
        self.marks.append([self._mark(), None])

    def stop(self):
        self.marks[-1][1] = self._mark()

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in self.marks]
        return [(b - a) * 1e3 for a, b in self.marks]


def train(model, cfg, width, device, rank=0, world=1, sync=True):
    """warmup + steps SGD steps on this rank's slice
    of the global batch; returns timed step ms."""
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
            timer.marks.clear()
        timer.start()
        optimizer.zero_grad(set_to_none=True)
        # no_sync: DDP skips the all-reduce
        with contextlib.nullcontext() if sync else model.no_sync():
            loss = nn.functional.mse_loss(model(x), y)
            # DDP all-reduces gradient buckets while backward runs
            loss.backward()
        optimizer.step()
        timer.stop()
    times = torch.tensor(timer.ms(), dtype=torch.float64)
    if world > 1:  # a step is as slow as its slowest rank
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return times.tolist()


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
            (time.perf_counter() - start) / iters, dtype=torch.float64
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
        allreduce=[],
    )
    if world > 1:
        out["allreduce"] = bench_allreduce(world, device, cfg["ar_max_bytes"])
    for width in cfg["widths"]:
        if world == 1:
            out["runs"] += [
                dict(r, width=width)
                for r in run_single_modes(cfg, width, device, tmp)
            ]
        ids = [device.index] if device.type == "cuda" else None
        # Compute only: the same DDP step under no_sync,
        # all ranks busy at once (contention included).
        compute = train(
            DDP(make_model(width, cfg["depth"]).to(device), device_ids=ids),
            cfg,
            width,
            device,
            rank,
            world,
            sync=False,
        )
        reset_peak(device)
        model = DDP(make_model(width, cfg["depth"]).to(device), device_ids=ids)
        ms = train(model, cfg, width, device, rank, world)
        # private API: bytes per bucket, in all-reduce order
        info = model._get_ddp_logging_data()
        buckets = info.get("rebuilt_bucket_sizes") or info.get(
            "bucket_sizes", ""
        )
        single = torch.load(tmp / f"single-{width}.pt", weights_only=True)
        out["runs"].append(
            dict(
                mode="DDP",
                width=width,
                ms=ms,
                compute_ms=compute,
                mem=peak_mem_mib(device),
                buckets=[int(b) for b in str(buckets).split(",") if b.strip()],
                weights_match=bool(
                    torch.allclose(
                        flat_params(model.module), single, rtol=1e-4, atol=1e-5
                    )
                ),
            )
        )
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
def busbw_at(allreduce: list[dict], nbytes: int) -> float:
    """Measured busbw (GB/s) at a message size:
    log-linear interpolation, clamped at the ends."""
    pts = sorted((r["bytes"], r["busbw_gbs"]) for r in allreduce)
    if nbytes <= pts[0][0]:
        return pts[0][1]
    for (b0, w0), (b1, w1) in zip(pts, pts[1:]):
        if nbytes <= b1:
            f = math.log(nbytes / b0) / math.log(b1 / b0)
            return w0 + (w1 - w0) * f
    return pts[-1][1]


def predict(
    compute_ms: float, buckets: list[int], world: int, allreduce: list[dict]
) -> dict:
    """Step = compute + all-reduce of every gradient bucket at measured busbw.

    no overlap: compute + sum(bucket times)
                (gloo on shared CPU cores behaves like this)
    overlap:    buckets run during backward; only the last bucket
                (the first layers) is exposed.
    """
    if world == 1 or not buckets:
        return dict(
            comm_ms=0.0, no_overlap_ms=compute_ms, overlap_ms=compute_ms
        )
    t = [
        ring_factor(world) * b / (busbw_at(allreduce, b) * 1e9) * 1e3
        for b in buckets
    ]
    comm = sum(t)
    return dict(
        comm_ms=comm,
        no_overlap_ms=compute_ms + comm,
        overlap_ms=max(compute_ms, comm - t[-1]) + t[-1],
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
        gpus=[
            torch.cuda.get_device_name(i)
            for i in range(torch.cuda.device_count())
        ]
        if cuda
        else [],
        cpu=cpu_model,
        cpu_count=os.cpu_count(),
        cpus_usable=len(os.sched_getaffinity(0)),
        threads_per_rank=1,
        python=platform.python_version(),
        os=platform.platform(),
        loadavg_start=os.getloadavg()[0],
        world_sizes=world_sizes,
    )


def summarize(parts: list[dict], cfg: dict) -> list[dict]:
    """One row per (model, mode, world size) with
    the statistics and the model's prediction."""
    rows = []
    allreduce = {p["world_size"]: p["allreduce"] for p in parts}
    for part in parts:
        for run in part["runs"]:
            width, world = (
                run["width"],
                part["world_size"] if run["mode"] == "DDP" else 1,
            )
            params = cfg["depth"] * (width * width + width)
            gb = cfg["global_batch"]
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
                    median=statistics.median(run["ms"]),
                    p10=pct(run["ms"], 0.1),
                    p90=pct(run["ms"], 0.9),
                ),
                peak_mem_mib=run["mem"],
                weights_match=run.get("weights_match"),
            )
            row["samples_per_s"] = gb / row["step_ms"]["median"] * 1e3
            if run["mode"] == "DDP":
                compute = statistics.median(run["compute_ms"])
                row.update(
                    compute_ms=compute,
                    buckets=run["buckets"],
                    predicted=predict(
                        compute, run["buckets"], world, allreduce.get(world, [])
                    ),
                )
            rows.append(row)
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
    return rows


def print_table(result: dict) -> None:
    cols = (
        "mode backend world batch/rank|global step-ms-median[p10-p90] "
        "samples/s speedup eff grad-MiB "
        "compute-ms pred-ms(no-ovl|ovl) peak-MiB"
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
                f" ({r['threads']} thr)" if r["mode"] == "single" else ""
            )
            pred = (
                f"{p['no_overlap_ms']:.2f}|{p['overlap_ms']:.2f}" if p else "-"
            )
            comp = f"{r['compute_ms']:.2f}" if "compute_ms" in r else "-"
            print(
                f"  {mode:<16} {r['backend']:<5} {r['world_size']:>2} "
                f"{r['batch_per_rank']:>4}|{r['global_batch']:<4}"
                f" {s['median']:8.2f} [{s['p10']:.2f}-{s['p90']:.2f}] "
                f"{r['samples_per_s']:9.0f}"
                f" {r['speedup']:5.2f}x {r['efficiency']:5.0%} "
                f"{r['grad_mib']:7.2f} {comp:>8} {pred:>15}"
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
    world_sizes = list(range(1, cfg["max_world"] + 1))
    env = environment(args.machine, world_sizes)
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
            if world == 1:
                worker(0, 1, cfg, tmp)  # in this process: one start-up less
            else:
                mp.spawn(
                    worker, args=(world, cfg, tmp), nprocs=world, join=True
                )
            parts.append(
                json.loads((Path(tmp) / f"world-{world}.json").read_text())
            )
    env["loadavg_end"] = os.getloadavg()[0]
    result = dict(
        env=env,
        config=cfg,
        skipped=skipped,
        runs=summarize(parts, cfg),
        allreduce=[a for p in parts for a in p["allreduce"]],
    )
    with contextlib.redirect_stdout(io.StringIO()) as text:
        print_table(result)
    print(json.dumps(env) + text.getvalue())
    if args.out:  # the JSON, and the table as printed (for pages)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".txt").write_text(text.getvalue().lstrip("\n"))
        print(f"\nwrote {args.out} and {args.out.with_suffix('.txt')}")

    # What this program guarantees (never a
    # speedup: that depends on the machine).
    runs = result["runs"]
    assert {
        (r["width"], r["world_size"]) for r in runs if r["mode"] == "DDP"
    } == {(w, n) for w in cfg["widths"] for n in world_sizes}, (
        "a DDP run is missing"
    )
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
        len(r["buckets"]) >= 1 and sum(r["buckets"]) == r["params"] * 4
        for r in runs
        if r["mode"] == "DDP"
    )
    assert all(a["busbw_gbs"] > 0 for a in result["allreduce"]) and (
        len(world_sizes) < 2 or result["allreduce"]
    )
    print(
        f"OK: DDP at world sizes {world_sizes} trained the same weights "
        "as one device, for every model size"
    )


if __name__ == "__main__":
    main()
