"""Where the host agent's driver (`backends/agent.py`) keeps what it asks of its servers.

That driver never calls a server: each server's `loam-agent` polls the portal for the hosts it
should run and reports what they are (docs/agent-protocol.md). So the driver's requests are
writes of that desired state, and its status reads are reads of the agents' last reports, both
kept by `apps.agents`, which sits above orchestration and plugs its store in here from its
`ready()`: `AGENT_HOST_STORE.one()(backend_id)` is the store of one agent backend.
"""

from collections.abc import Mapping
from ipaddress import IPv4Network
from typing import Protocol

from apps.core.extensions import ExtensionPoint
from apps.orchestration.backends.base import (
    HostNetwork,
    HostPorts,
    HostRequestStatus,
    HostSpec,
    NodeTelemetry,
    ReportedPool,
)

AGENT_HOST_STORE = ExtensionPoint("AGENT_HOST_STORE")


class AgentHostStore(Protocol):
    """One agent backend's servers and the hosts it wants on them. Every request returns the
    request's handle, "<host id>@<generation>"; every method raises BackendError as a driver
    does."""

    def __init__(self, backend_id: int) -> None: ...

    def capacity(self, pools: list[dict]) -> list[ReportedPool]: ...

    def telemetry(self, hosts: Mapping[str, int]) -> list[NodeTelemetry]: ...

    def provision(
        self, spec: HostSpec, public_ips: Mapping[str, IPv4Network] | None = None
    ) -> str: ...

    def stop(self, handle: str) -> str: ...

    def start(self, handle: str, spec: HostSpec | None = None) -> str: ...

    def resize(self, handle: str, spec: HostSpec) -> str: ...

    def set_disk(self, handle: str, data_disk_gb: int) -> str: ...

    def set_bandwidth(self, handle: str, bandwidth_mbps: int) -> str: ...

    def release(self, handle: str) -> str: ...

    def set_network(self, handle: str, network: HostNetwork) -> HostPorts: ...

    def request_status(self, request: str) -> HostRequestStatus: ...
