"""Activation checkpointing under DDP: the same gradients, a fraction of the
activations saved for backward, one more forward per block. Selective
checkpointing keeps the matmuls and recomputes the rest."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/checkpoint_ddp.py
# output-varies: ^(?:none|full|selective) .* (\S+)$

import functools
import inspect
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)
from torch.utils.flop_counter import FlopCounterMode


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


# --8<-- [start:policy]
aten = torch.ops.aten
# matmuls and attention kernels: keep their outputs, recompute the rest
EXPENSIVE = {
    aten.mm.default,
    aten.addmm.default,
    aten._scaled_dot_product_flash_attention.default,  # CUDA
    aten._scaled_dot_product_efficient_attention.default,  # CUDA, fp32
    aten._scaled_dot_product_flash_attention_for_cpu.default,
}


def keep_expensive(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return (
        CheckpointPolicy.MUST_SAVE
        if op in EXPENSIVE
        else CheckpointPolicy.PREFER_RECOMPUTE
    )


# Newer torch shows saved_tensors_hooks what selective checkpointing keeps,
# if asked (pytorch#190581); the default is changing, so say it. Torch 2.10
# has no such argument: the hooks never see those tensors.
HOOKS_SEE_SAC = (
    "respect_saved_tensors_hooks" in inspect.signature(checkpoint).parameters
)
SAC_OPTIONS = {"respect_saved_tensors_hooks": True} if HOOKS_SEE_SAC else {}


def selective_checkpoint(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    context = functools.partial(
        create_selective_checkpoint_contexts, keep_expensive
    )
    return checkpoint(
        block, x, use_reentrant=False, context_fn=context, **SAC_OPTIONS
    )


# --8<-- [end:policy]


# --8<-- [start:model]
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


class TinyLM(nn.Module):
    """`checkpointing`: "none", "full" or "selective", for every block."""

    def __init__(
        self, vocab=256, hidden=64, heads=4, layers=4, checkpointing="none"
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.checkpointing = checkpointing

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            if self.checkpointing == "full":
                # keep only the block's input; rerun its forward in backward
                x = checkpoint(block, x, use_reentrant=False)
            elif self.checkpointing == "selective":
                x = selective_checkpoint(block, x)
            else:
                x = block(x)
        return self.head(self.norm(x))


# --8<-- [end:model]


# same as snippets/large_models/memory_breakdown.py:SavedBytes
class SavedBytes(torch.autograd.graph.saved_tensors_hooks):
    """Counts the bytes autograd keeps for backward inside a `with` block.

    Each storage counts once (a tensor and its views share one), parameters
    not at all: they are counted as weights.
    """

    def __init__(self):
        self.storages = {}  # data pointer -> bytes
        super().__init__(self.pack, lambda tensor: tensor)

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        # _base: the tensor a view was taken from
        base = tensor if tensor._base is None else tensor._base
        # a weight, or its transpose as nn.Linear saves it, is no activation
        if not isinstance(base, nn.Parameter):
            storage = tensor.untyped_storage()
            self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor  # autograd keeps the tensor as always: we only look

    def __enter__(self) -> "SavedBytes":
        super().__enter__()
        return self

    @property
    def total(self) -> int:
        return sum(self.storages.values())


# --8<-- [start:step]
def train_step(ids, targets, device, checkpointing: str):
    """One DDP step of a fresh TinyLM: the bytes saved for backward, the
    FLOPs, the gradients."""
    torch.manual_seed(0)  # the same initial weights for every variant
    model = TinyLM(checkpointing=checkpointing).to(device)
    device_ids = [device.index] if device.type == "cuda" else None
    ddp = DDP(model, device_ids=device_ids)
    with FlopCounterMode(display=False) as flops:
        with SavedBytes() as saved:
            logits = ddp(ids)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()  # checkpointed blocks run their forward again first
    grads = [p.grad for p in model.parameters()]
    return saved.total, flops.get_total_flops(), grads


# --8<-- [end:step]


def my_batch(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    # the global batch, drawn on the CPU: the same on every rank
    ids = torch.randint(256, (4 * world, 64))
    targets = torch.randint(256, (4 * world, 64))
    mine = slice(4 * rank, 4 * rank + 4)  # this rank's 4 sequences
    # copies: a view would keep the whole batch's storage alive (and counted)
    return ids[mine].clone().to(device), targets[mine].clone().to(device)


def compare(device: torch.device) -> tuple[dict, dict]:
    ids, targets = my_batch(device)
    # --8<-- [start:compare]
    modes = ("none", "full", "selective")
    runs = {mode: train_step(ids, targets, device, mode) for mode in modes}
    saved, flops, grads = runs["none"]
    # bit-identical on CPU: the recomputation is exact; a GPU's attention
    # backward may add in a different order
    limit = 0.0 if device.type == "cpu" else 1e-5
    diffs = {}
    for mode, (_, _, other) in runs.items():
        diffs[mode] = max(
            (a - b).abs().max().item() for a, b in zip(grads, other)
        )
        assert diffs[mode] <= limit, (mode, diffs[mode])
    full_saved, full_flops, _ = runs["full"]
    assert saved / full_saved > 5, "a block's 16 tensors of width d become 1"
    # at most one more forward, and forward + backward = 3 forwards
    assert flops < full_flops <= flops * 4 / 3, (flops, full_flops)
    selective_saved, selective_flops, _ = runs["selective"]
    assert selective_flops == flops, "no matmul or attention runs twice"
    if HOOKS_SEE_SAC:
        assert full_saved < selective_saved < saved, selective_saved
    # --8<-- [end:compare]
    return runs, diffs


def report(runs: dict, diffs: dict) -> None:
    (saved, flops, _), (full_saved, full_flops, _) = runs["none"], runs["full"]
    world = dist.get_world_size()
    print(f"DDP, {world} ranks; TinyLM, 4 blocks; 256 tokens a rank")
    print(f"{'checkpointing':14}{'saved for backward':>20}", end="")
    print(f"{'FLOPs':>16}{'max |Δ grad|':>15}")
    for mode, (nbytes, count, _) in runs.items():
        visible = mode != "selective" or HOOKS_SEE_SAC
        shown = f"{nbytes:,} B" if visible else "(not visible)"
        print(f"{mode:14}{shown:>20}{count:>16,}{diffs[mode]:>15.3g}")
    print(f"full: {saved / full_saved:.1f}× fewer bytes saved, ", end="")
    print(f"{full_flops / flops:.3f}× the FLOPs")


def main() -> None:
    device = setup()
    try:
        # every DDP model lives and dies in here, before the group goes
        runs, diffs = compare(device)
        if dist.get_rank() == 0:
            report(runs, diffs)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
