"""TORCH_DISTRIBUTED_DEBUG=DETAIL turns mismatched
collectives into an error that says what differs."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/debugging/detail_mismatch.py

# --8<-- [start:env]
import os

# read when the process group is created
os.environ.setdefault("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
# --8<-- [end:env]

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


# --8<-- [start:mismatch]
def mismatch_error(rank: int, device: torch.device, kind: str) -> str:
    """Run a collective that differs between ranks;
    DETAIL checks a fingerprint of it first."""
    tensor = torch.ones(4 + rank if kind == "shape" else 4, device=device)
    try:
        if kind == "op" and rank == 1:
            # rank 1 broadcasts while the others all-reduce
            dist.broadcast(tensor, src=0)
        else:
            dist.all_reduce(tensor)
    except RuntimeError as err:
        return str(err)
    raise AssertionError(f"{kind} mismatch went unnoticed")


# --8<-- [end:mismatch]


# --8<-- [start:main]
def main() -> None:
    device = setup()
    rank = dist.get_rank()
    try:
        shape = mismatch_error(rank, device, "shape")
        op = mismatch_error(rank, device, "op")
        if rank == 0:
            print(shape, op, sep="\n\n", flush=True)
        for message in (shape, op):
            assert (
                "Detected mismatch between collectives on ranks" in message
            ), message
        assert (
            "Tensor shapes" in shape
            and "TensorShape=[4]" in shape
            and "TensorShape=[5]" in shape
        ), shape
        assert "Op type" in op and "ALLREDUCE" in op and "BROADCAST" in op, op

        # The check ran before the collective, so the group is still usable.
        total = torch.ones(1, device=device)
        dist.all_reduce(total)
        assert total.item() == dist.get_world_size()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
# --8<-- [end:main]
