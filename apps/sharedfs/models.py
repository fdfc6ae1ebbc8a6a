"""An organization's shared file storage (文件存储) in one region: a JuiceFS file system with a
PostgreSQL database of its own on the region's storage server (its metadata and its data
blocks), mounted at /shared in every host of the organization in the region by the agents.
Made as the organization's first host there starts; deleted by the tenant while no host mounts
it (being deleted while its database goes, then the row goes too)."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import Region
from apps.tenants.models import Organization
from apps.workloads.models import Workload


class SharedFileSystemState(models.TextChoices):
    READY = "ready", _("Ready")
    DELETING = "deleting", _("Being deleted")


SHARED_FILE_SYSTEM_TRANSITIONS = {
    SharedFileSystemState.READY: frozenset({SharedFileSystemState.DELETING}),
    SharedFileSystemState.DELETING: frozenset(),
}


class SharedFileSystem(models.Model):
    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="shared_file_systems",
        verbose_name=_("organization"),
    )
    region = models.ForeignKey(
        Region, on_delete=models.PROTECT, related_name="+", verbose_name=_("region")
    )
    # What billing's meters point at, as a host's or a task's.
    workload = models.OneToOneField(
        Workload, on_delete=models.PROTECT, related_name="sharedfs", verbose_name=_("workload")
    )
    # The JuiceFS volume's name; its database and the role that owns it are named after it.
    name = models.CharField(_("name"), max_length=63, unique=True)
    state = models.CharField(
        _("state"),
        max_length=16,
        choices=SharedFileSystemState.choices,
        default=SharedFileSystemState.READY,
    )
    used_bytes = models.BigIntegerField(_("bytes stored"), default=0)
    usage_read_at = models.DateTimeField(_("usage read at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("shared file system")
        verbose_name_plural = _("shared file systems")
        ordering = ["organization", "region"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "region"], name="sharedfs_one_per_organization_region"
            ),
            models.CheckConstraint(
                condition=models.Q(used_bytes__gte=0), name="sharedfs_used_not_negative"
            ),
        ]

    def __str__(self):
        return f"{self.organization} · {self.region}"

    @property
    def database(self) -> str:
        return self.name.replace("-", "_")
