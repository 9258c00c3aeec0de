"""What this machine offers the programs: how many GPUs torch sees (and, where it sees none, whether GPUs are there
all the same), which recordings a run belongs to, and whether Inductor can build its kernels here."""

from __future__ import annotations

import functools
import glob
import os
import shutil
import sysconfig
import warnings
from pathlib import Path

# A GPU torch could use has one of these device files: NVIDIA's driver, WSL 2's GPU, ROCm (torch.cuda there too).
GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/dxg", "/dev/kfd")
# `make gpu-check` runs small programs side by side, each pytest on a few of the box's GPUs (CUDA_VISIBLE_DEVICES);
# this variable tells their runs how many GPUs the box has, so that they record where the whole box's runs do.
BOX_GPUS = "GUIDE_BOX_GPUS"


def gpu_device_files() -> list[str]:
    return sorted(path for pattern in GPU_DEVICE_FILES for path in glob.glob(pattern))


@functools.cache
def _cuda() -> tuple[int, str]:
    """(GPUs torch sees, why it sees none though GPU device files exist; '' when nothing is wrong)."""
    files = gpu_device_files()
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or not files:
        return 0, ""
    try:
        import torch
    except ImportError:
        return 0, ""
    with warnings.catch_warnings(record=True) as caught:  # torch warns why, e.g. "driver ... is too old"
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if available:
        return torch.cuda.device_count(), ""
    said = "; ".join(str(w.message).strip().replace("\n", " ") for w in caught)
    reason = f"{', '.join(files[:4])}{' ...' if len(files) > 4 else ''} present, but torch {torch.__version__} "
    reason += "cannot use them: torch.cuda.is_available() is False"
    if not (torch.version.cuda or getattr(torch.version, "hip", None)):
        reason += " (a CPU-only build of torch: install the CUDA wheel)"
    elif said:
        reason += f" ({said})"
    else:
        reason += f" (the wheel needs a driver for CUDA {torch.version.cuda}; compare with nvidia-smi)"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        reason += f"; CUDA_VISIBLE_DEVICES={visible!r}"
    return 0, reason


def cuda_devices() -> int:
    """How many GPUs torch sees. Where none can be (all hidden, or no GPU device file), torch is not imported: each
    pytest-xdist worker asks while collecting, and the import costs 1.6 CPU-seconds."""
    return _cuda()[0]


cuda_devices.cache_clear = _cuda.cache_clear  # the tests fake the device files


def unusable_gpus() -> str:
    """Why torch sees no GPU on a machine that has GPU device files ('' if it sees them, or none are there): a driver
    older than the wheel's CUDA, a CPU-only torch. The programs then run on CPUs, which the runner must say loudly."""
    return _cuda()[1]


def box_gpus() -> int:
    """How many GPUs the box has, for the recordings: what `make gpu-check` says (BOX_GPUS) while one of its runs
    sees only some of them, else what torch sees."""
    given = os.environ.get(BOX_GPUS, "")
    return int(given) if given.isdigit() and cuda_devices() else cuda_devices()


def platform() -> str:
    """Where recordings of this run belong: 'cpu' on a machine without GPUs, else 'cuda-<n>' for a box of n GPUs
    (the programs print other text on 1 GPU than on 8: gloo where the ranks outnumber the GPUs, process counts)."""
    gpus = box_gpus()
    return f"cuda-{gpus}" if gpus else "cpu"


def python_headers() -> Path:
    """Python.h as Triton looks for it when it builds its launcher (triton/runtime/build.py)."""
    scheme = sysconfig.get_default_scheme()
    scheme = "posix_prefix" if scheme == "posix_local" else scheme
    return Path(sysconfig.get_paths(scheme=scheme)["include"]) / "Python.h"


def inductor_missing(cpu: bool = False) -> list[str]:
    """What Inductor cannot find here to build kernels: on GPUs Triton compiles a C launcher against Python's
    headers (triton/runtime/build.py: $CC, else gcc or clang); on CPUs Inductor compiles C++ ($CXX, else g++ or
    clang++). Empty when all is there."""
    missing = []
    if not (os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")):
        missing.append("a C compiler (gcc or clang on PATH, or CC=...)")
    if cpu and not (os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")):
        missing.append("a C++ compiler (g++ or clang++ on PATH, or CXX=...)")
    if not python_headers().is_file():
        missing.append(f"Python's headers ({python_headers()}; Debian/Ubuntu: apt install python3-dev)")
    return missing
