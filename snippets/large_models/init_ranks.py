"""Random initialisation of a sharded model on 2 ranks differs from one
process's, even with the same seed; a seed checkpoint, written by one
process and loaded sharded, gives one process's weights on any number of
ranks. And a tied output layer after to_empty: where the tie breaks."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/large_models/init_ranks.py

import gc
import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard


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


# --8<-- [start:model]
class TiedLM(nn.Module):
    """The output layer shares the embedding's weight, as in Llama 3.2 1B."""

    def __init__(self, vocab: int = 512, dim: int = 64, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.embed.weight  # one Parameter, two names

    def init_weights(self) -> None:
        """Draws every weight from the default generator, in this order."""
        nn.init.normal_(self.embed.weight, std=0.02)  # lm_head's too
        for layer in self.layers:
            nn.init.trunc_normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)
        nn.init.ones_(self.norm.weight)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = x + torch.relu(layer(x))
        return self.lm_head(self.norm(x))


# --8<-- [end:model]


# --8<-- [start:build]
def build_sharded(mesh: DeviceMesh, device: torch.device) -> TiedLM:
    with torch.device("meta"):
        model = TiedLM()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)  # embed and lm_head: in the root's group
    model.to_empty(device=device)  # uninitialised shards
    return model


# --8<-- [end:build]


def full_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter as a full CPU tensor (a collective for DTensors)."""
    return {
        name: (p.full_tensor() if hasattr(p, "full_tensor") else p).cpu()
        for name, p in model.named_parameters()
    }


def same(a: dict, b: dict) -> list[str]:
    return [k for k in a if torch.equal(a[k], b[k])]


def random_init(mesh, device, one: dict) -> None:
    # --8<-- [start:sharded_init]
    model = build_sharded(mesh, device)
    torch.manual_seed(0)  # the seed one process used, on every rank
    with torch.no_grad():
        model.init_weights()  # each rank draws its own shards
    # --8<-- [end:sharded_init]
    weights = full_weights(model)
    equal = same(weights, one)
    random = [k for k in one if "bias" not in k and "norm" not in k]
    assert not set(random) & set(equal), "random weights differ"
    if dist.get_rank() == 0:
        rows = len(one["embed.weight"]) // mesh.size()
        embed = weights["embed.weight"]
        print(
            f"init on {mesh.size()} ranks, seed 0: equal to one process: "
            f"{', '.join(equal)}; differs: {', '.join(random)}"
        )
        print(
            "  embed.weight: rank 1's rows equal rank 0's: "
            f"{torch.equal(embed[:rows], embed[rows : 2 * rows])}"
        )


def seed_checkpoint(mesh, device, one: dict, path: Path) -> None:
    # --8<-- [start:seed_checkpoint]
    if dist.get_rank() == 0:
        # one process, as a separate job would: full model, one generator
        torch.manual_seed(0)
        seed = TiedLM()
        seed.init_weights()
        # no_dist: this process alone writes the whole checkpoint
        dcp.save(seed.state_dict(), checkpoint_id=path, no_dist=True)
    dist.barrier()  # the checkpoint is complete

    model = build_sharded(mesh, device)
    state = get_model_state_dict(model)  # sharded DTensors to fill
    dcp.load(state, checkpoint_id=path)  # each rank reads its slices
    # --8<-- [end:seed_checkpoint]
    weights = full_weights(model)
    assert same(weights, one) == list(one), "the seed checkpoint's weights"
    assert model.lm_head.weight is model.embed.weight, "still tied"
    if dist.get_rank() == 0:
        print(
            f"seed checkpoint loaded on {mesh.size()} ranks: every weight "
            "equal to one process's, bit for bit"
        )


def tied_after_to_empty(mesh, device) -> None:
    # --8<-- [start:tie]
    with torch.device("meta"):
        plain = TiedLM()  # not sharded: for one rank, or DDP
    plain.to_empty(device=device)
    broken = plain.lm_head.weight is not plain.embed.weight
    plain.lm_head.weight = plain.embed.weight  # tie again, then initialise

    sharded = build_sharded(mesh, device)  # to_empty on DTensors
    kept = sharded.lm_head.weight is sharded.embed.weight
    # --8<-- [end:tie]
    assert broken, "to_empty gave lm_head a Parameter of its own"
    assert plain.lm_head.weight is plain.embed.weight, "tied again"
    params = list(plain.parameters())  # a shared Parameter counts once
    assert len(params) == len(list(TiedLM().parameters()))
    assert kept, "FSDP2's parameters were swapped in place: still one"
    if dist.get_rank() == 0:
        print(
            f"tied weights after to_empty: plain module broken={broken}; "
            f"FSDP2 module still tied={kept}"
        )


def main() -> None:
    device = setup()  # the process group first, with its backend
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    path = (
        Path(tempfile.gettempdir())
        / f"seed-checkpoint-{os.environ['TORCHELASTIC_RUN_ID']}"
    )
    # --8<-- [start:one_process]
    torch.manual_seed(0)
    reference = TiedLM()  # the whole model in one process
    reference.init_weights()
    # --8<-- [end:one_process]
    one = full_weights(reference)
    try:
        random_init(mesh, device, one)
        seed_checkpoint(mesh, device, one, path)
        tied_after_to_empty(mesh, device)
    finally:
        dist.barrier()
        if dist.get_rank() == 0:
            shutil.rmtree(path, ignore_errors=True)
        teardown_mesh(mesh)


if __name__ == "__main__":
    main()
