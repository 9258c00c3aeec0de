"""A real training job in one program: a Llama-style model from a Hugging
Face safetensors directory, FSDP2 x tensor parallelism on a device mesh,
selective activation checkpointing, compile per block, token-weighted
gradient accumulation, packed documents, asynchronous DCP checkpoints with
an exact resume, and a safetensors export that transformers loads."""
# launch: torchrun --standalone --nproc-per-node=4 snippets/job/train.py --tp=2 --steps=8
# timeout: 300
# inductor: gpus
# output-varies: loss (\d+\.\d+)
# output-varies: grad norm (\d+\.\d+)
# output-varies: ([\d,]+) tok/s
# output-varies: peak RSS ([\d,]+) MiB
# output-varies: ; (\d+) rows
# output-varies: exported to (\S+)

# --8<-- [start:imports]
import os

# the flight recorder keeps the last collectives of every group
# (torch 2.10 keeps none unless told): set before any group exists
os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")

import argparse
import functools
import gc
import json
import math
import resource
import signal
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from model import ModelArgs, Transformer  # model.py, beside this file
from safetensors.torch import save_file
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    checkpoint_wrapper,
)
from torch.distributed.checkpoint import HuggingFaceStorageReader
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    FSDPModule,
    MixedPrecisionPolicy,
    fully_shard,
)
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.utils.checkpoint import (
    CheckpointPolicy,
    create_selective_checkpoint_contexts,
)
from torch.utils.flop_counter import FlopCounterMode

# --8<-- [end:imports]


# --8<-- [start:config]
# every local rank gets a GPU: the test setup() makes, below
GPUS = torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", 1))
HERE = Path(__file__).resolve().parent
PAGES = HERE.parents[1] / "docs"  # the guide's pages, in its repository


@dataclass
class Config:
    # where things are
    # text to train on: the guide's pages, or this folder's programs
    # where they are not (a notebook)
    data: Path = PAGES if PAGES.is_dir() else HERE
    out: Path = Path(tempfile.gettempdir()) / "job"  # checkpoints, export
    init_from: Path | None = None  # a Hugging Face Llama directory
    # the mesh: world = replicate x shard x tp
    tp: int = 1  # tensor-parallel degree, inside a node
    replicate: int = 1  # HSDP: replicas of the sharded model
    # the batch: global_batch sequences per step, on all ranks together
    seq_len: int = 64
    global_batch: int = 8
    micro_batch: int = 2  # sequences per rank and forward
    # the optimization
    steps: int = 20
    lr: float = 3e-3
    warmup: int = 4
    weight_decay: float = 0.1
    max_norm: float = 1.0
    seed: int = 0
    # a checkpoint every ckpt_every steps; the newest `keep` stay
    ckpt_every: int = 4
    keep: int = 2
    # speed: on by default on GPUs
    compile: bool = GPUS
    bf16: bool = GPUS  # parameters in bf16 for compute, fp32 kept
    peak_tflops: float | None = None  # for MFU; else from the device


def parse_config(argv: list[str] | None = None) -> Config:
    """One flag per field: --global-batch=16, --no-compile, ..."""
    parser = argparse.ArgumentParser(description=__doc__)
    for f in fields(Config):
        flag = "--" + f.name.replace("_", "-")
        if f.type is bool:
            action = argparse.BooleanOptionalAction
            parser.add_argument(flag, action=action, default=f.default)
        else:
            kind = f.type.__args__[0] if f.default is None else f.type
            parser.add_argument(flag, type=kind, default=f.default)
    cfg = Config(**vars(parser.parse_args(argv)))
    # checked before any process group exists
    world = int(os.environ["WORLD_SIZE"])  # set by torchrun
    dp = world // cfg.tp  # ranks that read different rows
    assert dp * cfg.tp == world and dp % cfg.replicate == 0, (
        f"{world} ranks are not replicate x shard x tp"
    )
    assert cfg.global_batch % (dp * cfg.micro_batch) == 0, (
        f"global batch {cfg.global_batch} != {dp} ranks x micro-batches"
    )
    return cfg


