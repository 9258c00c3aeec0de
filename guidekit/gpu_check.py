"""`make gpu-check`: everything a GPU machine can prove, in one command, gathered in one folder to commit.

1. every program as a test (`pytest snippets --record-output`): NCCL on CUDA where every rank gets its own GPU, gloo on
   CPU where not; GPU-marked programs run; recordings land in recordings/cuda/ and the manifest's `cuda` entries;
2. the benchmark's full sweep (single GPU, DataParallel, DDP at every world size the GPUs allow, the all-reduce sweep);
3. the pytest report, nvidia-smi and the environment, beside them.

    python -m guidekit.gpu_check --out DIR          (on the GPU machine; make gpu-check OUT=DIR)
    python -m guidekit.gpu_check --out DIR --dry-run (anywhere: the same steps, tiny benchmark, nothing recorded)
    python -m guidekit.gpu_check --out DIR --dry-run --programs snippets/why snippets/ddp  (a few programs only)

Everything it writes is under DIR: `recordings/` (a copy of the tree to commit), `benchmark/<gpu>.json|.txt`,
`pytest.log`, `nvidia-smi.txt`, `summary.json`. It returns non-zero when a step failed, after finishing the others.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from guidekit import ROOT, outputs
from guidekit.machine import cuda_devices, platform

BENCHMARK = ROOT / "snippets" / "benchmark" / "ddp_benchmark.py"


def run(cmd: list[str], log: Path, timeout: float) -> dict:
    """Run a step, its output into `log`; what it took and how it ended."""
    started = time.monotonic()
    with log.open("w") as out:
        try:
            code = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    return {"command": " ".join(cmd), "exit": code, "seconds": round(time.monotonic() - started, 1), "log": log.name}


def gpu_label() -> str:
    if not cuda_devices():
        return "cpu"
    import torch

    name = torch.cuda.get_device_name(0)
    return re.sub(r"[^a-z0-9]+", "-", f"{cuda_devices()}x {name}".lower()).strip("-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the folder to gather everything in")
    parser.add_argument("--dry-run", action="store_true", help="tiny benchmark, outputs neither recorded nor compared")
    parser.add_argument("--timeout", type=float, default=420, help="seconds for the programs (default 420)")
    parser.add_argument(
        "--programs", nargs="+", default=["snippets"], help="what pytest runs (default: snippets, every program)"
    )
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    smi = shutil.which("nvidia-smi")
    (out / "nvidia-smi.txt").write_text(
        subprocess.run([smi], capture_output=True, text=True).stdout if smi else "no nvidia-smi on this machine\n"
    )
    steps = {}
    record = ["--no-output-check"] if args.dry_run else ["--record-output"]
    # programs that use GPUs run one at a time (guidekit/schedule.py), the ones on CPUs beside them: a process of a
    # worker for every three cores (a CPU program's ranks and launcher keep about three busy)
    workers = str(max(3, (os.cpu_count() or 1) // 3))
    steps["programs"] = run(
        [sys.executable, "-m", "pytest", *args.programs, "-n", workers, "-p", "no:cacheprovider", "-rs", "-q", *record],
        out / "pytest.log",
        args.timeout,
    )
    label = gpu_label()
    bench = out / "benchmark" / f"{label}.json"
    bench.parent.mkdir(exist_ok=True)
    full = [] if args.dry_run else ["--full"]
    steps["benchmark"] = run(
        [sys.executable, str(BENCHMARK), *full, "--machine", label, "--out", str(bench)], out / "benchmark.log", 300
    )
    if not args.dry_run:  # the recordings this machine made, as a tree to copy over the repository's
        shutil.copytree(ROOT / outputs.OUTPUTS / platform(), out / "recordings" / platform(), dirs_exist_ok=True)
        shutil.copy2(ROOT / outputs.OUTPUTS / outputs.MANIFEST, out / "recordings" / outputs.MANIFEST)
    summary = {"platform": platform(), "gpus": cuda_devices(), "label": label, "dry_run": args.dry_run, "steps": steps}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0 if all(step["exit"] == 0 for step in steps.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
