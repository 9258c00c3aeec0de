"""`make gpu-check`: everything a GPU machine can prove, in one command, gathered in one folder to commit.

1. every program, each as a pytest run of its own (`--record-output`): NCCL on CUDA where every rank gets its own
   GPU, gloo on CPU where not; recordings land in recordings/cuda-<n>/ (n: the box's GPUs) and the manifest;
2. the benchmark's full sweep (single GPU, DataParallel, DDP at every world size the GPUs allow, the all-reduce sweep);
3. each program's log, nvidia-smi, the environment and a summary, beside them.

    python -m guidekit.gpu_check --out DIR            (on the GPU machine; make gpu-check OUT=DIR)
    python -m guidekit.gpu_check --out DIR --dry-run  (anywhere: the same steps, tiny benchmark, nothing recorded)
    python -m guidekit.gpu_check --out DIR --programs snippets/benchmark snippets/parallelism   (these first)
    python -m guidekit.gpu_check --out DIR --programs snippets/gpu_box --only                  (these only)

How it finishes on a box of many GPUs:

- Each program has its own timeout (its `# timeout:`, which the runner enforces), not one limit for all; a pytest
  that outlives it by a margin is stopped with its whole process tree. `--deadline S` stops everything after S
  seconds. Every process it starts carries a tag in its environment (guidekit/processes.py), so nothing is left
  behind, orphans included.
- Programs that fit on `--gpus-per-run` GPUs (2 by default on a box of 4 or more) run side by side, each pytest on
  GPUs of its own (CUDA_VISIBLE_DEVICES, mapped through the one the box owner set); programs that need more, or use
  every GPU (`# uses-gpus: all`), run after them one at a time with all GPUs; programs that run on CPUs (more ranks
  than GPUs) run beside them on `--cpu-workers`. Programs never run on a GPU go first, then the longest.
- The summary and the manifest are written as programs end, so a run that is stopped or cut short keeps what it
  found; the summary says which programs did not run.
- It refuses to record where torch sees no GPU (recordings/cpu belongs to CI), and names why GPUs that are present
  cannot be used; `--dry-run` runs anyway, records nothing.

Everything it writes is under DIR: `recordings/` (a copy of the tree to commit), `benchmark/<gpu>.json|.txt`,
`logs/<program>.log`, `results.jsonl`, `environment.txt`, `nvidia-smi.txt`, `summary.json`. It returns non-zero
when a program or the benchmark failed, after finishing the others.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from guidekit import ROOT, outputs
from guidekit.machine import BOX_GPUS, cuda_devices, platform, unusable_gpus
from guidekit.processes import CHECK_TAG, kill_tagged, stop_tree
from guidekit.schedule import expected_seconds
from guidekit.spec import Spec, all_snippets, parse_spec, tf32_overrides

BENCHMARK = Path("snippets") / "benchmark" / "ddp_benchmark.py"
BENCHMARK_TIMEOUT_S = 300
MARGIN_S = 60  # past a program's own timeout: pytest's start, the runner's cleanup; then the tree is stopped
POLL_S = 0.2


@dataclass
class Job:
    """One program's pytest run: where it runs and how it ended."""

    spec: Spec
    lane: str  # "gpus" (side by side on a slot), "all-gpus" (alone, every GPU), "cpu"
    outcome: str = "not run"
    reason: str = ""
    seconds: float = 0.0
    gpus: str = ""  # CUDA_VISIBLE_DEVICES it ran with ('' : the box's own)
    log: str = ""
    details: dict = field(default_factory=dict)


def visible_ids(devices: int, environ=os.environ) -> list[str]:
    """The box's GPUs as CUDA_VISIBLE_DEVICES names them: the owner's own list (indices, UUIDs, MIG names) when set,
    else 0..n-1."""
    given = environ.get("CUDA_VISIBLE_DEVICES")
    ids = [name.strip() for name in given.split(",") if name.strip()] if given else []
    return ids[:devices] if ids else [str(i) for i in range(devices)]


def gpus_needed(spec: Spec, devices: int) -> int:
    """How many GPUs the program uses on a box of `devices` (0: it runs on CPUs there, or is skipped)."""
    if spec.gpus > devices or not spec.on_gpus(devices):
        return 0
    if spec.uses_all_gpus:
        return devices
    return max(spec.gpus, spec.world_size)


