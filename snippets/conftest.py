"""Collect every snippet in snippets/ as a test and run it the way a reader would.

A snippet declares how it is launched and what it needs in comment lines near its top (guidekit/spec.py).
Each snippet runs in its own process group with a free MASTER_PORT and one thread per rank; a run past its timeout
is stopped with every process it started, and fails. Missing GPUs skip with a reason; they never pass silently.
What it prints must match its recording (guidekit/outputs.py); `--record-output` (make outputs) rewrites the
recordings and the manifest of what ran where. A run that compares nothing says so in its summary.
"""

from __future__ import annotations

import collections
import datetime
import functools
import glob
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from guidekit import outputs
from guidekit.spec import Spec, free_port, is_snippet, launch_command, launch_env, parse_spec

OUTPUT_TAIL_LINES = 150
GRACE_S = 10  # after a timeout: time for torchrun to stop its ranks before SIGKILL
LEFTOVER_GRACE_S = 10  # after a clean exit: time for helper processes to notice and exit on their own
RUN_TAG = "GUIDE_SNIPPET_RUN"  # in the environment of every process a snippet starts, orphans included
DURATIONS = Path(__file__).resolve().parents[1] / "tests" / "durations.json"  # for the run order (make durations)


def snippet_env(port: int, tag: str, scratch: str) -> dict[str, str]:
    # TMPDIR: what the program leaves in the temp folder (torchrun's logs, a snapshot) goes with it
    return {**launch_env(port), RUN_TAG: tag, "TMPDIR": scratch}


# A GPU torch could use has one of these device files: NVIDIA's driver, WSL 2's GPU, ROCm (torch.cuda there too).
GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/dxg", "/dev/kfd")


