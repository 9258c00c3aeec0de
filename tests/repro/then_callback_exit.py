"""Reproducer: a Python .then() callback on a gloo future can abort the process at exit.

`python tests/repro/then_callback_exit.py --runs 40` launches 2-rank torchrun jobs that each all-reduce once, wait on
the future and exit, with and without a Python `.then()` callback, and counts the runs that died with SIGABRT
("terminate called without an active exception").

Why: gloo's worker thread (pt_gloo_runloop) completes the chained future, which wakes the main thread, and only then
destroys the Python callback, which needs the GIL. If the main thread has reached interpreter shutdown by then,
CPython ends the worker with pthread_exit; the forced unwind meets a noexcept destructor and calls std::terminate.
Native stack (torch 2.14.1): ProcessGroupGloo::runLoop > AsyncWork::finishWorkGloo > Future::markCompleted >
~PythonFunctionGuard > gil_scoped_acquire > PyEval_AcquireThread > pthread_exit > std::terminate.
Upstream: https://github.com/pytorch/pytorch/issues/38228 (mechanism), .../190489 (same crash from gloo's threads).
Not a pytest test: it fails by chance, which is exactly what it measures.
"""

import argparse
import os
import subprocess
import sys


def rank_program(chain: bool) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    future = dist.all_reduce(torch.ones(4), async_op=True).get_future()
    if chain:
        future = future.then(lambda f: f.value()[0])  # what DDP's allreduce_hook does
    future.wait()
    # no destroy_process_group(): with DDP it would not join gloo's threads either (DDP keeps the group alive)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rank-mode", choices=["then", "plain"])
    args = parser.parse_args()
    if args.rank_mode:
        rank_program(args.rank_mode == "then")
        return
    for mode in ("then", "plain"):
        aborted = 0
        for _ in range(args.runs):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__]
            run = subprocess.run(
                [*cmd, "--rank-mode", mode], capture_output=True, text=True, timeout=120, env=os.environ
            )
            aborted += "terminate called without an active exception" in run.stderr
        print(f"{mode}: {aborted}/{args.runs} runs aborted at exit")


if __name__ == "__main__":
    main()
