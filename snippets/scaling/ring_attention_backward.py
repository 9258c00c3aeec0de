"""Ring attention with its backward pass: K/V go around
the ring again, dK/dV travel with them back to their owners."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/ring_attention_backward.py
# output-varies: of dQ, dK, dV = (.+)$

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


# same as snippets/scaling/ring_attention.py:positions
def positions(rank: int, world: int, layout: str) -> torch.Tensor:
    """Which positions of the sequence a rank holds."""
    if layout == "contiguous":  # rank r: the r-th block
        return torch.arange(SEQ).chunk(world)[rank]
    # zig-zag: 2 * world chunks, rank r holds chunk r and
    # its mirror, so every rank gets early and late tokens
    chunks = torch.arange(SEQ).chunk(2 * world)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]])


# same as snippets/scaling/ring_attention.py:OnlineSoftmax
class OnlineSoftmax:
    """softmax(scores) @ v, built one block of keys
    at a time: a running max and sum per query row."""

    def __init__(self, q: torch.Tensor):
        self.max = q.new_full((*q.shape[:-1], 1), float("-inf"))
        self.sum = q.new_zeros((*q.shape[:-1], 1))
        self.acc = torch.zeros_like(q)  # sum of exp(score - max) * v so far

    def add(self, scores: torch.Tensor, v: torch.Tensor) -> None:
        # the first block must give every row a finite
        # max: the ring starts with the rank's own block
        new_max = torch.maximum(self.max, scores.amax(dim=-1, keepdim=True))
        # what was summed under the old max, put on the new one
        rescale = (self.max - new_max).exp()
        p = (scores - new_max).exp()  # masked scores are -inf: exp gives 0
        self.sum = self.sum * rescale + p.sum(dim=-1, keepdim=True)
        self.acc = self.acc * rescale + p @ v
        self.max = new_max

    def result(self) -> torch.Tensor:
        # log(sum) + max is the log-sum-exp a backward pass would keep
        return self.acc / self.sum


def pass_on(t: torch.Tensor) -> tuple[torch.Tensor, list]:
    """Start sending t to the next rank and receiving
    the previous rank's; wait on the requests returned."""
    rank, world = dist.get_rank(), dist.get_world_size()
    incoming = torch.empty_like(t)
    requests = dist.batch_isend_irecv(
        [
            dist.P2POp(dist.isend, t, (rank + 1) % world),
            dist.P2POp(dist.irecv, incoming, (rank - 1) % world),
        ]
    )
    return incoming, requests


def block_mask(step: int, causal: bool, layout: str, device) -> torch.Tensor:
    """Which (query, key) pairs of this step's block are computed."""
    rank, world = dist.get_rank(), dist.get_world_size()
    q_pos = positions(rank, world, layout)
    k_pos = positions((rank - step) % world, world, layout)  # whose block
    if not causal:
        return torch.ones(len(q_pos), len(k_pos), dtype=torch.bool).to(device)
    return (k_pos[None, :] <= q_pos[:, None]).to(device)


# --8<-- [start:forward]
def ring_forward(q, k, v, causal: bool, layout: str):
    """The forward of the ring page, keeping the log-sum-exp."""
    world = dist.get_world_size()
    kv, softmax, pairs = torch.stack([k, v]), OnlineSoftmax(q), 0
    for step in range(world):
        if step < world - 1:
            incoming, requests = pass_on(kv)  # overlaps the computation
        allowed = block_mask(step, causal, layout, q.device)
        if allowed.any():  # a block wholly above the diagonal is skipped
            scores = q @ kv[0].transpose(-2, -1) * q.shape[-1] ** -0.5
            softmax.add(scores.masked_fill(~allowed, float("-inf")), kv[1])
            pairs += int(allowed.sum())
        if step < world - 1:
            for request in requests:
                request.wait()
            kv = incoming
    lse = softmax.max + softmax.sum.log()  # per query row
    return softmax.result(), lse, pairs


# --8<-- [end:forward]


