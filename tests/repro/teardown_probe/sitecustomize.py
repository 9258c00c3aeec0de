"""Probe: does each program's destroy_process_group() free its group, or does something still hold it?

    rm -f /tmp/teardown_probe.txt
    PYTHONPATH=tests/repro/teardown_probe pytest snippets
    sort /tmp/teardown_probe.txt | uniq -c

Python imports this module at start-up in every process (the runner passes PYTHONPATH on). Once
torch.distributed.distributed_c10d is imported, it wraps destroy_process_group and logs per process how many of
gloo's threads (by name: gloo_tcp_loop, pt_gloo_runloop) are alive after a full destroy, and again at exit. "0" after
destroy: the group was freed there, with the GIL released. More: something held the group (a DDP model,
torch.distributed.nn imported after init, a DeviceMesh kept by DTensor's caches), so gloo's threads are joined
later (the mesh programs' teardown_mesh lets go right after destroy), or never. The verdict is "at exit": 0 means no
gloo thread is left when Python starts finalizing, so none can abort it (see the debugging page, #exit-abort).
"""

import atexit
import importlib.abc
import os
import sys
from pathlib import Path

LOG = Path(os.environ.get("TEARDOWN_PROBE_LOG", "/tmp/teardown_probe.txt"))
TARGET = "torch.distributed.distributed_c10d"


GLOO_THREADS = {"gloo_tcp_loop", "pt_gloo_runloop"}


def _gloo_threads() -> int:
    return sum((task / "comm").read_text().strip() in GLOO_THREADS for task in Path("/proc/self/task").iterdir())


def _log(message: str) -> None:
    with LOG.open("a") as f:
        f.write(f"{os.path.relpath(sys.argv[0])} {message}\n")


def _wrap(c10d) -> None:
    destroy = c10d.destroy_process_group

    def destroy_process_group(group=None):
        destroy(group)
        if group is None:
            _log(f"after destroy: {_gloo_threads()} gloo threads alive")

    c10d.destroy_process_group = destroy_process_group
    atexit.register(lambda: _log(f"at exit: {_gloo_threads()} gloo threads alive"))


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
