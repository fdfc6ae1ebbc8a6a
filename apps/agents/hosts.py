"""The agent driver's store (`apps.orchestration.agent_store`): the hosts one agent backend
wants on its servers, and what their agents reported.

Every request is a new generation of one host's desired state, written under the host's lock,
and answered with "<host id>@<generation>"; the server's agent picks it up at its next poll
(`GET /api/v1/agent/hosts`, whose ETag changes with it). A request that asks for what the host
already is answers the current generation again, so a request sent twice (after a lost job) is
done once. A stopped host holds no cards; growing a running host's disk is a generation that
stops it and, once the agent reports it stopped, one that starts it again
(`services.record_host_reports`).

Networking: each host gets a port of its server's public address for SSH when it is
provisioned (the lowest free in the server's range), and one more per port mapping
(`set_network`); a server port is one host's per protocol until the host is removed. A network
change (mappings, ingress rules, group) is a new generation the agent applies live, except
while a growing disk keeps the host stopped: the restart generation that follows carries it.

Web services: a host whose image starts some (`catalog.models.IMAGE_SERVICES`: JupyterLab,
TensorBoard) gets a server port for each with the host, a secret for the portal's proxy to
present to them, and ingress on their ports from the portal's networks only
(LOAM_PORTAL_SOURCE_NETWORKS): the tenant's security group never opens them
(`agents.selectors.service_upstream` tells nginx where one is).
"""

import ipaddress
import secrets
from collections.abc import Mapping, Sequence

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Prefetch
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.agents import image_copies
from apps.agents.models import (
    AGENT_HOST_TRANSITIONS,
    AgentCard,
    AgentHost,
    AgentHostPort,
    AgentServer,
    PortPurpose,
    ReportedState,
    SavedImageCopy,
    SavedImageCopyState,
    WantedState,
)
from apps.agents.services import bump_hosts_version, free_host_ports, held_card_uuids
from apps.core.numbers import parse_id
from apps.core.transactions import lock
from apps.core.transitions import transition
from apps.orchestration.backends.base import (
    OPEN_INGRESS,
    PORT_PROTOCOLS,
    SSH_PORT,
    TCP,
    AcceleratorReading,
    BackendError,
    ForwardedPort,
    HostAccess,
    HostNetwork,
    HostPorts,
    HostRequestStatus,
    HostService,
    HostSpec,
    NodeCapacity,
    NodeTelemetry,
    PortForward,
    ReportedPool,
)
from apps.orchestration.models import Accelerator, Pool

SETTLED = frozenset({ReportedState.RUNNING, ReportedState.STOPPED, ReportedState.REMOVED})


