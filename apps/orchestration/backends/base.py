"""The driver protocol backends implement (DESIGN.md, Backends), split into capabilities.

A driver declares which it has (`capabilities`): every driver reports its inventory; a driver
with HOSTS runs GPU cloud hosts, one with BATCH runs training tasks (a Slurm cluster has only
INVENTORY and BATCH). A driver with NETWORK also forwards ports of the server's public address to
its hosts and filters what reaches them (port mappings, security groups); one with METRICS
reports each host's figures (GPU, CPU, memory, disk, network) for its monitoring charts, where
nothing pushes them to the portal (the host agent does, in its host reports). The portal asks a
pool's driver only for what it declares, and refuses an order its pool's driver cannot do
before anything is reserved.

Drivers take plain values (specs, handles), never model objects, so a job can call them with
what it reloaded from the database and a driver can be tested without Django.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import ClassVar, Protocol


class Capability(StrEnum):
    INVENTORY = "inventory"  # capacity, telemetry
    HOSTS = "hosts"  # provision, start/stop, resize, disk, bandwidth, release
    BATCH = "batch"  # submit, status, logs, cancel
    NETWORK = "network"  # hosts' forwarded ports, private networks and ingress rules
    METRICS = "metrics"  # each host's figures for its monitoring charts, asked every minute
    TERMINAL = "terminal"  # its hosts trust the portal's host CA: the web terminal logs in
    GANG = "gang"  # a BATCH driver that runs one task across several nodes at once
    # Its hosts mount their organization's shared file storage at /shared (apps/sharedfs).
    SHARED_FS = "shared_fs"


# The transport protocols a forwarded port or an ingress rule names.
TCP, UDP = "tcp", "udp"
PORT_PROTOCOLS = (TCP, UDP)
# What a forwarded port is for: the host's sshd (allocated with the host), a tenant's mapping,
# or a web service of its image that only the portal reaches (allocated with the host).
PURPOSE_SSH, PURPOSE_MAPPING, PURPOSE_SERVICE = "ssh", "mapping", "service"
SSH_PORT = 22


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
class ReportedPool:
    name: str
    accelerator_model: str
    nodes: tuple[NodeCapacity, ...]
    # {image code: digest} of the images its nodes run tasks in, for a backend that runs each
    # task in its image itself (Slurm's containers): a task of another image is refused. None:
    # the backend brings no images of its own (the simulator, agents' hosts, a Slurm cluster
    # that runs commands on the bare node).
    images: Mapping[str, str] | None = None


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
class HostLoad:
    """A running host a METRICS driver is asked about: where it runs and what it holds, as the
    portal allocated it. `card_memory_mib` and `card_tdp_w` are one card's, from the catalog."""

    handle: str
    node: str
    accelerator_indices: tuple[int, ...]
    vcpu: int
    ram_gb: int
    disk_gb: int  # the cloud (data) disk, or the system disk of a host without one
    bandwidth_mbps: int  # 0: unshaped
    card_memory_mib: int = 0
    card_tdp_w: int = 0


@dataclass(frozen=True)
class HostMetrics:
    """One host's figures over the last minute: its cards' mean utilization, their memory used
    and power summed; CPU busy as a share of its vCPUs; memory, disk and network. A figure the
    backend cannot tell is None, never 0."""

    handle: str
    gpu_count: int = 0
    gpu_utilization_pct: float | None = None
    gpu_memory_used_mib: float | None = None
    gpu_memory_total_mib: int | None = None
    power_w: float | None = None
    cpu_pct: float | None = None
    memory_used_mib: float | None = None
    memory_limit_mib: int | None = None
    disk_used_mib: float | None = None
    disk_size_mib: int | None = None
    net_rx_bytes_per_s: float | None = None
    net_tx_bytes_per_s: float | None = None
    simulated: bool = False


@dataclass(frozen=True)
class IngressRule:
    """Traffic a host accepts on its forwarded ports: `protocol` to the host's ports
    `from_port`..`to_port` (inclusive, the host's side of a forward) from `source`, a network
    in CIDR form ("0.0.0.0/0", "203.0.113.0/24", "2001:db8::/32")."""

    protocol: str
    from_port: int
    to_port: int
    source: str


# Every forwarded port open to all: a default security group's rules, and a host's when it is
# provisioned without a network of its own choosing. Only forwarded ports reach a host at all.
OPEN_INGRESS = (
    IngressRule(protocol=TCP, from_port=1, to_port=65535, source="0.0.0.0/0"),
    IngressRule(protocol=UDP, from_port=1, to_port=65535, source="0.0.0.0/0"),
)


@dataclass(frozen=True)
class PortForward:
    """A host port the tenant wants reachable from outside, besides SSH (a port mapping)."""

    protocol: str
    host_port: int


