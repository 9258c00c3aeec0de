"""Ulysses sequence parallelism: an all-to-all turns
sequence shards into head shards for attention, and back."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/ulysses.py
# output-excerpt: heads ^3 heads on

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BATCH, HEADS, SEQ, HEAD_DIM = 2, 4, 32, 8


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


# --8<-- [start:all_to_all]
def seq_to_heads(x: torch.Tensor) -> torch.Tensor:
    """[b, heads, s / W, d] -> [b, heads / W, s, d]: give away
    the other ranks' heads, receive their part of the sequence."""
    world = dist.get_world_size()
    b, h, s, d = x.shape
    # all_to_all_single cuts dim 0 into W equal pieces and sends
    # piece r to rank r: put the heads first
    send = x.transpose(0, 1).contiguous()  # [h, b, s/W, d]
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    # piece j of recv: my heads, rank j's block of the sequence
    recv = recv.view(world, h // world, b, s, d)
    return recv.permute(2, 1, 0, 3, 4).reshape(b, h // world, world * s, d)


def heads_to_seq(x: torch.Tensor) -> torch.Tensor:
    """The inverse: [b, heads / W, s, d] -> [b, heads, s / W, d]."""
    world = dist.get_world_size()
    b, h, s, d = x.shape
    # piece j: my heads on rank j's block of the sequence
    send = x.view(b, h, world, s // world, d).permute(2, 1, 0, 3, 4)
    send = send.contiguous()  # [W, h, b, s/W, d]
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    # piece j of recv: rank j's heads on my block; heads in rank order
    return recv.view(world * h, b, s // world, d).transpose(0, 1)


class SeqToHeads(torch.autograd.Function):
    """seq_to_heads forward; its gradient goes back by the inverse."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return seq_to_heads(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return heads_to_seq(grad)


class HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return heads_to_seq(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return seq_to_heads(grad)


# --8<-- [end:all_to_all]


# --8<-- [start:ulysses]
def ulysses_attention(q, k, v, causal: bool = True) -> torch.Tensor:
    """Attention for this rank's block of the sequence: q, k, v
    [b, heads, s / W, d] in, the output for those positions out."""
    # whole sequence, heads / W heads: any attention kernel and
    # any mask work unchanged, since nothing is missing
    q, k, v = (SeqToHeads.apply(t) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return HeadsToSeq.apply(out)  # back to sequence shards


# --8<-- [end:ulysses]


def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    # --8<-- [start:check]
    # the same full tensors on every rank: drawn on the CPU, then moved
    torch.manual_seed(0)
    q_all, k_all, v_all, grad_all = (
        torch.randn(BATCH, HEADS, SEQ, HEAD_DIM).to(device) for _ in range(4)
    )
    block = slice(rank * SEQ // world, (rank + 1) * SEQ // world)
    q, k, v = (
        t[:, :, block].clone().requires_grad_() for t in (q_all, k_all, v_all)
    )
    # one process, the whole sequence: the reference
    ref = [t.clone().requires_grad_() for t in (q_all, k_all, v_all)]
    # the same kernel on both sides: the check is of the all-to-alls
    with sdpa_kernel(SDPBackend.MATH):
        out = ulysses_attention(q, k, v)
        out.backward(grad_all[:, :, block])
        full = F.scaled_dot_product_attention(*ref, is_causal=True)
        full.backward(grad_all)
    errors = [(out - full[:, :, block]).abs().max()]
    for mine, whole in zip((q, k, v), ref):
        errors.append((mine.grad - whole.grad[:, :, block]).abs().max())
    errors = torch.stack(errors)
    dist.all_reduce(errors, op=dist.ReduceOp.MAX)  # the worst rank
    assert errors.max() < 1e-5, f"Ulysses differs from one process: {errors}"
    # --8<-- [end:check]
    if rank == 0:
        print(
            f"{SEQ} tokens on {world} ranks; in attention each rank holds "
            f"all {SEQ} tokens of {HEADS // world} of the {HEADS} heads"
        )
        print(
            "max |Ulysses - one process|: output {:.1e}, grad q {:.1e}, "
            "grad k {:.1e}, grad v {:.1e}".format(*errors.tolist())
        )

    # --8<-- [start:heads]
    odd = torch.randn(BATCH, 3, SEQ // world, HEAD_DIM).to(device)
    try:  # 3 heads cannot be dealt out to 2 ranks
        ulysses_attention(odd, odd, odd)
        message = "no error"
    except RuntimeError as error:
        message = f"{type(error).__name__}: {error}"
    # --8<-- [end:heads]
    # torch 2.15: all_to_all_single refuses; 2.10 lets it through
    # and the view of what arrived fails
    assert "divide equally" in message or "is invalid for" in message, message
    if rank == 0:
        print(f"3 heads on {world} ranks: {message}")


# same as snippets/scaling/ring_attention.py:main
def main() -> None:
    device = setup()
    try:
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
