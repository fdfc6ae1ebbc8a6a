"""Reads shared by the task pages, the operator pages and the API: tasks of an organization,
queue positions, the compute a task and a pool stand for, decisions and their re-scoring."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connections, router
from django.db.models import Count, Prefetch, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.catalog.models import AcceleratorModel, Region
from apps.catalog.selectors import NodeRoom
from apps.core.sql import ModelColumns, placeholders
from apps.orchestration import adapter
from apps.orchestration.backends.base import TASK_PENDING, Capability
from apps.orchestration.backends.registry import driver_names, drivers_with
from apps.orchestration.models import (
    Accelerator,
    Allocation,
    Backend,
    FairShare,
    Node,
    NodeHealth,
    Placement,
    Pool,
    SchedulingPolicy,
    Task,
    TaskState,
)
from apps.orchestration.scheduler import MILLI, Weights, combine, queue_positions
from apps.tenants.selectors import for_organization, parks_operated_by

USAGE_WINDOW = timedelta(hours=24)  # fair share counts the accelerator-seconds of this window
BUSY_STATES = (TaskState.QUEUED, TaskState.PLACED, TaskState.RUNNING)
PREVIEW_PLACEMENTS = 20


def tasks_for(organization):
    return (
        for_organization(Task, organization)
        .select_related("image", "accelerator_model", "pool__region", "pool__accelerator_model")
        .order_by("-submitted_at", "-pk")
    )


def schedulable_nodes(*, park=None, accelerator_model_id=None, region=None, capability=None):
    """The nodes new work may land on: healthy, not drained, in an enabled backend's
    schedulable pool run by a driver this deployment offers (no simulator outside a demo park);
    of one park, accelerator model or region where given, and run by a driver with `capability`
    (hosts, batch) where given."""
    filters = {
        "pool__backend__driver__in": drivers_with(capability) if capability else driver_names(),
        "pool__backend__park": park,
        "pool__accelerator_model_id": accelerator_model_id,
        "pool__region": region,
    }
    return Node.objects.filter(
        pool__backend__is_enabled=True,
        pool__is_schedulable=True,
        health=NodeHealth.HEALTHY,
        is_drained=False,
        **{field: value for field, value in filters.items() if value is not None},
    ).select_related("pool__region", "pool__backend", "pool__accelerator_model")


def schedulable_park_pools(park, *, capability=None):
    pools = Pool.objects.filter(backend__park=park, backend__is_enabled=True, is_schedulable=True)
    if capability:
        pools = pools.filter(backend__driver__in=drivers_with(capability))
    return pools.select_related("region", "accelerator_model")


_HOST_POOL = ModelColumns((Pool, "pool"), (Region, "region"), (AcceleratorModel, "model"))


def host_pools(park, *, accelerator_model_id: int, region=None) -> list[Pool]:
    """The pools that may place a host of this accelerator model (in `region`):
    `schedulable_park_pools(park, capability=HOSTS)` of the model, with their region and
    accelerator model, each with `driver` (its backend's) and `has_open_node` (whether a node
    of it is healthy and not drained: placement skips the others). Written out: an order reads
    them in its checks and again in its placement, where the ORM took several times the
    statement's CPU to build it (bench/order_profile.py)."""
    connection = connections[router.db_for_read(Pool)]
    drivers = drivers_with(Capability.HOSTS)
    statement = f"""
SELECT {_HOST_POOL.sql(connection)}, backend.driver, EXISTS (
    SELECT 1 FROM {Node._meta.db_table} node
    WHERE node.pool_id = pool.id AND node.health = %s AND NOT node.is_drained
)
FROM {Pool._meta.db_table} pool
JOIN {Backend._meta.db_table} backend ON backend.id = pool.backend_id
JOIN {Region._meta.db_table} region ON region.id = pool.region_id
JOIN {AcceleratorModel._meta.db_table} model ON model.id = pool.accelerator_model_id
WHERE backend.park_id = %s AND backend.is_enabled AND pool.is_schedulable
    AND backend.driver IN ({placeholders(drivers)}) AND pool.accelerator_model_id = %s
"""
    params = [NodeHealth.HEALTHY, park.pk, *drivers, accelerator_model_id]
    if region is not None:
        statement += "    AND pool.region_id = %s\n"
        params.append(region.pk)
    pools = []
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    for row in rows:
        pool, pool_region, model = _HOST_POOL.load(connection, row)
        pool.region, pool.accelerator_model = pool_region, model
        driver, has_open_node = row[_HOST_POOL.width :]
        pool.driver, pool.has_open_node = driver, bool(has_open_node)  # SQLite: 0 or 1
        pools.append(pool)
    return pools