# --8<-- [start:backward]
def ring_backward(grad_out, q, k, v, out, lse, causal: bool, layout: str):
    """dQ stays here; dK/dV of a block ride the ring with it
    and, after a full turn, arrive at the block's owner."""
    world = dist.get_world_size()
    scale = q.shape[-1] ** -0.5
    # the softmax's backward term, one number per query row
    delta = (grad_out * out).sum(dim=-1, keepdim=True)
    kv, grad_q, pairs = torch.stack([k, v]), torch.zeros_like(q), 0
    grad_kv = torch.zeros_like(kv)  # dK/dV of the block held now
    for step in range(world):
        if step < world - 1:
            incoming, requests = pass_on(kv)
        allowed = block_mask(step, causal, layout, q.device)
        if allowed.any():
            scores = q @ kv[0].transpose(-2, -1) * scale
            # the forward's probabilities, rebuilt from the log-sum-exp
            p = (scores - lse).exp().masked_fill(~allowed, 0.0)
            grad_kv[1] += p.transpose(-2, -1) @ grad_out  # dV
            grad_p = grad_out @ kv[1].transpose(-2, -1)
            grad_scores = p * (grad_p - delta) * scale
            grad_q += grad_scores @ kv[0]
            grad_kv[0] += grad_scores.transpose(-2, -1) @ q  # dK
            pairs += int(allowed.sum())
        # dK/dV go on after this step's share is added: one more
        # hop than K/V, so that they end on the block's owner
        grad_kv, grad_requests = pass_on(grad_kv)
        for request in grad_requests:
            request.wait()
        if step < world - 1:
            for request in requests:
                request.wait()
            kv = incoming
    return grad_q, grad_kv[0], grad_kv[1], pairs


# --8<-- [end:backward]


# --8<-- [start:autograd]
class RingAttention(torch.autograd.Function):
    """Ring attention that loss.backward() goes through;
    work: a dict that receives the pairs each pass computed."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, layout: str, work: dict):
        out, lse, work["forward"] = ring_forward(q, k, v, causal, layout)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = causal, layout, work
        return out

    @staticmethod
    def backward(ctx, grad_out):
        causal, layout, work = ctx.args
        *grads, work["backward"] = ring_backward(
            grad_out, *ctx.saved_tensors, causal, layout
        )
        return *grads, None, None, None


# --8<-- [end:autograd]


def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    # --8<-- [start:check]
    # the same full tensors on every rank: drawn on the CPU, then moved
    torch.manual_seed(0)
    q_all, k_all, v_all, grad_all = (
        torch.randn(BATCH, HEADS, SEQ, HEAD_DIM).to(device) for _ in range(4)
    )
    ref = [t.clone().requires_grad_() for t in (q_all, k_all, v_all)]
    with sdpa_kernel(SDPBackend.MATH):  # exact fp32 on every device
        F.scaled_dot_product_attention(*ref, is_causal=True).backward(grad_all)
    results = {}
    for layout in ("contiguous", "zig-zag"):
        mine = positions(rank, world, layout).to(device)
        q, k, v = (
            t[:, :, mine].clone().requires_grad_()
            for t in (q_all, k_all, v_all)
        )
        work = {}
        out = RingAttention.apply(q, k, v, True, layout, work)
        out.backward(grad_all[:, :, mine])  # this rank's rows of dL/dout
        error = torch.stack(
            [
                (t.grad - r.grad[:, :, mine]).abs().max()
                for t, r in zip((q, k, v), ref)
            ]
        )
        dist.all_reduce(error, op=dist.ReduceOp.MAX)  # the worst rank
        assert error.max() < 1e-5, f"{layout}: gradients differ: {error}"
        every = [None] * world
        dist.all_gather_object(every, work)
        results[layout] = error.tolist(), every
    # --8<-- [end:check]
    zigzag = [w["backward"] for w in results["zig-zag"][1]]
    contiguous = [w["backward"] for w in results["contiguous"][1]]
    assert len(set(zigzag)) == 1, f"zig-zag unbalanced: {zigzag}"
    assert max(contiguous) > max(zigzag), (contiguous, zigzag)
    if rank == 0:
        print(
            f"{SEQ} tokens on {world} ranks, causal; "
            f"batch {BATCH}, {HEADS} heads of {HEAD_DIM}"
        )
        for layout, (error, every) in results.items():
            print(
                f"{layout:10}: max |ring - one process| of dQ, dK, dV = "
                + ", ".join(f"{e:.1e}" for e in error)
            )
            print(
                f"{'':10}  query-key pairs per rank, forward "
                f"{[w['forward'] for w in every]}, "
                f"backward {[w['backward'] for w in every]}"
            )


# same as snippets/scaling/ring_attention.py:main
def main() -> None:
    device = setup()
    try:
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
