"""Reads for the portal's own pages, which gather figures from every app: the tenant's home."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from apps.billing.models import Wallet
from apps.billing.selectors import month_estimate, today_spend, wallet_for
from apps.orchestration.models import Task, TaskState
from apps.orchestration.selectors import BUSY_STATES, tasks_for
from apps.orders.models import INSTANCE_HOLDING_STATES, Instance, InstanceState, Order, OrderState
from apps.orders.selectors import instances_for
from apps.quotas.selectors import QuotaRow, quota_rows
from apps.tenants.models import Organization
from apps.tenants.selectors import for_organization

SHOWN_ON_HOME = 5  # hosts and tasks listed; the counts cover them all
FAILED_TASKS_SHOWN_FOR = timedelta(days=1)
QUOTA_ALERT_PERCENT = 90


@dataclass(frozen=True)
class Alert:
    level: str  # a Bootstrap contextual class: danger, warning, info
    message: str
    link: str
    link_label: str


@dataclass(frozen=True)
class Spend:
    currency: str
    today_minor: int
    month_minor: int  # this month so far, metered and accrued
    hourly_minor: int  # what runs now costs an hour


@dataclass(frozen=True)
class TenantHome:
    hosts: list[Instance]  # the first SHOWN_ON_HOME that hold resources
    host_count: int
    running_host_count: int
    tasks: list[Task]  # the first SHOWN_ON_HOME queued, placed or running
    task_count: int
    quotas: list[QuotaRow]
    alerts: list[Alert]
    wallet: Wallet | None = None  # None also when the reader may not see the organization's money
    spend: Spend | None = None


def tenant_home(
    organization: Organization, *, with_billing: bool, now: datetime | None = None
) -> TenantHome:
    """What the organization's members see first: what runs, what it costs, what needs them.
    `with_billing`: whether the reader may see its money (balance and spend)."""
    now = now or timezone.now()
    instances = instances_for(organization)
    holding = [i for i in instances if i.state in INSTANCE_HOLDING_STATES]
    busy_tasks = tasks_for(organization).filter(state__in=BUSY_STATES)
    quotas = quota_rows(organization)
    spend = None
    if with_billing:
        estimate = month_estimate(organization, now=now)
        spend = Spend(
            currency=estimate.currency,
            today_minor=today_spend(organization, now=now),
            month_minor=estimate.so_far_minor,
            hourly_minor=estimate.hourly_minor,
        )
    return TenantHome(
        hosts=holding[:SHOWN_ON_HOME],
        host_count=len(holding),
        running_host_count=sum(i.state == InstanceState.RUNNING for i in holding),
        tasks=list(busy_tasks[:SHOWN_ON_HOME]),
        task_count=busy_tasks.count(),
        quotas=quotas,
        alerts=_alerts(organization, instances, quotas, now=now),
        wallet=wallet_for(organization) if with_billing else None,
        spend=spend,
    )


def _alerts(organization, instances, quotas, *, now) -> list[Alert]:
    """Hosts in error, tasks failed in the last day, quotas nearly used, orders waiting."""
    alerts = []
    failed_hosts = sum(i.state == InstanceState.ERROR for i in instances)
    if failed_hosts:
        alerts.append(
            Alert(
                "danger",
                ngettext(
                    "%(count)d host is in error.", "%(count)d hosts are in error.", failed_hosts
                )
                % {"count": failed_hosts},
                reverse("orders:instance_list"),
                _("See instances"),
            )
        )
    failed_tasks = (
        tasks_for(organization)
        .filter(state=TaskState.FAILED, finished_at__gte=now - FAILED_TASKS_SHOWN_FOR)
        .count()
    )
    if failed_tasks:
        alerts.append(
            Alert(
                "warning",
                ngettext(
                    "%(count)d training task failed in the last 24 hours.",
                    "%(count)d training tasks failed in the last 24 hours.",
                    failed_tasks,
                )
                % {"count": failed_tasks},
                reverse("tasks:task_list"),
                _("See tasks"),
            )
        )
    for row in quotas:
        if row.percent >= QUOTA_ALERT_PERCENT:
            alerts.append(
                Alert(
                    "warning",
                    _("%(quota)s is %(percent)d%% used.")
                    % {"quota": row.label, "percent": row.percent},
                    reverse("quotas:overview"),
                    _("See quotas"),
                )
            )
    waiting = (
        for_organization(Order, organization).filter(state=OrderState.AWAITING_APPROVAL).count()
    )
    if waiting:
        alerts.append(
            Alert(
                "info",
                ngettext(
                    "%(count)d order is waiting for the park's approval.",
                    "%(count)d orders are waiting for the park's approval.",
                    waiting,
                )
                % {"count": waiting},
                reverse("orders:order_list"),
                _("See orders"),
            )
        )
    return alerts
