from dataclasses import dataclass

from apps.quotas.models import QuotaLimit, QuotaResource
from apps.quotas.services import organization_usage


@dataclass(frozen=True)
class QuotaRow:
    label: str
    used: object
    limit: int

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.used / self.limit)) if self.limit else 100


def quota_rows(organization) -> list[QuotaRow]:
    """Used against limit for each of the organization's limits, for the quota page."""
    usage = organization_usage(organization)
    limits = QuotaLimit.objects.filter(organization=organization).select_related(
        "accelerator_model"
    )
    order = list(QuotaResource.values)
    rows = []
    for limit in sorted(limits, key=lambda q: (order.index(q.resource), str(q.accelerator_model))):
        label = (
            str(limit.accelerator_model)
            if limit.resource == QuotaResource.MODEL_ACCELERATORS
            else str(limit.get_resource_display())
        )
        rows.append(QuotaRow(label=label, used=usage.amount(limit) or 0, limit=limit.limit))
    return rows
