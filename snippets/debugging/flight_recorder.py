"""The flight recorder on CPU: every rank dumps its record, and
comparing them by sequence number names the rank that skipped."""
# launch: torchrun --standalone --nproc-per-node=3 snippets/debugging/flight_recorder.py

# --8<-- [start:env]
import os

# entries kept per rank; torch 2.10 keeps none by default
os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
# --8<-- [end:env]

import datetime
import pickle
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist

SKIPPING_RANK = 1  # its data runs out one step early


# --8<-- [start:train]
def train(steps: int) -> None:
    for _ in range(steps):
        grads = torch.ones(8)
        dist.all_reduce(grads)  # the gradient all-reduce of one step


# --8<-- [end:train]


# --8<-- [start:dump]
def dump_record(folder: Path) -> None:
    """Write this rank's flight record where the
    analysis will find it: one pickle file per rank."""
    # private API: pickled bytes, as a watchdog dump
    record = torch._C._distributed_c10d._dump_fr_trace()
    (folder / f"rank_{dist.get_rank()}").write_bytes(record)


# --8<-- [end:dump]


# --8<-- [start:compare]
def collectives(path: Path, group: str) -> dict[int, tuple[str, str]]:
    """What one rank issued on one process group,
    by sequence number: (op, input sizes)."""
    # our own files only: pickle runs code from what it loads
    record = pickle.loads(path.read_bytes())
    return {
        e["collective_seq_id"]: (e["profiling_name"], str(e["input_sizes"]))
        for e in record["entries"]
        if e["process_group"][0] == group
    }


def first_divergence(
    records: dict[int, dict[int, tuple[str, str]]],
) -> tuple[int, tuple[str, str], list[int]]:
    """The first sequence number at which a rank issued
    something else than most ranks (or nothing)."""
    last = max(max(seqs, default=0) for seqs in records.values())
    for seq in range(1, last + 1):
        issued = {rank: ops.get(seq) for rank, ops in records.items()}
        majority, _ = Counter(issued.values()).most_common(1)[0]
        odd = sorted(rank for rank, op in issued.items() if op != majority)
        if odd:
            return seq, majority, odd
    raise ValueError("every rank issued the same collectives")


# --8<-- [end:compare]


# --8<-- [start:main]
def main() -> None:
    # a hang becomes an error in 3 s
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
    )
    # same on every rank
    folder = (
        Path(tempfile.gettempdir()) / f"fr-{os.environ['TORCHELASTIC_RUN_ID']}"
    )
    folder.mkdir(exist_ok=True)

    try:
        train(steps=3 if rank == SKIPPING_RANK else 4)
    except RuntimeError as err:
        # the others wait in step 4's all-reduce until the timeout
        assert "Timed out" in str(err), err
    dump_record(folder)
    store.set(f"dumped-{rank}", "1")

    if rank == 0:  # the analysis: run anywhere, once every rank's file is there
        store.wait(
            [f"dumped-{r}" for r in range(world)],
            datetime.timedelta(seconds=30),
        )
        records = {
            r: collectives(folder / f"rank_{r}", group="0")
            for r in range(world)
        }
        for r, ops in records.items():
            print(
                f"rank {r}: {len(ops)} collectives on the default group, "
                f"last #{max(ops)} {ops[max(ops)][0]}"
            )
        seq, (op, sizes), odd = first_divergence(records)
        print(
            f"collective #{seq} ({op}, input sizes {sizes}): issued by "
            f"{world - len(odd)} of {world} ranks"
        )
        print(
            f"not by rank {', '.join(map(str, odd))}: it never reached "
            f"collective #{seq}"
        )
        assert (
            odd == [SKIPPING_RANK] and records[SKIPPING_RANK].get(seq) is None
        )
        shutil.rmtree(folder)
        store.set("analysed", "1")
    else:
        store.wait(["analysed"], datetime.timedelta(seconds=60))
    # After a timeout the group is unusable (no
    # destroy, no retry): exit, as a failed job would.
    os._exit(0)


if __name__ == "__main__":
    main()
# --8<-- [end:main]
