"""The fault-tolerance page's restart, across two hosts: one torchrun agent per host, c10d rendezvous.

The hosts are the bed's network namespaces (testbed.py) on one machine, so they share its filesystem: the
snapshot lies in a temporary folder both hosts read and write, the way a cluster's nodes share a network
filesystem. That matters here: only rank 0 (on node1) writes the snapshot, and after a restart node2's worker
resumes from the file node1's worker wrote.
"""

import os
import re
import signal
import sys
import time

from launching import TORCHRUN, TRAIN_RESUMABLE_CHECK, error_lines
from weights import assert_bit_identical, load_weights

# As restart_resume.py and the page's #flaky-restarts: a fresh store per attempt, set for torchrun.
ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def elastic_launch(run_id: str, port: int, *script: str, join_timeout: int = 30) -> list[str]:
    """The page's multi-node launch: c10d rendezvous on node1, one worker per host, one restart allowed."""
    return TORCHRUN + [
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=node1:{port}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf=join_timeout={join_timeout}",  # how long a rendezvous round waits for the other host
        "--max-restarts=1",
        *script,
    ]


def test_worker_crash_on_one_host_restarts_both(bed, tmp_path, uninterrupted):
    """fault-tolerance page, #test-restart, on two hosts: FAIL_AT_STEP=13 in node2's environment only, so
    node2's worker (rank 1: c10d orders the nodes by host name) dies before step 13 of attempt 0. Both
    agents restart their workers, which meet again through the rendezvous, resume from the step-10 snapshot
    and finish; the final weights equal those of an uninterrupted run at the same world size (2), bit for bit
    (restart_resume.py's comparison)."""
    cmd = elastic_launch("fault", 29400, str(TRAIN_RESUMABLE_CHECK), f"--snapshot={tmp_path / 'snapshot.pt'}")
    cmd += [f"--final={tmp_path / 'final.pt'}"]
    procs = {"node1": bed.start("node1", cmd, ENV), "node2": bed.start("node2", cmd, {**ENV, "FAIL_AT_STEP": "13"})}
    started = time.monotonic()
    results = {host: p.wait(timeout=max(1, 240 - (time.monotonic() - started))) for host, p in procs.items()}
    for host, r in results.items():
        assert r.returncode == 0, f"{host}: exit {r.returncode}, timed out {r.timed_out}:\n{r.output}"
    node1, node2 = results["node1"].output, results["node2"].output
    # rank 0 prints, and it is on node1: the crash (rank 1) was node2's worker
    assert "attempt 0: starting at step 0" in node1, node1
    # node1's agent may see node2 rejoin before its own worker's exit, a membership change, which does not count
    # as a restart: then its worker still reads TORCHELASTIC_RESTART_COUNT=0 (seen in every run here).
    assert re.search(r"attempt [01]: starting at step 10", node1), f"no restart from the step-10 snapshot:\n{node1}"
    assert re.search(r"attempt [01]: finished step 23", node1), node1
    assert "attempt" not in node2, node2
    assert re.search(r"failed \(exitcode: 1\) local_rank: 0 \(pid: \d+\)", node2), node2  # the agent saw it
    assert_bit_identical(uninterrupted, load_weights(tmp_path / "final.pt"), after="the restart")


# train_resumable_check.py with no fault but a sleep of 0.5 s before each step, so that a host can be killed
# mid-training; the programs themselves are unchanged.
SLOW_TRAIN = f"""
import sys, time
sys.path.insert(0, {str(TRAIN_RESUMABLE_CHECK.parent)!r})
import train_resumable_check
train_resumable_check.fault_if_asked = lambda step: time.sleep(0.5)
sys.argv[0] = {str(TRAIN_RESUMABLE_CHECK)!r}
train_resumable_check.main()
"""


def test_host_lost_fails_the_job(bed, tmp_path):
    """A whole host dies (SIGKILL of node2's agent and its worker) during training. node1's worker loses
    its gloo peer and fails; node1's agent spends its restart and opens a new rendezvous round, which
    waits for a second node until `join_timeout` and then gives up: with `--nnodes=2` one host cannot go
    on. The survivor exits non-zero within a bounded time and says why (24 s after the kill, measured).

    Killing only node2's torchrun process is not the same: its worker runs in a session of its own, outlives
    its agent and trains to the end, and node1's agent, its worker done, then waits for the dead agent (still
    running 90 s later, in one run: its exit barrier waits 300 s by default)."""
    snapshot = f"--snapshot={tmp_path / 'snapshot.pt'}"
    cmd = elastic_launch("host-lost", 29400, "--no-python", sys.executable, "-c", SLOW_TRAIN, snapshot, join_timeout=15)
    node1 = bed.start("node1", cmd, ENV)
    bed.start("node2", cmd, ENV)
    node1.wait_for(r"^attempt 0: starting at step 0$", timeout=150)
    time.sleep(2)  # a few steps in
    for pid in bed.pids(bed.namespace("node2")):  # the host dies: its agent and its worker, at once
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    killed = time.monotonic()
    r = node1.wait(timeout=90)
    took = time.monotonic() - killed
    assert r.returncode not in (0, None), f"exit {r.returncode}, timed out {r.timed_out}:\n{r.output}"
    assert took < 15 + 45, f"{took:.0f} s after the kill"  # join_timeout, plus the failure and restart
    # the dead host's kernel closed its sockets: a reset (RST) if data sat unread in them, else a close (FIN);
    # gloo reports either, naming the peer (each seen in make test runs)
    lost = r"Read error \[10\.77\.0\.2\]:\d+: Connection reset by peer|Connection closed by peer \[10\.77\.0\.2\]:\d+"
    assert re.search(lost, r.output), error_lines(r.output)
    # the worker dies of that error with gloo's threads still running: exit 1, or SIGABRT (-6) when the interpreter
    # shutdown races them (the exit abort of the debugging page; seen once in a make test run)
    assert re.search(r"failed \(exitcode: (1|-6)\) local_rank: 0 \(pid: \d+\)", r.output), r.output
    assert "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError" in r.output, error_lines(r.output)
    assert "attempt 1" not in r.output and "finished" not in r.output, r.output
