"""Build on the meta device, shard, then load pretrained weights from
rank 0 into the shards: no other rank ever holds the full model."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/load_pretrained_sharded.py

import gc
import os
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor


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


# --8<-- [start:model]
class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mlp(self.norm(h))


class TinyLM(nn.Module):
    def __init__(
        self, vocab: int = 512, dim: int = 64, seq: int = 16, layers: int = 4
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)
        # computed from the shapes, not learned: not in
        # the state dict, so no checkpoint restores it
        self.register_buffer("pos", torch.empty(seq, dim), persistent=False)
        self.init_buffers()

    def init_buffers(self) -> None:
        seq, dim = self.pos.shape
        angle = torch.arange(seq, device=self.pos.device)[:, None] / 10_000 ** (
            torch.arange(0, dim, 2, device=self.pos.device) / dim
        )
        self.pos.copy_(torch.cat([angle.sin(), angle.cos()], dim=1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # one sequence of token ids
        h = self.embed(tokens) + self.pos[: len(tokens)]
        for block in self.blocks:
            h = block(h)
        return self.head(h)


# --8<-- [end:model]


def save_pretrained(path: Path) -> None:
    """Stands in for a downloaded checkpoint: one
    torch.save file of a plain model's state dict."""
    torch.manual_seed(0)
    torch.save(TinyLM().state_dict(), path)


# --8<-- [start:build]
def build_sharded(mesh: DeviceMesh, device: torch.device) -> TinyLM:
    with torch.device("meta"):
        model = TinyLM()  # shapes and dtypes only: no memory, no random init
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    # the parameters are now sharded DTensors, still on meta
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)  # allocate my shards only, uninitialised
    with torch.no_grad():
        # what no state dict carries must be computed again
        model.init_buffers()
    return model


# --8<-- [end:build]


# --8<-- [start:load]
def load_pretrained(model: TinyLM, path: Path) -> None:
    if dist.get_rank() == 0:
        # mmap: the file is mapped, not read;
        # pages come in as each tensor is sent
        full = torch.load(
            path, map_location="cpu", mmap=True, weights_only=True
        )
    else:
        full = {}  # the other ranks hold nothing
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    # rank 0 broadcasts tensor by tensor; each keeps its shard
    set_model_state_dict(model, full, options=options)


# --8<-- [end:load]


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def check(model: TinyLM, path: Path, device: torch.device) -> None:
    rank = dist.get_rank()
    # --8<-- [start:check]
    # gathered on rank 0, in CPU memory
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # a collective; the other ranks get {}
    gathered = get_model_state_dict(model, options=options)
    tokens = torch.arange(16, device=device) * 31 % 512
    out = model(tokens)  # the sharded model, pos buffer included
    if rank == 0:
        pretrained = torch.load(path, weights_only=True)
        assert gathered.keys() == pretrained.keys()
        for key, tensor in pretrained.items():
            assert torch.equal(gathered[key], tensor), (
                f"{key}: the shards are not the pretrained weights"
            )
        with torch.device(device):
            # an ordinary one-process model of the same weights, on the
            # same device: the comparison is of code, not of devices
            plain = TinyLM()
        plain.load_state_dict(pretrained)
        # float32's default tolerance: equal here, but a GPU may pick
        # other kernels for the gathered weights than for plain ones
        torch.testing.assert_close(out, plain(tokens))
    else:
        assert gathered == {}, "only rank 0 receives the full state dict"
    # --8<-- [end:check]


def report(held: dict, path: Path) -> None:
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, held)  # every rank's bytes
    if dist.get_rank() != 0:
        return
    pretrained = torch.load(path, mmap=True, weights_only=True)
    total = nbytes(pretrained.values())
    assert sum(h["shards"] for h in everyone) == total, (
        "the shards add up to the model"
    )
    print(
        f"pretrained file: {total:,} bytes of parameters "
        f"({len(pretrained)} tensors)"
    )
    for r, h in enumerate(everyone):
        full = (
            f"{h['full copy']:,} bytes (CPU, memory-mapped)"
            if h["full copy"]
            else "none"
        )
        print(
            f"rank {r}: its shards {h['shards']:,} bytes; the full "
            f"state dict: {full}"
        )
    print(
        "every shard equals the pretrained weights bit for bit; the "
        "sharded forward matches the plain model's"
    )


def run(mesh: DeviceMesh, device: torch.device, path: Path) -> None:
    rank = dist.get_rank()
    if rank == 0:
        save_pretrained(path)
    dist.barrier()  # the file exists before anyone reads it

    model = build_sharded(mesh, device)
    load_pretrained(model, path)
    assert all(isinstance(p, DTensor) for p in model.parameters())
    held = {
        "shards": nbytes(p.to_local() for p in model.parameters()),
        # what rank 0's load_pretrained held: the memory-mapped file
        "full copy": nbytes(
            torch.load(path, mmap=True, weights_only=True).values()
        )
        if rank == 0
        else 0,
    }
    check(model, path, device)
    report(held, path)


def main() -> None:
    device = setup()  # the process group first, with its backend
    # 1-D: every rank holds a shard
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    # same on all ranks
    path = (
        Path(tempfile.gettempdir())
        / f"pretrained-{os.environ['TORCHELASTIC_RUN_ID']}.pt"
    )
    try:
        # every sharded model lives and dies in here, before the groups go
        run(mesh, device, path)
    finally:
        if dist.get_rank() == 0:
            path.unlink(missing_ok=True)
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
