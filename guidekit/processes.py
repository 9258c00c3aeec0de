"""Processes the tests start: found by their tree or by a tag in their environment, stopped without orphans.

torchrun starts each rank in a session of its own, so killing torchrun's process group would orphan the ranks (and
they would keep the output pipe open); a rank whose launcher died is reparented to init, out of reach of the tree,
and only the tag in its environment still finds it. The runner tags each program's processes (RUN_TAG); `make
gpu-check` tags each pytest it starts and everything below it (CHECK_TAG), so that stopping one stops it all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

GRACE_S = 10  # after a timeout: time for torchrun to stop its ranks before SIGKILL
STACKS_WAIT_S = 5  # after SIGABRT: time for one Python process to print its threads' tracebacks and die
# In the environment of what the tests run: Python's faulthandler then prints every thread's traceback on SIGABRT
# (https://docs.python.org/3/library/faulthandler.html), which is how a timeout shows where a hung program waited.
FAULTHANDLER = {"PYTHONFAULTHANDLER": "1"}
RUN_TAG = "GUIDE_SNIPPET_RUN"  # in the environment of every process a snippet starts, orphans included
CHECK_TAG = "GUIDE_GPU_CHECK_RUN"  # in the environment of every process a `make gpu-check` run starts


def descendants(pid: int) -> set[int]:
    """Every process below pid."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tagged(tag: str, name: str = RUN_TAG) -> dict[int, str]:
    """pid -> command line of every live process whose environment carries name=tag (RUN_TAG by default)."""
    needle = f"{name}={tag}".encode()
    found = {}
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                cmdline = (environ.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                found[int(environ.parent.name)] = cmdline.decode(errors="replace").strip()
        except (OSError, ValueError):  # gone meanwhile, a zombie, or not ours to read
            continue
    return found


def kill(pids) -> None:
    signal_each(pids, signal.SIGKILL)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its parent."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def is_python(pid: int) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("python")
    except OSError:
        return False


def dump_stacks(pids, wait_s: float = STACKS_WAIT_S) -> list[int]:
    """Make every Python process among pids (with FAULTHANDLER in its environment) print the traceback of each of its
    threads to its stderr and die, one process at a time, children before their parents: all are frozen (SIGSTOP)
    first, then each in turn gets SIGABRT and resumes, and the next waits until it is gone (up to wait_s). Dumped all
    at once, the ranks' reports interleave line by line in the stderr they share, and a launcher that sees one rank
    die (torchrun) terminates the others before they print. Returns those signalled."""
    aborted = sorted((pid for pid in pids if is_python(pid)), key=started, reverse=True)
    signal_each(aborted, signal.SIGSTOP)
    try:
        for pid in aborted:
            signal_each([pid], signal.SIGABRT)
            signal_each([pid], signal.SIGCONT)
            deadline = time.monotonic() + wait_s
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
    finally:
        signal_each(aborted, signal.SIGCONT)  # none left frozen, whatever happened
    return aborted


def started(pid: int) -> int:
    """When the process started, in clock ticks since boot (/proc/PID/stat field 22); 0 if it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def signal_each(pids, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_tagged(tag: str, grace_s: float, name: str = RUN_TAG) -> list[str]:
    """Give the run's leftover processes grace_s to exit on their own (multiprocessing's resource tracker exits
    when its parent has), then SIGKILL the rest; return the command lines of those that had to be killed."""
    deadline = time.monotonic() + grace_s
    while (left := tagged(tag, name)) and time.monotonic() < deadline:
        time.sleep(0.1)
    kill(left)
    return sorted(left.values())


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def stop_tree(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """SIGTERM the launcher's process group (torchrun then stops its ranks), SIGKILL whatever is left below it."""
    tree = descendants(proc.pid)
    kill_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    kill(tree | descendants(proc.pid))
    kill_group(proc.pid)
    proc.wait()


def run_to_end(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run a launcher to its end and return what it printed. Past `timeout` it gets SIGTERM, which torchrun passes
    on to its ranks, then SIGKILL; the returned process has returncode None and `timed_out` set."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
        done.timed_out = False
        return done
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            proc.kill()
        done = subprocess.CompletedProcess(cmd, None, stdout, stderr)
        done.timed_out = True
        return done
