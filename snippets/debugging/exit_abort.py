"""Passed, then aborted at exit: gloo's threads outlive destroy_process_group() while anything holds the group."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/debugging/exit_abort.py

import os
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group, not later: see the page
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


# --8<-- [start:threads]
def threads() -> set[int]:
    """The ids of this process's threads (Linux)."""
    return {int(task.name) for task in Path("/proc/self/task").iterdir()}


# --8<-- [end:threads]


def train(model: nn.Module) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(16, 8)).square().mean().backward()
        optimizer.step()


def main() -> None:
    # --8<-- [start:teardown]
    before = threads()
    dist.init_process_group("gloo")  # this failure is gloo's: it runs on CPU on every machine
    gloo = threads() - before  # started by the group: gloo's network loop and its workers
    model = DDP(nn.Linear(8, 8))
    train(model)
    running = len(gloo & threads())
    dist.destroy_process_group()
    kept = len(gloo & threads())  # the DDP model still references the group: nothing was joined
    del model  # the last reference: the group's destructor joins gloo's threads
    left = len(gloo & threads())
    # --8<-- [end:teardown]
    rank = int(os.environ["RANK"])
    print(f"rank {rank}: gloo threads while training {running}, after destroy {kept}, after del model {left}")
    assert running > 0 and kept == running
    assert left == 0  # no gloo thread is alive when the interpreter shuts down


if __name__ == "__main__":
    main()