def ssh_keys(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def ingress_rows(rules) -> list[dict]:
    """The rules as AgentHost.ingress keeps them (and the agent reads them), sources in
    canonical CIDR form. A rule the agent could not apply is refused (BackendError)."""
    rows = []
    for rule in rules:
        try:
            source = str(ipaddress.ip_network(str(rule.source), strict=False))
        except ValueError:
            source = None
        if (
            source is None
            or rule.protocol not in PORT_PROTOCOLS
            or not 1 <= rule.from_port <= rule.to_port <= 65535
        ):
            raise BackendError(f"agent: {rule!r} is not an ingress rule the agent can apply")
        rows.append(
            {
                "protocol": rule.protocol,
                "from_port": rule.from_port,
                "to_port": rule.to_port,
                "source": source,
            }
        )
    return rows


def service_rows(services: Sequence[HostService]) -> list[dict]:
    """The services as AgentHost.services keeps them."""
    return [
        {"name": service.name, "port": service.port, "base_url": service.base_url}
        for service in services
    ]


def host_ingress(rules, services: Sequence[dict]) -> list[dict]:
    """The host's ingress as the agent applies it: the tenant's rules (`ingress_rows`) less the
    ports of its web services, which only the portal's networks reach."""
    rows = ingress_rows(rules)
    served = sorted({service["port"] for service in services})
    if not served:
        return rows
    kept = []
    for row in rows:
        start = row["from_port"]
        if row["protocol"] == TCP:
            for port in served:
                if port > row["to_port"]:
                    break
                if port >= start:
                    if port > start:
                        kept.append({**row, "from_port": start, "to_port": port - 1})
                    start = port + 1
        if start <= row["to_port"]:
            kept.append({**row, "from_port": start})
    portal = [
        {"protocol": TCP, "from_port": port, "to_port": port, "source": network}
        for port in served
        for network in settings.LOAM_PORTAL_SOURCE_NETWORKS
    ]
    return kept + portal


def parse_request(request: str) -> tuple[str, int]:
    handle, _sep, generation = (request or "").rpartition("@")
    number = parse_id(generation)
    if not handle or number is None:
        raise BackendError(f"agent: {request!r} is not a host request")
    return handle, number


class AgentHostStore:
    """The hosts of one agent backend (a Backend row whose driver is "agent")."""

    def __init__(self, backend_id: int):
        self.backend_id = backend_id

    # --- inventory -------------------------------------------------------------------------------

    def _servers(self):
        return AgentServer.objects.filter(node__pool__backend_id=self.backend_id).select_related(
            "node__pool"
        )

    def capacity(self, pools: list[dict]) -> list[ReportedPool]:
        """The configured pools (and any registered later) with their enrolled servers."""
        registered = {
            pool.name: pool.accelerator_model.slug
            for pool in Pool.objects.filter(backend_id=self.backend_id).select_related(
                "accelerator_model"
            )
        }
        models = {pool["name"]: pool["accelerator_model"] for pool in pools}
        for name, slug in registered.items():
            models.setdefault(name, slug)
        nodes: dict[str, list[NodeCapacity]] = {name: [] for name in models}
        now = timezone.now()
        servers = (
            self._servers()
            .filter(revoked_at__isnull=True)
            .annotate(card_count=Count("node__accelerators"))
        )
        for server in servers:
            node = server.node
            nodes.setdefault(node.pool.name, []).append(
                NodeCapacity(
                    hostname=node.hostname,
                    accelerators=server.card_count,
                    vcpu=node.vcpu_total,
                    ram_gb=node.ram_gb_total,
                    healthy=not server.is_silent(now),
                )
            )
        return [
            ReportedPool(name=name, accelerator_model=models[name], nodes=tuple(found))
            for name, found in nodes.items()
            if name in models
        ]

    def telemetry(self, hosts: Mapping[str, int]) -> list[NodeTelemetry]:
        """Each server's latest figures: utilization and power of every card that reported a
        utilization in the last heartbeat (a null figure is left out, never read as 0). A silent
        or revoked server reads unhealthy and without figures."""
        now = timezone.now()
        cards = AgentCard.objects.filter(vanished_at__isnull=True).select_related("accelerator")
        servers = (
            self._servers()
            .filter(node__hostname__in=list(hosts))
            .prefetch_related(Prefetch("cards", queryset=cards, to_attr="live_cards"))
        )
        readings = []
        for server in servers:
            silent = server.is_silent(now)
            fresh = [
                card
                for card in server.live_cards
                if not silent
                and card.utilization_pct is not None
                and card.sampled_at is not None
                and card.sampled_at >= (server.last_heartbeat_at or now)
            ]
            readings.append(
                NodeTelemetry(
                    hostname=server.node.hostname,
                    healthy=not silent,
                    accelerators=tuple(
                        AcceleratorReading(
                            index=card.accelerator.index,
                            utilization_pct=float(card.utilization_pct),
                            power_w=card.power_w,
                        )
                        for card in sorted(fresh, key=lambda c: c.accelerator.index)
                    ),
                )
            )
        return readings

    # --- requests ------------------------------------------------------------------------------

    def _server_for(self, hostname: str) -> AgentServer:
        server = self._servers().filter(node__hostname=hostname).first()
        if server is None:
            raise BackendError(
                _("agent: no enrolled server is called %(node)s") % {"node": hostname}
            )
        if server.revoked_at is not None:
            raise BackendError(_revoked(server))
        return server

    def _card_uuids(self, server: AgentServer, indices) -> list[str]:
        serials = dict(
            Accelerator.objects.filter(node_id=server.node_id, index__in=list(indices)).values_list(
                "index", "serial"
            )
        )
        missing = [index for index in indices if index not in serials]
        if missing:
            raise BackendError(
                _("agent: %(node)s has no card with index %(indices)s")
                % {"node": server.node.hostname, "indices": ", ".join(map(str, missing))}
            )
        return [serials[index] for index in indices]

    @transaction.atomic
    def provision(
        self, spec: HostSpec, public_ips: Mapping[str, ipaddress.IPv4Network] | None = None
    ) -> str:
        server = self._server_for(spec.node)
        uuids = self._card_uuids(server, spec.accelerator_indices)
        lock(AgentServer, server.pk)
        # The same host asked for again (a provisioning job sent twice): its request again.
        for host in server.hosts.exclude(state=WantedState.REMOVED).filter(name=spec.name):
            if sorted(host.card_uuids) == sorted(uuids) and host.generation == 1:
                return host.request()
        handle = f"h-{secrets.token_hex(8)}"
        network = spec.network
        services = service_rows(spec.services)
        host = AgentHost.objects.create(
            handle=handle,
            server=server,
            name=spec.name[:63],
            generation=1,
            state=WantedState.RUNNING,
            card_uuids=uuids,
            vcpu=spec.vcpu,
            memory_mib=spec.ram_gb * 1024,
            system_disk_gb=spec.system_disk_gb,
            data_disk_gb=spec.data_disk_gb,
            data_disk_volume=spec.data_disk_volume,
            bandwidth_mbps=spec.bandwidth_mbps,
            image=spec.image,
            ssh_public_keys=ssh_keys(spec.ssh_public_key),
            network_group=network.group if network else handle,
            ingress=host_ingress(network.ingress if network else OPEN_INGRESS, services),
            services=services,
            service_token=secrets.token_urlsafe(32) if services else "",
        )
        # Its SSH port, its services' (and any mappings) now: none free fails the provisioning,
        # undone.
        self._forward(host, server, network.mappings if network else ())
        routed = (public_ips or {}).get(server.node.pool.name)
        if routed is not None:
            host.public_ip = self._free_public_ip(server, routed)
            host.save(update_fields=["public_ip"])
        # A saved image held by another server of the region: the host waits for its copy.
        image_copies.ask_for_copy(server=server, image_code=spec.image)
        bump_hosts_version(server)
        return host.request()

    # --- network -------------------------------------------------------------------------------

    def _forward(self, host: AgentHost, server: AgentServer, mappings: Sequence[PortForward]):
        """Make the host's forwarded ports SSH, its web services' and `mappings`: ports no longer
        wanted are freed, new ones get the lowest free server port of their protocol (under the
        server's lock, which the caller holds). Returns whether anything changed; raises
        BackendError, having changed nothing it keeps, when a protocol's range is full."""
        served = {(TCP, service["port"]) for service in host.services}
        for mapping in mappings:
            if mapping.protocol not in PORT_PROTOCOLS or not 1 <= mapping.host_port <= 65535:
                raise BackendError(f"agent: {mapping!r} is not a port the agent can forward")
            if (mapping.protocol, mapping.host_port) in served:
                raise BackendError(
                    f"agent: {mapping!r} is the port of a web service only the portal reaches"
                )
        wanted = {(m.protocol, m.host_port): PortPurpose.MAPPING for m in mappings}
        wanted.update(dict.fromkeys(served, PortPurpose.SERVICE))
        wanted[(TCP, SSH_PORT)] = PortPurpose.SSH
        existing = {(p.protocol, p.host_port): p for p in host.ports.all()}
        gone = [port.pk for key, port in existing.items() if key not in wanted]
        if gone:
            AgentHostPort.objects.filter(pk__in=gone).delete()
        new = sorted(
            (key for key in wanted if key not in existing),
            key=lambda key: (wanted[key] != PortPurpose.SSH, key),
        )
        first, last = server.public_ports
        taken: dict[str, set[int]] = {}
        rows = []
        for protocol, host_port in new:
            if protocol not in taken:
                taken[protocol] = set(
                    AgentHostPort.objects.filter(server=server, protocol=protocol).values_list(
                        "server_port", flat=True
                    )
                )
            port = next((p for p in range(first, last + 1) if p not in taken[protocol]), None)
            if port is None:
                raise BackendError(
                    _(
                        "agent: %(node)s has no free %(protocol)s port left on its public "
                        "address (ports %(first)d–%(last)d are all in use); release a host or a "
                        "port mapping there, or give the server a wider range"
                    )
                    % {
                        "node": server.node.hostname,
                        "protocol": protocol.upper(),
                        "first": first,
                        "last": last,
                    }
                )
            taken[protocol].add(port)
            rows.append(
                AgentHostPort(
                    host=host,
                    server=server,
                    protocol=protocol,
                    server_port=port,
                    host_port=host_port,
                    purpose=wanted[(protocol, host_port)],
                )
            )
        AgentHostPort.objects.bulk_create(rows)
        return bool(gone or rows)

    @staticmethod
    def _free_public_ip(server: AgentServer, routed: ipaddress.IPv4Network) -> str:
        """The lowest address of `routed` no host holds, under the pool's lock (its servers
        share the addresses; the caller holds the server's lock, taken first)."""
        lock(Pool, server.node.pool_id)
        held = set(
            AgentHost.objects.filter(public_ip__isnull=False).values_list("public_ip", flat=True)
        )
        candidates = routed.hosts() if routed.prefixlen < 31 else iter(routed)
        for address in candidates:
            if str(address) not in held:
                return str(address)
        raise BackendError(
            _(
                "agent: every public IP of pool %(pool)s (%(network)s) is held by a host; "
                "release one, or route more addresses to the pool"
            )
            % {"pool": server.node.pool.name, "network": routed}
        )

    def _ports_of(self, host: AgentHost, server: AgentServer) -> HostPorts:
        ports = sorted(host.ports.all(), key=lambda p: (p.purpose != PortPurpose.SSH, p.pk))
        return HostPorts(
            address=server.public_address or "",
            ports=tuple(
                ForwardedPort(
                    protocol=port.protocol,
                    host_port=port.host_port,
                    server_port=port.server_port,
                    purpose=port.purpose,
                )
                for port in ports
            ),
        )

    def set_network(self, handle: str, network: HostNetwork) -> HostPorts:
        """The host's network as the next generation (applied live), unless it is what the host
        has already. A removed host has none: nothing is forwarded to it any more."""
        with transaction.atomic():
            host = self._host(handle, for_update=True)
            server = host.server
            if host.state == WantedState.REMOVED:
                return HostPorts(address=server.public_address or "")
            ingress = host_ingress(network.ingress, host.services)
            changed = self._forward(host, server, network.mappings)
            changed = changed or (network.group, ingress) != (host.network_group, host.ingress)
            if changed:
                host.network_group, host.ingress = network.group, ingress
                fields = ["network_group", "ingress", "updated_at"]
                # While a growing disk keeps it stopped, the generation that starts it again
                # (`services.record_host_reports`) carries the change.
                if host.start_after is None:
                    host.generation += 1
                    fields.append("generation")
                host.save(update_fields=fields)
                bump_hosts_version(server)
            return self._ports_of(host, server)

    def _host(self, handle: str, *, for_update: bool) -> AgentHost:
        found = AgentHost.objects.filter(
            handle=handle, server__node__pool__backend_id=self.backend_id
        ).values_list("pk", "server_id")
        ids = found.first()
        if ids is None:
            raise BackendError(_("agent: no host %(handle)s") % {"handle": handle})
        host_id, server_id = ids
        if for_update:
            # The server before its host, as an agent's report locks them: a change and a
            # report crossing each other wait instead of deadlocking.
            lock(AgentServer, server_id)
            lock(AgentHost, host_id)
        return AgentHost.objects.select_related("server__node").get(pk=host_id)

    def _change(self, handle: str, change) -> str:
        """Apply `change(host) -> {field: value}` as the host's next generation, unless it asks
        for nothing new (then the current request is the answer)."""
        with transaction.atomic():
            host = self._host(handle, for_update=True)
            if change is _removal:
                if host.state == WantedState.REMOVED:
                    return host.request()
                return self._remove(host)
            if host.state == WantedState.REMOVED:
                raise BackendError(_("agent: host %(handle)s was removed") % {"handle": handle})
            if host.server.revoked_at is not None:
                raise BackendError(_revoked(host.server))
            asked = change(host)
            final = asked.pop("_final_generation", None)
            values = {
                field: value for field, value in asked.items() if getattr(host, field) != value
            }
            if not values:
                return host.request(host.start_after + 1 if host.start_after else None)
            values["generation"] = host.generation + 1
            state = values.pop("state", None)
            if state is not None:
                transition(host, state, table=AGENT_HOST_TRANSITIONS, held=True, changes=values)
            else:
                for field, value in values.items():
                    setattr(host, field, value)
                host.save(update_fields=[*values, "updated_at"])
            bump_hosts_version(host.server)
            return host.request(final)

    def _remove(self, host: AgentHost) -> str:
        """Remove `host`, read under its lock and not removed yet."""
        transition(
            host,
            WantedState.REMOVED,
            table=AGENT_HOST_TRANSITIONS,
            held=True,
            changes={"card_uuids": [], "start_after": None, "generation": host.generation + 1},
        )
        free_host_ports(host)  # and its public IP
        host.public_ip = None
        bump_hosts_version(host.server)
        return host.request()

    def stop(self, handle: str) -> str:
        return self._change(
            handle,
            lambda host: {"state": WantedState.STOPPED, "card_uuids": [], "start_after": None},
        )

    def start(self, handle: str, spec: HostSpec | None = None) -> str:
        """Running again with the cards the portal holds for it; `spec`'s vCPU and memory where
        given (a GPU-less start's small share, or the flavor's again after one)."""

        def change(host):
            values = {
                "state": WantedState.RUNNING,
                "card_uuids": held_card_uuids(host),
                "start_after": None,
            }
            if spec is not None:
                values.update(
                    card_uuids=self._card_uuids(host.server, spec.accelerator_indices),
                    vcpu=spec.vcpu,
                    memory_mib=spec.ram_gb * 1024,
                )
            return values

        return self._change(handle, change)

    def resize(self, handle: str, spec: HostSpec) -> str:
        def change(host):
            values = {"vcpu": spec.vcpu, "memory_mib": spec.ram_gb * 1024}
            if host.state == WantedState.RUNNING:
                values["card_uuids"] = self._card_uuids(host.server, spec.accelerator_indices)
            return values

        return self._change(handle, change)

    def set_disk(self, handle: str, data_disk_gb: int) -> str:
        """A disk grows only while its host is stopped: a running host is stopped with the new
        size, then started again; the request is done once it runs again."""

        def change(host):
            if data_disk_gb == host.data_disk_gb:
                return {}
            if host.state != WantedState.RUNNING:
                return {"data_disk_gb": data_disk_gb}
            return {
                "data_disk_gb": data_disk_gb,
                "state": WantedState.STOPPED,
                "card_uuids": [],
                "start_after": host.generation + 1,
                "_final_generation": host.generation + 2,
            }

        return self._change(handle, change)

    def set_bandwidth(self, handle: str, bandwidth_mbps: int) -> str:
        return self._change(handle, lambda host: {"bandwidth_mbps": bandwidth_mbps})

    def release(self, handle: str) -> str:
        return self._change(handle, _removal)

    # --- status ----------------------------------------------------------------------------------

    def request_status(self, request: str) -> HostRequestStatus:
        handle, generation = parse_request(request)
        host = self._host(handle, for_update=False)
        final = host.start_after + 1 if host.start_after else host.generation
        if generation > final:
            raise BackendError(
                _("agent: host %(handle)s has no generation %(generation)d")
                % {"handle": handle, "generation": generation}
            )
        reported = host.reported_generation or 0
        wanted = host.state if generation == host.generation else None
        # A removal has no generation of its own on the server (the host just left the list):
        # the agent reports it with the last generation it had, so any `removed` will do.
        gone = host.state == WantedState.REMOVED and host.reported_state == ReportedState.REMOVED
        if gone or (
            reported >= generation
            and (host.reported_state == wanted if wanted else host.reported_state in SETTLED)
        ):
            access = None
            if host.reported_state == ReportedState.RUNNING and host.address:
                access = self._access(host)
            return HostRequestStatus(done=True, access=access)
        if host.reported_state == ReportedState.FAILED and reported >= min(
            generation, host.generation
        ):
            if generation == 1 and host.state != WantedState.REMOVED:
                # A host that never came up: the portal gives its cards back, so the server
                # must too (unless a release removed it meanwhile).
                with transaction.atomic():
                    locked = self._host(handle, for_update=True)
                    if locked.state != WantedState.REMOVED:
                        self._remove(locked)
            raise BackendError(
                host.reported_message
                or _("agent: %(node)s could not bring host %(handle)s to generation %(g)d")
                % {"node": host.server.node.hostname, "handle": handle, "g": generation}
            )
        # A host its server never reported on may still wait for its image there.
        copy = None if reported else image_copies.awaited_copy(host.server_id, host.image)
        if copy is not None:
            return self._waiting_for_copy(host, copy)
        server = host.server
        if server.revoked_at is not None:
            if host.state == WantedState.REMOVED:
                return HostRequestStatus(done=True)  # nothing will answer: it is gone for us
            raise BackendError(_revoked(server))
        if server.is_silent():
            raise BackendError(
                _(
                    "agent: %(node)s has sent no heartbeat since %(time)s; waiting for it to "
                    "come back"
                )
                % {
                    "node": server.node.hostname,
                    "time": (server.last_heartbeat_at or server.enrolled_at).isoformat(),
                },
                transient=True,
            )
        return HostRequestStatus(done=False)

    def _waiting_for_copy(self, host: AgentHost, copy: SavedImageCopy) -> HostRequestStatus:
        """A host not listed to its server yet, whose saved image is being copied there: under
        way while the copy moves, failed with the copy; a release of it is done at once (its
        server never had it)."""
        if host.state == WantedState.REMOVED:
            return HostRequestStatus(done=True)
        if copy.state == SavedImageCopyState.FAILED:
            with transaction.atomic():
                locked = self._host(host.handle, for_update=True)
                if locked.state != WantedState.REMOVED:
                    self._remove(locked)
            raise BackendError(
                _("Copying image %(image)s to %(node)s failed: %(reason)s")
                % {
                    "image": copy.saved_image.image.name,
                    "node": copy.server.node.hostname,
                    "reason": _(copy.message) if copy.message else "—",
                }
            )
        moved = copy.moved_at or copy.created_at
        return HostRequestStatus(done=False, progress_at=moved.timestamp())

    def _access(self, host: AgentHost) -> HostAccess:
        """Where tenants reach a running host: its own public IP, where its pool has them; its
        SSH port on the server's public address, where the server has one; else where its
        sshd listens (the server's own network)."""
        keys = tuple(host.ssh_host_keys)
        if host.public_ip:
            return HostAccess(host.handle, host.public_ip, ssh_port=22, ssh_host_keys=keys)
        public = host.server.public_address
        ssh = host.ports.filter(purpose=PortPurpose.SSH).values_list("server_port", flat=True)
        ssh_port = ssh.first() if public else None
        if public and ssh_port is not None:
            return HostAccess(host.handle, public, ssh_port=ssh_port, ssh_host_keys=keys)
        port = host.ssh_port or 22
        return HostAccess(host.handle, host.address, ssh_port=port, ssh_host_keys=keys)


def _removal(host: AgentHost) -> dict:
    """The change a release asks for (`AgentHostStore._remove` makes it)."""
    return {"state": WantedState.REMOVED}


def _revoked(server: AgentServer) -> str:
    return _("agent: the credential of %(node)s was revoked; it must enrol again") % {
        "node": server.node.hostname
    }