# --- the queue -------------------------------------------------------------------------------


def recent_usage(park, *, now=None) -> dict[int, float]:
    """{organization id: accelerator-seconds its tasks ran in the last USAGE_WINDOW}: what fair
    share orders the queue by (the organization that used least goes next)."""
    now = now or timezone.now()
    since = now - USAGE_WINDOW
    rows = (
        Task.objects.filter(organization__park=park, started_at__isnull=False)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=since))
        .values_list(
            "organization_id", "accelerator_milli", "node_count", "started_at", "finished_at"
        )
    )
    usage: dict[int, float] = {}
    for organization_id, milli, nodes, started, finished in rows:
        seconds = (min(finished or now, now) - max(started, since)).total_seconds()
        if seconds > 0:
            usage[organization_id] = (
                usage.get(organization_id, 0.0) + seconds * milli * nodes / MILLI
            )
    return usage


def fair_shares(park) -> dict[int, int]:
    """{organization id: its share of the park} where an operator set one (the others have 1):
    the queue orders waiting tasks by recent usage over share."""
    return dict(
        FairShare.objects.filter(organization__park=park).values_list("organization_id", "shares")
    )


def organization_shares(park) -> list:
    """The park's organizations with an operator-set share, by name, each with `shares`."""
    return list(
        FairShare.objects.filter(organization__park=park)
        .select_related("organization")
        .order_by("organization__name")
    )


def fair_share_of(organization_id: int) -> int:
    """The organization's share (1 unless an operator set one)."""
    return (
        FairShare.objects.filter(organization_id=organization_id)
        .values_list("shares", flat=True)
        .first()
        or 1
    )


def preemptible_discount_pct(park) -> int:
    """How much less a preemptible task pays per hour in the park (its scheduling policy's)."""
    return policy_for(park).preemptible_discount_pct


def queue_positions_in(park, *, now=None) -> dict[int, int]:
    """{task id: its 1-based place in the park's start order} for every queued task: priority
    first, then fair share by recent usage, then first come first served."""
    queued = list(
        Task.objects.filter(organization__park=park, state=TaskState.QUEUED).only(
            "pk",
            "organization_id",
            "priority",
            "submitted_at",
            "accelerator_milli",
            "vcpu",
            "ram_gb",
            "preference",
            "preemptible",
        )
    )
    if not queued:
        return {}
    requests = [adapter.task_request(t, model_slugs=(), zones=()) for t in queued]
    positions = queue_positions(requests, recent_usage(park, now=now), shares=fair_shares(park))
    return {int(task_id): position for task_id, position in positions.items()}


# --- compute measurement ---------------------------------------------------------------------


def cards(task) -> Decimal:
    """The accelerators a task asks for, in cards (0.25 for a quarter share), on all its nodes."""
    return Decimal(task.total_accelerator_milli) / MILLI


def measure(value, places: int = 3) -> str:
    """A measure as shown: at most `places` decimals, no trailing zeros ("19.79", "8")."""
    if value is None:
        return ""
    text = f"{Decimal(value):.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def task_compute_units(task) -> Decimal | None:
    """Normalized compute units the task holds (or will: None while its model is open)."""
    model = task.pool.accelerator_model if task.pool_id else task.accelerator_model
    if model is None:
        return None
    return model.compute_units * Decimal(task.total_accelerator_milli) / MILLI


