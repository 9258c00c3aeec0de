"""The same DDP training, with processes started by
torch.multiprocessing.spawn instead of torchrun."""
# launch: python snippets/ddp/train_spawn.py
# ranks: 2
# uses-gpus: all
# timeout: 240

# --8<-- [start:all]
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.multiprocessing as mp
from train_torchrun import assert_replicas_equal, train  # same training code


def init_process(rank: int, world_size: int) -> torch.device:
    """Join the process group; rank and world
    size come from mp.spawn, not the environment."""
    if torch.cuda.is_available():
        device = torch.device("cuda", rank)  # one GPU per process
        # before init: else every rank also allocates on GPU 0
        torch.cuda.set_device(device)
        dist.init_process_group(
            "nccl", rank=rank, world_size=world_size, device_id=device
        )
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    return device


# mp.spawn passes the index as `rank`
def worker(rank: int, world_size: int) -> None:
    device = init_process(rank, world_size)
    try:
        model, losses = train(device)
        assert losses[-1] < 0.7 * losses[0], f"loss did not fall: {losses}"
        assert_replicas_equal(model)
        if rank == 0:
            backend = dist.get_backend()
            print(
                f"{world_size} processes on {device.type} ({backend}): "
                "replicas identical"
            )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":  # required: spawned children re-import this file
    # rank 0's address; children inherit it
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    world_size = torch.cuda.device_count() if torch.cuda.is_available() else 2
    mp.spawn(worker, args=(world_size,), nprocs=world_size, join=True)
# --8<-- [end:all]
