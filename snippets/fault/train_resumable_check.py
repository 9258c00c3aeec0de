"""The proof beside train_resumable.py: the same training with a crash
or a Slurm warning injected on demand, and the replicas checked at the
end. FAIL_AT_STEP=N kills rank 1 before step N; PREEMPT_AT_STEP=N has
Slurm send the job its warning signal before step N, as it does before
the time limit. Both act in the first attempt only."""
# launch: torchrun --standalone --nproc-per-node=2 --max-restarts=1 snippets/fault/train_resumable_check.py

import os
import signal
import time

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
import train_resumable  # the template beside this file


# --8<-- [start:faults]
def fault_if_asked(step: int) -> None:
    """Called before every step: a crash or a preemption,
    in the first attempt only, and only when asked."""
    restarts, requeues = (
        int(os.environ.get(v, 0))
        for v in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")
    )
    if restarts + requeues > 0:
        return
    if step == int(os.environ.get("FAIL_AT_STEP", -1)) and dist.get_rank() == 1:
        os._exit(1)  # a hard crash: no cleanup, no exception handler
    if (
        step == int(os.environ.get("PREEMPT_AT_STEP", -1))
        and dist.get_rank() == 0
    ):
        train_resumable.slurm_command(
            "scancel", "--signal=USR1", os.environ["SLURM_JOB_ID"]
        )
        deadline = time.monotonic() + 60
        # the signal comes back to this rank
        while not train_resumable.warned and time.monotonic() < deadline:
            time.sleep(0.01)
        assert train_resumable.warned, (
            "the signal did not come back through torchrun"
        )


# --8<-- [end:faults]


# same as snippets/ddp/train_torchrun.py:assert_replicas_equal
def assert_replicas_equal(model: nn.Module) -> None:
    """Every rank must hold bit-identical parameters after training."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    replicas = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(replicas, flat)
    assert all(torch.equal(replicas[0], r) for r in replicas), (
        "replicas diverged"
    )


def main() -> None:
    args = train_resumable.parse_args()
    signal.signal(signal.SIGUSR1, train_resumable.on_warning)
    device = train_resumable.setup()
    try:
        model = train_resumable.run(device, args, before_step=fault_if_asked)
        # None: warned and stopped, nothing to compare yet
        if model is not None:
            assert_replicas_equal(model)
            if dist.get_rank() == 0:
                print(f"{dist.get_world_size()} ranks: replicas identical")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
