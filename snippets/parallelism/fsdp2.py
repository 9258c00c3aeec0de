"""FSDP2: fully_shard trains exactly what
DDP trains, with half the memory per rank."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/parallelism/fsdp2.py
# timeout: 240

import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP


# same as snippets/parallelism/_mesh.py:setup_mesh
def setup_mesh() -> tuple[DeviceMesh, torch.device]:
    """One GPU per rank (NCCL) if every local
    rank can have one, else CPU (gloo)."""
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        # before init: else every rank also allocates on GPU 0
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    # the group first, with its backend: a mesh that creates it
    # picks the machine's accelerator (NCCL) even for "cpu"
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    return mesh, device


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


def make_model() -> nn.Sequential:
    # the same initial weights on every rank and in every copy
    torch.manual_seed(0)
    blocks = [
        nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
        for _ in range(4)
    ]
    return nn.Sequential(*blocks, nn.Linear(32, 8))


# --8<-- [start:shard]
def shard(model: nn.Sequential, mesh, **kwargs) -> nn.Sequential:
    for block in model[:-1]:
        # one all-gather, one reduce-scatter
        fully_shard(block, mesh=mesh, **kwargs)
    # the root: what is left (the last Linear)
    fully_shard(model, mesh=mesh, **kwargs)
    return model


# --8<-- [end:shard]


# --8<-- [start:train]
def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 5):
    # built after fully_shard: the optimizer sees the sharded DTensor parameters
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        # FSDP: reduce-scatter, each rank keeps its shard's mean gradient
        loss.backward()
        # updates the local shard; Adam's state exists for it only
        optimizer.step()
    return optimizer


# --8<-- [end:train]


def local_numel(tensors) -> int:
    return sum(t.to_local().numel() for t in tensors if isinstance(t, DTensor))


def run(mesh: DeviceMesh, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    # the same global batch on every rank: drawn on the CPU, then moved
    torch.manual_seed(1)
    x = torch.randn(64, 32).to(device)
    y = x[:, :8].sin()
    # each rank: its share of the batch
    x, y = x.chunk(world)[rank], y.chunk(world)[rank]

    # --8<-- [start:compare]
    ids = [device.index] if device.type == "cuda" else None
    ddp = DDP(make_model().to(device), device_ids=ids)
    train(ddp, x, y)
    model = shard(make_model(), mesh)
    optimizer = train(model, x, y)

    for (name, p), ref in zip(
        model.named_parameters(), ddp.module.parameters()
    ):
        assert isinstance(p, DTensor) and p.placements[0].is_shard(dim=0), name
        # full_tensor(): all-gather
        assert torch.equal(p.full_tensor(), ref), name
    # --8<-- [end:compare]

    # --8<-- [start:memory]
    # DTensor.numel(): global size
    full = sum(p.numel() for p in model.parameters())
    params = local_numel(model.parameters())
    grads = local_numel(p.grad for p in model.parameters())
    adam = local_numel(
        s for st in optimizer.state.values() for s in st.values()
    )
    assert params * world == full, (params, full)
    assert grads == params and adam == 2 * params  # exp_avg + exp_avg_sq
    if rank == 0:
        print(
            f"parameters: {full} in all, {params} on each of {world} "
            f"ranks; Adam state: {adam} per rank"
        )
    # --8<-- [end:memory]
    mixed_precision(mesh, x, y)
    full_state_dict(model, ddp, rank)


def mixed_precision(mesh: DeviceMesh, x: torch.Tensor, y: torch.Tensor) -> None:
    """Parameters gathered and computed in bf16,
    gradients reduced and stored in fp32."""
    # --8<-- [start:mixed]
    bf16 = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32
    )
    mixed = shard(make_model(), mesh, mp_policy=bf16)
    out = mixed(x)  # parameters all-gathered in bf16, computed in bf16
    nn.functional.mse_loss(out.float(), y).backward()  # reduce-scatter in fp32
    assert out.dtype == torch.bfloat16
    # the shards stay fp32: the optimizer's master weights
    for p in mixed.parameters():
        assert p.dtype == p.grad.dtype == torch.float32
    # --8<-- [end:mixed]


def full_state_dict(model: nn.Module, ddp: DDP, rank: int) -> None:
    """The sharded model's full state dict, on rank 0's
    CPU, loads into a plain model: DDP's weights."""
    # --8<-- [start:save]
    # gathered to rank 0 only, in CPU memory; a collective: every rank calls it
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    if rank == 0:
        plain = make_model()
        # the keys of the plain model: no FSDP prefixes
        plain.load_state_dict(state)
        for a, b in zip(plain.parameters(), ddp.module.parameters()):
            assert torch.equal(a, b.cpu())
        print(
            "FSDP2 == DDP after 5 Adam steps; the full state dict loads "
            "into a plain nn.Module"
        )
    # --8<-- [end:save]


def main() -> None:
    mesh, device = setup_mesh()
    try:
        # every model lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