@dataclass(frozen=True)
class PoolFigures:
    pool: Pool
    accelerators: int
    free_accelerators: int
    units_per_accelerator: Decimal

    @property
    def units(self) -> Decimal:
        return self.units_per_accelerator * self.accelerators

    @property
    def free_units(self) -> Decimal:
        return self.units_per_accelerator * self.free_accelerators


def pool_figures(pool) -> PoolFigures:
    """A pool's accelerators and whole free ones, and what they come to in compute units."""
    counts = Accelerator.objects.filter(node__pool=pool).aggregate(
        total=Count("id"), free=Count("id", filter=Q(allocation__isnull=True))
    )
    return PoolFigures(
        pool=pool,
        accelerators=counts["total"],
        free_accelerators=counts["free"],
        units_per_accelerator=pool.accelerator_model.compute_units,
    )


# --- decisions -------------------------------------------------------------------------------


def task_placement(task) -> Placement | None:
    return (
        Placement.objects.filter(workload_id=task.workload_id)
        .select_related("chosen_node", "chosen_pool__region")
        .order_by("-created_at", "-pk")
        .first()
    )


def blocked_reason(task) -> str | None:
    """Why a queued task cannot start whatever the queue does: no pool of its model (in its
    regions), or every host of it drained or down. None when some host could take it."""
    if task.state != TaskState.QUEUED:
        return None
    nodes = Node.objects.filter(
        pool__region__park_id=task.organization.park_id, pool__is_schedulable=True
    )
    if task.accelerator_model_id:
        nodes = nodes.filter(pool__accelerator_model_id=task.accelerator_model_id)
    regions = list(task.allowed_regions.values_list("pk", flat=True))
    if regions:
        nodes = nodes.filter(pool__region_id__in=regions)
    what = str(task.accelerator_model) if task.accelerator_model_id else _("accelerator")
    if not nodes.exists():
        return _(
            "No pool of the park offers %(model)s hosts in the regions it may run in: it waits "
            "until one does. Cancel it, or submit it again with other regions or another model."
        ) % {"model": what}
    in_service = nodes.filter(is_drained=False).exclude(health=NodeHealth.DOWN)
    if not in_service.exists():
        return _(
            "Every %(model)s host it may run on is drained or down for maintenance: it starts "
            "when the park's operators bring one back into service."
        ) % {"model": what}
    if not in_service.exclude(health=NodeHealth.UNKNOWN).exists():
        return _(
            "The backends of every %(model)s host it may run on cannot be reached: it starts "
            "when one answers again."
        ) % {"model": what}
    return None


def placements_for_operator(user):
    parks = parks_operated_by(user)
    return Placement.objects.filter(workload__organization__park__in=parks).select_related(
        "workload__organization__park",
        "workload__instance",
        "workload__task",
        "chosen_node",
        "chosen_pool__region",
    )


def placement_park(placement):
    return placement.workload.organization.park


def recent_park_placements(park, *, limit: int = PREVIEW_PLACEMENTS) -> list[Placement]:
    """The park's last `limit` decisions made by the weighted scorer, newest first."""
    return list(
        Placement.objects.filter(
            workload__organization__park=park,
            chosen_node__isnull=False,
            weights__has_key="weights",
        )
        .select_related(
            "chosen_node", "chosen_pool__region", "workload__instance", "workload__task"
        )
        .order_by("-created_at", "-pk")[:limit]
    )


def rescored_choice(placement, operator: Weights, operator_share: float) -> dict | None:
    """The candidate `placement` would have chosen under the park weights `operator`, from the
    score parts it stored (the tenant's preference as it was), among the best candidates it
    kept (adapter.KEPT_CANDIDATES). None if nothing was feasible."""
    weights = combine(operator, placement.weights.get("preference"), operator_share).normalized()
    best = None
    for candidate in placement.candidates:
        if candidate.get("total") is None:
            continue
        total = sum(
            getattr(weights, part) * candidate["parts"].get(part, 0.0) for part in weights.as_dict()
        )
        if best is None or total > best[0] + 1e-12:
            best = (total, candidate)
    return best[1] if best else None


