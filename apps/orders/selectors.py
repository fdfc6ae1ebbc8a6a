from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from apps.orders.models import Instance, InstanceState, Order, OrderState
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


def orders_awaiting_approval(parks):
    return (
        Order.objects.filter(organization__park__in=parks, state=OrderState.AWAITING_APPROVAL)
        .select_related("organization", "instance__flavor", "instance__region")
        .order_by("created_at")
    )
