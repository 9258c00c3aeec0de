"""float8 training with torchao and FSDP2 on 2 ranks: each float8 matmul
stays within the error bound its two float8 formats allow, and training
follows bf16."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/float8_fsdp2.py
# timeout: 240
# output-excerpt: bound ^(output|grad_)
# output-excerpt: training ^(linear|step)
# output-varies: max \|error\| (\S+), (\d+)% of its bound
# output-varies: loss bf16 (\S+)  float8 (\S+)  \((\S+)\)

import copy
import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torchao.float8 import (
    Float8LinearConfig,
    convert_to_float8_training,
    precompute_float8_dynamic_scale_for_fsdp,
)
from torchao.float8.float8_linear import Float8Linear

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


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


# --8<-- [start:bound]
# rounding to nearest with m mantissa bits is off by at most 2^-(m+1)
# of the value: e4m3 has 3 bits, e5m2 has 2
UNIT = {E4M3: 2**-4, E5M2: 2**-3}
# below the normal range the steps are fixed: half the smallest one,
# as a share of amax (which scaling maps to the format's largest value)
TINY = {E4M3: 2**-10 / 448, E5M2: 2**-17 / 57344}


def cast_error(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Largest error of each element once scaled to float8 and back
    (2^-23 more for the fp32 multiply by the scale)."""
    a = t.float().abs()
    return (UNIT[dtype] + 2**-23) * a + TINY[dtype] * a.max()


def matmul_bound(a, b, a_dtype, b_dtype, out) -> torch.Tensor:
    """Elementwise bound on |float8 a @ b - exact a @ b|: a^ b^ - a b =
    (a^ - a) b^ + a (b^ - b), with |b^| <= |b| + its cast error; then
    the fp32 sums and scales, and bf16's rounding of the output."""
    ea, eb = cast_error(a, a_dtype), cast_error(b, b_dtype)
    a_abs, b_abs = a.float().abs(), b.float().abs()
    products = ea @ (b_abs + eb) + a_abs @ eb
    sums = a.shape[-1] * 2**-23 * ((a_abs + ea) @ (b_abs + eb))
    return products + sums + 2**-7 * out.float().abs()


# --8<-- [end:bound]


def check_one_layer(device: torch.device) -> None:
    # --8<-- [start:one_layer]
    torch.manual_seed(0)  # the same on every rank, drawn on the CPU
    x = torch.randn(64, 256).bfloat16().to(device).requires_grad_()
    dy = torch.randn(64, 512).bfloat16().to(device)
    layer = nn.Linear(256, 512, bias=False).bfloat16().to(device)
    w = layer.weight.detach()
    fp8 = convert_to_float8_training(layer)  # a root Linear: returned
    y = fp8(x)
    y.backward(dy)
    a, d = x.detach(), dy
    exact = {  # fp32 products of the same bf16 numbers
        "output": (a.float() @ w.float().T, (a, w.T, E4M3, E4M3), y),
        "grad_input": (d.float() @ w.float(), (d, w, E5M2, E4M3), x.grad),
        "grad_weight": (
            d.float().T @ a.float(),
            (d.T, a, E5M2, E4M3),
            fp8.weight.grad,
        ),
    }
    for name, (want, (p, q, p_dtype, q_dtype), got) in exact.items():
        error = (got.float() - want).abs()
        bound = matmul_bound(p, q, p_dtype, q_dtype, got)
        assert (error <= bound).all(), name
        # --8<-- [end:one_layer]
        if dist.get_rank() == 0:
            short = {E4M3: "e4m3", E5M2: "e5m2"}
            print(
                f"{name:<11} {short[p_dtype]} x {short[q_dtype]}: max |error| "
                f"{error.max():.4f}, {(error / bound).max():.0%} of its bound"
            )


# --8<-- [start:model]
def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(128, 512),
        nn.GELU(),
        nn.Linear(512, 128),
        nn.GELU(),
        nn.Linear(128, 16),  # the output layer: left in bf16
    )


def shard(model: nn.Sequential, mesh, float8: bool) -> nn.Sequential:
    if float8:
        config = Float8LinearConfig(
            enable_fsdp_float8_all_gather=True,  # gather 1 byte, not 2
            # no float8 matmuls on GPUs before compute capability 8.9:
            # emulate them there (numerics only, as a CPU runs them)
            emulate=torch.cuda.is_available()
            and torch.cuda.get_device_capability() < (8, 9),
        )
        convert_to_float8_training(
            model,
            config=config,
            module_filter_fn=lambda module, fqn: fqn != "4",  # not the output
        )
    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    for layer in model:
        if isinstance(layer, nn.Linear):  # Float8Linear is one too
            fully_shard(layer, mesh=mesh, mp_policy=bf16)
    return fully_shard(model, mesh=mesh, mp_policy=bf16)


# --8<-- [end:model]


def train(model, x, y, float8: bool) -> list[float]:
    # --8<-- [start:train]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(5):
        loss = nn.functional.mse_loss(model(x).float(), y)  # loss in fp32
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if float8:  # every weight's scale in one all-reduce, for the
            precompute_float8_dynamic_scale_for_fsdp(model)  # next step
        losses.append(loss.detach())
    # --8<-- [end:train]
    mean = torch.stack(losses).float()
    dist.all_reduce(mean)  # the global batch's loss: mean of the ranks'
    return (mean / dist.get_world_size()).tolist()


def compare(mesh: DeviceMesh, device: torch.device) -> None:
    rank = dist.get_rank()
    torch.manual_seed(1)  # the global batch, drawn on the CPU
    x, y = torch.randn(64, 128), torch.randn(64, 16)
    mine = slice(32 * rank, 32 * rank + 32)
    x, y = x[mine].to(device), y[mine].to(device)
    model = make_model().to(device)
    # --8<-- [start:check]
    bf16 = train(shard(copy.deepcopy(model), mesh, False), x, y, False)
    f8_model = shard(copy.deepcopy(model), mesh, True)
    kinds = [
        "float8" if isinstance(layer, Float8Linear) else "bf16"
        for layer in f8_model
        if isinstance(layer, nn.Linear)
    ]
    assert kinds == ["float8", "float8", "bf16"], kinds
    f8 = train(f8_model, x, y, True)
    for a, b in zip(bf16, f8):
        assert abs(a - b) <= 0.01 * a, (a, b)  # observed: see the page
    # --8<-- [end:check]
    if rank == 0:
        print("linear layers:", ", ".join(kinds))
        for step, (a, b) in enumerate(zip(bf16, f8)):
            print(f"step {step}: loss bf16 {a:.5f}  float8 {b:.5f}", end="")
            print(f"  ({(b - a) / a:+.2%})")


def main() -> None:
    device = setup()
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    try:
        check_one_layer(device)
        dist.barrier()
        # every model lives and dies in here, before the groups go
        compare(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
