"""Why the fault-tolerance page promises a bit-identical resume at two ranks and not beyond, as it says.

DDP puts gradients into buckets in reverse parameter order for its first step and then rebuilds the buckets in
the order the gradients became ready. The all-reduce of a bucket sums each element in an order that depends on
its position, and with more than two ranks a different order can round differently (two ranks: a + b == b + a).
A resumed run's first step has the initial layout where the uninterrupted run already had the rebuilt one.

train_resumable.py's own train() runs at world 3, the smallest where the order matters, under one torchrun (resume_bits_ranks.py): uninterrupted, stopped
after step 5, and resumed from that snapshot in a new DDP wrapper, whose reducer starts as a restarted process's
does. One launch of 4 processes instead of a crash and restart per run (21): the processes are not what is tested
here, and a real restart is resumed bit for bit at world 2 by snippets/fault/restart_resume.py and across hosts
and Slurm requeues by tests/multinode.
"""

import os
from pathlib import Path

import pytest
from launching import TORCHRUN, run_to_end
from weights import load_weights

pytestmark = pytest.mark.runs  # starts programs: left out of `make check`

RANKS = Path(__file__).with_name("resume_bits_ranks.py")


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("resume_bits") / "weights.pt"
    cmd = [*TORCHRUN, "--standalone", "--nproc-per-node=3", str(RANKS), str(out)]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # three ranks on CPU, also on a box with fewer GPUs
    done = run_to_end(cmd, env, timeout=240)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert done.stdout.count("attempt 0: warned, stopping at step 5") == 2, done.stdout
    assert done.stdout.count("attempt 0: starting at step 5") == 2, done.stdout  # each variant resumed
    return load_weights(out)  # {variant: {run: weights}}


@pytest.mark.parametrize(("variant", "identical"), [("default-ddp", False), ("no-bucket-rebuild", True)])
def test_resume_at_world_3(weights, variant, identical):
    import torch  # here, not at collection (tests/helpers/weights.py)

    uninterrupted, resumed = weights[variant]["uninterrupted"], weights[variant]["resumed"]
    equal = {name: torch.equal(tensor, resumed[name]) for name, tensor in uninterrupted.items()}
    assert all(equal.values()) is identical, equal
    close = {name: torch.allclose(tensor, resumed[name], rtol=0, atol=1e-5) for name, tensor in uninterrupted.items()}
    assert all(close.values()), close  # off in the last bits only
