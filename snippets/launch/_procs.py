"""Helpers for the launch simulations: a free port, each
simulated node's GPUs, running processes side by side."""

import os
import signal
import socket
import subprocess
import tempfile
import time


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_devices(
    gpus: int, nodes: int, per_node: int, parent: str | None = None
) -> list[str]:
    """CUDA_VISIBLE_DEVICES for each simulated node. Real nodes each have
    their own GPUs; nodes simulated on one machine must not share one
    (NCCL refuses two ranks on one GPU), so each gets its own, or none
    when there are too few: then every rank falls back to gloo on CPU.
    parent: this process's CUDA_VISIBLE_DEVICES, if it has one."""
    if gpus < nodes * per_node:
        return [""] * nodes
    # CUDA numbers the GPUs it shows from 0: with a parent list (e.g.
    # "4,5,6,7", or MIG/GPU UUIDs) hand out its entries, not 0..gpus-1
    ids = (
        [name.strip() for name in parent.split(",")][:gpus]
        if parent
        else [str(i) for i in range(gpus)]
    )
    return [
        ",".join(ids[node * per_node : (node + 1) * per_node])
        for node in range(nodes)
    ]


def describe_devices(visible: list[str]) -> str:
    if all(visible):
        return "each node has its own GPUs: " + ", ".join(
            f"node {n}: {v}" for n, v in enumerate(visible)
        )
    return (
        "too few GPUs for a GPU of its own per rank: every node runs gloo on "
        "CPU"
    )


def run_together(
    commands: list[list[str]], envs: list[dict], timeout_s: float
) -> list[str]:
    """Start all commands at once, return their
    outputs; on a failure or timeout, kill them all."""
    logs = [tempfile.TemporaryFile("w+") for _ in commands]
    procs = [
        subprocess.Popen(
            cmd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for cmd, env, log in zip(commands, envs, logs)
    ]
    deadline = time.monotonic() + timeout_s
    try:
        while any(p.poll() is None for p in procs):
            failed = any(p.returncode not in (None, 0) for p in procs)
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        # SIGTERM first: torchrun then stops its
        # workers, which run in sessions of their own
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                # torchrun gives its workers 30 s before it SIGKILLs them
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    for i, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, (
            f"process {i} exited with {p.returncode}:\n{out}"
        )
    return outputs
