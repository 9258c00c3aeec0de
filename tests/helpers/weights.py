"""A training run's saved weights, loaded and compared bit for bit. torch is imported on first use, not when pytest
collects the tests that use this (every pytest-xdist worker collects every test module, and importing torch is the
largest part of a worker's start: tests/MEASUREMENTS.md)."""

from pathlib import Path


def load_weights(path: Path) -> dict:
    import torch

    return torch.load(path, weights_only=True)


def assert_bit_identical(reference: dict, resumed: dict, after: str) -> None:
    import torch

    assert reference.keys() == resumed.keys()
    for name, tensor in reference.items():
        assert torch.equal(tensor, resumed[name]), f"{name} differs after {after}"
