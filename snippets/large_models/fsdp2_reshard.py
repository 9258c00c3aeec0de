"""reshard_after_forward as True, an int and False: what each block
holds from its forward to its backward, and what the backward
all-gathers in exchange."""
# launch: torchrun --standalone --nproc-per-node=4 snippets/large_models/fsdp2_reshard.py
# holds-group-at-exit: reshard_after_forward=2 makes FSDP2 build a mesh of its own, which DTensor's caches keep with its groups on torch 2.15.0 (debugging page)
# timeout: 180

import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode


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


def make_model() -> nn.Sequential:
    # the same initial weights on every rank and in every copy
    torch.manual_seed(0)
    blocks = [
        nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
        for _ in range(3)
    ]
    return nn.Sequential(*blocks, nn.Linear(64, 4))


# --8<-- [start:shard]
def shard(model: nn.Sequential, mesh: DeviceMesh, reshard) -> nn.Sequential:
    for block in model[:-1]:
        # True: back to 1/N; an int k: to 1/k; False: stay whole
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh)  # the root keeps the default
    return model


# --8<-- [end:shard]


# --8<-- [start:held]
class GatherSizes(TorchDispatchMode):
    """How many ranks each all-gather gathers from: the
    size of its output over the size of its input."""

    def __init__(self):
        super().__init__()
        self.groups: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.c10d._allgather_base_.default:
            output, shard_in = args[0], args[1]
            self.groups.append(output.numel() // shard_in.numel())
        return func(*args, **(kwargs or {}))


def local_storages(module: nn.Module) -> dict[int, int]:
    """The storages behind the parameters now registered
    to `module`: data pointer -> bytes."""
    tensors = [
        p.to_local() if isinstance(p, DTensor) else p
        for p in module.parameters()
    ]
    return {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in tensors
    }


def forward_then_backward(model: nn.Sequential, x: torch.Tensor):
    """What block 0 holds between its forward and its backward,
    beyond its shards, and the sizes of the backward's all-gathers."""
    shards = local_storages(model[0])  # before the forward: the shards
    out = model(x)
    held = local_storages(model[0])  # what the forward left registered
    extra = sum(n for ptr, n in held.items() if ptr not in shards)
    weight = model[0][0].weight
    layout = (
        f"{weight.placements} on a {tuple(weight.device_mesh.shape)} mesh"
        if isinstance(weight, DTensor)
        else "a plain tensor"
    )
    with GatherSizes() as gathers:
        out.sum().backward()
    return extra, layout, gathers.groups


# --8<-- [end:held]


# --8<-- [start:formula]
def extra_bytes(numel: int, reshard, bytes_per: int = 4) -> float:
    """Bytes of one block held from forward to backward on
    top of its shard, for reshard_after_forward=`reshard`."""
    if reshard is True:
        return 0  # only the shard, which every rank keeps anyway
    if reshard is False:
        return bytes_per * numel  # the whole block
    return bytes_per * numel / reshard  # a 1/k slice of it


# --8<-- [end:formula]


def run(mesh: DeviceMesh, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1 + rank)  # this rank's batch
    x = torch.randn(8, 64, device=device)

    # --8<-- [start:compare]
    results, grads = {}, {}
    for reshard in (True, 2, False):
        model = shard(make_model().to(device), mesh, reshard)
        results[reshard] = forward_then_backward(model, x)
        grads[reshard] = [p.grad.full_tensor() for p in model.parameters()]
    numel = sum(p.numel() for p in model[0].parameters())
    for reshard, (extra, _, groups) in results.items():
        assert extra == extra_bytes(numel, reshard), (reshard, extra)
        # the backward re-gathers each block, over k ranks, or not at all
        want = {True: [world] * 3, 2: [2] * 3, False: []}[reshard]
        assert groups == want, (reshard, groups)
        for a, b in zip(grads[reshard], grads[True]):
            assert torch.equal(a, b), "the same gradients whatever the setting"
    # --8<-- [end:compare]

    if rank == 0:
        report(results, numel, world)


def report(results, numel: int, world: int) -> None:
    print(
        f"one block: {numel:,} parameters, {4 * numel:,} B in fp32; "
        f"its shard on each of {world} ranks: {4 * numel // world:,} B"
    )
    print("reshard_after_forward: block 0 beyond its shard, then backward")
    for reshard, (extra, layout, groups) in results.items():
        gathers = (
            f"{len(groups)} all-gathers over {groups[0]} ranks"
            if groups
            else "no all-gather"
        )
        print(f"  {reshard!s:5}: +{extra:>7,} B, {layout}; {gathers}")
    # Llama 2 7B: 32 blocks of 202M parameters, gathered in bf16
    blocks, unit, ranks = 32, 202e6, 64
    print(
        f"{blocks} blocks of 202M parameters in bf16, {ranks} ranks, per rank:"
    )
    for reshard in (True, 8, False):
        held = blocks * extra_bytes(int(unit), reshard, bytes_per=2)
        print(
            f"  {reshard!s:5}: +{held / 1e9:4.1f} GB at the end of the forward"
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
