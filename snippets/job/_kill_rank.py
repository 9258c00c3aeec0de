"""train.py with rank 1 killed (SIGKILL) before step KILL_AT, once
the newest checkpoint before that step is on disk. train_check.py
starts it with torchrun, with the flags of the run it kills."""

import os
import signal
import time

import torch.distributed as dist
import train  # the template beside this file

KILL_AT = int(os.environ["KILL_AT"])
train_step = train.train_step


def train_step_or_die(model, optimizer, scheduler, batches, cfg):
    step = scheduler.last_epoch + 1  # the step about to run
    if step == KILL_AT and dist.get_rank() == 1:
        saved = (step - 1) // cfg.ckpt_every * cfg.ckpt_every
        done = cfg.out / "checkpoints" / f"step-{saved:06d}" / ".metadata"
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the async save of step `saved` ends
        os.kill(os.getpid(), signal.SIGKILL)
    return train_step(model, optimizer, scheduler, batches, cfg)


train.train_step = train_step_or_die
train.main()
