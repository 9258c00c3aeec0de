"""Profile a few DDP steps with torch.profiler: one
Chrome/Perfetto trace per rank, labels, an op table."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/practices/profile_ddp.py
# output-varies: ^(.*\d(?:us|ms) .*)$
# output-varies: time total: (\S+)
# output-varies: trace written: (\S+)

import json
import os
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule


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


def run(device: torch.device) -> None:
    rank = dist.get_rank()
    # TRACE_DIR keeps them
    out_dir = Path(
        os.environ.get("TRACE_DIR") or tempfile.mkdtemp(prefix="traces-")
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(rank)
    model = nn.Sequential(
        nn.Linear(64, 256),
        nn.ReLU(),
        nn.Linear(256, 64),
    ).to(device)
    ddp_model = DDP(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    x, y = (
        torch.randn(128, 64, device=device),
        torch.randn(128, 64, device=device),
    )

    # --8<-- [start:profile]
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    def on_trace_ready(prof) -> None:  # called at the end of each active window
        prof.export_chrome_trace(
            str(out_dir / f"trace_rank{rank}_step{prof.step_num}.json")
        )

    with profile(
        activities=activities,
        # skip 1, warm 1, record 2
        schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
        on_trace_ready=on_trace_ready,
        record_shapes=True,
    ) as prof:
        for _ in range(5):
            with record_function("## forward ##"):
                loss = nn.functional.mse_loss(ddp_model(x), y)
            # DDP's all-reduce runs inside backward
            with record_function("## backward ##"):
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            with record_function("## optimizer ##"):
                optimizer.step()
            prof.step()  # tell the schedule a step ended
    # --8<-- [end:profile]
    trace, table = check_trace(prof, out_dir, rank)
    if rank == 0:
        print(table)
        print(f"trace written: {trace}")


def check_trace(prof: profile, out_dir: Path, rank: int) -> tuple[Path, str]:
    """What the profiler recorded: the trace file with the
    labels and the all-reduce, and the op table."""
    # --8<-- [start:check]
    traces = sorted(out_dir.glob(f"trace_rank{rank}_*.json"))
    # repeat=1: one active window, one file per rank
    assert len(traces) == 1, traces
    names = {
        e.get("name") for e in json.loads(traces[0].read_text())["traceEvents"]
    }
    assert "## backward ##" in names, (
        "record_function labels appear in the trace"
    )
    assert "c10d::allreduce_" in names, (
        "DDP's gradient all-reduce, whatever the backend"
    )
    if dist.get_backend() == "gloo":
        assert "gloo:all_reduce" in names, (
            "gloo's own event, on its worker thread"
        )
    averages = prof.key_averages()  # one row per op name, over the active steps
    assert {"## forward ##", "## optimizer ##"} <= {row.key for row in averages}
    table = averages.table(sort_by="cpu_time_total", row_limit=8)
    # --8<-- [end:check]
    return traces[0], table


def main() -> None:
    device = setup()
    try:
        # every DDP model lives and dies in here, before the group goes
        run(device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
