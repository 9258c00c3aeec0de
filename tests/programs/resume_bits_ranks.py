"""What every rank of tests/programs/test_resume_bits.py runs: train_resumable.py's own `train()`, unchanged, three times in one
process group, for DDP as the program builds it and with `find_unused_parameters=True` (no bucket rebuild):

1. uninterrupted, to the end;
2. warned before step 5 (the flag the preemption handler sets), so every rank stops after it with a snapshot;
3. resumed from that snapshot, in a new DDP wrapper: its reducer starts with the initial bucket layout, as the
   reducer of a restarted process does.

Rank 0 saves the final weights of runs 1 and 3 of each variant to the file named by the first argument.
"""

import functools
import gc
import sys
from pathlib import Path

import torch
import torch.distributed as dist

TRAIN_RESUMABLE = Path(__file__).resolve().parents[2] / "snippets" / "fault" / "train_resumable.py"
sys.path.insert(0, str(TRAIN_RESUMABLE.parent))
import train_resumable  # found through the path above

STOP_AT = 5  # the snapshot the resumed run starts from


def warn_before_stop(step: int) -> None:
    if step == STOP_AT - 1:
        train_resumable.warned = True  # what on_warning does; stop_agreed ends the step on every rank


def run(device: torch.device, snapshot: Path, before_step=lambda step: None) -> dict[str, torch.Tensor] | None:
    trained = train_resumable.train(device, snapshot, before_step)
    return None if trained is None else trained[0].state_dict()


def main() -> None:
    out = Path(sys.argv[1])
    device = train_resumable.setup()
    ddp = train_resumable.DDP
    variants = {"default-ddp": ddp, "no-bucket-rebuild": functools.partial(ddp, find_unused_parameters=True)}
    weights = {}
    for name, wrapper in variants.items():
        train_resumable.DDP = wrapper
        uninterrupted = run(device, out.with_name(f"{name}-uninterrupted.pt"))
        snapshot = out.with_name(f"{name}-snapshot.pt")
        assert run(device, snapshot, warn_before_stop) is None, "the warned run did not stop"
        dist.barrier()  # rank 0 wrote the snapshot before any rank looks for it (a new job would start later)
        train_resumable.warned = False
        weights[name] = {"uninterrupted": uninterrupted, "resumed": run(device, snapshot)}
    if dist.get_rank() == 0:
        torch.save(weights, out)
    gc.collect()  # the DDP wrappers hold the group: gone before destroy_process_group (the debugging page's exit abort)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
