"""Play Slurm on one machine: start env_vars.py
as `srun` would, 2 nodes x 2 tasks, no torchrun."""
# launch: python snippets/launch/slurm_sim.py
# ranks: 4
# timeout: 180
# output-varies: ^MASTER_PORT +(\d+)

# --8<-- [start:parsers]
import os
import re
import sys
from pathlib import Path

import torch
from _procs import describe_devices, free_port, node_devices, run_together
from env_vars import first_host, tasks_on_node

assert first_host("gpu[07-08,11],cpu1") == "gpu07"  # zero padding kept
assert first_host("node12") == "node12"
assert [tasks_on_node("2(x3),1", n) for n in range(4)] == [2, 2, 2, 1]
# --8<-- [end:parsers]

# --8<-- [start:srun]
nodes, tasks_per_node = 2, 2
common = {  # what srun sets the same in every task
    # e.g. gpu[07-08]; the first host becomes MASTER_ADDR
    "SLURM_JOB_NODELIST": "localhost",
    "SLURM_NNODES": str(nodes),
    "SLURM_NTASKS": str(nodes * tasks_per_node),
    "SLURM_TASKS_PER_NODE": f"{tasks_per_node}(x{nodes})",
    "MASTER_PORT": str(free_port()),  # the sbatch script exports a fixed one
    "OMP_NUM_THREADS": "1",
}
base = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "RANK")}
# simulated nodes share no GPU, and use only the GPUs this process was given
visible = node_devices(
    torch.cuda.device_count(),
    nodes,
    tasks_per_node,
    parent=os.environ.get("CUDA_VISIBLE_DEVICES"),
)
print(describe_devices(visible))
envs = [
    dict(
        base,
        **common,
        SLURM_PROCID=str(node * tasks_per_node + local),
        SLURM_NODEID=str(node),
        SLURM_LOCALID=str(local),
        CUDA_VISIBLE_DEVICES=visible[node],
    )
    for node in range(nodes)
    for local in range(tasks_per_node)
]
# what srun starts in every task
command = [sys.executable, str(Path(__file__).with_name("env_vars.py"))]
outputs = run_together([command] * len(envs), envs, timeout_s=150)
# --8<-- [end:srun]

# --8<-- [start:check]
for env, out in zip(envs, outputs):
    found = re.search(r"^rank (\d+) of (\d+) on node (\d+): ok$", out, re.M)
    rank, world, node = map(int, found.groups())
    assert (rank, world, node) == (
        int(env["SLURM_PROCID"]),
        4,
        int(env["SLURM_NODEID"]),
    ), out
print(outputs[0])
print("4 tasks from Slurm's variables alone: ranks 0-3, 2 per node")
# --8<-- [end:check]
