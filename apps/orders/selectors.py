import functools
from datetime import datetime, timedelta

from django.db import connections, router
from django.db.models import Count, Prefetch, Q
from django.utils import timezone

from apps.catalog.models import AcceleratorModel, Flavor, FlavorFamily, Image
from apps.core import sql
from apps.core.models import AuditEvent
from apps.orchestration.models import Placement
from apps.orders.models import (
    DEFAULT_SECURITY_RULES,
    INSTANCE_HOLDING_STATES,
    ApprovalPolicy,
    IdlePolicy,
    Instance,
    InstanceState,
    Order,
    OrderKind,
    OrderState,
    PortMapping,
    SecurityGroup,
    SecurityGroupRule,
)
from apps.quotas.services import Usage, demand_for, quota_holder
from apps.tenants.selectors import for_organization

RELEASED_SHOWN_FOR = timedelta(days=7)


# The host list's default: every host not released.
NOT_RELEASED = "active"


def instances_for(organization, *, state: str = "", region=None):
    """The organization's hosts, newest first: in `state` (NOT_RELEASED: all but the released;
    "": all), in `region` if given. Released hosts are kept a week."""
    recent = timezone.now() - RELEASED_SHOWN_FOR
    hosts = for_organization(Instance, organization).filter(
        ~Q(state=InstanceState.RELEASED) | Q(released_at__gte=recent)
    )
    if state == NOT_RELEASED:
        hosts = hosts.exclude(state=InstanceState.RELEASED)
    elif state:
        hosts = hosts.filter(state=state)
    if region is not None:
        hosts = hosts.filter(region=region)
    return hosts.select_related(
        "flavor__family__accelerator_model", "region", "image", "pool__backend"
    ).order_by("-created_at", "-pk")


def orders_for(organization):
    return (
        for_organization(Order, organization)
        .select_related("instance", "created_by")
        .order_by("-created_at", "-pk")
    )


def instance_orders(instance):
    """The host's orders, newest first; its creation carries the placements that chose its
    node (`placements`)."""
    orders = list(
        instance.orders.select_related("created_by", "decided_by").order_by("-created_at")
    )
    placements = list(
        Placement.objects.filter(workload_id=instance.workload_id).order_by("created_at", "pk")
    )
    for order in orders:
        order.placements = placements if order.kind == OrderKind.CREATE else []
    return orders


# An operation asked for and not finished: the host's page polls until it is.
OPEN_ORDER_STATES = (OrderState.SUBMITTED, OrderState.APPROVED, OrderState.FULFILLING)


def pending_orders(orders) -> tuple[Order | None, Order | None]:
    """(the operation under way, the order awaiting the park's approval) among a host's
    `orders` (instance_orders), each None where there is none."""
    working = next(
        (o for o in orders if o.kind != OrderKind.CREATE and o.state in OPEN_ORDER_STATES), None
    )
    waiting = next((o for o in orders if o.state == OrderState.AWAITING_APPROVAL), None)
    return working, waiting


# --- What instances hold against quotas ------------------------------------------------------


_HELD_BY_INSTANCES_SQL = """
SELECT family.accelerator_model_id, model.compute_units, SUM(flavor.accelerator_count),
    SUM(flavor.vcpu), SUM(flavor.ram_gb), SUM(instance.system_disk_gb + instance.data_disk_gb),
    COUNT(*)
FROM orders_instance instance
JOIN catalog_flavor flavor ON flavor.id = instance.flavor_id
JOIN catalog_flavorfamily family ON family.id = flavor.family_id
JOIN catalog_acceleratormodel model ON model.id = family.accelerator_model_id
WHERE instance.organization_id IN ({organizations}) AND instance.state IN ({states})
GROUP BY family.accelerator_model_id, model.compute_units
"""


def _held_by_instances_query(organizations) -> tuple[str, list]:
    members, params = sql.members(organizations)
    states = sorted(INSTANCE_HOLDING_STATES)
    return (
        _HELD_BY_INSTANCES_SQL.format(organizations=members, states=sql.placeholders(states)),
        [*params, *states],
    )


@quota_holder(Instance, _held_by_instances_query)
def held_by_instances(rows) -> Usage:
    """What the organizations' instances hold (those in a holding state), per accelerator
    model in one statement (written out: counted on every order, and the ORM took several
    times the statement's CPU to build it). `held_by_instances(organizations)`: ids, rows
    or a queryset."""
    total = Usage()
    for model_id, units, accelerators, vcpu, ram_gb, disk_gb, count in rows:
        total += Usage(
            accelerators=accelerators,
            compute_units=sql.decimal(units) * accelerators,
            vcpu=vcpu,
            ram_gb=ram_gb,
            disk_gb=disk_gb,
            instances=count,
            by_model={model_id: accelerators},
        )
    return total


