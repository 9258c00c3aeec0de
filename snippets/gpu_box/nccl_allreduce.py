"""NCCL all-reduce across GPUs: every sum checked,
busbw set against NVLink and PCIe link rates."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/gpu_box/nccl_allreduce.py
# requires: gpus=2

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


# same as snippets/gpu_box/allreduce_bw.py:measure
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


# same as snippets/gpu_box/allreduce_bw.py:sweep
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


# --8<-- [start:links]
LINK_GBPS = {  # per direction; busbw is comparable with these
    "NVLink4 (H100/H200: 900 GB/s both directions)": 450,
    "PCIe Gen5 x16": 63,
    # 16 GT/s x 16 lanes, 128b/130b: the same rates as snippets/benchmark
    "PCIe Gen4 x16": 31.5,
}
# below this NCCL is on a broken path (sockets,
# no P2P/SHM), not merely a slow link
MIN_BUSBW_GBPS = 2
MAX_BUSBW_GBPS = 2000  # above any NVLink generation: the timing itself is wrong
# --8<-- [end:links]


# --8<-- [start:main]
def main() -> None:
    device = setup()
    try:
        assert dist.get_backend() == "nccl", "needs one GPU per rank"
        # 1 MiB .. 1 GiB
        rows = sweep(device, [2**k for k in range(20, 31, 2)], iters=20)
        best = max(busbw for *_, busbw in rows)
        if dist.get_rank() == 0:
            print(
                "GPU 0 <-> GPU 1 peer access (P2P): "
                f"{torch.cuda.can_device_access_peer(0, 1)}"
            )
            for link, rate in LINK_GBPS.items():
                print(
                    f"peak busbw {best:.1f} GB/s = {best / rate:.0%} of "
                    f"{link} ({rate} GB/s per direction)"
                )
        assert MIN_BUSBW_GBPS < best < MAX_BUSBW_GBPS, (
            f"busbw {best:.1f} GB/s is outside the sane range"
        )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
# --8<-- [end:main]
