"""TCPStores on one host of the test bed, and a client on another host that tries to reach them.

    python store_probe.py serve HOW:HOST:PORT ...   # one store per argument; serves until killed (at most 120 s)
    python store_probe.py visit [--wait-for=HOST:PORT] HOST:PORT ...  # per store: what a bare connect and a TCPStore client got

HOW is `arg`: `TCPStore(HOST, PORT, is_master=True)`, the host only passed as an argument (the security
chapter: it still listens on every interface); or `fd`: a socket bound to HOST by hand, handed over with
`master_listen_fd` (the chapter's fix), as in snippets/security/store_listens.py.
"""

import datetime
import socket
import sys
import time

import torch.distributed as dist


def serve(specs: list[str]) -> None:
    stores = []
    for spec in specs:
        how, host, port = spec.split(":")
        if how == "fd":
            sock = socket.create_server((host, int(port)))
            store = dist.TCPStore(
                host, int(port), is_master=True, wait_for_workers=False, master_listen_fd=sock.detach()
            )
        else:
            store = dist.TCPStore(host, int(port), is_master=True, wait_for_workers=False)
        stores.append(store)
    print("listening", flush=True)
    time.sleep(120)  # the test kills it long before


def wait_for(target: str, timeout_s: float = 60) -> None:
    """Until a TCP connect to `target` is accepted (the server may still be starting), at most `timeout_s`."""
    host, port = target.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 0.1) + 1):
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
    sys.exit(f"{target} never accepted a connection in {timeout_s} s")


def visit(targets: list[str]) -> None:
    if targets[0].startswith("--wait-for="):
        wait_for(targets.pop(0).split("=", 1)[1])
    for target in targets:
        host, port = target.rsplit(":", 1)
        try:  # a bare TCP connect first: refused at once, or accepted
            socket.create_connection((host, int(port)), timeout=3).close()
            print(f"{target} socket: accepted", flush=True)
        except OSError as error:
            print(f"{target} socket: {type(error).__name__}: {error}", flush=True)
        try:
            client = dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=3))
            client.set("visitor", socket.gethostname())
            assert client.get("visitor") == socket.gethostname().encode()
            print(f"{target} store: reached", flush=True)
        except Exception as error:  # the text a reader would see
            print(f"{target} store: {type(error).__name__}: {error}", flush=True)


if __name__ == "__main__":
    {"serve": serve, "visit": visit}[sys.argv[1]](sys.argv[2:])
