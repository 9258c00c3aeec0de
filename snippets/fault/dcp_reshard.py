"""Save a sharded checkpoint with DCP from 2 FSDP2
ranks, resume it sharded, and load it in one process."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/fault/dcp_reshard.py

import gc
import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import (
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard


def init_mesh() -> DeviceMesh:
    """A 1-D mesh over all ranks: CUDA (NCCL) if every
    local rank gets a GPU, else CPU (gloo)."""
    local_rank = int(os.environ["LOCAL_RANK"])  # set by torchrun
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", local_rank)
        # before init: else every rank also allocates on GPU 0
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    # the group first, with its backend: a mesh that creates it
    # picks the machine's accelerator (NCCL) even for "cpu"
    return init_device_mesh(device.type, (dist.get_world_size(),))


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


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8))


def sharded_model(
    mesh: DeviceMesh, seed: int
) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    # every parameter becomes a DTensor
    model = fully_shard(make_model().to(mesh.device_type), mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


# --8<-- [start:save]
def save_sharded(
    model: nn.Module, optimizer: torch.optim.Optimizer, path: Path
) -> None:
    # sharded: DTensors, nothing gathered
    model_sd, optim_sd = get_state_dict(model, optimizer)
    # collective: every rank calls it
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)


# --8<-- [end:save]


# --8<-- [start:resume]
def load_sharded(
    model: nn.Module, optimizer: torch.optim.Optimizer, path: Path
) -> None:
    # the layout to load into
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    # in place: each rank reads only its own shards
    dcp.load(state, checkpoint_id=path)
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
    )


# --8<-- [end:resume]


# --8<-- [start:one_process]
def load_unsharded(path: Path) -> nn.Module:
    """World size 1: a plain model, no process group needed."""
    model = make_model()
    state = {"model": model.state_dict()}
    # DCP reshards 2 shards into 1 full tensor
    dcp.load(state, checkpoint_id=path, no_dist=True)
    model.load_state_dict(state["model"])
    return model


# --8<-- [end:one_process]


# --8<-- [start:main]
def run(mesh: DeviceMesh, path: Path) -> None:
    rank = dist.get_rank()
    model, optimizer = sharded_model(mesh, seed=0)
    # drawn on the CPU, then moved: the same on any GPU
    model(torch.randn(4, 16).to(mesh.device_type)).sum().backward()
    # AdamW now has sharded state (exp_avg, exp_avg_sq) to save too
    optimizer.step()
    save_sharded(model, optimizer, path)
    # all-gather, for the checks
    full = {k: p.full_tensor().cpu() for k, p in model.state_dict().items()}

    # different initial weights
    resumed, resumed_opt = sharded_model(mesh, seed=1)
    load_sharded(resumed, resumed_opt, path)
    for k, p in resumed.state_dict().items():
        assert torch.equal(p.to_local(), model.state_dict()[k].to_local()), (
            f"rank {rank}: {k} not restored"
        )
    assert torch.equal(
        resumed_opt.state_dict()["state"][0]["exp_avg"].to_local(),
        optimizer.state_dict()["state"][0]["exp_avg"].to_local(),
    )

    dist.barrier()  # every rank has written its shard
    if rank == 0:
        print("checkpoint files:", sorted(f.name for f in path.iterdir()))
        plain = load_unsharded(path)
        for k, t in plain.state_dict().items():
            assert torch.equal(t, full[k]), (
                f"{k}: 1-process load differs from the 2-rank model"
            )
        # one torch.save file for DCP-unaware tools
        dcp_to_torch_save(path, path / "full.pt")
        flat = torch.load(path / "full.pt", weights_only=True)
        assert all(torch.equal(flat["model"][k], full[k]) for k in full)
        print(
            "saved on 2 ranks, loaded on 2 ranks and on 1 process: "
            f"{len(full)} tensors equal"
        )
    dist.barrier()


def main() -> None:
    mesh = init_mesh()
    # same on every rank
    path = (
        Path(tempfile.gettempdir()) / f"dcp-{os.environ['TORCHELASTIC_RUN_ID']}"
    )
    try:
        # every sharded model lives and dies in here, before the groups go
        run(mesh, path)
    finally:
        if dist.get_rank() == 0:
            shutil.rmtree(path, ignore_errors=True)
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
# --8<-- [end:main]
