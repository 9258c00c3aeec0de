"""The older context_parallel context manager: SDPA becomes
ring attention on CUDA; output and gradients equal one GPU's."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/context_parallel_sdpa.py
# requires: gpus=2
# output-varies: max \|[^|]+\| = (\S+)

import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
from torch.distributed.tensor.experimental._attention import (
    context_parallel_unshard,
    set_rotate_method,
)
from torch.nn.attention import SDPBackend, sdpa_kernel

BATCH, SEQ, HEADS, HEAD_DIM = 2, 1024, 4, 32
DIM = HEADS * HEAD_DIM


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


# --8<-- [start:model]
class Attention(nn.Module):
    """Causal self-attention through F.scaled_dot_product_attention,
    the call context_parallel replaces."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [batch, seq, dim]
        b, s, _ = x.shape
        # each [b, heads, s, d]
        q, k, v = (
            self.qkv(x).view(b, s, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        )
        # F.scaled_dot_product_attention is looked up at each call: inside
        # context_parallel it is the ring version. [b, heads, s, d]: the
        # sequence is dim 2
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# --8<-- [end:model]


def run(device: torch.device) -> None:
    assert device.type == "cuda", (
        "context_parallel's ring attention exists only for CUDA SDPA kernels"
    )
    world = dist.get_world_size()
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
    # the same weights and input on every rank: drawn on the CPU, moved
    torch.manual_seed(0)
    model = Attention().to(device)
    x = torch.randn(BATCH, SEQ, DIM).to(device)
    # has a ring version and takes fp32; flash needs fp16/bf16
    backend = SDPBackend.EFFICIENT_ATTENTION

    # one GPU, the whole sequence, the exact math kernel: the reference
    with sdpa_kernel(SDPBackend.MATH):
        reference = model(x)
        reference.pow(2).sum().backward()
    reference_grad = model.qkv.weight.grad.clone()

    # --8<-- [start:context_parallel]
    for method in ("allgather", "alltoall"):
        set_rotate_method(method)  # how K/V shards reach the other ranks
        model.zero_grad()
        cp_x = x.clone()  # context_parallel shards its buffers in place
        with (
            sdpa_kernel(backend),
            context_parallel(
                mesh,
                buffers=[cp_x],
                buffer_seq_dims=[1],
                no_restore_buffers={cp_x},
            ),
        ):
            # this rank's SEQ / world positions; SDPA runs as ring attention
            out = model(cp_x)
            # inside the context: the backward is a ring too
            out.pow(2).sum().backward()
        # each rank's loss covers its positions: sum them
        dist.all_reduce(model.qkv.weight.grad)
        # gather, undo the load balancing
        (full,) = context_parallel_unshard(mesh, [out.detach()], [2])
        # --8<-- [end:context_parallel]

        # not restored: it was in no_restore_buffers
        assert cp_x.shape[1] == SEQ // world
        out_error = (full - reference).abs().max().item()
        grad_error = (model.qkv.weight.grad - reference_grad).abs().max().item()
        torch.testing.assert_close(full, reference, rtol=1e-4, atol=1e-5)
        scale = reference_grad.abs().max().item()
        torch.testing.assert_close(
            model.qkv.weight.grad, reference_grad, rtol=1e-4, atol=1e-5 * scale
        )
        if dist.get_rank() == 0:
            print(
                f"{method}: {SEQ} positions, {SEQ // world} on each of "
                f"{world} GPUs; "
                f"output max |CP - one GPU| = {out_error:.1e}, weight "
                f"gradient max |CP - one GPU| = {grad_error:.1e}"
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