@functools.cache
def cuda_devices() -> int:
    """How many GPUs torch sees. Where none can be (all hidden, or no GPU device file), torch is not imported: each
    pytest-xdist worker asks while collecting, and the import costs 1.6 CPU-seconds."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or not any(glob.glob(p) for p in GPU_DEVICE_FILES):
        return 0
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


@functools.cache
def platform() -> str:
    """Where recordings of this run belong: 'cuda' on a machine with GPUs (snippets then use them), else 'cpu'."""
    return "cuda" if cuda_devices() else "cpu"


def manifest_entry(spec: Spec, outcome: str, reason: str = "") -> dict:
    """What the manifest says of one snippet on this machine: how it ran, or why it could not."""
    import torch

    entry = {"outcome": outcome, "torch": torch.__version__.split("+")[0]}
    if reason:
        entry["reason"] = reason
    else:
        gpu = platform() == "cuda" and (spec.gpus or cuda_devices() >= spec.world_size)
        entry["backend"] = "nccl" if gpu else "gloo"
        entry["device"] = torch.cuda.get_device_name(0) if gpu else "CPU"
        entry["ranks"] = spec.world_size
    return {**entry, "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat()}


def pytest_addoption(parser):
    parser.addoption(
        "--record-output",
        action="store_true",
        help="write each snippet's output to snippets/outputs/ and update the manifest, instead of comparing",
    )
    parser.addoption(
        "--no-output-check",
        action="store_true",
        help="run the snippets without comparing their output with the recordings (e.g. on an older torch)",
    )
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write how long each scope took to {DURATIONS.name}; `pytest -n` starts the longest first",
    )


class SnippetFailed(Exception):
    def __init__(self, reason: str, output: str):
        super().__init__(reason)
        self.reason = reason
        self.output = output


class SnippetItem(pytest.Item):
    def __init__(self, *, spec: Spec, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec
        self.add_marker(pytest.mark.snippet)
        self.add_marker(pytest.mark.world_size(spec.world_size))
        if spec.gpus:
            self.add_marker(pytest.mark.gpu(spec.gpus))
            found = cuda_devices()
            if spec.gpus > found:
                reason = f"needs {spec.gpus} CUDA GPU(s), this machine has {found}"
                self.add_marker(pytest.mark.skip(reason=reason))
                if self.config.getoption("--record-output"):  # the manifest says what could not run here, and why
                    entry = {"snippet": spec.path, "platform": platform(), **manifest_entry(spec, "skipped", reason)}
                    self.user_properties.append(("manifest", json.dumps(entry)))

    def runtest(self) -> None:
        port, tag = free_port(), uuid.uuid4().hex
        # files, not pipes: a leftover process cannot hold them open
        with (
            tempfile.TemporaryFile("w+") as out,
            tempfile.TemporaryFile("w+") as err,
            tempfile.TemporaryDirectory(prefix="snippet-") as scratch,
        ):
            proc = subprocess.Popen(
                launch_command(self.spec, port),
                cwd=self.config.rootpath,
                env=snippet_env(port, tag, scratch),
                stdout=out,
                stderr=err,
                text=True,
                start_new_session=True,  # its own process group, so a timeout kills every rank
            )
            timed_out = True  # until the program is seen to exit
            try:
                proc.wait(timeout=self.spec.timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                stop_tree(proc)
            finally:
                kill_group(proc.pid)
                left = kill_tagged(tag, grace_s=0 if timed_out else LEFTOVER_GRACE_S)
            out.seek(0), err.seek(0)
            stdout, stderr = out.read(), err.read()
        self.add_report_section("call", "stdout", stdout)
        self.add_report_section("call", "stderr", stderr)
        output = f"{stdout}\n--- stderr ---\n{stderr}" if stderr else stdout
        if timed_out:
            raise SnippetFailed(f"timed out after {self.spec.timeout_s:g} s (all its processes killed)", output)
        if proc.returncode != 0:
            raise SnippetFailed(f"exited with code {proc.returncode}", output)
        if left:
            raise SnippetFailed(f"exited 0 but left {len(left)} process(es) running (now killed): {left}", output)
        self.check_output(stdout)

    def check_output(self, stdout: str) -> None:
        """Compare what the program printed with its recording, or (--record-output) record it."""
        if self.config.getoption("--no-output-check"):
            return
        recording = outputs.recording_path(self.spec.path, platform(), self.config.rootpath)
        if self.config.getoption("--record-output"):
            recording.parent.mkdir(parents=True, exist_ok=True)
            recording.write_text(outputs.recording_text(stdout, self.spec.output), encoding="utf-8")
            entry = {"snippet": self.spec.path, "platform": platform(), **manifest_entry(self.spec, "passed")}
            self.user_properties.append(("manifest", json.dumps(entry)))
            return
        if not recording.is_file():
            if platform() == "cuda":  # GPU recordings exist only where someone ran `make outputs` on a GPU box
                self.user_properties.append(("uncompared", self.spec.path))
                return
            rel = recording.relative_to(self.config.rootpath)
            raise SnippetFailed(f"no recording of its output ({rel}): run `make outputs`", stdout)
        diff = outputs.difference(recording.read_text(encoding="utf-8"), stdout, self.spec.output)
        if diff:
            rel = recording.relative_to(self.config.rootpath)
            raise SnippetFailed(f"printed something else than {rel} (make outputs records it anew)", diff)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, SnippetFailed):
            lines = excinfo.value.output.splitlines()
            tail = "\n".join(lines[-OUTPUT_TAIL_LINES:])
            launch = " ".join(self.spec.launch)
            return f"{launch}\n{excinfo.value.reason}; last {OUTPUT_TAIL_LINES} lines:\n{tail}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, " ".join(self.spec.launch)


def descendants(pid: int) -> set[int]:
    """Every process below pid. torchrun starts each rank in a session of its own, so killing
    torchrun's process group would orphan the ranks (and they would keep the output pipe open)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tagged(tag: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment carries this run's tag.

    A rank whose launcher died is reparented to init and out of reach of the process tree; the tag still finds it.
    """
    needle = f"{RUN_TAG}={tag}".encode()
    found = {}
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                cmdline = (environ.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                found[int(environ.parent.name)] = cmdline.decode(errors="replace").strip()
        except (OSError, ValueError):  # gone meanwhile, a zombie, or not ours to read
            continue
    return found


def kill_tagged(tag: str, grace_s: float) -> list[str]:
    """Give the run's leftover processes grace_s to exit on their own (multiprocessing's resource tracker exits
    when its parent has), then SIGKILL the rest; return the command lines of those that had to be killed."""
    deadline = time.monotonic() + grace_s
    while (left := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sorted(left.values())


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def stop_tree(proc: subprocess.Popen) -> None:
    """SIGTERM the launcher (torchrun then stops its ranks), SIGKILL whatever is left."""
    tree = descendants(proc.pid)
    kill_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    for pid in tree | descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    kill_group(proc.pid)
    proc.wait()


class SnippetFile(pytest.File):
    def collect(self):
        spec = parse_spec(self.path, self.config.rootpath)
        yield SnippetItem.from_parent(self, name=self.path.stem, spec=spec)


class NotATestModule(pytest.File):
    """What pytest's Python plugin gets for a snippet named on the command line: nothing to import or run."""

    def collect(self):
        return []


def pytest_pycollect_makemodule(module_path: Path, parent):
    """`pytest snippets/x/y.py` must run y.py as a program (SnippetFile), not import it as a test module."""
    if is_snippet(module_path):
        return NotATestModule.from_parent(parent, path=module_path)
    return None


def pytest_collect_file(file_path: Path, parent):
    if is_snippet(file_path):
        return SnippetFile.from_parent(parent, path=file_path)
    return None


