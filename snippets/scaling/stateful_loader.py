"""A packing data loader whose state (epoch, position, RNG) each rank saves
and a restarted job loads: the same next batches on every rank. On another
number of ranks that state no longer applies; a global position over a
fixed dataset does."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/stateful_loader.py

import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
from torch.utils.data import (
    DistributedSampler,
    IterableDataset,
    get_worker_info,
)
from torchdata.stateful_dataloader import StatefulDataLoader

ROW, ROWS_PER_BATCH, WORKERS = 64, 4, 2


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


def documents(count: int = 400) -> list[torch.Tensor]:
    """Token sequences of 3 to 39 tokens, the same on every rank (seeded)."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 40, (count,), generator=g).tolist()
    return [torch.randint(1000, (n,), generator=g) for n in lengths]


# --8<-- [start:dataset]
class PackedDocuments(IterableDataset):
    """Rows of ROW tokens packed from whole documents: this rank's share of
    the documents, split again between the loader's workers, shuffled each
    epoch. Yields each row's tokens and document numbers (-1: padding)."""

    def __init__(self, docs, rank: int, world: int, seed: int = 0):
        self.docs, self.rank, self.world, self.seed = docs, rank, world, seed
        # the state: everything the next row depends on
        self.epoch, self.cursor, self.rng = 0, 0, None

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor, "rng": self.rng}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.cursor, self.rng = (
            state["epoch"], state["cursor"], state["rng"]
        )  # fmt: skip

    def shard(self, generator: torch.Generator) -> list[int]:
        """This worker's documents, in this epoch's order."""
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        if self.rng is None:  # a fresh start: a seed per rank and worker
            generator.manual_seed(self.seed + 1000 * self.rank + worker)
            self.rng = generator.get_state()
        mine = range(len(self.docs))[self.rank :: self.world][worker::workers]
        generator.set_state(self.rng)  # the state at this epoch's start
        return [mine[i] for i in torch.randperm(len(mine), generator=generator)]

    def __iter__(self):
        generator = torch.Generator()
        while True:
            order, row = self.shard(generator), []
            while self.cursor < len(order):
                number = order[self.cursor]
                if (
                    sum(len(self.docs[n]) for n in row) + len(self.docs[number])
                    > ROW
                ):
                    yield self.row(row)  # the document starts the next row
                    row = []
                    continue
                row.append(number)
                self.cursor += 1  # counted: in a row that will be yielded
            if row:
                yield self.row(row)
            self.epoch, self.cursor = self.epoch + 1, 0
            self.rng = generator.get_state()  # draws the next epoch's order

    def row(self, numbers: list[int]) -> dict[str, torch.Tensor]:
        tokens = torch.full((ROW,), 0)
        doc = torch.full((ROW,), -1)
        start = 0
        for n in numbers:
            length = len(self.docs[n])
            tokens[start : start + length] = self.docs[n]
            doc[start : start + length] = n
            start += length
        return {"tokens": tokens, "doc": doc}


# --8<-- [end:dataset]


# --8<-- [start:loader]
def make_loader(docs, rank: int, world: int) -> StatefulDataLoader:
    # a DataLoader whose state_dict() holds each worker's dataset state
    # as of the last batch the training loop received
    return StatefulDataLoader(
        PackedDocuments(docs, rank, world),
        batch_size=ROWS_PER_BATCH,
        num_workers=WORKERS,
    )


# --8<-- [end:loader]


def docs_in(batch: dict) -> set[int]:
    return set(batch["doc"].unique().tolist()) - {-1}


