"""A real Slurm cluster on a test bed (testbed.py): munged, slurmctld and one slurmd per host.

    with TwoHosts() as bed, SlurmCluster(bed) as cluster:
        job = cluster.sbatch(["--gpus-per-node=0", "snippets/launch/slurm_srun.sbatch"], timeout=300)

Everything runs inside the bed's namespaces, so the bed's teardown kills it all: munged and slurmctld on
`node1` (its UTS host name is the `SlurmctldHost`; its /etc/hosts names both nodes), and one
`slurmd -N nodeK` on each host. The configuration (`slurm.conf`, `cgroup.conf`), the munge key and socket,
the state, spool and log folders and the jobs' output live in one temporary folder, removed on exit; the
machine's /etc/slurm, /etc/munge and /etc/hosts are not read or written. Clients (sbatch, sinfo, srun in a
job) find the configuration through `SLURM_CONF`, the munge socket through `AuthInfo` in it.

Choices the machine forces: processes are tracked by /proc (`proctrack/linuxproc`) and not bound
(`task/none`), and `cgroup.conf` names `cgroup/v1` because autodetection fails on a hybrid cgroup layout.
The nodes declare 32 CPUs whatever the machine has (`SlurmdParameters=config_overrides`), the most the
page's scripts ask for, so their `--cpus-per-task` and `--ntasks-per-node` are accepted unchanged. They have
no GPUs: a script's GPU request has to be overridden on the sbatch command line (`--gpus-per-node=0`).

Needs root and Debian's Slurm 22.05 (`slurmctld slurmd slurm-client munge`).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from testbed import Proc, TwoHosts

CONTROLLER = "node1"  # runs munged and slurmctld next to its slurmd
CPUS = 32  # per node, declared: the page's scripts ask for up to 8 tasks x 4 CPUs
# A job in one of these states has ended for good (a requeued one goes back to PENDING instead).
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "srun")


def unavailable() -> str | None:
    """Why no cluster can be built here, or None if it can (the bed's own needs are checked by the bed)."""
    if os.geteuid() != 0:
        return "munged and slurmd run as root here"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"Slurm or munge not installed ({', '.join(missing)} not found; apt-get install slurmctld slurmd slurm-client munge)"
    return None


def slurm_conf(folder: Path, nodes: list[str]) -> str:
    """A minimal slurm.conf: one partition of `nodes`, no accounting, no cgroups in use.

    `MinJobAge=3600` keeps a finished job's record for the cluster's life (300 s by default): the tests read
    it after the job (`scontrol show job`). `MinJobAge=0` does not mean "never purge" as the slurm.conf man
    page says: Slurm 22.05 raises it to 2 s ("MinJobAge must be at least 2"; `scontrol show config` says
    `MinJobAge = 2 sec`), and the once-a-minute purge pass then removed a record between the job's end and
    the test's question once in about fifteen runs ("Invalid job id specified"; `sbatch --wait` once said
    "Job 1 no longer found"). Two settings keep the tests short: `cred_expire=10` (a requeued job waits as
    long as a credential lives before it may start again, 120 s by default), and
    `sched_interval=2,bf_interval=2`: a requeued job is started by a scheduling pass once it may start again,
    and one comes every 2 s, not up to 30 s (backfill) or 60 s later."""
    names = ",".join(nodes)
    return f"""\
ClusterName=bed
SlurmctldHost={CONTROLLER}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge/munge.socket,cred_expire=10
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool/%n
SlurmctldPidFile={folder}/run/slurmctld.pid
SlurmdPidFile={folder}/run/slurmd-%n.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmctldDebug=debug
SlurmdLogFile={folder}/log/slurmd-%n.log
PlugStackConfig={folder}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
KillWait=5
MinJobAge=3600
SchedulerParameters=sched_interval=2,bf_interval=2
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={names} CPUs={CPUS} State=UNKNOWN
PartitionName=bed Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class Job:
    """A finished batch job: sbatch's own result and the job's output file."""

    job_id: int | None
    returncode: int | None  # the job's exit code (128 + signal if one killed it), sbatch's if it refused the job,
    # None if the job had not finished at the timeout
    sbatch_output: str
    output: str  # what the batch script and its job steps wrote (--output)
    seconds: float


class SlurmCluster:
    """munged + slurmctld + one slurmd per host of `bed`, from a generated configuration in a temporary folder."""

    def __init__(self, bed: TwoHosts, start_timeout: float = 90):
        self.bed = bed
        self.nodes = list(bed.hosts)
        self.start_timeout = start_timeout
        self.folder = Path(tempfile.mkdtemp(prefix="mgpu-slurm-"))
        self.conf = self.folder / "slurm.conf"
        self.daemons: dict[str, Proc] = {}

    # --- life cycle ---
    def __enter__(self) -> SlurmCluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Tear the bed down (it kills every daemon and job in its namespaces), then remove the folder."""
        self.bed.teardown()
        shutil.rmtree(self.folder, ignore_errors=True)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of every Slurm command: this configuration, and this interpreter's bin folder
        first on PATH, so a job's `python` and `torchrun` are the test's."""
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return {"SLURM_CONF": str(self.conf), "PATH": path, **(extra or {})}

    def start(self) -> None:
        for sub in ("munge", "state", "run", "log", "jobs", *(f"spool/{n}" for n in self.nodes)):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        (self.folder / "munge").chmod(0o700)
        key = self.folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.conf.write_text(slurm_conf(self.folder, self.nodes))
        (self.folder / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")  # autodetect fails on hybrid
        (self.folder / "plugstack.conf").write_text("")
        munge = self.folder / "munge"
        self.daemons["munged"] = self.bed.start(
            CONTROLLER,
            ["munged", "--foreground", "--force", f"--key-file={munge}/munge.key", f"--socket={munge}/munge.socket",
             f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed"],
        )  # fmt: skip
        self._wait(lambda: (munge / "munge.socket").exists(), "munged's socket", self.daemons["munged"])
        self.daemons["slurmctld"] = self.bed.start(CONTROLLER, ["slurmctld", "-D", "-f", str(self.conf)], self.env())
        for node in self.nodes:
            self.daemons[f"slurmd {node}"] = self.bed.start(
                node, ["slurmd", "-D", "-N", node, "-f", str(self.conf)], self.env()
            )
        self._wait(lambda: self.node_states() == {n: "idle" for n in self.nodes}, "all nodes idle")

    def _wait(self, ready, what: str, proc: Proc | None = None) -> None:
        """Poll `ready()` until true, for at most start_timeout seconds; on failure say why, with the logs."""
        deadline = time.monotonic() + self.start_timeout
        for _ in range(int(self.start_timeout / 0.5) + 1):  # bounded
            if ready():
                return
            dead = [name for name, p in self.daemons.items() if p.popen.poll() is not None]
            if dead or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        raise RuntimeError(f"Slurm test cluster: no {what} within {self.start_timeout} s\n{self.logs()}")

    # --- commands ---
    def run(self, cmd: list[str], host: str = CONTROLLER, env: dict[str, str] | None = None, timeout: float = 30):
        """A Slurm client command on a host of the cluster."""
        return self.bed.run(host, cmd, self.env(env), timeout=timeout)

    def node_states(self) -> dict[str, str]:
        """{node: state} as sinfo reports it, e.g. {'node1': 'idle', 'node2': 'idle'}; {} if it cannot."""
        done = self.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], timeout=15)
        if done.returncode != 0:
            return {}
        return dict(line.split() for line in done.output.splitlines() if len(line.split()) == 2)

    def sbatch(self, args: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> Job:
        """`sbatch` from the repository root on the controller, then the job's state once a second until it
        has finished (as `sbatch --wait` would, every 2 s); the job's output comes back.

        The job runs in the repository (the page's scripts use paths relative to it), its output goes to a
        file of the temporary folder. `args` are sbatch options, the script and its arguments.
        """
        root = Path(__file__).resolve().parents[2]
        out = self.folder / "jobs" / "job-%j.out"
        started = time.monotonic()
        done = self.run(["sbatch", f"--chdir={root}", f"--output={out}", *args], env=env, timeout=30)
        found = re.search(r"Submitted batch job (\d+)", done.output)
        job_id = int(found[1]) if found else None
        returncode = None if job_id else done.returncode
        for _ in range(int(timeout) + 1 if job_id else 0):  # bounded: one question a second
            fields = self.job_fields(job_id)
            if fields["JobState"] in FINISHED:
                code, signal = map(int, fields["ExitCode"].split(":"))
                returncode = 128 + signal if signal else code
                break
            if time.monotonic() - started > timeout:
                break
            time.sleep(1)
        path = self.folder / "jobs" / f"job-{job_id}.out"
        output = path.read_text(errors="replace") if job_id and path.exists() else ""
        return Job(job_id, returncode, done.output, output, time.monotonic() - started)

    def job_fields(self, job_id: int) -> dict[str, str]:
        """`scontrol show job` as {field: value}, e.g. NodeList, BatchHost, ExitCode, JobState."""
        done = self.run(["scontrol", "show", "job", "--oneliner", str(job_id)], timeout=15)
        fields = dict(re.findall(r"(\S+?)=(\S*)", done.output))
        assert "JobId" in fields, f"scontrol show job {job_id}: {done.output.strip()}\n{self.logs(job_id)}"
        return fields

    def step_nodes(self, job_id: int) -> dict[str, list[str]]:
        """{node: [step ids]}: where each slurmd says it launched a step (not the batch step) of the job."""
        found = {}
        for node in self.nodes:
            log = self.folder / "log" / f"slurmd-{node}.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            found[node] = re.findall(rf"launch task StepId=({job_id}\.\d+) request", text)
        return found

    def logs(self, job_id: int | None = None) -> str:
        """The daemons' own output and log files, for a failure message; with a job id, first every line of
        slurmctld's log about that job."""
        parts = [f"--- {name} (exit {p.popen.poll()}):\n{p.output()[-3000:]}" for name, p in self.daemons.items()]
        controller_log = self.folder / "log" / "slurmctld.log"
        if job_id is not None and controller_log.exists():
            about = [x for x in controller_log.read_text(errors="replace").splitlines() if f"JobId={job_id}" in x]
            parts.insert(0, f"--- slurmctld.log, JobId={job_id}:\n" + "\n".join(about))
        for log in sorted((self.folder / "log").glob("*.log")) + [self.folder / "munge" / "munged.log"]:
            if log.exists():
                parts.append(f"--- {log.name}:\n{log.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)