@dataclass(frozen=True)
class PreviewRow:
    placement: Placement
    chosen: dict | None
    would_choose: dict | None

    @property
    def changes(self) -> bool:
        return bool(self.would_choose) and self.would_choose["node_id"] != (
            self.placement.chosen_node_id
        )


def preview_policy(
    park, *, weights: dict, operator_share: float, limit: int = PREVIEW_PLACEMENTS
) -> list[PreviewRow]:
    """What the park's last `limit` decisions would have chosen with these weights."""
    operator = Weights(**weights)
    return [
        PreviewRow(
            placement=placement,
            chosen=placement.chosen_candidate(),
            would_choose=rescored_choice(placement, operator, operator_share),
        )
        for placement in recent_park_placements(park, limit=limit)
    ]


def policy_for(park) -> SchedulingPolicy:
    """The park's policy, or the defaults it schedules by (unsaved)."""
    return SchedulingPolicy.objects.filter(park=park).first() or SchedulingPolicy.default_for(park)


def task_with_details(queryset):
    return queryset.prefetch_related(
        "allowed_regions",
        Prefetch(
            "workload__placements",
            queryset=Placement.objects.select_related("chosen_node", "chosen_pool__region"),
        ),
    )


def free_room_by_model(park=None) -> dict[int, list[NodeRoom]]:
    """Free room of every schedulable node, grouped by accelerator model id: the catalog's
    `FREE_ROOM`. Three queries whatever the park's size: the nodes, then free accelerators and
    live allocations each counted in one GROUP BY (a subquery per node made every anonymous
    catalog view cost 3 lookups per node, issue 15)."""
    nodes = schedulable_nodes(park=park, capability=Capability.HOSTS)
    rows = list(
        nodes.values("pk", "pool__accelerator_model", "pool__region", "vcpu_total", "ram_gb_total")
    )
    node_ids = nodes.values("pk")
    free = dict(
        Accelerator.objects.filter(node__in=node_ids, allocation__isnull=True, out_of_service=False)
        .values("node")
        .annotate(n=Count("id"))
        .values_list("node", "n")
        .order_by()
    )
    used = {
        row["node"]: row
        for row in Allocation.objects.filter(node__in=node_ids, released_at__isnull=True)
        .values("node")
        .annotate(vcpu=Sum("vcpu"), ram=Sum("ram_gb"))
        .order_by()
    }
    by_model = defaultdict(list)
    for row in rows:
        held = used.get(row["pk"], {"vcpu": 0, "ram": 0})
        by_model[row["pool__accelerator_model"]].append(
            NodeRoom(
                region_id=row["pool__region"],
                accelerators=free.get(row["pk"], 0),
                vcpu=row["vcpu_total"] - held["vcpu"],
                ram_gb=row["ram_gb_total"] - held["ram"],
            )
        )
    return dict(by_model)


def ran_for(task, *, now=None) -> timedelta | None:
    """How long the task has run (to its end, once finished); None before it starts."""
    if task.started_at is None:
        return None
    return (task.finished_at or now or timezone.now()) - task.started_at


def backend_state_label(task) -> str:
    """The backend's word for where the task stands, in the console's words ("" if none)."""
    status = task.backend_status or {}
    if status.get("unreachable_since"):
        since = timezone.localtime(datetime.fromisoformat(status["unreachable_since"]))
        today = since.date() == timezone.localdate()
        return _("State unknown since %(time)s — backend unreachable") % {
            "time": since.strftime("%H:%M" if today else "%Y-%m-%d %H:%M")
        }
    state = status.get("state") or ""
    if state == TASK_PENDING:
        return _("Waiting to start")
    return TaskState(state).label if state in TaskState.values else state
