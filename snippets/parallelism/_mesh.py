"""Shared by this chapter's programs: a 1-D device mesh
over all the ranks torchrun started, and its teardown."""

# --8<-- [start:mesh]
import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


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


# --8<-- [end:mesh]
