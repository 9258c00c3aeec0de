"""The token-weighted loss under FSDP2: divide by the global token
count once, and let the reduce-scatter sum instead of average."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/varlen_loss_fsdp2.py
# timeout: 180
# output-varies: max gradient error (\S+) \(tolerance

import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

# PAD: the label of padding positions, ignored by cross_entropy
VOCAB, PAD = 32, -100
SEQS_PER_MICRO_BATCH, ACCUM_STEPS = 4, 2


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


# same as snippets/scaling/varlen_loss.py:sequences
def sequences(world: int) -> list[torch.Tensor]:
    """The global batch: token sequences of 2 to
    39 tokens, the same on every rank (seeded)."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(
        2, 40, (world * ACCUM_STEPS * SEQS_PER_MICRO_BATCH,), generator=g
    )
    return [torch.randint(0, VOCAB, (int(n),), generator=g) for n in lengths]


# same as snippets/scaling/varlen_loss.py:pad
def pad(
    seqs: list[torch.Tensor], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs padded with token 0, labels (next
    token of a fixed rule) padded with PAD."""
    inputs = nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=0)
    labels = nn.utils.rnn.pad_sequence(
        [(s * 7 + 3) % VOCAB for s in seqs], batch_first=True, padding_value=PAD
    )
    return inputs.to(device), labels.to(device)


# same as snippets/scaling/varlen_loss.py:micro_batches
def micro_batches(
    seqs: list[torch.Tensor], rank: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's share of the global batch, cut into
    ACCUM_STEPS micro-batches, each padded on its own."""
    per_rank = ACCUM_STEPS * SEQS_PER_MICRO_BATCH
    mine = seqs[rank * per_rank : (rank + 1) * per_rank]
    return [
        pad(mine[i : i + SEQS_PER_MICRO_BATCH], device)
        for i in range(0, per_rank, SEQS_PER_MICRO_BATCH)
    ]


def make_model(device: torch.device) -> nn.Sequential:
    torch.manual_seed(0)  # the same weights in every copy
    return nn.Sequential(nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB)).to(
        device
    )


# --8<-- [start:shard]
def shard(model: nn.Sequential, mesh: DeviceMesh, sum_grads: bool):
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh)  # the root: the Linear
    if sum_grads:
        # per module, not recursive: every fully_shard'ed module
        for module in model.modules():
            if isinstance(module, FSDPModule):
                # reduce-scatter a sum: the loss is already global
                module.set_gradient_divide_factor(1.0)
                # a plain SUM: gloo has no PREMUL_SUM, which a
                # divide factor otherwise uses
                module.set_force_sum_reduction_for_comms(True)
    return model


# --8<-- [end:shard]


# --8<-- [start:token_weighted]
def accumulate_token_weighted(
    model: FSDPModule,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    scale: float = 1.0,
) -> torch.Tensor:
    """Every token weighs the same: sum the token losses,
    divide once by the global batch's token count."""
    # this rank, all its micro-batches
    tokens = sum((labels != PAD).sum() for _, labels in batches)
    # before any backward: every rank now holds the global count
    dist.all_reduce(tokens)
    loss_sum = torch.zeros((), device=tokens.device)
    for i, (inputs, labels) in enumerate(batches):
        # reduce-scatter only in the last backward
        model.set_requires_gradient_sync(i == len(batches) - 1)
        summed = F.cross_entropy(
            model(inputs).flatten(0, 1),
            labels.flatten(),
            ignore_index=PAD,
            reduction="sum",
        )
        (summed * scale / tokens).backward()
        loss_sum += summed.detach()
    # for the log: the loss of the global batch, as one process would report it
    dist.all_reduce(loss_sum)
    return loss_sum / tokens


# --8<-- [end:token_weighted]


def grads(model: nn.Module) -> torch.Tensor:
    return torch.cat(
        [
            (
                p.grad.full_tensor()
                if hasattr(p.grad, "full_tensor")
                else p.grad
            ).flatten()
            for p in model.parameters()
        ]
    )


# --8<-- [start:main]
def run(mesh: DeviceMesh, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    seqs = sequences(world)
    reference = make_model(device)  # one process, the whole global batch
    inputs, labels = pad(seqs, device)
    loss = F.cross_entropy(
        reference(inputs).flatten(0, 1), labels.flatten(), ignore_index=PAD
    )
    loss.backward()
    expected = grads(reference)
    tolerance = 1e-5 * expected.abs().max().item()
    batches = micro_batches(seqs, rank, device)

    summed = shard(make_model(device), mesh, sum_grads=True)
    logged = accumulate_token_weighted(summed, batches)
    error = (grads(summed) - expected).abs().max().item()
    assert error <= tolerance, (error, tolerance)
    assert torch.allclose(logged, loss.detach(), rtol=1e-6), (logged, loss)

    # FSDP2's default: the reduce-scatter averages over the ranks
    averaged = shard(make_model(device), mesh, sum_grads=False)
    accumulate_token_weighted(averaged, batches)
    assert torch.equal(grads(averaged) * world, grads(summed))
    # the DDP page's form: multiply by the world size to cancel it
    times_world = shard(make_model(device), mesh, sum_grads=False)
    accumulate_token_weighted(times_world, batches, scale=world)
    # exact: multiplying and dividing by 2 only moves the exponent
    assert torch.equal(grads(times_world), grads(summed))

    if rank == 0:
        print(f"one process, whole batch: loss {loss.item():.4f}")
        print(
            "sum / global count, divide factor 1:  max gradient error "
            f"{error:.1e} (tolerance {tolerance:.1e})"
        )
        print(f"logged loss of the global batch: {logged.item():.4f}")
        print(
            f"FSDP2's default average: every gradient 1/{world} of that; "
            f"times world size: equal to it, bit for bit"
        )


def main() -> None:
    device = setup()
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    try:
        # every model lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
# --8<-- [end:main]
