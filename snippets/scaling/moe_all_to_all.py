"""Expert parallelism: a top-2 mixture-of-experts layer
whose tokens travel to their experts' ranks by all-to-all."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/moe_all_to_all.py
# output-varies: one process\| = (\S+) \(

import copy
import os

import torch
import torch.distributed as dist
import torch.nn as nn

DIM, HIDDEN, N_EXPERTS, TOP_K = 16, 32, 4, 2
TOKENS = 24  # per rank
AUX_WEIGHT = 0.01  # the Switch Transformer's alpha


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


def make_expert() -> nn.Module:
    return nn.Sequential(
        nn.Linear(DIM, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, DIM)
    )


# --8<-- [start:route]
def route(router: nn.Linear, x: torch.Tensor):
    """Top-k routing: each token picks its k best
    experts and weighs them with a softmax over those k."""
    logits = router(x)  # [tokens, experts]
    top_logits, expert_ids = logits.topk(TOP_K, dim=-1)  # [tokens, k]
    # = softmax over all experts, renormalised over the k chosen
    gates = top_logits.softmax(dim=-1)
    return expert_ids, gates, logits


def balance_loss(
    logits: torch.Tensor, expert_ids: torch.Tensor
) -> torch.Tensor:
    """Switch Transformer's auxiliary loss: N * sum_i
    f_i * P_i, smallest when the experts share the load."""
    # f_i
    share = (
        torch.bincount(expert_ids.flatten(), minlength=N_EXPERTS)
        / expert_ids.numel()
    )
    prob = logits.softmax(dim=-1).mean(dim=0)  # P_i
    return N_EXPERTS * (share * prob).sum()


# --8<-- [end:route]


# --8<-- [start:reference]
def moe_one_process(
    router: nn.Linear, experts: list[nn.Module], x: torch.Tensor
) -> torch.Tensor:
    """The same layer with every expert in one process:
    the answer the distributed layer must give."""
    expert_ids, gates, _ = route(router, x)
    y = torch.zeros_like(x)
    for e, expert in enumerate(experts):
        # tokens that chose e, and as which choice
        token, slot = (expert_ids == e).nonzero(as_tuple=True)
        y = y.index_add(0, token, expert(x[token]) * gates[token, slot, None])
    return y


# --8<-- [end:reference]


# --8<-- [start:all_to_all]
class AllToAll(torch.autograd.Function):
    """dist.all_to_all_single that autograd can go through:
    gradients travel back with the splits swapped."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, out_splits: list[int], in_splits: list[int]
    ) -> torch.Tensor:
        ctx.splits = out_splits, in_splits
        out = x.new_empty(sum(out_splits), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty(sum(in_splits), *grad.shape[1:])
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits)
        return back, None, None


# --8<-- [end:all_to_all]


class ExpertParallelMoE(nn.Module):
    """A rank holds N_EXPERTS / world experts: rank
    r holds experts r * n, ..., r * n + n - 1."""

    def __init__(self, router: nn.Linear, local_experts: list[nn.Module]):
        super().__init__()
        self.router = router  # replicated: every rank routes its own tokens
        self.experts = nn.ModuleList(local_experts)
        self.sent = self.received = None  # rows per rank, kept for the printout

    # --8<-- [start:dispatch]
    def forward(self, x: torch.Tensor):
        world = dist.get_world_size()
        expert_ids, gates, logits = route(self.router, x)
        # [tokens * k]: the expert of each copy; copy j is of token j // k
        flat = expert_ids.flatten()
        # copies sorted by expert, hence by the rank that holds it
        order = flat.argsort(stable=True)
        token_of = order // TOP_K  # the token each sorted copy comes from
        per_expert = torch.bincount(flat, minlength=N_EXPERTS)

        # 1. counts first: every rank learns how many rows
        # it will receive, per source and local expert
        incoming = torch.empty_like(per_expert)
        # even split: n entries to each rank
        dist.all_to_all_single(incoming, per_expert)
        # rows to each rank
        send = per_expert.view(world, -1).sum(dim=1).tolist()
        # rows from each rank
        recv = incoming.view(world, -1).sum(dim=1).tolist()

        # 2. the token copies travel to their experts' ranks: uneven splits
        rows = AllToAll.apply(x[token_of], recv, send)
        # --8<-- [end:dispatch]

        # --8<-- [start:compute]
        # rows arrive grouped by source rank, then
        # by expert inside each source's block
        local_expert = torch.arange(len(self.experts), device=x.device).repeat(
            world
        )
        local_expert = local_expert.repeat_interleave(incoming)
        out = torch.zeros_like(rows)
        for i, expert in enumerate(self.experts):
            mine = (local_expert == i).nonzero().squeeze(1)
            out = out.index_copy(0, mine, expert(rows[mine]))

        # 3. the results travel back, the reverse
        # all-to-all, and are combined with the gates
        back = AllToAll.apply(out, send, recv)
        y = torch.zeros_like(x).index_add(
            0, token_of, back * gates.flatten()[order, None]
        )
        self.sent, self.received = send, recv
        return y, balance_loss(logits, expert_ids)
        # --8<-- [end:compute]