def lane_of(spec: Spec, devices: int, per_run: int) -> str:
    needed = gpus_needed(spec, devices)
    if not needed:
        return "cpu"
    return "gpus" if needed <= per_run and not spec.uses_all_gpus else "all-gpus"


def slots(devices: int, per_run: int, environ=os.environ) -> list[str]:
    """CUDA_VISIBLE_DEVICES of each side-by-side run: disjoint groups of per_run GPUs."""
    ids = visible_ids(devices, environ)
    return [",".join(ids[i : i + per_run]) for i in range(0, len(ids) - per_run + 1, per_run)]


def order(specs: list[Spec], first: list[str], manifest: dict, box: str, seconds: dict) -> list[Spec]:
    """What runs first: the programs named with --programs (in their order), then those that never passed on any
    GPU, then those that never passed on this box, the longest first within each."""

    def named(spec: Spec) -> int:
        for i, prefix in enumerate(first):
            if spec.path == prefix or spec.path.startswith(prefix + "/"):
                return i
        return len(first)

    def passed(platform_name: str, spec: Spec) -> bool:
        return manifest.get(platform_name, {}).get(spec.path, {}).get("outcome") == "passed"

    def key(spec: Spec):
        nodeid = f"{spec.path}::{Path(spec.path).stem}"
        return (named(spec), passed(outputs.ANY_GPU, spec), passed(box, spec), -seconds[nodeid], spec.path)

    return sorted(specs, key=key)


def plan(specs: list[Spec], devices: int, per_run: int) -> dict[str, list[Job]]:
    """lane -> its jobs, in the order given."""
    lanes: dict[str, list[Job]] = collections.defaultdict(list)
    for spec in specs:
        lane = lane_of(spec, devices, per_run)
        lanes[lane].append(Job(spec, lane))
    return lanes