def train_and_restart(docs, path: Path, steps: int) -> set[int]:
    """Stop after `steps` batches, save, restart from the file: the next
    batches are those the run would have had. Returns what was trained on."""
    rank, world = dist.get_rank(), dist.get_world_size()
    # --8<-- [start:save]
    loader = make_loader(docs, rank, world)
    batches = iter(loader)
    trained = []
    for _ in range(steps):
        batch = next(batches)  # a training step would use it here
        trained += docs_in(batch)
    # each rank its own file: its state is its own
    torch.save(loader.state_dict(), path / f"data-rank{rank}.pt")
    # --8<-- [end:save]
    expected = [next(batches) for _ in range(2)]  # had the job gone on

    # --8<-- [start:resume]
    # a restarted job: a new loader, the state this rank saved
    resumed = make_loader(docs, rank, world)
    state = torch.load(path / f"data-rank{rank}.pt", weights_only=True)
    resumed.load_state_dict(state)
    batches = iter(resumed)
    got = [next(batches) for _ in range(2)]
    # --8<-- [end:resume]
    for want, have in zip(expected, got):
        for key in want:
            assert torch.equal(want[key], have[key]), f"rank {rank}: {key}"
    # a document seen twice on this rank: a new epoch, a new order
    epochs = "a new epoch" if len(set(trained)) < len(trained) else "epoch 0"
    dist.barrier()
    if rank == 0:
        print(
            f"stopped after {steps} batches ({epochs}), restarted from each "
            "rank's saved state: the next 2 batches equal, on every rank"
        )
    return set(trained)


def resume_on_one_rank(docs, path: Path, trained: set[int]) -> None:
    """Rank 0's state, loaded by a job of one rank: it no longer applies."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, trained)
    if dist.get_rank() != 0:
        return
    alone = make_loader(docs, rank=0, world=1)
    alone.load_state_dict(torch.load(path / "data-rank0.pt", weights_only=True))
    batch = next(iter(alone))
    repeated = docs_in(batch) & everyone[1]
    # the cursor counts documents of rank 0's old share: on one rank the
    # shares are others, so the same state points at other documents
    assert repeated, "rank 1's documents come again"
    print(
        f"rank 0's state loaded on 1 rank: its first batch holds "
        f"{len(repeated)} documents rank 1 had already trained on"
    )


def fixed_dataset(steps: int) -> None:
    """An index sampler over a fixed dataset: after `steps` steps on 2 ranks
    the samples used are the first steps × global batch of one order, so 1
    rank can go on from there with the same global batches."""
    # --8<-- [start:fixed]
    size, per_rank = 64, 4
    two = [
        list(DistributedSampler(range(size), num_replicas=2, rank=r, seed=0))
        for r in range(2)
    ]
    one = list(DistributedSampler(range(size), num_replicas=1, rank=0, seed=0))
    global_batch = 2 * per_rank
    done = steps * global_batch  # the global position after `steps` steps
    used = {i for r in two for i in r[: steps * per_rank]}
    assert used == set(one[:done]), "a prefix of the one order"
    next_two = {i for r in two for i in r[steps * per_rank :][:per_rank]}
    assert next_two == set(one[done : done + global_batch])
    # --8<-- [end:fixed]
    if dist.get_rank() == 0:
        print(
            f"fixed dataset, DistributedSampler: after {steps} steps on 2 "
            f"ranks, 1 rank skipping {done} samples gets the same next "
            "global batch"
        )


def main() -> None:
    setup()
    docs = documents()
    path = Path(tempfile.gettempdir()) / (
        f"data-state-{os.environ['TORCHELASTIC_RUN_ID']}"
    )
    if dist.get_rank() == 0:
        path.mkdir()
    dist.barrier()
    try:
        if dist.get_rank() == 0:
            print(
                f"{dist.get_world_size()} ranks × {WORKERS} loader workers, "
                f"batches of {ROWS_PER_BATCH} packed rows of {ROW} tokens"
            )
        train_and_restart(docs, path, steps=30)  # into the second epoch
        trained = train_and_restart(docs, path, steps=7)
        resume_on_one_rank(docs, path, trained)
        fixed_dataset(steps=3)
    finally:
        dist.barrier()
        if dist.get_rank() == 0:
            shutil.rmtree(path, ignore_errors=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
