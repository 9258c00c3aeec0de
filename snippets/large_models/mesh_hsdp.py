"""HSDP: FSDP2 on a (replicate, shard) mesh, sharded
inside a group and replicated across groups; the same
updates as one process on the whole batch."""
# launch: torchrun --standalone --nproc-per-node=4 snippets/large_models/mesh_hsdp.py
# holds-group-at-exit: CommDebugMode keeps FSDP2 models and their group alive on torch 2.15.0 (tests/repro/fsdp2_held_at_exit.py)
# timeout: 240

import copy
import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode


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


MAX_NORM = 0.1  # below the gradient norms: every step is clipped


def make_model() -> nn.Sequential:
    # the same initial weights on every rank and in the reference
    torch.manual_seed(0)
    blocks = [
        nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
        for _ in range(3)
    ]
    return nn.Sequential(*blocks, nn.Linear(32, 8))


# --8<-- [start:shard]
def shard(model: nn.Sequential, mesh: DeviceMesh) -> nn.Sequential:
    for block in model[:-1]:
        # a 2-D mesh: replicate over dim 0, shard over dim 1
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)  # the root: the last layer
    return model


# --8<-- [end:shard]


def train(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 3
) -> torch.Tensor:
    """Three clipped SGD steps; the gradient norm of each."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = []
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        # every gradient on the one 2-D mesh: the plain call works
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        norms.append(norm.detach())
        optimizer.step()
    return torch.stack(norms)


def compare(mesh: DeviceMesh, device: torch.device):
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    # the global batch, drawn on the CPU: the same on every rank
    x = torch.randn(64, 32).to(device)
    y = x[:, :8].sin()
    # all 4 ranks are data-parallel: a quarter of the batch each
    x_mine, y_mine = x.chunk(world)[rank], y.chunk(world)[rank]

    # --8<-- [start:compare]
    reference = make_model().to(device)
    before = copy.deepcopy(reference)
    reference_norms = train(reference, x, y)  # one process, the whole batch
    model = shard(make_model().to(device), mesh)
    norms = train(model, x_mine, y_mine)

    diff = update = 0.0
    for (name, p), ref, old in zip(
        model.named_parameters(), reference.parameters(), before.parameters()
    ):
        assert isinstance(p, DTensor) and p.device_mesh == mesh, name
        full = p.full_tensor()  # all-gathered inside the row
        diff = max(diff, (full - ref).abs().max().item())
        update = max(update, (ref - old).abs().max().item())
    # float32 rounding, far below what the steps changed
    assert diff < 1e-6 and update > 1e-3, (diff, update)
    torch.testing.assert_close(norms, reference_norms)
    assert norms.min() > MAX_NORM, "every step was clipped"
    # --8<-- [end:compare]
    return model, x_mine, y_mine, diff


def run(mesh: DeviceMesh, device: torch.device) -> None:
    model, x_mine, y_mine, diff = compare(mesh, device)

    # --8<-- [start:comms]
    with CommDebugMode() as comms:
        nn.functional.mse_loss(model(x_mine), y_mine).backward()
    counts = {
        str(op).split(".")[-1]: n for op, n in comms.get_comm_counts().items()
    }
    # --8<-- [end:comms]

    # --8<-- [start:memory]
    full_numel = sum(p.numel() for p in model.parameters())
    local_numel = sum(p.to_local().numel() for p in model.parameters())
    # 1/2 of the model, not 1/4
    assert local_numel * mesh["shard"].size() == full_numel
    if dist.get_rank() == 0:
        w = model[0][0].weight
        print(f"mesh {tuple(mesh.shape)} {mesh.mesh_dim_names}; {w.placements}")
        print(f"parameters: {full_numel} in all, {local_numel} on each rank")
        print(f"collectives in one step: {counts}")
        print(
            f"after 3 SGD steps: max |HSDP - one process| = {diff:.1e}; "
            "the same gradient norms"
        )
    # --8<-- [end:memory]


def main() -> None:
    device = setup()  # the process group first, with its backend
    # --8<-- [start:mesh]
    # e.g. nodes x GPUs
    mesh = init_device_mesh(
        device.type, (2, 2), mesh_dim_names=("replicate", "shard")
    )
    # --8<-- [end:mesh]
    try:
        # every model lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
