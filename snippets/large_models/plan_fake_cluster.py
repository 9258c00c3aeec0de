"""A 128-GPU plan checked on one CPU: a fake process
group, a 16 x 8 mesh, and the bytes one rank holds."""

import math

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

# internal to PyTorch: see the page
from torch.testing._internal.distributed.fake_pg import FakeStore

# 16 nodes of 8 GPUs: tensor parallel inside a node, FSDP across nodes
DP, TP = 16, 8
VOCAB, DIM, LAYERS, HEADS = 50257, 1024, 8, 16


# --8<-- [start:model]
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.RMSNorm(DIM), nn.RMSNorm(DIM)
        self.q, self.k, self.v, self.o = (
            nn.Linear(DIM, DIM, bias=False) for _ in range(4)
        )
        self.up, self.down = (
            nn.Linear(DIM, 4 * DIM, bias=False),
            nn.Linear(4 * DIM, DIM, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.attn_norm(x)
        q, k, v = (
            f(h).view(b, s, -1, DIM // HEADS).transpose(1, 2)
            for f in (self.q, self.k, self.v)
        )
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.down(nn.functional.gelu(self.up(self.mlp_norm(x))))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


# --8<-- [end:model]


# --8<-- [start:plan]
def apply_plan(model: LM, mesh) -> LM:
    # split dim 0 (outputs)
    tp_plan = {name: ColwiseParallel() for name in ("q", "k", "v", "up")}
    # split dim 1 (inputs)
    tp_plan |= {"o": RowwiseParallel(), "down": RowwiseParallel()}
    parallelize_module(
        model,
        mesh["tp"],
        {
            "embed": RowwiseParallel(input_layouts=Replicate()),
            "head": ColwiseParallel(output_layouts=Replicate()),
        },
    )  # both split the vocabulary
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], tp_plan)
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])  # the root: embedding, final norm, head
    return model


# --8<-- [end:plan]


# --8<-- [start:formula]
def chunk(n: int, parts: int, index: int = 0) -> int:
    """Length of piece `index` of torch.chunk(n, parts):
    ceil(n / parts) each, the last ones shorter."""
    size = math.ceil(n / parts)
    return max(0, min(size, n - index * size))


def tp_dim(name: str) -> int | None:
    """The dimension the TP plan splits: 0 for
    column-wise (and the vocabulary), 1 for row-wise."""
    if name.endswith(
        (
            "q.weight",
            "k.weight",
            "v.weight",
            "up.weight",
            "embed.weight",
            "head.weight",
        )
    ):
        return 0
    if name.endswith(("o.weight", "down.weight")):
        return 1
    return None  # the norms: replicated over tp, sharded over dp only


def rank0_numel(name: str, shape: tuple[int, ...]) -> int:
    """Elements of one parameter on rank 0: TP takes its
    chunk, then FSDP a chunk of dim 0 of what is left."""
    shape = list(shape)
    if tp_dim(name) is not None:
        shape[tp_dim(name)] = chunk(shape[tp_dim(name)], TP)
    shape[0] = chunk(shape[0], DP)
    return math.prod(shape)


def calculator(psi: int, dp: int, tp: int, pp: int = 1) -> dict[str, float]:
    """The memory calculator, fp32 Adam under
    FSDP2: every byte divided by DP x TP x PP."""
    split = dp * tp * pp
    return {
        "parameters": 4 * psi / split,
        "gradients": 4 * psi / split,
        "Adam state": 8 * psi / split,
    }


# --8<-- [end:formula]


def local_bytes(tensors) -> int:
    return sum(t.to_local().numel() * t.element_size() for t in tensors)


def build_on_fake_cluster():
    """This process as rank 0 of 128: the mesh, the plan, and this
    rank's shards of a model that was never whole."""
    # --8<-- [start:fake]
    # one process plays rank 0 of 128; collectives return at once
    # and move no data. One GPU, as torchtitan does, or the CPU:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dist.init_process_group(
        "fake", store=FakeStore(), rank=0, world_size=DP * TP
    )
    mesh = init_device_mesh(device, (DP, TP), mesh_dim_names=("dp", "tp"))
    with torch.device("meta"):  # shapes only: no memory for the 200M parameters
        model = LM()
    shapes = {name: p.shape for name, p in model.named_parameters()}
    apply_plan(model, mesh)
    model.to_empty(device=device)  # now allocate: this rank's shards only
    with torch.no_grad():
        for p in model.parameters():
            nn.init.normal_(p.to_local(), std=0.02)
    # --8<-- [end:fake]
    return mesh, model, shapes, device


def one_step(model: LM, device: str) -> torch.optim.Optimizer:
    # --8<-- [start:step]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, VOCAB, (2, 16), device=device)
    # each fake all-gather fills its output with this rank's own shard:
    # the shapes are the plan's, the values are not the job's
    logits = model(tokens)
    nn.functional.cross_entropy(
        logits.flatten(0, 1), tokens.flatten()
    ).backward()
    optimizer.step()  # creates Adam's state for this rank's shards
    # --8<-- [end:step]
    return optimizer


def count(mesh, model: LM, shapes: dict, optimizer) -> None:
    # --8<-- [start:count]
    psi = sum(math.prod(s) for s in shapes.values())
    held = {
        "parameters": local_bytes(model.parameters()),
        "gradients": local_bytes(p.grad for p in model.parameters()),
        "Adam state": local_bytes(
            s[k]
            for s in optimizer.state.values()
            for k in ("exp_avg", "exp_avg_sq")
        ),
    }
    expected = 4 * sum(
        rank0_numel(name, shape) for name, shape in shapes.items()
    )
    assert held == {
        "parameters": expected,
        "gradients": expected,
        "Adam state": 2 * expected,
    }, held
    estimate = calculator(psi, DP, TP)
    extra = sum(held.values()) - sum(estimate.values())
    # the calculator's approximation: under 1% here
    assert 0 < extra < 0.01 * sum(estimate.values())

    print(
        f"{psi:,} parameters; mesh {tuple(mesh.shape)} "
        f"{mesh.mesh_dim_names}, this process is rank 0 of {DP * TP}"
    )
    for key, value in held.items():
        print(
            f"rank 0 holds {key:<10} {value:>12,} B = formula; "
            f"calculator {estimate[key]:>14,.0f} B"
        )
    print(
        f"training state on rank 0: {sum(held.values()) / 2**20:.2f} MiB, "
        f"{extra:,.0f} B more than the calculator (norms replicated over "
        "tp, vocabulary rounded up)"
    )
    # --8<-- [end:count]


def main() -> None:
    mesh, model, shapes, device = build_on_fake_cluster()
    try:
        optimizer = one_step(model, device)
        count(mesh, model, shapes, optimizer)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
