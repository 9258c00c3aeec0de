"""Gradient accumulation under FSDP2: one reduce-scatter per step
instead of one per micro-batch, paid for in unsharded gradients."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/fsdp2_accumulate.py
# holds-group-at-exit: CommDebugMode keeps FSDP2 models and their group alive on torch 2.15.0 (tests/repro/fsdp2_held_at_exit.py)
# timeout: 180

import gc
import os
import weakref
from contextlib import nullcontext

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


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


MICRO_BATCHES = 4


def make_model() -> nn.Sequential:
    # the same initial weights on every rank and in every copy
    torch.manual_seed(0)
    blocks = [
        nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
        for _ in range(3)
    ]
    return nn.Sequential(*blocks, nn.Linear(64, 4))


def shard(model: nn.Sequential, mesh: DeviceMesh) -> nn.Sequential:
    for block in model[:-1]:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)  # the root: the last Linear
    return model


# --8<-- [start:accumulate]
def micro_batch(
    model: FSDPModule,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    scale: float,
    reduce: bool,
    keep_params: bool = False,
) -> None:
    """Forward and backward of one micro-batch; the gradients are
    reduce-scattered only if `reduce`, else they add up unsharded."""
    # applies to every fully_shard'ed module below `model` too
    model.set_requires_gradient_sync(reduce)
    if keep_params:
        # keep the gathered parameters until the next forward
        model.set_reshard_after_backward(reduce)
    loss = nn.functional.mse_loss(model(inputs), targets) * scale
    loss.backward()


# --8<-- [end:accumulate]


# --8<-- [start:held]
class HeldBytes(TorchDispatchMode):
    """Bytes of the storages that ops touched while this mode was on
    and that are still alive, less those of `known` tensors and of
    the buffers collectives work in."""

    def __init__(self, known: list[torch.Tensor]):
        super().__init__()
        self.known = {t.untyped_storage().data_ptr() for t in known}
        self.seen: dict[int, weakref.ref] = {}
        self.buffers: dict[int, weakref.ref] = {}
        self.scattered: dict[int, weakref.ref] = {}  # reduce-scatter outputs

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for storage in storages((args, kwargs, out)):
            remember(self.seen, storage)
        if func is REDUCE_SCATTER:  # its output: the sharded gradient
            remember(self.scattered, args[0].untyped_storage())
            remember(self.buffers, args[1].untyped_storage())
        elif func.namespace == "c10d":  # other collectives: all buffers
            for storage in storages((args, kwargs)):
                remember(self.buffers, storage)
        elif func is COPY and is_in(self.scattered, args[0].untyped_storage()):
            # gloo all-reduces a copy of the input and copies this
            # rank's chunk of it into the output
            remember(self.buffers, args[1].untyped_storage())
        return out

    def now(self) -> int:
        # a buffer can outlive the collective's wait() for a moment:
        # gloo's thread lets go of it just after
        gc.collect()  # what reference cycles hold is not held
        alive = [ref() for ref in self.seen.values()]
        return sum(
            s.nbytes()  # 0 once FSDP has freed (resized) it
            for s in alive
            if s is not None
            and s.data_ptr() not in self.known
            and not is_in(self.buffers, s)
        )


REDUCE_SCATTER = torch.ops.c10d._reduce_scatter_base_.default
COPY = torch.ops.aten.copy_.default


def storages(tree) -> list[torch.UntypedStorage]:
    # plain tensors only: a DTensor wraps one, which ops see too
    leaves = tree_leaves(tree)
    return [t.untyped_storage() for t in leaves if type(t) is torch.Tensor]


def remember(refs: dict[int, weakref.ref], storage) -> None:
    ref = refs.get(id(storage))
    if ref is None or ref() is not storage:  # ids are reused
        refs[id(storage)] = weakref.ref(storage)


def is_in(refs: dict[int, weakref.ref], storage) -> bool:
    ref = refs.get(id(storage))
    return ref is not None and ref() is storage


# --8<-- [end:held]


# --8<-- [start:measure]
def measure(model: nn.Module, batches, reduce_each: bool, keep_params: bool):
    """Per micro-batch: reduce-scatters, all-gathers, and the bytes
    held afterwards besides the sharded parameters and the data."""
    known = [p.to_local() for p in model.parameters()]
    known += [t for batch in batches for t in batch]
    rows = []
    with HeldBytes(known) as held:
        for i, (inputs, targets) in enumerate(batches):
            last = i == len(batches) - 1
            with CommDebugMode() as comms:
                micro_batch(
                    model,
                    inputs,
                    targets,
                    1 / len(batches),
                    reduce=reduce_each or last,
                    keep_params=keep_params,
                )
            counts = {
                str(op).split(".")[-1]: n
                for op, n in comms.get_comm_counts().items()
            }
            gathers = counts.get("_allgather_base_", 0)
            scatters = counts.get("_reduce_scatter_base_", 0)
            rows.append((scatters, gathers, held.now()))
    return rows


# --8<-- [end:measure]


def ddp_no_sync(device: torch.device, batches) -> list[torch.Tensor]:
    """The DDP reference: no_sync() on all but the last micro-batch."""
    ddp = DDP(
        make_model().to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
    )
    for i, (inputs, targets) in enumerate(batches):
        last = i == len(batches) - 1
        with nullcontext() if last else ddp.no_sync():
            loss = nn.functional.mse_loss(ddp(inputs), targets)
            (loss / len(batches)).backward()
    grads = [p.grad.clone() for p in ddp.parameters()]
    del ddp  # before the group goes (debugging page)
    return grads


# --8<-- [start:formula]
def held_formula(numel: int, world: int) -> dict[str, float]:
    """Gradient (and parameter) bytes held between micro-batches,
    fp32, for `numel` parameters sharded over `world` ranks."""
    return {
        "reduce every micro-batch": 4 * numel / world,  # sharded grads
        "reduce on the last": 4 * numel,  # unsharded grads
        "... and keep parameters": 4 * numel * 2,  # + unsharded params
    }


def scattered_formula(numel: int, world: int, micro: int) -> dict[str, float]:
    """Bytes each rank sends in the reduce-scatters of one optimizer
    step: (world - 1) / world of the fp32 gradients, per reduction."""
    per_reduction = 4 * numel * (world - 1) / world
    return {
        "reduce every micro-batch": micro * per_reduction,
        "reduce on the last": per_reduction,
        "... and keep parameters": per_reduction,
    }


# --8<-- [end:formula]


def run(mesh: DeviceMesh, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)  # this rank's micro-batches
    x = torch.randn(world, MICRO_BATCHES, 16, 64)[rank].to(device)
    y = torch.randn(world, MICRO_BATCHES, 16, 4)[rank].to(device)
    batches = list(zip(x, y))
    expected = ddp_no_sync(device, batches)

    # --8<-- [start:compare]
    strategies = {
        "reduce every micro-batch": (True, False),
        "reduce on the last": (False, False),
        "... and keep parameters": (False, True),
    }
    table = {}
    for name, (reduce_each, keep_params) in strategies.items():
        model = shard(make_model().to(device), mesh)
        table[name] = measure(model, batches, reduce_each, keep_params)
        grads = [p.grad.full_tensor() for p in model.parameters()]
        for got, want in zip(grads, expected):
            if reduce_each:  # sums in another order: rounding
                torch.testing.assert_close(got, want)
            else:  # the same sums as DDP's no_sync, in the same order
                assert torch.equal(got, want), name
    # --8<-- [end:compare]

    # --8<-- [start:check]
    numel = sum(p.numel() for p in model.parameters())
    held = held_formula(numel, world)
    groups = len(model)  # one per block, one for the root
    for name, rows in table.items():
        scatters = [s for s, _, _ in rows]
        between = [b for _, _, b in rows[:-1]]  # before the last micro-batch
        reduce_each = strategies[name][0]
        want = [groups] * MICRO_BATCHES if reduce_each else [0, 0, 0, groups]
        assert scatters == want, (name, scatters)
        assert all(b == held[name] for b in between), (name, between)
        # the step ends sharded: the same bytes in every strategy
        assert rows[-1][2] == held["reduce every micro-batch"], (name, rows)
    # --8<-- [end:check]

    if rank == 0:
        report(table, numel, world)


def report(table, numel: int, world: int) -> None:
    print(
        f"{numel:,} parameters, {4 * numel:,} B of fp32 gradients; "
        f"{world} ranks, {MICRO_BATCHES} micro-batches"
    )
    print(f"{'':26}reduce-scatters  all-gathers  held between micro-batches")
    for name, rows in table.items():
        scatters = " ".join(str(s) for s, _, _ in rows)
        gathers = " ".join(str(g) for _, g, _ in rows)
        print(f"{name:26}{scatters:17}{gathers:13}{rows[0][2]:>9,} B")
    psi, ranks, micro = 7e9, 8, 8
    held = held_formula(int(psi), ranks)
    sent = scattered_formula(int(psi), ranks, micro)
    print(f"7B parameters, {ranks} ranks, {micro} micro-batches, per rank:")
    for name in held:
        print(
            f"  {name:26}holds {held[name] / 1e9:5.1f} GB, "
            f"reduce-scatters send {sent[name] / 1e9:6.1f} GB a step"
        )


def main() -> None:
    device = setup()
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    try:
        # every model lives and dies in here, before the groups go
        run(mesh, device)
    finally:
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
