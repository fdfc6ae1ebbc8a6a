from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.tenants.models import Park


class CapacitySample(models.Model):
    """One pool's capacity at one moment, written by `apps.operations.tasks.sample_capacity`:
    what the utilization and energy charts of the overview draw."""

    park = models.ForeignKey(
        Park, on_delete=models.CASCADE, related_name="capacity_samples", verbose_name=_("park")
    )
    pool = models.ForeignKey(
        "orchestration.Pool",
        on_delete=models.CASCADE,
        related_name="capacity_samples",
        verbose_name=_("pool"),
    )
    taken_at = models.DateTimeField(_("taken at"))
    accelerators_total = models.PositiveIntegerField(_("accelerators"))
    accelerators_allocated = models.PositiveIntegerField(_("allocated"))
    accelerators_idle = models.PositiveIntegerField(
        _("allocated but idle"), default=0, help_text=_("By the backend's telemetry.")
    )
    utilization_pct = models.DecimalField(
        _("measured utilization (%)"),
        max_digits=5,
        decimal_places=1,
        null=True,
        blank=True,
        help_text=_("Mean over the allocated accelerators that report telemetry."),
    )
    watts = models.PositiveIntegerField(
        _("estimated power (W)"), help_text=_("Allocated accelerators × TDP × PUE.")
    )

    class Meta:
        verbose_name = _("capacity sample")
        verbose_name_plural = _("capacity samples")
        ordering = ["-taken_at", "pool"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "taken_at"], name="capacity_sample_unique"),
            models.CheckConstraint(
                condition=models.Q(accelerators_allocated__lte=models.F("accelerators_total")),
                name="capacity_sample_allocated_within_total",
            ),
            models.CheckConstraint(
                condition=models.Q(accelerators_idle__lte=models.F("accelerators_allocated")),
                name="capacity_sample_idle_within_allocated",
            ),
            models.CheckConstraint(
                condition=models.Q(utilization_pct__isnull=True)
                | models.Q(utilization_pct__gte=0, utilization_pct__lte=100),
                name="capacity_sample_utilization_pct",
            ),
        ]
        indexes = [models.Index(fields=["park", "taken_at"])]

    def __str__(self):
        return f"{self.pool_id} @ {self.taken_at:%Y-%m-%d %H:%M}"


class IdlePolicy(models.Model):
    """How a park treats hosts whose accelerators stay idle: after how long they count as
    idle, and whether they are stopped on their own (their owners are told either way)."""

    park = models.OneToOneField(
        Park, on_delete=models.CASCADE, related_name="idle_policy", verbose_name=_("park")
    )
    threshold_minutes = models.PositiveIntegerField(
        _("idle after (minutes)"),
        default=120,
        help_text=_("An instance counts as idle once all its accelerators stayed idle this long."),
    )
    auto_stop = models.BooleanField(_("stop idle instances automatically"), default=False)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("idle policy")
        verbose_name_plural = _("idle policies")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(threshold_minutes__gte=10, threshold_minutes__lte=10080),
                name="idle_policy_threshold_range",
            ),
        ]

    def __str__(self):
        return f"{self.park}"
