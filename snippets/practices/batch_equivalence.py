"""A DDP step with per-rank batch b on N ranks equals one
process stepping on batch N*b (and with accumulation)."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/practices/batch_equivalence.py

import contextlib
import copy
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


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


# --8<-- [start:global-batch]
def global_batch_size(per_rank: int, world_size: int, accum_steps: int) -> int:
    """Samples behind one optimizer step."""
    return per_rank * world_size * accum_steps


# --8<-- [end:global-batch]


# --8<-- [start:lr-schedule]
def linear_scaling_warmup(
    base_lr: float, base_batch: int, global_batch: int, warmup_steps: int
):
    """Goyal et al. 2017: lr = base_lr * k for k = global_batch
    / base_batch, reached by a linear ramp from base_lr."""
    k = global_batch / base_batch

    # LambdaLR multiplies the optimizer's lr (the peak) by this
    def factor(step: int) -> float:
        if step >= warmup_steps:
            return 1.0
        return (1 + (k - 1) * step / warmup_steps) / k

    return base_lr * k, factor


# --8<-- [end:lr-schedule]


def check_lr_schedule() -> None:
    peak, factor = linear_scaling_warmup(
        base_lr=0.1, base_batch=256, global_batch=8192, warmup_steps=100
    )
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=peak)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    lrs = []
    for _ in range(101):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert abs(peak - 3.2) < 1e-12  # 0.1 * 8192 / 256
    assert abs(lrs[0] - 0.1) < 1e-12 and abs(lrs[100] - peak) < 1e-12
    assert all(a < b for a, b in zip(lrs[:100], lrs[1:101])), (
        "warm-up must rise monotonically"
    )


# --8<-- [start:equivalence]
def ddp_matches_big_batch(
    device: torch.device, per_rank: int, accum_steps: int, steps: int = 3
) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # same model and the same global data on every rank
    model = nn.Sequential(
        nn.Linear(8, 16),
        nn.Tanh(),
        nn.Linear(16, 1),
    ).to(device)
    # plain model, trained on the whole global batch
    reference = copy.deepcopy(model)
    ddp_model = DDP(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)

    global_batch = global_batch_size(per_rank, world, accum_steps)
    for _ in range(steps):
        # drawn on the CPU, then moved: the same on any GPU
        x = torch.randn(global_batch, 8).to(device)
        y = torch.randn(global_batch, 1).to(device)

        # one process, one big batch
        ref_opt.zero_grad()
        # mean over global_batch samples
        nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()

        # DDP: this rank's slices, accum_steps
        # micro-batches, gradients averaged across ranks
        opt.zero_grad()
        mine = torch.arange(global_batch, device=device).view(
            accum_steps, world, per_rank
        )[:, rank]
        for i, idx in enumerate(mine):
            last = i == accum_steps - 1
            # all-reduce once, on the last
            with contextlib.nullcontext() if last else ddp_model.no_sync():
                loss = (
                    nn.functional.mse_loss(ddp_model(x[idx]), y[idx])
                    / accum_steps
                )
                loss.backward()
        opt.step()

    for p, q in zip(ddp_model.module.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)  # same update, up to float rounding


# --8<-- [end:equivalence]


def main() -> None:
    device = setup()
    try:
        check_lr_schedule()
        for accum_steps in (1, 2):
            ddp_matches_big_batch(device, per_rank=4, accum_steps=accum_steps)
            if dist.get_rank() == 0:
                n = global_batch_size(4, dist.get_world_size(), accum_steps)
                print(
                    f"per-rank 4 x {dist.get_world_size()} ranks x "
                    f"{accum_steps} accum == one process, batch {n}"
                )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
