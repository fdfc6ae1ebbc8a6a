"""The driver protocol every backend implements (DESIGN.md, Backends).

Drivers take plain values (specs, handles), never model objects, so a task can call them with
what it reloaded from the database and a driver can be tested without Django.
"""

from collections.abc import Mapping
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
class AcceleratorReading:
    """One accelerator's utilization (0-100 %) and, where the driver knows it, its power draw."""

    index: int
    utilization_pct: float
    power_w: float | None = None


@dataclass(frozen=True)
class NodeTelemetry:
    """What a driver measured on one host just now."""

    hostname: str
    healthy: bool = True
    accelerators: tuple[AcceleratorReading, ...] = ()
    simulated: bool = False


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


@dataclass(frozen=True)
class TaskSpec:
    """What to run: one training task on the node and the devices (or the share of one) the
    portal allocated."""

    name: str
    node: str
    accelerator_indices: tuple[int, ...]
    accelerator_milli: int  # thousandths of a card: < 1000 is a share of the one device
    vcpu: int
    ram_gb: int
    image: str
    command: str


TASK_RUNNING = "running"
TASK_SUCCEEDED = "succeeded"
TASK_FAILED = "failed"


@dataclass(frozen=True)
class TaskStatus:
    """Where a task stands on the backend: `state` is one of TASK_RUNNING, TASK_SUCCEEDED,
    TASK_FAILED; `logs` is everything it printed so far; `message` says why it failed."""

    state: str
    logs: str = ""
    message: str = ""

    @property
    def finished(self) -> bool:
        return self.state != TASK_RUNNING


class Driver(Protocol):
    """Constructed with a Backend row's config."""

    name: str
    is_simulator: bool

    def capacity(self) -> list[PoolCapacity]: ...

    def telemetry(self, hosts: Mapping[str, int]) -> list[NodeTelemetry]:
        """Readings for the given hosts (hostname -> accelerator count the portal knows); a host
        the driver cannot see is left out. Raises BackendError when the backend is unreachable."""
        ...

    def provision(self, spec: HostSpec) -> HostAccess: ...

    def stop(self, handle: str) -> None: ...

    def start(self, handle: str) -> None: ...

    def resize(self, handle: str, spec: HostSpec) -> None: ...

    def set_disk(self, handle: str, data_disk_gb: int) -> None: ...

    def set_bandwidth(self, handle: str, bandwidth_mbps: int) -> None: ...

    def release(self, handle: str) -> None: ...

    def status(self, handle: str) -> str: ...

    def run_task(self, spec: TaskSpec) -> str:
        """Start a training task; returns its handle."""
        ...

    def poll_task(self, handle: str) -> TaskStatus: ...

    def cancel_task(self, handle: str) -> None: ...
