"""Loaded at start-up by every process a snippet starts (the runner puts this folder on PYTHONPATH): each process that
joins a process group writes what it really used, so the manifest records the program's own report, not a guess.

It imports nothing heavy: it waits for torch.distributed.distributed_c10d to be imported by the program, then wraps
init_process_group to write {rank, world_size, backend, device, requested, on_a_cuda_box} to
$GUIDE_RANK_REPORTS/<pid>.json.

`on_a_cuda_box` is the device types the same call would give the group on a machine with a CUDA GPU: torch's
BackendConfig, with the accelerator faked as present (torch.accelerator.current_accelerator). A call with no backend
(what init_device_mesh makes when there is no group yet) keeps only the accelerator's backend since torch 2.15
({'cuda': 'nccl'}): a program whose CPU branch creates its group so would find no backend for CPU tensors on a box
with fewer GPUs than ranks. The runner fails such a program here, on the CPU, where CI can see it.

At a normal exit (atexit: after the program's own exit handlers, before the interpreter finalizes; not after an uncaught
exception, as in a rank whose peer was killed) the same process adds `gloo_threads_at_exit`, how many of gloo's threads are still alive (gloo_tcp_loop, pt_gloo_runloop). Any at all means
something still holds a gloo group, and such a process can abort at exit by chance ("terminate called without an
active exception", docs/en/debugging.md#exit-abort): the runner fails it on every run, not one in a hundred.
"""

import atexit
import importlib.abc
import json
import os
import sys
import warnings

C10D = "torch.distributed.distributed_c10d"
REPORTS = os.environ.get("GUIDE_RANK_REPORTS")
GLOO_THREADS = {"gloo_tcp_loop", "pt_gloo_runloop"}  # the names gloo gives its network loop and its workers


def _on_a_cuda_box(c10d, backend) -> list[str] | None:
    """The device types a group made with `backend` gets where a CUDA GPU is present (None: torch cannot say)."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None or not hasattr(c10d, "BackendConfig"):
        return None
    real = accelerator.current_accelerator
    accelerator.current_accelerator = lambda check_available=False: torch.device("cuda")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sorted(c10d.BackendConfig(str(backend or "undefined")).get_device_backend_map())
    finally:
        accelerator.current_accelerator = real


def _report(c10d, requested, on_a_cuda_box) -> None:
    import torch

    backend = str(c10d.get_backend())
    if backend == "undefined":  # no backend named (init_device_mesh does this): one per device type
        config = str(c10d.get_backend_config())  # e.g. "cpu:gloo,cuda:nccl"
        backend = "nccl" if torch.cuda.is_available() and "cuda:nccl" in config else "gloo"
    device = "CPU"
    if "nccl" in backend and torch.cuda.is_available():
        device = torch.cuda.get_device_name(torch.cuda.current_device())
    entry = {"rank": c10d.get_rank(), "world_size": c10d.get_world_size(), "backend": backend, "device": device}
    entry.update(requested=str(requested or "undefined"), on_a_cuda_box=on_a_cuda_box)
    _write(entry)
    atexit.register(_report_exit, entry)
    excepthook = sys.excepthook

    def note_the_failure(*exc_info):  # a process that dies of an exception is failing anyway: no verdict
        entry["failed"] = True
        excepthook(*exc_info)

    sys.excepthook = note_the_failure


def _report_exit(entry: dict) -> None:
    if entry.get("failed"):
        return
    try:
        names = [_read(f"/proc/self/task/{task}/comm").strip() for task in os.listdir("/proc/self/task")]
    except OSError:  # not Linux, or a thread gone meanwhile: no verdict
        return
    _write({**entry, "gloo_threads_at_exit": sum(name in GLOO_THREADS for name in names)})


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _write(entry: dict) -> None:
    with open(os.path.join(REPORTS, f"{os.getpid()}.json"), "w", encoding="utf-8") as out:
        json.dump(entry, out)


def _wrap(c10d) -> None:
    init = c10d.init_process_group

    def init_process_group(*args, **kwargs):
        requested = kwargs.get("backend", args[0] if args else None)
        try:
            on_a_cuda_box = _on_a_cuda_box(c10d, requested)
        except Exception:  # a report must never break the program it observes
            on_a_cuda_box = None
        result = init(*args, **kwargs)
        try:
            _report(c10d, requested, on_a_cuda_box)
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
