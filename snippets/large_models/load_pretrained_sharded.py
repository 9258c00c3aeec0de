"""Build on the meta device, shard, then load pretrained weights from
rank 0 into the shards: no other rank ever holds the full model. Then a
sharded DCP checkpoint of it to one torch.save file and back, resumed on
2 ranks: the same tensors throughout."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/load_pretrained_sharded.py
# output-excerpt: load ^(?:pretrained file|rank \d|every shard)
# output-excerpt: convert ^(?:sharded|full\.pt|DCP)

import gc
import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.format_utils import (
    dcp_to_torch_save,
    torch_save_to_dcp,
)
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
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


def local(state: dict) -> dict:
    """This rank's pieces of a (nested) state
    dict: DTensors by their local shard."""
    if isinstance(state, dict):
        return {k: local(v) for k, v in state.items()}
    return state.to_local() if hasattr(state, "to_local") else state


def equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


# --8<-- [start:convert]
def to_one_file_and_back(
    sharded_dir: Path, file: Path, again_dir: Path
) -> dict:
    """One process, no process group: what a
    converter script on a single machine does."""
    # every shard read and stitched: needs memory for the whole state
    dcp_to_torch_save(sharded_dir, file)
    # {"model": {...}, "optim": {...}}, plain full tensors
    full = torch.load(file, weights_only=True)
    # torch.load(weights_only=False) inside: trusted files only
    torch_save_to_dcp(file, again_dir)
    return full


# --8<-- [end:convert]


def load_and_check(
    mesh: DeviceMesh, device: torch.device, root: Path
) -> tuple[TinyLM, torch.optim.Optimizer]:
    rank = dist.get_rank()
    path = root / "pretrained.pt"
    if rank == 0:
        root.mkdir()
        save_pretrained(path)
    dist.barrier()  # the file exists before anyone reads it

    model = build_sharded(mesh, device)
    load_pretrained(model, path)
    # before any forward: from then until the next backward, the root
    # module holds its gathered parameters in place of the shards
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    assert all(isinstance(p, DTensor) for p in model.parameters())
    held = {
        "shards": nbytes(p.to_local() for p in model.parameters()),
        "full copy": nbytes(
            torch.load(path, mmap=True, weights_only=True).values()
        )
        if rank == 0
        else 0,
    }

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
        plain = TinyLM()
        # an ordinary single-process model of the same weights
        plain.load_state_dict(pretrained)
        assert torch.equal(out.cpu(), plain(tokens.cpu())), (
            "the sharded model computes what the plain one does"
        )
    # --8<-- [end:check]
    assert rank == 0 or gathered == {}, (
        "cpu_offload=True: only rank 0 receives the full state dict"
    )

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, held)
    if rank == 0:
        total = nbytes(plain.parameters())
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
            "sharded forward equals the plain model's"
        )
    return model, optimizer


def convert_and_resume(
    model: TinyLM, optimizer: torch.optim.Optimizer, mesh: DeviceMesh,
    device: torch.device, root: Path,
) -> None:  # fmt: skip
    rank = dist.get_rank()
    tokens = torch.arange(16, device=device) * 7 % 512
    targets = (tokens + 1) % 512  # the next token
    nn.functional.cross_entropy(model(tokens), targets).backward()
    # AdamW now has state (exp_avg, exp_avg_sq, step) to carry along
    optimizer.step()

    # --8<-- [start:save]
    # sharded DTensors, keyed by parameter name
    model_sd, optim_sd = get_state_dict(model, optimizer)
    # each rank its shards
    dcp.save(
        {"model": model_sd, "optim": optim_sd}, checkpoint_id=root / "sharded"
    )
    # --8<-- [end:save]
    before = local({"model": model_sd, "optim": optim_sd["state"]})
    # all-gather, for the check below
    gathered = {k: v.full_tensor().cpu() for k, v in model_sd.items()}

    if rank == 0:
        full = to_one_file_and_back(
            root / "sharded", root / "full.pt", root / "sharded-again"
        )
        plain = TinyLM()
        # the file serves a single-process model as it is
        plain.load_state_dict(full["model"])
        assert all(
            torch.equal(plain.state_dict()[k], t) for k, t in gathered.items()
        )
        for name in ("sharded", "sharded-again"):
            print(
                f"{name}/: "
                f"{', '.join(sorted(f.name for f in (root / name).iterdir()))}"
            )
        tensors = sum(
            1 for v in full["optim"]["state"].values() for t in v.values()
        )
        print(
            f"full.pt: {len(full['model'])} model tensors, {tensors} "
            "optimizer tensors, loads into a plain model"
        )
    dist.barrier()  # the converted checkpoint exists

    # --8<-- [start:resume]
    # a new job: uninitialised shards, no optimizer state yet
    resumed = build_sharded(mesh, device)
    resumed_optimizer = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    # the layout to load into
    model_sd, optim_sd = get_state_dict(resumed, resumed_optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    # each rank reads the slices of its own shards
    dcp.load(state, checkpoint_id=root / "sharded-again")
    set_state_dict(
        resumed,
        resumed_optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
    )
    # --8<-- [end:resume]
    after = local({"model": state["model"], "optim": state["optim"]["state"]})
    assert equal(after, before), f"rank {rank}: the round trip changed a tensor"
    assert torch.equal(resumed(tokens), model(tokens)), "the same forward"
    dist.barrier()  # every rank has checked its shards
    if rank == 0:
        print(
            "DCP (2 ranks) -> full.pt -> DCP (1 file) -> 2 ranks: every "
            "shard and Adam state bit-identical"
        )


def run(mesh: DeviceMesh, device: torch.device, root: Path) -> None:
    model, optimizer = load_and_check(mesh, device, root)
    convert_and_resume(model, optimizer, mesh, device, root)


def main() -> None:
    device = setup()
    # 1-D: every rank holds a shard
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    # same on all ranks
    root = (
        Path(tempfile.gettempdir())
        / f"large-model-{os.environ['TORCHELASTIC_RUN_ID']}"
    )
    try:
        # every sharded model lives and dies in here, before the groups go
        run(mesh, device, root)
    finally:
        if dist.get_rank() == 0:
            shutil.rmtree(root, ignore_errors=True)
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
