"""A test world that is the internet, on this machine: network namespaces the tests create.

    this machine (the GPU server)        router namespace             outside namespace
    lw-up 198.51.100.2/24  <--veth-->  198.51.100.1 | 203.0.113.1  <--veth-->  203.0.113.10
    (the server's uplink and public address)                         HTTP (a package index),
                                                                      DNS (*.outside.test), iperf3

The server reaches 203.0.113.0/24 through the router, which routes 198.51.100.128/25 to the
server (public addresses a park gives hosts of their own); the outside namespace knows only its own
network and its default route to the router, so it reaches hosts only through the server's
public address, as a tenant's laptop would. Every address is a documentation range (RFC 5737):
nothing leaves this machine. Servers in the outside namespace are started here and stopped by
their own PIDs.

Shared by the agent's network tests, the browser journey and bench/agent_hosts.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROUTER, OUTSIDE = "lw-router", "lw-outside"
UPLINK = "lw-up"
PUBLIC_ADDRESS = "198.51.100.2"
ROUTER_SERVER_SIDE = "198.51.100.1"
ROUTER_OUTSIDE_SIDE = "203.0.113.1"
OUTSIDE_ADDRESS = "203.0.113.10"
# Public addresses the park routes to the server, for hosts given an address of their own.
ROUTED_TO_SERVER = "198.51.100.128/25"
OUTSIDE_NAME = "files.outside.test"
PACKAGE = "loam-probe"
TOOLS = ("ip", "nft", "iperf3", "dnsmasq", "curl")


def missing_tools() -> str:
    """Why the world can't be built here ('' when it can)."""
    import os

    if os.geteuid() != 0:
        return "the outside world needs root (network namespaces)"
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (bash deploy/agent/install.sh)"
    return ""


def _run(*command: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")
    return result.stdout


def outside(*command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `command` in the outside namespace (a tenant's laptop on the internet)."""
    return subprocess.run(
        ["ip", "netns", "exec", OUTSIDE, *command], capture_output=True, text=True, timeout=timeout
    )


@dataclass
class OutsideWorld:
    folder: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def dns_servers(self) -> tuple[str, ...]:
        return (OUTSIDE_ADDRESS,)

    def start(self) -> OutsideWorld:
        self.stop_network()  # what a killed run left
        _run("ip", "netns", "add", ROUTER)
        _run("ip", "netns", "add", OUTSIDE)
        _run("ip", "link", "add", UPLINK, "type", "veth", "peer", "name", "r-in", "netns", ROUTER)
        _run("ip", "addr", "add", f"{PUBLIC_ADDRESS}/24", "dev", UPLINK)
        _run("ip", "link", "set", UPLINK, "up")
        _run("ip", "-n", ROUTER, "link", "add", "r-out", "type", "veth", "peer", "name", "eth0")
        _run("ip", "-n", ROUTER, "link", "set", "eth0", "netns", OUTSIDE)
        for namespace, device, address in (
            (ROUTER, "r-in", ROUTER_SERVER_SIDE),
            (ROUTER, "r-out", ROUTER_OUTSIDE_SIDE),
            (OUTSIDE, "eth0", OUTSIDE_ADDRESS),
        ):
            _run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", device)
            _run("ip", "-n", namespace, "link", "set", device, "up")
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
        _run("ip", "netns", "exec", ROUTER, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        _run("ip", "-n", ROUTER, "route", "add", ROUTED_TO_SERVER, "via", PUBLIC_ADDRESS)
        _run("ip", "-n", OUTSIDE, "route", "add", "default", "via", ROUTER_OUTSIDE_SIDE)
        _run("ip", "route", "add", "203.0.113.0/24", "via", ROUTER_SERVER_SIDE)
        self._serve()
        return self

    def _serve(self) -> None:
        site = self.folder / "site"
        _package_index(site)
        (site / "hello.txt").write_text("hello from the outside\n")
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "http",
            sys.executable,
            "-m",
            "http.server",
            "80",
            "--bind",
            OUTSIDE_ADDRESS,
            "--directory",
            str(site),
        )
        self._spawn("iperf3", "iperf3", "-s", "-B", OUTSIDE_ADDRESS)
        self._spawn(
            "dns",
            "dnsmasq",
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            f"--listen-address={OUTSIDE_ADDRESS}",
            f"--address=/outside.test/{OUTSIDE_ADDRESS}",
            f"--pid-file={self.folder / 'dnsmasq.pid'}",
            "--user=root",
        )
        deadline = time.monotonic() + 15
        while outside("curl", "-sf", f"http://{OUTSIDE_ADDRESS}/hello.txt").returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the outside HTTP server did not start")
            time.sleep(0.1)

    def http_clients(self) -> list[str]:
        """The addresses the outside HTTP server saw requests from, in order."""
        log = (self.folder / "logs" / "http.log").read_text()
        return re.findall(r"^(\S+) - - \[", log, re.M)

    def _spawn(self, name: str, *command: str) -> None:
        log = (self.folder / "logs" / f"{name}.log").open("w")
        self.processes.append(
            subprocess.Popen(
                ["ip", "netns", "exec", OUTSIDE, *command],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        )

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
        self.stop_network()

    @staticmethod
    def stop_network() -> None:
        subprocess.run(["ip", "route", "del", "203.0.113.0/24"], capture_output=True)
        for namespace in (OUTSIDE, ROUTER):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", UPLINK], capture_output=True)


def _package_index(site: Path) -> None:
    """A PEP 503 index with one pure-Python wheel, for `pip download` from inside a host."""
    folder = site / "simple" / PACKAGE
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "loam_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("loam_probe/__init__.py", "ANSWER = 42\n")
        archive.writestr(
            "loam_probe-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: loam-probe\nVersion: 1.0\n",
        )
        archive.writestr(
            "loam_probe-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: loam-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(
            "loam_probe-1.0.dist-info/RECORD",
            "loam_probe/__init__.py,,\nloam_probe-1.0.dist-info/METADATA,,\n"
            "loam_probe-1.0.dist-info/WHEEL,,\nloam_probe-1.0.dist-info/RECORD,,\n",
        )
    (folder / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="{wheel.name}">{wheel.name}</a></body></html>\n'
    )
    (site / "simple" / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="{PACKAGE}/">{PACKAGE}</a></body></html>\n'
    )
