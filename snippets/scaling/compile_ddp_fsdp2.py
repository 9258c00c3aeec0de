"""torch.compile with DDP (one graph per gradient bucket) and
with FSDP2 (one graph serves every block), each the same
training as eager."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/compile_ddp_fsdp2.py
# timeout: 240
# output-varies: ( +\d+) ms( +[\d.]+) ms$
# output-excerpt: ddp ^(?:DDP|bucket_cap_mb)
# output-excerpt: fsdp2 ^(?:FSDP2|compile whole model)

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP


# same as snippets/parallelism/_mesh.py:setup_mesh
def setup_mesh() -> tuple[DeviceMesh, torch.device]:
    """One GPU per rank (NCCL) if every local
    rank can have one, else CPU (gloo)."""
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        # before the mesh: it creates the process group
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    # init_device_mesh calls init_process_group()
    # when there is no process group yet
    mesh = init_device_mesh(device.type, (int(os.environ["WORLD_SIZE"]),))
    return mesh, device


# same as snippets/parallelism/_mesh.py:teardown_mesh
def teardown_mesh(mesh: DeviceMesh) -> None:
    """Destroy the groups and free them now, so their
    threads end before Python does (debugging page)."""
    # sharded models are reference cycles: free
    # them while the group is still registered
    gc.collect()
    dist.destroy_process_group()
    # DTensor's caches keep the mesh alive, and the
    # mesh its groups (torch 2.14): let go of them
    getattr(mesh, "_pg_registry", {}).clear()


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
def build_ddp(device: torch.device, order: str, backend=None) -> nn.Module:
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
def whole(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of the whole tensor: FSDP2's parameters and
    gradients are DTensors, a shard on each rank."""
    if isinstance(tensor, DTensor):
        return tensor.full_tensor()  # a collective: every rank calls it
    return tensor.detach().clone()


def train(model: nn.Module, device: torch.device, steps: int = 6):
    """SGD steps on this rank's batches; returns the losses,
    the first step's gradients, the weights, the times."""
    # every variant sees the same batches; each rank its own
    torch.manual_seed(1 + dist.get_rank())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, seconds = [], []
    for step in range(steps):
        x = torch.randn(32, WIDTH, device=device)
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), x[:, :1].sin())
        # DDP's all-reduce of each bucket fires
        # between the compiled backward graphs
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        if step == 0:
            first_grads = [whole(p.grad) for p in model.parameters()]
    weights = [whole(p) for p in model.parameters()]
    return [torch.stack(losses), *first_grads, *weights], seconds


# --8<-- [end:train]


# --8<-- [start:compare]
def max_relative_difference(ours: list, reference: list) -> float:
    return max(
        ((a - b).abs().max() / b.abs().max()).item()
        for a, b in zip(ours, reference)
    )


def tolerance(backend: str) -> float:
    # aot_eager runs eager's own kernels: equal bit for bit
    return 0.0 if backend == "aot_eager" else 1e-5


# --8<-- [end:compare]


# name, graphs, largest difference, first step, median of the others
ROW = "{:<25}{:>6}{:>10}{:>12}{:>13}"
COLUMNS = ("graphs", "vs eager", "first step", "later steps")


def report(name: str, seconds: list, graphs=None, difference=None) -> None:
    if dist.get_rank() == 0:
        later = statistics.median(seconds[1:])
        print(
            ROW.format(
                name,
                "-" if graphs is None else len(graphs),
                "-" if difference is None else f"{difference:.1e}",
                f"{1000 * seconds[0]:.0f} ms",
                f"{1000 * later:.1f} ms",
            )
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
        model(torch.randn(32, WIDTH, device=device))
    except AssertionError as error:  # raised before anything is compiled
        return str(error)
    raise RuntimeError("expected DDPOptimizer to refuse bucket_cap_mb=0.5")


# --8<-- [end:small_buckets]


def with_ddp(device: torch.device, backend: str) -> None:
    rank = dist.get_rank()
    if rank == 0:
        print(ROW.format(f"DDP, {backend} on {device.type}", *COLUMNS))
    reference, seconds = train(build_ddp(device, "eager"), device)
    report("eager", seconds)

    # --8<-- [start:check_ddp]
    for order in ("compile, then wrap", "wrap, then compile"):
        graphs = []
        model = build_ddp(device, order, counting(backend, graphs))
        tensors, seconds = train(model, device)
        difference = max_relative_difference(tensors, reference)
        # one per bucket
        assert len(graphs) == DEPTH, f"{order}: {len(graphs)} graphs"
        assert difference <= tolerance(backend), f"{order}: {difference}"
        # --8<-- [end:check_ddp]
        report(order, seconds, graphs, difference)

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
    model(torch.randn(32, WIDTH, device=device)).sum().backward()
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


# --8<-- [start:shard]
def build_fsdp2(
    mesh: DeviceMesh, device: torch.device, where: str, backend=None
) -> Net:
    torch.manual_seed(0)  # the same initial weights for every variant
    model = Net().to(device)
    for block in model.blocks:
        if where == "each block":
            # in place; the same code object for every block
            block.compile(backend=backend)
        # FSDP's hooks run around the compiled forward, not inside it
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if where == "whole model":
        model.compile(backend=backend)
    return model


# --8<-- [end:shard]


def with_fsdp2(mesh: DeviceMesh, device: torch.device, backend: str) -> None:
    if dist.get_rank() == 0:
        print(ROW.format(f"FSDP2, {backend} on {device.type}", *COLUMNS))
    reference, seconds = train(build_fsdp2(mesh, device, "eager"), device)
    report("eager", seconds)

    # --8<-- [start:check_fsdp2]
    for where in ("each block", "whole model"):
        graphs = []
        model = build_fsdp2(mesh, device, where, counting(backend, graphs))
        tensors, seconds = train(model, device)
        difference = max_relative_difference(tensors, reference)
        # block 0's input needs no gradient, the
        # others' do: two graphs, whatever the depth
        assert len(graphs) == 2, f"{where}: {len(graphs)} graphs"
        assert difference <= tolerance(backend), f"{where}: {difference}"
        # --8<-- [end:check_fsdp2]
        report(f"compile {where}", seconds, graphs, difference)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--backend", help="default: inductor on GPUs, aot_eager on CPU"
    )
    args = parser.parse_args()
    # init_device_mesh creates the default group, which DDP uses
    mesh, device = setup_mesh()
    backend = args.backend or (
        "inductor" if device.type == "cuda" else "aot_eager"
    )
    try:
        with_ddp(device, backend)
        with_fsdp2(mesh, device, backend)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
