"""SyncBatchNorm: batch statistics over the
global batch, not over each GPU's slice of it."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/training/sync_batchnorm.py
# requires: gpus=2

import copy
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def setup_nccl() -> torch.device:
    """Join the process group with NCCL, one GPU per
    rank: SyncBatchNorm works on GPU modules only."""
    # LOCAL_RANK: set by torchrun
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    # before init: else every rank also allocates on GPU 0
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return device


# --8<-- [start:main]
def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    # exact convolutions: compare against full precision
    torch.backends.cudnn.allow_tf32 = False
    # the same global batch and the same weights on every rank
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.BatchNorm2d(3), nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)
    ).to(device)
    one_gpu, local_bn = copy.deepcopy(net), copy.deepcopy(net)
    # 2 images per GPU; drawn on the CPU, then moved: the same on any GPU
    batches = [
        torch.randn(world * 2, 3, 16, 16).to(device) + i for i in range(3)
    ]

    model = DDP(
        nn.SyncBatchNorm.convert_sync_batchnorm(net), device_ids=[device.index]
    )
    for x in batches:
        model(x.chunk(world)[rank])  # this rank's 2 images
        # all images in one process: the statistics SyncBatchNorm must reproduce
        one_gpu(x)
        # plain BatchNorm on this rank's slice only
        local_bn(x.chunk(world)[rank])

    for i in (0, 2):  # both BatchNorm layers
        sync_bn, reference, plain = model.module[i], one_gpu[i], local_bn[i]
        assert isinstance(sync_bn, nn.SyncBatchNorm)
        torch.testing.assert_close(
            sync_bn.running_mean, reference.running_mean, rtol=1e-4, atol=1e-5
        )
        torch.testing.assert_close(
            sync_bn.running_var, reference.running_var, rtol=1e-4, atol=1e-5
        )
        assert not torch.allclose(
            plain.running_mean, reference.running_mean, rtol=1e-4, atol=1e-5
        )
    if rank == 0:
        print(
            f"{world} GPUs x 2 images: SyncBatchNorm running stats equal "
            "one BatchNorm over "
            f"{world * 2} images; plain BatchNorm saw only its 2"
        )


def main() -> None:
    device = setup_nccl()
    try:
        # every DDP model lives and dies in here, before the group goes
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
# --8<-- [end:main]
