"""The snippet runner: every program in snippets/ is a test, run the way a reader runs it.

A snippet declares how it is launched and what it needs in comment lines near its top (guidekit/spec.py).
Each snippet runs in its own process group with a free MASTER_PORT and one thread per rank; a run past its timeout
is stopped with every process it started, and fails. Missing GPUs skip with a reason; they never pass silently.
What it prints must match its recording (guidekit/outputs.py); `--record-output` (make outputs) rewrites the
recordings and the manifest of what ran where. A run that compares nothing says so in its summary; a run on another
torch than the one that made a recording shows the difference, names both versions, and passes on the program's
own asserts.

What a GPU box brings is checked before the programs run and said in the header: TF32 overrides in the environment
are removed for the programs (guidekit/spec.py), GPUs that are present but unusable are reported loudly, and a
program that compiles with Inductor (`# inductor:`) fails at once, naming what Inductor lacks, where a C compiler
or Python's headers are missing. A program whose process group would have no CPU backend on a machine with a CUDA
GPU (the default group made without a backend, e.g. by init_device_mesh) fails here on the CPU (guidekit/probe/).

A pytest plugin, registered for every run from the root conftest.py (`pytest -p guidekit.runner` elsewhere).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import subprocess
import tempfile
import uuid
import warnings
from pathlib import Path

import pytest

from guidekit import outputs
from guidekit.machine import BOX_GPUS, cuda_devices, inductor_missing, platform, unusable_gpus
from guidekit.processes import FAULTHANDLER, RUN_TAG, dump_stacks, kill_group, kill_tagged, stop_tree, tagged
from guidekit.spec import (
    TF32_OVERRIDES,
    Spec,
    free_port,
    is_snippet,
    launch_command,
    launch_env,
    parse_spec,
    tf32_overrides,
)

OUTPUT_TAIL_LINES = 150
LEFTOVER_GRACE_S = 10  # after a clean exit: time for helper processes to notice and exit on their own


PROBE = Path(__file__).with_name("probe")  # its sitecustomize.py reports what each process really used


def snippet_env(port: int, tag: str, scratch: str, reports: str) -> dict[str, str]:
    # TMPDIR: what the program leaves in the temp folder (torchrun's logs, a snapshot) goes with it
    env = {**launch_env(port), **FAULTHANDLER, RUN_TAG: tag, "TMPDIR": scratch, "GUIDE_RANK_REPORTS": reports}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROBE), env.get("PYTHONPATH")]))
    return env


def read_reports(folder: Path) -> list[dict]:
    """What each process that joined a process group reported (guidekit/probe/sitecustomize.py)."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]


def used(reports: list[dict]) -> dict:
    """Backend, device and ranks of a run, from its processes' own reports; a program that made no process group
    ran one process on the CPU, or on one GPU where it asked for CUDA."""
    if not reports:
        return {"backend": "none", "device": "CPU", "ranks": 1}
    world = max(r["world_size"] for r in reports)
    return {
        "backend": ",".join(sorted({r["backend"] for r in reports})),
        "device": ",".join(sorted({r["device"] for r in reports})),
        "ranks": world,
    }


def gloo_alive_at_exit(reports: list[dict]) -> str | None:
    """Why a run that passed is still a failure: its processes reached exit with gloo's threads running."""
    held = {r["rank"]: r["gloo_threads_at_exit"] for r in reports if r.get("gloo_threads_at_exit")}
    if not held:
        return None
    ranks = ", ".join(f"rank {rank}: {n}" for rank, n in sorted(held.items()))
    return (
        f"passed, but gloo's threads were still running when Python began to exit ({ranks}): something still holds "
        "the process group after destroy_process_group(), and such a program aborts at exit by chance (terminate "
        "called without an active exception); see docs/en/debugging.md#exit-abort"
    )


