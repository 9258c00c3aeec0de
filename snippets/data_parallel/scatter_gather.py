"""Show how nn.DataParallel splits one batch across GPUs and gathers the outputs on cuda:0."""
# launch: python snippets/data_parallel/scatter_gather.py
# requires: gpus=2

# --8<-- [start:scatter_gather]
import torch
import torch.nn as nn


class Probe(nn.Module):
    """A linear layer that records which device saw how many samples."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 5)
        self.seen: list[tuple[str, int]] = []

    def forward(self, x):
        self.seen.append((str(x.device), x.shape[0]))  # replicas append to the shared list
        return self.linear(x)


probe = Probe().to("cuda:0")
parallel = nn.DataParallel(probe)  # all visible GPUs
batch = torch.randn(64, 10, device="cuda:0")
out = parallel(batch)

n = torch.cuda.device_count()
print(f"{n} GPUs, per-replica batches: {sorted(probe.seen)}, output on {out.device}")
assert out.device == torch.device("cuda:0")  # gathered on the first device
assert sorted(d for d, _ in probe.seen) == [f"cuda:{i}" for i in range(n)]
assert sum(size for _, size in probe.seen) == 64  # the batch was split, not copied
torch.testing.assert_close(out, probe.linear(batch))
# --8<-- [end:scatter_gather]
