"""Passed, then aborted (or hung) at exit: let go of the
DDP model, then destroy_process_group() frees the group."""
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


def held_group_outlives_destroy() -> tuple[int, int, int]:
    """destroy_process_group(g) joins gloo's threads
    only if it drops the last reference to g."""
    before = threads()
    sub = dist.new_group()  # a second gloo group, with threads of its own
    started = threads() - before
    # new_group() has no barrier: a rank leaving
    # early breaks a peer still connecting
    dist.barrier(group=sub)
    # `sub` still holds it, as a DDP model or a DeviceMesh would
    dist.destroy_process_group(sub)
    kept = len(started & threads())
    # a plain Python reference lets go with
    # the GIL released; a DDP model does not
    del sub
    return len(started), kept, len(started & threads())


def main() -> None:
    before = threads()
    # this failure is gloo's: it runs on CPU on every machine
    dist.init_process_group("gloo")
    # started by the group: gloo's network loop and its workers
    gloo = threads() - before
    started, kept, joined = held_group_outlives_destroy()
    assert kept == started > 0 and joined == 0
    # --8<-- [start:teardown]
    model = DDP(nn.Linear(8, 8))
    train(model)
    # gloo: the threads init_process_group() started
    running = len(gloo & threads())
    # first: DDP holds the group, and must not be the one to drop it last
    del model
    # drops the last reference: joins gloo's threads, GIL released
    dist.destroy_process_group()
    left = len(gloo & threads())
    # --8<-- [end:teardown]
    # one rank prints: lines of ranks printing at once can mix mid-line
    if int(os.environ["RANK"]) == 0:
        print(
            f"rank 0: a held group: {started} threads, {kept} after "
            f"destroy, {joined} after del"
        )
        print(
            f"rank 0: gloo threads while training {running}, after del "
            f"model + destroy {left}"
        )
    assert running > 0
    assert left == 0  # no gloo thread is alive when the interpreter shuts down


if __name__ == "__main__":
    main()
