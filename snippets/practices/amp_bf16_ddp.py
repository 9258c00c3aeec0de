"""bf16 autocast under DDP: matmuls run in bf16,
parameters and gradients stay fp32, no GradScaler needed."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/practices/amp_bf16_ddp.py

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


def run(device: torch.device) -> None:
    # one task for all
    true_w = torch.randn(
        16,
        4,
        generator=torch.Generator().manual_seed(0),
    ).to(device)
    torch.manual_seed(dist.get_rank())  # each rank draws its own samples of it
    x = torch.randn(256, 16, device=device)
    y = (x @ true_w).tanh()
    model = nn.Sequential(
        nn.Linear(16, 64),
        nn.GELU(),
        nn.Linear(64, 4),
    ).to(device)
    ddp_model = DDP(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    optimizer = torch.optim.AdamW(ddp_model.parameters(), lr=1e-2)

    losses = []
    for step in range(60):
        optimizer.zero_grad(set_to_none=True)
        # --8<-- [start:step]
        # forward + loss only
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            out = ddp_model(x)  # Linear layers run in bf16
            # autocast runs mse_loss in fp32
            loss = nn.functional.mse_loss(out, y)
        loss.backward()  # outside autocast; DDP all-reduces fp32 grads here
        # fp32 master weights, no GradScaler: bf16 has fp32's range
        optimizer.step()
        # --8<-- [end:step]
        losses.append(loss.item())
        if step == 0:
            # --8<-- [start:dtypes]
            # autocast output of a matmul
            assert out.dtype == torch.bfloat16, out.dtype
            assert loss.dtype == torch.float32, loss.dtype
            # params never cast
            assert all(p.dtype == torch.float32 for p in ddp_model.parameters())
            # grads match params
            assert all(
                p.grad.dtype == torch.float32 for p in ddp_model.parameters()
            )
            # --8<-- [end:dtypes]
    assert ddp_model(x).dtype == torch.float32, (
        "outside autocast the model runs in fp32 again"
    )
    assert losses[-1] < 0.5 * losses[0], (
        f"loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}"
    )
    if dist.get_rank() == 0:
        print(
            f"bf16 autocast on {device.type}: loss {losses[0]:.4f} -> "
            f"{losses[-1]:.4f}"
        )


def main() -> None:
    device = setup()
    try:
        # every DDP model lives and dies in here, before the group goes
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
