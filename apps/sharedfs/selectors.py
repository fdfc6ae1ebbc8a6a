"""Reads of the shared file storage: an organization's file systems with their capacity, the
park's for its operators, and what an agent server's hosts mount (their spec's `shared_fs`)."""

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Max, Q, Sum

from apps.catalog.models import Region
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.sharedfs.models import SharedFileSystem, SharedFileSystemState
from apps.sharedfs.services import GIB, MOUNTING_HOSTS, storage_url


def capacities_gb(park_id: int, organization_ids) -> dict[int, int]:
    """Each organization's shared storage quota: its own limit, else its park's, else
    LOAM_SHARED_FS_DEFAULT_GB (at least 1 GB: JuiceFS takes 0 as no limit)."""
    limits = QuotaLimit.objects.filter(
        Q(organization_id__in=list(organization_ids)) | Q(organization__isnull=True),
        park_id=park_id,
        resource=QuotaResource.SHARED_STORAGE_GB,
    ).values_list("organization_id", "limit")
    by_organization = dict(limits)
    default = by_organization.pop(None, settings.LOAM_SHARED_FS_DEFAULT_GB)
    return {pk: max(1, by_organization.get(pk, default)) for pk in organization_ids}


@dataclass(frozen=True)
class FileSystemRow:
    region: Region
    file_system: SharedFileSystem | None
    capacity_gb: int
    mounted_in: tuple[str, ...] = ()  # the names of the hosts that mount it now

    @property
    def used_gib(self) -> float:
        return self.file_system.used_bytes / GIB if self.file_system else 0.0

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.used_gib / self.capacity_gb))


def organization_rows(organization) -> list[FileSystemRow]:
    """Each region of the organization's park, with its file system there (or None) and the
    hosts that mount it."""
    capacity = capacities_gb(organization.park_id, [organization.pk])[organization.pk]
    by_region = {fs.region_id: fs for fs in organization.shared_file_systems.all()}
    regions = Region.objects.filter(park_id=organization.park_id).order_by("name")
    mounting = MOUNTING_HOSTS.one()
    return [
        FileSystemRow(
            region,
            by_region.get(region.pk),
            capacity,
            tuple(mounting(organization.pk, region.pk)) if region.pk in by_region else (),
        )
        for region in regions
    ]


def park_file_systems(park) -> list[FileSystemRow]:
    """The park's file systems, per organization and region, for its operators."""
    file_systems = list(
        SharedFileSystem.objects.filter(organization__park=park)
        .select_related("organization", "region")
        .order_by("organization__name", "region__name")
    )
    capacities = capacities_gb(park.pk, {fs.organization_id for fs in file_systems})
    return [FileSystemRow(fs.region, fs, capacities[fs.organization_id]) for fs in file_systems]


def mount_specs(region_id: int, park_id: int) -> dict[int, dict]:
    """{organization id: the `shared_fs` of its hosts in the region} (docs/agent-protocol.md),
    for the organizations that have a file system there (not one being deleted); none where the
    portal has no storage server."""
    if not settings.LOAM_SHARED_FS_SERVER:
        return {}
    file_systems = SharedFileSystem.objects.filter(
        region_id=region_id, state=SharedFileSystemState.READY
    )
    capacities = capacities_gb(park_id, {fs.organization_id for fs in file_systems})
    specs = {}
    for fs in file_systems:
        url = storage_url(fs)
        specs[fs.organization_id] = {
            "name": fs.name,
            "meta_url": url,
            "storage": "postgres",  # the data blocks in the same database (its jfs_blob table)
            "bucket": url,
            "capacity_gb": capacities[fs.organization_id],
        }
    return specs


def region_tag(region_id: int, park_id: int) -> str:
    """Changes when a file system of the region is created or deleted or a shared storage quota
    of the park changes: part of an agent server's hosts ETag."""
    ready = SharedFileSystem.objects.filter(
        region_id=region_id, state=SharedFileSystemState.READY
    ).aggregate(n=Count("pk"), ids=Sum("pk"))
    changed = QuotaLimit.objects.filter(
        park_id=park_id, resource=QuotaResource.SHARED_STORAGE_GB
    ).aggregate(at=Max("updated_at"), n=Count("pk"))
    stamp = changed["at"].isoformat() if changed["at"] else ""
    return f"{ready['n']}.{ready['ids'] or 0}.{changed['n']}.{stamp}"
