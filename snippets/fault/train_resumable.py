"""Resumable DDP training: atomic snapshots every few
steps, resume after torchrun restarts the workers or after
Slurm requeues a job that its warning signal stopped."""
# launch: torchrun --standalone --nproc-per-node=2 --max-restarts=1 snippets/fault/train_resumable.py

import argparse
import itertools
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS = 3
SAVE_EVERY = 5  # steps; 8 steps per epoch, so most snapshots fall mid-epoch


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


# --8<-- [start:atomic]
def save_atomic(obj: object, path: Path) -> None:
    """torch.save to a temp file in the same
    directory, then rename it over `path` in one step."""
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=path.name + ".", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            # the bytes are on disk before the name points at them
            os.fsync(f.fileno())
        # atomic: readers see the old file or the new one, never half of one
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# --8<-- [end:atomic]


# --8<-- [start:snapshot]
def save_snapshot(
    path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int
) -> None:
    if dist.get_rank() == 0:  # DDP replicas are identical: one copy is enough
        save_atomic(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "step": step,
            },
            path,
        )


def load_snapshot(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> int:
    """Restore model and optimizer in place; return
    the number of steps already done (0 if none)."""
    if not path.exists():
        return 0
    snapshot = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(snapshot["model"])
    optimizer.load_state_dict(snapshot["optimizer"])
    return snapshot["step"]


# --8<-- [end:snapshot]


# --8<-- [start:preemption]
# set by Slurm's warning signal (#SBATCH
# --signal=USR1@...), passed on by torchrun
warned = False


def on_warning(signum: int, frame: object) -> None:
    global warned
    # a plain flag, no lock: a second signal
    # can run this handler inside the first
    warned = True


def stop_agreed(device: torch.device) -> bool:
    """True on every rank if any rank was warned: all ranks
    stop after the same step (one scalar all-reduce)."""
    flag = torch.tensor([float(warned)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag.item() > 0


def slurm_command(*cmd: str) -> None:
    """Run a Slurm command from inside the job. It is part of the job step,
    so the signal or the requeue it asks for may end it before it exits (a
    negative return code); a positive code is the command's own error."""
    done = subprocess.run(cmd)
    if done.returncode > 0:
        raise subprocess.CalledProcessError(done.returncode, cmd)


def requeue() -> None:
    """Rank 0 puts the Slurm job back in the
    queue: same job id, so the same snapshot path."""
    job = os.environ.get("SLURM_JOB_ID")
    if dist.get_rank() == 0 and job:
        slurm_command("scontrol", "requeue", job)  # ends this run of the job


# --8<-- [end:preemption]


# --8<-- [start:train]
def make_training(
    device: torch.device,
) -> tuple[DataLoader, DistributedSampler, nn.Module, torch.optim.Optimizer]:
    """Same data and initial weights on every rank, in every attempt."""
    torch.manual_seed(0)
    x = torch.randn(256, 10)
    dataset = TensorDataset(x, x[:, :5].sin())
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=16, sampler=sampler)
    model = nn.Sequential(
        nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 5)
    ).to(device)
    # momentum: state to restore
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return loader, sampler, model, optimizer


def attempt_number() -> int:
    """Starts before this one: torchrun's restarts plus Slurm's requeues."""
    restarts, requeues = (
        int(os.environ.get(v, 0))
        for v in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")
    )
    return restarts + requeues


def train(
    device: torch.device,
    snapshot: Path,
    before_step: Callable[[int], None] = lambda step: None,
) -> tuple[nn.Module, list[float]] | None:
    """Train to the end (the model and each step's
    loss), or stop at a snapshot when warned (None)."""
    loader, sampler, model, optimizer = make_training(device)
    # before DDP wraps the model
    done = load_snapshot(snapshot, model, optimizer, device)
    attempt = attempt_number()
    if dist.get_rank() == 0:
        print(f"attempt {attempt}: starting at step {done}")
    ddp_model = DDP(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )

    steps_per_epoch, losses = len(loader), []
    for epoch in range(done // steps_per_epoch, EPOCHS):
        # same order as the first attempt had in this epoch
        sampler.set_epoch(epoch)
        skip = (
            done - epoch * steps_per_epoch
            if epoch == done // steps_per_epoch
            else 0
        )
        for i, (inputs, targets) in enumerate(
            itertools.islice(loader, skip, None), start=skip
        ):
            step = epoch * steps_per_epoch + i  # global step about to run
            # a no-op unless given; train_resumable_check.py
            # injects its faults here
            before_step(step)
            # dropout masks depend on (step, rank) only
            torch.manual_seed(1000 * step + dist.get_rank())
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(ddp_model(inputs), targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            # warned: snapshot now, not at the next SAVE_EVERY step
            stop = stop_agreed(device)
            if (step + 1) % SAVE_EVERY == 0 or stop:
                save_snapshot(snapshot, model, optimizer, step + 1)
            if stop:
                if dist.get_rank() == 0:
                    print(
                        f"attempt {attempt}: warned, stopping at step "
                        f"{step + 1}",
                        flush=True,
                    )
                return None
    if dist.get_rank() == 0:
        print(
            f"attempt {attempt}: finished step {step}, loss "
            f"{losses[0]:.4f} -> {losses[-1]:.4f}"
        )
    return model, losses


# --8<-- [end:train]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    # same for every restart of one torchrun job
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "local")
    parser.add_argument(
        "--snapshot",
        type=Path,
        default=Path(tempfile.gettempdir()) / f"snapshot-{run_id}.pt",
    )
    parser.add_argument(
        "--final", type=Path, help="write the trained weights here"
    )
    return parser.parse_args()


def run(
    device: torch.device,
    args: argparse.Namespace,
    before_step: Callable[[int], None] = lambda step: None,
) -> nn.Module | None:
    """Train to the end and return the model, or
    stop when warned and requeue the job (None)."""
    trained = train(device, args.snapshot, before_step)
    if trained is None:  # stopped by the warning: resume in a requeued job
        requeue()
        return None
    model, losses = trained
    assert losses[-1] < losses[0], "loss did not fall"
    if dist.get_rank() == 0 and args.final:
        save_atomic(model.state_dict(), args.final)
    return model


def main() -> None:
    args = parse_args()
    # before the process group: the warning may come at any time
    signal.signal(signal.SIGUSR1, on_warning)
    device = setup()
    try:
        run(device, args)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
