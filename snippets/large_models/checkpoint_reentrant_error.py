"""DDP with reentrant activation checkpointing: "Expected to mark a variable
ready only once", reproduced in its two usual forms, and the two fixes:
non-reentrant checkpointing, or DDP's static graph."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/checkpoint_reentrant_error.py

import os
import textwrap

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint


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


# same as snippets/large_models/memory_breakdown.py:Block
class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, hidden: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.drop = nn.Dropout(dropout)  # p=0: saves nothing

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 × (b, heads, t, d/heads)
        # flash-style kernels keep no t × t matrix for backward
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attention(self.ln1(x)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


# --8<-- [start:model]
class TinyLM(nn.Module):
    """Two blocks; `reentrant`: None (no checkpointing), True or False;
    `shared`: run the last block twice, as models that share layers do."""

    def __init__(self, reentrant=None, shared=False):
        super().__init__()
        vocab, hidden, heads = 256, 64, 4
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(2))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.reentrant, self.shared = reentrant, shared

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        blocks = [*self.blocks, self.blocks[-1]] if self.shared else self.blocks
        for block in blocks:
            if self.reentrant is None:
                x = block(x)
            else:
                x = checkpoint(block, x, use_reentrant=self.reentrant)
        return self.head(self.norm(x))


# --8<-- [end:model]


def gradients(ids, targets, device, model_options: dict, **ddp_options):
    """One DDP step of a fresh model; returns its gradients."""
    torch.manual_seed(0)
    model = TinyLM(**model_options).to(device)
    device_ids = [device.index] if device.type == "cuda" else None
    ddp = DDP(model, device_ids=device_ids, **ddp_options)
    logits = ddp(ids).flatten(0, 1)
    F.cross_entropy(logits, targets.flatten()).backward()
    return [p.grad for p in model.parameters()]


def first_lines(error: Exception) -> str:
    """The message's first sentence and the one that names the parameter,
    wrapped to fit."""
    lines = str(error).splitlines()
    named = [line for line in lines if line.startswith("Parameter at index")]
    sentences = [line.split(". ")[0] + "." for line in lines[:1] + named]
    return "\n".join(
        textwrap.fill(x, 76, subsequent_indent="  ") for x in sentences
    )


def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    ids = torch.randint(256, (4 * world, 32), device=device)
    targets = torch.randint(256, (4 * world, 32), device=device)
    ids, targets = ids.chunk(world)[rank], targets.chunk(world)[rank]
    show = print if rank == 0 else (lambda *args: None)

    # --8<-- [start:errors]
    unused = dict(find_unused_parameters=True)
    for title, model_options, ddp_options in [
        (
            "reentrant, find_unused_parameters=True",
            dict(reentrant=True),
            unused,
        ),
        (
            "reentrant, a block used twice",
            dict(reentrant=True, shared=True),
            {},
        ),
    ]:
        try:
            gradients(ids, targets, device, model_options, **ddp_options)
            raise AssertionError(f"{title}: no error")
        except RuntimeError as error:
            message = "Expected to mark a variable ready only once."
            assert str(error).startswith(message), error
            show(f"{title}: RuntimeError")
            show(textwrap.indent(first_lines(error), "  "))
    # --8<-- [end:errors]

    # --8<-- [start:fixes]
    limit = 0.0 if device.type == "cpu" else 1e-5
    for shared in (False, True):
        # without checkpointing
        reference = gradients(ids, targets, device, dict(shared=shared))
        for title, model_options, ddp_options in [
            ("use_reentrant=False", dict(reentrant=False),
             dict(find_unused_parameters=not shared)),
            ("static_graph=True", dict(reentrant=True),
             dict(static_graph=True)),
        ]:  # fmt: skip
            options = dict(model_options, shared=shared)
            grads = gradients(ids, targets, device, options, **ddp_options)
            pairs = zip(reference, grads)
            diff = max((a - b).abs().max().item() for a, b in pairs)
            assert diff <= limit, (title, shared, diff)
            case = " (block used twice)" if shared else ""
            show(f"fixed by {title}{case}: max |Δ grad| = {diff:.3g}")
    # --8<-- [end:fixes]


def main() -> None:
    device = setup()
    try:
        run(device)  # the models, failed ones too, go before the group does
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
