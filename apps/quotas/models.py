from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import AcceleratorModel
from apps.tenants.models import Organization, Park


class QuotaResource(models.TextChoices):
    ACCELERATORS = "accelerators", _("Accelerators (all models)")
    MODEL_ACCELERATORS = "model_accelerators", _("Accelerators of one model")
    COMPUTE_UNITS = "compute_units", _("Normalized compute units")
    VCPU = "vcpu", _("vCPU")
    RAM_GB = "ram_gb", _("RAM (GB)")
    DISK_GB = "disk_gb", _("Disk (GB)")
    INSTANCES = "instances", _("Instances")
    STORAGE_GB = "storage_gb", _("Cloud disks (GB)")
    MONTHLY_SPEND = "monthly_spend", _("Monthly spend (minor units)")
    # The capacity of the organization's shared file storage in each region (apps/sharedfs),
    # which the file system itself enforces: no order holds any of it.
    SHARED_STORAGE_GB = "shared_storage_gb", _("Shared file storage (GB)")


class QuotaLimit(models.Model):
    """A limit for one organization or, with no organization, for the whole park.

    Usage is counted from the rows that hold resources; this row is what a reservation locks
    (SELECT ... FOR UPDATE) so two concurrent orders cannot both pass the same limit.
    """

    park = models.ForeignKey(
        Park, on_delete=models.CASCADE, related_name="quota_limits", verbose_name=_("park")
    )
    organization = models.ForeignKey(
        Organization,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="quota_limits",
        help_text=_("Empty: the limit applies to the whole park."),
        verbose_name=_("organization"),
    )
    resource = models.CharField(_("resource"), max_length=24, choices=QuotaResource.choices)
    accelerator_model = models.ForeignKey(
        AcceleratorModel,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("accelerator model"),
    )
    limit = models.BigIntegerField(_("limit"))
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("quota limit")
        verbose_name_plural = _("quota limits")
        constraints = [
            models.CheckConstraint(condition=Q(limit__gte=0), name="quota_limit_not_negative"),
            models.CheckConstraint(
                condition=Q(resource__in=QuotaResource.values), name="quota_resource_known"
            ),
            models.CheckConstraint(
                condition=(
                    Q(resource=QuotaResource.MODEL_ACCELERATORS)
                    & Q(accelerator_model__isnull=False)
                )
                | (
                    ~Q(resource=QuotaResource.MODEL_ACCELERATORS)
                    & Q(accelerator_model__isnull=True)
                ),
                name="quota_model_iff_model_resource",
            ),
            # NULLs are distinct in a unique index, so each scope/model shape gets its own.
            models.UniqueConstraint(
                fields=["organization", "resource"],
                condition=Q(organization__isnull=False, accelerator_model__isnull=True),
                name="quota_org_resource_unique",
            ),
            models.UniqueConstraint(
                fields=["organization", "accelerator_model"],
                condition=Q(organization__isnull=False, accelerator_model__isnull=False),
                name="quota_org_model_unique",
            ),
            models.UniqueConstraint(
                fields=["park", "resource"],
                condition=Q(organization__isnull=True, accelerator_model__isnull=True),
                name="quota_park_resource_unique",
            ),
            models.UniqueConstraint(
                fields=["park", "accelerator_model"],
                condition=Q(organization__isnull=True, accelerator_model__isnull=False),
                name="quota_park_model_unique",
            ),
        ]

    def __str__(self):
        scope = self.organization or self.park
        what = self.accelerator_model or self.get_resource_display()
        return f"{scope}: {what} ≤ {self.limit}"
