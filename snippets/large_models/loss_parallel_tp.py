"""Tensor parallelism splits the output layer by vocabulary; loss_parallel
computes cross-entropy on those shards without gathering the logits, and
gives the loss and gradients of one process."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/loss_parallel_tp.py
# output-varies: largest difference (\S+) of
# output-varies: loss (\S+), gradients

import copy
import gc
import os
from contextlib import nullcontext

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    loss_parallel,
    parallelize_module,
)


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


# same as snippets/large_models/chunked_loss.py:Body
class Body(nn.Module):
    """Everything below the output layer: tokens -> hidden states."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU())
        self.out = nn.Linear(4 * dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        return self.norm(h + self.out(self.mlp(h)))


# --8<-- [start:plans]
def shard_head(head: nn.Linear, mesh: DeviceMesh, parallel_loss: bool):
    """Split the output layer's rows (the vocabulary) over the TP ranks."""
    if parallel_loss:
        # the logits stay a DTensor, sharded on the vocabulary: (n, V/tp)
        plan = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
    else:
        # all-gather the logits: every rank holds all n × V of them
        plan = ColwiseParallel(output_layouts=Replicate())
    parallelize_module(head, mesh, plan)


# --8<-- [end:plans]


def counts(comms: CommDebugMode) -> dict[str, int]:
    return {
        str(op).split(".")[-1]: n for op, n in comms.get_comm_counts().items()
    }


# --8<-- [start:step]
def step(body, head, tokens, targets, parallel_loss: bool) -> dict:
    """One forward and backward; what the logits cost and what ran."""
    # cross_entropy and its backward both run under the context
    context = loss_parallel() if parallel_loss else nullcontext()
    with context:
        with CommDebugMode() as forward:
            logits = head(body(tokens))
            loss = F.cross_entropy(logits, targets)
        with CommDebugMode() as backward:
            loss.backward()
    local = logits.to_local() if parallel_loss else logits
    return {
        "loss": loss.full_tensor() if parallel_loss else loss.detach(),
        "logits": tuple(local.shape),
        "forward": counts(forward),
        "backward": counts(backward),
    }


# --8<-- [end:step]


def full_grads(model: nn.Module) -> list[torch.Tensor]:
    """Every gradient as a full tensor (a DTensor gathered) on the CPU."""
    return [
        (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad)
        .detach()
        .cpu()
        for p in model.parameters()
    ]


def run(mesh: DeviceMesh, device: torch.device) -> None:
    vocab, dim, tokens = 4096, 32, 256
    # the same weights and batch on every rank: drawn on the CPU
    torch.manual_seed(0)
    body, head = Body(vocab, dim), nn.Linear(dim, vocab, bias=False)
    ids, targets = torch.randint(vocab, (2, tokens))
    ids, targets = ids.to(device), targets.to(device)

    one = copy.deepcopy(body), copy.deepcopy(head)  # one process, all of V
    reference = F.cross_entropy(one[1](one[0](ids.cpu())), targets.cpu())
    reference.backward()
    expected = full_grads(one[0]) + full_grads(one[1])
    results = {}
    for parallel_loss in (False, True):
        model = copy.deepcopy(body).to(device), copy.deepcopy(head).to(device)
        shard_head(model[1], mesh, parallel_loss)
        result = step(*model, ids, targets, parallel_loss)
        got = full_grads(model[0]) + full_grads(model[1])
        top = max(g.abs().max().item() for g in expected)
        error = max((a - b).abs().max().item() for a, b in zip(got, expected))
        assert error <= 1e-5 * top, f"gradients differ by {error:.1e}"
        assert torch.allclose(result["loss"].cpu(), reference.detach())
        results["loss_parallel" if parallel_loss else "gathered"] = (
            result,
            error / top,
        )
    report(results, tokens, vocab, mesh.size())


def report(results: dict, tokens: int, vocab: int, tp: int) -> None:
    gathered, sharded = results["gathered"][0], results["loss_parallel"][0]
    assert gathered["logits"] == (tokens, vocab), "gathered: all of V"
    assert sharded["logits"] == (tokens, vocab // tp), "sharded: V/tp"
    if dist.get_rank() != 0:
        return
    print(f"n={tokens} tokens, V={vocab}, TP={tp}; logits per rank:")
    for name, (result, error) in results.items():
        n, v = result["logits"]
        print(f"  {name:14} {n} × {v} = {n * v * 4:>9,} B")
        print(f"  {'':14} forward {result['forward']}")
        print(f"  {'':14} backward {result['backward']}")
        print(
            f"  {'':14} loss {result['loss'].item():.6f}, gradients: "
            f"largest difference {error:.1e} of the largest"
        )
    print("both equal one process on the whole vocabulary")


def main() -> None:
    device = setup()  # the process group first, with its backend
    mesh = init_device_mesh(
        device.type, (dist.get_world_size(),), mesh_dim_names=("tp",)
    )
    try:
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
