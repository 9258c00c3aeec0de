"""Run the whole snippet suite N times in a row and count failures per snippet (`make soak N=20`).

A flaky example is a bug: this finds it. Prints one line per snippet that ever failed, with its count, and the
torch version; writes the summary as JSON (default: tests/soak_results/torch<version>.json).
Exit status 1 if any run failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def torch_version() -> str:
    import torch

    return torch.__version__


LOGS = ROOT / "artifacts" / "soak"


def one_run(junit: Path, log: Path, extra: list[str]) -> tuple[dict[str, str], float]:
    """Outcome per snippet ('passed', 'failed', 'skipped') of one `pytest snippets` run, and its seconds.

    The run's output is kept in `log` only if something failed, so every failure can be read afterwards.
    """
    started = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "snippets", "-p", "no:cacheprovider", f"--junitxml={junit}", *extra]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if run.returncode != 0:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(run.stdout + run.stderr, encoding="utf-8")
    if not junit.is_file():  # pytest itself broke: count it, never skip it
        return {"(pytest run)": "failed"}, seconds
    outcomes = {}
    for case in ET.parse(junit).iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py"
        kinds = {child.tag for child in case}
        outcomes[name] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
    return outcomes, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, help="summary JSON (default: results folder, named by torch version)")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    version = torch_version()
    out = args.out or ROOT / "tests/soak_results" / f"torch{version.split('+')[0]}.json"
    failures: Counter[str] = Counter()
    passed: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    durations, failed_runs = [], 0
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    def summary(done: int) -> dict:
        return {
            "torch": version,
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
            "started": started,
            "pytest_args": args.pytest_args,
            "runs_planned": args.runs,
            "runs": done,
            "snippets": len(set(passed) | set(failures) | set(skipped)),
            "runs_with_a_failure": failed_runs,
            "failures": dict(sorted(failures.items())),
            "skipped": dict(sorted(skipped.items())),
            "seconds_per_run": durations,
        }

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(1, args.runs + 1):
            outcomes, seconds = one_run(
                Path(tmp) / f"run{i}.xml", LOGS / f"torch{version}-run{i}.log", args.pytest_args
            )
            durations.append(round(seconds, 1))
            for name, outcome in outcomes.items():
                {"failed": failures, "passed": passed, "skipped": skipped}[outcome][name] += 1
            bad = sorted(n for n, o in outcomes.items() if o == "failed")
            failed_runs += bool(bad)
            note = f" (log: {(LOGS / f'torch{version}-run{i}.log').relative_to(ROOT)})" if bad else ""
            print(
                f"run {i}/{args.runs}: {len(outcomes)} snippets, {len(bad)} failed, {seconds:.0f} s {' '.join(bad)}{note}"
            )
            sys.stdout.flush()
            # written after every run: an interrupted soak still leaves its record
            out.write_text(json.dumps(summary(i), indent=1) + "\n", encoding="utf-8")
    print(
        f"torch {version}: {args.runs} runs of {summary(args.runs)['snippets']} snippets, {sum(failures.values())} failures"
    )
    for name, count in sorted(failures.items()):
        print(f"  {name}: failed {count}/{args.runs}")
    print(f"summary: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