class Runner:
    """Starts each job's pytest, watches timeouts and the deadline, stops whole trees, notes results as they come."""

    def __init__(self, args, root: Path, out: Path, devices: int, tag: str):
        self.args, self.root, self.out, self.devices, self.tag = args, root, out, devices, tag
        self.running: dict[int, tuple[Job, subprocess.Popen, float]] = {}
        self.results = out / "results.jsonl"
        (out / "logs").mkdir(parents=True, exist_ok=True)
        self.deadline = time.monotonic() + args.deadline if args.deadline else None

    def env(self, gpus: str) -> dict[str, str]:
        env = {**os.environ, CHECK_TAG: self.tag, BOX_GPUS: str(self.devices)}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus
        return env

    def start(self, job: Job, gpus: str) -> None:
        record = ["--no-output-check"] if self.args.dry_run else ["--record-output"]
        cmd = [sys.executable, "-m", "pytest", job.spec.path, "-p", "guidekit.runner"]
        cmd += ["-p", "no:cacheprovider", "-p", "no:xdist", "-rs", "-q", "--no-header", *record]
        cmd += ["--results-log", str(self.results)]
        job.gpus, job.outcome = gpus, "running"
        job.log = f"logs/{job.spec.path.removeprefix('snippets/').replace('/', '__')}.log"
        with (self.out / job.log).open("w") as log:
            log.write(f"$ {' '.join(cmd)}\n# CUDA_VISIBLE_DEVICES={gpus or os.environ.get('CUDA_VISIBLE_DEVICES')}\n")
            log.flush()
            proc = subprocess.Popen(
                cmd, cwd=self.root, env=self.env(gpus), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.running[proc.pid] = (job, proc, time.monotonic())

    def finish(self, pid: int, stopped: str = "") -> Job:
        job, proc, started = self.running.pop(pid)
        if stopped:
            stop_tree(proc, grace_s=5)
        job.seconds = round(time.monotonic() - started, 1)
        if stopped:
            job.outcome, job.reason = "stopped", stopped
        else:
            line = self.result_of(job.spec.path)
            if line:
                job.outcome, job.reason = line["outcome"], line["reason"]
                job.details = {k: line[k] for k in ("uncompared", "torch_differs") if line.get(k)}
            else:
                job.outcome, job.reason = "failed", f"pytest exited with code {proc.returncode} and no result"
        self.note(job)
        return job

    def result_of(self, path: str) -> dict | None:
        if not self.results.is_file():
            return None
        found = None
        for line in self.results.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if entry["program"] == path:
                found = entry
        return found

    def note(self, job: Job) -> None:
        print(f"{job.outcome:>8} {job.seconds:6.1f} s  {job.spec.path}  [{job.lane} {job.gpus}] {job.reason}")
        sys.stdout.flush()

    def poll(self) -> list[tuple[Job, str]]:
        """Jobs that ended since the last poll (with the GPUs they freed); stops those past their time."""
        ended = []
        now = time.monotonic()
        for pid, (job, proc, started) in list(self.running.items()):
            if proc.poll() is not None:
                ended.append((self.finish(pid), job.gpus))
            elif now - started > job.spec.timeout_s + MARGIN_S:
                limit = job.spec.timeout_s + MARGIN_S
                ended.append(
                    (self.finish(pid, f"pytest still running {limit:g} s after it started (tree stopped)"), job.gpus)
                )
        return ended

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def stop_all(self, why: str) -> None:
        for pid in list(self.running):
            self.finish(pid, why)

    def run(self, lanes: dict[str, list[Job]], per_run: int) -> None:
        """Side by side: the slot jobs on their GPUs and the CPU jobs on their workers; then the jobs that need every
        GPU, one at a time."""
        free_slots = slots(self.devices, per_run) if lanes.get("gpus") else []
        queues = {"gpus": collections.deque(lanes.get("gpus", [])), "cpu": collections.deque(lanes.get("cpu", []))}
        wide = collections.deque(lanes.get("all-gpus", []))
        cpu_free = self.args.cpu_workers
        while queues["gpus"] or queues["cpu"] or wide or self.running:
            if self.past_deadline():
                self.stop_all(f"stopped at the --deadline of {self.args.deadline:g} s")
                return
            for job, gpus in self.poll():
                if job.lane == "gpus":
                    free_slots.append(gpus)
                elif job.lane == "cpu":
                    cpu_free += 1
            while queues["gpus"] and free_slots:
                self.start(queues["gpus"].popleft(), free_slots.pop(0))
            while queues["cpu"] and cpu_free > 0:
                self.start(queues["cpu"].popleft(), "")
                cpu_free -= 1
            gpus_busy = any(job.lane != "cpu" for job, _, _ in self.running.values())
            if wide and not queues["gpus"] and not gpus_busy:
                self.start(wide.popleft(), "")
            time.sleep(POLL_S)


def gpu_label(devices: int) -> str:
    if not devices:
        return "cpu"
    import torch

    name = torch.cuda.get_device_name(0)
    return re.sub(r"[^a-z0-9]+", "-", f"{devices}x {name}".lower()).strip("-")


def run_benchmark(args, root: Path, out: Path, devices: int, tag: str) -> dict:
    """The benchmark's full sweep (tiny in a dry run), its tree stopped past its timeout."""
    program = root / BENCHMARK
    if args.no_benchmark or not program.is_file():
        return {"exit": 0, "skipped": "--no-benchmark" if args.no_benchmark else f"no {BENCHMARK}"}
    label = gpu_label(devices)
    bench = out / "benchmark" / f"{label}.json"
    bench.parent.mkdir(exist_ok=True)
    cmd = [sys.executable, str(program), *([] if args.dry_run else ["--full"]), "--machine", label, "--out", str(bench)]
    started = time.monotonic()
    with (out / "benchmark.log").open("w") as log:
        proc = subprocess.Popen(
            cmd, cwd=root, env={**os.environ, CHECK_TAG: tag}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            code = proc.wait(timeout=BENCHMARK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop_tree(proc, grace_s=5)
            code = "timeout"
    return {
        "command": " ".join(cmd),
        "exit": code,
        "seconds": round(time.monotonic() - started, 1),
        "log": "benchmark.log",
    }


def write_environment(out: Path, root: Path, record: bool) -> None:
    """environment.txt: what the box brings, as the runner's header says it, seen with all the box's GPUs; on a
    recording run also the header of its recordings (each program's own run sees only its share of the GPUs)."""
    from guidekit.runner import header_lines

    header = "".join(f"{line}\n" for line in header_lines())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "(not set)")
    (out / "environment.txt").write_text(f"python {sys.version.split()[0]}\n{header}CUDA_VISIBLE_DEVICES={visible}\n")
    if record:
        path = outputs.header_path(platform(), root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header, encoding="utf-8")


def write_summary(out: Path, summary: dict, jobs: list[Job]) -> None:
    summary["programs"] = {
        job.spec.path: {
            "outcome": job.outcome,
            "seconds": job.seconds,
            "lane": job.lane,
            **({"gpus": job.gpus} if job.gpus else {}),
            **({"reason": job.reason} if job.reason else {}),
            **({"log": job.log} if job.log else {}),
            **job.details,
        }
        for job in jobs
    }
    counts = collections.Counter(job.outcome for job in jobs)
    summary["counts"] = dict(sorted(counts.items()))
    summary["partial"] = any(job.outcome in ("not run", "running", "stopped") for job in jobs)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the folder to gather everything in")
    parser.add_argument("--dry-run", action="store_true", help="tiny benchmark, outputs neither recorded nor compared")
    parser.add_argument("--programs", nargs="+", default=[], help="programs or folders to run first")
    parser.add_argument("--only", action="store_true", help="run only the --programs")
    parser.add_argument("--deadline", type=float, default=0, help="stop everything after this many seconds")
    parser.add_argument("--gpus-per-run", type=int, default=0, help="GPUs of each side-by-side run (default 2 on 4+)")
    parser.add_argument("--cpu-workers", type=int, default=max(2, (os.cpu_count() or 1) // 3))
    parser.add_argument("--no-benchmark", action="store_true", help="leave out the benchmark's sweep")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)  # a scratch repository (tests)
    args = parser.parse_args(argv)
    root, out = args.root.resolve(), args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    devices = cuda_devices()
    summary = {"platform": platform(), "gpus": devices, "dry_run": args.dry_run, "tf32_overrides": tf32_overrides()}
    if not devices and not args.dry_run:
        why = unusable_gpus() or "torch sees no GPU on this machine"
        summary["refused"] = f"{why}: nothing recorded (recordings/cpu belongs to CI); --dry-run runs anyway"
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(f"gpu-check refused: {summary['refused']}", file=sys.stderr)
        return 2
    if unusable := unusable_gpus():
        summary["gpus_not_usable"] = unusable
        print(f"GPUS NOT USABLE: {unusable}", file=sys.stderr)

    smi = shutil.which("nvidia-smi")
    (out / "nvidia-smi.txt").write_text(
        subprocess.run([smi], capture_output=True, text=True).stdout if smi else "no nvidia-smi on this machine\n"
    )
    write_environment(out, root, record=not args.dry_run)
    (out / "results.jsonl").unlink(missing_ok=True)

    specs = [parse_spec(path, root) for path in all_snippets(root)]
    first = [Path(p).as_posix().removeprefix("./").rstrip("/") for p in args.programs]  # as the repository names them
    specs = order(specs, first, outputs.read_manifest(root), platform(), expected_seconds(root))
    if args.only:
        specs = [s for s in specs if any(s.path == p or s.path.startswith(p + "/") for p in first)]
    per_run = max(1, min(args.gpus_per_run or (2 if devices >= 4 else devices), devices))  # a slot fits the box
    lanes = plan(specs, devices, per_run)
    jobs = [job for lane in lanes.values() for job in lane]
    tag = uuid.uuid4().hex
    summary.update(tag=tag, gpus_per_run=per_run, cpu_workers=args.cpu_workers)
    runner = Runner(args, root, out, devices, tag)
    try:
        runner.run(lanes, per_run)
    except KeyboardInterrupt:
        runner.stop_all("stopped by Ctrl-C")
    finally:
        runner.stop_all("stopped")
        left = kill_tagged(tag, grace_s=5, name=CHECK_TAG)
        summary["left_running"] = left  # processes still tagged after every run ended (killed)
        write_summary(out, summary, jobs)

    summary["benchmark"] = {} if summary["partial"] else run_benchmark(args, root, out, devices, tag)
    kill_tagged(tag, grace_s=5, name=CHECK_TAG)
    if not args.dry_run:  # the recordings this machine made, as a tree to copy over the repository's
        recorded = root / outputs.OUTPUTS / platform()
        if recorded.is_dir():
            shutil.copytree(recorded, out / "recordings" / platform(), dirs_exist_ok=True)
        if (root / outputs.OUTPUTS / outputs.MANIFEST).is_file():
            shutil.copy2(root / outputs.OUTPUTS / outputs.MANIFEST, out / "recordings" / outputs.MANIFEST)
    write_summary(out, summary, jobs)
    print(json.dumps({k: v for k, v in summary.items() if k != "programs"}, indent=1))
    failed = [job for job in jobs if job.outcome not in ("passed", "skipped")]
    return 1 if failed or summary["benchmark"].get("exit", 0) != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
