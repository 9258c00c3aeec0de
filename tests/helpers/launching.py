"""How the tests start the programs they check: this interpreter's torchrun, run to its end and never left behind."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from guidekit import processes

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # = torchrun, with this interpreter
TRAIN_RESUMABLE = ROOT / "snippets" / "fault" / "train_resumable.py"  # rank 0 prints "attempt A: starting at step S"
TRAIN_RESUMABLE_CHECK = TRAIN_RESUMABLE.with_name("train_resumable_check.py")  # + FAIL_AT_STEP, PREEMPT_AT_STEP


def run_to_end(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run a launcher and return what it printed; past `timeout` its ranks are stopped, not orphaned, and the test
    fails (guidekit.processes.run_to_end)."""
    done = processes.run_to_end(cmd, env, timeout)
    if done.timed_out:
        pytest.fail(f"{' '.join(cmd)}: timed out after {timeout:g} s\n{done.stdout}\n{done.stderr[-3000:]}")
    return done


def error_lines(output: str) -> str:
    """The lines naming an exception, without the C++ frames around them."""
    return "\n".join(line for line in output.splitlines() if re.search(r"Error: ", line))
