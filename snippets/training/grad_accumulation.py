"""Gradient accumulation under DDP: no_sync() around
forward and backward, one all-reduce per optimizer step."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/training/grad_accumulation.py

import copy
import os
from collections.abc import Callable

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile


# same as snippets/ddp/train_torchrun.py:setup
def setup() -> torch.device:
    """Join the process group: NCCL and one GPU per rank, else gloo on CPU."""
    local_rank = int(os.environ["LOCAL_RANK"])  # set by torchrun
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", local_rank)
        # before init: else every rank also allocates on GPU 0
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return device


# --8<-- [start:count]
def count_allreduces(step: Callable[[], None]) -> int:
    """Run `step` under the profiler; every all-reduce DDP
    launches is one c10d::allreduce_ op, on any backend."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sum(
        row.count
        for row in prof.key_averages()
        if row.key == "c10d::allreduce_"
    )


# --8<-- [end:count]


# --8<-- [start:accumulate]
def accumulate(
    model: DDP, micro_batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> None:
    """Backward over all micro-batches; gradients
    are all-reduced only after the last one."""
    *early, last = micro_batches
    for inputs, targets in early:
        # forward AND backward inside: DDP arms its all-reduce in forward
        with model.no_sync():
            loss = nn.functional.mse_loss(model(inputs), targets) / len(
                micro_batches
            )
            loss.backward()  # gradients add up locally in .grad
    inputs, targets = last
    loss = nn.functional.mse_loss(model(inputs), targets) / len(micro_batches)
    loss.backward()  # one all-reduce of the summed gradients


# --8<-- [end:accumulate]


def forward_outside(
    model: DDP, micro_batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> None:
    """The mistake: only backward inside no_sync()."""
    for inputs, targets in micro_batches:
        loss = nn.functional.mse_loss(model(inputs), targets) / len(
            micro_batches
        )
        with model.no_sync():
            loss.backward()


def grads(module: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.parameters()]


# --8<-- [start:main]
def compare(device: torch.device) -> None:
    """Accumulate with no_sync() the right way and the
    wrong way; check gradients and all-reduce counts."""
    rank, world, steps = dist.get_rank(), dist.get_world_size(), 4
    torch.manual_seed(0)  # same model and same global batch on every rank
    net = nn.Sequential(
        nn.Linear(16, 64),
        nn.Tanh(),
        nn.Linear(64, 4),
    ).to(device)
    # global batch: 2 ranks x 4 micro-batches x 8; drawn
    # on the CPU, then moved: the same on any GPU
    x = torch.randn(world * steps * 8, 16).to(device)
    y = torch.randn(len(x), 4).to(device)

    # one process, one step over the whole global batch
    reference = copy.deepcopy(net)
    nn.functional.mse_loss(reference(x), y).backward()

    model = DDP(
        net, device_ids=[device.index] if device.type == "cuda" else None
    )
    # this rank's micro-batches
    mine = list(zip(x[rank::world].chunk(steps), y[rank::world].chunk(steps)))

    synced = count_allreduces(lambda: accumulate(model, mine))
    # one bucket (a small model), reduced once, not once per micro-batch
    assert synced == 1
    for got, want in zip(grads(model.module), grads(reference)):
        # == one big-batch step over all ranks' data
        torch.testing.assert_close(got, want)

    model.zero_grad()
    unsynced = count_allreduces(lambda: forward_outside(model, mine))
    # no_sync() around backward only: every micro-batch synced
    assert unsynced == steps
    if rank == 0:
        print(
            f"no_sync around forward+backward: {synced} all-reduce for "
            f"{steps} micro-batches; "
            f"around backward only: {unsynced}; gradients equal the "
            "big-batch step"
        )


def main() -> None:
    device = setup()
    try:
        # the DDP model lives and dies in here, before the group goes
        compare(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
# --8<-- [end:main]
