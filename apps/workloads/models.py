"""What a host or a training task reserves and runs, seen from below them: the one row that
billing's meters, usage and holds and orchestration's allocations and placements point at, so
that none of them points up at orders or at tasks (docs/architecture.md, the floors)."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.tenants.models import Organization


class WorkloadKind(models.TextChoices):
    HOST = "host", _("GPU cloud host")
    TASK = "task", _("Training task")
    SHAREDFS = "sharedfs", _("Shared file storage")
    IMAGE = "image", _("Saved image")
    VOLUME = "volume", _("Cloud disk")


class Workload(models.Model):
    """One host's or one task's reservations: each `orders.Instance` and each
    `orchestration.Task` owns exactly one (its `workload`), made with it; so does each
    `agents.SavedImage`, `sharedfs.SharedFileSystem` and `storage.Volume`, whose storage is
    metered."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="workloads",
        verbose_name=_("organization"),
    )
    kind = models.CharField(_("kind"), max_length=8, choices=WorkloadKind.choices)

    class Meta:
        verbose_name = _("workload")
        verbose_name_plural = _("workloads")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=WorkloadKind.values), name="workload_kind_known"
            ),
        ]

    def __str__(self):
        subject = getattr(self, self.kind, None)  # none yet while its owner is being made
        return str(subject) if subject else f"{self.get_kind_display()} #{self.pk}"