# --8<-- [end:config]


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


# --8<-- [start:mesh]
def make_mesh(cfg: Config, device: torch.device) -> DeviceMesh:
    """(replicate, shard, tp), the last dimension the
    fastest: tp groups are consecutive ranks, one node."""
    shard = dist.get_world_size() // (cfg.replicate * cfg.tp)
    # the process group exists already, with its backend
    return init_device_mesh(
        device.type,
        (cfg.replicate, shard, cfg.tp),
        mesh_dim_names=("replicate", "shard", "tp"),
    )


def data_parallel(mesh: DeviceMesh) -> tuple[int, int]:
    """This rank's index among the ranks that read different
    data, and their number: the tp ranks of a group share."""
    replica, shard = mesh["replicate"], mesh["shard"]
    index = replica.get_local_rank() * shard.size() + shard.get_local_rank()
    return index, replica.size() * shard.size()


# --8<-- [end:mesh]


# --8<-- [start:data]
BOS, EOS = 256, 257  # byte tokens are 0-255
IGNORE = -100  # a label cross_entropy skips


def pack(folder: Path, seq_len: int) -> torch.Tensor:
    """Every file a document: <bos> its UTF-8 bytes <eos>, all in one
    stream, cut into rows of seq_len + 1 tokens (inputs and the
    next token). A document may continue in the next row."""
    pieces = []
    text_files = (p for p in folder.rglob("*") if p.suffix in (".md", ".py"))
    for path in sorted(text_files):
        text = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8)
        pieces += [torch.tensor([BOS]), text.long(), torch.tensor([EOS])]
    stream = torch.cat(pieces)
    rows = len(stream) // (seq_len + 1)
    return stream[: rows * (seq_len + 1)].view(rows, seq_len + 1)


def inputs_and_labels(rows: torch.Tensor):
    """tokens, their positions in their document, the next tokens;
    the label that starts a new document is skipped."""
    tokens, labels = rows[:, :-1], rows[:, 1:].clone()
    index = torch.arange(tokens.shape[1]).expand_as(tokens)
    # a document starts at <bos>, or where the row starts
    starts = torch.where((tokens == BOS) | (index == 0), index, 0)
    positions = index - starts.cummax(dim=1).values
    labels[labels == BOS] = IGNORE  # no attention across documents
    return tokens, positions, labels


class Sampler:
    """The rows each step reads. One shuffled order of all rows per
    epoch, the same on every rank; each rank reads its slice of each
    step's rows. The state is the same on every rank, so it resumes
    on any number of ranks."""

    def __init__(self, rows: int, cfg: Config, dp_rank: int, dp: int):
        self.rows, self.batch, self.seed = rows, cfg.global_batch, cfg.seed
        self.mine = slice(
            dp_rank * self.batch // dp, (dp_rank + 1) * self.batch // dp
        )
        self.epoch, self.position = 0, 0

    def next_step(self) -> torch.Tensor:
        """The indices of the rows this rank reads in the next step."""
        if self.position + self.batch > self.rows:  # drop the tail
            self.epoch, self.position = self.epoch + 1, 0
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.rows, generator=g)
        step = order[self.position : self.position + self.batch]
        self.position += self.batch
        return step[self.mine]

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "rows": self.rows,
        }

    def load_state_dict(self, state: dict) -> None:
        assert state["rows"] == self.rows, "the data changed since the save"
        self.epoch, self.position = state["epoch"], state["position"]


# --8<-- [end:data]