@dataclass(frozen=True)
class HostNetwork:
    """How a host is networked: the private network it joins (`group`: hosts of one group on
    one server reach each other, other groups are isolated), the rules of what reaches its
    forwarded ports from outside (`ingress`; nothing else is let in), and the ports forwarded
    to it besides SSH (`mappings`)."""

    group: str
    ingress: tuple[IngressRule, ...] = ()
    mappings: tuple[PortForward, ...] = ()


@dataclass(frozen=True)
class ForwardedPort:
    """A port of the server's public address forwarded to a port of the host."""

    protocol: str
    host_port: int
    server_port: int
    purpose: str  # PURPOSE_SSH, PURPOSE_MAPPING or PURPOSE_SERVICE


@dataclass(frozen=True)
class HostPorts:
    """What a NETWORK driver allocated to a host: the address the forwarded ports are on
    (empty when the backend has no public address) and every port forwarded to it."""

    address: str
    ports: tuple[ForwardedPort, ...] = ()

    def server_port(self, protocol: str, host_port: int) -> int | None:
        for port in self.ports:
            if (port.protocol, port.host_port) == (protocol, host_port):
                return port.server_port
        return None


@dataclass(frozen=True)
class HostService:
    """A web service the host's image starts (JupyterLab, TensorBoard): its name, the port it
    listens on inside the host, and the path the portal serves it under (the service is told
    it, so its own links carry it)."""

    name: str
    port: int
    base_url: str


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
    # For a driver with NETWORK; None: the backend's default (a private network of the host's
    # own, every forwarded port open to all).
    network: HostNetwork | None = None
    # For a driver that runs them (the agent's); others ignore them.
    services: tuple[HostService, ...] = ()
    # For a driver whose servers keep volumes (the agent's): the volume that is its data disk,
    # at /data, named before the host's handle is known (the host has no data disk of its own
    # then); others keep `data_disk_gb` with the host.
    data_disk_volume: str = ""


@dataclass(frozen=True)
class HostAccess:
    handle: str
    address: str
    ssh_port: int = 22
    ssh_user: str = "root"
    ssh_host_keys: tuple[str, ...] = ()  # what its sshd presents, where the backend knows


@dataclass(frozen=True)
class HostRequestStatus:
    """Where a host request stands on the backend: still under way, or done. A request that
    failed is not a status: asking about it raises BackendError (permanent), as the request
    itself would have."""

    done: bool
    access: HostAccess | None = None  # a finished provisioning: how to reach the new host
    # Still under way but moving (epoch seconds of its last progress: a saved image copied to
    # the host's server): the request's deadline counts from then.
    progress_at: float | None = None


@dataclass(frozen=True)
class TaskSpec:
    """What to run: one training task on the node and the devices (or the share of one) the
    portal allocated; a gang task (a GANG driver's) on every node of `nodes`, with
    `accelerator_milli` whole cards, `vcpu` and `ram_gb` on each."""

    name: str
    node: str  # the first of `nodes`
    accelerator_indices: tuple[int, ...]
    accelerator_milli: int  # thousandths of a card: < 1000 is a share of the one device
    vcpu: int
    ram_gb: int
    image: str
    command: str
    time_limit_min: int | None = None  # until the task's deadline, where it has one
    # Whose task it is, for a backend that keeps tenants apart itself (Slurm: an account and a
    # Unix user per organization), and the organization's accelerator quota, which such a
    # backend enforces too (None: no limit).
    organization_id: int | None = None
    accelerator_limit: int | None = None
    nodes: tuple[str, ...] = ()  # every node, by name; empty: `node` alone
    # The portal may stop it to make room (Slurm: its job runs in the "preemptible" QOS, which
    # the cluster's "normal" one requeues); and its organization's fair share of the park.
    preemptible: bool = False
    fair_share: int = 1

    @property
    def node_names(self) -> tuple[str, ...]:
        return self.nodes or (self.node,)


TASK_PENDING = "pending"
TASK_RUNNING = "running"
TASK_SUCCEEDED = "succeeded"
TASK_FAILED = "failed"
TASK_CANCELLED = "cancelled"
TASK_FINISHED = frozenset({TASK_SUCCEEDED, TASK_FAILED, TASK_CANCELLED})


@dataclass(frozen=True)
class TaskStatus:
    """Where a task stands on the backend. `message` says why it failed or why it waits;
    the rest is what the backend knows of the run (empty where it does not say)."""

    state: str  # one of the TASK_* states
    message: str = ""
    exit_code: int | None = None
    node: str = ""
    device_indices: tuple[int, ...] = ()
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state in TASK_FINISHED


