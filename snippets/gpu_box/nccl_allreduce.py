"""NCCL all-reduce across GPUs: every sum checked,
busbw set against NVLink and PCIe link rates."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/gpu_box/nccl_allreduce.py
# requires: gpus=2
# output-varies: ^\s+\d+(\s+\S+)(\s+\S+)(\s+\S+)$
# output-varies: peak busbw (\S+) GB/s = (\S+) of

import torch
import torch.distributed as dist

# the measurement of allreduce_bw.py, beside this file
from allreduce_bw import setup, sweep

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
