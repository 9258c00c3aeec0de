"""DDP communication hooks: fp16 compression and PowerSGD
against exact all-reduce, their error and their bytes."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/scaling/comm_hooks.py

import os

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default
from torch.distributed.algorithms.ddp_comm_hooks import (
    powerSGD_hook as powerSGD,
)
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS, EARLY = 40, 10


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


def make_model(device: torch.device) -> nn.Module:
    torch.manual_seed(0)  # the same initial weights for every variant
    return nn.Sequential(
        nn.Linear(128, 256),
        nn.ReLU(),
        nn.Linear(256, 256),
        nn.ReLU(),
        nn.Linear(256, 16),
    ).to(device)


# --8<-- [start:register]
def wrap(device: torch.device, hook, state=None) -> DDP:
    ids = [device.index] if device.type == "cuda" else None
    model = DDP(make_model(device), device_ids=ids)
    model.register_comm_hook(state, hook)  # once, before the first backward
    return model


def powersgd_state(
    rank: int, error_feedback: bool = True
) -> powerSGD.PowerSGDState:
    return powerSGD.PowerSGDState(
        process_group=None,  # the default group
        # P: n x rank, Q: m x rank for each n x m gradient
        matrix_approximation_rank=rank,
        # plain all-reduce for the first 2 steps
        # (DDP rebuilds its buckets after step 1)
        start_powerSGD_iter=2,
        # add what compression dropped to the next step's gradient
        use_error_feedback=error_feedback,
        # start each step's power iteration from the last step's Q
        warm_start=True,
    )


# --8<-- [end:register]


# --8<-- [start:measure]
def measured(hook, records: list):
    """The same hook, plus what exact averaging would have
    given, for comparison: costs an extra all_gather."""

    def measured_hook(
        state, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        # this rank's gradient, before the hook changes it in place
        local = bucket.buffer().clone()
        everyone = [
            torch.empty_like(local) for _ in range(dist.get_world_size())
        ]
        dist.all_gather(everyone, local)
        future = hook(state, bucket)
        # what DDP will write into .grad (no overlap: measuring only)
        averaged = future.wait()
        records.append(
            (bucket.index(), torch.stack(everyone), averaged.clone())
        )
        return future

    return measured_hook


# --8<-- [end:measure]


def train(
    model: DDP, records: list, device: torch.device, steps: int = STEPS
) -> list[tuple[torch.Tensor, ...]]:
    """SGD steps on this rank's batches; per step: every
    rank's gradient and the averaged one DDP applied."""
    # every variant sees the same batches; each rank its own
    torch.manual_seed(1 + dist.get_rank())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    per_step = []
    for _ in range(steps):
        # the CPU generator: the same batches whatever the device
        x = torch.randn(16, 128).to(device)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), x[:, :16].sin()).backward()
        optimizer.step()
        # bucket order, whatever order they completed in
        records.sort(key=lambda record: record[0])
        per_step.append(
            tuple(torch.cat(parts, dim=-1) for parts in list(zip(*records))[1:])
        )
        records.clear()
    return per_step


# --8<-- [start:bytes]
def payload_bytes(model: nn.Module, element_bytes: int = 4) -> int:
    """What one rank hands to all-reduce per step (a ring
    all-reduce moves about twice that over the links)."""
    return element_bytes * sum(p.numel() for p in model.parameters())


def powersgd_payload_bytes(model: nn.Module, rank: int) -> int:
    """PowerSGD: each n x m matrix becomes P (n x rank) and
    Q (m x rank), if that is < half of it; the rest goes
    as it is, in fp32."""
    elements = 0
    for p in model.parameters():
        n, m = p.shape[0], p[0].numel()
        r = min(n, m, rank)
        elements += (
            r * (n + m)
            if p.dim() > 1 and 2 * r * (n + m) < n * m
            else p.numel()
        )
    return 4 * elements


# --8<-- [end:bytes]


def relative(error: torch.Tensor, reference: torch.Tensor) -> float:
    return (error.norm() / reference.norm()).item()


# --8<-- [start:rounding_bound]
def check_rounding(steps: list, dtype: torch.dtype) -> float:
    """Each averaged element within the rounding bound of the
    exact mean; returns the share below dtype's normal range."""
    # unit roundoff: 2**-11 for fp16, 2**-8 for bf16
    u = torch.finfo(dtype).eps / 2
    # below the normal range the steps are absolute, not relative
    tiny = torch.finfo(dtype).smallest_normal * u
    below, total = 0, 0
    # N casts, N divisions by N, N-1 additions: each within u*|value| + tiny
    for everyone, applied in steps:
        exact = everyone.mean(dim=0)
        bound = (
            2 * u * everyone.abs().sum(dim=0) * (1 + u)
            + 3 * len(everyone) * tiny
        )
        assert ((applied - exact).abs() <= bound).all()
        below += (
            ((exact != 0) & (exact.abs() < torch.finfo(dtype).smallest_normal))
            .sum()
            .item()
        )
        total += exact.numel()
    return below / total


