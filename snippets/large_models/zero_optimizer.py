"""ZeRO-1 with ZeroRedundancyOptimizer: the same parameters
as DDP + Adam, each rank holding part of Adam's state."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/zero_optimizer.py

import os
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
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


class TinyLM(nn.Module):
    """An embedding table, one MLP block and a small
    head: the embedding is 79% of the parameters."""

    def __init__(self, vocab: int = 1024, dim: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.block = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )
        self.head = nn.Linear(dim, 8)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        return self.head(h + self.block(h))


def make_ddp(device: torch.device) -> DDP:
    torch.manual_seed(0)  # the same initial weights for both runs
    return DDP(
        TinyLM().to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
    )


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in an optimizer's
    state: exp_avg, exp_avg_sq and step for Adam."""
    return sum(
        t.numel() * t.element_size()
        for s in optimizer.state.values()
        for t in s.values()
    )


def train(
    model: DDP,
    optimizer: torch.optim.Optimizer,
    tokens,
    targets,
    steps: int = 5,
) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        # DDP all-reduces every gradient
        nn.functional.mse_loss(model(tokens), targets).backward()
        optimizer.step()


def sorted_greedy(numels: list[int], world: int) -> list[int]:
    """The partition rule ZeroRedundancyOptimizer documents:
    largest first, each to the least-loaded rank."""
    loads = [0] * world
    for n in sorted(numels, reverse=True):
        loads[loads.index(min(loads))] += n
    return loads


# --8<-- [start:load]
def load_checkpoint(
    path: Path, device: torch.device
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """One process, no DDP, no ZeRO: the
    consolidated file is a plain Adam checkpoint."""
    # on the CPU: load_state_dict moves each tensor to its parameter's
    # device, except Adam's `step` counters, which stay on the CPU
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model = TinyLM().to(device)
    model.load_state_dict(checkpoint["model"])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer


# --8<-- [end:load]


def check(model: DDP, optimizer, ddp: DDP, adam) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    # --8<-- [start:check]
    for p, ref in zip(model.parameters(), ddp.parameters()):
        assert torch.equal(p, ref), "ZeRO-1 must update exactly as Adam does"
    # my partition
    mine = [
        p for group in optimizer.optim.param_groups for p in group["params"]
    ]
    names = {p: n for n, p in model.module.named_parameters()}
    share = (
        state_bytes(optimizer.optim),
        sum(p.numel() for p in mine),
        [names[p] for p in mine],
    )
    shares = [None] * world
    # every rank's share, for the printout
    dist.all_gather_object(shares, share)
    # --8<-- [end:check]
    assert sum(s[0] for s in shares) == state_bytes(adam), (
        "the partitions add up to plain Adam's state"
    )
    numels = [p.numel() for p in model.parameters()]
    assert [s[1] for s in shares] == sorted_greedy(numels, world), (
        "split by whole parameters, largest first"
    )
    if rank == 0:
        print(
            f"plain Adam under DDP: {state_bytes(adam):,} bytes of state "
            "on every rank"
        )
        for r, (nbytes, numel, owned) in enumerate(shares):
            print(
                f"ZeRO-1 rank {r}: {nbytes:,} bytes for {numel:,} "
                f"parameters: {', '.join(owned)}"
            )
        print("after 5 steps: parameters bit-identical to DDP + Adam")


def save(model: DDP, optimizer, path: Path) -> None:
    rank = dist.get_rank()
    # --8<-- [start:save]
    try:
        optimizer.state_dict()  # nothing consolidated on this rank yet
    except RuntimeError as e:
        if rank == 0:
            print(f"RuntimeError: {e}")
    # a collective: every rank sends its partition to rank 0
    optimizer.consolidate_state_dict(to=0)
    if rank == 0:
        torch.save(
            {
                "model": model.module.state_dict(),
                "optimizer": optimizer.state_dict(),
            },
            path,
        )
    # --8<-- [end:save]


def reload(path: Path, device: torch.device, ddp: DDP, adam) -> None:
    """Rank 0: the checkpoint in plain Adam, the same as the reference run."""
    plain, resumed = load_checkpoint(path, device)
    for a, b in zip(plain.parameters(), ddp.parameters()):
        assert torch.equal(a, b)
    for i, st in adam.state_dict()["state"].items():
        got = resumed.state_dict()["state"][i]
        # the same devices: `step` on the CPU in both, the rest on `device`
        assert all(torch.equal(got[k], v) for k, v in st.items()), (
            f"Adam state of parameter {i} differs"
        )
    print(
        "the consolidated checkpoint loads into plain Adam: state "
        "equal to DDP + Adam's"
    )


def run(device: torch.device, path: Path) -> None:
    torch.manual_seed(1 + dist.get_rank())  # each rank: its own batch
    tokens = torch.randint(0, 1024, (16, 8)).to(device)
    targets = torch.randn(16, 8, 8).to(device)

    ddp = make_ddp(device)
    adam = torch.optim.Adam(ddp.parameters(), lr=1e-2)
    train(ddp, adam, tokens, targets)

    # --8<-- [start:zero]
    model = make_ddp(device)
    optimizer = ZeroRedundancyOptimizer(
        model.parameters(),
        # the optimizer each rank runs on its own partition
        optimizer_class=torch.optim.Adam,
        lr=1e-2,
    )
    # step(): update my partition, then broadcast it
    train(model, optimizer, tokens, targets)
    # --8<-- [end:zero]

    check(model, optimizer, ddp, adam)
    save(model, optimizer, path)
    if dist.get_rank() == 0:
        reload(path, device, ddp, adam)
    dist.barrier()  # rank 0 has read the file


def main() -> None:
    device = setup()  # the process group first, with its backend
    path = (
        Path(tempfile.gettempdir())
        / f"zero-{os.environ['TORCHELASTIC_RUN_ID']}.pt"
    )
    try:
        # every DDP model lives and dies in here, before the group goes
        run(device, path)
    finally:
        if dist.get_rank() == 0:
            path.unlink(missing_ok=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
