"""Volumes' use cases: create, snapshot, grow, attach, detach, delete; the agents' reports.

Each runs in the caller's transaction or its own durable one, with the volume's row lock taken
before the organization's (the quota's), as `core.transactions.LOCK_ORDER` declares; attaching
and detaching are the orders app's (`orders.volumes`), which locks the host first and says
where it runs. Nothing here calls a server: the agent there follows the list of its volumes and
hosts (`storage.selectors.server_volumes`, `storage.selectors.workload_volumes`).
"""

import re
from decimal import Decimal

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing.metering import HOURS_PER_MONTH, MeterSpec, reconcile
from apps.billing.models import Meter, MeterKind
from apps.catalog.models import PriceKind
from apps.catalog.selectors import price_in_force
from apps.core.audit import record_event
from apps.core.errors import DomainError, InvalidTransition
from apps.core.transactions import lock_all, locked
from apps.core.transitions import transition
from apps.orchestration.models import Node, NodeHealth
from apps.quotas.services import Usage, reserve
from apps.storage.models import VOLUME_TRANSITIONS, Volume, VolumeState
from apps.tenants.access import authorize
from apps.workloads.models import Workload, WorkloadKind

# A host's data disk is a volume too (`create_data_disk`): one limit for both.
MAX_VOLUME_GB = 32768
# The drivers whose servers keep volumes: an agent's keeps each as an ext4 image.
VOLUME_DRIVERS = ("agent",)
# Where a host's data disk appears in it, as it did before the disk was a volume.
DATA_DISK_PATH = "/data"
# Where a volume may appear in a host (the agent checks the same: loam_agent.hosts.volumes).
MOUNT_PATH = re.compile(r"(/[A-Za-z0-9._-]+)+")
SYSTEM_FOLDERS = frozenset(
    ("bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "proc", "run", "sbin", "sys", "usr")
)


class VolumeRefused(DomainError):
    code = "volume_refused"
    status = 409


def check_size(size_gb) -> None:
    if not isinstance(size_gb, int) or isinstance(size_gb, bool) or size_gb < 1:
        raise DomainError(_("A volume's size is a whole number of GB, at least 1."))
    if size_gb > MAX_VOLUME_GB:
        raise DomainError(
            _("A volume holds at most %(limit)s GB.") % {"limit": f"{MAX_VOLUME_GB:,}"}
        )


def check_mount_path(path: str) -> None:
    if not MOUNT_PATH.fullmatch(path) or any(part in (".", "..") for part in path.split("/")):
        raise DomainError(
            _("“%(path)s” is not a mount path: an absolute path such as /mnt/data.")
            % {"path": path}
        )
    if path.split("/")[1] in SYSTEM_FOLDERS:
        raise DomainError(
            _("“%(path)s” is inside a system folder; choose a path such as /mnt/data.")
            % {"path": path}
        )


def volume_servers(region):
    """The servers of `region` that keep volumes, the one with the fewest first."""
    return (
        Node.objects.filter(
            pool__region=region,
            pool__backend__driver__in=VOLUME_DRIVERS,
            health=NodeHealth.HEALTHY,
        )
        .exclude(pool__backend__is_enabled=False)
        .order_by("pk")
    )


def create_volume(*, organization, actor, region, name: str, size_gb: int, node=None) -> Volume:
    """A new empty volume in `region`, on `node` (where a host it is for runs) or the region's
    first server that keeps volumes. Runs in the caller's transaction (an order's) or its own."""
    authorize(actor, organization, "order")
    check_size(size_gb)
    if node is None:
        node = volume_servers(region).first()
        if node is None:
            raise VolumeRefused(_("No server of %(region)s keeps volumes.") % {"region": region})
    elif node.pool.region_id != region.pk:
        raise VolumeRefused(_("That server is not in %(region)s.") % {"region": region})
    elif node.pool.backend.driver not in VOLUME_DRIVERS:
        raise VolumeRefused(_("Hosts on this server can't have volumes."))
    with transaction.atomic():
        reserve(organization=organization, demand=Usage(storage_gb=size_gb))
        volume = Volume.objects.create(
            organization=organization,
            region=region,
            node=node,
            name=name,
            size_gb=size_gb,
            billed_as=Workload.objects.create(organization=organization, kind=WorkloadKind.VOLUME),
        )
        bill(volume)
        record_event(
            action="volume.created",
            actor=actor,
            target=volume,
            organization=organization,
            data={"volume": volume.public_id, "size_gb": size_gb, "server": node.hostname},
        )
    return volume


def create_data_disk(*, workload, node, host_name: str, size_gb: int) -> Volume | None:
    """The data disk ordered with the host `host_name` of `workload`, placed on `node`: a
    volume named after the host, attached at /data, where the host has always found its data
    disk; None where that server keeps no volumes (its backend keeps the disk with the host, as
    before). Runs in the order's
    transaction, which holds the GB in the host's disk quota; the host's disk line bills them
    while it lives, so nothing is reserved or metered here."""
    if not size_gb or node.pool.backend.driver not in VOLUME_DRIVERS:
        return None
    volume = Volume.objects.create(
        organization_id=workload.organization_id,
        region_id=node.pool.region_id,
        node=node,
        name=f"{host_name}-data"[: Volume._meta.get_field("name").max_length],
        size_gb=size_gb,
        workload=workload,
        mount_path=DATA_DISK_PATH,
        data_disk_of=workload,
        billed_as=Workload.objects.create(
            organization_id=workload.organization_id, kind=WorkloadKind.VOLUME
        ),
    )
    record_event(
        action="volume.created",
        target=volume,
        data={
            "volume": volume.public_id,
            "size_gb": size_gb,
            "server": node.hostname,
            "data_disk_of": workload.pk,
        },
    )
    return volume


def _locked_usable(volume: Volume) -> Volume:
    volume = locked(Volume, volume.pk, related=("organization", "node"))
    if volume.state == VolumeState.DELETED:
        raise VolumeRefused(_("This volume was deleted."))
    return volume


@transaction.atomic(durable=True)
def snapshot_volume(*, volume: Volume, actor, name: str) -> Volume:
    """A new volume on the same server, a copy of `volume` as it is when the server makes it
    (a running host's: what a power cut would leave, which ext4's journal makes whole)."""
    authorize(actor, volume.organization, "order")
    volume = _locked_usable(volume)
    if volume.state == VolumeState.FAILED:
        raise VolumeRefused(_("A failed volume can't be copied."))
    reserve(organization=volume.organization, demand=Usage(storage_gb=volume.size_gb))
    snapshot = Volume.objects.create(
        organization=volume.organization,
        region_id=volume.region_id,
        node=volume.node,
        name=name,
        size_gb=volume.size_gb,
        source=volume,
        billed_as=Workload.objects.create(
            organization=volume.organization, kind=WorkloadKind.VOLUME
        ),
    )
    bill(snapshot)
    record_event(
        action="volume.snapshotted",
        actor=actor,
        target=snapshot,
        data={"volume": snapshot.public_id, "source": volume.public_id},
    )
    return snapshot


def grow_volume(*, volume: Volume, actor, size_gb: int) -> Volume:
    """`volume` at `size_gb` GB, more than it has (the caller's transaction or its own). The
    server grows it when no running host has it mounted (an ext4 image grows offline). A host's
    data disk grows with its host's "expand disk" (`grow_data_disk`), which its quota counts."""
    authorize(actor, volume.organization, "order")
    check_size(size_gb)
    with transaction.atomic():
        volume = _locked_usable(volume)
        if volume.is_data_disk:
            raise VolumeRefused(
                _("This volume is a host's data disk: grow it with “Expand disk” on the host.")
            )
        _check_grows(volume, size_gb)
        reserve(organization=volume.organization, demand=Usage(storage_gb=size_gb - volume.size_gb))
        _grow(volume, actor, size_gb)
    return volume


def grow_data_disk(*, workload_id: int, actor, size_gb: int) -> Volume | None:
    """The data disk of the host of `workload_id` at `size_gb` GB, for its "expand disk" (in its
    transaction, which holds the host's lock and reserved the GB in its disk quota); None when
    the host's data disk is not a volume (its backend grows it)."""
    volume = Volume.objects.filter(data_disk_of_id=workload_id).first()
    if volume is None:
        return None
    volume = _locked_usable(volume)
    _check_grows(volume, size_gb)
    return _grow(volume, actor, size_gb)


def _check_grows(volume: Volume, size_gb: int) -> None:
    if size_gb <= volume.size_gb:
        raise VolumeRefused(
            _("A volume only grows: it has %(size)s GB, choose more.") % {"size": volume.size_gb}
        )


def _grow(volume: Volume, actor, size_gb: int) -> Volume:
    """The one way a volume grows (its row locked, the GB reserved by the caller)."""
    before = volume.size_gb
    volume.size_gb = size_gb
    volume.save(update_fields=["size_gb", "updated_at"])
    bill(volume)
    record_event(
        action="volume.grown",
        actor=actor,
        target=volume,
        data={"volume": volume.public_id, "from_gb": before, "to_gb": size_gb},
    )
    return volume


def attach(*, volume: Volume, actor, workload, node, mount_path: str) -> Volume:
    """`volume` attached to the host of `workload`, which runs on `node`, at `mount_path`.
    The caller (orders.volumes) holds the host's row lock and checked its state."""
    authorize(actor, volume.organization, "order")
    check_mount_path(mount_path)
    volume = _locked_usable(volume)
    if workload.organization_id != volume.organization_id:
        raise VolumeRefused(_("That host is not your organization's."))
    if volume.attached:
        raise VolumeRefused(
            _("This volume is attached to another host already: detach it first.")
            if volume.workload_id != workload.pk
            else _("This volume is attached to that host already.")
        )
    if node.pool.region_id != volume.region_id:
        raise VolumeRefused(
            _("This volume is in %(volume_region)s and that host in %(host_region)s: a volume is "
              "attached only to hosts of its own region.")
            % {"volume_region": volume.region, "host_region": node.pool.region}
        )  # fmt: skip
    if node.pk != volume.node_id:
        raise VolumeRefused(
            _("This volume lives on server %(volume_server)s and that host runs on "
              "%(host_server)s: attach it to a host on %(volume_server)s, or take a snapshot "
              "there.")
            % {"volume_server": volume.node.hostname, "host_server": node.hostname}
        )  # fmt: skip
    if Volume.objects.filter(workload=workload, mount_path=mount_path).exists():
        raise VolumeRefused(
            _("Another volume appears at %(path)s in that host.") % {"path": mount_path}
        )
    volume.workload, volume.mount_path = workload, mount_path
    volume.save(update_fields=["workload", "mount_path", "updated_at"])
    record_event(
        action="volume.attached",
        actor=actor,
        target=volume,
        data={"volume": volume.public_id, "workload": workload.pk, "mount_path": mount_path},
    )
    return volume


def detach(*, volume: Volume, actor, workload_id: int | None) -> Volume:
    """`volume` off the host of `workload_id`, whose row lock the caller holds (the host is
    stopped or released)."""
    authorize(actor, volume.organization, "order")
    volume = _locked_usable(volume)
    if not volume.attached:
        raise VolumeRefused(_("This volume is not attached to a host."))
    if volume.is_data_disk:
        raise VolumeRefused(
            _("This volume is its host's data disk: it stays with the host until the host is "
              "released, which deletes it or keeps it as a volume of its own.")
        )  # fmt: skip
    if volume.workload_id != workload_id:
        raise VolumeRefused(_("This volume was attached to another host meanwhile; look again."))
    workload_id = volume.workload_id
    volume.workload, volume.mount_path = None, ""
    volume.save(update_fields=["workload", "mount_path", "updated_at"])
    record_event(
        action="volume.detached",
        actor=actor,
        target=volume,
        data={"volume": volume.public_id, "workload": workload_id},
    )
    return volume


@transaction.atomic(durable=True)
def delete_volume(*, volume: Volume, actor) -> Volume:
    """`volume` deleted: its server deletes its image, its GB leave the quota and the bill."""
    authorize(actor, volume.organization, "release")
    volume = _locked_usable(volume)
    if volume.attached:
        raise VolumeRefused(_("This volume is attached to a host: detach it first."))
    deleted = transition(
        volume,
        VolumeState.DELETED,
        table=VOLUME_TRANSITIONS,
        actor=actor,
        held=True,
        changes={"deleted_at": timezone.now(), "source": None},
        audit_data={"volume": volume.public_id},
    )
    bill(deleted)
    return deleted


def bill(volume: Volume, *, at=None) -> None:
    """The volume's meter as it is now (under its row lock, in the caller's transaction): its
    GB at the region's price of a GB of cloud disk a month while it exists, metered per second
    like a host's disk; none once deleted, none while it is a host's data disk (the host's disk
    line bills it), or where the region sells no disk. `at`: when it changed (now)."""
    price = price_in_force(region=volume.region, kind=PriceKind.DISK_GB_MONTH)
    specs = []
    billed_alone = volume.state != VolumeState.DELETED and not volume.is_data_disk
    if price is not None and price.amount_minor and billed_alone:
        monthly = Decimal(price.amount_minor) * volume.size_gb
        specs.append(MeterSpec(MeterKind.DISK, volume.size_gb, monthly / HOURS_PER_MONTH))
    reconcile(
        Meter.objects.filter(workload_id=volume.billed_as_id),
        specs=specs,
        new={"organization_id": volume.organization_id, "workload_id": volume.billed_as_id},
        currency=price.currency if price else volume.organization.park.currency,
        at=at or timezone.now(),
    )


def record_volume_reports(*, node, reports: list[dict]) -> None:
    """What the agent on `node` says of its volumes: made (ready), failed, and each one's size
    there. Runs in the caller's transaction (the agent's report)."""
    now = timezone.now()
    by_id = {report["id"]: report for report in reports}
    volumes = Volume.objects.filter(node=node, public_id__in=list(by_id)).exclude(
        state=VolumeState.DELETED
    )
    for volume in volumes.select_for_update(no_key=True).order_by("pk"):
        report = by_id[volume.public_id]
        ready = report["state"] in ("ready", "growing")
        target = VolumeState.READY if ready else VolumeState.FAILED
        changes = {
            "reported_size_gb": report.get("size_gb", volume.reported_size_gb),
            "reported_message": report.get("message", ""),
            "reported_at": now,
        }
        if target == volume.state:
            Volume.objects.filter(pk=volume.pk).update(**changes)
            continue
        try:
            transition(
                volume,
                target,
                table=VOLUME_TRANSITIONS,
                actor=None,
                held=True,
                changes=changes,
                audit_data={"volume": volume.public_id, "message": changes["reported_message"]},
            )
        except InvalidTransition:
            continue


def lock_volumes_of(workload_id: int) -> None:
    """The row locks of a host's volumes, taken where its use cases start (`orders.services
    .lock_host`: before its organization's, as LOCK_ORDER has them)."""
    lock_all(Volume, Volume.objects.filter(workload_id=workload_id).values_list("pk", flat=True))


def has_data_disk(workload_id: int) -> bool:
    """Whether the host of `workload_id` has its data disk as a volume."""
    return Volume.objects.filter(data_disk_of_id=workload_id).exists()


def choose_data_disk_fate(*, workload_id: int, actor, keep: bool) -> Volume:
    """What the release of the host of `workload_id` does with its data disk: keep it as a
    volume of its own, or delete it (the host's use case holds its lock). A keep is counted in
    the storage quota now, which the volume holds once the host is released."""
    volume = Volume.objects.filter(data_disk_of_id=workload_id).first()
    if volume is None:
        raise VolumeRefused(_("This host has no data disk kept as a volume."))
    volume = _locked_usable(volume)
    if keep:
        reserve(organization=volume.organization, demand=Usage(storage_gb=volume.size_gb))
    if volume.keep_on_release != keep:
        volume.keep_on_release = keep
        volume.save(update_fields=["keep_on_release", "updated_at"])
        record_event(
            action="volume.kept_on_release" if keep else "volume.deleted_on_release",
            actor=actor,
            target=volume,
            data={"volume": volume.public_id, "workload": workload_id},
        )
    return volume


def detach_from_released(*, workload_id: int, at) -> None:
    """The volumes of a host released at `at` (the caller, orders, holds the host's row lock):
    each detached and kept, a volume outlives its host; its data disk deleted, or where the
    tenant keeps it, a volume of its own, billed from `at` as the host's disk line ends."""
    volumes = Volume.objects.filter(workload_id=workload_id).select_for_update(no_key=True)
    for volume in volumes.order_by("pk"):
        data_disk = volume.is_data_disk
        volume.workload, volume.mount_path, volume.data_disk_of = None, "", None
        volume.save(update_fields=["workload", "mount_path", "data_disk_of", "updated_at"])
        record_event(
            action="volume.detached",
            target=volume,
            data={"volume": volume.public_id, "workload": workload_id, "reason": "released"},
        )
        if data_disk and not volume.keep_on_release and volume.state != VolumeState.DELETED:
            volume = transition(
                volume,
                VolumeState.DELETED,
                table=VOLUME_TRANSITIONS,
                actor=None,
                held=True,
                changes={"deleted_at": at, "source": None},
                audit_data={"volume": volume.public_id, "reason": "released with its host"},
            )
        bill(volume, at=at)
