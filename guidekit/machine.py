"""What this machine offers the programs: how many GPUs torch sees, and so which recordings a run belongs to."""

from __future__ import annotations

import functools
import glob
import os

# A GPU torch could use has one of these device files: NVIDIA's driver, WSL 2's GPU, ROCm (torch.cuda there too).
GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/dxg", "/dev/kfd")


@functools.cache
def cuda_devices() -> int:
    """How many GPUs torch sees. Where none can be (all hidden, or no GPU device file), torch is not imported: each
    pytest-xdist worker asks while collecting, and the import costs 1.6 CPU-seconds."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or not any(glob.glob(p) for p in GPU_DEVICE_FILES):
        return 0
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


@functools.cache
def platform() -> str:
    """Where recordings of this run belong: 'cuda' on a machine with GPUs (snippets then use them), else 'cpu'."""
    return "cuda" if cuda_devices() else "cpu"
