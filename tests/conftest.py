import subprocess
import sys
import time

import pytest
from markdown_source import ROOT


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The whole site, both languages, built once with --strict into a scratch folder."""
    site = tmp_path_factory.mktemp("site")
    started = time.monotonic()
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    seconds = time.monotonic() - started
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr[-6000:]}"
    print(f"\nsite built in {seconds:.1f} s")
    return site
