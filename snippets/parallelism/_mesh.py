"""Shared by this chapter's programs: a 1-D device mesh over all the ranks torchrun started."""

# --8<-- [start:mesh]
import os

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


def setup_mesh() -> tuple[DeviceMesh, torch.device]:
    """One GPU per rank (NCCL) if every local rank can have one, else CPU (gloo)."""
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)  # before the mesh: it creates the process group
    else:
        device = torch.device("cpu")
    # init_device_mesh calls init_process_group() when there is no process group yet
    mesh = init_device_mesh(device.type, (int(os.environ["WORLD_SIZE"]),))
    return mesh, device


# --8<-- [end:mesh]