class Driver(Protocol):
    """What every driver is: constructed with a Backend row's config, named, labelled."""

    name: ClassVar[str]
    is_simulator: ClassVar[bool]  # shown as a simulator wherever its hosts and pools appear
    capabilities: ClassVar[frozenset[Capability]]
    config_example: ClassVar[dict]  # what an operator fills in, shown on the registration form

    def __init__(self, config: dict) -> None: ...

    # Optional: `endpoint(config) -> str | None`, a static method naming the outside system
    # the config reaches (a Slurm driver: slurmrestd's normalized URL). No two backends, in any
    # park, may name the same one (`Backend.endpoint` is unique): its capacity would count twice.


class InventoryDriver(Driver, Protocol):
    def capacity(self) -> list[ReportedPool]:
        """The pools and nodes the backend has. Raises BackendError when unreachable."""
        ...

    def telemetry(
        self, hosts: Mapping[str, int], held: Mapping[str, frozenset[int]] | None = None
    ) -> list[NodeTelemetry]:
        """Readings for the given hosts (hostname -> accelerator count the portal knows); a host
        the driver cannot see is left out. `held`: the indices of each host's accelerators the
        portal has given to work (a host or a training task); a driver that measures ignores
        it, the simulator's model follows it (a card nobody holds reads idle). Raises
        BackendError when the backend is unreachable."""
        ...

    def drain_node(self, hostname: str, reason: str) -> None:
        """Take no new work on the node (what runs there goes on)."""
        ...

    def resume_node(self, hostname: str) -> None: ...


class HostDriver(Driver, Protocol):
    """Changes to hosts are requests: each call returns as soon as the backend has accepted
    the change, with the request's handle, and `host_request_status` says later whether it is
    done. No call waits for a host to boot, stop or resize, so a worker is never held by a
    slow backend; the portal polls (apps.orders.tasks) with a job it schedules again.

    A call raises BackendError when the backend refuses or cannot be reached (`transient`:
    ask again later). Calls are idempotent: requesting a host that exists, or a state the host
    is already in, is accepted again (the portal sends a request again after a lost job).
    `handle` is the host's, as `HostRequestStatus.access.handle` named it when provisioned."""

    def provision(self, spec: HostSpec) -> str:
        """Ask for a host; returns the request's handle."""
        ...

    def stop(self, handle: str) -> str: ...

    def start(self, handle: str, spec: HostSpec | None = None) -> str:
        """Start a stopped host as `spec` says: its cards (none for a GPU-less start, 无卡模式),
        vCPU and memory; None: as it last ran."""
        ...

    def resize(self, handle: str, spec: HostSpec) -> str: ...

    def set_disk(self, handle: str, data_disk_gb: int) -> str: ...

    def set_bandwidth(self, handle: str, bandwidth_mbps: int) -> str: ...

    def release(self, handle: str) -> str: ...

    def host_request_status(self, request: str) -> HostRequestStatus:
        """Whether the request is done (and, for a provisioning, the host's access). Raises
        BackendError: permanent when the request failed for good (the message says why),
        transient when the backend could not answer now."""
        ...


class NetworkDriver(Driver, Protocol):
    """A host's network is desired state, not a request: `set_network` records it at once
    (the backend applies it to the running or stopped host live, without restarting it) and
    returns what the host has now, so the caller can do it inside its own transaction. It is
    idempotent: the same network again changes nothing and answers the same ports. A port
    forwarded before keeps its server port; the host's SSH port is allocated when it is
    provisioned and kept until it is released."""

    def set_network(self, handle: str, network: HostNetwork) -> HostPorts:
        """Make `network` the host's. Raises BackendError when it cannot be done (no free
        port left on the server: nothing is changed then)."""
        ...


class MetricsDriver(Driver, Protocol):
    def host_metrics(self, hosts: Sequence[HostLoad], at: datetime) -> list[HostMetrics]:
        """The figures of the given running hosts over the minute up to `at`; a host the
        backend cannot see is left out. Raises BackendError when the backend is unreachable."""
        ...


class TerminalDriver(Driver, Protocol):
    """No method: a promise about its hosts. Each host's sshd trusts the portal's host CA for
    root and the backend reports the keys that sshd presents (`HostAccess.ssh_host_keys`), so
    the portal's web terminal logs in with a certificate of its own and checks it reached that
    host."""


class SharedFsDriver(Driver, Protocol):
    """No method: a promise about its hosts. Each host's spec may name its organization's
    shared file storage (apps/sharedfs), which the backend mounts at /shared in it; the portal
    makes the file system before it asks such a backend to start a host."""


class BatchDriver(Driver, Protocol):
    def submit_task(self, spec: TaskSpec) -> str:
        """Start a training task; returns its handle."""
        ...

    def task_status(self, handle: str) -> TaskStatus: ...

    def task_logs(self, handle: str) -> str:
        """Everything the task printed so far."""
        ...

    def cancel_task(self, handle: str) -> None: ...
