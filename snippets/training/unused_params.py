"""Parameters unused in some steps: the error
without find_unused_parameters, and static_graph."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/training/unused_params.py
# output-excerpt: error ^(?:Expected to have finished| In addition)

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


# --8<-- [start:model]
class TwoPath(nn.Module):
    """`extra` takes part only when the step asks for it."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk, self.extra, self.head = (
            nn.Linear(8, 8),
            nn.Linear(8, 8),
            nn.Linear(8, 1),
        )

    def forward(self, x: torch.Tensor, use_extra: bool) -> torch.Tensor:
        x = torch.relu(self.trunk(x))
        if use_extra:
            x = x + torch.relu(self.extra(x))
        return self.head(x)


# --8<-- [end:model]


def wrap(device: torch.device, **ddp_kwargs) -> DDP:
    ids = [device.index] if device.type == "cuda" else None
    # rank 0's weights everywhere
    return DDP(TwoPath().to(device), device_ids=ids, **ddp_kwargs)


def step(model: DDP, device: torch.device, use_extra: bool) -> None:
    # a different batch on each rank (seeds differ below)
    x = torch.randn(16, 8, device=device)
    model(x, use_extra).square().mean().backward()


def differs_across_ranks(t: torch.Tensor) -> bool:
    gathered = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, t)
    return not all(torch.equal(gathered[0], g) for g in gathered)


# same as snippets/ddp/train_torchrun.py:assert_replicas_equal
def assert_replicas_equal(model: nn.Module) -> None:
    """Every rank must hold bit-identical parameters after training."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    replicas = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(replicas, flat)
    assert all(torch.equal(replicas[0], r) for r in replicas), (
        "replicas diverged"
    )


# --8<-- [start:error]
def without_find_unused(device: torch.device) -> str:
    model = wrap(device)
    step(model, device, use_extra=True)
    # `extra` gets no gradient: its bucket is never all-reduced
    step(model, device, use_extra=False)
    # no error yet, and no sync either
    assert differs_across_ranks(model.module.trunk.weight.grad)
    try:
        step(model, device, use_extra=True)  # the next forward notices
    except RuntimeError as error:
        return str(error)
    raise AssertionError("expected DDP to raise")


# --8<-- [end:error]


# --8<-- [start:fixes]
def train(model: DDP, device: torch.device, schedule: list[bool]) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for use_extra in schedule:
        optimizer.zero_grad()
        step(model, device, use_extra)
        optimizer.step()
    assert_replicas_equal(model)


def with_fixes(device: torch.device) -> None:
    # walks the autograd graph after every forward
    varying = wrap(device, find_unused_parameters=True)
    train(varying, device, [True, False, True, False])
    # the same unused set every step: learned once, in step 1
    fixed = wrap(device, static_graph=True)
    train(fixed, device, [False] * 4)
    assert fixed.module.extra.weight.grad is None  # never used, never reduced


# --8<-- [end:fixes]


def main() -> None:
    device = setup()
    try:
        # different data per rank, as with a real sampler
        torch.manual_seed(dist.get_rank())
        message = without_find_unused(device)
        if dist.get_rank() == 0:
            print(message)
        assert message.startswith(
            "Expected to have finished reduction in the prior iteration"
        )
        assert "find_unused_parameters=True" in message
        with_fixes(device)
        if dist.get_rank() == 0:
            print(
                "find_unused_parameters=True and static_graph=True: "
                "trained, replicas identical"
            )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
