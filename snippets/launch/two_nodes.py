"""Simulate two nodes on one machine: two
torchrun agents meet through a c10d rendezvous."""
# launch: python snippets/launch/two_nodes.py
# ranks: 2
# timeout: 180
# output-varies: ^MASTER_PORT +(\d+)

# --8<-- [start:launch]
import os
import re
import sys
from pathlib import Path

import torch
from _procs import describe_devices, free_port, node_devices, run_together

# the rendezvous endpoint's port (on a cluster: a fixed one, e.g. 29400)
port = free_port()
node_command = [
    sys.executable,
    "-m",
    "torch.distributed.run",  # = torchrun, with this interpreter
    "--nnodes=2",
    "--nproc-per-node=1",
    "--rdzv-backend=c10d",
    # on a real cluster: the first node's address
    f"--rdzv-endpoint=127.0.0.1:{port}",
    "--rdzv-id=two-nodes-demo",  # the same on every node of one job
    "--rdzv-conf=join_timeout=60",  # give up if the other node never comes
    "--max-restarts=0",
    str(Path(__file__).with_name("env_vars.py")),  # the training script
]
# Two nodes on one machine must not share a
# GPU: each gets its own, or both run on CPU.
visible = node_devices(
    torch.cuda.device_count(),
    nodes=2,
    per_node=1,
    # the GPUs this process was given, if it was given a list
    parent=os.environ.get("CUDA_VISIBLE_DEVICES"),
)
print(describe_devices(visible))
envs = [
    dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES=v)
    for v in visible
]
outputs = run_together([node_command, node_command], envs, timeout_s=150)
# --8<-- [end:launch]

# --8<-- [start:check]
seen = []  # (rank, world size, node) from each agent's worker
for out in outputs:
    found = re.findall(
        r"^rank (\d+) of (\d+) on node (\d+): ok$", out, re.MULTILINE
    )
    assert len(found) == 1, f"expected one worker per node, got:\n{out}"
    seen.append(tuple(map(int, found[0])))
# rank 0's report, not its agent's log: the worker prints the lines
# from WORLD_SIZE to "...: ok"; an agent may still log at exit
# (a TCPStore warning, "recvVector failed ... got 0 bytes")
node0 = next(out for out in outputs if "GROUP_RANK" in out)
start = re.search(r"^WORLD_SIZE ", node0, re.M).start()
end = re.search(r"^rank \d+ of \d+ on node \d+: ok$", node0, re.M).end()
print(
    "\n".join(
        line
        for line in node0[start:end].splitlines()
        if not re.match(r"\[?[WIE]\d{4} ", line)
    )
)
# distinct global ranks
assert sorted(rank for rank, _, _ in seen) == [0, 1], seen
assert all(world == 2 for _, world, _ in seen), seen  # both saw the whole job
# one GROUP_RANK per agent
assert sorted(node for _, _, node in seen) == [0, 1], seen
print(
    "two torchrun agents, one rendezvous: (rank, world size, node) = "
    f"{sorted(seen)}"
)
# --8<-- [end:check]
