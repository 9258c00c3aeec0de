"""Activation checkpointing with FSDP2: each block checkpointed in the
model's code and sharded with fully_shard; the same gradients and the same
collectives, and each rank keeps a fraction of the activations."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/checkpoint_fsdp2.py
# holds-group-at-exit: CommDebugMode keeps FSDP2 models and their group alive on torch 2.15.0 (tests/repro/fsdp2_held_at_exit.py)
# output-varies: max \|Δ grad\| = (\S+)

import gc
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn.functional as F
from memory_breakdown import SavedBytes, TinyLM  # the page's model, counter
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.debug import CommDebugMode


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


# --8<-- [start:build]
def build(ckpt: bool, mesh: DeviceMesh, device: torch.device) -> TinyLM:
    torch.manual_seed(0)  # the same weights with and without checkpointing
    # ckpt=True: each block checkpointed in the model's forward
    model = TinyLM(256, 64, 4, 4, ckpt=ckpt).to(device)
    for block in model.blocks:
        # one FSDP unit: gathered before its forward, again before its backward
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)  # the root: embedding, last norm, head
    return model


# --8<-- [end:build]


def my_batch(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    # the global batch, drawn on the CPU: the same on every rank
    ids = torch.randint(256, (4 * world, 64))
    targets = torch.randint(256, (4 * world, 64))
    mine = slice(4 * rank, 4 * rank + 4)  # this rank's 4 sequences
    # copies: a view would keep the whole batch's storage alive (and counted)
    return ids[mine].clone().to(device), targets[mine].clone().to(device)


def compare(mesh: DeviceMesh, device: torch.device) -> tuple[dict, dict, float]:
    ids, targets = my_batch(device)
    # --8<-- [start:compare]
    saved, grads, collectives = {}, {}, {}
    for ckpt in (False, True):
        model = build(ckpt, mesh, device)
        with CommDebugMode() as comms:  # counts the collectives it sees
            with SavedBytes() as counter:
                logits = model(ids).flatten(0, 1)
                loss = F.cross_entropy(logits, targets.flatten())
            # per block: all-gather, recompute its forward (if
            # checkpointed), its backward, reduce-scatter
            loss.backward()
        saved[ckpt] = counter.total
        collectives[ckpt] = {
            str(op).split(".")[-1]: n
            for op, n in comms.get_comm_counts().items()
        }
        # all-gathered for the check
        grads[ckpt] = [p.grad.full_tensor() for p in model.parameters()]
    pairs = zip(grads[False], grads[True])
    diff = max((a - b).abs().max().item() for a, b in pairs)
    # bit-identical on CPU: the recomputation is exact, the reductions the
    # same; a GPU's attention backward may add in a different order
    assert diff <= (0.0 if device.type == "cpu" else 1e-5), diff
    assert saved[False] / saved[True] > 5, saved
    assert collectives[True] == collectives[False], collectives
    # --8<-- [end:compare]
    return saved, collectives, diff


def main() -> None:
    device = setup()  # the process group first, with its backend
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    try:
        # every model lives and dies in here, before the group goes
        saved, collectives, diff = compare(mesh, device)
    finally:
        teardown_mesh(mesh)
    if int(os.environ["RANK"]) == 0:
        print(
            f"FSDP2, {os.environ['WORLD_SIZE']} ranks; TinyLM, 4 blocks, "
            "one FSDP unit each; 256 tokens per rank"
        )
        print("saved for backward per rank:")
        print(f"  without checkpointing {saved[False]:>12,} B")
        print(f"  with checkpointing    {saved[True]:>12,} B")
        ratio = saved[False] / saved[True]
        print(f"{ratio:.1f}× fewer; max |Δ grad| = {diff:.3g}")
        print(f"collectives in one step, either way: {collectives[True]}")


if __name__ == "__main__":
    main()