# --8<-- [start:parallelize]
def tensor_parallel(model: Transformer, tp: DeviceMesh) -> None:
    """Megatron's pairs, column- then row-wise, with sequence
    parallelism: between them, activations are split by position."""
    parallelize_module(model, tp, {
        "model.embed_tokens": RowwiseParallel(
            input_layouts=Replicate(), output_layouts=Shard(1)
        ),
        "model.norm": SequenceParallel(),
        # full logits on every tp rank: the loss needs no change
        "lm_head": ColwiseParallel(
            input_layouts=Shard(1), output_layouts=Replicate()
        ),
    })  # fmt: skip
    gather = PrepareModuleInput(  # the whole sequence for attention
        input_layouts=(Shard(1), None, None, None),
        desired_input_layouts=(Replicate(), None, None, None),
    )
    for block in model.model.layers:
        parallelize_module(block, tp, {
            "input_layernorm": SequenceParallel(),
            "self_attn": gather,
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            ),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
        })  # fmt: skip


# under TP the logits the root returns are a view; FSDP warns that an
# in-place op on them would skip its hook, and the loss makes none
warnings.filterwarnings("ignore", "FSDP2-wrapped module .* returned a view")

aten, c10d = torch.ops.aten, torch.ops._c10d_functional
# outputs kept for backward; everything else is recomputed
KEEP = {
    aten.mm.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    c10d.reduce_scatter_tensor.default,  # tp: no collective recomputed
    c10d.all_gather_into_tensor.default,
}


def keep_expensive(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    if op in KEEP:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def copy(module: nn.Module, args: tuple, output: torch.Tensor):
    return output.clone()  # a copy, not a view


def parallelize(model: Transformer, mesh: DeviceMesh, cfg: Config) -> None:
    """TP, then per block checkpointing and compile,
    then FSDP: the order torchtitan uses."""
    if cfg.tp > 1:
        tensor_parallel(model, mesh["tp"])
    if cfg.tp > 1 and cfg.compile:
        # torch 2.15 (not 2.10): a compiled block loses the gradient of
        # an input that is the view DTensor.to_local() returns (the page)
        model.model.embed_tokens.register_forward_hook(copy)
    dp = mesh["replicate", "shard"] if cfg.replicate > 1 else mesh["shard"]
    policy = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if cfg.bf16 else None,
        reduce_dtype=torch.float32,
    )
    context = functools.partial(
        create_selective_checkpoint_contexts, keep_expensive
    )
    layers = model.model.layers
    for name, block in layers.named_children():
        block = checkpoint_wrapper(block, context_fn=context)
        if cfg.compile:
            block.compile()  # in place: the names stay the same
        fully_shard(block, mesh=dp, mp_policy=policy)
        layers.register_module(name, block)
    # the root: embedding, final norm, output layer
    fully_shard(model, mesh=dp, mp_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # sum the gradients; the loss divides by the global token count
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # gloo: no premul


# --8<-- [end:parallelize]


# --8<-- [start:weights]
def read_config(folder: Path) -> ModelArgs:
    """A Hugging Face config.json: our fields, same names."""
    config = json.loads((folder / "config.json").read_text())
    assert not config.get("tie_word_embeddings"), "tied weights: not here"
    # transformers 5 writes rope_theta inside rope_parameters
    config |= config.get("rope_parameters") or {}
    return ModelArgs(**{f.name: config[f.name] for f in fields(ModelArgs)})


def init_weights(args: ModelArgs, seed: int) -> dict[str, torch.Tensor]:
    """A fresh model on one process: the same start on any number of
    ranks. Normal(0, 0.02) matrices, norms at 1, as Llama's config."""
    torch.manual_seed(seed)
    model = Transformer(args)
    for p in model.parameters():
        if p.dim() == 2:
            nn.init.normal_(p, std=0.02)
    return model.state_dict()


def build(cfg: Config, mesh: DeviceMesh, device: torch.device) -> Transformer:
    args = read_config(cfg.init_from) if cfg.init_from else ModelArgs()
    with torch.device("meta"):
        model = Transformer(args)  # shapes only: no memory, no init
    parallelize(model, mesh, cfg)
    model.to_empty(device=device)  # this rank's shards, uninitialised
    if cfg.init_from:
        # every rank reads the slices of its own shards from the files
        shards = get_model_state_dict(model)
        reader = HuggingFaceStorageReader(str(cfg.init_from))
        dcp.load(shards, storage_reader=reader)
        set_model_state_dict(model, shards)
    else:
        # rank 0 initialises the whole model, every rank keeps its shards
        full = init_weights(args, cfg.seed) if dist.get_rank() == 0 else {}
        options = StateDictOptions(
            full_state_dict=True, broadcast_from_rank0=True
        )
        set_model_state_dict(model, full, options=options)
    return model


# --8<-- [end:weights]


# --8<-- [start:step]
def micro_batches(rows: torch.Tensor, cfg: Config, device: torch.device):
    tokens, positions, labels = inputs_and_labels(rows)
    return [
        (t.to(device), p.to(device), y.to(device))
        for t, p, y in zip(
            tokens.split(cfg.micro_batch),
            positions.split(cfg.micro_batch),
            labels.split(cfg.micro_batch),
        )
    ]


def train_step(model, optimizer, scheduler, batches, cfg: Config):
    """One optimizer step over this rank's micro-batches. Every
    token of the global batch weighs the same, on any layout."""
    device = batches[0][0].device
    # tokens with a label, all ranks: the tp ranks of a group count the same
    tokens = sum((labels != IGNORE).sum() for _, _, labels in batches)
    dist.all_reduce(tokens)
    tokens = tokens.float() / cfg.tp
    loss_sum = torch.zeros((), device=device)
    for i, (inputs, positions, labels) in enumerate(batches):
        # reduce-scatter the gradients in the last backward only
        model.set_requires_gradient_sync(i == len(batches) - 1)
        logits = model(inputs, positions).float()
        summed = F.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), reduction="sum"
        )
        (summed / tokens).backward()  # summed over ranks by FSDP
        loss_sum += summed.detach()
    # every gradient is a DTensor on one mesh: the plain call works
    norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.max_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    dist.all_reduce(loss_sum)  # for the log
    norm = norm.full_tensor() if isinstance(norm, DTensor) else norm
    return (loss_sum / cfg.tp / tokens).item(), norm.item()


