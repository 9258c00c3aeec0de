"""The torchrun and security pages' multi-node claims, run across two hosts with separate network stacks.

Each test gets a fresh bed (testbed.py): `node1` (10.77.0.1) and `node2` (10.77.0.2), each a network
namespace with its own loopback, host name and /etc/hosts. On 127.0.0.1 every mistake below would go
unnoticed: there, "localhost" and "the first node" are the same machine.
"""

import re
import sys
import time
from pathlib import Path

import pytest
from launching import TORCHRUN, error_lines
from recording import TRAIN_LINES
from testbed import IFACE, TwoHosts, leftovers

ROOT = Path(__file__).resolve().parents[2]
ENV_VARS = str(ROOT / "snippets" / "launch" / "env_vars.py")  # prints "rank R of W on node N: ok"
TRAIN = str(ROOT / "snippets" / "ddp" / "train_torchrun.py")  # DDP on gloo; asserts replicas equal
PROBE = str(Path(__file__).with_name("store_probe.py"))


def static_launch(master_addr: str, node_rank: int, script: str, timeout_s: int) -> list[str]:
    """The page's static rendezvous: `--master-addr`/`--master-port`/`--node-rank`."""
    return TORCHRUN + [
        "--nnodes=2",
        "--nproc-per-node=1",
        f"--master-addr={master_addr}",
        "--master-port=29500",
        f"--node-rank={node_rank}",
        f"--rdzv-conf=timeout={timeout_s}",  # the static store's connect timeout (default 600 s)
        "--max-restarts=0",
        script,
    ]


def test_c10d_rendezvous_across_hosts(bed):
    """torchrun page, #two-nodes: one torchrun per node with the same `--rdzv-backend=c10d
    --rdzv-endpoint=node1:29400 --rdzv-id=...` meets at the endpoint; the node whose host name matches it
    hosts the store; global ranks are distinct, the world is 2; and the workers' MASTER_ADDR is the host
    of rank 0 by name (not 127.0.0.1 or localhost) with a MASTER_PORT that is not the endpoint's."""
    command = TORCHRUN + [
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=node1:29400",
        "--rdzv-id=two-hosts-c10d",
        "--rdzv-conf=join_timeout=60",
        "--max-restarts=0",
        ENV_VARS,
    ]
    results = bed.run_all({host: command for host in bed.hosts}, timeout=150)
    for r in results.values():
        assert r.returncode == 0, f"{r.host}: exit {r.returncode}, timed out {r.timed_out}:\n{r.output}"
    seen = {}
    for host, r in results.items():
        found = re.findall(r"^rank (\d+) of (\d+) on node (\d+): ok$", r.output, re.MULTILINE)
        assert len(found) == 1, f"{host}: expected one worker:\n{r.output}"
        seen[host] = tuple(map(int, found[0]))
    assert sorted(rank for rank, _, _ in seen.values()) == [0, 1], seen
    assert all(world == 2 for _, world, _ in seen.values()), seen
    assert sorted(node for _, _, node in seen.values()) == [0, 1], seen  # c10d picks which host is node 0
    first = next(host for host, (rank, _, _) in seen.items() if rank == 0)
    table = dict(re.findall(r"^(MASTER_ADDR|MASTER_PORT) +(\S+)$", results[first].output, re.MULTILINE))
    assert table["MASTER_ADDR"] in (first, bed.address(first)), table  # rank 0's host, reachable by name
    assert table["MASTER_ADDR"] not in ("127.0.0.1", "localhost"), table
    assert table["MASTER_PORT"] != "29400", table  # a port the rendezvous chose, not the endpoint's


@pytest.mark.parametrize("bed", [{"own_name_on_loopback": True}], ids=["hostname-on-127.0.1.1"], indirect=True)
def test_static_rendezvous_and_gloo_interface(bed, recording):
    """torchrun page, #two-nodes and #network-interface: the static rendezvous (`--master-addr=node1
    --master-port=29500 --node-rank=0/1`) puts node-rank 0 on node1, and DDP's gloo all-reduce works
    across the hosts with `GLOO_SOCKET_IFNAME=eth0` although each host's /etc/hosts maps its own name to
    127.0.1.1, as Debian and Ubuntu write it (test_gloo_without_interface_uses_loopback: what happens
    without the variable). train_torchrun.py asserts the loss fell and the replicas are bit-identical."""
    commands = {host: static_launch("node1", rank, TRAIN, timeout_s=60) for rank, host in enumerate(bed.hosts)}
    results = bed.run_all(commands, env={"GLOO_SOCKET_IFNAME": IFACE}, timeout=150)
    for r in results.values():
        assert r.returncode == 0, f"{r.host}: exit {r.returncode}, timed out {r.timed_out}:\n{r.output}"
    assert "2 ranks on cpu (gloo): replicas identical" in results["node1"].output, results["node1"].output
    recording("two_hosts_static", re.findall(TRAIN_LINES, results["node1"].output, re.MULTILINE))


