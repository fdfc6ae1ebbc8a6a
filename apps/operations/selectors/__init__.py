from django.db.models import Count, Q

from apps.core.models import AuditEvent
from apps.core.numbers import parse_id
from apps.orchestration.models import Pool


def pools_with_allocation(parks):
    """Accelerators total / allocated / free per pool in the given parks, with region and model."""
    return (
        Pool.objects.filter(backend__park__in=parks)
        .select_related("region", "accelerator_model", "backend")
        .annotate(
            total=Count("nodes__accelerators"),
            allocated=Count(
                "nodes__accelerators", filter=Q(nodes__accelerators__allocation__isnull=False)
            ),
            node_count=Count("nodes", distinct=True),
        )
        .order_by("region__level", "region__name", "name")
    )


def audit_events(
    parks,
    *,
    actor="",
    organization=None,
    organization_name="",
    action="",
    object_type="",
    target="",
    since=None,
    until=None,
):
    """The audit log of the given parks, newest first, filtered as the operator asks."""
    events = AuditEvent.objects.filter(park__in=parks).select_related("organization")
    if actor:
        events = events.filter(actor_label__icontains=actor)
    if organization is not None:
        events = events.filter(organization=organization)
    if organization_name:
        events = events.filter(organization__name__icontains=organization_name)
    if action:
        events = events.filter(action__startswith=action)
    if object_type:
        events = events.filter(object_type=object_type)
    if target:  # the object, by its name or id
        match = Q(object_repr__icontains=target)
        if parse_id(target) is not None:
            match |= Q(object_id=target)
        events = events.filter(match)
    if since:
        events = events.filter(created_at__gte=since)
    if until:
        events = events.filter(created_at__lt=until)
    return events.order_by("-created_at", "-id")
