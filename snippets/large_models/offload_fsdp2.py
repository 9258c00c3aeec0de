"""FSDP2 with CPUOffloadPolicy: parameters, gradients
and Adam state in pinned host memory, the optimizer step
on the CPU; the GPU keeps only what it computes with."""
# launch: torchrun --standalone --nproc-per-node=1 snippets/large_models/offload_fsdp2.py
# requires: cuda
# timeout: 180
# output-varies: peak ([\d,]+) MB
# output-varies: ([\d.]+) ms a step
# output-varies: max difference (\S+)

import gc
import os
import time

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard


def setup_mesh() -> tuple[DeviceMesh, torch.device]:
    """One GPU per rank, NCCL: offloading moves
    state off a GPU, so there must be one."""
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    # before init: else every rank also allocates on GPU 0
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),)), device


def make_model() -> nn.Sequential:
    torch.manual_seed(0)  # the same weights for both runs
    return nn.Sequential(
        *[
            nn.Sequential(
                nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)
            )
            for _ in range(8)
        ]
    )


# --8<-- [start:shard]
def shard(
    model: nn.Sequential, mesh: DeviceMesh, offload: bool
) -> nn.Sequential:
    # pinned (page-locked) host memory: copies to and from the GPU
    # run asynchronously and faster. OffloadPolicy(): no offload
    policy = CPUOffloadPolicy(pin_memory=True) if offload else OffloadPolicy()
    for block in model:
        fully_shard(block, mesh=mesh, offload_policy=policy)
    fully_shard(model, mesh=mesh, offload_policy=policy)
    return model


# --8<-- [end:shard]


# --8<-- [start:step]
def step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
) -> None:
    # each block: its shard copied to the GPU, then all-gathered
    loss = nn.functional.mse_loss(model(x), y)
    # again for backward; each reduced gradient
    # shard is copied back to host memory
    loss.backward()
    optimizer.step()  # with offload: Adam runs on the CPU, over the host copies
    optimizer.zero_grad()


# --8<-- [end:step]


def state_tensors(
    model: nn.Module, optimizer: torch.optim.Optimizer
) -> list[torch.Tensor]:
    """This rank's parameter shards, gradient shards and
    Adam states (exp_avg, exp_avg_sq; step stays on CPU)."""
    params = [p.to_local() for p in model.parameters()]
    grads = [
        p.grad.to_local() for p in model.parameters() if p.grad is not None
    ]
    states = [
        t.to_local()
        for s in optimizer.state.values()
        for k, t in s.items()
        if k != "step"
    ]
    return params + grads + states


def measure(
    offload: bool, mesh: DeviceMesh, x: torch.Tensor, y: torch.Tensor
) -> tuple[int, int, float, dict]:
    """Bytes of training state on the GPU, the GPU's peak during a step,
    ms a step, and the full state dict after four steps (rank 0)."""
    model = shard(make_model(), mesh, offload)
    # after fully_shard, as always
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step(model, optimizer, x, y)  # warm-up: Adam's state now exists
    # and gradients, until zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    tensors = state_tensors(model, optimizer)
    on_gpu = sum(t.numel() * t.element_size() for t in tensors if t.is_cuda)
    if offload:
        assert all(t.device.type == "cpu" for t in tensors), (
            "offloaded: shards, gradients, Adam state"
        )
        assert all(p.to_local().is_pinned() for p in model.parameters())
    optimizer.zero_grad()

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(3):
        step(model, optimizer, x, y)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) / 3 * 1e3
    # rank 0 gets it, others {}
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # copes with shards that live on the host
    final = get_model_state_dict(model, options=full)
    peak = torch.cuda.max_memory_allocated()
    del model, optimizer, tensors
    # FSDP modules are reference cycles: free
    # this run before measuring the next
    gc.collect()
    return on_gpu, peak, ms, final


def run(mesh: DeviceMesh, device: torch.device) -> None:
    torch.manual_seed(1)
    # drawn on the CPU: the same on every rank, whatever its GPU
    x, y = torch.randn(256, 1024).to(device), torch.randn(256, 1024).to(device)
    results = {
        offload: measure(offload, mesh, x, y) for offload in (False, True)
    }
    with torch.device("meta"):  # shapes only, to count the parameters
        numel = sum(p.numel() for p in make_model().parameters())
    world = dist.get_world_size()
    assert results[False][0] == 4 * numel * 4 // world, (
        "params + grads + exp_avg + exp_avg_sq, fp32, on the GPU"
    )
    assert results[True][0] == 0, (
        "with offload, none of the training state is on the GPU"
    )
    assert results[True][1] < results[False][1], "offload lowers the GPU's peak"
    if dist.get_rank() != 0:
        return
    offloaded, reference = results[True][3], results[False][3]
    diff = max(
        (offloaded[k] - reference[k]).abs().max().item() for k in reference
    )
    # Adam on the CPU may round a little differently from Adam on the GPU
    assert diff < 1e-5, diff
    print(
        f"{numel:,} parameters, {world} rank(s): training state "
        f"{16 * numel // world:,} bytes per rank"
    )
    for offload, (on_gpu, peak, ms, _) in results.items():
        label = "CPUOffloadPolicy" if offload else "no offload      "
        print(
            f"{label}: state on the GPU {on_gpu:,} bytes, peak "
            f"{peak // 2**20:,} MB, {ms:.1f} ms a step"
        )
    print(
        f"parameters after 4 steps, offload vs not: max difference {diff:.1e}"
    )


def main() -> None:
    mesh, device = setup_mesh()
    try:
        # every model lives and dies in here, before the group goes
        run(mesh, device)
    finally:
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
