"""How a host reaches its backend: its pool's driver and the spec that driver is given."""

from apps.orchestration.backends.base import HostDriver, HostSpec
from apps.orchestration.backends.registry import driver_of
from apps.orchestration.services import device_indices
from apps.orders.models import Instance


def host_driver(instance: Instance) -> HostDriver:
    return driver_of(instance.pool.backend)


def host_spec(instance: Instance, flavor=None) -> HostSpec:
    """The host as `flavor` (by default its own). A host shrinking to a smaller flavor keeps its
    lowest-indexed cards (as `orchestration.services.resize_capacity` does once it is done), so
    the spec names only those."""
    flavor = flavor or instance.flavor
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
    )
