"""Reads of volumes: what they hold of the quota, a tenant's list, a server's and a host's."""

from django.db.models import Max

from apps.core import sql
from apps.quotas.services import Usage, quota_holder
from apps.storage.models import Volume, VolumeState


def live_volumes():
    """Volumes that exist (on their server, or being made there)."""
    return Volume.objects.exclude(state=VolumeState.DELETED)


_KEPT_VOLUMES_GB_SQL = """
SELECT SUM(volume.size_gb)
FROM storage_volume volume
WHERE volume.organization_id IN ({organizations}) AND volume.data_disk_of_id IS NULL
    AND volume.state <> %s
"""


def _kept_volumes_query(organizations) -> tuple[str, list]:
    members, params = sql.members(organizations)
    return (
        _KEPT_VOLUMES_GB_SQL.format(organizations=members),
        [*params, VolumeState.DELETED.value],
    )


@quota_holder(Volume, _kept_volumes_query)
def volume_quota_usage(rows) -> Usage:
    """QUOTA_HOLDERS: the GB of every volume `organizations` keep, whatever it is attached
    to, but hosts' data disks: their hosts count them (in the disk quota) while they live
    (the volumes `live_volumes` answers). Written out: counted on every order, where the
    ORM took several times the statement's CPU to build it.
    `volume_quota_usage(organizations)`: ids, rows or a queryset."""
    ((total,),) = rows
    return Usage(storage_gb=total or 0)


def organization_volumes(organization):
    return live_volumes().filter(organization=organization).select_related("region", "node")


def server_volumes(node) -> list[dict]:
    """The volumes the agent on `node` keeps, as its list of hosts and volumes names them."""
    return [
        {"id": volume.public_id, "size_gb": volume.size_gb}
        | ({"source": volume.source.public_id} if volume.source_id else {})
        for volume in live_volumes().filter(node=node).select_related("source").order_by("pk")
    ]


def workload_volumes(workload_ids) -> dict[int, list[dict]]:
    """Each host's (workload id's) volumes and where they appear in it."""
    attached = live_volumes().filter(workload__in=list(workload_ids)).order_by("mount_path")
    volumes: dict[int, list[dict]] = {}
    for volume in attached:
        volumes.setdefault(volume.workload_id, []).append(
            {"id": volume.public_id, "mount_path": volume.mount_path}
        )
    return volumes


def volumes_version(node) -> str:
    """Changes with every change of a volume on `node` (a deleted one is kept, marked)."""
    changed = Volume.objects.filter(node=node).aggregate(Max("updated_at"))["updated_at__max"]
    return changed.strftime("%Y%m%d%H%M%S%f") if changed else "0"


def data_disk_of(workload_id: int) -> Volume | None:
    """The host's (its workload's) data disk, where it is a volume."""
    return live_volumes().filter(data_disk_of_id=workload_id).first()
