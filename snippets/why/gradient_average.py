"""Data parallelism rests on one fact: averaging
per-shard gradients gives the full-batch gradient."""
# launch: python snippets/why/gradient_average.py

# --8<-- [start:setup]
import copy

import torch
import torch.nn as nn

torch.manual_seed(0)
world_size = 4  # pretend GPUs
x, y = torch.randn(32, 8), torch.randn(32, 1)  # one global batch
loss_fn = nn.MSELoss()  # reduction="mean": the loss is an average over samples


def grads(module: nn.Module, inputs, targets) -> list[torch.Tensor]:
    module.zero_grad()
    loss_fn(module(inputs), targets).backward()
    return [p.grad.clone() for p in module.parameters()]


def per_replica_grads(module: nn.Module) -> list[list[torch.Tensor]]:
    """Each replica (an exact copy) gets its own 32 / 4 = 8 samples."""
    shards = zip(x.chunk(world_size), y.chunk(world_size))
    return [grads(copy.deepcopy(module), xs, ys) for xs, ys in shards]


# --8<-- [end:setup]


# --8<-- [start:average]
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
full = grads(model, x, y)  # one device, whole batch
local = per_replica_grads(model)

# all-reduce sums across GPUs; dividing by world_size gives the average
averaged = [torch.stack(g).mean(dim=0) for g in zip(*local)]
summed = [torch.stack(g).sum(dim=0) for g in zip(*local)]  # sum, not divided

for a, f, s in zip(averaged, full, summed):
    torch.testing.assert_close(a, f)  # average == full-batch gradient
    # a sum is world_size times too big
    torch.testing.assert_close(s, world_size * f)
print(f"{world_size} shards: averaged gradients == full-batch gradients")
# --8<-- [end:average]

# --8<-- [start:batchnorm]
# The equality needs each sample's loss to depend on that sample only.
# BatchNorm mixes samples: every shard computes its own mean and variance.
bn_model = nn.Sequential(
    nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 1)
)
bn_full = grads(bn_model, x, y)
bn_avg = [torch.stack(g).mean(dim=0) for g in zip(*per_replica_grads(bn_model))]
gap = max((a - f).abs().max().item() for a, f in zip(bn_avg, bn_full))
assert gap > 1e-3, "per-shard BatchNorm statistics should change the gradient"
print(f"with BatchNorm: max |averaged - full| = {gap:.2g}")
# --8<-- [end:batchnorm]
