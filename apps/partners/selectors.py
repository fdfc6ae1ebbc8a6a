"""Reads of the partner console and the operators' partner page. A partner sees its own pools,
their nodes, what runs on them (flavor, since when, state: never whose it is) and what they
earned; another partner's or a tenant's objects are a 404 (`partner_of`, `statement_for`)."""

from datetime import date, datetime, time, timedelta

from django.db.models import Count, Q, Sum
from django.http import Http404
from django.utils import timezone

from apps.billing.models import UsageRecord
from apps.operations.selectors import pools_with_allocation
from apps.orchestration.models import Node, Pool
from apps.orders.models import Instance, InstanceState
from apps.partners.models import Partner, Settlement


def partner_of(organization) -> Partner:
    """The partner `organization` is, or 404 (a tenant's members never see partner pages)."""
    if organization is None:
        raise Http404
    try:
        return Partner.objects.select_related("organization__park").get(organization=organization)
    except Partner.DoesNotExist:
        raise Http404 from None


def statement_for(partner: Partner, settlement_id) -> Settlement:
    """One of the partner's own statements, or 404."""
    try:
        return partner.settlements.get(pk=settlement_id)
    except (Settlement.DoesNotExist, ValueError):
        raise Http404 from None


# --- months --------------------------------------------------------------------------------


def first_of_month(day: date | datetime) -> date:
    if isinstance(day, datetime):
        day = timezone.localtime(day, timezone.get_default_timezone()).date()
    return day.replace(day=1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[start, end) of `month` in the park's time zone, the one metering cuts records at
    (billing.metering: a usage record never straddles two months)."""
    zone = timezone.get_default_timezone()
    month = first_of_month(month)
    following = (month + timedelta(days=32)).replace(day=1)
    return (
        timezone.make_aware(datetime.combine(month, time()), zone),
        timezone.make_aware(datetime.combine(following, time()), zone),
    )


def is_over(month: date, *, now: datetime | None = None) -> bool:
    return month_bounds(month)[1] <= (now or timezone.now())


# --- usage and revenue ---------------------------------------------------------------------


def usage_on_pools_of(partner: Partner, month: date):
    """The usage records of hosts and training tasks on the partner's pools that began in
    `month`, in the park's currency."""
    start, end = month_bounds(month)
    return UsageRecord.objects.filter(
        Q(workload__instance__pool__partner_pool__partner=partner)
        | Q(workload__task__pool__partner_pool__partner=partner),
        started_at__gte=start,
        started_at__lt=end,
        currency=partner.organization.park.currency,
    )


def revenue(partner: Partner, month: date) -> tuple[int, int]:
    """(what the partner's pools were charged in `month`, in minor units; how many records)."""
    totals = usage_on_pools_of(partner, month).aggregate(
        total=Sum("amount_minor"), records=Count("id")
    )
    return totals["total"] or 0, totals["records"]


def revenue_by_pool(partner: Partner, month: date) -> dict[int, int]:
    """{pool id: minor units} of `month`, for the pools that earned anything."""
    by_pool: dict[int, int] = {}
    for subject in ("workload__instance", "workload__task"):
        rows = (
            usage_on_pools_of(partner, month)
            .filter(**{f"{subject}__pool__partner_pool__partner": partner})
            .values_list(f"{subject}__pool")
            .annotate(total=Sum("amount_minor"))
            .order_by()
        )
        for pool_id, total in rows:
            by_pool[pool_id] = by_pool.get(pool_id, 0) + total
    return by_pool


# --- pools, nodes, hosts -------------------------------------------------------------------


def owned_pools(partner: Partner):
    return Pool.objects.filter(partner_pool__partner=partner)


def partner_pools(partner: Partner):
    """Its pools with cards allocated / total (operations' utilization figures) and its floor."""
    return (
        pools_with_allocation([partner.organization.park_id])
        .filter(partner_pool__partner=partner)
        .select_related("partner_terms")
    )


def partner_nodes(partner: Partner):
    """Its pools' nodes, each with `cards` and `cards_in_use` (held by a live allocation)."""
    return (
        Node.objects.filter(pool__partner_pool__partner=partner)
        .select_related("pool")
        .annotate(
            cards=Count("accelerators", distinct=True),
            cards_in_use=Count(
                "accelerators",
                filter=Q(accelerators__allocation__isnull=False),
                distinct=True,
            ),
        )
        .order_by("pool__name", "hostname")
    )


def hosts_on(partner: Partner):
    """The hosts running on its pools (not released): flavor, node, since, state. Only these
    fields are read, so no tenant's name, key or address reaches the page."""
    rows = (
        Instance.objects.filter(pool__partner_pool__partner=partner)
        .exclude(state=InstanceState.RELEASED)
        .order_by("-created_at", "-pk")
        .values("pk", "state", "created_at", "flavor__code", "pool__name", "node__hostname")
    )
    labels = dict(InstanceState.choices)
    return [{**row, "state_label": labels.get(row["state"], row["state"])} for row in rows]


# --- the operators' page -------------------------------------------------------------------


def park_partners(park, *, month: date):
    """The park's partners with their pools counted and `month`'s revenue."""
    partners = list(
        Partner.objects.filter(organization__park=park)
        .select_related("organization")
        .annotate(pool_count=Count("owned_pools"))
        .order_by("organization__name", "pk")
    )
    for partner in partners:
        partner.month_revenue_minor = revenue(partner, month)[0]
    return partners


def park_pools(park):
    return (
        Pool.objects.filter(backend__park=park)
        .select_related(
            "backend", "region", "accelerator_model", "partner_pool__partner__organization"
        )
        .order_by("region__name", "name", "pk")
    )


def park_settlements(park):
    return (
        Settlement.objects.filter(partner__organization__park=park)
        .select_related("partner__organization", "confirmed_by")
        .order_by("-month", "partner__organization__name", "pk")
    )
