import os
import subprocess
import sys
import time

import pytest
from filelock import FileLock

from guidekit import ROOT


def source_date_epoch() -> str:
    """The last commit's time: dates in the output (sitemap) depend on it, not on the clock."""
    git = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True, text=True)
    return git.stdout.strip() or "1767225600"


def _build(site, cwd=ROOT, config="mkdocs.yml"):
    env = {**os.environ, "SOURCE_DATE_EPOCH": source_date_epoch()}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", config, "--site-dir", str(site)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="session")
def build_site():
    """`build_site(site_dir, cwd=..., config=...)`: a strict build of the site, as a CompletedProcess."""
    return _build


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The whole site, both languages, built once with --strict into a scratch folder.

    Under `pytest -n` the workers share one build: the first to get the lock builds, the others wait for it.
    """
    scratch = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        scratch = scratch.parent  # this run's folder, above every worker's own
    site, done = scratch / "site", scratch / "site.built"
    with FileLock(scratch / "site.lock"):
        if not done.exists():
            started = time.monotonic()
            build = _build(site)
            assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr[-6000:]}"
            done.write_text(f"{time.monotonic() - started:.1f}")
    print(f"\nsite built in {done.read_text()} s")
    return site
