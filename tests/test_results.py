"""Committed benchmark results are complete and render in both languages (the performance page reads them)."""

import subprocess
import sys

from guidekit import ROOT


def test_committed_benchmark_results_render():
    run = subprocess.run(
        [sys.executable, "snippets/benchmark/_report.py"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "measured" in run.stdout and "predicted" in run.stdout
