"""What the tests of one run make once and share, also across pytest-xdist workers (the site build, a reference run)."""

import os
import shutil
import time
from pathlib import Path

from filelock import FileLock


def once_per_run(tmp_path_factory, name: str, make) -> tuple[Path, float]:
    """`make(folder)`, once per test run: under `pytest -n` the first worker to get the lock makes it, the others
    wait for it and share the folder. Returns the folder and the seconds making it took."""
    scratch = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        scratch = scratch.parent  # this run's folder, above every worker's own
    folder, done = scratch / name, scratch / f"{name}.done"
    with FileLock(scratch / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed earlier attempt left
            started = time.monotonic()
            make(folder)
            done.write_text(f"{time.monotonic() - started:.1f}")
    return folder, float(done.read_text())
