"""The host agent's backend: GPU servers that run `loam-agent` (agent/, docs/agent-protocol.md).

The portal never calls such a server. Each enrolled server polls the portal for the hosts it
should run (desired state) and reports what they are; this driver's requests write that desired
state and its status reads read the reports, through the store `apps.agents` plugs into
`apps.orchestration.agent_store.AGENT_HOST_STORE`. Servers are not listed in the config: they
join a pool of the backend with a join token an operator issues in the console.

Config:
    pools: [{"name": "...", "accelerator_model": "<catalog slug>"}, ...]
        the pools the backend is registered with; each enrolled server is a node of one. A pool
        may add "public_ips": "198.51.100.128/26", public IPv4 addresses the park routes to the
        pool's servers: each host there then gets one of its own (every port of it, within its
        security group), instead of only a port of its server's address.
"""

import ipaddress
from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

from apps.orchestration.agent_store import AGENT_HOST_STORE, AgentHostStore
from apps.orchestration.backends.base import (
    BackendError,
    Capability,
    HostNetwork,
    HostPorts,
    HostRequestStatus,
    HostSpec,
    NodeTelemetry,
    ReportedPool,
)


class AgentDriver:
    name = "agent"
    is_simulator = False
    # Its state is in the portal: `registry.driver_of` tells it its Backend row's id.
    binds_backend = True
    capabilities = frozenset(
        {
            Capability.INVENTORY,
            Capability.HOSTS,
            Capability.NETWORK,
            Capability.TERMINAL,
            Capability.SHARED_FS,
        }
    )
    config_example = {"pools": [{"name": "gpu-h200", "accelerator_model": "h200-sxm"}]}

    def __init__(self, config: dict):
        self.config = config or {}
        self.backend_id = self.config.get("backend_id")

    def _pools(self) -> list[dict]:
        pools = self.config.get("pools", [])
        if not isinstance(pools, list) or not all(
            isinstance(pool, dict)
            and isinstance(pool.get("name"), str)
            and pool["name"].strip()
            and isinstance(pool.get("accelerator_model"), str)
            for pool in pools
        ):
            raise BackendError(
                'agent: "pools" must be a list of {"name": ..., "accelerator_model": ...}'
            )
        for pool in pools:
            if "public_ips" in pool:
                _public_ips(pool)
        return [
            {"name": pool["name"].strip(), "accelerator_model": pool["accelerator_model"]}
            for pool in pools
        ]

    def _public_ips(self) -> dict[str, ipaddress.IPv4Network]:
        """Pool name -> the public addresses routed to its servers, for pools that have some."""
        return {
            pool["name"].strip(): _public_ips(pool)
            for pool in self.config.get("pools", [])
            if isinstance(pool, dict) and pool.get("public_ips")
        }

    def _store(self) -> AgentHostStore:
        if self.backend_id is None:
            raise BackendError("agent: this driver was built without its backend")
        try:
            factory = AGENT_HOST_STORE.one()
        except ImproperlyConfigured as exc:
            raise BackendError("agent: the portal's agents app is not installed") from exc
        return factory(self.backend_id)

    # --- inventory -------------------------------------------------------------------------------

    def capacity(self) -> list[ReportedPool]:
        """The configured pools with the servers enrolled in each (none while the backend is
        being registered)."""
        pools = self._pools()
        if self.backend_id is None:
            return [
                ReportedPool(
                    name=pool["name"], accelerator_model=pool["accelerator_model"], nodes=()
                )
                for pool in pools
            ]
        return self._store().capacity(pools)

    def telemetry(
        self, hosts: Mapping[str, int], held: Mapping[str, frozenset[int]] | None = None
    ) -> list[NodeTelemetry]:
        """What the agents measured last: utilization and power per card (measured, so `held`
        is not needed); a silent or revoked server reads unhealthy. Each host's own figures
        (CPU, memory, disk, network) come in its agent's host reports: no METRICS here."""
        return self._store().telemetry(hosts)

    # No scheduler of its own on a server: a drain lives in the portal alone.
    def drain_node(self, hostname: str, reason: str) -> None:
        pass

    def resume_node(self, hostname: str) -> None:
        pass

    # --- hosts: each a new generation of the host's desired state --------------------------------

    def provision(self, spec: HostSpec) -> str:
        return self._store().provision(spec, public_ips=self._public_ips())

    def stop(self, handle: str) -> str:
        return self._store().stop(handle)

    def start(self, handle: str, spec: HostSpec | None = None) -> str:
        return self._store().start(handle, spec)

    def resize(self, handle: str, spec: HostSpec) -> str:
        return self._store().resize(handle, spec)

    def set_disk(self, handle: str, data_disk_gb: int) -> str:
        return self._store().set_disk(handle, data_disk_gb)

    def set_bandwidth(self, handle: str, bandwidth_mbps: int) -> str:
        return self._store().set_bandwidth(handle, bandwidth_mbps)

    def release(self, handle: str) -> str:
        return self._store().release(handle)

    # --- network: ports of the server's public address, the private network, ingress rules ------

    def set_network(self, handle: str, network: HostNetwork) -> HostPorts:
        """Written as the host's next generation (the agent applies it live); a new mapping
        gets the lowest free port of the server's public range."""
        return self._store().set_network(handle, network)

    def host_request_status(self, request: str) -> HostRequestStatus:
        """Done once the server reports the requested generation (or a later one) in the state
        asked for; a `failed` report is a permanent error with the agent's message, a server
        silent for too long a transient one."""
        return self._store().request_status(request)


def _public_ips(pool: dict) -> ipaddress.IPv4Network:
    try:
        network = ipaddress.ip_network(str(pool["public_ips"]), strict=False)
    except ValueError:
        network = None
    if not isinstance(network, ipaddress.IPv4Network):
        raise BackendError(
            f'agent: pool {pool.get("name")!r}: "public_ips" must be an IPv4 network such as '
            f'"198.51.100.128/26", not {pool["public_ips"]!r}'
        )
    return network
