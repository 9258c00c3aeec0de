"""What is per-rank randomness under DDP: initial weights
are not (DDP syncs them), dropout and data workers are."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/practices/seeds_ddp.py

import os
import random

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, get_worker_info


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


def gather(t: torch.Tensor) -> list[torch.Tensor]:
    """This tensor from every rank, in rank order."""
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous())
    return out


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# same as snippets/ddp/train_torchrun.py:assert_replicas_equal
def assert_replicas_equal(model: nn.Module) -> None:
    """Every rank must hold bit-identical parameters after training."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    replicas = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(replicas, flat)
    assert all(torch.equal(replicas[0], r) for r in replicas), (
        "replicas diverged"
    )


# --8<-- [start:seed]
BASE_SEED = 1234


def seed_everything(rank: int) -> None:
    """Per-rank seed: dropout and augmentation
    differ across ranks, yet every run repeats."""
    torch.manual_seed(BASE_SEED + rank)  # seeds the CPU and all CUDA generators


# --8<-- [end:seed]


class RandomAugment(Dataset):
    """Stands for random crops/flips: draws from torch
    and from a library RNG that PyTorch does not seed."""

    def __init__(self) -> None:
        # e.g. a third-party augmentation library's own generator
        self.rng = random.Random(0)

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        info = get_worker_info()
        # what seed_worker relies on
        assert info is None or torch.initial_seed() == info.seed
        return torch.tensor(
            [torch.rand(()).item(), self.rng.random()], dtype=torch.float64
        )


# --8<-- [start:worker-init]
def seed_worker(worker_id: int) -> None:
    """Runs in each worker: torch.initial_seed()
    is already base_seed + worker_id there."""
    # reseed what PyTorch does not
    get_worker_info().dataset.rng.seed(torch.initial_seed())


# --8<-- [end:worker-init]


def batches(loader: DataLoader) -> list[torch.Tensor]:
    # one batch per worker here: 4 items, batch_size 2, 2 workers
    return list(loader)


def initial_weights_synced(device: torch.device, rank: int) -> DDP:
    """Per-rank seeds, different weights: DDP's
    constructor makes them rank 0's everywhere."""
    # --8<-- [start:init-sync]
    # different seeds: each rank builds different initial weights
    seed_everything(rank)
    model = nn.Sequential(
        nn.Linear(8, 32), nn.Dropout(0.5), nn.Linear(32, 1)
    ).to(device)
    before = gather(flat_params(model))
    assert not torch.equal(before[0], before[1]), (
        "ranks should start from different random weights"
    )

    ddp_model = DDP(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    # the constructor broadcast one set of weights...
    assert_replicas_equal(ddp_model.module)
    # ...rank 0's: everyone starts from them
    assert torch.equal(flat_params(ddp_model.module), before[0])
    # --8<-- [end:init-sync]
    return ddp_model


def dropout_per_rank(ddp_model: DDP, device: torch.device) -> None:
    """Per-rank seeds: each rank drops other units."""
    # --8<-- [start:dropout]
    ddp_model.train()
    # the Dropout layer alone
    h = ddp_model.module[1](torch.ones(1, 32, device=device))
    masks = gather((h != 0).float())
    assert not torch.equal(masks[0], masks[1]), (
        "per-rank seeds give per-rank dropout masks"
    )
    # --8<-- [end:dropout]


def workers_per_rank(device: torch.device, rank: int) -> None:
    """DataLoader workers: what one seed for all shares,
    and what per-rank generators and seed_worker fix."""
    # --8<-- [start:workers]
    torch.manual_seed(BASE_SEED)  # the article's advice: one seed everywhere
    w0, w1 = batches(DataLoader(RandomAugment(), batch_size=2, num_workers=2))
    assert torch.equal(w0[:, 1], w1[:, 1]), (
        "forked workers share the library RNG's state"
    )
    shared = gather(torch.cat([w0, w1]).to(device))
    assert torch.equal(shared[0], shared[1]), (
        "same seed on every rank: every rank augments identically"
    )

    def make_loader(rank: int) -> DataLoader:
        # draws each epoch's base_seed
        g = torch.Generator().manual_seed(BASE_SEED + rank)
        return DataLoader(
            RandomAugment(),
            batch_size=2,
            num_workers=2,
            generator=g,
            worker_init_fn=seed_worker,
        )

    loader = make_loader(rank)
    epoch0, epoch1 = torch.cat(batches(loader)), torch.cat(batches(loader))
    assert not torch.equal(epoch0[:2, 1], epoch0[2:, 1]), (
        "reseeded workers draw different numbers"
    )
    per_rank = gather(epoch0.to(device))
    assert not torch.equal(per_rank[0], per_rank[1]), (
        "per-rank generators: augmentation differs across ranks"
    )
    assert not torch.equal(epoch0, epoch1), (
        "every epoch starts its workers from a new base_seed"
    )
    assert torch.equal(torch.cat(batches(make_loader(rank))), epoch0), (
        "a new run repeats the first epoch"
    )
    # --8<-- [end:workers]


def run(device: torch.device) -> None:
    rank = dist.get_rank()
    ddp_model = initial_weights_synced(device, rank)
    dropout_per_rank(ddp_model, device)
    workers_per_rank(device, rank)
    if rank == 0:
        print(
            "weights synced by DDP; dropout and worker randomness per "
            "rank, reproducible per run"
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
