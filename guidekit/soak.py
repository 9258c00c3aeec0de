"""Run the whole snippet suite until every program has passed N runs at its current content (`make soak N=20`).

A flaky example is a bug: this finds it. The record (default: tests/soak_results/torch<version>.json) is kept per
program, under a fingerprint of what decides its run: its file, the files beside it that it imports or runs, its
recordings, and the runner. So a soak can be stopped and taken up again, by another session on another day: runs
count towards a program while its fingerprint holds, and a program whose fingerprint changed starts again from zero.
A soak only adds runs on the torch version the record was made with. Prints one line per run and per program that
ever failed; exit status 1 if any run at the current content failed.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# what runs every program: a change here may change any run
HARNESS = ["conftest.py", *(f"guidekit/{m}.py" for m in ("runner", "spec", "processes", "outputs", "machine"))]


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


def fingerprint(program: str, root: Path = ROOT) -> str:
    """A digest of what decides a program's run: the program, the files beside it it imports or runs, its recordings
    on every platform, and the runner."""
    from guidekit.outputs import recorded_platforms, recording_path
    from guidekit.spec import sibling_files

    files = [program, *sorted(sibling_files(root / program, root)), *HARNESS]
    files += [recording_path(program, p, root).relative_to(root).as_posix() for p in recorded_platforms(root)]
    digest = hashlib.sha256()
    for file in files:
        path = root / file
        digest.update(file.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"(none)") + b"\0")
    return digest.hexdigest()[:16]


def commit(root: Path = ROOT) -> str:
    """The commit the work tree is at, marked '+changes' where it has uncommitted changes (the soak's records aside)."""
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    status = [*git, "status", "--porcelain", "--", ".", ":!tests/soak_results"]
    dirty = subprocess.run(status, capture_output=True, text=True).stdout.strip()
    return f"{head or 'unknown'}{'+changes' if dirty else ''}"


def load(out: Path, version: str) -> dict:
    """The record to add to: the one in `out` if it was made on this torch and keeps programs' runs, else a new one."""
    try:
        record = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    if record.get("torch") != version or "programs" not in record:
        record = {"torch": version, "runs": [], "programs": {}}
    return record


def tally(record: dict, outcomes: dict[str, str], prints: dict[str, str]) -> list[str]:
    """Count one run's outcomes into the record; a program whose fingerprint changed starts again. Names the programs
    that started again."""
    restarted = []
    for name, outcome in outcomes.items():
        entry = record["programs"].get(name)
        if entry is None or entry["fingerprint"] != prints.get(name):
            restarted += [name] if entry else []
            entry = record["programs"][name] = {"fingerprint": prints.get(name), "passed": 0, "failed": 0, "skipped": 0}
        entry[outcome] += 1
    return restarted


def runs_at_current_content(record: dict, prints: dict[str, str]) -> int:
    """The fewest runs any program has at its current content (0 for one never soaked at it)."""
    counts = []
    for name, digest in prints.items():
        entry = record["programs"].get(name)
        counts.append(
            entry["passed"] + entry["failed"] + entry["skipped"] if entry and entry["fingerprint"] == digest else 0
        )
    return min(counts, default=0)


def programs(root: Path = ROOT) -> list[str]:
    from guidekit.spec import is_snippet

    return sorted(p.relative_to(root).as_posix() for p in (root / "snippets").rglob("*.py") if is_snippet(p))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=20, help="runs every program must have at its content")
    parser.add_argument("--out", type=Path, help="the record (default: results folder, named by torch version)")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    version = torch_version()
    out = args.out or ROOT / "tests/soak_results" / f"torch{version.split('+')[0]}.json"
    prints = {name: fingerprint(name) for name in programs()}
    record = load(out, version)
    record.update(
        python=platform.python_version(), machine=f"{platform.machine()}, {os.cpu_count()} CPU cores", about=ABOUT
    )
    done = runs_at_current_content(record, prints)
    print(f"torch {version}: {len(prints)} programs, {done} runs on record at their content; {args.runs} wanted")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs - done):  # bounded: a program that never runs (deselected) cannot keep it going
            i = len(record["runs"]) + 1
            started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            log = LOGS / f"torch{version}-run{i}.log"
            outcomes, seconds = one_run(Path(tmp) / f"run{i}.xml", log, args.pytest_args)
            restarted = tally(record, outcomes, prints)
            bad = sorted(n for n, o in outcomes.items() if o == "failed")
            record["runs"].append(
                {
                    "started": started,
                    "commit": commit(),
                    "pytest_args": args.pytest_args,
                    "seconds": round(seconds, 1),
                    "programs": len(outcomes),
                    "failed": bad,
                }
            )
            done = runs_at_current_content(record, prints)
            # written after every run: an interrupted soak leaves its record, and the next one goes on from it
            record["runs_at_current_content"] = done
            out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            note = f" (log: {log.relative_to(ROOT)})" if bad else ""
            again = f"; started again (changed): {' '.join(restarted)}" if restarted else ""
            print(f"run {i}: {len(outcomes)} programs, {len(bad)} failed, {seconds:.0f} s {' '.join(bad)}{note}{again}")
            print(f"  every program has {done} runs at its content")
            sys.stdout.flush()
    current = {n: e for n, e in record["programs"].items() if e["fingerprint"] == prints.get(n)}
    failed = {n: e["failed"] for n, e in current.items() if e["failed"]}
    print(f"torch {version}: every program {done}+ runs at its content, {sum(failed.values())} failures")
    for name, count in sorted(failed.items()):
        print(f"  {name}: failed {count}/{current[name]['passed'] + current[name]['failed']}")
    print(f"record: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 1 if failed else 0


ABOUT = (
    "`make soak` (guidekit/soak.py): runs of the program suite. programs: per program, under the fingerprint of its "
    "content (file, siblings, recordings, runner), its outcomes since that content first ran; runs: every run, with "
    "the commit it ran on ('+changes': uncommitted work) and the programs that failed."
)


if __name__ == "__main__":
    sys.exit(main())
