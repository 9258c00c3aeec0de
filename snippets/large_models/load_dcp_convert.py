"""A sharded DCP checkpoint to one torch.save file and
back, then resumed on 2 ranks: the same tensors throughout."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/load_dcp_convert.py

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
from torch.distributed.checkpoint.format_utils import (
    dcp_to_torch_save,
    torch_save_to_dcp,
)
from torch.distributed.checkpoint.state_dict import (
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard


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
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8))


def sharded(
    mesh: DeviceMesh, device: torch.device, seed: int
) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = make_model().to(device)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def local(state: dict) -> dict:
    """This rank's pieces of a (nested) state
    dict: DTensors by their local shard."""
    if isinstance(state, dict):
        return {k: local(v) for k, v in state.items()}
    return state.to_local() if hasattr(state, "to_local") else state


def equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


# --8<-- [start:convert]
def to_one_file_and_back(
    sharded_dir: Path, file: Path, again_dir: Path
) -> dict:
    """One process, no process group: what a
    converter script on a single machine does."""
    # every shard read and stitched: needs memory for the whole state
    dcp_to_torch_save(sharded_dir, file)
    # {"model": {...}, "optim": {...}}, plain full tensors
    full = torch.load(file, weights_only=True)
    # torch.load(weights_only=False) inside: trusted files only
    torch_save_to_dcp(file, again_dir)
    return full


# --8<-- [end:convert]


def train_and_save(model, optimizer, x: torch.Tensor, root: Path) -> dict:
    model(x).sum().backward()
    # AdamW now has state (exp_avg, exp_avg_sq, step) to carry along
    optimizer.step()
    # --8<-- [start:save]
    # sharded DTensors, keyed by parameter name
    model_sd, optim_sd = get_state_dict(model, optimizer)
    # each rank its shards
    dcp.save(
        {"model": model_sd, "optim": optim_sd}, checkpoint_id=root / "sharded"
    )
    # --8<-- [end:save]
    return {"model": model_sd, "optim": optim_sd}


def convert_on_rank0(saved: dict, root: Path) -> None:
    # all-gathered on every rank (a collective), compared on rank 0
    gathered = {k: v.full_tensor().cpu() for k, v in saved["model"].items()}
    if dist.get_rank() != 0:
        return
    full = to_one_file_and_back(
        root / "sharded", root / "full.pt", root / "sharded-again"
    )
    plain = make_model()
    # the file serves a single-process model as it is
    plain.load_state_dict(full["model"])
    for key, tensor in gathered.items():
        assert torch.equal(plain.state_dict()[key], tensor), key
    for name in ("sharded", "sharded-again"):
        files = sorted(f.name for f in (root / name).iterdir())
        print(f"{name}/: {', '.join(files)}")
    tensors = sum(len(v) for v in full["optim"]["state"].values())
    print(
        f"full.pt: {len(full['model'])} model tensors, {tensors} "
        "optimizer tensors, loads into a plain model"
    )


def resume(mesh, device, root: Path) -> tuple[nn.Module, dict]:
    # --8<-- [start:resume]
    # other initial weights, no optimizer state yet
    resumed, resumed_optimizer = sharded(mesh, device, seed=1)
    # the layout to load into
    model_sd, optim_sd = get_state_dict(resumed, resumed_optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    # each rank reads the slices of its own shards
    dcp.load(state, checkpoint_id=root / "sharded-again")
    set_state_dict(
        resumed,
        resumed_optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
    )
    # --8<-- [end:resume]
    return resumed, state


def run(mesh: DeviceMesh, device: torch.device, root: Path) -> None:
    model, optimizer = sharded(mesh, device, seed=0)
    x = torch.randn(4, 16).to(device)  # drawn on the CPU, as every rank does
    saved = train_and_save(model, optimizer, x, root)
    before = local({"model": saved["model"], "optim": saved["optim"]["state"]})
    convert_on_rank0(saved, root)
    dist.barrier()  # the converted checkpoint exists

    resumed, state = resume(mesh, device, root)
    after = local({"model": state["model"], "optim": state["optim"]["state"]})
    rank = dist.get_rank()
    assert equal(after, before), f"rank {rank}: the round trip changed a tensor"
    assert torch.equal(resumed(x), model(x)), "the same forward"
    dist.barrier()  # every rank has checked its shards
    if rank == 0:
        print(
            "DCP (2 ranks) -> full.pt -> DCP (1 file) -> 2 ranks: every "
            "shard and Adam state bit-identical"
        )


def main() -> None:
    device = setup()  # the process group first, with its backend
    # 1-D: every rank holds a shard
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    # same on all ranks
    root = (
        Path(tempfile.gettempdir())
        / f"dcp-convert-{os.environ['TORCHELASTIC_RUN_ID']}"
    )
    try:
        # every sharded model lives and dies in here, before the groups go
        run(mesh, device, root)
    finally:
        if dist.get_rank() == 0:
            shutil.rmtree(root, ignore_errors=True)
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
