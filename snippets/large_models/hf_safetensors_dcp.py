"""A Hugging Face checkpoint (safetensors, Llama names, bf16) read into an
FSDP2 model with DCP, every rank reading only its slices; the same shards
as rank 0 broadcasting the file; each rank's peak host memory measured;
then the model written back as a Hugging Face checkpoint, equal to the
source file for file."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/hf_safetensors_dcp.py
# output-varies: \+(\s*[\d.]+) MB (?:reading|by)

import gc
import json
import os
import shutil
import tempfile
from pathlib import Path

import safetensors.torch
import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint import (
    HuggingFaceStorageReader,
    HuggingFaceStorageWriter,
)
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
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


# --8<-- [start:model]
class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            nn.Linear(dim, dim, bias=False) for _ in range(4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (
            f(x).view(b, s, self.heads, -1).transpose(1, 2)
            for f in (self.q_proj, self.k_proj, self.v_proj)
        )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(a.transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.self_attn = Attention(dim, heads)
        self.mlp = MLP(dim, 4 * dim)
        self.input_layernorm = nn.RMSNorm(dim)
        self.post_attention_layernorm = nn.RMSNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            DecoderLayer(dim, heads) for _ in range(layers)
        )
        self.norm = nn.RMSNorm(dim)


class LlamaLike(nn.Module):
    """Module names as in Hugging Face's Llama, so the state dict's keys
    are the file's: model.layers.0.self_attn.q_proj.weight, lm_head.weight"""

    def __init__(self, vocab=32_000, dim=256, heads=4, layers=2):
        super().__init__()
        self.model = Decoder(vocab, dim, heads, layers)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))


# --8<-- [end:model]


def write_pretrained(path: Path) -> None:
    """Stands in for a downloaded checkpoint: bf16 tensors in two
    safetensors files and the index that maps each name to its file."""
    torch.manual_seed(0)
    state = {
        k: v.to(torch.bfloat16) for k, v in LlamaLike().state_dict().items()
    }
    names = list(state)
    files = {1: names[: len(names) // 2], 2: names[len(names) // 2 :]}
    weight_map = {}
    for i, keys in files.items():
        name = f"model-{i:05d}-of-{len(files):05d}.safetensors"
        safetensors.torch.save_file({k: state[k] for k in keys}, path / name)
        weight_map.update(dict.fromkeys(keys, name))
    index = {"metadata": {}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


# --8<-- [start:build]
def build_sharded(mesh: DeviceMesh, device: torch.device) -> LlamaLike:
    with torch.device("meta"):
        model = LlamaLike()  # no memory, no random init
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)  # my shards, uninitialised
    return model


# --8<-- [end:build]


# --8<-- [start:read]
def load_hf(model: LlamaLike, path: Path) -> None:
    """Every rank reads the slices of its own shards from the files."""
    # sharded DTensors, keyed like the file; dcp.load fills them in place
    state = get_model_state_dict(model)
    dcp.load(state, storage_reader=HuggingFaceStorageReader(str(path)))


# --8<-- [end:read]


# --8<-- [start:broadcast]
def load_hf_broadcast(model: LlamaLike, path: Path) -> None:
    """Rank 0 reads every file; the tensors go out one by one."""
    full = {}
    if dist.get_rank() == 0:
        for file in sorted(path.glob("*.safetensors")):
            full.update(safetensors.torch.load_file(file))
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, full, options=options)


# --8<-- [end:broadcast]


# --8<-- [start:write]
def save_hf(model: LlamaLike, path: Path, weight_map: dict) -> None:
    """Each rank writes its shards; rank 0 then joins them into full
    tensors, in the files weight_map names, with the index beside them."""
    files = sorted(set(weight_map.values()))
    # a file index from 1 for each name, as in the source checkpoint
    mapping = {k: files.index(f) + 1 for k, f in weight_map.items()}
    state = {
        k: v.to(torch.bfloat16)  # export in the checkpoint's dtype
        for k, v in get_model_state_dict(model).items()
    }
    writer = HuggingFaceStorageWriter(
        str(path),
        fqn_to_index_mapping=mapping,
        save_distributed=True,  # every rank writes its own shards
        enable_consolidation=True,  # then rank 0 joins them
    )
    dcp.save(state, storage_writer=writer)


# --8<-- [end:write]


# --8<-- [start:memory]
def peak_rss_during(load, *args) -> int:
    """How far this process's resident memory rose above where it stood,
    at its highest, while `load` ran (Linux: VmHWM, reset first)."""

    def status(field: str) -> int:  # in bytes
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field)

    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = status("VmRSS")
    load(*args)
    return status("VmHWM") - before


