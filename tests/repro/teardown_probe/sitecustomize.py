"""Probe: does each program's destroy_process_group() free its group, or does something still hold it?

    rm -f /tmp/teardown_probe.txt
    PYTHONPATH=tests/repro/teardown_probe pytest snippets
    sort /tmp/teardown_probe.txt | uniq -c

Python imports this module at start-up in every process (the runner passes PYTHONPATH on). Once
torch.distributed.distributed_c10d is imported, it wraps init_process_group and destroy_process_group, and logs per
process how many of the threads started by init are still alive after a full destroy, and again at exit. "0 of 3"
after destroy: the group was freed there, with the GIL released. More: something held the group (a DDP model, a
DeviceMesh, torch._dynamo imported late), so gloo's threads are joined later, or never (see the debugging page,
#exit-abort). Programs whose group is created another way (init_device_mesh) show "of 0".
"""

import atexit
import importlib.abc
import os
import sys
from pathlib import Path

LOG = Path(os.environ.get("TEARDOWN_PROBE_LOG", "/tmp/teardown_probe.txt"))
TARGET = "torch.distributed.distributed_c10d"


def _threads() -> set[int]:
    return {int(task.name) for task in Path("/proc/self/task").iterdir()}


def _log(message: str) -> None:
    with LOG.open("a") as f:
        f.write(f"{os.path.relpath(sys.argv[0])} {message}\n")


def _wrap(c10d) -> None:
    started: set[int] = set()
    init, destroy = c10d.init_process_group, c10d.destroy_process_group

    def init_process_group(*args, **kwargs):
        before = _threads()
        result = init(*args, **kwargs)
        started.update(_threads() - before)
        return result

    def destroy_process_group(group=None):
        destroy(group)
        if group is None:
            _log(f"after destroy: {len(started & _threads())} of {len(started)} threads alive")

    c10d.init_process_group, c10d.destroy_process_group = init_process_group, destroy_process_group
    atexit.register(lambda: started and _log(f"at exit: {len(started & _threads())} threads alive"))


class _Hook(importlib.abc.MetaPathFinder):
    """Patches the module right after it executes, without importing torch early (which would read env vars early)."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_wrap(module):
            exec_module(module)
            _wrap(module)

        spec.loader.exec_module = exec_and_wrap
        return spec


sys.meta_path.insert(0, _Hook())