# --8<-- [start:check]
def reference(router, experts, x_all, w_all) -> torch.Tensor:
    """One process, every token and every expert;
    the balance loss per rank's tokens, as below."""
    world = dist.get_world_size()
    y_ref = moe_one_process(router, experts, x_all)
    aux_ref = sum(
        balance_loss(router(x), route(router, x)[0]) for x in x_all.chunk(world)
    )
    ((y_ref * w_all).sum() + AUX_WEIGHT * aux_ref).backward()
    return y_ref


def expert_parallel(router, experts, x_all, w_all):
    """Own copies of the router and of this rank's
    experts, this rank's tokens."""
    rank, world = dist.get_rank(), dist.get_world_size()
    n = N_EXPERTS // world
    moe = ExpertParallelMoE(
        copy.deepcopy(router), copy.deepcopy(experts[rank * n : (rank + 1) * n])
    )
    x, w = x_all.chunk(world)[rank], w_all.chunk(world)[rank]
    y, aux = moe(x)
    # gradients come back through the reverse all-to-all
    ((y * w).sum() + AUX_WEIGHT * aux).backward()
    for p in moe.router.parameters():
        # the router is replicated: sum its gradient over ranks, as DDP would
        dist.all_reduce(p.grad)
    return moe, y, aux


def difference(ours: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest |ours - expected|, once every element
    passed allclose's test (rtol 1e-5, atol 1e-6)."""
    diff = (ours - expected).abs()
    assert (diff <= 1e-6 + 1e-5 * expected.abs()).all(), diff.max().item()
    return diff.max().item()


def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    assert N_EXPERTS % world == 0, "every rank holds the same number of experts"
    n = N_EXPERTS // world
    torch.manual_seed(0)  # the same router, experts and data on every rank
    router = nn.Linear(DIM, N_EXPERTS, bias=False).to(device)
    experts = [make_expert().to(device) for _ in range(N_EXPERTS)]
    # from the CPU generator: the same numbers whatever the device
    x_all = torch.randn(world * TOKENS, DIM).to(device)
    # a fixed projection: loss = sum(y * w)
    w_all = torch.randn(world * TOKENS, DIM).to(device)

    y_ref = reference(router, experts, x_all, w_all)
    moe, y, aux = expert_parallel(router, experts, x_all, w_all)
    ref_experts = nn.ModuleList(experts[rank * n : (rank + 1) * n])
    pairs = zip(moe.experts.parameters(), ref_experts.parameters())
    errors = torch.tensor(
        [
            difference(y, y_ref.chunk(world)[rank]),
            max(difference(p.grad, q.grad) for p, q in pairs),
            difference(moe.router.weight.grad, router.weight.grad),
        ],
        device=device,
    )
    dist.all_reduce(errors, op=dist.ReduceOp.MAX)  # the worst rank
    # --8<-- [end:check]
    report(moe, aux, route(router, x_all)[0], errors)


def report(
    moe: ExpertParallelMoE,
    aux: torch.Tensor,
    expert_ids: torch.Tensor,
    errors: torch.Tensor,
) -> None:
    """In rank order: the rows each rank sent and
    received, and its balance loss; then the errors."""
    world = dist.get_world_size()
    every = [None] * world
    dist.all_gather_object(every, (moe.sent, moe.received, aux.item()))
    if dist.get_rank() != 0:
        return
    print(
        f"{N_EXPERTS} experts, {N_EXPERTS // world} per rank; top-{TOP_K} "
        f"routing of {TOKENS} tokens per rank"
    )
    for r, (sent, received, _) in enumerate(every):
        print(
            f"rank {r}: sends {sent} rows to ranks "
            f"{list(range(world))}, receives {received}"
        )
    counts = torch.bincount(expert_ids.flatten(), minlength=N_EXPERTS)
    print(f"rows per expert, all ranks together: {counts.tolist()}")
    print(
        "balance loss per rank: "
        + ", ".join(f"{a:.3f}" for _, _, a in every)
        + " (1.000 when routing is even)"
    )
    for name, err in zip(
        ("output", "expert gradients", "router gradient"), errors.tolist()
    ):
        print(
            f"{name}: max |expert parallel - one process| = "
            f"{err:.1e} (rtol 1e-5, atol 1e-6)"
        )


def main() -> None:
    device = setup()
    try:
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
