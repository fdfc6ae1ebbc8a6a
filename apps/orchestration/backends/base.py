"""The driver protocol every backend implements (DESIGN.md, Backends).

Drivers take plain values (specs, handles), never model objects, so a task can call them with
what it reloaded from the database and a driver can be tested without Django.
"""

from dataclasses import dataclass, field
from typing import Protocol


class BackendError(Exception):
    """A backend refused or failed. `transient` errors are retried with backoff."""

    def __init__(self, message: str, *, transient: bool = False):
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class NodeCapacity:
    hostname: str
    accelerators: int
    vcpu: int
    ram_gb: int
    healthy: bool = True
    telemetry: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PoolCapacity:
    name: str
    accelerator_model: str
    nodes: tuple[NodeCapacity, ...]


@dataclass(frozen=True)
class HostSpec:
    """What to run: one instance's shape on the node and devices the portal allocated."""

    name: str
    node: str
    accelerator_indices: tuple[int, ...]
    vcpu: int
    ram_gb: int
    system_disk_gb: int
    data_disk_gb: int
    bandwidth_mbps: int
    image: str
    ssh_public_key: str


@dataclass(frozen=True)
class HostAccess:
    handle: str
    address: str
    ssh_port: int = 22
    ssh_user: str = "root"


class Driver(Protocol):
    """Constructed with a Backend row's config."""

    name: str
    is_simulator: bool

    def capacity(self) -> list[PoolCapacity]: ...

    def provision(self, spec: HostSpec) -> HostAccess: ...

    def stop(self, handle: str) -> None: ...

    def start(self, handle: str) -> None: ...

    def resize(self, handle: str, spec: HostSpec) -> None: ...

    def set_disk(self, handle: str, data_disk_gb: int) -> None: ...

    def set_bandwidth(self, handle: str, bandwidth_mbps: int) -> None: ...

    def release(self, handle: str) -> None: ...

    def status(self, handle: str) -> str: ...
