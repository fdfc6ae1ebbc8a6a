from datetime import timedelta

from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from apps.catalog.models import Flavor
from apps.orders.models import (
    INSTANCE_HOLDING_STATES,
    Instance,
    InstanceState,
    Order,
    OrderKind,
    OrderState,
)
from apps.quotas.services import Usage, demand_for
from apps.tenants.selectors import for_organization

RELEASED_SHOWN_FOR = timedelta(days=7)


def instances_for(organization):
    """The organization's hosts, and those released in the last week."""
    recent = timezone.now() - RELEASED_SHOWN_FOR
    return list(
        for_organization(Instance, organization)
        .filter(~Q(state=InstanceState.RELEASED) | Q(released_at__gte=recent))
        .select_related("flavor__family__accelerator_model", "region", "image")
        .order_by("-created_at")
    )


def orders_for(organization):
    return (
        for_organization(Order, organization)
        .select_related("instance", "created_by")
        .order_by("-created_at")[:200]
    )


def instance_orders(instance):
    return list(
        instance.orders.select_related("created_by", "decided_by")
        .prefetch_related("placements")
        .order_by("-created_at")
    )


# --- What instances hold against quotas ------------------------------------------------------


def usage_of(instances) -> Usage:
    """What a queryset of instances holds (only those in a holding state count)."""
    holding = instances.filter(state__in=INSTANCE_HOLDING_STATES)
    per_model = (
        holding.values(
            "flavor__family__accelerator_model", "flavor__family__accelerator_model__compute_units"
        )
        .annotate(
            accelerators=Sum("flavor__accelerator_count"),
            vcpu=Sum("flavor__vcpu"),
            ram=Sum("flavor__ram_gb"),
            disk=Sum(F("system_disk_gb") + F("data_disk_gb")),
            count=Count("id"),
        )
        .order_by()
    )
    total = Usage()
    for row in per_model:
        units = row["flavor__family__accelerator_model__compute_units"] * row["accelerators"]
        total += Usage(
            accelerators=row["accelerators"],
            compute_units=units,
            vcpu=row["vcpu"],
            ram_gb=row["ram"],
            disk_gb=row["disk"],
            instances=row["count"],
            by_model={row["flavor__family__accelerator_model"]: row["accelerators"]},
        )
    return total


def pending_growth(organizations) -> Usage:
    """What open resize and disk-expansion orders on the organizations' instances add: they
    hold their growth from the moment they are accepted until the backend is done (or
    fails)."""
    orders = Order.objects.filter(
        instance__organization__in=organizations,
        instance__state__in=INSTANCE_HOLDING_STATES,
        state__in=[OrderState.APPROVED, OrderState.FULFILLING],
        kind__in=[OrderKind.RESIZE, OrderKind.EXPAND_DISK],
    )
    total = Usage()
    # Counted on every order and mostly none open: asking is a third of reading them with
    # their flavors.
    if not orders.exists():
        return total
    for order in orders.select_related("instance__flavor__family__accelerator_model"):
        if order.kind == OrderKind.EXPAND_DISK:
            total += Usage(disk_gb=max(0, order.parameters["to"] - order.parameters["from"]))
            continue
        current = order.instance.flavor
        target = Flavor.objects.select_related("family__accelerator_model").get(
            family=current.family, code=order.parameters["to"]
        )
        grow = demand_for(flavor=target, system_disk_gb=0, data_disk_gb=0) - demand_for(
            flavor=current, system_disk_gb=0, data_disk_gb=0
        )
        total += grow.positive()
    return total


def instance_quota_usage(organizations) -> Usage:
    """The quotas' holder for hosts: instances in a holding state and their open growth."""
    instances = Instance.objects.filter(organization__in=organizations)
    return usage_of(instances) + pending_growth(organizations)
