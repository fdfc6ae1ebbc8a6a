"""Reads of the host agents shared by the agent API, the operator console and the instance
page: a park's agent pools, join tokens and servers with their cards, the hosts a server is to
run, and an instance's card figures for its charts."""

from datetime import timedelta

from django.db.models import Count, Prefetch, Q
from django.utils import timezone

from apps.agents import host_ca, image_copies
from apps.agents.models import (
    AgentCard,
    AgentHost,
    AgentHostPort,
    AgentServer,
    CardSample,
    JoinToken,
    PortPurpose,
    ReportedState,
    SavedImage,
    SavedImageCopy,
    SavedImageState,
    WantedState,
)
from apps.agents.services import AGENT_DRIVER
from apps.catalog.models import Image
from apps.orchestration.models import Allocation, Pool
from apps.orchestration.selectors import host_pools
from apps.orders.hosts import network_group
from apps.orders.models import Instance, InstanceState
from apps.sharedfs import selectors as sharedfs_selectors
from apps.storage.models import Volume
from apps.storage.selectors import server_volumes, volumes_version, workload_volumes
from apps.storage.services import DATA_DISK_PATH

CHART_MINUTES = 15
MAX_CHART_MINUTES = 60


def agent_pools(park):
    """The park's pools that servers may join: those of its backends whose driver is "agent"."""
    return (
        Pool.objects.filter(backend__park=park, backend__driver=AGENT_DRIVER)
        .select_related("backend", "region", "accelerator_model")
        .order_by("name", "pk")
    )


def join_tokens(park):
    return (
        JoinToken.objects.filter(pool__backend__park=park)
        .select_related("pool", "created_by", "revoked_by", "server__node")
        .order_by("-created_at", "-pk")
    )


def servers(park):
    """The park's enrolled servers, each with its node, pool and cards (in index order)."""
    cards = AgentCard.objects.select_related("accelerator").order_by("accelerator__index")
    return (
        AgentServer.objects.filter(node__pool__backend__park=park)
        .select_related("node__pool__region", "node__pool__backend", "revoked_by")
        .prefetch_related(Prefetch("cards", queryset=cards))
        .order_by("node__hostname", "pk")
    )


def held_image_codes(*, park, accelerator_model_id, region=None) -> frozenset[str] | None:
    """`catalog.selectors.HELD_IMAGES`: the images the servers of the park's agent pools of
    this model (in `region`) report, where every pool that runs hosts of it is an agent pool;
    None (any image) where one is not, or where no pool runs them (the order is refused for
    that, with its own reason)."""
    pools = host_pools(park, accelerator_model_id=accelerator_model_id, region=region)
    if {pool.driver for pool in pools} != {AGENT_DRIVER}:
        return None
    servers = AgentServer.objects.filter(
        node__pool__in=[pool.pk for pool in pools], revoked_at__isnull=True
    ).only("images", "images_reported_at")
    held = {name for server in servers for name in server.image_names}
    # A saved image is copied to the server a host of it is placed on, in its region.
    return frozenset(held | image_copies.copyable_codes({pool.region_id for pool in pools}))


def nodes_without_image(pools, image_code: str) -> set[int]:
    """`orchestration.services.NODES_WITHOUT_IMAGE`: the nodes of these pools (`host_pools`')
    whose servers don't hold image `image_code` (only agent servers hold images of their own),
    nor can get a copy of it (a saved image, from a server of their region: `image_copies`)."""
    pool_ids = _agent_pool_ids(pools)
    if not pool_ids:  # most parks' pools: no server of theirs holds images of its own
        return set()
    servers = AgentServer.objects.filter(node__pool_id__in=pool_ids).only(
        "node_id", "images", "images_reported_at"
    )
    lacking = {server.node_id for server in servers if image_code not in server.image_names}
    if not lacking:  # all of them hold it
        return lacking
    return lacking - image_copies.nodes_awaiting_image(pool_ids, image_code)


def nodes_awaiting_image(pools, image_code: str) -> set[int]:
    """`orchestration.services.NODES_AWAITING_IMAGE`: `image_copies.nodes_awaiting_image` of
    these pools' (`host_pools`') agent pools."""
    pool_ids = _agent_pool_ids(pools)
    return image_copies.nodes_awaiting_image(pool_ids, image_code) if pool_ids else set()


