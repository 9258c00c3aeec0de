"""Where FSDP x TP puts each row of a weight: _StridedShard on
'dp' records that 'tp' split the rows first."""
# launch: torchrun --standalone --nproc-per-node=4 snippets/large_models/dtensor_strided.py
# timeout: 180

import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
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


ROWS = 16


def run(mesh: DeviceMesh, device: torch.device) -> None:
    # --8<-- [start:parallelize]
    layer = nn.Linear(4, ROWS, bias=False, device=device)
    with torch.no_grad():  # row i holds the number i
        layer.weight.copy_(torch.arange(ROWS).unsqueeze(1).expand(ROWS, 4))
    original = layer.weight.detach().clone()
    # TP first: column-wise splits the rows (output features) over tp
    parallelize_module(layer, mesh["tp"], ColwiseParallel())
    # then FSDP: dim 0 of what tp left on each rank, over dp
    fully_shard(layer, mesh=mesh["dp"])
    weight = layer.weight
    # --8<-- [end:parallelize]

    # --8<-- [start:rows]
    dp, tp = mesh["dp"].get_local_rank(), mesh["tp"].get_local_rank()
    mine = weight.to_local()[:, 0].int().tolist()
    quarter, half = ROWS // 4, ROWS // 2
    # tp took half the rows, then dp half of that half
    strided = list(
        range(tp * half + dp * quarter, tp * half + (dp + 1) * quarter)
    )
    # what (Shard(0), Shard(0)) would mean: dp first, then tp
    plain = list(
        range(dp * half + tp * quarter, dp * half + (tp + 1) * quarter)
    )
    assert mine == strided, (mine, strided)
    assert (mine != plain) == (dp != tp)  # ranks 1 and 2 differ
    assert torch.equal(weight.full_tensor(), original)
    # the same local pieces read as (Shard(0), Shard(0)): rows swapped
    wrong = DTensor.from_local(weight.to_local(), mesh, [Shard(0), Shard(0)])
    assert not torch.equal(wrong.full_tensor(), original)
    # --8<-- [end:rows]

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (dp, tp, mine))
    swapped = wrong.full_tensor()[:, 0].int().tolist()
    if dist.get_rank() == 0:
        names = mesh.mesh_dim_names
        print(f"weight {tuple(weight.shape)}: {weight.placements} on {names}")
        for rank, (d, t, rows) in enumerate(everyone):
            print(f"rank {rank} (dp={d}, tp={t}): rows {rows[0]}-{rows[-1]}")
        print(f"the same pieces as (Shard(0), Shard(0)): rows {swapped}")


def main() -> None:
    device = setup()
    # rank = 2 * dp + tp
    mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("dp", "tp"))
    try:
        # every DTensor lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
