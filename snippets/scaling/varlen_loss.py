"""Sequences of different lengths, gradient accumulation, 2
ranks: divide the summed token losses once, by the global count."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/varlen_loss.py
# output-varies: max gradient error (\S+) \(tolerance

import copy
import os
from contextlib import nullcontext

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

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


def sequences(world: int) -> list[torch.Tensor]:
    """The global batch: token sequences of 2 to
    39 tokens, the same on every rank (seeded)."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(
        2, 40, (world * ACCUM_STEPS * SEQS_PER_MICRO_BATCH,), generator=g
    )
    return [torch.randint(0, VOCAB, (int(n),), generator=g) for n in lengths]


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


# --8<-- [start:naive]
def accumulate_mean_of_means(
    model: DDP, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> None:
    """Wrong for sequences of different lengths: every
    micro-batch weighs the same, whatever its token count."""
    for i, (inputs, labels) in enumerate(batches):
        last = i == len(batches) - 1
        # all-reduce only in the last backward
        with nullcontext() if last else model.no_sync():
            logits = model(inputs)
            # mean over its tokens
            loss = F.cross_entropy(
                logits.flatten(0, 1), labels.flatten(), ignore_index=PAD
            )
            (loss / len(batches)).backward()


# --8<-- [end:naive]


# --8<-- [start:token_weighted]
def accumulate_token_weighted(
    model: DDP, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> torch.Tensor:
    """Every token weighs the same: sum the token losses,
    divide once by the global batch's token count."""
    # this rank, all its micro-batches
    tokens = sum((labels != PAD).sum() for _, labels in batches)
    # before any backward: every rank now holds the global count
    dist.all_reduce(tokens)
    # DDP averages gradients over ranks: multiply by world to cancel it
    world = dist.get_world_size()
    loss_sum = torch.zeros((), device=tokens.device)
    for i, (inputs, labels) in enumerate(batches):
        last = i == len(batches) - 1
        with nullcontext() if last else model.no_sync():
            logits = model(inputs)
            summed = F.cross_entropy(
                logits.flatten(0, 1),
                labels.flatten(),
                ignore_index=PAD,
                reduction="sum",
            )
            (summed * world / tokens).backward()
            loss_sum += summed.detach()
    # for the log: the loss of the global batch, as one process would report it
    dist.all_reduce(loss_sum)
    return loss_sum / tokens


# --8<-- [end:token_weighted]


def grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def report(seqs, world, loss, scale, naive_error, error, tolerance, logged):
    """Rank 0's lines: the tokens per micro-batch, then both errors."""
    counts = [
        [
            int((y != PAD).sum())
            for _, y in micro_batches(seqs, r, torch.device("cpu"))
        ]
        for r in range(world)
    ]
    ranks = ", ".join(f"rank {r} {c}" for r, c in enumerate(counts))
    print(f"tokens per micro-batch: {ranks}", end="")
    print(f"; global batch {sum(map(sum, counts))} tokens")
    print(
        f"one process, whole batch: loss {loss.item():.4f}, largest "
        f"gradient {scale:.4f}"
    )
    print(
        "mean of micro-batch means:      max gradient error "
        f"{naive_error:.1e} ({naive_error / scale:.1%})"
    )
    print(
        "sum / global count * world:     max gradient error "
        f"{error:.1e} (tolerance {tolerance:.1e})"
    )
    print(f"logged loss of the global batch: {logged.item():.4f}")


# --8<-- [start:main]
def main() -> None:
    device = setup()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Embedding(VOCAB, 16),
        nn.Linear(16, VOCAB),
    ).to(device)
    # one process that sees the whole global batch at once
    reference = copy.deepcopy(model)
    ddp = DDP(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )

    seqs = sequences(world)
    inputs, labels = pad(seqs, device)
    loss = F.cross_entropy(
        reference(inputs).flatten(0, 1), labels.flatten(), ignore_index=PAD
    )
    loss.backward()  # the mean over every real token of the global batch
    expected = grads(reference)
    scale = expected.abs().max().item()

    batches = micro_batches(seqs, rank, device)
    accumulate_mean_of_means(ddp, batches)
    naive_error = (grads(model) - expected).abs().max().item()
    ddp.zero_grad()
    logged = accumulate_token_weighted(ddp, batches)
    error = (grads(model) - expected).abs().max().item()

    # float32 rounding: the same sums, taken in another order
    tolerance = 1e-5 * scale
    assert error <= tolerance, (error, tolerance)
    assert naive_error > 100 * tolerance, naive_error
    assert torch.allclose(logged, loss.detach(), rtol=1e-6), (logged, loss)
    if rank == 0:
        report(seqs, world, loss, scale, naive_error, error, tolerance, logged)
    # before destroy_process_group: DDP holds the group (debugging page)
    del ddp, model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
# --8<-- [end:main]
