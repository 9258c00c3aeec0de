"""A complete DDP training loop: sharded data, rank-0
logging, evaluation, and an atomic checkpoint to resume from."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/training/train_loop.py

import os
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import (
    DataLoader,
    DistributedSampler,
    Subset,
    TensorDataset,
)


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


# --8<-- [start:fit]
def make_model(device: torch.device, seed: int = 0) -> DDP:
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 1)
    ).to(device)
    return DDP(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )


def fit(
    model: DDP,
    optimizer: torch.optim.Optimizer,
    loader: DataLoader,
    epochs: range,
    device: torch.device,
) -> None:
    for epoch in epochs:
        # before iterating: a new order every epoch, the same on all ranks
        loader.sampler.set_epoch(epoch)
        loss_sum, count = torch.zeros((), device=device), 0
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            # no .item(): no host sync every step
            loss_sum += loss.detach() * len(inputs)
            count += len(inputs)
        stats = torch.stack(
            [loss_sum, torch.tensor(float(count), device=device)]
        )
        # a collective: every rank calls it, not just the one that prints
        dist.all_reduce(stats)
        if dist.get_rank() == 0:
            print(
                f"epoch {epoch}: train loss {stats[0] / stats[1]:.4f} "
                f"over {int(stats[1])} samples"
            )


# --8<-- [end:fit]


# --8<-- [start:evaluate]
@torch.no_grad()
def squared_error(
    module: nn.Module, data, device: torch.device
) -> torch.Tensor:
    """[sum of squared errors, number of samples]
    of a plain module (not the DDP wrapper)."""
    module.eval()  # BatchNorm uses its running statistics
    stats = torch.zeros(2, device=device)
    for inputs, targets in DataLoader(data, batch_size=64):
        inputs, targets = inputs.to(device), targets.to(device)
        stats[0] += nn.functional.mse_loss(
            module(inputs), targets, reduction="sum"
        )
        stats[1] += len(inputs)
    module.train()
    return stats


def evaluate_sharded(
    module: nn.Module, data: TensorDataset, device: torch.device
) -> float:
    """Every rank scores its own slice,
    without padding; the sums are all-reduced."""
    # BatchNorm statistics differ per rank until DDP's next forward
    for buffer in module.buffers():
        dist.broadcast(buffer, src=0)
    shard = Subset(
        data, range(dist.get_rank(), len(data), dist.get_world_size())
    )
    stats = squared_error(module, shard, device)
    dist.all_reduce(stats)
    return (stats[0] / stats[1]).item()


# --8<-- [end:evaluate]


# --8<-- [start:checkpoint]
# same as snippets/fault/train_resumable.py:save_atomic
def save_atomic(obj: object, path: Path) -> None:
    """torch.save to a temp file in the same
    directory, then rename it over `path` in one step."""
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=path.name + ".", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            # the bytes are on disk before the name points at them
            os.fsync(f.fileno())
        # atomic: readers see the old file or the new one, never half of one
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def save_checkpoint(
    path: Path, model: DDP, optimizer: torch.optim.Optimizer, epoch: int
) -> None:
    if dist.get_rank() == 0:  # the replicas are identical: one copy is enough
        save_atomic(
            {
                "model": model.module.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch,
            },
            path,
        )
    # no rank goes on (and reads the file) before rank 0 has finished
    dist.barrier()


def load_checkpoint(
    path: Path,
    model: DDP,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> int:
    # every rank, onto its own device
    state = torch.load(path, map_location=device, weights_only=True)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"] + 1  # the first epoch still to run


# --8<-- [end:checkpoint]


# --8<-- [start:main]
def make_data() -> tuple[Subset, Subset]:
    """Synthetic regression data, the same on every
    rank: 256 samples to train on, 100 to evaluate on."""
    x = torch.randn(356, 8, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, (x[:, :4].sum(dim=1, keepdim=True) / 2).tanh())
    return Subset(data, range(256)), Subset(data, range(256, 356))


def run(device: torch.device, epochs: int = 4) -> None:
    # one path for every restart of this job; on
    # several nodes, put it on storage they all see
    checkpoint = (
        Path(tempfile.gettempdir())
        / f"train_loop-{os.environ['TORCHELASTIC_RUN_ID']}.pt"
    )
    train_data, eval_data = make_data()
    loader = DataLoader(
        train_data,
        batch_size=16,
        sampler=DistributedSampler(train_data, seed=0),
    )
    model = make_model(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    start = (
        load_checkpoint(checkpoint, model, optimizer, device)
        if checkpoint.exists()
        else 0
    )
    for epoch in range(start, epochs):
        fit(model, optimizer, loader, range(epoch, epoch + 1), device)
        # a restart loses one epoch at most
        save_checkpoint(checkpoint, model, optimizer, epoch)

    # all ranks take part; rank 0 prints
    mse = evaluate_sharded(model.module, eval_data, device)
    if dist.get_rank() == 0:
        print(
            f"eval mse {mse:.5f} after epoch {epochs - 1} (started at "
            f"epoch {start})"
        )
    # the mse of always predicting the mean
    baseline = torch.stack([y for _, y in eval_data]).var().item()
    assert mse < baseline / 2, (
        f"eval mse {mse:.4f}, no better than predicting the mean "
        f"({baseline:.4f})"
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
# --8<-- [end:main]
