"""torch.compile with DDP: one graph per gradient bucket,
whichever of the two is applied first, and the same
training as eager."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/compile_ddp.py
# timeout: 240
# inductor: gpus
# output-varies: vs eager (\S+);
# output-varies: first step (\d+) ms, later steps ([\d.]+) ms

import argparse
import os
import statistics
import time
from collections.abc import Callable

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
WIDTH, DEPTH = 512, 4


class Block(nn.Module):
    """The repeated unit, as a transformer block is in a
    language model: 512x513 fp32 parameters, just over
    1 MiB, so with bucket_cap_mb=1 one DDP bucket each."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# --8<-- [end:model]


# --8<-- [start:count]
def counting(backend: str, graphs: list) -> Callable:
    """A compiler backend that records each graph
    Dynamo hands over, then compiles it with `backend`."""
    compile_graph = torch._dynamo.lookup_backend(backend)

    def count_then_compile(
        gm: torch.fx.GraphModule, example_inputs: list
    ) -> Callable:
        graphs.append(gm)
        return compile_graph(gm, example_inputs)

    return count_then_compile


# --8<-- [end:count]


# --8<-- [start:wrap]
def wrap(model: nn.Module, device: torch.device) -> DDP:
    ids = [device.index] if device.type == "cuda" else None
    return DDP(model, device_ids=ids, bucket_cap_mb=1)


def compile_then_wrap(model: Net, device: torch.device, backend) -> DDP:
    # the where-to-apply guide: compile the inner module;
    # in place, so no `_orig_mod.` in the state_dict keys
    model.compile(backend=backend)
    return wrap(model, device)


def wrap_then_compile(model: Net, device: torch.device, backend):
    # the DDP notes: compile the DDP module
    return torch.compile(wrap(model, device), backend=backend)


# --8<-- [end:wrap]


# --8<-- [start:train]
def train(model: nn.Module, device: torch.device, steps: int = 6):
    """SGD steps on this rank's batches; returns the losses,
    the first step's gradients, the weights, the times."""
    # every variant sees the same batches; each rank its own
    torch.manual_seed(1 + dist.get_rank())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, seconds = [], []
    for step in range(steps):
        x = torch.randn(32, WIDTH).to(device)
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), x[:, :1].sin())
        # DDP's all-reduce of each bucket fires
        # between the compiled backward graphs
        loss.backward()
        if step == 0:
            first_grads = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
        losses.append(loss.detach())
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    weights = [p.detach().clone() for p in model.parameters()]
    return [torch.stack(losses), *first_grads, *weights], seconds


# --8<-- [end:train]


# --8<-- [start:compare]
def max_relative_difference(ours: list, reference: list) -> float:
    return max(
        ((a - b).abs().max() / b.abs().max()).item()
        for a, b in zip(ours, reference)
    )


# --8<-- [end:compare]


def timings(seconds: list) -> str:
    """The first step, and the median of the others."""
    later = 1000 * statistics.median(seconds[1:])
    return f"first step {1000 * seconds[0]:.0f} ms, later steps {later:.1f} ms"


def net(device: torch.device) -> Net:
    torch.manual_seed(0)  # the same initial weights for every variant
    return Net().to(device)


def against_eager(device: torch.device, backend: str) -> None:
    rank = dist.get_rank()
    reference, seconds = train(wrap(net(device), device), device)
    if rank == 0:
        print(f"DDP on {device.type}, backend {backend}")
        print(f"eager: {timings(seconds)}")

    # --8<-- [start:check]
    # aot_eager runs eager's own kernels
    tolerance = 0.0 if backend == "aot_eager" else 1e-5
    for build in (compile_then_wrap, wrap_then_compile):
        graphs = []
        model = build(net(device), device, counting(backend, graphs))
        tensors, seconds = train(model, device)
        difference = max_relative_difference(tensors, reference)
        # one per bucket
        assert len(graphs) == DEPTH, f"{build.__name__}: {len(graphs)}"
        assert difference <= tolerance, f"{build.__name__}: {difference}"
        # --8<-- [end:check]
        if rank == 0:
            print(
                f"{build.__name__}: {len(graphs)} graphs, vs eager "
                f"{difference:.1e}; {timings(seconds)}"
            )


def sequential_trap(device: torch.device, backend: str) -> None:
    # --8<-- [start:sequential]
    graphs = []
    torch.manual_seed(0)
    plain = nn.Sequential(
        nn.Linear(WIDTH, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, 1),
    ).to(device)
    ids = [device.index] if device.type == "cuda" else None
    model = torch.compile(
        DDP(plain, device_ids=ids), backend=counting(backend, graphs)
    )
    model(torch.randn(32, WIDTH).to(device)).sum().backward()
    # nothing was compiled: pytorch/pytorch#140416
    assert len(graphs) == 0, f"{len(graphs)} graphs"
    # --8<-- [end:sequential]
    if dist.get_rank() == 0:
        print(
            f"torch.compile(DDP(nn.Sequential(...))): {len(graphs)} "
            "graphs, the model ran eagerly"
        )


# --8<-- [start:small_buckets]
def small_buckets(device: torch.device, backend: str) -> str:
    """DDPOptimizer's first bucket is always 1 MiB: a
    smaller bucket_cap_mb fails at the first forward."""
    ids = [device.index] if device.type == "cuda" else None
    model = torch.compile(
        DDP(Net().to(device), device_ids=ids, bucket_cap_mb=0.5),
        backend=backend,
    )
    try:
        model(torch.randn(32, WIDTH).to(device))
    except AssertionError as error:  # raised before anything is compiled
        return str(error)
    raise RuntimeError("expected DDPOptimizer to refuse bucket_cap_mb=0.5")


# --8<-- [end:small_buckets]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--backend", help="default: inductor on GPUs, aot_eager on CPU"
    )
    args = parser.parse_args()
    device = setup()
    backend = args.backend or (
        "inductor" if device.type == "cuda" else "aot_eager"
    )
    try:
        # every DDP model lives and dies in here, before the group goes
        against_eager(device, backend)
        sequential_trap(device, backend)
        message = small_buckets(device, backend)
        if dist.get_rank() == 0:
            print(f"bucket_cap_mb=0.5: AssertionError: {message}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
