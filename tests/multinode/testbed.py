"""A throwaway cluster of two (or three) hosts on one Linux machine, made of network namespaces.

Each host (`node1`, `node2`, ...) is a network namespace with its own loopback, one interface `eth0` with
its own address on a private subnet (10.77.0.1/24, 10.77.0.2/24, ...), its own host name, and an
`/etc/hosts` naming every host of the bed. The hosts are wired to a bridge that lives in a further
"switch" namespace, so the bed adds nothing to the machine's own network stack:

    node1 [eth0 10.77.0.1] --- p1 |
                                  | br0   (namespace <prefix>-switch)
    node2 [eth0 10.77.0.2] --- p2 |

Names carry a per-run prefix, `mgpu<pid>-<n>`, so beds of parallel runs never collide: the namespaces are
`<prefix>-node1`, `<prefix>-node2`, `<prefix>-switch`. A host has no default route, so nothing it sends
can leave the bed. The hosts file is `/etc/netns/<namespace>/hosts`, which `ip netns exec` bind-mounts
over `/etc/hosts` for the command it runs; the machine's own `/etc/hosts` is never touched. Every command
also runs in a UTS namespace of its own (`unshare --uts`) whose host name is the host's name.

    with TwoHosts() as bed:
        out = bed.run("node2", ["getent", "hosts", "node1"], timeout=10)
        assert out.returncode == 0 and "10.77.0.1" in out.output

Leaving the `with` block, normally or through an exception, kills every process in the namespaces, deletes
the namespaces (and with them every interface the bed made) and removes the `/etc/netns/<namespace>`
folders. Needs root, `ip` (iproute2) with `ip netns`, and `unshare` (util-linux).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

NETNS_ETC = Path("/etc/netns")  # ip netns exec bind-mounts /etc/netns/<ns>/* over /etc/*
NETNS_RUN = Path("/run/netns")  # where ip netns keeps the namespaces
SUBNET = "10.77.0"  # host k is 10.77.0.k/24; only the bed's own interfaces carry these addresses
IFACE = "eth0"  # each host's interface (the name the torchrun page uses)
# Variables a launcher or the calling environment may have set that must not leak into a host.
SCRUBBED = re.compile(r"^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT"
                      r"|TORCHELASTIC_.*|GLOO_SOCKET_IFNAME|NCCL_SOCKET_IFNAME|SLURM_.*)$")  # fmt: skip
_beds = itertools.count(1)


def unavailable() -> str | None:
    """Why a bed cannot be built here, or None if it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "sh", "hostname"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    if probe.returncode != 0:
        return f"`ip netns` unavailable: {probe.stderr.strip()}"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Result:
    """What a command on a host did: its exit status (None if it was killed at its timeout) and output."""

    host: str
    returncode: int | None
    output: str  # stdout and stderr, interleaved as written
    timed_out: bool
    seconds: float


