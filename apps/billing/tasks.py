"""Periodic billing work: metering, balance enforcement, month-end invoices."""

import logging

from celery import shared_task
from django.utils import timezone

from apps.billing import invoicing, metering, services
from apps.billing.models import FundsSuspension

log = logging.getLogger(__name__)


@shared_task
def meter_usage() -> int:
    """Close every open meter up to now, charge the wallets, then warn or stop where the money
    ran low, and warn where the month's spend nears or reaches its limit. Each organization is
    one transaction, so a failure stops only its own."""
    until = timezone.now()
    charged = 0
    for organization_id in metering.organizations_due():
        try:
            charged += metering.meter_organization(organization_id, until=until)
            services.enforce_balance(organization_id)
            services.enforce_spend_quota(organization_id)
        except Exception:  # one organization's failure must not stop the others' metering
            log.exception("metering organization %s failed", organization_id)
    # Hosts stopped for funds whose stop had not finished when the top-up came.
    suspended = FundsSuspension.objects.filter(resumed_at__isnull=True).values_list(
        "instance__organization_id", flat=True
    )
    for organization_id in sorted(set(suspended)):
        services.RESUME_HOSTS.one()(organization_id)
    return charged


@shared_task
def resume_suspended(organization_id: int) -> int:
    return services.RESUME_HOSTS.one()(organization_id)


@shared_task
def issue_due_invoices() -> int:
    """Issue last month's invoice for every organization that used something (idempotent)."""
    return len(invoicing.issue_due_invoices(now=timezone.now()))
