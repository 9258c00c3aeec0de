"""Reproducer: an FSDP2 model run under CommDebugMode outlives its program's teardown, and keeps the group alive.

    python tests/repro/fsdp2_held_at_exit.py

Each variant, in a 2-rank torchrun job of its own, builds a 2-layer FSDP2 model, runs one forward and backward, lets
the model go, collects garbage, and destroys the group; rank 0 prints how many FSDP parameter groups are still alive
and how many of gloo's threads run.
Measured (CPU, gloo), param groups and threads:
                      plain   TorchDispatchMode   CommDebugMode   ModTracker (what CommDebugMode tracks modules with)
    torch 2.15.0      0, 0    0, 0                2, 3            2, 3
    torch 2.14.1      0, 0    0, 0                2, 3            2, 3
    torch 2.10.0      0, 0    0, 0                0, 0            2, 0   (its mesh info did not hold the group)

What keeps the models runs through FSDP2's autograd nodes (RegisterPostBackwardFunctionBackward's context
holds a parameter group), where the cyclic garbage collector does not follow C++ references back into Python
(THPCppFunction_traverse skips a node with more than one owner; https://github.com/pytorch/pytorch/pull/183211 shows
the FSDP1 form), and each FSDP parameter group's mesh info holds the process group itself. The guide's programs that
use CommDebugMode with FSDP2 declare it (`# holds-group-at-exit:`). Not a pytest test: it prints what it measures.
"""

import gc
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn as nn
from torch.distributed._tools.mod_tracker import ModTracker
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
from torch.distributed.tensor.debug import CommDebugMode
from torch.utils._python_dispatch import TorchDispatchMode


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


VARIANTS = {
    "plain": torch.enable_grad,
    "TorchDispatchMode": PassThrough,
    "CommDebugMode": CommDebugMode,
    "ModTracker": ModTracker,
}


def gloo_threads() -> int:
    names = [Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir("/proc/self/task")]
    return sum(name in ("gloo_tcp_loop", "pt_gloo_runloop") for name in names)


def step(mesh, context) -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh)
    with context():
        model(torch.randn(4, 8)).sum().backward()


def main() -> None:
    name = os.environ.get("VARIANT")
    if name is None:  # the outer run: each variant in a job of its own
        for variant in VARIANTS:
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__]
            subprocess.run(command, env={**os.environ, "VARIANT": variant}, check=True)
        return
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2,))
    step(mesh, VARIANTS[name])
    gc.collect()
    dist.destroy_process_group()
    getattr(mesh, "_pg_registry", {}).clear()
    if os.environ["RANK"] == "0":
        alive = sum(isinstance(o, FSDPParamGroup) for o in gc.get_objects())
        print(f"{name:18} FSDP param groups alive: {alive}, gloo threads: {gloo_threads()}")


if __name__ == "__main__":
    main()
