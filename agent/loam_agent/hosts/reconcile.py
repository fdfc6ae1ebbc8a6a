"""Converge the server to the portal's desired hosts, one host at a time per worker.

Each host has its own worker thread, so a slow create (an image, an SSH wait) never delays a stop
or a removal of another host, and one host's failure doesn't touch the others. Every report
(a change, the full list) gets its number (`sequence`) when it is taken.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Protocol

from loam_agent.hosts.image import BuiltImage
from loam_agent.hosts.model import ActualHost, DesiredHost, HostError, HostNetwork, HostStatus
from loam_agent.hosts.volumes import DATA_DISK_PATH, DesiredVolume
from loam_agent.hosts.workers import Workers

logger = logging.getLogger(__name__)

SSH_WAIT_S = 20.0


class Runtime(Protocol):
    def inspect(self, host_id: str) -> ActualHost | None: ...
    def list(self) -> list[str]: ...
    def create(self, host: DesiredHost) -> None: ...
    def start(self, host: DesiredHost) -> None: ...
    def stop(self, host_id: str) -> None: ...
    def save_image(self, host_id: str, name: str) -> BuiltImage: ...
    def set_limits(self, host_id: str, vcpu: int, memory_mib: int) -> None: ...
    def grow_disk(self, host_id: str, data_disk_gb: int) -> None: ...
    def set_bandwidth(self, host_id: str, mbps: int) -> None: ...
    def set_network(self, host_id: str, network: HostNetwork) -> None: ...
    def expect_networks(self, networks: dict[str, HostNetwork]) -> None: ...
    def remove(self, host_id: str) -> None: ...
    def apply_volumes(self, volumes: list[DesiredVolume]) -> list[dict]: ...


def ssh_answers(address: str, port: int = 22, wait_s: float = SSH_WAIT_S) -> bool:
    """Whether sshd accepts a TCP connection within `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            # An IPv4 literal on a host network: no name to resolve.
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.settimeout(1)
                probe.connect((address, port))
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


def ssh_host_keys(address: str, wait_s: float = SSH_WAIT_S) -> tuple[str, ...]:
    """The public keys ("type base64") sshd presents on `address`:22 once it answers within
    `wait_s`; () if it never does. Read over the server's own link to the host, which nobody
    else is on: the portal pins them to check, in the web terminal, that it reached this host."""
    deadline = time.monotonic() + wait_s
    if not ssh_answers(address, wait_s=wait_s):
        return ()
    while True:
        if keys := _keyscan(address):
            return keys
        if time.monotonic() >= deadline:
            return ()
        time.sleep(0.2)


def _keyscan(address: str) -> tuple[str, ...]:
    try:
        scan = subprocess.run(
            ["ssh-keyscan", "-T", "5", address], capture_output=True, text=True, timeout=15
        )
    except subprocess.TimeoutExpired:
        return ()
    lines = (line.split() for line in scan.stdout.splitlines() if not line.startswith("#"))
    return tuple(sorted(f"{fields[1]} {fields[2]}" for fields in lines if len(fields) >= 3))


def converge(
    runtime: Runtime,
    host: DesiredHost,
    report: Callable[[HostStatus], None],
    host_keys: Callable[[str], tuple[str, ...]] = ssh_host_keys,
) -> HostStatus:
    """Bring one host to `host`; report each state change through `report`; return the last."""
    creating_reported = False
    try:
        actual = runtime.inspect(host.id)
        if actual is None:
            report(HostStatus(host.id, host.generation, "creating"))
            creating_reported = True
            runtime.create(host)
            actual = runtime.inspect(host.id)
            assert actual is not None, "the runtime created a host it can't inspect"
        if actual.network != host.network:
            # Live, whatever the host's state: its ports and rules are kept while it is stopped.
            runtime.set_network(host.id, host.network)
        if any(volume.mount_path == DATA_DISK_PATH for volume in host.volumes):
            # Its data disk is a volume, which the volumes' list grows; a data.img it had is
            # that volume's image once the host has it unmounted (volumes.py).
            actual.data_disk_gb = host.data_disk_gb
        if host.data_disk_gb < actual.data_disk_gb:
            raise HostError(
                f"the data disk only grows: it has {actual.data_disk_gb} GB, "
                f"the portal asks for {host.data_disk_gb} GB"
            )
        if host.state == "stopped":
            if actual.running:
                runtime.stop(host.id)
            if host.data_disk_gb > actual.data_disk_gb:
                runtime.grow_disk(host.id, host.data_disk_gb)
            status = HostStatus(host.id, host.generation, "stopped", actual.address)
            if host.save_image:
                saved = runtime.save_image(host.id, host.save_image)
                status.saved_image = {
                    "name": saved.name,
                    "digest": saved.digest,
                    "size_bytes": saved.size_bytes,
                }
            report(status)
            return status
        if host.data_disk_gb > actual.data_disk_gb:
            raise HostError(
                f"the data disk can only grow while the host is stopped (it has "
                f"{actual.data_disk_gb} GB, asked {host.data_disk_gb} GB): stop it first"
            )
        if actual.running and tuple(sorted(actual.card_uuids)) != tuple(sorted(host.card_uuids)):
            # Devices can't be bound into a running nspawn container: cards change by restart.
            runtime.stop(host.id)
            actual.running = False
        if not actual.running:
            if not creating_reported:
                report(HostStatus(host.id, host.generation, "creating", actual.address))
            runtime.start(host)
        else:
            if (actual.vcpu, actual.memory_mib) != (host.vcpu, host.memory_mib):
                runtime.set_limits(host.id, host.vcpu, host.memory_mib)
            if actual.bandwidth_mbps != host.bandwidth_mbps:
                runtime.set_bandwidth(host.id, host.bandwidth_mbps)
        if not (keys := host_keys(actual.address)):
            raise HostError(f"sshd did not answer on {actual.address}:22 within {SSH_WAIT_S:g} s")
        status = HostStatus(host.id, host.generation, "running", actual.address, ssh_host_keys=keys)
    except HostError as error:
        status = HostStatus(host.id, host.generation, "failed", message=str(error))
    except Exception as error:  # an unforeseen failure fails this host, not the agent
        logger.exception("host %s failed", host.id)
        status = HostStatus(host.id, host.generation, "failed", message=f"agent error: {error}")
    report(status)
    return status


class Reconciler(Workers):
    """Keeps one worker per host busy with the newest desired state of that host.

    `report(sequence, status)` sends each change, numbered by `next_sequence`."""

    def __init__(
        self,
        runtime: Runtime,
        report: Callable[[int, HostStatus], None],
        *,
        next_sequence: Callable[[], int],
        host_keys: Callable[[str], tuple[str, ...]] = ssh_host_keys,
    ) -> None:
        self._runtime = runtime
        self._report_out = report
        self._next_sequence = next_sequence
        super().__init__()
        self._host_keys = host_keys
        self._pending: dict[str, DesiredHost | None] = {}  # None: remove
        self._applied: dict[str, DesiredHost] = {}
        self.statuses: dict[str, HostStatus] = {}

    def apply(self, desired: list[DesiredHost]) -> None:
        wanted = {host.id: host for host in desired}
        known = set(self._runtime.list()) | set(self._applied)
        self._expect_networks(desired, known - set(wanted))
        with self._lock:
            for host in desired:
                if self._applied.get(host.id) != host:
                    self._pending[host.id] = host
            for host_id in known - set(wanted):
                self._pending[host_id] = None
            idle = [host_id for host_id in self._pending if host_id not in self._busy]
            self._busy.update(idle)
        for host_id in idle:
            threading.Thread(target=self._work, args=(host_id,), name=f"host-{host_id}").start()

    def _expect_networks(self, desired: list[DesiredHost], leaving: set[str]) -> None:
        """Every network change of this list in one go, ahead of the hosts' workers (which
        would apply them one host at a time, in any order)."""
        networks = {host_id: HostNetwork() for host_id in leaving}
        networks.update({host.id: host.network for host in desired})
        try:
            self._runtime.expect_networks(networks)
        except HostError as error:
            # Each host's worker meets the same refusal and reports it on that host.
            logger.error("host networks not applied: %s", error)

    def full_report(self) -> tuple[int, list[dict]]:
        """Every host's last status, and the report's number."""
        with self._lock:
            return self._next_sequence(), [status.to_json() for status in self.statuses.values()]

    def _report(self, status: HostStatus) -> None:
        # Numbered under the lock that records it: a full report taken meanwhile holds this
        # status only if it is numbered after it, so whichever of the two arrives last, the
        # portal keeps the newer.
        with self._lock:
            self.statuses[status.id] = status
            if status.state == "removed":
                self.statuses.pop(status.id)
            sequence = self._next_sequence()
        self._report_out(sequence, status)

    def _work(self, host_id: str) -> None:
        while True:
            with self._lock:
                if host_id not in self._pending:
                    self._busy.discard(host_id)
                    return
                host = self._pending.pop(host_id)
            if host is None:
                self._remove(host_id)
            else:
                status = converge(self._runtime, host, self._report, self._host_keys)
                with self._lock:
                    if status.state != "failed":
                        self._applied[host_id] = host
                    else:
                        self._applied.pop(host_id, None)

    def _remove(self, host_id: str) -> None:
        generation = self.statuses.get(host_id, HostStatus(host_id, 0, "")).generation
        try:
            self._runtime.remove(host_id)
        except Exception as error:
            logger.exception("removing host %s failed", host_id)
            self._report(HostStatus(host_id, generation, "failed", message=f"remove: {error}"))
            return
        with self._lock:
            self._applied.pop(host_id, None)
        self._report(HostStatus(host_id, generation, "removed"))
