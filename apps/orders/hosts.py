"""How a host reaches its backend: its pool's driver and the spec that driver is given."""

from django.conf import settings

from apps.orchestration.backends.base import (
    HostDriver,
    HostNetwork,
    HostService,
    HostSpec,
    IngressRule,
    PortForward,
)
from apps.orchestration.backends.registry import driver_of
from apps.orchestration.services import device_indices
from apps.orders.models import Instance
from apps.orders.selectors import ingress_rules_of, port_mappings_of
from apps.storage.selectors import data_disk_of


def host_driver(instance: Instance) -> HostDriver:
    return driver_of(instance.pool.backend)


def network_group(organization_id: int) -> str:
    """The private network of an organization's hosts: those on one server reach each other,
    and no other organization's."""
    return f"o-{organization_id}"


def host_network(instance: Instance) -> HostNetwork:
    """The host's network as its driver is given it: its organization's private network, its
    security group's rules and its port mappings."""
    return HostNetwork(
        group=network_group(instance.organization_id),
        ingress=tuple(IngressRule(**rule) for rule in ingress_rules_of(instance)),
        mappings=tuple(
            PortForward(protocol=mapping.protocol, host_port=mapping.host_port)
            for mapping in port_mappings_of(instance)
        ),
    )


def service_base_url(instance_id: int, name: str) -> str:
    """The path a host's web service is served under (nginx, deploy/nginx/loam.conf), on the
    services' origin (`service_url`)."""
    return f"/instances/{instance_id}/{name}/"


def service_url(instance_id: int, name: str) -> str:
    """Where a member opens a host's web service: its path on LOAM_SERVICES_URL."""
    return settings.LOAM_SERVICES_URL + service_base_url(instance_id, name)


def host_services(instance: Instance) -> tuple[HostService, ...]:
    return tuple(
        HostService(
            name=service.name,
            port=service.port,
            base_url=service_base_url(instance.pk, service.name),
        )
        for service in instance.image.services
    )


def host_spec(instance: Instance, flavor=None) -> HostSpec:
    """The host as `flavor` (by default its own). A host shrinking to a smaller flavor keeps its
    lowest-indexed cards (as `orchestration.services.resize_capacity` does once it is done), so
    the spec names only those."""
    flavor = flavor or instance.flavor
    data_disk = data_disk_of(instance.workload_id)
    return HostSpec(
        name=instance.name,
        node=instance.node.hostname,
        accelerator_indices=device_indices(instance)[: flavor.accelerator_count],
        vcpu=flavor.vcpu,
        ram_gb=flavor.ram_gb,
        system_disk_gb=instance.system_disk_gb,
        data_disk_gb=instance.data_disk_gb,
        bandwidth_mbps=instance.bandwidth_mbps,
        image=instance.image.code,
        ssh_public_key=instance.ssh_public_key,
        network=host_network(instance),
        services=host_services(instance),
        data_disk_volume=data_disk.public_id if data_disk else "",
    )
