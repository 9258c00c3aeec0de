"""Show how nn.DataParallel splits a batch across
GPUs, gathers on cuda:0, and what replicas forget."""
# launch: python snippets/data_parallel/scatter_gather.py
# requires: gpus=2
# uses-gpus: all

# --8<-- [start:scatter_gather]
import torch
import torch.nn as nn


class Probe(nn.Module):
    """A linear layer that records which device saw how many samples."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 5)
        # a list: replicas share this object
        self.seen: list[tuple[str, int]] = []
        self.calls = 0  # an int: each replica rebinds its own copy

    def forward(self, x):
        self.seen.append((str(x.device), x.shape[0]))
        # lands on the replica, which is discarded after forward
        self.calls += 1
        return self.linear(x)


probe = Probe().to("cuda:0")  # parameters must live on device_ids[0]
parallel = nn.DataParallel(probe)  # all visible GPUs
batch = torch.randn(64, 10, device="cuda:0")
out = parallel(batch)

n = torch.cuda.device_count()
print(
    f"{n} GPUs, per-replica batches: {sorted(probe.seen)}, output on "
    f"{out.device}"
)
assert out.device == torch.device("cuda:0")  # gathered on the first device
assert sorted(d for d, _ in probe.seen) == sorted(f"cuda:{i}" for i in range(n))
# the batch was split, not copied
assert sum(size for _, size in probe.seen) == 64
torch.testing.assert_close(out, probe.linear(batch))
assert probe.calls == 0, "state set in forward lives on throwaway replicas"
# --8<-- [end:scatter_gather]

# --8<-- [start:gpu0]
# gradients of all replicas are summed onto cuda:0
out.square().mean().backward()
assert all(p.grad.device == torch.device("cuda:0") for p in probe.parameters())
torch.cuda.synchronize()
used = [torch.cuda.memory_allocated(i) for i in range(n)]
print("bytes allocated per GPU after backward:", used)
assert used[0] > max(used[1:]), (
    "parameters, gradients and outputs all stay on cuda:0"
)
# --8<-- [end:gpu0]
