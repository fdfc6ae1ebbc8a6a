from dataclasses import dataclass

from django.utils.translation import gettext as _

from apps.core.money import format_money
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.quotas.services import month_spend, organization_usage, park_usage, spend_scope


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
        rows.append(QuotaRow(label=label, used=used_against(limit, usage), limit=limit.limit))
    return rows


def used_against(limit: QuotaLimit, usage=None):
    """What the limit's organization (or, for a park limit, its park) uses of its resource now:
    what its rows hold, or for the monthly spend what it was charged this month."""
    if limit.resource == QuotaResource.MONTHLY_SPEND:
        return month_spend(spend_scope(limit))
    if usage is None:
        usage = organization_usage(limit.organization) if limit.organization_id else None
        usage = usage if usage is not None else park_usage(limit.park)
    return usage.amount(limit) or 0


def below_usage_warning(limit: QuotaLimit) -> str | None:
    """What an operator is told when a limit is set below what is used already (None when it is
    not): nothing running is stopped, only new demand is refused until usage falls under it."""
    used = used_against(limit)
    if used <= limit.limit:
        return None
    what = (
        str(limit.accelerator_model)
        if limit.resource == QuotaResource.MODEL_ACCELERATORS
        else str(limit.get_resource_display())
    )
    values = {"what": what, "used": used, "limit": limit.limit}
    if limit.resource == QuotaResource.MONTHLY_SPEND:
        currency = limit.park.currency
        values.update(used=format_money(used, currency), limit=format_money(limit.limit, currency))
    if limit.organization_id:
        text = _(
            "The organization already uses %(used)s of %(what)s, more than the new limit of "
            "%(limit)s. Nothing running is stopped; its new orders that need more are refused "
            "until its use falls below the limit."
        )
    else:
        text = _(
            "The park's organizations already use %(used)s of %(what)s, more than the new limit "
            "of %(limit)s. Nothing running is stopped; new orders that need more are refused "
            "until use falls below the limit."
        )
    return text % values
