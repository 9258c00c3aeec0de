"""EADDRINUSE: what it looks like when the
rendezvous port is taken, and the fixes."""
# launch: python snippets/debugging/port_in_use.py
# output-varies: (?:port:? |on |rebound )(\d+)
# output-excerpt: collide ^The server socket

import datetime
import socket

import torch.distributed as dist


# --8<-- [start:collide]
def start_store(port: int) -> dist.TCPStore:
    """What rank 0 (or torchrun's agent)
    does at start-up: listen on MASTER_PORT."""
    return dist.TCPStore(
        "127.0.0.1",
        port,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=10),
    )


# stands in for a leftover rank or another job on the same port
with socket.socket() as squatter:
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    try:
        start_store(taken)
        raise AssertionError("a second server listened on a taken port")
    except dist.DistNetworkError as err:
        print(err)
        assert "EADDRINUSE" in str(err) and f"port: {taken}" in str(err)
# --8<-- [end:collide]

# --8<-- [start:port0]
# port 0: the OS picks a free port, as `torchrun --standalone` does
store = start_store(0)
print(f"port 0 -> listening on {store.port}")
assert store.port != 0
# --8<-- [end:port0]


# --8<-- [start:reuse]
def time_wait_sockets(port: int) -> int:
    """Count sockets in TIME_WAIT (state 06) whose
    local port is `port`, from the kernel's tables."""
    rows = [
        line.split()
        for name in ("/proc/net/tcp", "/proc/net/tcp6")
        for line in open(name).readlines()[1:]
    ]
    return sum(
        int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == "06"
        for row in rows
    )


port = store.port
client = dist.TCPStore("127.0.0.1", port, is_master=False)
client.set("step", "1")
# the server closes first, so its side of the connection lingers in TIME_WAIT
del store
del client
lingering = time_wait_sockets(port)
print(f"sockets in TIME_WAIT on port {port}: {lingering}")
assert lingering >= 1
# TCPStore sets SO_REUSEADDR: TIME_WAIT does not block it
again = start_store(port)
assert again.port == port
print(f"rebound {port} at once")
# --8<-- [end:reuse]
