"""A rank that never arrives: what a collective timeout
looks like, and monitored_barrier naming the missing rank."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/debugging/stuck_rank.py
# output-varies: \[(\S+)/gloo/transport
# output-excerpt: timeout ^all_reduce:

import datetime
import os

import torch
import torch.distributed as dist

STUCK_RANK = 1


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


# --8<-- [start:timeout]
def collective_timeout(group: dist.ProcessGroup) -> str:
    """All-reduce while a peer never joins:
    gloo gives up after the group's timeout."""
    try:
        dist.all_reduce(torch.ones(4), group=group)
    except RuntimeError as err:
        return str(err)
    raise AssertionError("all_reduce returned although a rank never joined")


# --8<-- [end:timeout]


# --8<-- [start:monitored]
def missing_ranks_report(group: dist.ProcessGroup) -> str:
    """Rank 0 waits for every rank and
    reports all that did not arrive in time."""
    try:
        dist.monitored_barrier(
            group=group,
            timeout=datetime.timedelta(seconds=1),
            wait_all_ranks=True,
        )
    except RuntimeError as err:
        return str(err)
    raise AssertionError(
        "monitored_barrier passed although a rank never arrived"
    )


# --8<-- [end:monitored]


# --8<-- [start:main]
def main() -> None:
    setup()
    rank = dist.get_rank()
    # Side groups on gloo (CPU tensors): monitored_barrier
    # is gloo-only, so NCCL jobs need one as well.
    short = dist.new_group(
        backend="gloo", timeout=datetime.timedelta(seconds=2)
    )
    watch = dist.new_group(backend="gloo")
    # The launcher's store still works when a group is broken:
    # the stuck rank waits on it to end the demo fast.
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
    )

    # stands in for a rank stuck in a data loader, a deadlock, a dead GPU ...
    if rank == STUCK_RANK:
        store.wait(["demo-done"], datetime.timedelta(seconds=60))
    elif rank == 0:
        message = collective_timeout(short)
        print(f"all_reduce: {message}", flush=True)
        assert "Timed out" in message, message
        report = missing_ranks_report(watch)
        print(f"monitored_barrier: {report}", flush=True)
        assert (
            f"Ranks {STUCK_RANK} failed to pass monitoredBarrier" in report
        ), report
        store.set("demo-done", "1")
    else:
        # ranks that arrived learn only that rank 0 failed:
        # the missing ranks are named in rank 0's log
        try:
            dist.monitored_barrier(
                group=watch, timeout=datetime.timedelta(seconds=30)
            )
        except RuntimeError as err:
            assert "successfully reached monitoredBarrier" in str(err), err
    # After a timeout the groups are unusable (no destroy,
    # no retry): exit and let the launcher restart the job.
    os._exit(0)


if __name__ == "__main__":
    main()
# --8<-- [end:main]