def _agent_pool_ids(pools) -> list[int]:
    """The ids of the agent pools among `pools`: only they have servers (`enrol_server` joins
    a server to an agent pool alone), so the others need no read."""
    return [pool.pk for pool in pools if pool.driver == AGENT_DRIVER]


def missing_images(park) -> dict[int, list[Image]]:
    """{server id: the park's images on sale for its cards that it doesn't hold}, for each
    server of the park not revoked: what the operator builds there next. An image is for a
    server's cards when it lists the accelerator model of the server's pool."""
    images = Image.objects.filter(park=park, is_active=True, organization=None).prefetch_related(
        "compatible_accelerators"
    )
    by_model: dict[int, list[Image]] = {}
    for image in images.order_by("name", "pk"):
        for model in image.compatible_accelerators.all():
            by_model.setdefault(model.pk, []).append(image)
    missing = {}
    for server in AgentServer.objects.filter(
        node__pool__backend__park=park, revoked_at__isnull=True
    ).select_related("node__pool"):
        held = server.image_names
        wanted = by_model.get(server.node.pool.accelerator_model_id, [])
        missing[server.pk] = [image for image in wanted if image.code not in held]
    return missing


# --- the agent API -----------------------------------------------------------------------------


def hosts_etag(server: AgentServer) -> str:
    """Changes whenever the hosts wanted on the server do (`services.bump_hosts_version`) or
    its volumes do, with the host CA's key, which every host's spec carries, and with the
    region's shared file systems and their quotas (`shared_fs`)."""
    shared = sharedfs_selectors.region_tag(*_region_and_park(server))
    version = f"{server.hosts_version}.{volumes_version(server.node)}"
    version += f".{image_copies.copies_tag(server)}"
    return f'"{server.public_id}.{version}.{host_ca.ca_tag()}.{shared}"'


def _region_and_park(server: AgentServer) -> tuple[int, int]:
    return Pool.objects.filter(nodes__agent_server=server).values_list(
        "region_id", "region__park_id"
    )[0]


def desired_hosts(server: AgentServer) -> list[dict]:
    """The hosts the server is to run, as GET /api/v1/agent/hosts lists them."""
    ports = AgentHostPort.objects.order_by("server_port", "protocol")
    hosts = (
        AgentHost.objects.filter(server=server)
        .exclude(state=WantedState.REMOVED)
        .prefetch_related(Prefetch("ports", queryset=ports))
        .order_by("created_at", "pk")
    )
    ca_keys = [host_ca.ca_public_key()]
    # An organization's hosts are those on its network, from their first start (no instance
    # names a host's handle before the host runs).
    shared = {
        network_group(organization_id): spec
        for organization_id, spec in sharedfs_selectors.mount_specs(
            *_region_and_park(server)
        ).items()
    }
    # A host whose saved image is being copied here is listed once the copy is ready (one the
    # agent has reported on is always listed: unlisted, it would be removed).
    awaited = image_copies.awaited_codes(server)
    hosts = [host for host in hosts if host.image not in awaited or host.reported_generation]
    workloads = dict(
        Instance.objects.filter(
            node_id=server.node_id, backend_handle__in=[host.handle for host in hosts]
        ).values_list("backend_handle", "workload_id")
    )
    volumes = workload_volumes(workloads.values())
    data_disks = set(
        Volume.objects.filter(data_disk_of__in=list(workloads.values())).values_list(
            "data_disk_of_id", flat=True
        )
    )
    return [
        {
            "id": host.handle,
            "generation": host.generation,
            "state": host.state,
            "card_uuids": list(host.card_uuids) if host.state == WantedState.RUNNING else [],
            "vcpu": host.vcpu,
            "memory_mib": host.memory_mib,
            "system_disk_gb": host.system_disk_gb,
            # A data disk that is a volume is listed with the volumes, at /data.
            "data_disk_gb": 0
            if _data_disk_is_volume(host, workloads, data_disks)
            else host.data_disk_gb,
            "bandwidth_mbps": host.bandwidth_mbps,
            "image": host.image,
            "ssh_public_keys": list(host.ssh_public_keys),
            "ssh_user_ca_keys": ca_keys,
            "network": host_network(host),
            "services": [{**service, "token": host.service_token} for service in host.services],
            "shared_fs": shared.get(host.network_group),
            **({"save_image": host.save_image} if host.state == WantedState.STOPPED else {}),
            "volumes": _host_volumes(host, volumes.get(workloads.get(host.handle), [])),
        }
        for host in hosts
    ]


