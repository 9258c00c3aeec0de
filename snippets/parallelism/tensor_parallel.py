"""Tensor parallelism: a column- then
row-parallel MLP equals the unsharded one."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/parallelism/tensor_parallel.py
# timeout: 240

import copy
import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)


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


class MLP(nn.Module):
    def __init__(self, dim: int = 16, hidden: int = 64):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.gelu(self.up(x)))


def run(mesh: DeviceMesh, device: torch.device) -> None:
    world = mesh.size()
    torch.manual_seed(0)  # the same weights and inputs on every rank
    reference = MLP().to(device)
    # drawn on the CPU, then moved: the same on any GPU
    x = torch.randn(8, 16).to(device).requires_grad_()

    # --8<-- [start:parallelize]
    model = parallelize_module(
        copy.deepcopy(reference),
        mesh,
        # column, then row
        {"up": ColwiseParallel(), "down": RowwiseParallel()},
    )
    # each rank holds a slice of up's output
    # features and of down's input features
    assert model.up.weight.to_local().shape == (64 // world, 16)
    assert model.down.weight.to_local().shape == (16, 64 // world)
    # --8<-- [end:parallelize]

    # --8<-- [start:check]
    x_tp = x.detach().clone().requires_grad_()
    with CommDebugMode() as forward_comms:
        # a plain tensor: RowwiseParallel all-reduced the partial sums
        out = model(x_tp)
    with CommDebugMode() as backward_comms:
        out.sum().backward()  # ColwiseParallel all-reduces the input's gradient
    assert (
        forward_comms.get_total_counts()
        == backward_comms.get_total_counts()
        == 1
    )

    reference(x).sum().backward()
    # same outputs as the unsharded MLP
    torch.testing.assert_close(out, reference(x))
    torch.testing.assert_close(x_tp.grad, x.grad)  # same gradient for the input
    for (name, p), ref in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.full_tensor(), ref.grad, msg=name)
    # --8<-- [end:check]
    if dist.get_rank() == 0:
        print(
            f"TP on {world} ranks == unsharded MLP (outputs and "
            "gradients); collectives: "
            f"{forward_comms.get_total_counts()} in forward, "
            f"{backward_comms.get_total_counts()} in backward"
        )


def main() -> None:
    mesh, device = setup_mesh()
    try:
        # every model lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