def torch_version() -> str:
    """The installed torch's release, e.g. '2.15.0' (no local part such as '+cu132'), read without importing it."""
    try:
        return importlib.metadata.version("torch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return "none"


def no_cpu_backend(reports: list[dict]) -> str:
    """Why a run that used the CPU would break on a machine with a CUDA GPU: the backend it asked for gives its
    group no CPU backend there (guidekit/probe/); '' if nothing is wrong or torch cannot say."""
    for report in reports:
        devices = report.get("on_a_cuda_box")
        if report.get("device") == "CPU" and devices is not None and "cpu" not in devices:
            return (
                f"rank {report['rank']} created its process group with backend {report.get('requested')!r}; on a "
                f"machine with a CUDA GPU, torch {torch_version()} gives that group backends for {devices} only, so "
                "this CPU path would fail there ('No backend type associated with device type cpu'). Create the "
                "group with an explicit backend before any init_device_mesh: dist.init_process_group('gloo') on CPU"
            )
    return ""


def manifest_entry(outcome: str, reason: str = "", reports: list[dict] | None = None) -> dict:
    """What the manifest says of one snippet on this machine: what it used, or why it could not run."""
    entry = {"outcome": outcome, "torch": torch_version()}
    if reason:
        entry["reason"] = reason
    else:
        entry.update(used(reports or []))
    return {**entry, "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat()}


def pytest_addoption(parser):
    parser.addoption(
        "--record-output",
        action="store_true",
        help="write each snippet's output to recordings/ and update the manifest, instead of comparing",
    )
    parser.addoption(
        "--no-output-check",
        action="store_true",
        help="run the snippets without comparing their output with the recordings",
    )
    parser.addoption(
        "--results-log",
        metavar="PATH",
        help="append one JSON line per program as it ends (outcome, seconds, reason): a run cut short keeps them",
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
                    entry = {"snippet": spec.path, "platform": platform(), **manifest_entry("skipped", reason)}
                    self.user_properties.append(("manifest", json.dumps(entry)))

    def runtest(self) -> None:
        try:
            self.run_program()
        except SnippetFailed as failed:
            self.user_properties.append(("failure", failed.reason))
            raise

    def run_program(self) -> None:
        if self.spec.needs_inductor(cuda_devices()):
            where = "on CPUs" if self.spec.inductor == "always" else "on GPUs"
            if missing := inductor_missing(cpu=self.spec.inductor == "always"):
                raise SnippetFailed(
                    f"compiles with Inductor {where} (# inductor: {self.spec.inductor}), which needs what this "
                    f"machine lacks: {'; '.join(missing)}",
                    "",
                )
        port, tag = free_port(), uuid.uuid4().hex
        # files, not pipes: a leftover process cannot hold them open
        with (
            tempfile.TemporaryFile("w+") as out,
            tempfile.TemporaryFile("w+") as err,
            tempfile.TemporaryDirectory(prefix="snippet-") as scratch,
            tempfile.TemporaryDirectory(prefix="snippet-ranks-") as reports,
        ):
            proc = subprocess.Popen(
                launch_command(self.spec, port),
                cwd=self.config.rootpath,
                env=snippet_env(port, tag, scratch, str(reports)),
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
                dump_stacks(tagged(tag))  # each Python process prints where it waits
                stop_tree(proc)
            finally:
                kill_group(proc.pid)
                left = kill_tagged(tag, grace_s=0 if timed_out else LEFTOVER_GRACE_S)
            out.seek(0), err.seek(0)
            stdout, stderr = out.read(), err.read()
            self.reports = read_reports(Path(reports))
        self.add_report_section("call", "stdout", stdout)
        self.add_report_section("call", "stderr", stderr)
        output = f"{stdout}\n--- stderr ---\n{stderr}" if stderr else stdout
        if timed_out:
            raise SnippetFailed(
                f"timed out after {self.spec.timeout_s:g} s (all its processes killed; stderr has each Python "
                "process's threads, where they waited)",
                output,
            )
        if proc.returncode != 0:
            raise SnippetFailed(f"exited with code {proc.returncode}", output)
        if left:
            raise SnippetFailed(f"exited 0 but left {len(left)} process(es) running (now killed): {left}", output)
        if reason := no_cpu_backend(self.reports):
            raise SnippetFailed(reason, output)
        if reason := gloo_alive_at_exit(self.reports):
            if not self.spec.holds_group_at_exit:
                raise SnippetFailed(reason, output)
            warnings.warn(
                pytest.PytestWarning(f"{self.spec.path}: {reason} (declared: {self.spec.holds_group_at_exit})"),
                stacklevel=1,
            )
        self.check_output(stdout)

    def check_output(self, stdout: str) -> None:
        """Compare what the program printed with its recording, or (--record-output) record it."""
        if self.config.getoption("--no-output-check"):
            return
        recording = outputs.recording_path(self.spec.path, platform(), self.config.rootpath)
        if self.config.getoption("--record-output"):
            recording.parent.mkdir(parents=True, exist_ok=True)
            recording.write_text(outputs.recording_text(stdout, self.spec.output), encoding="utf-8")
            entry = {
                "snippet": self.spec.path,
                "platform": platform(),
                **manifest_entry("passed", reports=self.reports),
            }
            self.user_properties.append(("manifest", json.dumps(entry)))
            return
        if not recording.is_file():
            if platform() != outputs.CPU:  # GPU recordings exist only where someone recorded on a box of as many GPUs
                self.user_properties.append(("uncompared", self.spec.path))
                return
            rel = recording.relative_to(self.config.rootpath)
            raise SnippetFailed(f"no recording of its output ({rel}): run `make outputs`", stdout)
        diff = outputs.difference(recording.read_text(encoding="utf-8"), stdout, self.spec.output)
        if not diff:
            return
        rel = recording.relative_to(self.config.rootpath).as_posix()
        recorded_on = (
            outputs.read_manifest(self.config.rootpath).get(platform(), {}).get(self.spec.path, {}).get("torch")
        )
        if recorded_on and recorded_on != torch_version():  # a reader's torch: shown, not failed
            said = f"{self.spec.path}: printed other text than {rel}, recorded on torch {recorded_on}; this run has torch {torch_version()}"
            warnings.warn(pytest.PytestWarning(f"{said} (not a failure: the diff is in the summary)"), stacklevel=1)
            self.add_report_section("call", f"output (recorded on torch {recorded_on})", diff)
            self.user_properties.append(("torch_differs", json.dumps({"said": said, "diff": diff})))
            return
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


class SnippetFile(pytest.File):
    def collect(self):
        spec = parse_spec(self.path, self.config.rootpath)
        yield SnippetItem.from_parent(self, name=self.path.stem, spec=spec)


class NotATestModule(pytest.File):
    """What pytest's Python plugin gets for a snippet named on the command line: nothing to import or run."""

    def collect(self):
        return []


def _is_program(path: Path, config) -> bool:
    """A reader program: a snippet file inside the repository's snippets/ folder."""
    return is_snippet(path) and path.is_relative_to(config.rootpath / "snippets")


def pytest_pycollect_makemodule(module_path: Path, parent):
    """`pytest snippets/x/y.py` must run y.py as a program (SnippetFile), not import it as a test module."""
    if _is_program(module_path, parent.config):
        return NotATestModule.from_parent(parent, path=module_path)
    return None


def pytest_collect_file(file_path: Path, parent):
    if _is_program(file_path, parent.config):
        return SnippetFile.from_parent(parent, path=file_path)
    return None


def environment_lines() -> list[str]:
    """What the environment of a GPU box changes, as the header says it: unusable GPUs, TF32 overrides, Inductor."""
    lines = []
    if reason := unusable_gpus():
        lines.append(f"GPUS NOT USABLE: {reason}. The programs run on CPUs with gloo and compare with recordings/cpu")
    found = tf32_overrides()
    if found:
        said = ", ".join(f"{name}={value}" for name, value in found.items())
        lines.append(f"TF32 overrides: {said}: removed for the programs (torch's own TF32 defaults apply)")
    else:
        lines.append(f"TF32 overrides: none set ({', '.join(TF32_OVERRIDES)} would be removed for the programs)")
    missing = inductor_missing()
    lines.append(
        "Inductor on GPUs (programs with # inductor:): "
        + (f"MISSING {'; '.join(missing)}" if missing else "C compiler and Python's headers found")
    )
    return lines


def header_lines(unchecked: bool = False) -> list[str]:
    """What the run found: torch, the GPUs, the environment a GPU box brings, the backends."""
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
        f"CUDA devices: {gpus} ({names}); recordings: recordings/{platform()}/",
        *environment_lines(),
        f"distributed backends available: {', '.join(backends) or 'none'}",
        "snippets run with NCCL on CUDA where a snippet's ranks each get a GPU, else with gloo on CPU",
    ]
    if unchecked:
        lines.append("outputs: NOT compared with the recordings in recordings/ (--no-output-check)")
    return lines


def pytest_report_header(config):
    return header_lines(config.getoption("--no-output-check"))


def pytest_configure(config):
    global _config
    _config = config


def pytest_sessionstart(session):
    """A recording run also records the header it reports (the GPU box page shows it)."""
    config = session.config
    # a program's own run under make gpu-check sees only its share of the GPUs: gpu_check writes the box's header
    if config.getoption("--record-output") and not hasattr(config, "workerinput") and BOX_GPUS not in os.environ:
        header = outputs.header_path(platform(), config.rootpath)
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text("".join(f"{line}\n" for line in header_lines()), encoding="utf-8")


_config = None  # this process's pytest config (pytest_configure)
uncompared: list[str] = []  # snippets that passed with no recording for this platform to compare with
torch_differs: list[dict] = []  # snippets that printed other text than a recording made on another torch


def _controller() -> bool:
    return _config is not None and not hasattr(_config, "workerinput")


def _log_result(report, properties: dict[str, str]) -> None:
    """One line of --results-log: what `make gpu-check` reads, even of a run it had to stop."""
    path = _config.getoption("--results-log", default=None)
    if not path or not report.nodeid.startswith("snippets/"):
        return
    if report.skipped:
        reason = report.longrepr[2].removeprefix("Skipped: ") if isinstance(report.longrepr, tuple) else ""
    else:
        reason = properties.get("failure", "")
    line = {
        "program": report.nodeid.split("::")[0],
        "outcome": report.outcome,
        "seconds": round(report.duration, 1),
        "reason": reason,
        "uncompared": "uncompared" in properties,
        "torch_differs": "torch_differs" in properties,
    }
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


def pytest_runtest_logreport(report):
    if not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return
    properties = dict(report.user_properties)
    if not _controller():
        return
    _log_result(report, properties)
    if "uncompared" in properties:
        uncompared.append(properties["uncompared"])
    if "torch_differs" in properties:
        torch_differs.append(json.loads(properties["torch_differs"]))
    if "manifest" in properties:  # written as each program ends: a run cut short keeps what it recorded
        entry = json.loads(properties["manifest"])
        platform_name, snippet = entry.pop("platform"), entry.pop("snippet")
        outputs.write_manifest({platform_name: {snippet: entry}}, _config.rootpath)


DIFF_LINES = 40  # of each difference the summary shows


def pytest_terminal_summary(terminalreporter, config):
    if reason := unusable_gpus():
        terminalreporter.write_line(f"GPUS NOT USABLE: {reason}; the programs ran on CPUs", red=True, bold=True)
    if config.getoption("--no-output-check", default=False):
        terminalreporter.write_line("outputs: not compared with the recordings (--no-output-check)")
    elif uncompared:
        terminalreporter.write_line(
            f"outputs: {len(uncompared)} snippet(s) passed but had no {platform()} recording to compare with "
            "(`make outputs` on this machine records them): " + ", ".join(sorted(uncompared))
        )
    if torch_differs:
        terminalreporter.section("outputs recorded on another torch (shown, not failed)", yellow=True)
        for found in sorted(torch_differs, key=lambda found: found["said"]):
            lines = found["diff"].splitlines()
            terminalreporter.write_line(found["said"], yellow=True)
            for line in lines[:DIFF_LINES]:
                terminalreporter.write_line(f"    {line}")
            if len(lines) > DIFF_LINES:
                terminalreporter.write_line(f"    ... {len(lines) - DIFF_LINES} more lines")
