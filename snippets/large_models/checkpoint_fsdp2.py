"""Activation checkpointing with FSDP2: each block checkpointed in the
model's code and sharded with fully_shard; the same gradients, and each rank
keeps a fraction of the activations."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/checkpoint_fsdp2.py

import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
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


# same as snippets/large_models/memory_breakdown.py:TinyLM
class TinyLM(nn.Module):
    def __init__(self, vocab, hidden, heads, layers, dropout=0.0, ckpt=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        blocks = [Block(hidden, heads, dropout) for _ in range(layers)]
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.ckpt = ckpt  # activation checkpointing of every block

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            if self.ckpt:  # keep only the block's input
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.norm(x))


# --8<-- [start:build]
def build(ckpt: bool, mesh: DeviceMesh, device: torch.device) -> TinyLM:
    torch.manual_seed(0)  # the same weights with and without checkpointing
    # ckpt=True: each block checkpointed in the model's forward
    model = TinyLM(256, 64, 4, 4, ckpt=ckpt).to(device)
    for block in model.blocks:
        # one FSDP unit: gathered before its forward, again before its backward
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)  # the root: embedding, last norm, head
    return model


# --8<-- [end:build]


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


def run(mesh: DeviceMesh, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    ids = torch.randint(256, (4 * world, 64), device=device)
    targets = torch.randint(256, (4 * world, 64), device=device)
    ids = ids.chunk(world)[rank].clone()  # this rank's 4 sequences
    targets = targets.chunk(world)[rank].clone()

    # --8<-- [start:compare]
    saved, grads = {}, {}
    for ckpt in (False, True):
        model = build(ckpt, mesh, device)
        with SavedBytes() as counter:
            logits = model(ids).flatten(0, 1)
            loss = F.cross_entropy(logits, targets.flatten())
        # per block: all-gather, recompute its forward (if checkpointed),
        # its backward, reduce-scatter
        loss.backward()
        saved[ckpt] = counter.total
        # all-gathered for the check
        grads[ckpt] = [p.grad.full_tensor() for p in model.parameters()]
    pairs = zip(grads[False], grads[True])
    diff = max((a - b).abs().max().item() for a, b in pairs)
    # bit-identical on CPU: the recomputation is exact, the reductions the
    # same; a GPU's attention backward may add in a different order
    assert diff <= (0.0 if device.type == "cpu" else 1e-5), diff
    assert saved[False] / saved[True] > 5
    # --8<-- [end:compare]

    if rank == 0:
        print(f"FSDP2, {world} ranks; TinyLM, 4 blocks, one FSDP unit each")
        print(f"{ids.numel()} tokens per rank; saved for backward per rank:")
        print(f"  without checkpointing {saved[False]:>12,} B")
        print(f"  with checkpointing    {saved[True]:>12,} B")
        ratio = saved[False] / saved[True]
        print(f"{ratio:.1f}× fewer; max |Δ grad| = {diff:.3g}")


def main() -> None:
    device = setup()
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    try:
        run(mesh, device)  # every model lives and dies in here
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
