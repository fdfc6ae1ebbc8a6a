"""Cloud disks (云盘): volumes that belong to an organization and a region and outlive the hosts
they are attached to. A volume lives on one server (`node`): the agent there keeps it as an
ext4 image (docs/agent-protocol.md, "Volumes"), so it is attached only to hosts on that server.
"""

import secrets

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import Region
from apps.orchestration.models import Node
from apps.tenants.models import Organization
from apps.workloads.models import Workload


class VolumeState(models.TextChoices):
    CREATING = "creating", _("Creating")
    READY = "ready", _("Ready")
    FAILED = "failed", _("Failed")
    DELETED = "deleted", _("Deleted")


_S = VolumeState
VOLUME_TRANSITIONS = {
    # Ready again after a failure: a grow or a copy the server reports done on a later try.
    _S.CREATING: frozenset({_S.READY, _S.FAILED, _S.DELETED}),
    _S.READY: frozenset({_S.FAILED, _S.DELETED}),
    _S.FAILED: frozenset({_S.READY, _S.DELETED}),
    _S.DELETED: frozenset(),
}


def new_volume_id() -> str:
    return f"vol-{secrets.token_hex(6)}"


class Volume(models.Model):
    public_id = models.CharField(
        _("volume id"), max_length=40, unique=True, default=new_volume_id, editable=False
    )
    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="volumes",
        verbose_name=_("organization"),
    )
    region = models.ForeignKey(
        Region, on_delete=models.PROTECT, related_name="volumes", verbose_name=_("region")
    )
    node = models.ForeignKey(
        Node, on_delete=models.PROTECT, related_name="volumes", verbose_name=_("server")
    )
    name = models.CharField(_("name"), max_length=63)
    size_gb = models.PositiveIntegerField(_("size (GB)"))
    state = models.CharField(
        _("state"), max_length=16, choices=VolumeState.choices, default=VolumeState.CREATING
    )
    # A snapshot is a volume copied from another of the same server when it is made.
    source = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="snapshots",
        verbose_name=_("snapshot of"),
    )
    # The host (its workload) it is attached to, and where it appears in it.
    workload = models.ForeignKey(
        Workload,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="volumes",
        verbose_name=_("attached to"),
    )
    mount_path = models.CharField(_("mount path"), max_length=200, blank=True)
    # The host (its workload) that ordered this volume as its data disk: while that host lives,
    # the volume is billed on the host's disk line and counted in its disk quota (never twice).
    # Released, the host deletes it, or leaves it a volume of its own where the tenant keeps it
    # (`keep_on_release`), billed and counted as one from then on.
    data_disk_of = models.OneToOneField(
        Workload,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="data_disk",
        verbose_name=_("data disk of"),
    )
    keep_on_release = models.BooleanField(_("kept when its host is released"), default=False)
    # What its GB are metered on (a workload of kind `volume`, made with it): billing's meters
    # point at workloads, never up at volumes.
    billed_as = models.OneToOneField(
        Workload,
        on_delete=models.PROTECT,
        null=True,
        related_name="billed_volume",
        verbose_name=_("billed as"),
    )
    # What the server's agent reported last: its size there (smaller than size_gb while a grow
    # waits for its host to stop) and why it failed.
    reported_size_gb = models.PositiveIntegerField(_("size on the server (GB)"), null=True)
    reported_message = models.TextField(_("reported message"), blank=True)
    reported_at = models.DateTimeField(_("reported at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    # Every change of the volume, which the server's list of hosts and volumes follows.
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    deleted_at = models.DateTimeField(_("deleted at"), null=True, blank=True)

    class Meta:
        verbose_name = _("volume")
        verbose_name_plural = _("volumes")
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(condition=Q(size_gb__gte=1), name="volume_size_positive"),
            models.CheckConstraint(
                condition=Q(state__in=VolumeState.values), name="volume_state_known"
            ),
            models.CheckConstraint(
                condition=Q(workload__isnull=True) | ~Q(mount_path=""),
                name="volume_attached_has_mount_path",
            ),
            # Two volumes never appear at one path of a host.
            models.UniqueConstraint(
                fields=["workload", "mount_path"],
                condition=Q(workload__isnull=False),
                name="volume_mount_path_unique_per_host",
            ),
        ]
        indexes = [models.Index(fields=["node", "state"])]

    def __str__(self):
        return f"{self.name} ({self.public_id})"

    @property
    def attached(self) -> bool:
        return self.workload_id is not None

    @property
    def is_data_disk(self) -> bool:
        return self.data_disk_of_id is not None

    @property
    def growing(self) -> bool:
        """Grown in the portal, not yet on the server (it grows while its host is stopped)."""
        return self.reported_size_gb is not None and self.reported_size_gb < self.size_gb
