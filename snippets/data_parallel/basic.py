"""Wrap a model in nn.DataParallel and check
it computes what the bare model computes."""
# launch: python snippets/data_parallel/basic.py
# uses-gpus: all

# --8<-- [start:model]
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(10, 20),
    nn.ReLU(),
    nn.Linear(20, 5),
)

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model.to(device)  # DataParallel needs the parameters on device_ids[0] (cuda:0)
parallel_model = nn.DataParallel(model)
# --8<-- [end:model]

# --8<-- [start:forward]
# drawn on the CPU, then moved: the same numbers with or without a GPU
inputs = torch.randn(100, 10).to(device)
# split along dim 0 across GPUs, gathered on cuda:0
outputs = parallel_model(inputs)
print("device_ids:", parallel_model.device_ids)  # [] without CUDA
print("output:", tuple(outputs.shape), outputs.device)
# --8<-- [end:forward]

# --8<-- [start:train_step]
optimizer = torch.optim.SGD(parallel_model.parameters(), lr=0.1)
targets = inputs[:, :5].sin()  # something the model can learn

losses = []
for _ in range(50):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(parallel_model(inputs), targets)
    # gradients of every replica are summed into `model`'s parameters
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
# --8<-- [end:train_step]

# --8<-- [start:save]
import os
import tempfile

# The wrapper's keys carry a "module." prefix; the inner module's keys don't.
assert all(k.startswith("module.") for k in parallel_model.state_dict())
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "model.pt")
    # the bare model's weights
    torch.save(parallel_model.module.state_dict(), path)
    # no DP
    fresh = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    fresh.load_state_dict(
        torch.load(path, map_location="cpu", weights_only=True)
    )
# --8<-- [end:save]

# --8<-- [start:checks]
assert outputs.shape == (100, 5)
assert losses[-1] < losses[0] / 2, "training should reduce the loss"
assert parallel_model.module is model  # DP trains the module you passed in
with torch.no_grad():
    # same function
    torch.testing.assert_close(parallel_model(inputs), model(inputs))
    # round-trip; compared where the model runs
    torch.testing.assert_close(fresh.to(device)(inputs), model(inputs))
if not torch.cuda.is_available():
    assert parallel_model.device_ids == []  # no CUDA: DP just calls the module
# --8<-- [end:checks]
