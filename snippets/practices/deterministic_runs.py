"""Two complete DDP training runs with the same seeds
end with bit-identical weights; another seed does not."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/practices/deterministic_runs.py
# output-varies: sha256 ([0-9a-f]+)\.\.\.

import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# --8<-- [start:deterministic]
# before CUDA starts: deterministic cuBLAS
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
# error out on ops with no deterministic implementation
torch.use_deterministic_algorithms(True)
# benchmark mode may pick different kernels run to run
torch.backends.cudnn.benchmark = False
# --8<-- [end:deterministic]


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


# --8<-- [start:run]
def train_once(device: torch.device, base_seed: int, epochs: int = 3) -> str:
    """One complete training run; returns a digest of the final weights."""
    rank = dist.get_rank()
    # dropout differs per rank, repeats per run
    torch.manual_seed(base_seed + rank)
    # the dataset is the same on every rank
    data_gen = torch.Generator().manual_seed(base_seed)
    x = torch.randn(256, 10, generator=data_gen)
    dataset = TensorDataset(x, x[:, :3].sin())
    sampler = DistributedSampler(dataset, shuffle=True, seed=base_seed)
    loader = DataLoader(
        dataset,
        batch_size=16,
        sampler=sampler,
        generator=torch.Generator().manual_seed(base_seed + rank),
    )

    model = nn.Sequential(
        nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 3)
    ).to(device)
    ddp_model = DDP(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    optimizer = torch.optim.AdamW(ddp_model.parameters(), lr=1e-2)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(
                ddp_model(inputs.to(device)), targets.to(device)
            )
            loss.backward()
            optimizer.step()
    flat = torch.cat(
        [p.detach().flatten() for p in ddp_model.module.parameters()]
    ).cpu()
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()


# --8<-- [end:run]


def main() -> None:
    device = setup()
    try:
        # --8<-- [start:compare]
        first = train_once(device, base_seed=0)
        second = train_once(device, base_seed=0)
        other = train_once(device, base_seed=1)
        assert first == second, (
            "same seeds, same program: weights must match bit for bit"
        )
        assert first != other, (
            "a different seed must change the result (else the check "
            "proves nothing)"
        )
        digests = [None] * dist.get_world_size()
        dist.all_gather_object(digests, first)
        assert len(set(digests)) == 1, "replicas diverged"
        # --8<-- [end:compare]
        if dist.get_rank() == 0:
            print(
                f"final weights sha256 {first[:16]}... identical in both "
                "runs and on all ranks"
            )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
