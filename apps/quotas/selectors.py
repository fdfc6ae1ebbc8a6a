from dataclasses import dataclass

from django.utils.translation import gettext as _

from apps.core.money import format_money
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.quotas.services import (
    QUOTA_HOLDERS,
    Usage,
    committed_spend,
    counted_together,
    organization_usage,
    park_usage,
    spend_scope,
)


@dataclass(frozen=True)
class QuotaRow:
    limit_id: int
    resource: str
    label: str
    used: object
    limit: int
    currency: str = ""  # set for a limit on money (the monthly spend): used and limit in fen

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.used / self.limit)) if self.limit else 100

    @property
    def left(self):
        """What can still be used (never below zero: a limit may be set under the use)."""
        return max(0, self.limit - self.used)


def resource_label(resource: str) -> str:
    """A quota resource as people read it: "Monthly spend" (shown as money, whatever the stored
    unit) for the spend limit; an unknown code as it is."""
    if resource == QuotaResource.MONTHLY_SPEND:
        return _("Monthly spend")
    return QuotaResource(resource).label if resource in QuotaResource.values else resource


def limit_label(limit: QuotaLimit) -> str:
    """What a limit limits: the model for a per-model limit, else its resource."""
    if limit.resource == QuotaResource.MODEL_ACCELERATORS:
        return str(limit.accelerator_model)
    return str(resource_label(limit.resource))


def quota_rows(organization) -> list[QuotaRow]:
    """Used against limit for each of the organization's limits, for the quota page."""
    usage = organization_usage(organization)
    limits = QuotaLimit.objects.filter(organization=organization).select_related(
        "accelerator_model"
    )
    order = list(QuotaResource.values)
    rows = []
    currency = organization.park.currency
    for limit in sorted(limits, key=lambda q: (order.index(q.resource), str(q.accelerator_model))):
        rows.append(
            QuotaRow(
                limit_id=limit.pk,
                resource=limit.resource,
                label=limit_label(limit),
                used=used_against(limit, usage),
                limit=limit.limit,
                currency=currency if limit.resource == QuotaResource.MONTHLY_SPEND else "",
            )
        )
    return rows


def used_against(limit: QuotaLimit, usage=None):
    """What the limit's organization (or, for a park limit, its park) uses of its resource now:
    what its rows hold, or for the monthly spend what it committed this month (charged and held)."""
    if limit.resource == QuotaResource.MONTHLY_SPEND:
        return committed_spend(spend_scope(limit))
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
    values = {"what": limit_label(limit), "used": used, "limit": limit.limit}
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


# --- many demands in a row -------------------------------------------------------------------


def usage_held_besides(organizations, holder) -> Usage:
    """What `organizations` hold, counted by every holder but `holder`: for a caller that keeps
    its own rows' usage itself (a scheduling pass, placing task after task)."""
    others = [other for other in QUOTA_HOLDERS.providers() if other is not holder]
    return counted_together(others, organizations)


def accelerator_limit(organization_id: int) -> int | None:
    """The organization's own limit on accelerators of all models (None: it has none), for a
    backend that enforces it as well (Slurm's GrpTRES)."""
    return (
        QuotaLimit.objects.filter(
            organization_id=organization_id, resource=QuotaResource.ACCELERATORS
        )
        .values_list("limit", flat=True)
        .first()
    )
