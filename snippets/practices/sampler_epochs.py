"""DistributedSampler: disjoint shards per rank,
a new shuffle per epoch only with set_epoch()."""
# launch: python snippets/practices/sampler_epochs.py

from torch.utils.data import DistributedSampler

dataset = range(16)  # any sized dataset; the sampler only needs len()


# --8<-- [start:shards]
def shards(epoch: int | None, world_size: int = 2) -> list[list[int]]:
    """The indices each rank would read in one epoch; rank
    and world size given explicitly, no process group."""
    out = []
    for rank in range(world_size):
        sampler = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0
        )
        if epoch is not None:
            sampler.set_epoch(epoch)  # shuffles with seed + epoch
        out.append(list(sampler))
    return out


# --8<-- [end:shards]


# --8<-- [start:checks]
e0, e1 = shards(epoch=0), shards(epoch=1)
assert not set(e0[0]) & set(e0[1]), "ranks read disjoint shards"
assert sorted(e0[0] + e0[1]) == list(range(16)), (
    "together they cover the dataset once"
)
assert e0 != e1, "set_epoch(1) gives a new permutation"
assert shards(epoch=0) == e0, "same seed and epoch: the same order on every run"
assert shards(epoch=None) == e0, (
    "without set_epoch every epoch is epoch 0: the same order forever"
)
# --8<-- [end:checks]
print("rank 0, epoch 0:", e0[0])
print("rank 0, epoch 1:", e1[0])
