"""Print and check what a launcher tells each
process: torchrun, or Slurm's srun without torchrun."""
# launch: torchrun --standalone --nproc-per-node=2 snippets/launch/env_vars.py
# output-varies: ^MASTER_PORT +(\d+)
# output-varies: ^TORCHELASTIC_RUN_ID +(\S+)

# --8<-- [start:vars]
import os
import re

import torch
import torch.distributed as dist

# may differ
PER_RANK = ["RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "LOCAL_WORLD_SIZE"]
PER_RUN = [  # the same in every process of the run
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
]
# --8<-- [end:vars]


# --8<-- [start:slurm]
def first_host(nodelist: str) -> str:
    """First host of a Slurm node list: 'gpu[07-08,11],cpu1' -> 'gpu07'."""
    prefix, ranges = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist).groups()
    return prefix + re.split(r"[,-]", ranges)[0] if ranges else prefix


def tasks_on_node(tasks_per_node: str, node_id: int) -> int:
    """SLURM_TASKS_PER_NODE is compressed:
    '2(x3),1' = 2, 2, 2, 1 tasks on nodes 0-3."""
    counts = []
    for part in tasks_per_node.split(","):
        count, repeat = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part).groups()
        counts += [int(count)] * int(repeat or 1)
    return counts[node_id]


def env_from_slurm() -> None:
    """Under `srun python train.py` (no torchrun),
    set torchrun's variables from Slurm's."""
    if "RANK" in os.environ or "SLURM_PROCID" not in os.environ:
        return  # torchrun set them already, or this is not a Slurm task
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
    os.environ["LOCAL_WORLD_SIZE"] = str(
        tasks_on_node(
            os.environ["SLURM_TASKS_PER_NODE"], int(os.environ["SLURM_NODEID"])
        )
    )
    os.environ.setdefault(
        "MASTER_ADDR", first_host(os.environ["SLURM_JOB_NODELIST"])
    )
    # the sbatch script may export its own
    os.environ.setdefault("MASTER_PORT", "29500")


# --8<-- [end:slurm]


# same as snippets/ddp/train_torchrun.py:setup
def setup() -> torch.device:
    """Join the process group: NCCL and one GPU per rank, else gloo on CPU."""
    local_rank = int(os.environ["LOCAL_RANK"])  # set by torchrun
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", local_rank)
        # before init: else every rank also allocates on GPU 0
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return device


# --8<-- [start:check]
def check(everyone: list[dict[str, str]]) -> None:
    """What must hold for any launch, then what torchrun adds."""
    world_size = len(everyone)
    ranks = sorted(int(e["RANK"]) for e in everyone)
    assert ranks == list(range(world_size)), "each global rank exactly once"
    nodes: dict[int, list[dict[str, str]]] = {}
    for e in everyone:
        nodes.setdefault(int(e["node"]), []).append(e)
    for node, members in nodes.items():
        local_ranks = sorted(int(e["LOCAL_RANK"]) for e in members)
        assert local_ranks == list(range(len(members))), (
            f"node {node}: local ranks 0..n-1"
        )
        assert all(int(e["LOCAL_WORLD_SIZE"]) == len(members) for e in members)
    for name in PER_RUN:
        assert len({e[name] for e in everyone}) == 1, (
            f"{name} differs between ranks"
        )
    assert int(everyone[0]["WORLD_SIZE"]) == world_size
    if everyone[0]["TORCHELASTIC_RUN_ID"] != "-":  # launched by torchrun
        # one role: "default"
        assert all(e["ROLE_RANK"] == e["RANK"] for e in everyone)
        assert int(everyone[0]["GROUP_WORLD_SIZE"]) == len(nodes)
        assert everyone[0]["TORCHELASTIC_RESTART_COUNT"] == "0"  # first attempt
        # ranks are numbered node by node: node 0's, then node 1's, ...
        first = 0
        for node in sorted(nodes):
            assert all(
                int(e["RANK"]) == first + int(e["LOCAL_RANK"])
                for e in nodes[node]
            )
            first += len(nodes[node])


# --8<-- [end:check]


# --8<-- [start:main]
def main() -> None:
    env_from_slurm()
    device = setup()
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        assert rank == int(os.environ["RANK"]) and world_size == int(
            os.environ["WORLD_SIZE"]
        )
        mine = {name: os.environ.get(name, "-") for name in PER_RANK + PER_RUN}
        mine["node"] = os.environ.get(
            "GROUP_RANK", os.environ.get("SLURM_NODEID", "0")
        )
        mine["device"] = str(device)
        everyone: list = [None] * world_size
        # every rank sees every rank's variables
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            for name in PER_RUN:
                print(f"{name:<27}{everyone[0][name]}")
            print()
            columns = PER_RANK + ["device"]
            # header, then one row per rank
            for row in [dict(zip(columns, columns))] + everyone:
                print(
                    "".join(f"{row[c]:<{len(c) + 2}}" for c in columns).rstrip()
                )
        check(everyone)
        # one rank at a time: lines of ranks printing at once can mix mid-line
        for turn in range(world_size):
            if turn == rank:
                print(
                    f"rank {rank} of {world_size} on node {mine['node']}: ok",
                    flush=True,
                )
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
# --8<-- [end:main]