def schedule(cfg: Config):
    """Linear warm-up, then cosine decay to a tenth."""

    def factor(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        done = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(done, 1.0)))

    return factor


# --8<-- [end:step]


# --8<-- [start:checkpoint]
class ModelAndOptimizer(Stateful):
    """DCP calls these at save and load: sharded state
    dicts, keyed by parameter name, any layout."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer):
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict:
        model, optim = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optim": optim}

    def load_state_dict(self, state: dict) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
        )


class RNG(Stateful):
    """Every rank seeds the same (DTensor's random ops need it): one
    copy. This model draws nothing; dropout would."""

    def state_dict(self) -> dict:
        state = {"cpu": torch.get_rng_state()}
        if GPUS:
            state["cuda"] = torch.cuda.get_rng_state()
        return state

    def load_state_dict(self, state: dict) -> None:
        torch.set_rng_state(state["cpu"])
        if GPUS:
            torch.cuda.set_rng_state(state["cuda"])


class Checkpointer:
    """Async DCP saves into out/checkpoints/step-N, one in flight at a
    time, on a gloo group of their own; resume from the newest."""

    def __init__(self, folder: Path, state: dict, keep: int):
        self.folder, self.state, self.keep = folder, state, keep
        # the save's collectives run on CPU, apart from training's
        self.group = dist.new_group(backend="gloo")
        self.pending = None

    def complete(self) -> list[Path]:
        # .metadata is written last: a folder without it is a torn save
        done = self.folder.glob("step-*/.metadata")
        return sorted(p.parent for p in done)

    def load(self) -> int:
        """The step to start after: 0, or the newest checkpoint's."""
        saved = self.complete()
        if not saved:
            return 0
        dcp.load(self.state, checkpoint_id=saved[-1], process_group=self.group)
        return int(saved[-1].name.removeprefix("step-"))

    def save(self, step: int) -> None:
        self.wait()  # the previous save has finished
        self.pending = dcp.async_save(
            self.state,
            checkpoint_id=self.folder / f"step-{step:06d}",
            process_group=self.group,
        )

    def wait(self) -> None:
        if self.pending is not None:
            future, self.pending = self.pending, None
            future.result()  # raises if the save failed
            if dist.get_rank() == 0:
                for old in self.complete()[: -self.keep]:
                    for f in old.iterdir():
                        f.unlink()
                    old.rmdir()

    def close(self) -> None:
        """On the way out after an error: let a save in flight end
        before the groups go; its own error is reported, not raised."""
        try:
            self.wait()
        except Exception as error:
            print(f"rank {dist.get_rank()}: last save failed: {error}")


# --8<-- [end:checkpoint]


# --8<-- [start:export]
def save_hf(state: dict, args: ModelArgs, folder: Path) -> None:
    """safetensors and a config.json, as LlamaForCausalLM expects."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in state.items()}
    save_file(tensors, folder / "model.safetensors", {"format": "pt"})
    config = asdict(args) | {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "head_dim": args.head_dim,
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def export(model: Transformer, folder: Path) -> None:
    # a collective: the full tensors arrive on rank 0, in CPU memory
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    if dist.get_rank() == 0:
        save_hf(state, model.args, folder)


# --8<-- [end:export]


# --8<-- [start:metrics]
# dense bf16 peak in TFLOPS, by device name: NVIDIA's data sheets
# (half the "with sparsity" figure)
PEAKS = {
    "NVIDIA H100 80GB HBM3": 989.0,  # SXM
    "NVIDIA H100 PCIe": 756.0,
    "NVIDIA H200": 989.0,  # SXM
    "NVIDIA A100-SXM4-80GB": 312.0,
    "NVIDIA A100-SXM4-40GB": 312.0,
}


def flops_per_token(args: ModelArgs, seq_len: int) -> float:
    """Forward and backward of one sequence, counted once on
    the meta device: shapes only, nothing computed."""
    with torch.device("meta"):
        model = Transformer(args)
        tokens = torch.zeros(1, seq_len, dtype=torch.long)
        positions = torch.arange(seq_len)[None]
    with FlopCounterMode(display=False) as counter:
        model(tokens, positions).sum().backward()
    return counter.get_total_flops() / seq_len


def peak_tflops(cfg: Config, device: torch.device) -> float | None:
    if cfg.peak_tflops or device.type != "cuda":
        return cfg.peak_tflops
    return PEAKS.get(torch.cuda.get_device_name(device))


def memory(device: torch.device) -> str:
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        return f"peak {peak / 2**30:.2f} GiB"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    return f"peak RSS {rss // 1024:,} MiB"


class StepLog:
    """Rank 0's line per step; the same numbers, unrounded,
    in out/metrics.jsonl for plots and comparisons."""

    def __init__(self, cfg: Config, args: ModelArgs, device: torch.device):
        self.cfg, self.device = cfg, device
        self.flops = flops_per_token(args, cfg.seq_len)
        self.peak = peak_tflops(cfg, device)

    def __call__(self, step, loss, norm, lr, seconds) -> None:
        tokens = self.cfg.global_batch * self.cfg.seq_len / seconds
        per_device = tokens / dist.get_world_size()
        mfu = "n/a"
        if self.peak:
            mfu = f"{self.flops * per_device / (self.peak * 1e12):.1%}"
        print(
            f"step {step:3d} | loss {loss:.4f} | grad norm {norm:.4f} | "
            f"lr {lr:.1e} | {tokens:,.0f} tok/s | MFU {mfu} | "
            f"{memory(self.device)}",
            flush=True,
        )
        line = {"step": step, "loss": loss, "grad_norm": norm, "lr": lr}
        with open(self.cfg.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(line | {"tokens_per_s": tokens}) + "\n")


# --8<-- [end:metrics]


# --8<-- [start:train]
def prepare(cfg: Config, device: torch.device, mesh: DeviceMesh):
    """The model, its optimizer, the data, and what a checkpoint holds."""
    model = build(cfg, mesh, device)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=cfg.lr,
        betas=(0.9, 0.95),
        weight_decay=cfg.weight_decay,
        fused=True,  # one kernel per step, no Python loop over tensors
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(cfg))
    rows = pack(cfg.data, cfg.seq_len)
    sampler = Sampler(len(rows), cfg, *data_parallel(mesh))
    torch.manual_seed(cfg.seed)  # the same on every rank
    state = {
        "train": ModelAndOptimizer(model, optimizer),
        "scheduler": scheduler,
        "data": sampler,
        "rng": RNG(),
    }
    checkpointer = Checkpointer(cfg.out / "checkpoints", state, cfg.keep)
    return model, optimizer, scheduler, rows, sampler, checkpointer


def train(cfg: Config, device: torch.device, mesh: DeviceMesh) -> None:
    model, optimizer, scheduler, rows, sampler, checkpointer = prepare(
        cfg, device, mesh
    )
    rank = dist.get_rank()
    log = StepLog(cfg, model.args, device) if rank == 0 else None
    try:
        start = checkpointer.load()
        if rank == 0:
            print(
                f"mesh {dict(zip(mesh.mesh_dim_names, mesh.shape))}; "
                f"{len(rows)} rows of {cfg.seq_len} tokens; "
                f"{log.flops:,.0f} FLOPs per token; starting after step "
                f"{start}",
                flush=True,
            )
        for step in range(start + 1, cfg.steps + 1):
            begin = time.perf_counter()
            batches = micro_batches(rows[sampler.next_step()], cfg, device)
            lr = scheduler.get_last_lr()[0]
            loss, norm = train_step(model, optimizer, scheduler, batches, cfg)
            # a real job stops here rather than train on NaNs
            assert math.isfinite(loss), f"step {step}: loss {loss}"
            if log:
                log(step, loss, norm, lr, time.perf_counter() - begin)
            if step % cfg.ckpt_every == 0 or step == cfg.steps:
                checkpointer.save(step)  # returns once the state is copied
        checkpointer.wait()
        export(model, cfg.out / "export")
        if rank == 0:
            print(f"exported to {cfg.out / 'export'}", flush=True)
    finally:
        checkpointer.close()


# --8<-- [end:train]


# --8<-- [start:main]
def stop(signum: int, frame) -> None:
    """torchrun or Slurm stops the job: unwind through finally."""
    raise SystemExit(128 + signum)


def dump_flight_record(folder: Path) -> None:
    """This rank's last collectives, to compare across ranks
    (debugging page). Private functions, torch 2.10 to 2.15."""
    c10d = torch._C._distributed_c10d
    nccl = dist.get_backend() == "nccl"
    record = c10d._dump_nccl_trace() if nccl else c10d._dump_fr_trace()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank_{dist.get_rank()}").write_bytes(record)


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(argv)
    cfg.out.mkdir(parents=True, exist_ok=True)
    # NCCL's watchdog writes the record here on a timeout
    records = cfg.out / "flight_records"
    os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", f"{records}/rank_")
    signal.signal(signal.SIGTERM, stop)
    device = setup()
    mesh = make_mesh(cfg, device)
    try:
        train(cfg, device, mesh)
    except BaseException:
        # one stop is enough: a second SIGTERM must not cut the dump short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        dump_flight_record(records)
        raise
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
# --8<-- [end:main]
