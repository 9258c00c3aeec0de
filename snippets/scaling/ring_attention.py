"""Ring attention written out: K/V blocks travel
around the ranks, an online softmax adds them up."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/ring_attention.py
# output-varies: max \|ring - full attention\| = (\S+);

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


# --8<-- [start:layout]
def positions(rank: int, world: int, layout: str) -> torch.Tensor:
    """Which positions of the sequence a rank holds."""
    if layout == "contiguous":  # rank r: the r-th block
        return torch.arange(SEQ).chunk(world)[rank]
    # zig-zag: 2 * world chunks, rank r holds chunk r and
    # its mirror, so every rank gets early and late tokens
    chunks = torch.arange(SEQ).chunk(2 * world)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]])


# --8<-- [end:layout]


# --8<-- [start:online_softmax]
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


# --8<-- [end:online_softmax]


# --8<-- [start:ring]
def ring_attention(q, k, v, causal: bool, layout: str = "contiguous"):
    """This rank's rows of softmax(q k^T / sqrt(d))
    v, its q, k, v being its block of the sequence."""
    rank, world = dist.get_rank(), dist.get_world_size()
    q_pos = positions(rank, world, layout)
    kv = torch.stack([k, v])  # one message per step
    softmax, pairs, skipped = OnlineSoftmax(q), 0, 0
    for step in range(world):
        # start passing the block on, and compute with it meanwhile
        if step < world - 1:
            incoming = torch.empty_like(kv)
            send = dist.P2POp(dist.isend, kv, (rank + 1) % world)
            recv = dist.P2POp(dist.irecv, incoming, (rank - 1) % world)
            requests = dist.batch_isend_irecv([send, recv])

        # whose K/V block this is; step 0: this rank's own
        source = (rank - step) % world
        k_pos = positions(source, world, layout)
        if causal:  # a query sees the keys at or before its own position
            allowed = k_pos[None, :] <= q_pos[:, None]
        else:
            allowed = torch.ones(len(q_pos), len(k_pos), dtype=torch.bool)
        # a block wholly above the diagonal is skipped, not computed
        if allowed.any():
            scores = q @ kv[0].transpose(-2, -1) * q.shape[-1] ** -0.5
            softmax.add(
                scores.masked_fill(~allowed.to(q.device), float("-inf")), kv[1]
            )
            pairs += int(allowed.sum())
        else:
            skipped += 1

        if step < world - 1:
            for request in requests:
                request.wait()
            kv = incoming
    return softmax.result(), pairs, skipped


# --8<-- [end:ring]


def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    # --8<-- [start:check]
    # the same full sequence on every rank, for the one-process
    # reference: drawn on the CPU, then moved
    torch.manual_seed(0)
    q_all, k_all, v_all = (
        torch.randn(BATCH, HEADS, SEQ, HEAD_DIM).to(device) for _ in range(3)
    )
    results = []
    for causal, layout in (
        (False, "contiguous"),
        (True, "contiguous"),
        (True, "zig-zag"),
    ):
        mine = positions(rank, world, layout).to(device)
        # this rank's block of the sequence
        q, k, v = (t[:, :, mine] for t in (q_all, k_all, v_all))
        out, pairs, skipped = ring_attention(q, k, v, causal, layout)
        with sdpa_kernel(SDPBackend.MATH):  # exact fp32 on every device
            full = F.scaled_dot_product_attention(
                q_all, k_all, v_all, is_causal=causal
            )[:, :, mine]
        torch.testing.assert_close(out, full, rtol=1e-5, atol=1e-6)
        error = (out - full).abs().max()
        dist.all_reduce(error, op=dist.ReduceOp.MAX)  # the worst rank
        results.append((error.item(), pairs, skipped))
    # --8<-- [end:check]

    every = [None] * world
    dist.all_gather_object(every, results)
    if rank == 0:
        print(
            f"{SEQ} tokens on {world} ranks; batch {BATCH}, {HEADS} "
            f"heads of {HEAD_DIM}"
        )
        for i, name in enumerate(
            ("non-causal", "causal, contiguous", "causal, zig-zag")
        ):
            pairs, skipped = [r[i][1] for r in every], [r[i][2] for r in every]
            print(
                f"{name:18}: max |ring - full attention| = {results[i][0]:.1e}",
                end="",
            )
            print(
                f"; query-key pairs per rank {pairs}, blocks skipped {skipped}"
            )


def main() -> None:
    device = setup()
    try:
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