# --8<-- [end:rounding_bound]


# --8<-- [start:error_memory]
def check_error_memory(steps: list, state: powerSGD.PowerSGDState) -> None:
    """With error feedback, the updates applied add up to
    the exact ones minus what the ranks still hold back."""
    applied_sum = sum(applied for _, applied in steps)
    exact_sum = sum(everyone.mean(dim=0) for everyone, _ in steps)
    # the state's memory, per bucket
    held = torch.cat([state.error_dict[i] for i in sorted(state.error_dict)])
    dist.all_reduce(held)
    held /= dist.get_world_size()
    assert relative(applied_sum - (exact_sum - held), exact_sum) < 1e-5


# --8<-- [end:error_memory]


def step_errors(steps: list) -> list[float]:
    """Each step's |applied - exact| / |exact|."""
    return [
        relative(applied - everyone.mean(dim=0), everyone.mean(dim=0))
        for everyone, applied in steps
    ]


def summed_error(steps: list) -> float:
    """How far the sum of the updates applied
    is from the sum of the exact ones."""
    exact = sum(everyone.mean(dim=0) for everyone, _ in steps)
    return relative(sum(applied for _, applied in steps) - exact, exact)


def compare(device: torch.device, hook, state=None) -> list:
    """Train with `hook`, measured: per step, every rank's
    gradient and the averaged one DDP applied."""
    records = []
    model = wrap(device, measured(hook, records), state)
    steps = train(model, records, device)
    # each DDP model goes long before
    # destroy_process_group(): see the debugging page
    del model
    return steps


def check_powersgd(
    steps: list, state: powerSGD.PowerSGDState, full: int, nbytes: int
) -> None:
    # start_powerSGD_iter=2: the first two steps are plain all-reduce
    assert max(step_errors(steps)[:2]) == 0, "compressed before step 2"
    # elements PowerSGD counted, from step 2 on
    _, before, after = state.compression_stats()
    assert (4 * before, 4 * after) == (
        full * (STEPS - 2),
        nbytes * (STEPS - 2),
    ), (before, after)
    if state.use_error_feedback:
        check_error_memory(steps, state)


def report(name: str, steps: list, nbytes: int, full: int) -> tuple:
    """One row of the table (rank 0 prints it); returns
    the summed errors after EARLY steps and at the end."""
    summed = summed_error(steps[:EARLY]), summed_error(steps)
    if dist.get_rank() == 0:
        # from the first compressed step on
        errors = step_errors(steps)[2:]
        print(
            f"{name:<35} {nbytes:>10,} {full / nbytes:>5.1f}x "
            f"{sum(errors) / len(errors):>10.1e}  "
            f"{summed[0]:.1e}, {summed[1]:.1e}"
        )
    return summed


def run(device: torch.device) -> None:
    model = make_model(device)
    full = payload_bytes(model)
    if dist.get_rank() == 0:
        print(
            f"{'hook':<35} {'bytes/step':>10} {'ratio':>6} "
            f"{'error/step':>10}  summed after {EARLY}, {STEPS} steps"
        )
    steps = compare(device, default.allreduce_hook)
    assert max(step_errors(steps)) == 0, "the measuring adds an error"
    report("exact all-reduce", steps, full, full)

    steps = compare(device, default.fp16_compress_hook)
    below = check_rounding(steps, torch.float16)
    report("fp16", steps, payload_bytes(model, 2), full)

    summed = {}
    for rank, feedback in ((1, True), (4, True), (1, False)):
        state = powersgd_state(rank, feedback)
        steps = compare(device, powerSGD.powerSGD_hook, state)
        nbytes = powersgd_payload_bytes(model, rank)
        check_powersgd(steps, state, full, nbytes)
        name = f"PowerSGD rank {rank}" + (
            "" if feedback else ", no error feedback"
        )
        summed[rank, feedback] = report(name, steps, nbytes, full)
    # --8<-- [start:error_feedback]
    with_feedback, without = summed[1, True], summed[1, False]
    # the sum of the updates closes in on the exact sum
    assert with_feedback[1] < with_feedback[0], with_feedback
    # without it, what is dropped stays dropped
    assert without[1] >= without[0] > with_feedback[1], without
    # --8<-- [end:error_feedback]
    if dist.get_rank() == 0:
        print(
            f"fp16: {below:.0%} of the averaged gradient's elements were "
            "below fp16's normal range (6.1e-05)"
        )


def start_too_early() -> str:
    try:
        powerSGD.PowerSGDState(process_group=None, start_powerSGD_iter=1)
    except ValueError as error:
        return str(error)
    raise AssertionError("expected a ValueError")


def main() -> None:
    device = setup()
    try:
        run(device)
        message = start_too_early()
        if dist.get_rank() == 0:
            print(message)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
