"""torch.compile with FSDP2: compile each block, shard
each block; one compiled graph serves every block."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/compile_fsdp2.py
# timeout: 240
# inductor: gpus
# output-varies: vs eager (\S+);
# output-varies: first step (\d+) ms, later steps ([\d.]+) ms

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


# same as snippets/scaling/compile_ddp.py:counting
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


# --8<-- [start:model]
WIDTH, DEPTH = 64, 4


class Block(nn.Module):
    """A residual MLP block: the repeated unit, as
    a transformer block is in a language model."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.fc1 = nn.Linear(WIDTH, 4 * WIDTH)
        self.fc2 = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


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


# --8<-- [start:shard]
def shard(model: Net, mesh: DeviceMesh) -> Net:
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def compile_each_block(model: Net, mesh: DeviceMesh, backend) -> Net:
    for block in model.blocks:
        # in place; the same code object for every block
        block.compile(backend=backend)
    # FSDP's hooks run around each compiled forward, not inside it
    return shard(model, mesh)


def compile_whole_model(model: Net, mesh: DeviceMesh, backend) -> Net:
    shard(model, mesh).compile(backend=backend)
    return model


# --8<-- [end:shard]


# --8<-- [start:train]
def train(model: nn.Module, device: torch.device, steps: int = 6):
    """SGD steps on this rank's batches; returns the losses
    and the first step's gradients and the final weights,
    each gathered whole from the shards, and the times."""
    # every variant sees the same batches; each rank its own
    torch.manual_seed(1 + dist.get_rank())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, seconds = [], []
    for step in range(steps):
        x = torch.randn(16, WIDTH).to(device)
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), x[:, :1].sin())
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        if step == 0:
            # a collective: every rank calls it
            first_grads = [p.grad.full_tensor() for p in model.parameters()]
    weights = [p.full_tensor() for p in model.parameters()]
    return [torch.stack(losses), *first_grads, *weights], seconds


# --8<-- [end:train]


# same as snippets/scaling/compile_ddp.py:max_relative_difference
def max_relative_difference(ours: list, reference: list) -> float:
    return max(
        ((a - b).abs().max() / b.abs().max()).item()
        for a, b in zip(ours, reference)
    )


# same as snippets/scaling/compile_ddp.py:timings
def timings(seconds: list) -> str:
    """The first step, and the median of the others."""
    later = 1000 * statistics.median(seconds[1:])
    return f"first step {1000 * seconds[0]:.0f} ms, later steps {later:.1f} ms"


def net(device: torch.device) -> Net:
    torch.manual_seed(0)  # the same initial weights for every variant
    return Net().to(device)


def against_eager(mesh: DeviceMesh, device: torch.device, backend: str):
    rank = dist.get_rank()
    reference, seconds = train(shard(net(device), mesh), device)
    if rank == 0:
        print(f"FSDP2 on {device.type}, backend {backend}")
        print(f"eager: {timings(seconds)}")

    # --8<-- [start:check]
    # aot_eager runs eager's own kernels
    tolerance = 0.0 if backend == "aot_eager" else 1e-5
    for build in (compile_each_block, compile_whole_model):
        graphs = []
        model = build(net(device), mesh, counting(backend, graphs))
        tensors, seconds = train(model, device)
        difference = max_relative_difference(tensors, reference)
        # block 0's input needs no gradient, the
        # others' do: two graphs, whatever the depth
        assert len(graphs) == 2, f"{build.__name__}: {len(graphs)}"
        assert difference <= tolerance, f"{build.__name__}: {difference}"
        # --8<-- [end:check]
        if rank == 0:
            print(
                f"{build.__name__}: {len(graphs)} graphs for {DEPTH} "
                f"blocks, vs eager {difference:.1e}; {timings(seconds)}"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--backend", help="default: inductor on GPUs, aot_eager on CPU"
    )
    args = parser.parse_args()
    device = setup()
    # after the group: the mesh uses it
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    backend = args.backend or (
        "inductor" if device.type == "cuda" else "aot_eager"
    )
    try:
        against_eager(mesh, device, backend)  # every model dies in here
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
