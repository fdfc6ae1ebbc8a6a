"""The back office's lists across a park (or all the operator's parks). Each is one query for
its rows whatever their number (joins, prefetches and subquery annotations, no per-row query),
which tests/operations/test_views_query_counts.py holds them to."""

from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    IntegerField,
    OuterRef,
    Prefetch,
    Q,
    Subquery,
    Sum,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.catalog.models import Flavor, FlavorFamily, Image, Price
from apps.core.models import AuditEvent
from apps.core.numbers import parse_id
from apps.operations.selectors import count_of
from apps.orchestration.models import Accelerator, Backend, Node, Pool
from apps.orders.models import INSTANCE_HOLDING_STATES, Instance, Order
from apps.tenants.models import Membership, Organization


def organizations(parks, *, state="", query=""):
    holding = Instance.objects.filter(
        organization=OuterRef("pk"), state__in=INSTANCE_HOLDING_STATES
    ).order_by()
    members = Membership.objects.filter(organization=OuterRef("pk")).order_by()
    rows = Organization.objects.filter(park__in=parks).select_related("park")
    if state:
        rows = rows.filter(verification_state=state)
    if query:
        rows = rows.filter(
            Q(name__icontains=query) | Q(legal_name__icontains=query) | Q(credit_code=query.upper())
        )
    return rows.annotate(
        member_count=Coalesce(
            Subquery(members.values("organization").annotate(n=Count("id")).values("n")),
            0,
            output_field=IntegerField(),
        ),
        instance_count=Coalesce(
            Subquery(holding.values("organization").annotate(n=Count("id")).values("n")),
            0,
            output_field=IntegerField(),
        ),
        accelerators_held=Coalesce(
            Subquery(
                holding.values("organization")
                .annotate(n=Sum("flavor__accelerator_count"))
                .values("n")
            ),
            0,
            output_field=IntegerField(),
        ),
    ).order_by("name", "pk")


def orders(parks, *, state="", kind="", organization=None, organization_name="", query=""):
    rows = Order.objects.filter(organization__park__in=parks).select_related(
        "organization__park",
        "instance__flavor",
        "instance__region",
        "created_by",
        "decided_by",
    )
    if state:
        rows = rows.filter(state=state)
    if kind:
        rows = rows.filter(kind=kind)
    if organization is not None:
        rows = rows.filter(organization=organization)
    if organization_name:
        rows = rows.filter(organization__name__icontains=organization_name)
    if query:
        match = Q(instance__name__icontains=query)
        number = parse_id(query.removeprefix("#"))
        if number is not None:
            match |= Q(pk=number)
        rows = rows.filter(match)
    return rows.order_by("-created_at", "-pk")


ACTIVE = "active"  # the instance filter's default: every state that holds resources


def instances(parks, *, state="", organization=None, organization_name="", region=None, query=""):
    rows = Instance.objects.filter(organization__park__in=parks).select_related(
        "organization__park", "flavor__family__accelerator_model", "region", "node", "pool"
    )
    if state == ACTIVE:
        rows = rows.filter(state__in=INSTANCE_HOLDING_STATES)
    elif state:
        rows = rows.filter(state=state)
    if organization is not None:
        rows = rows.filter(organization=organization)
    if organization_name:
        rows = rows.filter(organization__name__icontains=organization_name)
    if region is not None:
        rows = rows.filter(region=region)
    if query:
        rows = rows.filter(Q(name__icontains=query) | Q(node__hostname__icontains=query))
    return rows.order_by("-created_at", "-pk")


def backends(park):
    pools = Pool.objects.filter(backend=OuterRef("pk")).order_by()
    nodes = Node.objects.filter(pool__backend=OuterRef("pk")).order_by()
    return (
        Backend.objects.filter(park=park)
        .annotate(
            pool_count=Coalesce(
                Subquery(pools.values("backend").annotate(n=Count("id")).values("n")),
                0,
                output_field=IntegerField(),
            ),
            node_count=Coalesce(
                Subquery(nodes.values("pool__backend").annotate(n=Count("id")).values("n")),
                0,
                output_field=IntegerField(),
            ),
        )
        .order_by("name", "pk")
    )