@pytest.mark.parametrize("bed", [{"own_name_on_loopback": True}], ids=["hostname-on-127.0.1.1"], indirect=True)
def test_gloo_without_interface_uses_loopback(bed):
    """torchrun page, #network-interface: without GLOO_SOCKET_IFNAME, gloo takes the address the host
    name resolves to; with the own name on 127.0.1.1 a rank advertises that, the other host connects to
    its own loopback, and initialization fails or hangs. The rendezvous itself succeeds. (env_vars.py: the gloo
    group is all it takes, and it starts faster than a training program.)"""
    commands = {host: static_launch("node1", rank, ENV_VARS, timeout_s=60) for rank, host in enumerate(bed.hosts)}
    results = bed.run_all(commands, timeout=120, grace=3)
    assert all(r.returncode != 0 for r in results.values()), {h: r.returncode for h, r in results.items()}
    text = "\n".join(r.output for r in results.values())
    assert re.search(r"Gloo connectFullMesh failed with .*Connection refused, remote=\[127\.0\.1\.1\]:\d+", text), text


def test_master_addr_localhost_fails(bed, recording):
    """torchrun page, #common-errors: `--master-addr=localhost` copied to every node. node1 hosts the
    store and waits; node2 looks for it on its own loopback and gives up, with the message the page
    quotes; node1 then reports that only 1 of 2 clients joined."""
    commands = {host: static_launch("localhost", rank, ENV_VARS, timeout_s=5) for rank, host in enumerate(bed.hosts)}
    results = bed.run_all(commands, timeout=90)
    node1, node2 = results["node1"], results["node2"]
    assert node2.returncode not in (0, None), node2.output
    assert (
        "DistNetworkError: The client socket has timed out after 5000ms while trying to connect to (localhost, 29500)."
        in node2.output
    ), error_lines(node2.output)
    assert node1.returncode not in (0, None), node1.output
    assert re.search(
        r"DistStoreError: Timed out after \d+ seconds waiting for clients\. 1/2 clients joined\.", node1.output
    ), error_lines(node1.output)
    first_error = [re.search(r"^.*Dist\w+Error: .*$", r.output, re.MULTILINE)[0] for r in (node2, node1)]
    recording("master_addr_localhost", first_error, varies=r"after (\d+) seconds")


def test_store_binding_across_hosts(bed, recording):
    """security page, #no-auth: a TCPStore given host "127.0.0.1" still listens on every interface, so
    another host writes into it; a store on a socket bound by hand to 127.0.0.1 (master_listen_fd) is
    refused from the other host; bound to node1's address on the private network, it is reachable."""
    # The store node2 waits for is created last, so when it answers all three exist.
    server = bed.start(
        "node1", [sys.executable, PROBE, "serve", "fd:127.0.0.1:29402", "fd:10.77.0.1:29403", "arg:127.0.0.1:29401"]
    )
    visit = bed.run(
        "node2",
        [sys.executable, PROBE, "visit", "--wait-for=node1:29401", "node1:29401", "node1:29402", "node1:29403"],
        timeout=90,
    )
    server.kill()
    assert visit.returncode == 0, visit.output
    assert "node1:29401 store: reached" in visit.output, visit.output  # host="127.0.0.1" did not keep it local
    assert "node1:29402 socket: ConnectionRefusedError: [Errno 111] Connection refused" in visit.output, visit.output
    assert (
        "node1:29402 store: DistNetworkError: The client socket has timed out after 3000ms while trying to connect to (node1, 29402)."
        in visit.output
    ), visit.output
    assert "node1:29403 store: reached" in visit.output, visit.output
    recording("store_binding", re.findall(r"^node1:\d+ .*$", visit.output, re.MULTILINE))


def test_bed_leaves_nothing_behind(bed_available):
    """The test bed itself: after a bed is left, normally, by an exception raised inside it, or with a
    command killed at its timeout, no namespace, interface, /etc/netns folder or process of it remains,
    and the machine's /etc/hosts is unchanged."""
    etc_hosts = Path("/etc/hosts").read_bytes()
    with TwoHosts() as quiet:
        timed = quiet.run("node1", ["sleep", "600"], timeout=0.5)
        assert timed.timed_out and timed.returncode is None
        named = quiet.run("node2", ["sh", "-c", "hostname; getent hosts node1"], timeout=10)
        assert named.returncode == 0 and named.output.split() == ["node2", "10.77.0.1", "node1"], named
    assert leftovers(quiet.prefix, quiet.inodes) == []

    with pytest.raises(RuntimeError, match="raised inside the bed"), TwoHosts(n=3) as noisy:
        noisy.start("node1", ["sleep", "600"])
        noisy.start("node3", ["sh", "-c", "setsid sleep 600 & exec sleep 600"])  # one escapes the group
        for _ in range(100):  # bounded: until both sleeps of node3 are running
            if len(noisy.pids(noisy.namespace("node3"))) >= 2:
                break
            time.sleep(0.05)
        assert len(noisy.pids(noisy.namespace("node3"))) >= 2
        raise RuntimeError("raised inside the bed")
    assert leftovers(noisy.prefix, noisy.inodes) == []
    assert Path("/etc/hosts").read_bytes() == etc_hosts