class Proc:
    """A command started on a host by `TwoHosts.start`; `wait` collects it, killing it at the timeout."""

    def __init__(self, host: str, argv: list[str], env: dict[str, str]):
        self.host = host
        self._log = tempfile.TemporaryFile()  # a file, not a pipe: a chatty process never blocks
        self._started = time.monotonic()
        # Own session: a timeout kills the command and its children as one process group.
        self.popen = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        self.result: Result | None = None

    def output(self) -> str:
        """What the command has written so far."""
        fd = self._log.fileno()  # pread: the child shares the file offset, which must not move
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        """Wait (polling, bounded by `timeout`) until the output matches `pattern`; raise if it never does."""
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / 0.05) + 1):
            found = re.search(pattern, self.output(), re.MULTILINE)
            if found:
                return found
            if self.popen.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        raise TimeoutError(f"{self.host}: no {pattern!r} in {timeout} s; output:\n{self.output()}")

    def wait(self, timeout: float) -> Result:
        """The command's result; if it runs past `timeout` seconds it is killed and `timed_out` is set."""
        if self.result is None:
            timed_out = False
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                self.kill()
            self.result = Result(
                self.host,
                None if timed_out else self.popen.returncode,
                self.output(),
                timed_out,
                time.monotonic() - self._started,
            )
            self._log.close()
        return self.result

    def kill(self) -> None:
        """SIGKILL the command's process group (the bed's teardown catches anything that left it)."""
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class TwoHosts:
    """Hosts `node1`..`node<n>` joined by one switch; a context manager that leaves nothing behind."""

    def __init__(
        self,
        n: int = 2,
        own_name_on_loopback: bool = False,
        names: list[str] | None = None,
        aliases: dict[str, list[str]] | None = None,
    ):
        """`own_name_on_loopback`: each host's /etc/hosts maps its own name to 127.0.1.1, as Debian and
        Ubuntu installers write it; the other hosts' names still map to their real addresses.
        `names`: the hosts' names instead of node1..node<n> (then n is their number), e.g. a Kubernetes
        Job's pod host names; `aliases`: further names of a host, on its line of every /etc/hosts."""
        n = len(names) if names else n
        assert 2 <= n <= 9, "two to nine hosts"
        self.own_name_on_loopback = own_name_on_loopback
        self.prefix = f"mgpu{os.getpid()}-{next(_beds)}"  # unique per process and per bed
        self.hosts = list(names) if names else [f"node{k}" for k in range(1, n + 1)]
        self.aliases = aliases or {}
        self.switch = f"{self.prefix}-switch"
        self.inodes: dict[str, int] = {}  # namespace -> nsfs inode, to find processes still inside
        self._procs: list[Proc] = []
        self._made_etc_netns = False

    # --- names and addresses ---
    def namespace(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def address(self, host: str) -> str:
        return f"{SUBNET}.{self.hosts.index(host) + 1}"

    def hosts_file(self, host: str) -> str:
        """The /etc/hosts that `host` sees."""
        lines = ["127.0.0.1\tlocalhost"]
        for other in self.hosts:
            own = other == host and self.own_name_on_loopback
            names = "\t".join([other, *self.aliases.get(other, [])])
            lines.append(f"{'127.0.1.1' if own else self.address(other)}\t{names}")
        return "\n".join(lines) + "\n"

    def namespaces(self) -> list[str]:
        return [self.namespace(h) for h in self.hosts] + [self.switch]

    # --- life cycle ---
    def __enter__(self) -> TwoHosts:
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def _build(self) -> None:
        remove_stale_beds()
        self._add_namespace(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        if not NETNS_ETC.exists():
            self._made_etc_netns = True
        for k, host in enumerate(self.hosts, start=1):
            ns = self.namespace(host)
            self._add_namespace(ns)
            # The veth pair is created inside the host and its peer moved straight into the switch.
            _ip("-n", ns, "link", "add", IFACE, "type", "veth", "peer", "name", f"p{k}", "netns", self.switch)
            _ip("-n", self.switch, "link", "set", f"p{k}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", IFACE)
            _ip("-n", ns, "link", "set", IFACE, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / ns / "hosts").write_text(self.hosts_file(host))
            # No name server: glibc then asks 127.0.0.1:53 of the host itself, so no lookup leaves the bed.
            (NETNS_ETC / ns / "resolv.conf").write_text("# test bed: /etc/hosts only\n")

    def _add_namespace(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self.inodes[ns] = os.stat(NETNS_RUN / ns).st_ino

    def teardown(self) -> None:
        """Kill everything in the bed's namespaces, delete them and their /etc/netns folders. Idempotent."""
        for proc in self._procs:
            proc.wait(timeout=0)  # kills what still runs, closes its log
        problems = []
        for ns in self.namespaces():
            if not (NETNS_RUN / ns).exists():
                continue
            for _ in range(50):  # bounded: SIGKILL cannot be ignored, so this ends within a few rounds
                pids = self.pids(ns)
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)
            done = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True, timeout=10)
            if done.returncode != 0:
                problems.append(f"ip netns del {ns}: {done.stderr.strip()}")
        for ns in self.namespaces():
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        if self._made_etc_netns:
            try:
                NETNS_ETC.rmdir()  # only if empty: a parallel bed may still use it
            except OSError:
                pass
        if problems:
            raise RuntimeError("; ".join(problems))

    @staticmethod
    def pids(ns: str) -> list[int]:
        done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10)
        return [int(p) for p in done.stdout.split()]

    # --- running commands ---
    def start(self, host: str, cmd: list[str], env: dict[str, str] | None = None) -> Proc:
        """Start `cmd` on `host` and return at once; collect it with `.wait(timeout)`.

        The environment is this process's, without launcher variables (RANK, MASTER_ADDR, *_SOCKET_IFNAME,
        ...), with OMP_NUM_THREADS=1 and no visible GPU (the bed tests networking; two "hosts" on one
        GPU box would share its GPUs), then `env` on top.
        """
        assert host in self.hosts, host
        full_env = {k: v for k, v in os.environ.items() if not SCRUBBED.match(k)}
        full_env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
        full_env.update(env or {})
        # sh sets the new UTS namespace's host name ($0), then becomes the command.
        argv = ["ip", "netns", "exec", self.namespace(host), "unshare", "--uts"]
        argv += ["sh", "-c", 'hostname "$0" && exec "$@"', host, *cmd]
        proc = Proc(host, argv, full_env)
        self._procs.append(proc)
        return proc

    def run(self, host: str, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> Result:
        """Run `cmd` on `host` to the end, or kill it after `timeout` seconds."""
        return self.start(host, cmd, env).wait(timeout)

    def run_all(
        self, commands: dict[str, list[str]], env: dict[str, str] | None = None, timeout: float = 120, grace: float = 10
    ) -> dict[str, Result]:
        """Start one command per host at once and collect them all, within `timeout` seconds in total.

        Once one fails, the others get `grace` seconds to fail too (a peer left waiting for it would
        otherwise wait out its own, much longer, timeout), then they are killed.
        """
        procs = {host: self.start(host, cmd, env) for host, cmd in commands.items()}
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / 0.1) + 1):  # bounded polling
            codes = [p.popen.poll() for p in procs.values()]
            if None not in codes or time.monotonic() > deadline:
                break
            if any(code not in (None, 0) for code in codes):
                deadline = min(deadline, time.monotonic() + grace)
            time.sleep(0.1)
        return {host: p.wait(timeout=max(0.0, deadline - time.monotonic())) for host, p in procs.items()}


