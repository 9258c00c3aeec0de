"""Reproducer: a rank that leaves a gloo group before any collective can break a peer that is still connecting.

`python tests/repro/gloo_init_race.py --runs 50 --parallel 3` launches 2-rank torchrun jobs, `--parallel` at a time
(the load makes the race likelier), in two ways, and counts the runs in which a rank died in gloo's connectFullMesh
with "Connection closed by peer":
  bare        init_process_group(), then destroy_process_group() and exit at once
  collective  one all_reduce between the two: no rank leaves before every rank is connected

Why: init_process_group() and new_group() return as soon as this rank's connections are up; there is no barrier at
the end unless TORCH_DIST_INIT_BARRIER=1 (_is_barrier_after_init in torch/distributed/distributed_c10d.py).
Measured on torch 2.14.1, 2 cores, 3 at a time: bare 14 of 150 runs, collective 0 of 300 (see the debugging page).
Not a pytest test: it fails by chance, which is exactly what it measures.
"""

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

MODES = ("bare", "collective")


def rank_program(mode: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if mode == "collective":
        dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()


def broke(mode: str) -> bool:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__]
    run = subprocess.run([*cmd, "--rank-mode", mode], capture_output=True, text=True, timeout=120, env=os.environ)
    return "Connection closed by peer" in run.stdout + run.stderr


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--rank-mode", choices=MODES)
    args = parser.parse_args()
    if args.rank_mode:
        rank_program(args.rank_mode)
        return
    for mode in MODES:
        with ThreadPoolExecutor(args.parallel) as pool:
            failed = sum(pool.map(broke, [mode] * args.runs))
        print(f"{mode}: {failed}/{args.runs} runs broke in connectFullMesh")


if __name__ == "__main__":
    main()
