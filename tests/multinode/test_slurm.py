"""The torchrun page's Slurm batch scripts, submitted with sbatch to a real two-node Slurm cluster.

The cluster (slurm.py) is Debian's Slurm 22.05 on a test bed (testbed.py): munged and slurmctld on node1,
one slurmd on each of node1 and node2, each host a network namespace with its own host name. The page's
scripts are submitted as they are; only options on the sbatch command line (which override the script's
#SBATCH lines) adapt them to CPU nodes: `--gpus-per-node=0` (the nodes have no GPUs) and, to keep a
two-core machine's run short, `--ntasks-per-node=2` for the one-task-per-GPU script.
"""

import re

import slurm
from recording import TRAIN_LINES
from testbed import TwoHosts, leftovers
from weights import assert_bit_identical, load_weights

TORCHRUN_SCRIPT = "snippets/launch/slurm_train.sbatch"  # srun torchrun, one worker per GPU
SRUN_SCRIPT = "snippets/launch/slurm_srun.sbatch"  # srun python env_vars.py, one task per GPU
REQUEUE_SCRIPT = "snippets/launch/slurm_requeue.sbatch"  # srun torchrun $TRAIN, requeued when warned
CPU_NODES = ["--gpus-per-node=0"]  # overrides the scripts' `#SBATCH --gpus-per-node=8`


def ran_on_both_nodes(cluster: slurm.SlurmCluster, job: slurm.Job) -> None:
    """The job got node1 and node2, its script ran on node1, and its srun step started on each node."""
    fields = cluster.job_fields(job.job_id)
    assert (fields["NodeList"], fields["BatchHost"]) == ("node[1-2]", "node1"), fields
    steps = cluster.step_nodes(job.job_id)
    assert steps == {"node1": [f"{job.job_id}.0"], "node2": [f"{job.job_id}.0"]}, steps


def test_gpu_request_needs_override(cluster):
    """Unchanged, the scripts' `--gpus-per-node=8` is refused on nodes without GPUs, and `--gres=none`
    does not clear it (it is a separate option); `--gpus-per-node=0` does (the tests below)."""
    for extra in ([], ["--gres=none"]):
        job = cluster.sbatch([*extra, SRUN_SCRIPT], timeout=30)
        assert job.returncode == 1 and job.job_id is None, job
        assert "sbatch: error: Invalid generic resource (gres) specification" in job.sbatch_output, job


def test_srun_script_on_two_nodes(cluster, recording):
    """torchrun page, #slurm-srun: slurm_srun.sbatch as it is (`srun python env_vars.py`, MASTER_ADDR
    and MASTER_PORT exported by the script) on two nodes, two tasks each: every task computes its rank,
    local rank and local world size from SLURM_* alone, and env_vars.py's own checks pass."""
    job = cluster.sbatch([*CPU_NODES, "--ntasks-per-node=2", SRUN_SCRIPT], timeout=400)
    assert job.returncode == 0, f"{job}\n{cluster.logs()}"
    found = re.findall(r"^rank (\d+) of (\d+) on node (\d+): ok$", job.output, re.MULTILINE)
    assert sorted(found) == [("0", "4", "0"), ("1", "4", "0"), ("2", "4", "1"), ("3", "4", "1")], job.output
    table = dict(re.findall(r"^(MASTER_ADDR|MASTER_PORT|WORLD_SIZE) +(\S+)$", job.output, re.MULTILINE))
    assert table == {"WORLD_SIZE": "4", "MASTER_ADDR": "node1", "MASTER_PORT": str(20000 + job.job_id % 10000)}
    logged = re.compile(r"^\[[WIE]\d{4} ")  # torch's C++ log lines (timestamped), e.g. a c10d warning
    lines = [line for line in job.output.splitlines() if not logged.match(line)]
    # each task prints its own "ok" line into the job's one output, in no set order (a make test run saw rank 2's
    # first); rank 0's tables come in order: compare those as printed, then the "ok" lines sorted
    ok = re.compile(r"^rank \d+ of \d+ on node \d+: ok$")
    recording("slurm_srun", [x for x in lines if not ok.match(x)] + sorted(filter(ok.match, lines)))
    ran_on_both_nodes(cluster, job)


