"""Zero-bubble pipeline schedules (interleaved ZB1P, ZBV, DualPipeV) on 2
ranks give one process's loss and gradients."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/pipeline_zero_bubble.py
# timeout: 240

import copy
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import (
    PipelineStage,
    ScheduleDualPipeV,
    ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble,
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


# --8<-- [start:layouts]
def loop_stages(rank: int, ranks: int) -> list[int]:
    """Interleaved: rank r holds stages r, r + p, ... (0, 2 | 1, 3)."""
    return [rank, rank + ranks]


def v_stages(rank: int, ranks: int) -> list[int]:
    """V shape: rank r holds stage r and stage 2p - 1 - r (0, 3 | 1, 2),
    so rank 0 holds both the first and the last stage."""
    return [rank, 2 * ranks - 1 - rank]


SCHEDULES = [
    (ScheduleInterleavedZeroBubble, loop_stages),
    (ScheduleZBVZeroBubble, v_stages),
    (ScheduleDualPipeV, v_stages),
]
# --8<-- [end:layouts]


# --8<-- [start:guard]
def v_runs_here() -> bool:
    """torch 2.10 sends a tensor between neighbouring stages at the first
    step, also when the V puts both on one rank; gloo cannot send to its
    own rank. NCCL can, and torch 2.13 no longer sends it."""
    return dist.get_backend() != "gloo" or torch.__version__ >= "2.13"


# --8<-- [end:guard]


# --8<-- [start:step]
def pipeline_step(schedule_class, layout, reference, x, y, device):
    """One step of a fresh copy of the model under this schedule:
    this rank's stages, their parameters and the losses it saw."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    indices = layout(rank, ranks)
    total = 2 * ranks  # 2 stages per rank
    parts = [stage_layers(copy.deepcopy(reference), i, total) for i in indices]
    stages = [
        PipelineStage(part, stage_index=i, num_stages=total, device=device)
        for part, i in zip(parts, indices)
    ]
    schedule = schedule_class(stages, n_microbatches=4, loss_fn=nn.MSELoss())
    losses = []
    first = any(s.is_first for s in stages)
    last = any(s.is_last for s in stages)
    if first and last:  # the V: rank 0 feeds the batch and gets the loss
        schedule.step(x, target=y, losses=losses)
    elif first:
        schedule.step(x)
    elif last:
        schedule.step(target=y, losses=losses)
    else:
        schedule.step()
    return indices, parts, losses


# --8<-- [end:step]


def check(name, indices, parts, losses, reference, total, ref_loss):
    # --8<-- [start:check]
    for part, i in zip(parts, indices):
        mine = stage_layers(reference, i, total).parameters()
        for p, ref in zip(part.parameters(), mine):
            # gradients of the mean loss, stage by stage
            torch.testing.assert_close(p.grad, ref.grad)
    if losses:
        # equal micro-batches: the mean of the means
        loss = torch.stack(losses).mean()
        torch.testing.assert_close(loss, ref_loss)
        print(
            f"{name:<30} rank {dist.get_rank()}, stages {indices}: "
            f"loss {loss.item():.6f}",
            flush=True,
        )
    # --8<-- [end:check]


def run(device: torch.device) -> None:
    reference = make_model().to(device)
    # the same batch on every rank: drawn on the CPU, then moved
    torch.manual_seed(1)
    x = torch.randn(16, 32).to(device)
    y = x[:, :8].cos()
    # one process, the whole batch at once
    ref_loss = nn.MSELoss()(reference(x), y)
    ref_loss.backward()
    total = 2 * dist.get_world_size()
    for schedule_class, layout in SCHEDULES:
        if layout is v_stages and not v_runs_here():
            if dist.get_rank() == 0:
                print(f"{schedule_class.__name__}: not on gloo before 2.13")
            continue
        indices, parts, losses = pipeline_step(
            schedule_class, layout, reference, x, y, device
        )
        check(
            schedule_class.__name__,
            indices,
            parts,
            losses,
            reference,
            total,
            ref_loss,
        )
        dist.barrier()  # one schedule's lines before the next's
    if dist.get_rank() == 0:
        print(
            f"one process: loss {ref_loss.item():.6f}; "
            "every stage's gradients equal"
        )


def main() -> None:
    device = setup()
    try:
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
