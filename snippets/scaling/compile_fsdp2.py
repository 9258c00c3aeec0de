"""torch.compile with FSDP2: compile each block, shard
each block; one compiled graph serves every block."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/compile_fsdp2.py
# timeout: 240
# output-varies: ([\d.]+) ms per step
# output-varies: first step ([\d.]+) s

import argparse
import gc
import os
import time
from collections.abc import Callable

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard


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


class Block(nn.Module):
    """A residual MLP block: the repeated unit, as
    a transformer block is in a language model."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.norm, self.fc1, self.fc2 = (
            nn.LayerNorm(width),
            nn.Linear(width, 4 * width),
            nn.Linear(4 * width, width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, depth: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(depth))
        self.head = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# --8<-- [start:shard]
def build(
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


def train(model: nn.Module, device: torch.device, steps: int = 6):
    """Adam steps on this rank's batches; returns the
    losses and the full weights (gathered), and the times."""
    # every variant sees the same batches; each rank its own
    torch.manual_seed(1 + dist.get_rank())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses, seconds = [], []
    for _ in range(steps):
        x = torch.randn(16, 64, device=device)
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), x[:, :1].sin())
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    # a collective: every rank calls it
    weights = [p.full_tensor() for p in model.parameters()]
    return [torch.stack(losses), *weights], seconds


# same as snippets/scaling/compile_ddp.py:max_relative_difference
def max_relative_difference(ours: list, reference: list) -> float:
    return max(
        ((a - b).abs().max() / b.abs().max()).item()
        for a, b in zip(ours, reference)
    )


def run(mesh: DeviceMesh, device: torch.device, backend: str) -> None:
    rank = dist.get_rank()
    reference, seconds = train(build(mesh, device, "eager"), device)
    if rank == 0:
        step_ms = 1000 * sorted(seconds[1:])[len(seconds) // 2]
        print(
            f"backend {backend} on {device.type}; eager FSDP2: "
            f"{step_ms:.1f} ms per step"
        )

    # --8<-- [start:check]
    # aot_eager runs eager's own kernels
    tolerance = 0.0 if backend == "aot_eager" else 1e-5
    for where in ("each block", "whole model"):
        graphs = []
        tensors, seconds = train(
            build(mesh, device, where, counting(backend, graphs)), device
        )
        difference = max_relative_difference(tensors, reference)
        # block 0's input needs no gradient, the
        # others' do: two graphs, whatever the depth
        assert len(graphs) == 2, f"{where}: {len(graphs)} graphs"
        assert difference <= tolerance, f"{where}: {difference:.1e}"
        # --8<-- [end:check]
        if rank == 0:
            step_ms = 1000 * sorted(seconds[1:])[len(seconds) // 2]
            print(
                f"compile {where}: {len(graphs)} graphs for 4 blocks, "
                f"loss/weights vs eager {difference:.1e}"
            )
            print(
                f"  first step {seconds[0]:.1f} s (Dynamo, AOTAutograd, "
                f"{backend}), then {step_ms:.1f} ms per step"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--backend", help="default: inductor on GPUs, aot_eager on CPU"
    )
    args = parser.parse_args()
    mesh, device = setup_mesh()
    try:
        run(
            mesh,
            device,
            args.backend
            or ("inductor" if device.type == "cuda" else "aot_eager"),
        )
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
