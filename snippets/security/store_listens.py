"""A TCPStore given host "127.0.0.1" still listens on every
interface; handing it a socket you bound keeps it there."""
# launch: python snippets/security/store_listens.py
# output-varies: (?:port |:)(\d+)
# output-varies: (?:to |, )(\d+(?:\.\d+){3}):

import datetime
import ipaddress
import socket

import torch.distributed as dist


# --8<-- [start:listen]
def listening_addresses(port: int) -> list[str]:
    """Addresses the kernel has a listening socket
    (state 0A) on `port`, from /proc/net/tcp and tcp6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in (line.split() for line in open(table).readlines()[1:]):
            address, hex_port = row[1].rsplit(":", 1)
            # words are stored little-endian
            if int(hex_port, 16) == port and row[3] == "0A":
                raw = b"".join(
                    bytes.fromhex(address[i : i + 8])[::-1]
                    for i in range(0, len(address), 8)
                )
                found.append(str(ipaddress.ip_address(raw)))
    return found


store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
addresses = listening_addresses(store.port)
print(f"TCPStore(host='127.0.0.1') port {store.port} listens on: {addresses}")
assert addresses and all(
    ipaddress.ip_address(a).is_unspecified for a in addresses
), addresses
# --8<-- [end:listen]


# --8<-- [start:reach]
def outward_address() -> str | None:
    """This machine's address on its default route
    (a UDP connect sends no packet), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            # TEST-NET-1: only used to pick the outgoing interface
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        return probe.getsockname()[0]


address = outward_address()
if address is None or ipaddress.ip_address(address).is_loopback:
    print("no non-loopback interface here: nothing more to show")
else:
    # A client on the network side writes into
    # the store that was meant to be local.
    visitor = dist.TCPStore(
        address,
        store.port,
        is_master=False,
        timeout=datetime.timedelta(seconds=5),
    )
    visitor.set("injected", "from " + address)
    assert store.get("injected") == f"from {address}".encode()
    print(f"a client connecting to {address}:{store.port} wrote a key into it")
# --8<-- [end:reach]


# --8<-- [start:bind]
def store_on(host: str) -> dist.TCPStore:
    """A store that listens only on `host`: bind the
    socket yourself and hand it over (master_listen_fd)."""
    sock = socket.create_server((host, 0))
    port = sock.getsockname()[1]
    return dist.TCPStore(
        host,
        port,
        is_master=True,
        wait_for_workers=False,
        master_listen_fd=sock.detach(),
    )


private = store_on("127.0.0.1")
assert listening_addresses(private.port) == ["127.0.0.1"], listening_addresses(
    private.port
)
if address is not None and not ipaddress.ip_address(address).is_loopback:
    try:
        socket.create_connection((address, private.port), timeout=5).close()
        raise AssertionError(
            "the loopback-only store was reachable from the network address"
        )
    except ConnectionRefusedError:
        print(
            "store bound by hand: listens on 127.0.0.1 only, "
            f"{address}:{private.port} refused"
        )
# --8<-- [end:bind]
