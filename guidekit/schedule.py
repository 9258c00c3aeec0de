"""How `pytest -n` spreads the whole suite over its workers: snippets side by side on CPUs, one at a time where they
share GPUs, a test module on one worker, and the longest scopes first, by the seconds `make durations` recorded.

A pytest plugin, registered for every run from the root conftest.py, so `pytest -n 3 tests` schedules as
`make test` does.
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest

from guidekit import ROOT
from guidekit.machine import cuda_devices, platform
from guidekit.spec import parse_spec

NOTEBOOK_RUNS = "tests/site/test_notebooks.py::test_chapter_notebook_runs["  # `make notebooks`: one item a chapter
DURATIONS = "tests/durations.json"  # under the run's root: seconds per scope of the last `make durations` run


def pytest_addoption(parser):
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write how long each scope took to {DURATIONS}; `pytest -n` starts the longest first",
    )


def scope_of(nodeid: str) -> str:
    """The unit of scheduling: a test module, or a snippet (or a chapter notebook's run) of its own; the snippets that
    will use GPUs all share one scope, so they run one at a time. A program uses GPUs when it requires them, when it
    declares that it uses every GPU there is (`# uses-gpus: all`), or when every one of its ranks can have a GPU of
    its own (its setup() then picks NCCL): Spec.on_gpus. With more ranks than GPUs it runs on CPUs with gloo, and runs
    beside the others (a GPU box's CPU cores are many)."""
    path = nodeid.split("::")[0]
    if nodeid.startswith(NOTEBOOK_RUNS):
        # a chapter notebook runs its programs one after another, mostly waiting on one: side by side on CPUs
        return "gpus" if cuda_devices() else nodeid
    if not path.startswith("snippets/"):
        return path
    devices = cuda_devices()
    if devices and parse_spec(ROOT / path, ROOT).on_gpus(devices):
        return "gpus"
    return nodeid


def recorded_seconds(root: Path) -> dict[str, float]:
    """Seconds each scope took in the run recorded in root/DURATIONS; none if there is no record."""
    try:
        return json.loads((root / DURATIONS).read_text(encoding="utf-8"))["seconds"]
    except (OSError, ValueError, KeyError):
        return {}


def expected_seconds(root: Path) -> dict[str, float]:
    """recorded_seconds(), where a scope without a record gets the median."""
    seconds = recorded_seconds(root)
    typical = sorted(seconds.values())[len(seconds) // 2] if seconds else 0.0
    return collections.defaultdict(lambda: typical, seconds)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerPerResource(LoadScopeScheduling):
        """A scope stays on one worker, so module and session fixtures (the site build, the planted runs) are set up
        once per worker; the longest scopes start first (LPT), so no long one is left to run alone at the end."""

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "ordered", False):  # the first assignment: the queue is complete
                seconds = expected_seconds(config.rootpath)
                self.workqueue = collections.OrderedDict(
                    sorted(self.workqueue.items(), key=lambda unit: -seconds[unit[0]])
                )
                self.ordered = True
            super()._assign_work_unit(node)

    return OneWorkerPerResource(config, log)


scope_seconds: collections.Counter[str] = collections.Counter()  # on the controlling process


def pytest_runtest_logreport(report):
    scope_seconds[scope_of(report.nodeid)] += report.duration  # setup, call and teardown


def pytest_sessionfinish(session):
    if session.config.getoption("--record-durations") and not hasattr(session.config, "workerinput"):
        write_durations(session.config)


def merged(old: dict[str, float], new: dict[str, float], root: Path) -> dict[str, float]:
    """This run's seconds per scope over the old ones: a scope this run left out keeps its old figure while its file
    is still there (a removed program's does not)."""
    kept = {scope: s for scope, s in old.items() if scope == "gpus" or (root / scope.split("::")[0]).is_file()}
    return {**kept, **{scope: round(s, 1) for scope, s in new.items()}}


def write_durations(config) -> None:
    """Merge this run's seconds per scope into DURATIONS (merged())."""
    seconds = merged(recorded_seconds(config.rootpath), scope_seconds, config.rootpath)
    about = (
        "Seconds per scheduling scope (a snippet, or a test module) in a `make durations` run: pytest -n starts "
        f"the longest first (guidekit/schedule.py). Recorded with {config.getoption('numprocesses', 0) or 0} workers "
        f"on {os.cpu_count()} CPU cores, platform {platform()}."
    )
    text = json.dumps({"about": about, "seconds": dict(sorted(seconds.items()))}, indent=1, ensure_ascii=False)
    (config.rootpath / DURATIONS).write_text(text + "\n", encoding="utf-8")