def _data_disk_is_volume(host: AgentHost, workloads: dict, data_disks: set) -> bool:
    return bool(host.data_disk_volume) or workloads.get(host.handle) in data_disks


def _host_volumes(host: AgentHost, attached: list[dict]) -> list[dict]:
    """The volumes a host has: those attached to its instance's workload, and its data disk
    from its creation on (before its instance knows its handle)."""
    if host.data_disk_volume and all(v["id"] != host.data_disk_volume for v in attached):
        attached = [{"id": host.data_disk_volume, "mount_path": DATA_DISK_PATH}, *attached]
    return attached


def listed_volumes(server: AgentServer) -> list[dict]:
    """The server's volumes as the hosts list names them (`storage.selectors.server_volumes`),
    a host's data disk with the host (`adopt`) whose data.img the agent takes as the volume's
    image where it has one: a data disk made before data disks were volumes."""
    adopt = dict(
        Instance.objects.filter(workload__data_disk__node_id=server.node_id)
        .exclude(backend_handle="")
        .values_list("workload__data_disk__public_id", "backend_handle")
    )
    return [
        {**volume, "adopt": adopt[volume["id"]]} if volume["id"] in adopt else volume
        for volume in server_volumes(server.node)
    ]


def kept_saved_images(server: AgentServer) -> list[str]:
    """The saved images the server is to keep (the hosts list's `saved_images`): those being
    saved there or ready, and those copied there; the agent removes the others."""
    saved = SavedImage.objects.filter(
        server=server, state__in=(SavedImageState.SAVING, SavedImageState.READY)
    ).values_list("image__code", flat=True)
    return sorted({*saved, *image_copies.kept_copies(server)})


def host_network(host: AgentHost) -> dict:
    """A host's "network" as the agent reads it: its private network's name, every port of the
    server's public address forwarded to it (SSH first), and its ingress rules."""
    ports = sorted(host.ports.all(), key=lambda p: (p.purpose != PortPurpose.SSH, p.server_port))
    return {
        "group": host.network_group or host.handle,
        "public_ip": host.public_ip or "",
        "ports": [
            {
                "purpose": port.purpose,
                "protocol": port.protocol,
                "server_port": port.server_port,
                "host_port": port.host_port,
            }
            for port in ports
        ],
        "ingress": [
            {
                "protocol": rule["protocol"],
                "from_port": rule["from_port"],
                "to_port": rule["to_port"],
                "source": rule["source"],
            }
            for rule in host.ingress
        ],
    }


# --- the instance page -------------------------------------------------------------------------


def host_service_names(instance) -> list[str]:
    """The web services the instance's host on an agent server was given (none elsewhere)."""
    if not instance.backend_handle or instance.node_id is None:
        return []
    host = AgentHost.objects.filter(
        handle=instance.backend_handle, server__node_id=instance.node_id
    ).values_list("services", flat=True)
    return [service["name"] for service in host.first() or ()]


def service_upstream(instance, name: str) -> tuple[str, str] | None:
    """Where the portal's proxy reaches web service `name` of the instance's host, and the
    secret it presents there: ("address:port", token), the port the one the host's server
    forwards to it on its public address (else, a server with none, the host's own address,
    which the server itself reaches). None unless the host runs, wanted and reported, with
    that service."""
    if not instance.backend_handle or instance.node_id is None:
        return None
    host = (
        AgentHost.objects.filter(
            handle=instance.backend_handle,
            server__node_id=instance.node_id,
            state=WantedState.RUNNING,
            reported_state=ReportedState.RUNNING,
        )
        .select_related("server")
        .first()
    )
    service = next((s for s in host.services if s["name"] == name), None) if host else None
    if service is None:
        return None
    address, port = host.server.public_address, None
    if address:
        port = (
            host.ports.filter(purpose=PortPurpose.SERVICE, host_port=service["port"])
            .values_list("server_port", flat=True)
            .first()
        )
    elif host.address:
        address, port = host.address, service["port"]
    if port is None:
        return None
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}", host.service_token


