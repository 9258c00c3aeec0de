"""Kill rank 1 mid-run: torchrun restarts both workers,
they resume from the snapshot and end bit-identical."""
# launch: python snippets/fault/restart_resume.py
# ranks: 2
# timeout: 300

import os
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch
from train_resumable import save_atomic  # same folder: on sys.path

TEMPLATE = Path(__file__).with_name("train_resumable.py")
# the template's training, with faults on demand
PROOF = Path(__file__).with_name("train_resumable_check.py")


# --8<-- [start:torchrun]
def torchrun(*args: str, **env: str) -> str:
    """Run a program under torchrun with 2 CPU workers;
    return its output, fail on a non-zero exit."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        *args,
    ]
    env = {
        **os.environ,
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",  # (1)!
        **env,
    }
    done = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, (
        f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stderr[-3000:]}"
    )
    return done.stdout


# --8<-- [end:torchrun]


# --8<-- [start:test]
def check_restart_is_bit_identical(tmp: Path) -> None:
    def job(name: str, program: Path, *args: str, **env: str) -> Future:
        snapshot, final = tmp / f"{name}.pt", tmp / f"{name}-final.pt"
        return pool.submit(
            torchrun,
            *args,
            str(program),
            f"--snapshot={snapshot}",
            f"--final={final}",
            **env,
        )

    # both jobs at once, each torchrun on its own free port
    with ThreadPoolExecutor() as pool:
        uninterrupted = job("a", TEMPLATE)
        # rank 1 dies before step 13 in attempt 0
        faulted = job("b", PROOF, "--max-restarts=1", FAIL_AT_STEP="13")
        uninterrupted.result()
        out = faulted.result()
    print(out, end="")
    assert "attempt 1: starting at step 10" in out, (
        "the job did not restart from the step-10 snapshot"
    )
    reference = torch.load(tmp / "a-final.pt", weights_only=True)
    resumed = torch.load(tmp / "b-final.pt", weights_only=True)
    assert reference.keys() == resumed.keys()
    for name, tensor in reference.items():
        assert torch.equal(tensor, resumed[name]), (
            f"{name} differs after the restart"
        )
    print(
        "resumed run == uninterrupted run, bit for bit "
        f"({len(reference)} tensors)"
    )


# --8<-- [end:test]


# --8<-- [start:crash_mid_write]
class CrashWhilePickled:
    """Stands in for a process that dies halfway through torch.save."""

    def __reduce__(self):
        raise RuntimeError("crash while writing")


def check_crash_mid_write(tmp: Path) -> None:
    good = {"step": torch.tensor(10)}
    for name, save, survives in (
        ("torch.save", torch.save, False),
        ("save_atomic", save_atomic, True),
    ):
        path = tmp / f"{name}.pt"
        save(good, path)
        try:
            save({"step": torch.tensor(15), "extra": CrashWhilePickled()}, path)
        except RuntimeError:
            pass
        try:
            intact = torch.equal(
                torch.load(path, weights_only=True)["step"], good["step"]
            )
        except Exception:  # a truncated zip archive does not even load
            intact = False
        assert intact == survives, (
            f"{name}: previous checkpoint intact = {intact}"
        )
        print(
            f"{name}: crash mid-write leaves the previous checkpoint "
            f"intact: {intact}"
        )
    assert [p.name for p in tmp.glob("*.tmp")] == [], (
        "save_atomic left a temp file behind"
    )


# --8<-- [end:crash_mid_write]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        check_crash_mid_write(Path(d))
    with tempfile.TemporaryDirectory() as d:
        check_restart_is_bit_identical(Path(d))
