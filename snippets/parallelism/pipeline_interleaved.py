"""Interleaved 1F1B: 2 ranks x 2 virtual stages
each give one process's loss and update."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/parallelism/pipeline_interleaved.py
# timeout: 240

import copy
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B


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


def run(rank: int, ranks: int, device: torch.device) -> None:
    reference = make_model().to(device)
    # the same batch on every rank: drawn on the CPU, then moved
    torch.manual_seed(1)
    x = torch.randn(16, 32).to(device)
    y = x[:, :8].cos()
    loss_fn = nn.MSELoss()

    # --8<-- [start:stages]
    per_rank = 2  # virtual stages per rank
    total = per_rank * ranks  # 4 stages for 2 ranks
    # rank 0: 0, 2; rank 1: 1, 3
    indices = [rank + k * ranks for k in range(per_rank)]
    parts = [stage_layers(copy.deepcopy(reference), i, total) for i in indices]
    stages = [
        PipelineStage(part, stage_index=i, num_stages=total, device=device)
        for part, i in zip(parts, indices)
    ]
    # a list of stages, not one stage: that
    # is what changes from GPipe or 1F1B
    schedule = ScheduleInterleaved1F1B(
        stages, n_microbatches=4, loss_fn=loss_fn
    )
    # --8<-- [end:stages]

    # --8<-- [start:step]
    params = [p for part in parts for p in part.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.1)
    losses = []
    if any(s.is_first for s in stages):
        schedule.step(x)  # rank 0 holds stage 0
    elif any(s.is_last for s in stages):
        # rank 1 holds stage 3, the last
        schedule.step(target=y, losses=losses)
    optimizer.step()
    # --8<-- [end:step]

    # --8<-- [start:check]
    # one process, the whole batch at once
    reference_loss = loss_fn(reference(x), y)
    reference_loss.backward()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    for part, i in zip(parts, indices):
        for p, ref in zip(
            part.parameters(),
            stage_layers(reference, i, total).parameters(),
        ):
            # the same update, stage by stage
            torch.testing.assert_close(p, ref)
    if losses:
        # equal micro-batches: the mean of the means
        loss = torch.stack(losses).mean()
        torch.testing.assert_close(loss, reference_loss)
        print(
            f"{ranks} ranks x {per_rank} stages, {len(losses)} "
            "micro-batches: loss "
            f"{loss.item():.6f} == one process "
            f"{reference_loss.item():.6f}; updated weights equal"
        )
    # --8<-- [end:check]


def main() -> None:
    mesh, device = setup_mesh()
    try:
        run(dist.get_rank(), mesh.size(), device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
