"""A partner's server on this machine: a network namespace of its own, wired like a server in
another building.

    partner namespace                     router namespace (tests/outside_world.py)
    lw-pup 192.0.2.2/24  <--veth-->  192.0.2.1 | 203.0.113.1  <--veth-->  the outside world
    127.0.0.1:<portal port>  -- a bridge -->  the portal on this machine's 127.0.0.1

Its uplink is its only way out: its default route is the router, so it reaches the outside world
and the outside world reaches its public address as it would any server on the internet. It
reaches the portal at the address the portal's pages name (http://localhost:<port>), through a
bridge that listens on the partner's loopback and connects to this machine's: the portal under
test listens on loopback only. Commands run there through `nsenter --net`, keeping this machine's
file systems (/run/netns, the host image, the cgroups), as a second server would have its own.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from contextlib import contextmanager, suppress
from pathlib import Path

from tests.outside_world import ROUTER

PARTNER = "lw-partner"
PARTNER_UPLINK = "lw-pup"
PARTNER_ADDRESS = "192.0.2.2"  # RFC 5737, as the outside world's
ROUTER_PARTNER_SIDE = "192.0.2.1"
CLONE_NEWNET = 0x40000000


def in_partner(*command) -> list[str]:
    """`command` as run on the partner's server (its network, this machine's files)."""
    return ["nsenter", f"--net=/run/netns/{PARTNER}", *map(str, command)]


def _run(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")


def _remove() -> None:
    subprocess.run(["ip", "netns", "del", PARTNER], capture_output=True)  # its veth goes too


@contextmanager
def partner_server(portal_port: int):
    """The partner's namespace, routed through the outside world's router (which must be up),
    with the portal bridged onto its loopback; removed on exit."""
    _remove()  # what a killed run left
    _run("ip", "netns", "add", PARTNER)
    _run("ip", "-n", PARTNER, "link", "add", PARTNER_UPLINK, "type", "veth", "peer", "name", "r-p")
    _run("ip", "-n", PARTNER, "link", "set", "r-p", "netns", ROUTER)
    for namespace, device, address in (
        (PARTNER, PARTNER_UPLINK, PARTNER_ADDRESS),
        (ROUTER, "r-p", ROUTER_PARTNER_SIDE),
    ):
        _run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", device)
        _run("ip", "-n", namespace, "link", "set", device, "up")
    _run("ip", "-n", PARTNER, "link", "set", "lo", "up")
    _run("ip", "-n", PARTNER, "route", "add", "default", "via", ROUTER_PARTNER_SIDE)
    bridge = _PortalBridge(portal_port)
    try:
        yield
    finally:
        bridge.close()
        _remove()


class _PortalBridge:
    """Listens on the partner's 127.0.0.1:<port> and relays each connection to this machine's."""

    def __init__(self, port: int):
        self.port = port
        self.listener = _listen_in(PARTNER, port)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inside, _address = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._connect, args=(inside,), daemon=True).start()

    def _connect(self, inside: socket.socket) -> None:
        with inside:
            try:
                portal = socket.create_connection(("localhost", self.port))
            except OSError:
                return
            with portal:
                back = threading.Thread(target=_relay, args=(portal, inside), daemon=True)
                back.start()
                _relay(inside, portal)
                back.join()

    def close(self) -> None:
        with suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (Linux)
        self.listener.close()


def _relay(source: socket.socket, target: socket.socket) -> None:
    """Copy `source` to `target` until `source` ends, then end `target`'s side of it."""
    try:
        while data := source.recv(65536):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
    except OSError:  # either end went away: end the other relay too
        for end in (source, target):
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _listen_in(namespace: str, port: int) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:`port` of `namespace`: made by a thread that enters
    the namespace for that one call (a socket keeps the namespace it was made in)."""
    made: dict = {}

    def make() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        target = os.open(Path("/run/netns") / namespace, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if libc.setns(target, CLONE_NEWNET):
                raise OSError(ctypes.get_errno(), f"setns into {namespace}")
            made["socket"] = socket.create_server(("127.0.0.1", port))
        except OSError as error:
            made["error"] = error
        finally:
            os.close(target)

    # The thread ends in the partner's namespace and takes it with it: this process's other
    # threads never leave their own.
    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]
    return made["socket"]
