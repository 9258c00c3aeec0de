"""The proof beside train_loop.py: its sampler, logging,
evaluation and checkpoint functions do what the page says."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/training/train_loop_check.py

import math
import os
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from train_loop import (  # the template beside this file
    evaluate_sharded,
    fit,
    load_checkpoint,
    make_data,
    make_model,
    save_checkpoint,
    setup,
    squared_error,
)


# --8<-- [start:sampler]
def check_sampler() -> None:
    """What DistributedSampler hands each
    rank: padding, drop_last and set_epoch."""
    world = dist.get_world_size()
    # 11 samples: not divisible by 2 ranks
    dataset = TensorDataset(torch.arange(11))

    def shards(**kwargs) -> list[list[int]]:
        mine = list(DistributedSampler(dataset, shuffle=True, seed=0, **kwargs))
        everyone = [None] * world
        dist.all_gather_object(everyone, mine)
        return everyone

    padded = shards()  # drop_last=False, the default
    assert all(len(s) == math.ceil(11 / world) for s in padded)
    # all samples, some of them twice
    assert set(sum(padded, [])) == set(range(11))
    dropped = shards(drop_last=True)
    assert all(len(s) == 11 // world for s in dropped)
    # the tail is never seen
    assert len(set(sum(dropped, []))) == 11 // world * world

    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    first, again = list(sampler), list(sampler)
    sampler.set_epoch(1)
    # no set_epoch: the same order every epoch
    assert first == again and list(sampler) != first


# --8<-- [end:sampler]


# same as snippets/ddp/train_torchrun.py:assert_replicas_equal
def assert_replicas_equal(model: nn.Module) -> None:
    """Every rank must hold bit-identical parameters after training."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    replicas = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(replicas, flat)
    assert all(torch.equal(replicas[0], r) for r in replicas), (
        "replicas diverged"
    )


def flat_state(module: nn.Module) -> torch.Tensor:
    """Parameters and buffers (BatchNorm's
    running statistics too) in one tensor."""
    return torch.cat(
        [t.detach().flatten().double() for t in module.state_dict().values()]
    )


def check_evaluation(
    model: nn.Module, eval_data: TensorDataset, device: torch.device
) -> None:
    """Right after training each rank's BatchNorm statistics
    differ; both evaluation patterns still agree."""
    mean = model.module[1].running_mean
    means = [torch.empty_like(mean) for _ in range(dist.get_world_size())]
    dist.all_gather(means, mean)
    # each rank's last batch updated its own BatchNorm copy
    assert not torch.equal(means[0], means[1])
    on_rank0 = None
    # pattern 1: rank 0 alone, on model.module (never on the DDP wrapper)
    if dist.get_rank() == 0:
        stats = squared_error(model.module, eval_data, device)
        on_rank0 = (stats[0] / stats[1]).item()
    # pattern 2: all ranks
    sharded = evaluate_sharded(model.module, eval_data, device)
    if dist.get_rank() == 0:
        assert abs(on_rank0 - sharded) < 1e-5 * on_rank0
        print(
            f"eval mse: rank 0 alone {on_rank0:.5f}, sharded + "
            f"all_reduce {sharded:.5f}"
        )


def run(device: torch.device) -> None:
    check_sampler()
    train_data, eval_data = make_data()
    loader = DataLoader(
        train_data,
        batch_size=16,
        sampler=DistributedSampler(train_data, seed=0),
    )

    def new_run(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
        model = make_model(device, seed)
        return model, torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

    model, optimizer = new_run()  # reference: 4 epochs without a break
    fit(model, optimizer, loader, range(4), device)
    uninterrupted = flat_state(model.module)

    model, optimizer = new_run()  # the same run, stopped after 2 epochs
    fit(model, optimizer, loader, range(2), device)
    check_evaluation(model, eval_data, device)

    box = [tempfile.mkdtemp() if dist.get_rank() == 0 else None]
    # one path for all ranks (multi-node: shared storage)
    dist.broadcast_object_list(box, src=0)
    path = Path(box[0]) / "checkpoint.pt"
    save_checkpoint(path, model, optimizer, epoch=1)
    saved = flat_state(model.module)
    dist.broadcast(saved, src=0)  # what rank 0 wrote

    # a fresh process would start like this: other weights
    model, optimizer = new_run(seed=1)
    start = load_checkpoint(path, model, optimizer, device)
    # rank 0's state, on every rank
    assert start == 2 and torch.equal(flat_state(model.module), saved)
    fit(model, optimizer, loader, range(start, 4), device)
    # resumed == never stopped, bit for bit
    assert torch.equal(flat_state(model.module), uninterrupted)
    assert_replicas_equal(model.module)
    dist.barrier()
    if dist.get_rank() == 0:
        os.remove(path)
        os.rmdir(path.parent)
        print(
            "checkpoint loaded on every rank; resumed run equals the "
            "uninterrupted one"
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
