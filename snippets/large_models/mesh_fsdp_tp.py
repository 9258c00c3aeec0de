"""FSDP2 x tensor parallelism on a 2 x 2 mesh: the
same updates as one process on the whole batch."""
# launch: torchrun --standalone --nproc-per-node=4 snippets/large_models/mesh_fsdp_tp.py
# timeout: 240
# output-excerpt: layout ^(?:mesh|after)
# output-excerpt: clip ^(?:clip_grad_norm_|gradient norms)

import copy
import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
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


# --8<-- [start:model]
class Block(nn.Module):
    """A transformer block, small: attention and MLP,
    each a column- then a row-parallel pair under TP."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.head_dim = dim // heads
        self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        # no biases in the attention projections, as in Llama
        self.q, self.k, self.v, self.o = (
            nn.Linear(dim, dim, bias=False) for _ in range(4)
        )
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        # under TP, q/k/v return this rank's heads only: -1 is heads // tp
        q, k, v = (
            f(h).view(b, s, -1, self.head_dim).transpose(1, 2)
            for f in (self.q, self.k, self.v)
        )
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


def make_model() -> nn.Sequential:
    # the same initial weights on every rank and in the reference
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block(), nn.RMSNorm(32), nn.Linear(32, 8))


# --8<-- [end:model]


# --8<-- [start:parallelize]
def parallelize(model: nn.Sequential, mesh: DeviceMesh) -> nn.Sequential:
    plan = {
        "q": ColwiseParallel(),  # heads split over the tp ranks
        "k": ColwiseParallel(),
        "v": ColwiseParallel(),
        "o": RowwiseParallel(),  # partial sums, all-reduced over tp
        "up": ColwiseParallel(),
        "down": RowwiseParallel(),
    }
    for block in model[:-2]:
        # first TP, inside each tp group
        parallelize_module(block, mesh["tp"], plan)
        fully_shard(block, mesh=mesh["dp"])  # then FSDP over the dp dimension
    # the root: the last norm and the head, replicated over tp
    fully_shard(model, mesh=mesh["dp"])
    return model


# --8<-- [end:parallelize]


# --8<-- [start:clip]
def clip_grad_norm_2d(parameters, max_norm: float) -> torch.Tensor:
    """clip_grad_norm_ for gradients that live on
    several meshes: one norm per mesh, then combined."""
    by_mesh: dict[DeviceMesh, list[nn.Parameter]] = {}
    for p in parameters:
        by_mesh.setdefault(p.grad.device_mesh, []).append(p)
    norms = [
        torch.nn.utils.get_total_norm([p.grad for p in ps])
        for ps in by_mesh.values()
    ]
    # sqrt of the sum of squares
    total = torch.stack([n.full_tensor() for n in norms]).norm()
    for ps in by_mesh.values():
        # scale by max_norm / total
        torch.nn.utils.clip_grads_with_norm_(ps, max_norm, total)
    return total


# --8<-- [end:clip]


def train(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, clip, steps: int = 3
) -> torch.Tensor:
    """Three clipped SGD steps; the gradient norm of each, fp32."""
    # SGD: an update is proportional to the gradient,
    # so rounding stays rounding (Adam: see the page)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = []
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        norm = clip(model.parameters(), 0.5)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        norms.append(norm.detach())
        optimizer.step()
    return torch.stack(norms)


# --8<-- [start:distance]
def distance(
    model: nn.Module, reference: nn.Module, before: nn.Module
) -> tuple[float, float]:
    """The largest |sharded - one process| over all
    parameters, and the largest update one process made."""
    diff = update = 0.0
    for (name, p), ref, old in zip(
        model.named_parameters(), reference.parameters(), before.parameters()
    ):
        assert isinstance(p, DTensor), name
        # all-gathers over every mesh dimension the parameter is split on
        full = p.full_tensor()
        diff = max(diff, (full - ref).abs().max().item())
        update = max(update, (ref - old).abs().max().item())
    return diff, update


# --8<-- [end:distance]


def global_batch(mesh: DeviceMesh, device: torch.device):
    # --8<-- [start:data]
    torch.manual_seed(1)
    # the global batch, 8 sequences of 6 tokens, drawn on the CPU:
    # the same numbers on every rank, whatever its GPU
    x = torch.randn(8, 6, 32).to(device)
    y = torch.randn(8, 6, 8).to(device)
    dp_rank, dp = mesh["dp"].get_local_rank(), mesh["dp"].size()
    # the tp ranks of a dp group: the same slice
    x_mine, y_mine = x.chunk(dp)[dp_rank], y.chunk(dp)[dp_rank]
    # --8<-- [end:data]
    return x, y, x_mine, y_mine


def try_clip_grad_norm(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    # --8<-- [start:mixed]
    nn.functional.mse_loss(model(x), y).backward()
    try:
        # TP weights on (dp, tp), norms on (dp,)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        message = "no error: this torch accepts gradients on several meshes"
    except RuntimeError as error:  # pytorch#180346
        message = str(error).splitlines()[0]
    model.zero_grad()
    # --8<-- [end:mixed]
    return message


def run(mesh: DeviceMesh, device: torch.device) -> None:
    x, y, x_mine, y_mine = global_batch(mesh, device)
    model = parallelize(make_model().to(device), mesh)
    message = try_clip_grad_norm(model, x_mine, y_mine)

    # --8<-- [start:compare]
    reference = make_model().to(device)
    before = copy.deepcopy(reference)
    # one process, whole batch
    reference_norms = train(reference, x, y, torch.nn.utils.clip_grad_norm_)
    norms = train(model, x_mine, y_mine, clip_grad_norm_2d)
    diff, update = distance(model, reference, before)
    # float32 rounding, far below what the steps changed
    assert diff < 1e-6 and update > 1e-3, (diff, update)
    # fp32 tensors, fp32 tolerance: the norms are sums in another order
    torch.testing.assert_close(norms, reference_norms)
    assert norms.min() > 0.5, "every step was clipped"
    # --8<-- [end:compare]

    # --8<-- [start:report]
    up, norm = model[0].up.weight, model[2].weight
    if dist.get_rank() == 0:
        print(f"mesh {tuple(mesh.shape)} {mesh.mesh_dim_names}")
        print(
            f"up.weight {tuple(up.shape)}: {up.placements}, local "
            f"{tuple(up.to_local().shape)}"
        )
        print(
            f"norm.weight {tuple(norm.shape)}: {norm.placements} on "
            f"{norm.device_mesh.mesh_dim_names}"
        )
        print(
            "after 3 SGD steps: max |FSDP x TP - one process| = "
            f"{diff:.1e}; largest update {update:.1e}"
        )
        print(f"clip_grad_norm_: {message}")
        print(
            "gradient norms, clipped to 0.5: "
            f"{', '.join(f'{n:.4f}' for n in norms.tolist())} (one process: "
            f"{', '.join(f'{n:.4f}' for n in reference_norms.tolist())})"
        )
    # --8<-- [end:report]


def main() -> None:
    device = setup()  # the process group first, with its backend
    # --8<-- [start:mesh]
    # rank = 2 * dp + tp
    mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("dp", "tp"))
    # --8<-- [end:mesh]
    try:
        # every model lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
