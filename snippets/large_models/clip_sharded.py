"""clip_grad_norm_ on sharded gradients (FSDP2, tensor
parallel): the norm of the whole model, as one process."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/clip_sharded.py
# timeout: 240

import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
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


MAX_NORM = 0.1


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))


def run(mesh: DeviceMesh, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    # drawn on the CPU: the same batch on every rank, whatever its GPU
    x = torch.randn(32, 16).to(device)
    y = x.cos()

    # --8<-- [start:reference]
    reference = make_model().to(device)
    nn.functional.mse_loss(reference(x), y).backward()
    # one process
    ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), MAX_NORM)
    assert ref_norm > MAX_NORM  # so the gradients really are scaled down
    # --8<-- [end:reference]

    # --8<-- [start:fsdp]
    fsdp = fully_shard(make_model().to(device), mesh=mesh)
    # data parallel: a slice each
    x_mine, y_mine = x.chunk(world)[rank], y.chunk(world)[rank]
    # each rank: its shard of every gradient
    nn.functional.mse_loss(fsdp(x_mine), y_mine).backward()
    # a collective: every rank
    fsdp_norm = torch.nn.utils.clip_grad_norm_(fsdp.parameters(), MAX_NORM)
    assert isinstance(fsdp_norm, DTensor)
    torch.testing.assert_close(fsdp_norm.full_tensor(), ref_norm)
    # --8<-- [end:fsdp]

    # --8<-- [start:tp]
    plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
    tp = parallelize_module(make_model().to(device), mesh, plan)
    # tensor parallel: every rank the whole batch
    nn.functional.mse_loss(tp(x), y).backward()
    tp_norm = torch.nn.utils.clip_grad_norm_(tp.parameters(), MAX_NORM)
    torch.testing.assert_close(tp_norm.full_tensor(), ref_norm)
    # --8<-- [end:tp]

    # --8<-- [start:check]
    # the clipped gradients: the reference's, shard by shard
    for model in (fsdp, tp):
        for p, ref in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad.full_tensor(), ref.grad)
    if rank == 0:
        print(
            f"one process: total norm {ref_norm.item():.6f}, clipped to "
            f"{MAX_NORM}"
        )
        print(
            f"FSDP2, {world} ranks: {type(fsdp_norm).__name__} "
            f"{fsdp_norm.placements}, "
            f"full_tensor() {fsdp_norm.full_tensor().item():.6f}"
        )
        print(
            f"TP, {world} ranks: full_tensor() "
            f"{tp_norm.full_tensor().item():.6f}; clipped gradients equal"
        )
    # --8<-- [end:check]


def main() -> None:
    device = setup()  # the process group first, with its backend
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    try:
        # every model lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