_GROWING_SQL = """
SELECT growing.id
FROM orders_order growing
JOIN orders_instance instance ON instance.id = growing.instance_id
WHERE instance.organization_id IN ({organizations}) AND instance.state IN ({states})
    AND growing.state IN (%s, %s) AND growing.kind IN (%s, %s)
"""


def _growing_query(organizations) -> tuple[str, list]:
    members, params = sql.members(organizations)
    states = sorted(INSTANCE_HOLDING_STATES)
    return (
        _GROWING_SQL.format(organizations=members, states=sql.placeholders(states)),
        [
            *params,
            *states,
            OrderState.APPROVED.value,
            OrderState.FULFILLING.value,
            OrderKind.RESIZE.value,
            OrderKind.EXPAND_DISK.value,
        ],
    )


@quota_holder(Order, _growing_query)
def pending_growth(growing) -> Usage:
    """What open resize and disk-expansion orders on the organizations' instances add: they
    hold their growth from the moment they are accepted until the backend is done (or
    fails). Counted on every order and mostly none open: which are open is read first,
    written out, and only those are read with their flavors.
    `pending_growth(organizations)`: ids, rows or a queryset."""
    total = Usage()
    if not growing:
        return total
    orders = Order.objects.filter(pk__in=[order_id for (order_id,) in growing])
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


_APPROVAL_POLICY = sql.ModelColumns((ApprovalPolicy, "policy"))


def approval_policy_of(park_id: int) -> ApprovalPolicy:
    """The park's approval policy, or the default one (unsaved) where it has set none. Written
    out (its values converted as the ORM converts them): read on every order, where the ORM,
    and even a raw queryset, took several times the statement's CPU."""
    for (policy,) in _APPROVAL_POLICY.fetch(
        f"FROM {ApprovalPolicy._meta.db_table} policy WHERE policy.park_id = %s", [park_id]
    ):
        return policy
    return ApprovalPolicy()


_COMPATIBLE = Image.compatible_accelerators.through
_IMAGE_RUNS_ON_SQL = f"""
SELECT 1 FROM {_COMPATIBLE._meta.db_table} compatible
WHERE compatible.image_id = %s AND compatible.acceleratormodel_id = %s
"""


def image_runs_on(image: Image, accelerator_model_id: int) -> bool:
    """Whether the image is built for the accelerator model: as `flavor_and_image` read it with
    the image, else asked. Written out: asked on every order, where the ORM took several times
    the statement's CPU."""
    known = getattr(image, "runs_on", {})
    if accelerator_model_id in known:
        return known[accelerator_model_id]
    return bool(sql.fetch_all(Image, _IMAGE_RUNS_ON_SQL, [image.pk, accelerator_model_id]))


_FLAVOR_AND_IMAGE = sql.ModelColumns(
    (Flavor, "flavor"),
    (FlavorFamily, "family"),
    (AcceleratorModel, "model"),
    (Image, "image"),
)


def flavor_and_image(
    *, park, organization, flavor_code: str, image_code: str
) -> tuple[Flavor | None, Image | None] | None:
    """The flavor of this code on sale in the park (with its family and accelerator model) and
    the image of this code it may be ordered with (the park's, or the organization's own), each
    None where there is none, read in one statement, with whether the image runs on the
    flavor's cards (`image_runs_on`): what every order names, where the ORM took several times
    the statements' CPU to build them. None where several flavors of the park have the code (of
    different families), which only the ORM's own lookup answers as it does."""
    connection = connections[router.db_for_read(Flavor)]
    statement = _flavor_and_image_statement(connection.alias)
    organization_id = organization.pk if organization is not None else None
    with connection.cursor() as cursor:
        cursor.execute(statement, [flavor_code, park.pk, image_code, park.pk, organization_id])
        rows = cursor.fetchall()
    if len(rows) != 1:
        return None
    (row,) = rows
    flavor, family, model, image = _FLAVOR_AND_IMAGE.load(connection, row)
    if flavor is not None:
        family.accelerator_model = model
        flavor.family = family
        if image is not None:
            image.runs_on = {model.pk: bool(row[_FLAVOR_AND_IMAGE.width])}
    return flavor, image


@functools.cache
def _flavor_and_image_statement(alias: str) -> str:
    columns = _FLAVOR_AND_IMAGE.sql(connections[alias])
    return f"""
SELECT {columns}, EXISTS (
    SELECT 1 FROM {_COMPATIBLE._meta.db_table} compatible
    WHERE compatible.image_id = image.id
        AND compatible.acceleratormodel_id = family.accelerator_model_id
)
FROM (SELECT 1 AS one) asked
LEFT JOIN {Flavor._meta.db_table} flavor ON flavor.code = %s AND flavor.is_active
    AND flavor.family_id IN (SELECT id FROM {FlavorFamily._meta.db_table} WHERE park_id = %s)
LEFT JOIN {FlavorFamily._meta.db_table} family ON family.id = flavor.family_id
LEFT JOIN {AcceleratorModel._meta.db_table} model ON model.id = family.accelerator_model_id
LEFT JOIN {Image._meta.db_table} image ON image.code = %s AND image.is_active
    AND image.park_id = %s AND (image.organization_id IS NULL OR image.organization_id = %s)
"""


