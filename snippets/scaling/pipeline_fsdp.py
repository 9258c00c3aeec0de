"""Pipeline parallelism (interleaved zero bubble) combined with FSDP2 on a
2 x 2 mesh: the same loss and gradients as one process on the whole batch."""
# launch: torchrun --standalone --nproc-per-node=4 snippets/scaling/pipeline_fsdp.py
# timeout: 240

import copy
import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import (
    PipelineStage,
    ScheduleInterleavedZeroBubble,
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


# same as snippets/parallelism/pipeline.py:make_model
def make_model() -> nn.Sequential:
    # the same full model on every rank: each keeps only its stage
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4)]
    return nn.Sequential(*layers, nn.Linear(32, 8))


# same as snippets/parallelism/pipeline.py:stage_layers
def stage_layers(model: nn.Sequential, rank: int, stages: int) -> nn.Sequential:
    """Split by hand: stage r holds a contiguous
    run of layers, [r*n/s, (r+1)*n/s)."""
    n = len(model)
    return model[rank * n // stages : (rank + 1) * n // stages]


# --8<-- [start:mesh]
def make_mesh(device: torch.device) -> DeviceMesh:
    # the group exists (setup): the mesh only splits it. Rows are
    # pipeline ranks, columns FSDP ranks: ranks 0, 1 hold stages 0 and 2
    # sharded between them, ranks 2, 3 stages 1 and 3
    return init_device_mesh(device.type, (2, 2), mesh_dim_names=("pp", "dp"))


# --8<-- [end:mesh]


# --8<-- [start:stages]
def build(reference: nn.Sequential, mesh: DeviceMesh, device: torch.device):
    pp = mesh["pp"]
    rank, ranks = pp.get_local_rank(), pp.size()
    indices = [rank, rank + ranks]  # 0, 2 | 1, 3
    parts = []
    for i in indices:
        part = stage_layers(copy.deepcopy(reference), i, 2 * ranks)
        fully_shard(part, mesh=mesh["dp"])  # shard the stage over dp
        parts.append(part)
    stages = [
        PipelineStage(
            part,
            stage_index=i,
            num_stages=2 * ranks,
            device=device,
            group=pp.get_group(),  # sends and receives along the pp rows
        )
        for part, i in zip(parts, indices)
    ]
    schedule = ScheduleInterleavedZeroBubble(
        stages, n_microbatches=4, loss_fn=nn.MSELoss()
    )
    return indices, parts, stages, schedule


# --8<-- [end:stages]


def run(mesh: DeviceMesh, device: torch.device) -> None:
    reference = make_model().to(device)
    # the global batch, drawn on the CPU: the same on every rank
    torch.manual_seed(1)
    x = torch.randn(16, 32)
    y = x[:, :8].cos()
    # --8<-- [start:step]
    dp = mesh["dp"]
    mine = slice(8 * dp.get_local_rank(), 8 * dp.get_local_rank() + 8)
    indices, parts, stages, schedule = build(reference, mesh, device)
    losses = []
    if stages[0].is_first:  # pp rank 0: my dp shard of the inputs
        schedule.step(x[mine].to(device))
    else:  # pp rank 1 holds the last stage: my dp shard of the targets
        schedule.step(target=y[mine].to(device), losses=losses)
    # --8<-- [end:step]
    check(reference, x.to(device), y.to(device), indices, parts, losses, dp)


def check(reference, x, y, indices, parts, losses, dp) -> None:
    # --8<-- [start:check]
    # one process, the whole batch at once
    ref_loss = nn.MSELoss()(reference(x), y)
    ref_loss.backward()
    for part, i in zip(parts, indices):
        for p, ref in zip(
            part.parameters(), stage_layers(reference, i, 4).parameters()
        ):
            # FSDP's shards of the gradient, gathered: one process's
            torch.testing.assert_close(p.grad.full_tensor(), ref.grad)
    if losses:
        # the mean over my micro-batches, then over the dp ranks
        loss = torch.stack(losses).mean()
        dist.all_reduce(loss, group=dp.get_group())
        torch.testing.assert_close(loss / dp.size(), ref_loss)
        if dp.get_local_rank() == 0:
            print(
                f"pp 2 x dp 2, ScheduleInterleavedZeroBubble, stages {indices}"
            )
            print(f"  on ranks 2, 3: loss {(loss / dp.size()).item():.6f}")
            print("  == one process; gradients equal on every rank", flush=True)
    # --8<-- [end:check]


def main() -> None:
    device = setup()
    mesh = make_mesh(device)
    try:
        # every model lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
