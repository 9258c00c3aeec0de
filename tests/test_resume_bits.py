"""Why the fault-tolerance page promises a bit-identical resume at two ranks and not beyond, as it says.

DDP puts gradients into buckets in reverse parameter order for its first step and then rebuilds the buckets in
the order the gradients became ready. The all-reduce of a bucket sums each element in an order that depends on
its position, and with more than two ranks a different order can round differently (two ranks: a + b == b + a).
A resumed run's first step has the initial layout where the uninterrupted run already had the rebuilt one.

Both runs here are train_resumable.py at world 4 under torchrun, one crashed before step 7 and restarted from
the step-5 snapshot; the program itself is unchanged (a wrapper sets DDP's option).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

TRAIN = Path(__file__).resolve().parents[1] / "snippets" / "fault" / "train_resumable.py"
# train_resumable.py with DDP's `find_unused_parameters` set: the reducer then never rebuilds its buckets
NO_REBUILD = f"""
import functools, sys
sys.path.insert(0, {str(TRAIN.parent)!r})
import train_resumable
train_resumable.DDP = functools.partial(train_resumable.DDP, find_unused_parameters=True)
sys.argv[0] = {str(TRAIN)!r}
train_resumable.main()
"""


def final_weights(tmp: Path, name: str, program: list[str], *extra: str, **env: str) -> dict[str, torch.Tensor]:
    """Train at world 4 on CPU; return the final weights."""
    final = tmp / f"{name}.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", *extra, *program]
    cmd += [f"--snapshot={tmp / (name + '-snapshot.pt')}", f"--final={final}"]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", **env}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    if extra:
        assert "attempt 1: starting at step 5" in done.stdout, done.stdout
    return torch.load(final, weights_only=True)


@pytest.mark.parametrize(
    ("program", "identical"),
    [([str(TRAIN)], False), (["--no-python", sys.executable, "-c", NO_REBUILD], True)],
    ids=["default-ddp", "no-bucket-rebuild"],
)
def test_resume_at_world_4(tmp_path, program, identical):
    uninterrupted = final_weights(tmp_path, "uninterrupted", program)
    resumed = final_weights(tmp_path, "resumed", program, "--max-restarts=1", FAIL_AT_STEP="7")
    equal = {name: torch.equal(tensor, resumed[name]) for name, tensor in uninterrupted.items()}
    assert all(equal.values()) is identical, equal
    close = {name: torch.allclose(tensor, resumed[name], rtol=0, atol=1e-5) for name, tensor in uninterrupted.items()}
    assert all(close.values()), close  # off in the last bits only
