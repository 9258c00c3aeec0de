"""Train a small model with DistributedDataParallel, launched by torchrun."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/ddp/train_torchrun.py

# --8<-- [start:imports]
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# --8<-- [end:imports]


# --8<-- [start:setup]
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


# --8<-- [end:setup]


# --8<-- [start:train]
def train(
    device: torch.device, epochs: int = 5
) -> tuple[nn.Module, list[float]]:
    # same data on every rank; DDP syncs the initial weights anyway
    torch.manual_seed(0)
    # 8 steps an epoch on any number of ranks
    x = torch.randn(256 * dist.get_world_size(), 10)
    dataset = TensorDataset(x, x[:, :5].sin())
    # each rank gets its own 1/world of the data
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    # 32 per rank, 32 * world per step
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)

    model = nn.Sequential(
        nn.Linear(10, 20),
        nn.ReLU(),
        nn.Linear(20, 5),
    ).to(device)
    ddp_model = DDP(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.5)

    epoch_losses = []
    for epoch in range(epochs):
        # a new shuffle every epoch, the same on all ranks
        sampler.set_epoch(epoch)
        # sum of batch losses, number of batches
        totals = torch.zeros(2, device=device)
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(ddp_model(inputs), targets)
            # gradients are all-reduced (averaged) across ranks here
            loss.backward()
            optimizer.step()
            totals += torch.stack([loss.detach(), torch.ones_like(loss)])
        # sum over ranks: every rank gets the global mean
        dist.all_reduce(totals)
        epoch_losses.append((totals[0] / totals[1]).item())
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: mean loss {epoch_losses[-1]:.4f}")
    return ddp_model.module, epoch_losses


# --8<-- [end:train]


# --8<-- [start:check]
def assert_replicas_equal(model: nn.Module) -> None:
    """Every rank must hold bit-identical parameters after training."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    replicas = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(replicas, flat)
    assert all(torch.equal(replicas[0], r) for r in replicas), (
        "replicas diverged"
    )


# --8<-- [end:check]


# --8<-- [start:main]
def main() -> None:
    device = setup()
    try:
        model, losses = train(device)
        assert losses[-1] < 0.7 * losses[0], f"loss did not fall: {losses}"
        assert_replicas_equal(model)
        if dist.get_rank() == 0:
            print(
                f"{dist.get_world_size()} ranks on {device.type} "
                f"({dist.get_backend()}): replicas identical"
            )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
# --8<-- [end:main]
