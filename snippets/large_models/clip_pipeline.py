"""Gradient clipping in a pipeline: a stage's own norm
is wrong until the stages sum their squared norms."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/clip_pipeline.py
# timeout: 240

import copy
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe


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


MAX_NORM = 0.1


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


# --8<-- [start:clip]
def clip_grad_norm_pp(
    parameters, max_norm: float, pp_group=None
) -> torch.Tensor:
    """Clip by the norm of the whole model when each
    pipeline stage holds only its own parameters."""
    parameters = list(parameters)
    # this stage only
    norm = torch.nn.utils.get_total_norm([p.grad for p in parameters])
    squared = norm**2
    # + the other stages' squares
    dist.all_reduce(squared, op=dist.ReduceOp.SUM, group=pp_group)
    total = squared.sqrt()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total)
    return total


# --8<-- [end:clip]


def run(device: torch.device) -> None:
    rank, stages = dist.get_rank(), dist.get_world_size()  # one stage per rank
    reference = make_model().to(device)
    part = stage_layers(copy.deepcopy(reference), rank, stages)
    torch.manual_seed(1)
    # drawn on the CPU: the same batch on every rank, whatever its GPU
    x = torch.randn(16, 32).to(device)
    y = x[:, :8].cos()
    loss_fn = nn.MSELoss()

    # --8<-- [start:reference]
    # one process, the whole model and batch
    loss = loss_fn(reference(x), y)
    loss.backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), MAX_NORM)
    assert ref_norm > MAX_NORM  # clipping really happens
    # --8<-- [end:reference]

    # --8<-- [start:pipeline]
    stage = PipelineStage(
        part, stage_index=rank, num_stages=stages, device=device
    )
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=loss_fn)
    if stage.is_first:
        schedule.step(x)
    else:
        schedule.step(target=y)
    # this stage's gradients, nothing else
    grads = [p.grad for p in part.parameters()]
    # --8<-- [end:pipeline]

    # --8<-- [start:wrong]
    # what clip_grad_norm_ on the stage would use
    local = torch.nn.utils.get_total_norm(grads)
    norms = [torch.zeros_like(local) for _ in range(stages)]
    dist.all_gather(norms, local)
    # a part of the model is not the model
    assert not torch.allclose(local, ref_norm)
    # --8<-- [end:wrong]

    # --8<-- [start:fix]
    total = clip_grad_norm_pp(part.parameters(), MAX_NORM)
    torch.testing.assert_close(total, ref_norm)
    for p, ref in zip(
        part.parameters(),
        stage_layers(reference, rank, stages).parameters(),
    ):
        # clipped exactly as one process clips
        torch.testing.assert_close(p.grad, ref.grad)
    # --8<-- [end:fix]
    if rank == 0:
        report(norms, total, ref_norm)


def report(norms: list, total: torch.Tensor, ref_norm: torch.Tensor) -> None:
    squares = " + ".join(f"{n.item():.6f}^2" for n in norms)
    print(f"stage norms: {', '.join(f'{n.item():.6f}' for n in norms)}")
    print(
        "clip_grad_norm_ per stage would scale by "
        f"{', '.join(f'{MAX_NORM / n.item():.4f}' for n in norms)}"
    )
    print(
        f"sqrt({squares}) = {total.item():.6f} == one process "
        f"{ref_norm.item():.6f}"
    )
    print(
        f"every stage scales by {MAX_NORM / total.item():.4f}; "
        "clipped gradients equal one process"
    )


def main() -> None:
    device = setup()  # the process group first, with its backend
    try:
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