# --- Networking: security groups and port mappings --------------------------------------------


def security_groups_for(organization) -> list[SecurityGroup]:
    """The organization's security groups (the default first), each with its rules and, as
    `hosts`, how many of its hosts that are not released use it (the default group: also
    those without a group of their own)."""
    groups = list(
        for_organization(SecurityGroup, organization)
        .prefetch_related(Prefetch("rules", queryset=SecurityGroupRule.objects.order_by("pk")))
        .order_by("-is_default", "name", "pk")
    )
    counts = security_group_host_counts(organization)
    for group in groups:
        group.hosts = counts.get(group.pk, 0)
    return groups


def security_group_host_counts(organization) -> dict[int, int]:
    """{group id: how many of the organization's hosts that are not released use it}; the
    default group counts the hosts without a group of their own too. One query."""
    using = dict(
        for_organization(Instance, organization)
        .exclude(state=InstanceState.RELEASED)
        .order_by()
        .values("security_group_id")
        .annotate(n=Count("pk"))
        .values_list("security_group_id", "n")
    )
    without = using.pop(None, 0)
    if without:
        default = (
            for_organization(SecurityGroup, organization)
            .filter(is_default=True)
            .values_list("pk", flat=True)
            .first()
        )
        if default is not None:
            using[default] = using.get(default, 0) + without
    return using


def effective_security_group(instance) -> SecurityGroup | None:
    """The host's group: its own, else its organization's default (None while the
    organization has none yet: it gets one the first time one is needed)."""
    if instance.security_group_id is not None:
        return instance.security_group
    return SecurityGroup.objects.filter(
        organization_id=instance.organization_id, is_default=True
    ).first()


def ingress_rules_of(instance) -> list[dict]:
    """The rules that let traffic reach the host's forwarded ports: its group's (an
    organization without a default group yet has the rules it will be made with)."""
    group = effective_security_group(instance)
    if group is None:
        return [dict(rule) for rule in DEFAULT_SECURITY_RULES]
    return list(group.rules.order_by("pk").values("protocol", "from_port", "to_port", "source"))


def port_mappings_of(instance) -> list[PortMapping]:
    return list(instance.port_mappings.order_by("host_port", "protocol", "pk"))


def hosts_of_group(group: SecurityGroup):
    """The hosts whose ingress rules are `group`'s: those in it, and for the default group
    those without a group of their own. Released ones are left out."""
    in_group = Q(security_group=group)
    if group.is_default:
        in_group |= Q(security_group__isnull=True)
    return (
        Instance.objects.filter(in_group, organization_id=group.organization_id)
        .exclude(state=InstanceState.RELEASED)
        .order_by("pk")
    )


# --- hosts left stopped (apps.orders.expiry) ---------------------------------------------------

DEFAULT_RELEASE_DAYS = IdlePolicy._meta.get_field("release_stopped_after_days").default


def release_days(park_ids) -> dict[int, int]:
    """Each park's "release hosts stopped for more than N days" (0: never): its policy's, or
    the default where it has none."""
    set_days = dict(
        IdlePolicy.objects.filter(park_id__in=park_ids).values_list(
            "park_id", "release_stopped_after_days"
        )
    )
    return {park_id: set_days.get(park_id, DEFAULT_RELEASE_DAYS) for park_id in park_ids}


def release_at(instance: Instance, days: int) -> datetime | None:
    """When a stopped host is released under a policy of `days` (None: never, or not stopped)."""
    if not days or instance.state != InstanceState.STOPPED or instance.stopped_at is None:
        return None
    return instance.stopped_at + timedelta(days=days)


# A stopped host is released only once its owners were told at least this long before.
RELEASE_NOTICE_AT_LEAST = timedelta(days=1)


def release_notices(instance: Instance):
    """The release notices sent since the host last stopped (audit events)."""
    return AuditEvent.objects.filter(
        action="instance.release_notice",
        object_type=Instance._meta.label_lower,
        object_id=str(instance.pk),
        created_at__gte=instance.stopped_at,
    )


def release_date_of(instance: Instance, *, now: datetime | None = None) -> datetime | None:
    """When its park releases this host if it stays stopped (None: it will not): its policy's
    date, or later where its owners have not been told a day before (the park shortened its
    days)."""
    if instance.state != InstanceState.STOPPED:
        return None
    park_id = instance.organization.park_id
    due = release_at(instance, release_days([park_id])[park_id])
    if due is None:
        return None
    first_notice = (
        release_notices(instance)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    return max(due, (first_notice or now or timezone.now()) + RELEASE_NOTICE_AT_LEAST)
