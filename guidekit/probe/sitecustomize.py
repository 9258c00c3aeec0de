"""Loaded at start-up by every process a snippet starts (the runner puts this folder on PYTHONPATH): each process that
joins a process group writes what it really used, so the manifest records the program's own report, not a guess.

It imports nothing heavy: it waits for torch.distributed.distributed_c10d to be imported by the program, then wraps
init_process_group to write {rank, world_size, backend, device} to $GUIDE_RANK_REPORTS/<pid>.json.
"""

import importlib.abc
import json
import os
import sys

C10D = "torch.distributed.distributed_c10d"
REPORTS = os.environ.get("GUIDE_RANK_REPORTS")


def _report(c10d) -> None:
    import torch

    backend = str(c10d.get_backend())
    if backend == "undefined":  # no backend named (init_device_mesh does this): one per device type
        config = str(c10d.get_backend_config())  # e.g. "cpu:gloo,cuda:nccl"
        backend = "nccl" if torch.cuda.is_available() and "cuda:nccl" in config else "gloo"
    device = "CPU"
    if "nccl" in backend and torch.cuda.is_available():
        device = torch.cuda.get_device_name(torch.cuda.current_device())
    entry = {"rank": c10d.get_rank(), "world_size": c10d.get_world_size(), "backend": backend, "device": device}
    with open(os.path.join(REPORTS, f"{os.getpid()}.json"), "w", encoding="utf-8") as out:
        json.dump(entry, out)


def _wrap(c10d) -> None:
    init = c10d.init_process_group

    def init_process_group(*args, **kwargs):
        result = init(*args, **kwargs)
        try:
            _report(c10d)
        except Exception as error:  # a report must never break the program it observes
            print(f"guidekit probe: no report ({error!r})", file=sys.stderr)
        return result

    init_process_group.__wrapped__ = init
    init_process_group.__doc__ = init.__doc__
    c10d.init_process_group = init_process_group


class _Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != C10D:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                load = spec.loader.exec_module

                def exec_module(module, load=load):
                    load(module)
                    _wrap(module)

                spec.loader.exec_module = exec_module
                return spec
        return None


if REPORTS and os.path.isdir(REPORTS):
    sys.meta_path.insert(0, _Watch())
