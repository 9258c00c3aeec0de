"""How the tests start the programs they check: this interpreter's torchrun, run to its end and never left behind."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # = torchrun, with this interpreter
TRAIN_RESUMABLE = ROOT / "snippets" / "fault" / "train_resumable.py"  # rank 0 prints "attempt A: starting at step S"


def run_to_end(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run a launcher and return what it printed. Past `timeout` it gets SIGTERM, which torchrun passes on to its
    ranks (they run in sessions of their own, out of reach of a kill of torchrun alone), and the test fails."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            proc.kill()
        pytest.fail(f"{' '.join(cmd)}: timed out after {timeout:g} s\n{stdout}\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def error_lines(output: str) -> str:
    """The lines naming an exception, without the C++ frames around them."""
    return "\n".join(line for line in output.splitlines() if re.search(r"Error: ", line))
