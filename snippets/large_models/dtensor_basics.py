"""DTensor on two ranks: Shard, Replicate and Partial, and the
collective behind every change of placement, counted."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/dtensor_basics.py
# timeout: 180

import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import (
    DTensor,
    Partial,
    Replicate,
    Shard,
    distribute_tensor,
)
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


# --8<-- [start:count]
def collectives(step) -> tuple[object, dict[str, int]]:
    """Run `step`; return its result and the collectives
    it launched on this rank, by name."""
    with CommDebugMode() as comms:
        out = step()
    counts = {
        str(op).split(".")[-1]: n for op, n in comms.get_comm_counts().items()
    }
    return out, counts


# --8<-- [end:count]


def on_every_rank(t: torch.Tensor) -> list[list]:
    """Every rank's local tensor, as lists, on every rank."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, t.cpu().tolist())
    return everyone


def placements(mesh: DeviceMesh, device: torch.device):
    """distribute_tensor and from_local; returns the DTensors and
    what the page prints."""
    rank = dist.get_rank()
    # --8<-- [start:distribute]
    # the same global tensor on every rank
    full = torch.arange(16.0, device=device).reshape(4, 4)
    # rank 0's copy is cut into pieces and scattered
    rows, counts = collectives(
        lambda: distribute_tensor(full, mesh, [Shard(0)])
    )
    assert counts == {"scatter_": 1}, counts
    assert rows.to_local().shape == (2, 4) and rows.shape == (4, 4)
    # rank 0's copy is broadcast
    copy, counts = collectives(
        lambda: distribute_tensor(full, mesh, [Replicate()])
    )
    assert counts == {"broadcast_": 1}, counts
    # --8<-- [end:distribute]

    # --8<-- [start:from_local]
    # each rank brings its own piece: no communication, and no check
    mine = torch.full((2, 4), float(rank), device=device)
    built, counts = collectives(
        lambda: DTensor.from_local(mine, mesh, [Shard(0)])
    )
    assert counts == {} and built.shape == (4, 4)  # 2 rows x 2 ranks
    assert torch.equal(built.to_local(), mine)
    # rank r's value (r + 1) * full, pending: the sum is the value
    pending = DTensor.from_local(full * (rank + 1), mesh, [Partial()])
    # --8<-- [end:from_local]
    held = on_every_rank(rows.to_local().int())
    line = "distribute_tensor(arange(16).reshape(4, 4)): Shard(0) scatter_, "
    line += "Replicate() broadcast_\n" + "; ".join(
        f"rank {r} holds {piece}" for r, piece in enumerate(held)
    )
    return full, rows, copy, pending, line


def redistributions(mesh, device, rows, copy, pending) -> list[str]:
    lines = []
    # --8<-- [start:redistribute]
    gather = "all_gather_into_tensor"
    # CUDA: an all-to-all; a CPU mesh: an all-gather, then a chunk
    alltoall = "shard_dim_alltoall" if device.type == "cuda" else gather
    changes = [
        ("Shard(0)    -> Replicate()", rows, Replicate(), gather),
        ("Partial()   -> Replicate()", pending, Replicate(), "all_reduce"),
        ("Partial()   -> Shard(0)", pending, Shard(0), "reduce_scatter_tensor"),
        ("Replicate() -> Shard(0)", copy, Shard(0), None),
        ("Shard(0)    -> Shard(1)", rows, Shard(1), alltoall),
    ]
    for label, source, target, expected in changes:
        moved, counts = collectives(
            lambda s=source, t=target: s.redistribute(mesh, [t])
        )
        assert counts == ({expected: 1} if expected else {}), (label, counts)
        # the global value never changes, only where it lives
        assert torch.equal(moved.full_tensor(), source.full_tensor()), label
        lines.append(f"{label:27}: {expected or 'no communication'}")
    # --8<-- [end:redistribute]
    return lines


def partials(mesh, full, pending) -> list[str]:
    rank = dist.get_rank()
    # --8<-- [start:partial]
    assert torch.equal(pending.to_local(), full * (rank + 1))  # not summed
    total, counts = collectives(pending.full_tensor)
    assert torch.equal(total, full * 3) and counts == {"all_reduce": 1}
    # a row-parallel product leaves its result pending as well
    x = distribute_tensor(full, mesh, [Shard(1)])  # columns 0-1 | 2-3
    w = distribute_tensor(full, mesh, [Shard(0)])  # rows 0-1 | 2-3
    product, counts = collectives(lambda: x @ w)
    assert product.placements == (Partial(),) and counts == {}
    torch.testing.assert_close(product.full_tensor(), full @ full)
    # --8<-- [end:partial]
    return [
        f"Partial(): to_local() on rank {rank}: {pending.to_local()[0, 1]:.0f} "
        f"at [0, 1]; full_tensor(): {total[0, 1]:.0f} (all_reduce)",
        f"Shard(1) @ Shard(0): {product.placements}, no communication",
    ]


def run(mesh: DeviceMesh, device: torch.device) -> None:
    full, rows, copy, pending, line = placements(mesh, device)
    lines = [line]
    lines += redistributions(mesh, device, rows, copy, pending)
    lines += partials(mesh, full, pending)
    if dist.get_rank() == 0:
        print("\n".join(lines))


def main() -> None:
    device = setup()
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    try:
        # every DTensor lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
