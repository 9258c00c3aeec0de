"""FSDP2's all-gathers in the order it issues them, with its default
prefetching and with explicit prefetching two blocks ahead."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/fsdp2_prefetch.py
# timeout: 180

import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
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


# same as snippets/parallelism/_mesh.py:teardown_mesh
def teardown_mesh(mesh: DeviceMesh) -> None:
    """Destroy the groups and free them now, so their
    threads end before Python does (debugging page)."""
    # sharded models are reference cycles: free
    # them while the group is still registered
    gc.collect()
    dist.destroy_process_group()
    # DTensor's caches keep the mesh alive, and the
    # mesh its groups (torch 2.14): let go of them
    getattr(mesh, "_pg_registry", {}).clear()


BLOCKS, AHEAD = 4, 2


def make_model() -> nn.Sequential:
    # the same initial weights on every rank and in every copy
    torch.manual_seed(0)
    blocks = [
        nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
        for _ in range(BLOCKS)
    ]
    return nn.Sequential(*blocks, nn.Linear(32, 4))


def shard(model: nn.Sequential, mesh: DeviceMesh) -> nn.Sequential:
    for block in model[:-1]:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)  # the root: the last Linear
    return model


# --8<-- [start:prefetch]
def prefetch(blocks: list[FSDPModule], ahead: int) -> None:
    """Each block starts the all-gathers of the `ahead` blocks
    that run after it, in forward and in backward."""
    for i, block in enumerate(blocks):
        # forward runs blocks[0], blocks[1], ...
        block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 1 + ahead])
        # backward runs them in reverse: the nearest first
        before = blocks[max(i - ahead, 0) : i]
        block.set_modules_to_backward_prefetch(before[::-1])


# --8<-- [end:prefetch]


# --8<-- [start:order]
def issue_order(model: nn.Module, x: torch.Tensor) -> tuple[list, list]:
    """Forward and backward as FSDP2's profiler labels order them:
    'AGi' when block i's all-gather is issued, 'Fi' / 'Bi' when
    block i's forward / backward computation is done."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(x).sum().backward()
    marks = []  # (time, mark)
    for event in prof.events():
        name, span = event.name, event.time_range
        block = name.rpartition("(")[2].rstrip(")")
        if not block.isdigit():
            continue  # the root's labels carry no module name
        if name.startswith("FSDP::all_gather ("):
            marks.append((span.start, f"AG{block}"))
        elif name.startswith("FSDP::post_forward ("):
            marks.append((span.start, f"F{block}"))
        elif name.startswith("FSDP::post_backward_reshard ("):
            marks.append((span.start, f"B{block}"))
    marks = [mark for _, mark in sorted(marks)]
    # the backward begins after the last block's forward
    split = max(i for i, m in enumerate(marks) if m.startswith("F")) + 1
    return marks[:split], marks[split:]


def most_gathered(marks: list[str]) -> int:
    """The most blocks gathered at once: at the end of each block's
    computation, the blocks gathered and not yet computed, itself
    included."""
    gathered, done, most = set(), set(), 0
    for mark in marks:
        if mark.startswith("AG"):
            gathered.add(mark[2:])
        else:
            most = max(most, len(gathered - done))
            done.add(mark[1:])
    return most


# --8<-- [end:order]


def run(mesh: DeviceMesh, device: torch.device) -> None:
    rank = dist.get_rank()
    torch.manual_seed(1 + rank)  # this rank's batch
    x = torch.randn(8, 32, device=device)

    # --8<-- [start:compare]
    orders, grads = {}, {}
    for name, ahead in (("default", 0), (f"prefetch {AHEAD}", AHEAD)):
        model = shard(make_model().to(device), mesh)
        if ahead:
            prefetch(list(model[:-1]), ahead)
        model(x).sum().backward()  # the first step builds FSDP's state
        model.zero_grad()
        orders[name] = issue_order(model, x)
        grads[name] = [p.grad.full_tensor() for p in model.parameters()]
    # prefetching moves all-gathers earlier; it computes the same
    for a, b in zip(*grads.values()):
        assert torch.equal(a, b), "prefetching changed a gradient"
    # --8<-- [end:compare]

    # --8<-- [start:check]
    forward, backward = orders["default"]
    n = BLOCKS
    assert forward == [m for i in range(n) for m in (f"AG{i}", f"F{i}")]
    # by default the backward gathers one block ahead
    assert most_gathered(forward) == 1 and most_gathered(backward) == 2
    forward, backward = orders[f"prefetch {AHEAD}"]
    # block 0 computes while blocks 1 and 2 are gathered
    assert forward[: AHEAD + 2] == [f"AG{i}" for i in range(AHEAD + 1)] + ["F0"]
    assert most_gathered(forward) == most_gathered(backward) == AHEAD + 1
    # --8<-- [end:check]

    if rank == 0:
        for name, (forward, backward) in orders.items():
            print(f"forward,  {name:12}" + " ".join(forward))
            print(f"backward, {name:12}" + " ".join(backward))
        print(
            "most blocks gathered at once (forward, backward): "
            + "; ".join(
                f"{name} {most_gathered(f)}, {most_gathered(b)}"
                for name, (f, b) in orders.items()
            )
        )


def main() -> None:
    device = setup()
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    try:
        # every model lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