def pools(park):
    # Counted in subqueries, for the page's rows only: joining every node's every card to the
    # pools and grouping them cost the page (and its paginator's COUNT) the whole park.
    cards = Accelerator.objects.filter(node__pool=OuterRef("pk")).order_by()
    nodes = Node.objects.filter(pool=OuterRef("pk")).order_by()
    return (
        Pool.objects.filter(backend__park=park)
        .select_related("backend", "region__parent", "accelerator_model")
        .annotate(
            total=count_of(cards, "node__pool"),
            allocated=count_of(cards.filter(allocation__isnull=False), "node__pool"),
            node_count=count_of(nodes, "pool"),
        )
        .order_by("region__level", "region__name", "name", "pk")
    )


def nodes(park, *, pool=None, health="", drained=None, query=""):
    rows = Node.objects.filter(pool__backend__park=park).select_related(
        "pool__region", "pool__backend", "pool__accelerator_model"
    )
    if pool is not None:
        rows = rows.filter(pool=pool)
    if health:
        rows = rows.filter(health=health)
    if drained is not None:
        rows = rows.filter(is_drained=drained)
    if query:
        rows = rows.filter(hostname__icontains=query)
    cards = Accelerator.objects.filter(node=OuterRef("pk")).order_by()
    return rows.annotate(
        accelerator_total=count_of(cards, "node"),
        accelerator_allocated=count_of(cards.filter(allocation__isnull=False), "node"),
    ).order_by("pool__region__name", "pool__name", "hostname", "pk")


def families(park):
    flavors = Flavor.objects.order_by("accelerator_count")
    return (
        FlavorFamily.objects.filter(park=park)
        .select_related("accelerator_model")
        .prefetch_related(Prefetch("flavors", queryset=flavors))
        .order_by("code", "pk")
    )


def images(park):
    return (
        Image.objects.filter(park=park)
        .prefetch_related("compatible_accelerators")
        .order_by("software_stack", "name", "pk")
    )


def prices(park, *, region=None, kind="", when=""):
    """`when`: "scheduled" (not in force yet), "current" (in force now), or every price."""
    rows = Price.objects.filter(region__park=park).select_related("region", "flavor__family")
    if region is not None:
        rows = rows.filter(region=region)
    if kind:
        rows = rows.filter(kind=kind)
    now = timezone.now()
    if when == "scheduled":
        rows = rows.filter(effective_from__gt=now)
    elif when == "current":
        newer = Price.objects.filter(
            region=OuterRef("region"),
            kind=OuterRef("kind"),
            flavor=OuterRef("flavor"),
            effective_from__gt=OuterRef("effective_from"),
            effective_from__lte=now,
        )
        newer_resource = Price.objects.filter(
            region=OuterRef("region"),
            kind=OuterRef("kind"),
            flavor__isnull=True,
            effective_from__gt=OuterRef("effective_from"),
            effective_from__lte=now,
        )
        rows = rows.filter(effective_from__lte=now)
        rows = _in_force(rows, now, newer, newer_resource)
    scheduled = ExpressionWrapper(Q(effective_from__gt=now), output_field=BooleanField())
    return rows.annotate(is_scheduled=scheduled).order_by(
        "region__name", "kind", "flavor__code", "-effective_from", "pk"
    )


def _in_force(rows, now, newer, newer_resource):
    return rows.annotate(
        superseded=Exists(newer), superseded_resource=Exists(newer_resource)
    ).filter(
        Q(flavor__isnull=False, superseded=False)
        | Q(flavor__isnull=True, superseded_resource=False)
    )


def quota_history(organization):
    return (
        AuditEvent.objects.filter(organization_id=organization.pk, action="quota.changed")
        .select_related("actor")
        .order_by("-created_at", "-id")
    )
