"""The torchrun page's Slurm batch scripts, submitted with sbatch to a real two-node Slurm cluster.

The cluster (slurm.py) is Debian's Slurm 22.05 on a test bed (testbed.py): munged and slurmctld on node1,
one slurmd on each of node1 and node2, each host a network namespace with its own host name. The page's
scripts are submitted as they are; only options on the sbatch command line (which override the script's
#SBATCH lines) adapt them to CPU nodes: `--gpus-per-node=0` (the nodes have no GPUs) and, to keep a
two-core machine's run short, `--ntasks-per-node=2` for the one-task-per-GPU script.
"""

import re
from pathlib import Path

import slurm
from testbed import TwoHosts, leftovers

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN_SCRIPT = "snippets/launch/slurm_train.sbatch"  # srun torchrun, one worker per GPU
SRUN_SCRIPT = "snippets/launch/slurm_srun.sbatch"  # srun python env_vars.py, one task per GPU
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


def test_srun_script_on_two_nodes(cluster):
    """torchrun page, #slurm-srun: slurm_srun.sbatch as it is (`srun python env_vars.py`, MASTER_ADDR
    and MASTER_PORT exported by the script) on two nodes, two tasks each: every task computes its rank,
    local rank and local world size from SLURM_* alone, and env_vars.py's own checks pass."""
    job = cluster.sbatch([*CPU_NODES, "--ntasks-per-node=2", SRUN_SCRIPT], timeout=400)
    assert job.returncode == 0, f"{job}\n{cluster.logs()}"
    found = re.findall(r"^rank (\d+) of (\d+) on node (\d+): ok$", job.output, re.MULTILINE)
    assert sorted(found) == [("0", "4", "0"), ("1", "4", "0"), ("2", "4", "1"), ("3", "4", "1")], job.output
    table = dict(re.findall(r"^(MASTER_ADDR|MASTER_PORT|WORLD_SIZE) +(\S+)$", job.output, re.MULTILINE))
    assert table == {"WORLD_SIZE": "4", "MASTER_ADDR": "node1", "MASTER_PORT": str(20000 + job.job_id % 10000)}
    ran_on_both_nodes(cluster, job)


def test_torchrun_script_on_two_nodes(cluster):
    """torchrun page, #slurm-torchrun: slurm_train.sbatch, unchanged, trains train_torchrun.py on two CPU
    nodes when the GPU request is overridden on the command line and NPROC_PER_NODE sets the worker count
    (its default, `gpu`, makes torchrun raise "Cuda is not available." without CUDA): one torchrun per node
    meets at `$head_node:29500`, 2 workers each, world 4; the program asserts that the loss fell and the
    replicas are bit-identical, then prints its check line."""
    job = cluster.sbatch([*CPU_NODES, TORCHRUN_SCRIPT], env={"NPROC_PER_NODE": "2"}, timeout=400)
    assert job.returncode == 0, f"{job}\n{cluster.logs()}"
    assert "4 ranks on cpu (gloo): replicas identical" in job.output, job.output
    assert len(re.findall(r"^epoch \d: mean loss \d\.\d{4}$", job.output, re.MULTILINE)) == 5, job.output
    ran_on_both_nodes(cluster, job)


def test_cluster_leaves_nothing_behind(slurm_available):
    """The cluster itself: once it is closed, nothing of the bed (no daemon either) and no folder is left."""
    with TwoHosts() as bed, slurm.SlurmCluster(bed) as made:
        assert made.node_states() == {"node1": "idle", "node2": "idle"}
        assert sorted(made.daemons) == ["munged", "slurmctld", "slurmd node1", "slurmd node2"]
    assert not made.folder.exists()
    assert leftovers(bed.prefix, bed.inodes) == []
