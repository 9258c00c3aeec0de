"""DDP with reentrant activation checkpointing: "Expected to mark a variable
ready only once", reproduced in its two usual forms, and the two fixes:
non-reentrant checkpointing, or DDP's static graph."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/checkpoint_reentrant_error.py
# output-varies: max \|Δ grad\| = (\S+)

import os

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
        # one per branch; p=0: saves nothing
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 × (b, heads, t, d/heads)
        # flash-style kernels keep no t × t matrix for backward
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop1(self.attention(self.ln1(x)))
        return x + self.drop2(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


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
    torch.manual_seed(0)  # the same initial weights for every variant
    model = TinyLM(**model_options).to(device)
    device_ids = [device.index] if device.type == "cuda" else None
    ddp = DDP(model, device_ids=device_ids, **ddp_options)
    logits = ddp(ids).flatten(0, 1)
    F.cross_entropy(logits, targets.flatten()).backward()
    return [p.grad for p in model.parameters()]


def reproduce(ids, targets, device) -> None:
    # --8<-- [start:errors]
    for title, model_options, ddp_options in [
        ("reentrant, find_unused_parameters=True",
         dict(reentrant=True), dict(find_unused_parameters=True)),
        ("reentrant, a block used twice",
         dict(reentrant=True, shared=True), {}),
    ]:  # fmt: skip
        try:
            gradients(ids, targets, device, model_options, **ddp_options)
            raise AssertionError(f"{title}: no error")
        except RuntimeError as error:
            lines = str(error).splitlines()
            message = "Expected to mark a variable ready only once."
            assert lines[0].startswith(message), error
            # the line that names the parameter
            named = next(x for x in lines if x.startswith("Parameter at"))
            if dist.get_rank() == 0:
                print(f"{title}: RuntimeError")
                print(f"  {message}")
                print(f"  {named.split('. ')[0]}.")
    # --8<-- [end:errors]


def fix(ids, targets, device) -> None:
    # --8<-- [start:fixes]
    # bit-identical on CPU; a GPU's attention backward may add in
    # another order
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
            if dist.get_rank() == 0:
                print(f"fixed by {title}{case}: max |Δ grad| = {diff:.3g}")
    # --8<-- [end:fixes]


def main() -> None:
    device = setup()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    # the global batch, drawn on the CPU: the same on every rank
    ids = torch.randint(256, (4 * world, 32))
    targets = torch.randint(256, (4 * world, 32))
    mine = slice(4 * rank, 4 * rank + 4)  # this rank's 4 sequences
    ids, targets = ids[mine].to(device), targets[mine].to(device)
    try:
        # the models, failed ones too, go before the group does
        reproduce(ids, targets, device)
        fix(ids, targets, device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
