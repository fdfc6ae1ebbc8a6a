from django.db.models import Count, IntegerField, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from apps.core.models import AuditEvent
from apps.core.numbers import parse_id
from apps.orchestration.models import Accelerator, Node, Pool
from apps.tenants.models import Organization


def pools_with_allocation(parks):
    """Accelerators total / allocated / free per pool in the given parks, with region and model:
    counted per pool in subqueries (joining every card to its pool and grouping by the pools'
    and their regions' columns took the overview 50 ms at 20,000 cards)."""
    cards = Accelerator.objects.filter(node__pool=OuterRef("pk")).order_by()
    nodes = Node.objects.filter(pool=OuterRef("pk")).order_by()
    return (
        Pool.objects.filter(backend__park__in=parks)
        .select_related("region", "accelerator_model", "backend")
        .annotate(
            total=count_of(cards, "node__pool"),
            allocated=count_of(cards.filter(allocation__isnull=False), "node__pool"),
            node_count=count_of(nodes, "pool"),
        )
        .order_by("region__level", "region__name", "name")
    )


def counted_pools(parks) -> list[Pool]:
    """The parks' pools with what `pools_with_allocation` annotates (`total`, `allocated`,
    `node_count`), for the overview, which lists them all: their cards and nodes counted in one
    grouped read each, where a subquery per pool and count read the cards 210 times over at 70
    pools (16 of the overview's 24 ms of SQL at 20,000 cards, on a quiet box)."""
    pools = list(
        Pool.objects.filter(backend__park__in=parks)
        .select_related("region", "accelerator_model", "backend")
        .order_by("region__level", "region__name", "name")
    )
    ids = [pool.pk for pool in pools]
    cards = {
        pool_id: (total, allocated)
        for pool_id, total, allocated in Accelerator.objects.filter(node__pool__in=ids)
        .values_list("node__pool")
        .annotate(total=Count("pk"), allocated=Count("allocation"))
        .order_by()
    }
    nodes = dict(
        Node.objects.filter(pool__in=ids).values_list("pool").annotate(n=Count("pk")).order_by()
    )
    for pool in pools:
        pool.total, pool.allocated = cards.get(pool.pk, (0, 0))
        pool.node_count = nodes.get(pool.pk, 0)
    return pools


def count_of(rows, group: str):
    """How many of `rows` (filtered on an OuterRef) there are, as a subquery annotation."""
    return Coalesce(
        Subquery(rows.values(group).annotate(n=Count("pk")).values("n")),
        0,
        output_field=IntegerField(),
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
    """The audit log of the given parks, newest first, filtered as the operator asks; each
    event with its `organization_name` (the log names tenants by id)."""
    events = AuditEvent.objects.filter(park_id__in=[park.pk for park in parks]).annotate(
        organization_name=Subquery(
            Organization.objects.filter(pk=OuterRef("organization_id")).values("name")
        )
    )
    if actor:
        events = events.filter(actor_label__icontains=actor)
    if organization is not None:
        events = events.filter(organization_id=organization.pk)
    if organization_name:
        named = Organization.objects.filter(name__icontains=organization_name)
        events = events.filter(organization_id__in=named.values("pk"))
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
