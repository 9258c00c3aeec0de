"""Three DTensor errors of the error index, each provoked in a few
lines on two ranks, and the change that makes the code run."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/dtensor_errors.py
# timeout: 180
# output-excerpt: mixed ^aten\.add\.Tensor got mixed
# output-excerpt: mesh ^All operands in aten\.stack
# output-excerpt: strategy ^Operator aten\._cdist_forward

import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import (
    Replicate,
    Shard,
    distribute_tensor,
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


def first_line(step) -> str:
    """The first line of the error `step` raises."""
    try:
        step()
    except (RuntimeError, NotImplementedError) as error:
        return str(error).splitlines()[0]
    raise AssertionError("expected an error")


def run(mesh: DeviceMesh, mesh_2d: DeviceMesh, device: torch.device) -> None:
    full = torch.arange(16.0, device=device).reshape(4, 4)
    rows = distribute_tensor(full, mesh, [Shard(0)])
    messages = []

    # --8<-- [start:mixed]
    bias = torch.ones(4, 4, device=device)  # a plain tensor
    messages.append(first_line(lambda: rows + bias))
    # fix: make it a DTensor too (here: the same on every rank)
    fixed = rows + distribute_tensor(bias, mesh, [Replicate()])
    assert torch.equal(fixed.full_tensor(), full + 1)
    # --8<-- [end:mixed]

    # --8<-- [start:mesh]
    # e.g. one gradient norm on ("dp",), another on ("dp", "tp")
    a = distribute_tensor(torch.ones((), device=device), mesh, [Replicate()])
    b = distribute_tensor(
        torch.ones((), device=device), mesh_2d, [Replicate(), Replicate()]
    )
    messages.append(first_line(lambda: torch.stack([a, b])))
    # fix: resolve each mesh's value first, then combine plain tensors
    both = torch.stack([a.full_tensor(), b.full_tensor()])
    assert torch.equal(both, torch.ones(2, device=device))
    # --8<-- [end:mesh]

    # --8<-- [start:strategy]
    # an operator DTensor has no sharding rule for
    messages.append(first_line(lambda: torch.cdist(rows, rows)))
    # fix: run it on plain tensors (here: the whole matrix on every rank)
    dists = torch.cdist(rows.full_tensor(), rows.full_tensor())
    assert dists.shape == (4, 4)
    # --8<-- [end:strategy]

    expected = [
        "got mixed torch.Tensor and DTensor, need to convert all "
        "torch.Tensor to DTensor before calling distributed operators!",
        "must have the same mesh",
        "does not have a sharding strategy registered",
    ]
    for message, text in zip(messages, expected):
        assert text in message, (message, text)
    if dist.get_rank() == 0:
        print("\n".join(messages))


def main() -> None:
    device = setup()
    mesh = init_device_mesh(device.type, (2,), mesh_dim_names=("dp",))
    mesh_2d = init_device_mesh(device.type, (1, 2), mesh_dim_names=("dp", "tp"))
    try:
        # every DTensor lives and dies in here, before the groups go
        run(mesh, mesh_2d, device)
    finally:
        teardown_mesh(mesh)
        # the second mesh holds its groups too: let go of them
        getattr(mesh_2d, "_pg_registry", {}).clear()


if __name__ == "__main__":
    main()
