"""Reproducer: a gloo program that exits while gloo's worker threads are alive can abort at exit.

`python tests/repro/gloo_exit_abort.py --runs 40` launches 2-rank torchrun jobs that all-reduce once, wait, and exit,
in three ways, and counts the runs that died with SIGABRT ("terminate called without an active exception"):
  then       a Python .then() callback on the future (what DDP's allreduce_hook does), no destroy_process_group()
  plain      no callback, no destroy_process_group()
  destroyed  no callback, destroy_process_group() frees the group, whose destructor joins gloo's threads

Why: gloo's worker thread (pt_gloo_runloop) completes a collective's future, which wakes the main thread, and only
then lets go of what the work held: the Python callback, or the input tensors, whose Python objects need the GIL to
be released. If the main thread has started interpreter shutdown by then, CPython ends the worker with
pthread_exit, and the forced unwind through a noexcept destructor calls std::terminate. Native stacks (torch 2.14.1):
  then:  ProcessGroupGloo::runLoop > AsyncWork::finishWorkGloo > returnFutureWithOutput > Future::markCompleted >
         ~PythonFunctionGuard > gil_scoped_acquire > PyEval_AcquireThread > pthread_exit > std::terminate
  plain: ProcessGroupGloo::runLoop > ~AsyncAllreduceWork > ~AsyncWork > ~vector<Tensor> >
         TensorImpl::decref_pyobject > PyInterpreter decref > PyEval_AcquireThread > pthread_exit > std::terminate
Upstream: https://github.com/pytorch/pytorch/issues/190489 (this crash), #38228 (the pthread_exit mechanism).
Not a pytest test: it fails by chance, which is exactly what it measures.
"""

import argparse
import os
import subprocess
import sys

MODES = ("then", "plain", "destroyed")


def rank_program(mode: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    future = dist.all_reduce(torch.ones(4), async_op=True).get_future()
    if mode == "then":
        future = future.then(lambda f: f.value()[0])  # what DDP's allreduce_hook does
    future.wait()
    if mode == "destroyed":
        dist.destroy_process_group()  # frees the group: its destructor joins gloo's threads, GIL released
    # "then" and "plain" skip it: like a program whose group is still referenced (a live DDP model, or
    # torch._dynamo imported after init_process_group, as DDP's constructor does), where it would not join them


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rank-mode", choices=MODES)
    args = parser.parse_args()
    if args.rank_mode:
        rank_program(args.rank_mode)
        return
    for mode in MODES:
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