def remove_stale_beds() -> list[str]:
    """Delete the namespaces and /etc/netns folders of beds whose test process is gone.

    A bed tears itself down on every exit Python sees; a SIGKILL (a runner's timeout) skips that, and what it
    left would otherwise stay until reboot. Beds of live processes are not touched.
    """
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    names = {line.split()[0] for line in listed.splitlines() if line.strip()}
    if NETNS_ETC.exists():
        names |= {p.name for p in NETNS_ETC.iterdir()}
    stale = []
    for name in sorted(names):
        owner = re.match(r"mgpu(\d+)-\d+-[\w.-]+$", name)  # <prefix>-<host> or <prefix>-switch
        if owner and not Path(f"/proc/{owner[1]}").exists():
            for pid in TwoHosts.pids(name) if (NETNS_RUN / name).exists() else []:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
            stale.append(name)
    return stale


def testbed(n: int = 2) -> TwoHosts:
    """`with testbed(3) as bed:` reads better for three hosts."""
    return TwoHosts(n)


def leftovers(prefix: str, inodes: dict[str, int] | None = None) -> list[str]:
    """Anything a bed with this prefix left behind: namespaces, interfaces, /etc/netns folders, processes."""
    found = []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    found += [f"namespace {line.split()[0]}" for line in listed.splitlines() if line.startswith(prefix)]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10).stdout
    found += [f"interface {line}" for line in links.splitlines() if prefix in line]
    if NETNS_ETC.exists():
        found += [f"folder {p}" for p in NETNS_ETC.iterdir() if p.name.startswith(prefix)]
    wanted = {f"net:[{inode}]" for inode in (inodes or {}).values()}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.readlink(proc / "ns" / "net") in wanted:
                    found.append(f"process {proc.name} still in one of the bed's namespaces")
            except OSError:  # gone meanwhile, or a kernel thread
                pass
    return found
