"""What SyncBatchNorm does without a GPU: conversion
works, DDP and training forward refuse, eval works."""

import copy
import tempfile

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    # a one-rank group: no port, no launcher
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(
            "gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1
        )
        try:
            torch.manual_seed(0)
            net = nn.Sequential(
                nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()
            )
            # give BatchNorm some running statistics
            net(torch.randn(4, 3, 8, 8))
            before = copy.deepcopy(net)
            # --8<-- [start:convert]
            # each BatchNorm*d: same weights and stats
            synced = nn.SyncBatchNorm.convert_sync_batchnorm(net)
            # --8<-- [end:convert]
            assert (
                isinstance(synced[1], nn.SyncBatchNorm)
                and synced[1].num_batches_tracked == 1
            )

            try:
                DDP(synced)
            except ValueError as error:
                assert (
                    str(error)
                    == "SyncBatchNorm layers only work with GPU modules"
                )
            else:
                raise AssertionError("DDP accepted SyncBatchNorm on CPU")
            try:
                synced.train()(torch.randn(4, 3, 8, 8))
            except ValueError as error:
                assert str(error).startswith(
                    "SyncBatchNorm expected input tensor to be on GPU"
                )
            else:
                raise AssertionError("SyncBatchNorm trained on CPU")

            # eval mode never syncs: a checkpoint can be scored on CPU
            x = torch.randn(4, 3, 8, 8)
            torch.testing.assert_close(synced.eval()(x), before.eval()(x))
            print(
                "CPU: DDP and training refuse SyncBatchNorm; conversion "
                "and eval work"
            )
        finally:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
