"""DDP's bf16 compression hook on GPUs: bf16 keeps fp32's
range where fp16 underflows, at 8x coarser rounding."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/comm_hook_bf16.py
# requires: gpus=2

import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 10


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


# same as snippets/scaling/comm_hooks.py:make_model
def make_model(device: torch.device) -> nn.Module:
    torch.manual_seed(0)  # the same initial weights for every variant
    return nn.Sequential(
        nn.Linear(128, 256),
        nn.ReLU(),
        nn.Linear(256, 256),
        nn.ReLU(),
        nn.Linear(256, 16),
    ).to(device)


# same as snippets/scaling/comm_hooks.py:wrap
def wrap(device: torch.device, hook, state=None) -> DDP:
    ids = [device.index] if device.type == "cuda" else None
    model = DDP(make_model(device), device_ids=ids)
    model.register_comm_hook(state, hook)  # once, before the first backward
    return model


# same as snippets/scaling/comm_hooks.py:measured
def measured(hook, records: list):
    """The same hook, plus what exact averaging would have
    given, for comparison: costs an extra all_gather."""

    def measured_hook(
        state, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        # this rank's gradient, before the hook changes it in place
        local = bucket.buffer().clone()
        everyone = [
            torch.empty_like(local) for _ in range(dist.get_world_size())
        ]
        dist.all_gather(everyone, local)
        future = hook(state, bucket)
        # what DDP will write into .grad (no overlap: measuring only)
        averaged = future.wait()
        records.append(
            (bucket.index(), torch.stack(everyone), averaged.clone())
        )
        return future

    return measured_hook


# same as snippets/scaling/comm_hooks.py:train
def train(
    model: DDP, records: list, device: torch.device
) -> list[tuple[torch.Tensor, ...]]:
    """SGD steps on this rank's batches; per step: every
    rank's gradient and the averaged one DDP applied."""
    # every variant sees the same batches; each rank its own
    torch.manual_seed(1 + dist.get_rank())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    steps = []
    for _ in range(STEPS):
        x = torch.randn(16, 128, device=device)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), x[:, :16].sin()).backward()
        optimizer.step()
        # bucket order, whatever order they completed in
        records.sort(key=lambda record: record[0])
        steps.append(
            tuple(torch.cat(parts, dim=-1) for parts in list(zip(*records))[1:])
        )
        records.clear()
    return steps


# same as snippets/scaling/comm_hooks.py:relative
def relative(error: torch.Tensor, reference: torch.Tensor) -> float:
    return (error.norm() / reference.norm()).item()


# same as snippets/scaling/comm_hooks.py:check_rounding
def check_rounding(steps: list, dtype: torch.dtype) -> float:
    """Each averaged element within the rounding bound of the
    exact mean; returns the share below dtype's normal range."""
    # unit roundoff: 2**-11 for fp16, 2**-8 for bf16
    u = torch.finfo(dtype).eps / 2
    # below the normal range the steps are absolute, not relative
    tiny = torch.finfo(dtype).smallest_normal * u
    below, total = 0, 0
    # N casts, N divisions by N, N-1 additions: each within u*|value| + tiny
    for everyone, applied in steps:
        exact = everyone.mean(dim=0)
        bound = (
            2 * u * everyone.abs().sum(dim=0) * (1 + u)
            + 3 * len(everyone) * tiny
        )
        assert ((applied - exact).abs() <= bound).all()
        below += (
            ((exact != 0) & (exact.abs() < torch.finfo(dtype).smallest_normal))
            .sum()
            .item()
        )
        total += exact.numel()
    return below / total


def run(device: torch.device) -> None:
    # --8<-- [start:bf16]
    errors, below = {}, {}
    for dtype, hook in (
        (torch.float16, default.fp16_compress_hook),
        (torch.bfloat16, default.bf16_compress_hook),
    ):
        records = []
        model = wrap(device, measured(hook, records))
        steps = train(model, records, device)
        del model
        # the same bound, with dtype's unit roundoff
        below[dtype] = check_rounding(steps, dtype)
        errors[dtype] = max(
            relative(applied - everyone.mean(dim=0), everyone.mean(dim=0))
            for everyone, applied in steps
        )
    # bf16's normal range starts at 1.2e-38
    assert below[torch.bfloat16] == 0 < below[torch.float16]
    # 8 significant bits against 11
    assert errors[torch.bfloat16] > errors[torch.float16]
    # --8<-- [end:bf16]
    if dist.get_rank() == 0:
        for dtype in errors:
            print(
                f"{dtype}: error per step up to {errors[dtype]:.1e}, "
                f"{below[dtype]:.0%} of the elements below its normal "
                "range"
            )


# same as snippets/training/train_loop.py:main
def main() -> None:
    device = setup()
    try:
        # every DDP model lives and dies in here, before the group goes
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