def agent_server_of(instance) -> AgentServer | None:
    """The agent server a host runs on, if it runs on one."""
    if instance.node_id is None:
        return None
    return AgentServer.objects.filter(node_id=instance.node_id).first()


def instance_telemetry(instance, *, minutes: int = CHART_MINUTES, now=None) -> dict | None:
    """The figures of the cards the instance holds now, since it got them and over the last
    `minutes`: {"cards": [{"uuid", "model", "index", "memory_total_mib"}], "series": {uuid:
    {"at": [iso], "utilization_pct": [...], "memory_used_mib": [...], "power_w": [...]}},
    "server_silent": bool, "since": iso of the charts' start or null, "updated_at": iso}.
    None when it does not run on an agent server. A figure the card cannot report is null in
    its series."""
    server = agent_server_of(instance)
    if server is None:
        return None
    now = now or timezone.now()
    minutes = max(1, min(int(minutes), MAX_CHART_MINUTES))
    allocation = (
        Allocation.objects.filter(workload_id=instance.workload_id, released_at__isnull=True)
        .order_by("-created_at")
        .first()
    )
    cards = []
    series = {}
    since = None
    if allocation is not None:
        since = max(now - timedelta(minutes=minutes), allocation.created_at)
        held = list(
            AgentCard.objects.filter(server=server, accelerator__allocation=allocation)
            .select_related("accelerator")
            .order_by("accelerator__index")
        )
        cards = [
            {
                "uuid": card.uuid,
                "model": card.model,
                "index": card.accelerator.index,
                "memory_total_mib": card.memory_total_mib,
                "health": card.health,
            }
            for card in held
        ]
        series = {
            card.uuid: {"at": [], "utilization_pct": [], "memory_used_mib": [], "power_w": []}
            for card in held
        }
        by_id = {card.pk: card.uuid for card in held}
        samples = (
            CardSample.objects.filter(card_id__in=list(by_id), at__gte=since)
            .order_by("at", "card_id")
            .values_list("card_id", "at", "utilization_pct", "memory_used_mib", "power_w")
        )
        for card_id, at, utilization, memory, power in samples:
            line = series[by_id[card_id]]
            line["at"].append(at.isoformat())
            line["utilization_pct"].append(utilization)
            line["memory_used_mib"].append(memory)
            line["power_w"].append(power)
    return {
        "cards": cards,
        "series": series,
        "server_silent": server.is_silent(now),
        "since": since.isoformat() if since else None,
        "updated_at": now.isoformat(),
    }


# --- saved images ----------------------------------------------------------------------------


def saved_images_for(organization):
    """The organization's saved images not deleted, newest first, each with `users`: how many
    of its hosts not released run from it."""
    return (
        SavedImage.objects.filter(organization=organization)
        .exclude(state=SavedImageState.DELETED)
        .select_related("image", "server__node__pool__region", "instance")
        .prefetch_related(
            Prefetch(
                "copies",
                queryset=SavedImageCopy.objects.select_related("server__node").order_by(
                    "server__node__hostname"
                ),
            )
        )
        .annotate(
            users=Count(
                "image__instances",
                filter=~Q(image__instances__state=InstanceState.RELEASED),
                distinct=True,
            )
        )
        .order_by("-created_at", "-pk")
    )


def awaited_copy_of(instance):
    """The copy of its saved image a host waits for on its server, while it is provisioned."""
    if instance.state != InstanceState.PROVISIONING or instance.image.organization_id is None:
        return None
    server = agent_server_of(instance)
    return image_copies.awaited_copy(server.pk, instance.image.code) if server else None


def savable_hosts(organization):
    """The organization's stopped hosts on agent servers: those it can save as images."""
    return (
        Instance.objects.filter(
            organization=organization,
            state=InstanceState.STOPPED,
            pool__backend__driver=AGENT_DRIVER,
        )
        .exclude(backend_handle="")
        .order_by("name", "pk")
    )