# --8<-- [end:memory]


def mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def read_files(path: Path) -> dict[str, torch.Tensor]:
    out = {}
    for file in sorted(path.glob("*.safetensors")):
        out.update(safetensors.torch.load_file(file))
    return out


def load_both(mesh, device, source: Path) -> tuple[LlamaLike, dict]:
    """Both ways of loading; the same shards; what each cost in memory."""
    by_dcp = build_sharded(mesh, device)
    peak_dcp = peak_rss_during(load_hf, by_dcp, source)
    by_broadcast = build_sharded(mesh, device)
    peak_broadcast = peak_rss_during(load_hf_broadcast, by_broadcast, source)
    a, b = get_model_state_dict(by_dcp), get_model_state_dict(by_broadcast)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key].to_local(), b[key].to_local()), key
    params = list(by_dcp.parameters())
    memory = {
        "shards": sum(p.to_local().nbytes for p in params),
        # the file's tensors are bf16: 2 bytes an element
        "file": sum(p.numel() * 2 for p in params),
        "largest": max(p.numel() * 2 for p in params),
        "dcp": peak_dcp,
        "broadcast": peak_broadcast,
    }
    del by_broadcast
    return by_dcp, memory


def check_memory(memory: dict) -> None:
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, memory)
    for rank, m in enumerate(everyone):
        # nobody held the whole checkpoint on top of its shards ...
        assert m["dcp"] < m["shards"] + m["file"], f"rank {rank}, DCP"
        if rank > 0:
            assert m["broadcast"] < m["shards"] + m["file"], f"rank {rank}"
    # ... except rank 0 broadcasting: it read all of it
    assert everyone[0]["broadcast"] > everyone[0]["file"], "rank 0"
    if dist.get_rank() != 0:
        return
    print(
        f"file: {mb(memory['file'])} of bf16 tensors, the largest "
        f"{mb(memory['largest'])}"
    )
    for rank, m in enumerate(everyone):
        print(
            f"rank {rank}: fp32 shards {mb(m['shards'])}; peak RSS "
            f"+{mb(m['dcp']):>9} reading its slices (DCP), "
            f"+{mb(m['broadcast']):>9} by broadcast from rank 0"
        )


def export_and_check(model: LlamaLike, source: Path, export: Path) -> None:
    weight_map = json.loads(
        (source / "model.safetensors.index.json").read_text()
    )
    save_hf(model, export, weight_map["weight_map"])
    tokens = torch.arange(16, device=next(model.parameters()).device)[None]
    out = model(tokens)  # the sharded model (a collective: every rank)
    if dist.get_rank() != 0:
        return
    exported, original = read_files(export), read_files(source)
    assert exported.keys() == original.keys()
    for key, tensor in original.items():
        assert torch.equal(exported[key], tensor), key
    index = json.loads((export / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == weight_map["weight_map"]
    plain = LlamaLike()
    plain.load_state_dict({k: v.float() for k, v in exported.items()})
    assert torch.allclose(plain(tokens.cpu()), out.cpu(), atol=1e-5)
    print(
        "exported: "
        + ", ".join(sorted(f.name for f in export.iterdir() if f.is_file()))
    )
    print(
        "every tensor equals the source file's, bit for bit; a plain model "
        "loaded from it computes what the sharded one does"
    )


def run(mesh: DeviceMesh, device: torch.device, root: Path) -> None:
    source = root / "pretrained"
    if dist.get_rank() == 0:
        source.mkdir(parents=True)
        write_pretrained(source)
    dist.barrier()  # the files exist before anyone reads them
    model, memory = load_both(mesh, device, source)
    if dist.get_rank() == 0:
        print(
            "source: "
            + ", ".join(sorted(f.name for f in source.iterdir()))
            + " (bf16)"
        )
        print("DCP's sharded read and rank 0's broadcast: the same shards")
    check_memory(memory)
    export_and_check(model, source, root / "export")


def main() -> None:
    device = setup()  # the process group first, with its backend
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    root = (
        Path(tempfile.gettempdir())
        / f"hf-checkpoint-{os.environ['TORCHELASTIC_RUN_ID']}"
    )
    try:
        run(mesh, device, root)
    finally:
        dist.barrier()
        if dist.get_rank() == 0:
            shutil.rmtree(root, ignore_errors=True)
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
