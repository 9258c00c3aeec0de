"""Asynchronous DCP save: training goes on while the
checkpoint is written, on a process group of its own."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/async_checkpoint.py
# output-varies: returned after (\S+ ms)
# output-varies: finished after (\S+ ms); meanwhile training ran (\d+) of

import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import (
    get_state_dict,
    set_state_dict,
)
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS_AFTER_SAVE = 20


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


# --8<-- [start:order]
def issued_in_another_order(device: torch.device) -> tuple[float, float]:
    """Two all-reduces on one group, issued in one
    order on rank 0 and in the other on rank 1."""
    # stands for the training step's gradient all-reduce
    grads = torch.ones(4, device=device)
    # stands for a collective of the checkpoint's save
    plan = torch.full((4,), 1000.0, device=device)
    order = [grads, plan] if dist.get_rank() == 0 else [plan, grads]
    # the group numbers them 0, 1 as issued
    works = [dist.all_reduce(t, async_op=True) for t in order]
    for work in works:
        work.wait()
    return grads[0].item(), plan[0].item()


# --8<-- [end:order]


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 32))


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
) -> None:
    x = torch.randn(64, 32).to(device)  # the CPU generator
    optimizer.zero_grad()
    # DDP all-reduces on the default group
    nn.functional.mse_loss(model(x), x.flip(1)).backward()
    optimizer.step()


def flat(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested state dict, by its
    path: model weights and optimizer momenta."""
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out |= flat(value, f"{prefix}{key}/")
        elif isinstance(value, torch.Tensor):
            out[f"{prefix}{key}"] = value.detach().clone().cpu()
    return out


# --8<-- [start:save]
def train_with_async_save(
    device: torch.device, ckpt_group: dist.ProcessGroup, path: Path
) -> dict:
    torch.manual_seed(0)
    model = DDP(
        make_model().to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(5):
        train_step(model, optimizer, device)

    model_sd, optim_sd = get_state_dict(model, optimizer)
    # for the check below: the state at the call
    at_save = flat({"model": model_sd, "optim": optim_sd})
    start = time.perf_counter()
    future = dcp.async_save(
        {"model": model_sd, "optim": optim_sd},
        checkpoint_id=path,
        process_group=ckpt_group,  # not the group DDP uses: see the page
    )
    # the state is copied by now; the writing goes on
    returned_ms = (time.perf_counter() - start) * 1e3
    steps_while_saving = None
    # the same number of steps on every rank, whatever the save does
    for step in range(STEPS_AFTER_SAVE):
        train_step(model, optimizer, device)
        if steps_while_saving is None and future.done():
            steps_while_saving = step + 1
    # before the next save, and before exit: raises if the save failed
    future.result()
    saved_ms = (time.perf_counter() - start) * 1e3
    live_sd, live_optim_sd = get_state_dict(model, optimizer)
    return {
        "at_save": at_save,
        "live": flat({"model": live_sd, "optim": live_optim_sd}),
        "returned_ms": returned_ms,
        "saved_ms": saved_ms,
        "steps_while_saving": steps_while_saving or STEPS_AFTER_SAVE,
    }


# --8<-- [end:save]


# --8<-- [start:load]
def load_fresh(
    device: torch.device, ckpt_group: dist.ProcessGroup, path: Path
) -> dict[str, torch.Tensor]:
    # other initial weights: everything must come from the checkpoint
    torch.manual_seed(1)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # the layout to load into
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path, process_group=ckpt_group)
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
    )
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return flat({"model": model_sd, "optim": optim_sd})


# --8<-- [end:load]


# --8<-- [start:main]
def main() -> None:
    device = setup()
    rank = dist.get_rank()
    # the save's collectives run here, on CPU
    ckpt_group = dist.new_group(backend="gloo")
    # same on every rank
    path = (
        Path(tempfile.gettempdir())
        / f"async-ckpt-{os.environ['TORCHELASTIC_RUN_ID']}"
    )
    try:
        grads, plan = issued_in_another_order(device)
        result = train_with_async_save(device, ckpt_group, path)
        loaded = load_fresh(device, ckpt_group, path)
        at_save, live = result["at_save"], result["live"]
        # crossed: 1 + 1000 in both, not 2 and 2000
        assert grads == plan == 1001.0, (grads, plan)
        assert loaded.keys() == at_save.keys() and any(
            k.startswith("optim/") for k in loaded
        )
        assert all(torch.equal(loaded[k], at_save[k]) for k in at_save), (
            "checkpoint differs from the saved state"
        )
        moved = sum(not torch.equal(live[k], at_save[k]) for k in at_save)
        assert moved == len(at_save), (
            "training did not change every tensor after the save"
        )
        if rank == 0:
            print(
                "issued in another order on each rank: grads "
                f"{grads:.0f} (expected 2), plan {plan:.0f} (expected "
                "2000)"
            )
            print(f"async_save returned after {result['returned_ms']:.1f} ms")
            print(
                f"the save finished after {result['saved_ms']:.0f} ms; "
                f"meanwhile training ran {result['steps_while_saving']} "
                f"of its next {STEPS_AFTER_SAVE} steps"
            )
            print(
                f"loaded into a fresh model: {len(at_save)} tensors "
                "equal bit for bit to the state at the call"
            )
            print(
                f"the live model has moved on: {moved} of {len(at_save)} "
                "tensors differ from it"
            )
        dist.barrier()  # every rank has loaded before rank 0 deletes the files
    finally:
        if rank == 0:
            shutil.rmtree(path, ignore_errors=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
# --8<-- [end:main]
