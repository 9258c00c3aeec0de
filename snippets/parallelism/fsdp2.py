"""FSDP2: fully_shard trains exactly what DDP trains, with half the parameter and optimizer memory per rank."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/parallelism/fsdp2.py

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

from _mesh import setup_mesh


def make_model() -> nn.Sequential:
    torch.manual_seed(0)  # the same initial weights on every rank and in the reference
    blocks = [nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32)) for _ in range(4)]
    return nn.Sequential(*blocks, nn.Linear(32, 8))


# --8<-- [start:shard]
def shard(model: nn.Sequential, mesh, **kwargs) -> nn.Sequential:
    for block in model[:-1]:
        fully_shard(block, mesh=mesh, **kwargs)  # one all-gather and one reduce-scatter per block
    fully_shard(model, mesh=mesh, **kwargs)  # the root: the parameters left over (the last Linear)
    return model
# --8<-- [end:shard]


# --8<-- [start:train]
def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 5) -> torch.optim.Optimizer:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)  # after fully_shard: it sees the sharded DTensors
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # FSDP: reduce-scatter, each rank keeps the averaged gradient of its own shard
        optimizer.step()  # updates the local shard only; Adam's state exists only for it
    return optimizer
# --8<-- [end:train]


def local_numel(tensors) -> int:
    return sum(t.to_local().numel() for t in tensors if isinstance(t, DTensor))


def main() -> None:
    mesh, device = setup_mesh()
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        torch.manual_seed(1)
        x = torch.randn(64, 32, device=device)
        x, y = x.chunk(world)[rank], x[:, :8].sin().chunk(world)[rank]  # each rank: its share of the batch

        # --8<-- [start:compare]
        ddp = DDP(make_model().to(device), device_ids=[device.index] if device.type == "cuda" else None)
        train(ddp, x, y)
        model = shard(make_model(), mesh)
        optimizer = train(model, x, y)

        for (name, p), ref in zip(model.named_parameters(), ddp.module.parameters()):
            assert isinstance(p, DTensor) and p.placements[0].is_shard(dim=0), name
            assert torch.equal(p.full_tensor(), ref), name  # full_tensor() all-gathers the shards
        # --8<-- [end:compare]

        # --8<-- [start:memory]
        full = sum(p.numel() for p in model.parameters())  # a DTensor's numel() is the global size
        params = local_numel(model.parameters())
        grads = local_numel(p.grad for p in model.parameters())
        adam = local_numel(s for state in optimizer.state.values() for s in state.values())  # exp_avg, exp_avg_sq
        assert params * world == full and grads == params and adam == 2 * params, (full, params, grads, adam)
        if rank == 0:
            print(f"parameters: {full} in all, {params} on each of {world} ranks; Adam state: {adam} per rank")
        # --8<-- [end:memory]

        # --8<-- [start:mixed]
        bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        mixed = shard(make_model(), mesh, mp_policy=bf16)
        out = mixed(x)  # parameters all-gathered in bf16, compute in bf16
        nn.functional.mse_loss(out.float(), y).backward()  # gradients reduce-scattered in fp32
        assert out.dtype == torch.bfloat16
        assert all(p.dtype == p.grad.dtype == torch.float32 for p in mixed.parameters())  # fp32 master shards
        # --8<-- [end:mixed]

        # --8<-- [start:save]
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)  # gathered on rank 0, in CPU memory
        state = get_model_state_dict(model, options=options)  # collective: every rank calls it
        if rank == 0:
            plain = make_model()
            plain.load_state_dict(state)  # the same keys as the unwrapped model: no FSDP prefixes
            assert all(torch.equal(a, b.cpu()) for a, b in zip(plain.parameters(), ddp.module.parameters()))
            print("FSDP2 == DDP after 5 Adam steps; the full state dict loads into a plain nn.Module")
        # --8<-- [end:save]
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
