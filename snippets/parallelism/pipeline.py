"""Pipeline parallelism: GPipe over 4
micro-batches gives one process's loss and update."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/parallelism/pipeline.py
# timeout: 240

import copy
import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe


# same as snippets/parallelism/_mesh.py:setup_mesh
def setup_mesh() -> tuple[DeviceMesh, torch.device]:
    """One GPU per rank (NCCL) if every local
    rank can have one, else CPU (gloo)."""
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        # before init: else every rank also allocates on GPU 0
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    # the group first, with its backend: a mesh that creates it
    # picks the machine's accelerator (NCCL) even for "cpu"
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    return mesh, device


def make_model() -> nn.Sequential:
    # the same full model on every rank: each keeps only its stage
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4)]
    return nn.Sequential(*layers, nn.Linear(32, 8))


# --8<-- [start:split]
def stage_layers(model: nn.Sequential, rank: int, stages: int) -> nn.Sequential:
    """Split by hand: stage r holds a contiguous
    run of layers, [r*n/s, (r+1)*n/s)."""
    n = len(model)
    return model[rank * n // stages : (rank + 1) * n // stages]


# --8<-- [end:split]


def main() -> None:
    mesh, device = setup_mesh()
    rank, stages = dist.get_rank(), mesh.size()  # one stage per rank
    try:
        reference = make_model().to(device)
        # the same batch on every rank: drawn on the CPU, then moved
        torch.manual_seed(1)
        x = torch.randn(16, 32).to(device)
        y = x[:, :8].cos()
        loss_fn = nn.MSELoss()

        # --8<-- [start:stage]
        # 2 stages: 0-1 | 2-4
        part = stage_layers(copy.deepcopy(reference), rank, stages)
        stage = PipelineStage(
            part, stage_index=rank, num_stages=stages, device=device
        )
        # 16 samples: 4 micro-batches of 4
        schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=loss_fn)
        # --8<-- [end:stage]

        # --8<-- [start:step]
        optimizer = torch.optim.SGD(part.parameters(), lr=0.1)
        losses = []
        if stage.is_first:
            schedule.step(x)  # splits the batch, feeds the micro-batches
        elif stage.is_last:
            schedule.step(target=y, losses=losses)  # one loss per micro-batch
        else:
            # middle stages (with more ranks) pass activations on
            schedule.step()
        optimizer.step()
        # --8<-- [end:step]

        # --8<-- [start:check]
        # one process, the whole batch at once
        reference_loss = loss_fn(reference(x), y)
        reference_loss.backward()
        torch.optim.SGD(reference.parameters(), lr=0.1).step()
        mine = stage_layers(reference, rank, stages)
        for p, ref in zip(part.parameters(), mine.parameters()):
            torch.testing.assert_close(p, ref)  # the same update
        if stage.is_last:
            # equal micro-batches: the mean of the means
            loss = torch.stack(losses).mean()
            torch.testing.assert_close(loss, reference_loss)
            print(
                f"{stages} stages, {len(losses)} micro-batches: loss "
                f"{loss.item():.6f} "
                f"== one process {reference_loss.item():.6f}; updated "
                "weights equal"
            )
        # --8<-- [end:check]
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
