"""torch.compile with DDP: where to compile, one graph
per gradient bucket, and the same training as eager."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/compile_ddp.py
# timeout: 240
# output-varies: ([\d.]+) ms per step
# output-varies: first step ([\d.]+) s

import argparse
import os
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
DEPTH = 4


class Net(nn.Module):
    """Four 512x512 layers, each 1 MiB of fp32 parameters:
    with bucket_cap_mb=1, one DDP bucket per layer."""

    def __init__(self, width: int = 512, depth: int = DEPTH) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Linear(width, width) for _ in range(depth)
        )
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
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
def build(device: torch.device, order: str, backend=None) -> nn.Module:
    torch.manual_seed(0)  # the same initial weights for every variant
    model = Net().to(device)
    ids = [device.index] if device.type == "cuda" else None
    # the torch.compile docs: compile the inner module
    if order == "compile, then wrap":
        # in place: no `_orig_mod.` in the state_dict keys
        model.compile(backend=backend)
        return DDP(model, device_ids=ids, bucket_cap_mb=1)
    if order == "wrap, then compile":  # the DDP notes: compile the DDP module
        return torch.compile(
            DDP(model, device_ids=ids, bucket_cap_mb=1), backend=backend
        )
    return DDP(model, device_ids=ids, bucket_cap_mb=1)  # eager


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
        x = torch.randn(32, 512, device=device)
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
        model(torch.randn(32, 512, device=device))
    except AssertionError as error:  # raised before anything is compiled
        return str(error)
    raise RuntimeError("expected DDPOptimizer to refuse bucket_cap_mb=0.5")


# --8<-- [end:small_buckets]


def run(device: torch.device, backend: str) -> None:
    rank = dist.get_rank()
    reference, eager_seconds = train(build(device, "eager"), device)
    step_ms = 1000 * sorted(eager_seconds[1:])[len(eager_seconds) // 2]
    if rank == 0:
        print(
            f"backend {backend} on {device.type}; eager DDP: "
            f"{step_ms:.1f} ms per step"
        )

    # --8<-- [start:check]
    # aot_eager runs eager's own kernels
    tolerance = 0.0 if backend == "aot_eager" else 1e-5
    for order in ("compile, then wrap", "wrap, then compile"):
        graphs = []
        model = build(device, order, counting(backend, graphs))
        tensors, seconds = train(model, device)
        difference = max_relative_difference(tensors, reference)
        # one per bucket
        assert len(graphs) == DEPTH, f"{order}: {len(graphs)} graphs"
        assert difference <= tolerance, f"{order}: {difference:.1e}"
        # --8<-- [end:check]
        step_ms = 1000 * sorted(seconds[1:])[len(seconds) // 2]
        if rank == 0:
            print(
                f"{order}: {len(graphs)} graphs, loss/gradients/weights "
                f"vs eager {difference:.1e}"
            )
            print(
                f"  first step {seconds[0]:.1f} s (Dynamo, AOTAutograd, "
                f"{backend}), then {step_ms:.1f} ms per step"
            )

    # --8<-- [start:sequential]
    graphs = []
    torch.manual_seed(0)
    plain = nn.Sequential(
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Linear(512, 1),
    ).to(device)
    ids = [device.index] if device.type == "cuda" else None
    model = torch.compile(
        DDP(plain, device_ids=ids), backend=counting(backend, graphs)
    )
    model(torch.randn(32, 512, device=device)).sum().backward()
    assert len(graphs) == 0  # nothing was compiled: pytorch/pytorch#140416
    # --8<-- [end:sequential]
    if rank == 0:
        print(
            f"torch.compile(DDP(nn.Sequential(...))): {len(graphs)} "
            "graphs, the model ran eagerly"
        )
    message = small_buckets(device, backend)
    if rank == 0:
        print(f"bucket_cap_mb=0.5: AssertionError: {message}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--backend", help="default: inductor on GPUs, aot_eager on CPU"
    )
    args = parser.parse_args()
    device = setup()
    try:
        run(
            device,
            args.backend
            or ("inductor" if device.type == "cuda" else "aot_eager"),
        )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
