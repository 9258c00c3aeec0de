"""Today's context-parallel API: inputs sharded by a load
balancer, FlexAttention with a document mask over the CP mesh."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/context_parallel_shard.py
# output-excerpt: positions ^\d+ positions
# output-excerpt: documents ^document mask
# output-varies: max \|CP - one process\| = (\S+);

import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental._attention import (
    _context_parallel_shard,
    _ContextParallel,
    _HeadTailLoadBalancer,
    _PTRRLoadBalancer,
    context_parallel_unshard,
)
from torch.distributed.tensor.parallel import parallelize_module
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

# 4 documents packed into one sequence of 2048 tokens: 16
# FlexAttention blocks of 128 (torch 2.10 shards only whole
# blocks, world * 128 tokens at a time)
DOCS, HEADS, HEAD_DIM = [1280, 384, 256, 128], 2, 8
SEQ = sum(DOCS)


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


def spans(positions: torch.Tensor) -> str:
    """[0, 1, ..., 127, 384, ..., 511] -> '0-127 384-511'."""
    breaks = (positions.diff() != 1).nonzero().flatten().tolist()
    starts, ends = [0, *(i + 1 for i in breaks)], [*breaks, len(positions) - 1]
    return " ".join(
        f"{positions[a]}-{positions[b]}" for a, b in zip(starts, ends)
    )


def shard_positions(mesh, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    # --8<-- [start:shard]
    # inputs, labels, position ids: whatever has a sequence dim
    tokens = torch.arange(SEQ).view(1, SEQ).to(device)  # [batch, seq]
    labels = tokens + 1
    balancer = _HeadTailLoadBalancer(SEQ, world, device)
    # a copy each: torch 2.10 reorders the tensors it is given
    tokens, labels = _context_parallel_shard(
        mesh, [tokens.clone(), labels.clone()], [1, 1], load_balancer=balancer
    )
    # --8<-- [end:shard]
    # the zig-zag layout of the ring page
    chunks = torch.arange(SEQ).chunk(2 * world)
    zigzag = torch.cat([chunks[rank], chunks[2 * world - 1 - rank]])
    assert torch.equal(tokens[0].cpu(), zigzag), spans(tokens[0].cpu())
    assert torch.equal(labels, tokens + 1)
    every = [None] * world
    dist.all_gather_object(every, spans(tokens[0].cpu()))
    if rank == 0:
        print(
            f"{SEQ} positions, head-tail balancer: "
            + "; ".join(f"rank {r} holds {s}" for r, s in enumerate(every))
        )


# --8<-- [start:mask]
def document_mask(device: torch.device):
    """Causal attention inside each packed document, none across."""
    doc = torch.repeat_interleave(torch.arange(len(DOCS)), torch.tensor(DOCS))
    doc = doc.to(device)

    def same_document_causal(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)

    # 1 batch row, 1 mask for all heads: what the balancers take
    return create_block_mask(
        same_document_causal, 1, 1, SEQ, SEQ, device=device.type
    )


# --8<-- [end:mask]


def tiles(mask) -> int:
    """128 x 128 tiles a FlexAttention kernel computes for this mask."""
    full = mask.full_kv_num_blocks
    return int(mask.kv_num_blocks.sum() + (0 if full is None else full.sum()))


class Attention(nn.Module):
    """The attention call that _ContextParallel wraps."""

    def forward(self, q, k, v, score_mod=None, block_mask=None):
        return flex_attention(
            q, k, v, score_mod=score_mod, block_mask=block_mask
        )


def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("cp",))
    # sharding a BlockMask runs torch.compile(create_block_mask);
    # on this tiny mask Inductor's compile would cost more than the
    # rest of the run, so torch.compile calls run eagerly here
    torch.compiler.set_stance("force_eager")
    shard_positions(mesh, device)

    mask = document_mask(device)
    torch.manual_seed(0)  # the same q, k, v on every rank
    q_all, k_all, v_all = (
        torch.randn(1, HEADS, SEQ, HEAD_DIM).to(device) for _ in range(3)
    )
    # one process, the whole sequence: the reference
    reference = flex_attention(q_all, k_all, v_all, block_mask=mask)

    balancers = {
        "none": None,
        "head-tail": _HeadTailLoadBalancer(SEQ, world, device),
        "PTRR": _PTRRLoadBalancer(mask, world),
    }
    work = {}
    for name, balancer in balancers.items():
        # --8<-- [start:flex]
        # q, k, v and the mask, sharded the same way
        q, k, v, cp_mask = _context_parallel_shard(
            mesh,
            [q_all.clone(), k_all.clone(), v_all.clone(), mask],
            [2, 2, 2, 2],
            load_balancer=balancer,
        )
        # a pre-hook all-gathers K and V over the mesh
        attention = parallelize_module(
            Attention(),
            mesh,
            _ContextParallel(
                seq_dim=2, attention_type=_ContextParallel.AttentionType.FLEX
            ),
        )
        out = attention(q, k, v, block_mask=cp_mask)  # this rank's rows
        # gather the rows, undo the balancer's reordering
        (full,) = context_parallel_unshard(mesh, [out], [2], balancer)
        # --8<-- [end:flex]
        torch.testing.assert_close(full, reference)
        work[name] = [None] * world
        dist.all_gather_object(work[name], tiles(cp_mask))
        if rank == 0:
            error = (full - reference).abs().max().item()
            print(
                f"document mask, balancer {name:9}: max |CP - one process| "
                f"= {error:.1e}; 128x128 tiles per rank {work[name]}"
            )
    # the same work in total, spread differently
    assert len({sum(w) for w in work.values()}) == 1, work
    assert max(work["PTRR"]) < min(
        max(w) for n, w in work.items() if n != "PTRR"
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
