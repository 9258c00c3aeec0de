"""All-reduce bandwidth (algbw and busbw, as nccl-tests
defines them) with a check of every result, on any backend."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/gpu_box/allreduce_bw.py
# output-varies: ^\s+\d+(\s+\S+)(\s+\S+)(\s+\S+)$

import os
import time

import torch
import torch.distributed as dist


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


# --8<-- [start:measure]
def measure(
    nbytes: int, device: torch.device, iters: int
) -> tuple[float, float, float]:
    """All-reduce `nbytes` of fp32; check the sum, then
    return (seconds per call, algbw, busbw) in s and GB/s."""
    n, rank = dist.get_world_size(), dist.get_rank()
    x = torch.full((nbytes // 4,), float(rank), device=device)
    dist.all_reduce(x)
    expected = n * (n - 1) / 2  # every element: the sum of the ranks 0 .. n-1
    assert torch.all(x == expected), (
        f"{nbytes} B: got {x[:4].tolist()}, expected {expected}"
    )

    x.zero_()
    # warm-up: NCCL sets up channels and buffers on first use
    for _ in range(2):
        dist.all_reduce(x)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    if device.type == "cuda":  # NCCL calls return before the GPU has finished
        torch.cuda.synchronize(device)
    elapsed = torch.tensor(
        [(time.perf_counter() - start) / iters], device=device
    )
    # the slowest rank sets the pace
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)

    seconds = elapsed.item()
    algbw = nbytes / seconds / 1e9
    # what each link carries in a ring all-reduce
    busbw = algbw * 2 * (n - 1) / n
    return seconds, algbw, busbw


# --8<-- [end:measure]


# --8<-- [start:sweep]
def sweep(
    device: torch.device, sizes: list[int], iters: int
) -> list[tuple[int, float, float, float]]:
    """Measure every size; rank 0 prints a
    table like nccl-tests' all_reduce_perf."""
    rows = [(size, *measure(size, device, iters)) for size in sizes]
    if dist.get_rank() == 0:
        print(
            f"{dist.get_backend()} all-reduce, {dist.get_world_size()} "
            f"ranks on {device.type}"
        )
        print(
            f"{'size (B)':>12} {'time (us)':>11} {'algbw (GB/s)':>13} "
            f"{'busbw (GB/s)':>13}"
        )
        for size, seconds, algbw, busbw in rows:
            print(
                f"{size:>12} {seconds * 1e6:>11.1f} {algbw:>13.2f} "
                f"{busbw:>13.2f}"
            )
    return rows


# --8<-- [end:sweep]


# --8<-- [start:main]
def main() -> None:
    device = setup()
    try:
        # 64 KiB .. 4 MiB: enough to see the trend, fast on CPU
        sizes = [2**k for k in range(16, 23, 2)]
        rows = sweep(device, sizes, iters=5)
        assert all(seconds > 0 for _, seconds, _, _ in rows)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
# --8<-- [end:main]
