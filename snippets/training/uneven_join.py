"""Uneven inputs: ranks with different numbers of
batches finish together under the Join context manager."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/training/uneven_join.py

import copy
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP


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


def batches_of(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rank r has 5 + 3r batches: the data of any
    rank can be rebuilt anywhere from its seed."""
    g = torch.Generator().manual_seed(rank)
    return [
        (torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g))
        for _ in range(5 + 3 * rank)
    ]


# --8<-- [start:join]
def train_uneven(
    model: DDP, optimizer: torch.optim.Optimizer, batches, device: torch.device
) -> int:
    steps = 0
    # a rank that runs out shadows the others' all-reduces with zeros
    with Join([model]):
        for inputs, targets in batches:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(
                model(inputs.to(device)), targets.to(device)
            )
            loss.backward()
            optimizer.step()
            steps += 1
    return steps  # reached on every rank once the last one runs out


# --8<-- [end:join]


# --8<-- [start:expected]
def what_join_computes(model: nn.Module, world: int, lr: float) -> nn.Module:
    """One process replaying the run: at each step, the sum of the
    gradients of the ranks still running, divided by the initial
    world size (Join's default, divide_by_initial_world_size=True)."""
    device = next(model.parameters()).device  # where DDP trains
    data = [batches_of(r) for r in range(world)]
    for step in range(max(map(len, data))):
        model.zero_grad()
        for rank_batches in data:
            if step < len(rank_batches):
                inputs, targets = (t.to(device) for t in rank_batches[step])
                # grads add up
                (
                    nn.functional.mse_loss(model(inputs), targets) / world
                ).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return model


# --8<-- [end:expected]


def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    # the reference runs on this rank's device: one kind of arithmetic
    expected = what_join_computes(copy.deepcopy(net).to(device), world, lr=0.1)

    model = DDP(
        net.to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = train_uneven(model, optimizer, batches_of(rank), device)
    # each rank ran all of its own batches
    assert steps == len(batches_of(rank))

    mine = torch.cat([p.detach().flatten() for p in model.module.parameters()])
    replicas = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(replicas, mine)
    # replicas still identical
    assert all(torch.equal(replicas[0], r) for r in replicas)
    want = torch.cat([p.detach().flatten() for p in expected.parameters()])
    torch.testing.assert_close(mine, want)
    everyone: list = [None] * world
    dist.all_gather_object(everyone, steps)
    # one rank prints: lines of ranks printing at once can mix mid-line
    if rank == 0:
        for r, n in enumerate(everyone):
            print(
                f"rank {r}: {n} steps, finished; replicas equal what "
                "Join promises"
            )


def main() -> None:
    device = setup()
    try:
        # every DDP model lives and dies in here, before the group goes
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
