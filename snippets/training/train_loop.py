"""A complete DDP training loop: sharded data, rank-0 logging, evaluation, atomic checkpoints and resume."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/training/train_loop.py

import math
import os
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group, not later: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset


def setup() -> torch.device:
    """Join the process group: NCCL with one GPU per rank if there are enough GPUs, else gloo on CPU."""
    local_rank = int(os.environ["LOCAL_RANK"])  # set by torchrun
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before init: else every rank also allocates on GPU 0
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return device


# --8<-- [start:sampler]
def check_sampler() -> None:
    """What DistributedSampler hands each rank: padding, drop_last and set_epoch."""
    world = dist.get_world_size()
    dataset = TensorDataset(torch.arange(11))  # 11 samples: not divisible by 2 ranks

    def shards(**kwargs) -> list[list[int]]:
        mine = list(DistributedSampler(dataset, shuffle=True, seed=0, **kwargs))
        everyone = [None] * world
        dist.all_gather_object(everyone, mine)
        return everyone

    padded = shards()  # drop_last=False, the default
    assert all(len(s) == math.ceil(11 / world) for s in padded)
    assert set(sum(padded, [])) == set(range(11))  # all samples, some of them twice
    dropped = shards(drop_last=True)
    assert all(len(s) == 11 // world for s in dropped)
    assert len(set(sum(dropped, []))) == 11 // world * world  # the tail is never seen

    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    first, again = list(sampler), list(sampler)
    sampler.set_epoch(1)
    assert first == again and list(sampler) != first  # no set_epoch: the same order every epoch


# --8<-- [end:sampler]


# --8<-- [start:fit]
def make_model(device: torch.device, seed: int = 0) -> DDP:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def fit(model: DDP, optimizer: torch.optim.Optimizer, loader: DataLoader, epochs: range, device: torch.device) -> None:
    for epoch in epochs:
        loader.sampler.set_epoch(epoch)  # before iterating: a new order every epoch, the same on all ranks
        loss_sum, count = torch.zeros((), device=device), 0
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(inputs)  # no .item(): no host sync every step
            count += len(inputs)
        stats = torch.stack([loss_sum, torch.tensor(float(count), device=device)])
        dist.all_reduce(stats)  # a collective: every rank calls it, not just the one that prints
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: train loss {stats[0] / stats[1]:.4f} over {int(stats[1])} samples")


# --8<-- [end:fit]


# --8<-- [start:evaluate]
@torch.no_grad()
def squared_error(module: nn.Module, data, device: torch.device) -> torch.Tensor:
    """[sum of squared errors, number of samples] of a plain module (not the DDP wrapper)."""
    module.eval()  # BatchNorm uses its running statistics
    stats = torch.zeros(2, device=device)
    for inputs, targets in DataLoader(data, batch_size=64):
        inputs, targets = inputs.to(device), targets.to(device)
        stats[0] += nn.functional.mse_loss(module(inputs), targets, reduction="sum")
        stats[1] += len(inputs)
    module.train()
    return stats


def evaluate_sharded(module: nn.Module, data: TensorDataset, device: torch.device) -> float:
    """Every rank scores its own slice, without padding; the sums are all-reduced."""
    for buffer in module.buffers():  # BatchNorm statistics differ per rank until DDP's next forward
        dist.broadcast(buffer, src=0)
    shard = Subset(data, range(dist.get_rank(), len(data), dist.get_world_size()))
    stats = squared_error(module, shard, device)
    dist.all_reduce(stats)
    return (stats[0] / stats[1]).item()


# --8<-- [end:evaluate]


# --8<-- [start:checkpoint]
def save_checkpoint(path: Path, model: DDP, optimizer: torch.optim.Optimizer, epoch: int) -> None:
    if dist.get_rank() == 0:
        state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # same filesystem as path
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename makes it visible
            os.replace(tmp, path)  # atomic: readers see the old file or the new one, never a half-written one
        except BaseException:
            os.unlink(tmp)
            raise
    dist.barrier()  # no rank goes on (and reads the file) before rank 0 has finished


def load_checkpoint(path: Path, model: DDP, optimizer: torch.optim.Optimizer, device: torch.device) -> int:
    state = torch.load(path, map_location=device, weights_only=True)  # every rank, onto its own device
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"] + 1  # the first epoch still to run


# --8<-- [end:checkpoint]


def flat_state(module: nn.Module) -> torch.Tensor:
    return torch.cat([t.detach().flatten().double() for t in module.state_dict().values()])


def all_ranks(tensor: torch.Tensor) -> list[torch.Tensor]:
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, tensor)
    return gathered


# --8<-- [start:main]
def run(device: torch.device) -> None:
    check_sampler()
    g = torch.Generator().manual_seed(0)  # the same synthetic data on every rank
    x = torch.randn(356, 8, generator=g)
    data = TensorDataset(x, (x[:, :4].sum(dim=1, keepdim=True) / 2).tanh())
    train_data, eval_data = Subset(data, range(256)), Subset(data, range(256, 356))
    loader = DataLoader(train_data, batch_size=16, sampler=DistributedSampler(train_data, seed=0))

    def new_run(seed: int = 0) -> tuple[DDP, torch.optim.Optimizer]:
        model = make_model(device, seed)
        return model, torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

    model, optimizer = new_run()  # reference: 4 epochs without a break
    fit(model, optimizer, loader, range(4), device)
    uninterrupted = flat_state(model.module)

    model, optimizer = new_run()  # the same run, stopped after 2 epochs
    fit(model, optimizer, loader, range(2), device)

    means = all_ranks(model.module[1].running_mean.clone())
    assert not torch.equal(means[0], means[1])  # each rank's last batch updated its own BatchNorm copy
    on_rank0 = None
    if dist.get_rank() == 0:  # pattern 1: rank 0 alone, on model.module (never on the DDP wrapper)
        stats = squared_error(model.module, eval_data, device)
        on_rank0 = (stats[0] / stats[1]).item()
    sharded = evaluate_sharded(model.module, eval_data, device)  # pattern 2: all ranks
    if dist.get_rank() == 0:
        assert abs(on_rank0 - sharded) < 1e-5 * on_rank0
        print(f"eval mse: rank 0 alone {on_rank0:.5f}, sharded + all_reduce {sharded:.5f}")

    box = [tempfile.mkdtemp() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)  # one path for all ranks (multi-node: shared storage)
    path = Path(box[0]) / "checkpoint.pt"
    save_checkpoint(path, model, optimizer, epoch=1)
    saved = flat_state(model.module)
    dist.broadcast(saved, src=0)  # what rank 0 wrote

    model, optimizer = new_run(seed=1)  # a fresh process would start like this: other weights
    start = load_checkpoint(path, model, optimizer, device)
    assert start == 2 and torch.equal(flat_state(model.module), saved)  # on every rank
    fit(model, optimizer, loader, range(start, 4), device)
    assert torch.equal(flat_state(model.module), uninterrupted)  # resumed == never stopped, bit for bit
    dist.barrier()
    if dist.get_rank() == 0:
        os.remove(path)
        os.rmdir(path.parent)
        print("checkpoint loaded on every rank; resumed run equals the uninterrupted one")


def main() -> None:
    device = setup()
    try:
        run(device)  # every DDP model lives and dies in here, before the group goes
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
# --8<-- [end:main]
