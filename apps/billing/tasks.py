"""Periodic billing work: metering, balance enforcement, month-end invoices."""

import logging
from time import monotonic

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.billing import invoicing, metering, selectors, services
from apps.billing.models import FundsSuspension

log = logging.getLogger(__name__)


@shared_task
def meter_usage() -> int:
    """Meter every due meter up to now and charge the wallets, a group of organizations per
    transaction, then warn or stop where the money ran low, and warn where the month's spend
    nears or reaches its limit. Returns what it charged.

    A group that fails is metered again one organization at a time, so a failure stops only
    its own organization. A pass that finds usage unmetered for more than two intervals, or
    takes longer than one, says so in the log: metering must never fall behind silently."""
    started = monotonic()
    until = timezone.now()
    interval = settings.LOAM_METERING_INTERVAL_S
    lag = selectors.metering_lag_seconds(now=until)
    if lag > 2 * interval:
        log.warning(
            "metering is behind: usage since %.0f s ago is not metered yet (the interval is %s s)",
            lag,
            interval,
        )
    charged = records = 0
    for organization_ids in metering.organization_groups_due():
        group_charged, group_records = _meter_group(organization_ids, until=until)
        charged += group_charged
        records += group_records
    # Hosts stopped for funds whose stop had not finished when the top-up came.
    suspended = FundsSuspension.objects.filter(resumed_at__isnull=True).values_list(
        "workload__organization_id", flat=True
    )
    for organization_id in sorted(set(suspended)):
        services.RESUME_HOSTS.one()(organization_id)
    took = monotonic() - started
    if took > interval:
        log.warning(
            "metering took %.1f s, longer than its %s s interval: passes overlap and fall behind",
            took,
            interval,
        )
    log.info("metered %d usage records in %.2f s", records, took)
    return charged


def _meter_group(organization_ids: list[int], *, until) -> tuple[int, int]:
    """(charged, records) for metering the organizations together, or one by one if that
    fails."""
    try:
        metered = metering.meter_organizations(organization_ids, until=until)
    except Exception:  # one organization's failure must not stop the others' metering
        if len(organization_ids) == 1:
            log.exception("metering organization %s failed", organization_ids[0])
            return 0, 0
        totals = [
            _meter_group([organization_id], until=until) for organization_id in organization_ids
        ]
        return sum(charged for charged, _ in totals), sum(records for _, records in totals)
    for organization_id in metered.balances_to_enforce:
        _enforce(services.enforce_balance, organization_id)
    for organization_id in metered.spend_limited:
        _enforce(services.enforce_spend_quota, organization_id)
    return metered.charged_minor, metered.records


def _enforce(rule, organization_id: int) -> None:
    try:
        rule(organization_id)
    except Exception:  # metered and charged already: the next pass enforces it again
        log.exception("%s for organization %s failed", rule.__name__, organization_id)


@shared_task
def resume_suspended(organization_id: int) -> int:
    return services.RESUME_HOSTS.one()(organization_id)


@shared_task
def issue_due_invoices() -> int:
    """Issue last month's invoice for every organization that used something (idempotent)."""
    return len(invoicing.issue_due_invoices(now=timezone.now()))
