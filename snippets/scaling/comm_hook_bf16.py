"""DDP's bf16 compression hook against fp16's: bf16 keeps
fp32's range where fp16 underflows, at 8x coarser rounding.
Measured as comm_hooks.py measures: run it beside that file."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/comm_hook_bf16.py

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
from comm_hooks import check_rounding, measured, relative, setup, train, wrap
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default

STEPS = 10


def run(device: torch.device) -> None:
    # --8<-- [start:bf16]
    errors, below = {}, {}
    for dtype, hook in (
        (torch.float16, default.fp16_compress_hook),
        (torch.bfloat16, default.bf16_compress_hook),
    ):
        records = []
        model = wrap(device, measured(hook, records))
        steps = train(model, records, device, STEPS)
        del model
        # the same bound, with dtype's unit roundoff
        below[dtype] = check_rounding(steps, dtype)
        errors[dtype] = max(
            relative(applied - everyone.mean(dim=0), everyone.mean(dim=0))
            for everyone, applied in steps
        )
    # bf16's normal range starts at 1.2e-38
    assert below[torch.bfloat16] == 0 < below[torch.float16], below
    # 8 significant bits against 11
    assert errors[torch.bfloat16] > errors[torch.float16], errors
    # --8<-- [end:bf16]
    if dist.get_rank() == 0:
        for dtype in errors:
            print(
                f"{dtype}: error per step up to {errors[dtype]:.1e}, "
                f"{below[dtype]:.0%} of the elements below its normal "
                "range"
            )


def main() -> None:
    device = setup()
    try:
        # every DDP model lives and dies in here, before the group goes
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
