"""Fixtures for the two-host tests: `bed`, two hosts in network namespaces (see testbed.py), and `cluster`, Slurm on
a bed (see slurm.py)."""

import functools
import os

import pytest
import slurm
from launching import TORCHRUN, TRAIN_RESUMABLE, run_to_end
from recording import matches_recording
from shared import once_per_run
from testbed import TwoHosts, unavailable
from weights import load_weights


def _cannot(reason: str, what: str = "two-host test bed") -> None:
    """Skip with the reason; under CI=true a missing test bed (or Slurm) fails the test instead."""
    message = f"{what}: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: what CI must run is a failure, not a skip)", pytrace=False)
    pytest.skip(message)


def pytest_collection_modifyitems(items):
    """Every test here starts hosts, programs or a cluster: left out of `make check`."""
    for item in items:
        if "multinode" in item.path.parts:
            item.add_marker(pytest.mark.runs)


@pytest.fixture
def recording(request):
    """`recording(name, lines, varies=None)`: the lines must equal the recording; with --record-output, they become it."""
    return functools.partial(matches_recording, record=request.config.getoption("--record-output"))


@pytest.fixture
def bed_available() -> None:
    """Skip (or under CI=true fail) where no bed can be built: not root, no `ip netns`, no `unshare`."""
    reason = unavailable()
    if reason:
        _cannot(reason)


@pytest.fixture
def bed(request, bed_available):
    """A fresh bed (node1, node2) for one test, torn down after it, also when the test fails.

    Options for TwoHosts come from indirect parametrization:
    `@pytest.mark.parametrize("bed", [{"own_name_on_loopback": True}], indirect=True)`.
    """
    made = TwoHosts(**getattr(request, "param", {}))
    try:
        made.__enter__()
    except RuntimeError as error:  # e.g. `ip netns add` refused in an unprivileged container
        _cannot(str(error))
    try:
        yield made
    finally:
        made.teardown()


@pytest.fixture
def slurm_available(bed_available) -> None:
    """Skip (or under CI=true fail) where no cluster can be built: no bed, not root, no Slurm or munge."""
    reason = slurm.unavailable()
    if reason:
        _cannot(reason, "Slurm test cluster")


@pytest.fixture
def cluster(slurm_available, bed):
    """Slurm on the two hosts of a fresh bed; closing it tears the bed down and removes its folder."""
    with slurm.SlurmCluster(bed) as made:
        yield made


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory) -> dict:
    """train_resumable.py's final weights at world 2 with no fault: torchrun --standalone on this machine, run once
    for every test that resumes the program on two hosts (which end with the same bits: world 2 is what counts)."""

    def train(folder):
        folder.mkdir()
        cmd = [*TORCHRUN, "--standalone", "--nproc-per-node=2", str(TRAIN_RESUMABLE)]
        cmd += [f"--snapshot={folder / 'snapshot.pt'}", f"--final={folder / 'final.pt'}"]
        done = run_to_end(cmd, {**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=240)
        assert done.returncode == 0 and "attempt 0: finished step 23" in done.stdout, done.stdout + done.stderr

    folder, _ = once_per_run(tmp_path_factory, "uninterrupted-world-2", train)
    return load_weights(folder / "final.pt")
