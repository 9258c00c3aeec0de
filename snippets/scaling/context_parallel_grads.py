"""Today's context-parallel API on GPUs, with the backward:
the SDPA ring and FlexAttention's all-gather, wrapped by
_ContextParallel; gradients equal one GPU's."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/context_parallel_grads.py
# requires: gpus=2
# output-varies: = (\S+)$

import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental._attention import (
    _context_parallel_shard,
    _ContextParallel,
    _enable_context_parallel_dispatcher,
    _HeadTailLoadBalancer,
    _PTRRLoadBalancer,
)
from torch.distributed.tensor.parallel import parallelize_module
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

DOCS, HEADS, HEAD_DIM = [1280, 384, 256, 128], 4, 32
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


class Causal(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Flex(nn.Module):
    def forward(self, q, k, v, score_mod=None, block_mask=None):
        return flex_attention(
            q, k, v, score_mod=score_mod, block_mask=block_mask
        )


# same as snippets/scaling/context_parallel_shard.py:document_mask
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


def reference(attention: nn.Module, tensors, grad_out, **kwargs):
    """dQ, dK, dV on one GPU over the whole sequence (math kernel)."""
    full = [t.clone().requires_grad_() for t in tensors]
    with sdpa_kernel(SDPBackend.MATH):
        attention(*full, **kwargs).backward(grad_out)
    return [t.grad for t in full]


def check(name: str, mesh, grads, expected, balancer) -> None:
    """This rank's gradients against the reference's, sharded
    (and reordered) the way the inputs were."""
    expected = _context_parallel_shard(
        mesh, expected, [2] * len(expected), load_balancer=balancer
    )
    errors = torch.stack(
        [(a - b).abs().max() / b.abs().max() for a, b in zip(grads, expected)]
    )
    dist.all_reduce(errors, op=dist.ReduceOp.MAX)  # the worst rank
    assert errors.max() < 1e-4, f"{name}: {errors}"
    if dist.get_rank() == 0:
        print(
            f"{name}: {SEQ} tokens on {dist.get_world_size()} GPUs; "
            "max |CP - one GPU| / max |one GPU| of dQ, dK, dV = "
            f"{errors.max().item():.1e}"
        )


def sdpa_ring(mesh, tensors, grad_all, device) -> None:
    """SDPA's ring under _ContextParallel, head-tail balanced: the
    gradients of Q, K and V against one process."""
    world = mesh.size()
    # --8<-- [start:sdpa]
    # SDPA on sequence-sharded DTensors dispatches to the ring
    _enable_context_parallel_dispatcher()
    attention = parallelize_module(
        Causal(),
        mesh,
        _ContextParallel(
            seq_dim=2, attention_type=_ContextParallel.AttentionType.SDPA
        ),
    )
    balancer = _HeadTailLoadBalancer(SEQ, world, device)
    *qkv, grad_out = _context_parallel_shard(
        mesh,
        [t.clone() for t in (*tensors, grad_all)],
        [2, 2, 2, 2],
        load_balancer=balancer,
    )
    q, k, v = (t.requires_grad_() for t in qkv)
    # the memory-efficient kernel has a ring version and takes fp32
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        attention(q, k, v).backward(grad_out)  # the backward is a ring too
    # --8<-- [end:sdpa]
    expected = reference(Causal(), tensors, grad_all)
    grads = (q.grad, k.grad, v.grad)
    check("SDPA ring, head-tail", mesh, grads, expected, balancer)


def flex_allgather(mesh, tensors, grad_all, device) -> None:
    """FlexAttention with a document mask, PTRR balanced: K and V
    all-gathered; the gradients against one process."""
    world = mesh.size()
    mask = document_mask(device)
    # --8<-- [start:flex]
    attention = parallelize_module(
        Flex(),
        mesh,
        _ContextParallel(
            seq_dim=2, attention_type=_ContextParallel.AttentionType.FLEX
        ),
    )
    balancer = _PTRRLoadBalancer(mask, world)
    *qkv, grad_out, cp_mask = _context_parallel_shard(
        mesh,
        [t.clone() for t in (*tensors, grad_all)] + [mask],
        [2, 2, 2, 2, 2],
        load_balancer=balancer,
    )
    q, k, v = (t.requires_grad_() for t in qkv)
    # backward: the all-gather's gradient is a reduce-scatter of dK, dV
    attention(q, k, v, block_mask=cp_mask).backward(grad_out)
    # --8<-- [end:flex]
    expected = reference(Flex(), tensors, grad_all, block_mask=mask)
    grads = (q.grad, k.grad, v.grad)
    check("FlexAttention all-gather, PTRR", mesh, grads, expected, balancer)


def run(device: torch.device) -> None:
    assert device.type == "cuda", "needs one GPU per rank (see the page)"
    world = dist.get_world_size()
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
    # the BlockMask shard runs torch.compile(create_block_mask):
    # eager is enough for one small mask
    torch.compiler.set_stance("force_eager")
    torch.manual_seed(0)  # the same tensors on every rank
    q_all, k_all, v_all, grad_all = (
        torch.randn(1, HEADS, SEQ, HEAD_DIM).to(device) for _ in range(4)
    )
    sdpa_ring(mesh, (q_all, k_all, v_all), grad_all, device)
    flex_allgather(mesh, (q_all, k_all, v_all), grad_all, device)


# same as snippets/scaling/ring_attention.py:main
def main() -> None:
    device = setup()
    try:
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