def pytest_report_header(config):
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return ["torch: not installed"]
    gpus = cuda_devices()
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(gpus)) or "none"
    backends = [name for name in ("gloo", "nccl", "mpi", "ucc") if getattr(dist, f"is_{name}_available")()]
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if gpus and dist.is_nccl_available() else "n/a"
    lines = [
        f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}, NCCL {nccl}), CPU cores: {os.cpu_count()}",
        f"CUDA devices: {gpus} ({names})",
        f"distributed backends available: {', '.join(backends) or 'none'}",
        "snippets run with NCCL on CUDA where a snippet's ranks each get a GPU, else with gloo on CPU",
    ]
    if config.getoption("--no-output-check"):
        lines.append("outputs: NOT compared with the recordings in snippets/outputs/ (--no-output-check)")
    return lines


def pytest_sessionstart(session):
    """A recording run also records the header it reports (the GPU box page shows it)."""
    config = session.config
    if config.getoption("--record-output") and not hasattr(config, "workerinput"):
        header = outputs.header_path(platform(), config.rootpath)
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text("".join(f"{line}\n" for line in pytest_report_header(config)), encoding="utf-8")


def scope_of(nodeid: str) -> str:
    """The unit of scheduling: a snippet on CPUs, all snippets together where they share GPUs, else a test module."""
    path = nodeid.split("::")[0]
    if path.startswith("snippets/"):
        return "gpus" if cuda_devices() else nodeid
    return path


def recorded_seconds() -> dict[str, float]:
    """Seconds each scope took in the run recorded in DURATIONS (`make durations`); none if there is no record."""
    try:
        return json.loads(DURATIONS.read_text(encoding="utf-8"))["seconds"]
    except (OSError, ValueError, KeyError):
        return {}


def expected_seconds() -> dict[str, float]:
    """recorded_seconds(), where a scope without a record gets the median."""
    seconds = recorded_seconds()
    typical = sorted(seconds.values())[len(seconds) // 2] if seconds else 0.0
    return collections.defaultdict(lambda: typical, seconds)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: `pytest -n 3` (make test) uses this scheduler
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerPerResource(LoadScopeScheduling):
        """Snippets run in parallel on CPUs but one at a time where they share GPUs; a test module stays on one
        worker, so its module and session fixtures (the site build, the planted runs) are set up once per worker.
        The longest scopes start first (LPT: no long one is left to run alone at the end); with the recorded
        figures the browser tests, which build the site, start beside two multi-host modules, not beside other
        tests that would wait for the build."""

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "ordered", False):  # the first assignment: the queue is complete
                seconds = expected_seconds()
                self.workqueue = collections.OrderedDict(
                    sorted(self.workqueue.items(), key=lambda unit: -seconds[unit[0]])
                )
                self.ordered = True
            super()._assign_work_unit(node)

    return OneWorkerPerResource(config, log)


recorded: dict[str, dict[str, dict]] = {}  # platform -> snippet -> manifest entry, on the controlling process


uncompared: list[str] = []  # snippets that passed with no recording for this platform to compare with


scope_seconds: collections.Counter[str] = collections.Counter()  # on the controlling process


def pytest_runtest_logreport(report):
    scope_seconds[scope_of(report.nodeid)] += report.duration  # setup, call and teardown
    if report.when == "call" or (report.when == "setup" and report.skipped):
        for name, value in report.user_properties:
            if name == "uncompared" and report.when == "call":
                uncompared.append(value)
            if name == "manifest":
                entry = json.loads(value)
                recorded.setdefault(entry.pop("platform"), {})[entry.pop("snippet")] = entry


def pytest_terminal_summary(terminalreporter, config):
    if config.getoption("--no-output-check", default=False):
        terminalreporter.write_line("outputs: not compared with the recordings (--no-output-check)")
    elif uncompared:
        terminalreporter.write_line(
            f"outputs: {len(uncompared)} snippet(s) passed but had no {platform()} recording to compare with "
            "(`make outputs` on this machine records them): " + ", ".join(sorted(uncompared))
        )


def pytest_sessionfinish(session):
    if session.config.getoption("--record-output") and not hasattr(session.config, "workerinput") and recorded:
        outputs.write_manifest(recorded, session.config.rootpath)
    if session.config.getoption("--record-durations") and not hasattr(session.config, "workerinput"):
        write_durations(session.config)


def write_durations(config) -> None:
    """Merge this run's seconds per scope into DURATIONS: scopes this run left out keep their old figure."""
    seconds = recorded_seconds()
    seconds.update({scope: round(s, 1) for scope, s in scope_seconds.items()})
    about = (
        "Seconds per scheduling scope (a snippet, or a test module) in a `make durations` run: pytest -n starts "
        f"the longest first (snippets/conftest.py). Recorded with {config.getoption('numprocesses', 0) or 0} workers "
        f"on {os.cpu_count()} CPU cores, platform {platform()}."
    )
    text = json.dumps({"about": about, "seconds": dict(sorted(seconds.items()))}, indent=1, ensure_ascii=False)
    DURATIONS.write_text(text + "\n", encoding="utf-8")