def test_torchrun_script_on_two_nodes(cluster, recording):
    """torchrun page, #slurm-torchrun: slurm_train.sbatch, unchanged, trains train_torchrun.py on two CPU
    nodes when the GPU request is overridden on the command line and NPROC_PER_NODE sets the worker count
    (its default, `gpu`, makes torchrun raise "Cuda is not available." without CUDA): one torchrun per node
    meets at `$head_node:29500`, 2 workers each, world 4; the program asserts that the loss fell and the
    replicas are bit-identical, then prints its check line."""
    job = cluster.sbatch([*CPU_NODES, TORCHRUN_SCRIPT], env={"NPROC_PER_NODE": "2"}, timeout=400)
    assert job.returncode == 0, f"{job}\n{cluster.logs()}"
    assert "4 ranks on cpu (gloo): replicas identical" in job.output, job.output
    assert len(re.findall(r"^epoch \d: mean loss \d\.\d{4}$", job.output, re.MULTILINE)) == 5, job.output
    recording("slurm_train", re.findall(TRAIN_LINES, job.output, re.MULTILINE))
    ran_on_both_nodes(cluster, job)


FINISHED = r"attempt N: finished step 23, loss \d\.\d{4} -> \d\.\d{4}"  # 24 steps: 8 per epoch at world 2


def progress(output: str) -> list[str]:
    """The batch script's and rank 0's progress lines, in order."""
    return re.findall(r"^(?:job \d+, requeued \d times|attempt \d: .*)$", output, re.MULTILINE)


def test_requeued_job_resumes_bit_identical(cluster, tmp_path, uninterrupted, recording):
    """fault-tolerance page, #slurm-requeue: slurm_requeue.sbatch, unchanged, on two CPU nodes, one worker each.
    PREEMPT_AT_STEP=3 has rank 0 send the job the same signal `--signal=USR1@300` sends before the time limit
    (`scancel --signal=USR1`, to every job step); each torchrun passes it on to its worker, the workers agree to
    stop after the step under way, snapshot at step 4, and rank 0 requeues the job. Slurm starts it again under
    the same job id (the snapshot's name), it resumes at step 4 and ends with weights bit-identical to an
    uninterrupted run of the same program at the same world size (2).
    World 2: with more ranks DDP's bucket rebuild makes a resumed run differ in the last bits
    (tests/programs/test_resume_bits.py)."""
    env = {"NPROC_PER_NODE": "1", "SNAPSHOT_DIR": str(tmp_path / "snapshots"), "PREEMPT_AT_STEP": "3"}
    env["TRAIN"] = "snippets/fault/train_resumable_check.py"  # the program with PREEMPT_AT_STEP
    job = cluster.sbatch([*CPU_NODES, REQUEUE_SCRIPT, f"--final={tmp_path / 'requeued.pt'}"], env=env, timeout=400)
    assert job.returncode == 0, f"{job}\n{cluster.logs()}"

    lines = progress(job.output)
    assert lines[:5] == [
        f"job {job.job_id}, requeued 0 times",
        "attempt 0: starting at step 0",
        "attempt 0: warned, stopping at step 4",
        f"job {job.job_id}, requeued 1 times",
        "attempt 1: starting at step 4",
    ], job.output
    assert re.fullmatch(FINISHED.replace("N", "1"), lines[5]) and len(lines) == 6, job.output
    recording("slurm_requeue", lines)
    fields = cluster.job_fields(job.job_id)
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "1"), fields

    assert_bit_identical(uninterrupted, load_weights(tmp_path / "requeued.pt"), after="the requeue")


def test_cluster_leaves_nothing_behind(slurm_available):
    """The cluster itself: once it is closed, nothing of the bed (no daemon either) and no folder is left."""
    with TwoHosts() as bed, slurm.SlurmCluster(bed) as made:
        assert made.node_states() == {"node1": "idle", "node2": "idle"}
        assert sorted(made.daemons) == ["munged", "slurmctld", "slurmd node1", "slurmd node2"]
    assert not made.folder.exists()
    assert leftovers(bed.prefix, bed.inodes) == []
