"""Interleaved 1F1B: 2 ranks x 2 virtual stages each give one process's loss and update."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/parallelism/pipeline_interleaved.py
# timeout: 240

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from _mesh import setup_mesh
from pipeline import make_model, stage_layers  # the same model and split as the GPipe program (same folder)
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B


def main() -> None:
    mesh, device = setup_mesh()
    rank, ranks = dist.get_rank(), mesh.size()
    try:
        reference = make_model().to(device)
        torch.manual_seed(1)
        x = torch.randn(16, 32, device=device)
        y = x[:, :8].cos()
        loss_fn = nn.MSELoss()

        # --8<-- [start:stages]
        per_rank = 2  # virtual stages per rank
        total = per_rank * ranks  # 4 stages for 2 ranks
        indices = [rank + k * ranks for k in range(per_rank)]  # rank 0: 0, 2; rank 1: 1, 3
        parts = [stage_layers(copy.deepcopy(reference), i, total) for i in indices]
        stages = [
            PipelineStage(part, stage_index=i, num_stages=total, device=device) for part, i in zip(parts, indices)
        ]
        # a list of stages, not one stage: that is what changes from GPipe or 1F1B
        schedule = ScheduleInterleaved1F1B(stages, n_microbatches=4, loss_fn=loss_fn)
        # --8<-- [end:stages]

        # --8<-- [start:step]
        params = [p for part in parts for p in part.parameters()]
        optimizer = torch.optim.SGD(params, lr=0.1)
        losses = []
        if any(s.is_first for s in stages):
            schedule.step(x)  # rank 0 holds stage 0
        elif any(s.is_last for s in stages):
            schedule.step(target=y, losses=losses)  # rank 1 holds stage 3, the last
        optimizer.step()
        # --8<-- [end:step]

        # --8<-- [start:check]
        reference_loss = loss_fn(reference(x), y)  # one process, the whole batch at once
        reference_loss.backward()
        torch.optim.SGD(reference.parameters(), lr=0.1).step()
        for part, i in zip(parts, indices):
            for p, ref in zip(part.parameters(), stage_layers(reference, i, total).parameters()):
                torch.testing.assert_close(p, ref)  # the same update, stage by stage
        if losses:
            loss = torch.stack(losses).mean()  # equal micro-batches: the mean of the means
            torch.testing.assert_close(loss, reference_loss)
            print(
                f"{ranks} ranks x {per_rank} stages, {len(losses)} micro-batches: loss "
                f"{loss.item():.6f} == one process {reference_loss.item():.6f}; updated weights equal"
            )
        # --8<-- [end:check]
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
