"""The proof beside ulysses.py: the bytes each rank sends for
Ulysses, ring and all-gather attention, counted from the
collectives they issue and equal to the formulas."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/ulysses_check.py

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn.functional as F
from ring_attention_backward import RingAttention  # the programs beside this
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from ulysses import BATCH, HEAD_DIM, HEADS, SEQ, setup, ulysses_attention


# --8<-- [start:allgather]
class GatherSequence(torch.autograd.Function):
    """All-gather along the sequence (dim 2); the gradient
    goes back by reduce-scatter, each rank keeping its block."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        world = dist.get_world_size()
        out = x.new_empty(world * x.shape[2], *x.shape[:2], x.shape[3])
        # the collective concatenates dim 0: put the sequence there
        dist.all_gather_into_tensor(out, x.permute(2, 0, 1, 3).contiguous())
        return out.permute(1, 2, 0, 3)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        world = dist.get_world_size()
        grad = grad.permute(2, 0, 1, 3).contiguous()
        mine = grad.new_empty(grad.shape[0] // world, *grad.shape[1:])
        dist.reduce_scatter_tensor(mine, grad)  # summed over the ranks
        return mine.permute(1, 2, 0, 3)


def allgather_attention(q, k, v) -> torch.Tensor:
    """Llama 3's context parallelism: gather all keys and
    values, attend with this rank's queries (contiguous blocks)."""
    rank = dist.get_rank()
    k, v = GatherSequence.apply(k), GatherSequence.apply(v)
    q_pos = rank * q.shape[2] + torch.arange(q.shape[2])
    causal = torch.arange(k.shape[2])[None, :] <= q_pos[:, None]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=causal.to(q.device)
    )


# --8<-- [end:allgather]


# --8<-- [start:count]
class SentBytes(TorchDispatchMode):
    """Adds up the bytes each collective sends from this rank
    (ring algorithms: what leaves the rank, its own part kept)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        world = dist.get_world_size()
        name = func.__name__  # e.g. "alltoall_base_.default"
        if func.namespace == "c10d":
            if name.startswith("alltoall_base_"):  # (out, in, ...)
                self.bytes += nbytes(args[1]) * (world - 1) // world
            elif name.startswith("_allgather_base_"):  # (out, in, ...)
                self.bytes += nbytes(args[1]) * (world - 1)
            elif name.startswith("_reduce_scatter_base_"):  # (out, in)
                self.bytes += nbytes(args[1]) * (world - 1) // world
            elif name.startswith("send"):  # ([tensor], ...)
                self.bytes += sum(nbytes(t) for t in args[0])
        return func(*args, **(kwargs or {}))


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# --8<-- [end:count]


def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same tensors on every rank
    q_all, k_all, v_all = (
        torch.randn(BATCH, HEADS, SEQ, HEAD_DIM).to(device) for _ in range(3)
    )
    with sdpa_kernel(SDPBackend.MATH):
        full = F.scaled_dot_product_attention(
            q_all, k_all, v_all, is_causal=True
        )
    block = slice(rank * SEQ // world, (rank + 1) * SEQ // world)
    methods = {
        "Ulysses": ulysses_attention,
        "ring": lambda q, k, v: RingAttention.apply(
            q, k, v, True, "contiguous", {}
        ),
        "all-gather": allgather_attention,
    }
    measured = {}
    for name, attention in methods.items():
        q, k, v = (
            t[:, :, block].clone().requires_grad_()
            for t in (q_all, k_all, v_all)
        )
        with SentBytes() as forward:
            out = attention(q, k, v)
        with SentBytes() as backward:
            out.sum().backward()
        torch.testing.assert_close(out, full[:, :, block], rtol=1e-5, atol=1e-5)
        measured[name] = forward.bytes, backward.bytes
    expected = formula(world)
    assert measured == expected, f"{measured} != {expected}"
    if rank == 0:
        print(
            "bytes one rank sends per attention layer, forward and backward; "
            f"batch {BATCH}, {SEQ} tokens, hidden {HEADS * HEAD_DIM}, fp32"
        )
        print(
            f"{'':10}{f'counted, {world} ranks':>20}"
            + "".join(f"{f'formula, {w} ranks':>20}" for w in (4, 8))
        )
        for name in methods:
            cells = [measured[name]] + [formula(w)[name] for w in (4, 8)]
            row = "".join(f"{'':6}{fwd:>7}{bwd:>7}" for fwd, bwd in cells)
            print(f"{name:10}{row}")


# --8<-- [start:formula]
def formula(w: int) -> dict[str, tuple[int, int]]:
    """(forward, backward) bytes a rank sends per attention layer."""
    b, s, h, e = BATCH, SEQ, HEADS * HEAD_DIM, 4  # fp32
    block = b * (s // w) * h * e  # one rank's block of Q, K or V
    return {
        # 4 all-to-alls (Q, K, V in, output back), each keeps 1/W
        "Ulysses": (4 * block * (w - 1) // w,) * 2,
        # K and V to the next rank, W - 1 times; the backward
        # adds dK and dV, W times (one hop more, to the owner)
        "ring": (2 * block * (w - 1), 2 * block * (w - 1) + 2 * block * w),
        # K and V to the W - 1 others; backward: their gradients
        # reduce-scattered, which sends as much
        "all-gather": (2 * block * (w - 1),) * 2,
    }


# --8<-- [end:formula]


# same as snippets/scaling/ring_attention.py:main
def main() -> None:
    device = setup()
    try:
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
