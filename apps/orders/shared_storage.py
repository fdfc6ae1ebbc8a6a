"""Hosts and their organization's shared file storage (apps/sharedfs): it is made as the first
host of the organization in a region starts on a server that mounts it (`provide_for`, from the
provisioning and start jobs, before the server is asked), and it can't be deleted while a host
mounts it (`hosts_mounting`, plugged into `sharedfs.services.MOUNTING_HOSTS`)."""

from apps.orchestration.backends.base import BackendError, Capability
from apps.orchestration.backends.registry import drivers_with, supports
from apps.orders.models import Instance, InstanceState
from apps.sharedfs import services as sharedfs

# A host mounts /shared from its start to its stop; one in error may still run on its server.
NOT_MOUNTING = (InstanceState.PENDING, InstanceState.STOPPED, InstanceState.RELEASED)


def provide_for(instance: Instance) -> None:
    """Make sure the organization's file system exists in the host's region before the host
    starts there, so its spec mounts it (`sharedfs.services.provide_file_system`). A storage
    server out of reach, or the file system being deleted, is a transient error: the job
    tries again later, and the host stays waiting rather than start without /shared."""
    if not sharedfs.offered() or instance.pool is None:
        return
    if not supports(instance.pool.backend.driver, Capability.SHARED_FS):
        return
    try:
        sharedfs.provide_file_system(
            organization=instance.organization, region=instance.region, host_name=instance.name
        )
    except sharedfs.StorageUnavailable as unavailable:
        raise BackendError(unavailable.message, transient=True) from unavailable


def hosts_mounting(organization_id: int, region_id: int) -> list[str]:
    """The names of the organization's hosts in the region that mount its file system now."""
    return list(
        Instance.objects.filter(
            organization_id=organization_id,
            region_id=region_id,
            pool__backend__driver__in=drivers_with(Capability.SHARED_FS),
        )
        .exclude(state__in=NOT_MOUNTING)
        .order_by("name")
        .values_list("name", flat=True)
    )
