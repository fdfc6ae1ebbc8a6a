"""Rows to the placement engine's values and back (apps.orchestration.scheduler is pure Python).

- Nodes: `node_views(nodes, prices=...)` turns schedulable nodes into `NodeView`s (the row and
  its `NodeState`), counting what every node has free in a few queries for all nodes at once
  (or taking the rooms `shortlist` counted for the few nodes it read);
  `card_states(node_ids)` lists the cards themselves, for taking them under the node's lock.
- Prices: `task_prices(pools)` (per accelerator-hour: the region's price of the model's
  one-card flavor) and `flavor_prices(flavor, pools, in_force)` (an instance's own flavor).
- Requests: `instance_request(...)` for an order's host, `task_request(task, ...)` for a
  training task.
- Weights: `park_weights(park)`, the park's `SchedulingPolicy` (or the defaults).
- Records: `placement_record(decision, views, ...)` → the `Placement.weights` and
  `Placement.candidates` JSON (the best candidates' score parts, so a decision can be
  re-scored, and how many hosts fitted or were rejected, and why).

The fragmentation part is best fit (`BEST_FIT`): the fewer accelerators a placement leaves free
on its node, the better, which keeps whole nodes for large requests.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from functools import cached_property

from django.db.models import Sum
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.catalog.models import PriceKind, ResourceType
from apps.catalog.selectors import prices_in_force
from apps.core import sql
from apps.orchestration.models import Accelerator, Allocation, NodeHealth, SchedulingPolicy
from apps.orchestration.scheduler import MILLI, Decision, NodeState, TaskRequest, Weights
from apps.orchestration.scheduler.fragmentation import ShapeDistribution

FRAGMENTATION_POLICY = "best-fit"
# A zone no node is in: a task allowed nowhere (an empty set would mean anywhere).
NO_ZONE = "-"
# What the engine says of a node outside a task's zones.
ZONE_CODES = ("gpu_model", "region")


class BestFitMeasure(ShapeDistribution):
    """The fragmentation part as best fit, in the form the scorer takes a distribution.

    `scoring.fragmentation_delta` scores `weighted(after) - weighted(before)` (lower is
    better). With `weighted = -free²/1000` (free: the node's free milli-accelerators) that is
    `k·(2·free - k)/1000` for a request of k milli, which grows with the free capacity the node
    has: the fullest node that still holds the request wins, for whole cards and shares alike.
    """

    def _reset(self) -> None:
        super()._reset()
        self.total = 1

    def weighted(self, sig) -> float:
        free = sum(sig[6])
        return -(free * free) / MILLI


BEST_FIT = BestFitMeasure()


# --- nodes -----------------------------------------------------------------------------------


@dataclass(slots=True)
class NodeRow:
    """A node's columns that scoring reads, as a plain row (`shortlist` reads them in SQL): a
    Node model instance a node cost more than the row's reading."""

    pk: int
    pool_id: int
    hostname: str
    vcpu_total: int
    ram_gb_total: int
    health: str
    is_drained: bool
    loaded_watts: float | None  # `Node.loaded_watts`, and when it was measured
    loaded_watts_at: datetime | None
    pool: object = None  # set by the caller (a few pools are read once for all their nodes)
    # Set by node_views, as on a Node:
    free_accelerators: int = 0
    vcpu_used: int = 0
    ram_used: int = 0


@dataclass
class NodeView:
    """A schedulable node as the engine sees it, with what maps its answer back to rows."""

    node: object  # a Node or NodeRow with pool (region, accelerator model); room by node_views
    state: NodeState
    price_per_hour_minor: Decimal | None = None  # one accelerator for one hour; None: unpriced

    @property
    def pool(self):
        return self.node.pool

    @cached_property
    def record_base(self) -> dict:
        """What a candidate record of this node says whatever the request (a queue pass
        records every node for each task it places)."""
        node, pool = self.node, self.node.pool
        return {
            "node": node.hostname,
            "node_id": node.pk,
            "pool": pool.name,
            "pool_id": pool.pk,
            "region": pool.region.code,
            "region_name": pool.region.name,
            "model": pool.accelerator_model.name,
            "free_accelerators": node.free_accelerators,
            "free_vcpu": node.vcpu_total - node.vcpu_used,
            "free_ram_gb": node.ram_gb_total - node.ram_used,
        }


@dataclass(slots=True)
class Card:
    """One accelerator of a node, as placement counts it."""

    id: int
    free: int  # milli-accelerators: 1000 idle, 0 held whole, else 1000 minus its live shares
    held: bool  # an allocation holds it (whole, or for the shares on it)
    holder: int | None = None  # the id of the allocation that holds it, where one is saved
    in_service: bool = True  # out of service: nothing free, whoever holds it


_CARDS_SQL = """
SELECT card.id, card.node_id, card.allocation_id, holder.share_milli, card.out_of_service
FROM orchestration_accelerator card
LEFT JOIN orchestration_allocation holder ON holder.id = card.allocation_id
WHERE card.node_id IN ({nodes})
ORDER BY card.node_id, card."index"
"""


def card_states(node_ids) -> dict[int, list[Card]]:
    """{node id: its cards in index order}, in one query, and one more where cards are shared.

    A card is free (1000) when nothing holds it, 0 when an allocation holds it whole, and
    1000 minus its live shares when the allocation holding it is a share. A card out of
    service has nothing free.
    """
    node_ids = list(node_ids)
    if not node_ids:
        return {}
    cards = sql.fetch_all(
        Accelerator,
        _CARDS_SQL.format(nodes=sql.placeholders(node_ids)),
        node_ids,
    )
    used = live_shares({row[0] for row in cards if row[2] is not None and row[3]})
    by_node = defaultdict(list)
    for card_id, node_id, holder, holder_share, out_of_service in cards:
        if out_of_service:
            free = 0
        elif holder is None:
            free = MILLI
        elif holder_share:
            free = max(0, MILLI - (used.get(card_id) or 0))
        else:
            free = 0
        by_node[node_id].append(
            Card(
                id=card_id,
                free=free,
                held=holder is not None,
                holder=holder,
                in_service=not out_of_service,
            )
        )
    return by_node


def live_shares(card_ids) -> dict[int, int]:
    """{card id: the milli-accelerators its live shares hold}, for shared cards."""
    if not card_ids:
        return {}
    return dict(
        Allocation.objects.filter(shared_accelerator_id__in=card_ids, released_at__isnull=True)
        .values("shared_accelerator_id")
        .annotate(milli=Sum("share_milli"))
        .order_by()
        .values_list("shared_accelerator_id", "milli")
    )


@dataclass(slots=True)
class Room:
    """What a node has free, as scoring needs it: how much, not which card."""

    idle: int  # cards nothing holds, in service (what a host of whole cards can take)
    free: list[int]  # each card's free milli-accelerators (see Card.free): idle, shared, full
    vcpu_used: int = 0  # what its live allocations hold
    ram_gb_used: int = 0


# What rooms() counts, in one statement: per node, its cards and those idle, and what its live
# allocations hold (vCPU, memory, how many are shares); a node has one row of each kind at
# most, so MAX merges them (and keeps integers, where PostgreSQL's SUM of sums is numeric).
# Written out: the ORM took five times the statement's own CPU to build its two aggregates,
# on every order.
_ROOMS_SQL = """
SELECT node_id, MAX(cards), MAX(idle), MAX(vcpu), MAX(ram_gb), MAX(shares) FROM (
    SELECT card.node_id, COUNT(*) AS cards,
        SUM(CASE WHEN card.allocation_id IS NULL AND NOT card.out_of_service THEN 1 ELSE 0 END)
            AS idle,
        0 AS vcpu, 0 AS ram_gb, 0 AS shares
    FROM orchestration_accelerator card
    JOIN orchestration_node node ON node.id = card.node_id
    WHERE node.pool_id IN ({pools})
    GROUP BY card.node_id
    UNION ALL
    SELECT held.node_id, 0, 0, SUM(held.vcpu), SUM(held.ram_gb),
        SUM(CASE WHEN held.share_milli > 0 THEN 1 ELSE 0 END)
    FROM orchestration_allocation held
    JOIN orchestration_node node ON node.id = held.node_id
    WHERE node.pool_id IN ({pools}) AND held.released_at IS NULL
    GROUP BY held.node_id
) counted
GROUP BY node_id
"""


def rooms(pool_ids) -> dict[int, Room]:
    """{node id: its Room} for every node of the pools with cards or live allocations, counted
    per node in the database (one row a node, not a card): the same figures as `card_states`,
    without the card ids that only taking cards needs. One query, and two more where a node
    has shared cards: which they are, and their live shares."""
    pool_ids = list(pool_ids)
    if not pool_ids:
        return {}
    counted = sql.fetch_all(
        Accelerator, _ROOMS_SQL.format(pools=sql.placeholders(pool_ids)), pool_ids * 2
    )
    partial = shared_cards_free([row[0] for row in counted if row[5]])
    out = {}
    for node_id, count, idle, vcpu, ram_gb, _shares in counted:  # a CPU-only node has no cards
        shared = partial.get(node_id, [])
        out[node_id] = Room(
            idle=idle,
            free=[MILLI] * idle + shared + [0] * (count - idle - len(shared)),
            vcpu_used=vcpu,
            ram_gb_used=ram_gb,
        )
    return out


_HELD_SQL = """
SELECT node_id, SUM(vcpu), SUM(ram_gb)
FROM orchestration_allocation
WHERE node_id IN ({nodes}) AND released_at IS NULL
GROUP BY node_id
"""


def held_by_nodes(node_ids) -> dict[int, tuple[int, int]]:
    """{node id: (vCPU, GB of memory) its live allocations hold}, for those that hold any."""
    node_ids = list(node_ids)
    if not node_ids:
        return {}
    rows = sql.fetch_all(Allocation, _HELD_SQL.format(nodes=sql.placeholders(node_ids)), node_ids)
    return {node_id: (vcpu, ram_gb) for node_id, vcpu, ram_gb in rows}


def shared_cards_free(node_ids) -> dict[int, list[int]]:
    """{node id: what each of its in-service shared cards has free}, for nodes with live
    shares."""
    if not node_ids:
        return {}
    shared = list(
        Accelerator.objects.filter(
            node_id__in=node_ids, out_of_service=False, allocation__share_milli__gt=0
        ).values_list("id", "node_id")
    )
    used = live_shares({card_id for card_id, _node_id in shared})
    partial = defaultdict(list)
    for card_id, node_id in shared:
        partial[node_id].append(max(0, MILLI - (used.get(card_id) or 0)))
    return partial


# A card this busy draws close to its power under load, so its measured draw can stand in for
# the datasheet's TDP in the energy score; readings older than the window prove nothing.
LOADED_PCT = 50
MEASURED_POWER_FRESH_FOR = timedelta(minutes=10)


def measured_power(telemetry: dict) -> tuple[float | None, datetime | None]:
    """(what one of the node's loaded cards draws, when it was read) from a node's telemetry:
    the mean measured power of its cards at LOADED_PCT or more (the host agent reads it
    through NVML), and the telemetry's time; (None, None) where no loaded card has power or
    the telemetry has no time. Kept on the node with its telemetry (`Node.loaded_watts`)."""
    telemetry = telemetry or {}
    updated = parse_datetime(telemetry.get("updated_at") or "")
    accelerators = telemetry.get("accelerators")
    loaded = [
        float(reading["power_w"])
        for reading in (accelerators.values() if isinstance(accelerators, dict) else ())
        if reading.get("power_w") is not None and (reading.get("util") or 0) >= LOADED_PCT
    ]
    if updated is None or not loaded:
        return None, None
    return sum(loaded) / len(loaded), updated


def card_readings(
    telemetry: dict | None,
) -> tuple[datetime | None, dict[int, tuple[datetime | None, float | None]]]:
    """(when a node's telemetry was taken, {card index: (idle since, utilization)}) as the idle
    check reads them: a time that does not parse is None (naive ones are UTC), so is a card's
    `idle_since` that does not (the card proves nothing idle), and a `util` that is no number.
    Kept on the node and its cards with the telemetry (`services.keep_card_readings`)."""
    telemetry = telemetry if isinstance(telemetry, dict) else {}
    accelerators = telemetry.get("accelerators")
    readings = {}
    for key, reading in accelerators.items() if isinstance(accelerators, dict) else ():
        if not str(key).isdigit():
            continue
        reading = reading if isinstance(reading, dict) else {}
        util = reading.get("util")
        readings[int(key)] = (
            _utc_or_none(reading.get("idle_since")),
            float(util) if isinstance(util, int | float) and not isinstance(util, bool) else None,
        )
    return _utc_or_none(telemetry.get("updated_at")), readings


def _utc_or_none(value) -> datetime | None:
    try:
        moment = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:  # well formed but out of range ("2026-13-45T...")
        return None
    if moment is None:
        return None
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, UTC)


def watts_under_load(node, tdp_w: int, now) -> float:
    """What one of the node's cards draws under load: its measured power (`measured_power`)
    while fresh, else its TDP."""
    measured_at = node.loaded_watts_at
    if node.loaded_watts is None or measured_at is None:
        return float(tdp_w)
    if now - measured_at > MEASURED_POWER_FRESH_FOR:
        return float(tdp_w)
    return node.loaded_watts


def node_views(nodes, *, prices: dict, rooms_of: dict | None = None) -> list[NodeView]:
    """`nodes` (Nodes or NodeRows, their pools with region and accelerator_model); `prices`:
    {pool id: price of one accelerator-hour, or None}; `rooms_of`: {node id: Room} where the
    caller counted them (`shortlist`). Otherwise what each node has free is read here,
    for every node of their pools in two queries, four with shared cards (`rooms`: a few pool
    ids to filter by, where listing hundreds of node ids cost more than the counting), and set
    on the node (`free_accelerators`, `vcpu_used`, `ram_used`): one correlated subquery per
    node and figure, and a row per card, were most of what an order spent choosing among
    hundreds of nodes."""
    nodes = list(nodes)
    room_of = rooms({node.pool_id for node in nodes}) if rooms_of is None else rooms_of
    now = timezone.now()
    per_pool = {}  # what a pool's nodes share, worked out once per pool
    views = []
    for node in nodes:
        pool = node.pool
        common = per_pool.get(pool.pk)
        if common is None:
            model, region, price = pool.accelerator_model, pool.region, prices.get(pool.pk)
            common = per_pool[pool.pk] = (
                model,
                float(model.compute_units),
                price,
                {
                    "accelerator_model": model.slug,
                    "region": region.code,
                    "latency_ms": float(region.latency_ms),
                    "perf_units_per_gpu": float(model.compute_units),
                    "pue": float(pool.pue),
                    "carbon_g_per_kwh": float(pool.carbon_g_per_kwh),
                    "price_per_hour_minor": float(price) if price is not None else 0,
                },
            )
        model, units, price, attributes = common
        room = room_of.get(node.pk) or Room(idle=0, free=[])
        node.free_accelerators = room.idle
        node.vcpu_used, node.ram_used = room.vcpu_used, room.ram_gb_used
        state = NodeState.from_portal(
            str(node.pk),
            accelerators=len(room.free),
            vcpu=node.vcpu_total,
            ram_gb=node.ram_gb_total,
            vcpu_used=min(node.vcpu_used, node.vcpu_total),
            ram_gb_used=min(node.ram_used, node.ram_gb_total),
            watts_per_unit=watts_under_load(node, model.tdp_w, now) / units,
            drained=node.is_drained or node.health != NodeHealth.HEALTHY,
            **attributes,
        )
        # from_portal knows whole cards only; the exact per-card shares:
        state.gpu_free = room.free
        views.append(NodeView(node=node, state=state, price_per_hour_minor=price))
    return views


# --- prices ----------------------------------------------------------------------------------


def per_card_hour(amount_minor, accelerators: int) -> Decimal:
    return Decimal(amount_minor) / accelerators


def task_prices(pools, at=None) -> dict[int, Decimal | None]:
    """{pool id: what one of its accelerators costs a training task per hour, or None}.

    The region's price of the one-accelerator flavor of the pool's model (a training-task
    family's first, then the cheapest); without a one-card flavor there, the cheapest per-card
    rate of the model's flavors in the region. One query for all pools.
    """
    pools = list(pools)
    offered = prices_in_force(
        at=at,
        region_id__in={p.region_id for p in pools},
        flavor__family__accelerator_model_id__in={p.accelerator_model_id for p in pools},
        flavor__is_active=True,
    )
    by_place = defaultdict(list)
    for price in offered:
        by_place[(price.region_id, price.flavor.family.accelerator_model_id)].append(price)
    prices = {}
    for pool in pools:
        offers = by_place.get((pool.region_id, pool.accelerator_model_id), [])
        single = [p for p in offers if p.flavor.accelerator_count == 1]
        if single:
            best = min(
                single,
                key=lambda p: (
                    p.flavor.family.resource_type != ResourceType.TRAINING_TASK,
                    p.amount_minor,
                ),
            )
            prices[pool.pk] = Decimal(best.amount_minor)
        elif offers:
            prices[pool.pk] = min(
                per_card_hour(p.amount_minor, p.flavor.accelerator_count) for p in offers
            )
        else:
            prices[pool.pk] = None
    return prices


def flavor_prices(flavor, pools, in_force: dict) -> dict[int, Decimal | None]:
    """{pool id: the flavor's price in the pool's region per accelerator-hour, or None};
    `in_force`: the prices in force in the pools' regions (`catalog.selectors.prices_by_region`)."""
    prices = {}
    for pool in pools:
        price = in_force.get(pool.region_id, {}).get(PriceKind.FLAVOR_HOUR)
        prices[pool.pk] = (
            per_card_hour(price.amount_minor, flavor.accelerator_count) if price else None
        )
    return prices


def task_hourly_minor(price_per_card_hour, accelerator_milli: int) -> int:
    """A task's price per hour: the card price × its thousandths of a card, half up."""
    amount = Decimal(price_per_card_hour) * accelerator_milli / MILLI
    return int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP))


# --- requests --------------------------------------------------------------------------------


def instance_request(
    *, instance_id, shape, model_slug: str, region=None, preference: str = "balanced"
) -> TaskRequest:
    """One host of an order: `shape.accelerators` whole cards of one model, on one node."""
    return TaskRequest(
        id=f"instance-{instance_id}",
        cpu_milli=shape.vcpu * MILLI,
        memory_mib=shape.ram_gb * 1024,
        num_gpu=shape.accelerators,
        gpu_milli=MILLI,
        gpu_models=frozenset({model_slug}),
        regions=frozenset({region.code}) if region is not None else frozenset(),
        preference=preference or "balanced",
    )


def task_model_ids(task) -> set[int]:
    """The accelerator models a task may run on: its own, or every one its image runs on."""
    if task.accelerator_model_id:
        return {task.accelerator_model_id}
    return {m.pk for m in task.image.compatible_accelerators.all()}


def task_request(task, *, model_slugs, zones=None) -> TaskRequest:
    """A training task. `zones`: the zones (see `zone`) it may use; None: its allowed regions'
    codes, for a request scored against plain `node_views`."""
    milli = task.accelerator_milli
    if zones is None:
        regions = frozenset(r.code for r in task.allowed_regions.all())
    else:
        regions = frozenset(zones) or frozenset({NO_ZONE})
    return TaskRequest(
        id=str(task.pk),
        cpu_milli=task.vcpu * MILLI,
        memory_mib=task.ram_gb * 1024,
        num_gpu=1 if milli < MILLI else milli // MILLI,
        gpu_milli=milli if milli < MILLI else MILLI,
        gpu_models=frozenset(model_slugs) or frozenset({NO_ZONE}),
        regions=regions,
        organization=task.organization_id,
        # Within a priority, tasks that may not be preempted start first: a task requeued to
        # make room for one must not take the room back.
        priority=task.priority * 2 + (0 if task.preemptible else 1),
        preference=task.preference,
        submitted_at=task.submitted_at.timestamp() if task.submitted_at else 0.0,
    )


def zone(pool) -> str:
    """A pool as the place a task may or may not go: region, model and price are all the
    pool's, so a task's allowed pools say everything its constraints do."""
    return f"pool-{pool.pk}"


def task_price(hourly_minor: int, discount_pct: int) -> int:
    """A task's price per hour: the pool's, less the park's discount for a preemptible one."""
    return hourly_minor * (100 - discount_pct) // 100


def task_pool_rejections(task, pools, prices, *, model_ids, discount_pct=0) -> dict[int, str]:
    """{pool id: why the task may not use it} for the pools it may not use ("gpu_model",
    "image": its backend can't run the task's image, "region", "not_priced", "max_price": above
    its maximum, at the park's `discount_pct` for a preemptible task); the others are missing
    from the answer."""
    allowed_regions = {r.pk for r in task.allowed_regions.all()}
    refused = {}
    for pool in pools:
        price = prices.get(pool.pk)
        if pool.accelerator_model_id not in model_ids:
            refused[pool.pk] = "gpu_model"
        elif pool.images is not None and task.image.code not in pool.images:
            refused[pool.pk] = "image"
        elif allowed_regions and pool.region_id not in allowed_regions:
            refused[pool.pk] = "region"
        elif price is None:
            refused[pool.pk] = "not_priced"
        elif (
            task.max_hourly_minor is not None
            and task_price(
                task_hourly_minor(price, task.total_accelerator_milli),
                discount_pct if task.preemptible else 0,
            )
            > task.max_hourly_minor
        ):
            refused[pool.pk] = "max_price"
    return refused


# --- weights ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParkWeights:
    weights: Weights
    operator_share: float
    source: str  # "park": the park's own policy; "default": a park without one

    def as_json(self) -> dict:
        return {
            "operator": self.weights.as_dict(),
            "operator_share": self.operator_share,
            "park_policy": self.source,
        }


# The park's weights, written out: every placement reads them, where the ORM took several times
# the statement's CPU to build it (bench/order_profile.py). Numbers only, taken as floats, which
# is all the scorer takes (SQLite answers a decimal column with a float or an int).
_PARK_WEIGHTS_SQL = f"""
SELECT {", ".join([*SchedulingPolicy.WEIGHT_FIELDS.values(), "operator_share"])}
FROM {SchedulingPolicy._meta.db_table}
WHERE park_id = %s
"""


def park_weights(park) -> ParkWeights:
    """The park's SchedulingPolicy as the scorer takes it, or the defaults where it has none."""
    rows = sql.fetch_all(SchedulingPolicy, _PARK_WEIGHTS_SQL, [park.pk])
    if not rows:
        policy = SchedulingPolicy.default_for(park)
        return ParkWeights(
            weights=Weights(**policy.weights()),
            operator_share=float(policy.operator_share),
            source="default",
        )
    *weights, operator_share = map(float, rows[0])
    return ParkWeights(
        weights=Weights(**dict(zip(SchedulingPolicy.WEIGHT_FIELDS, weights, strict=True))),
        operator_share=operator_share,
        source="park",
    )


# --- records ---------------------------------------------------------------------------------


def candidate_record(view: NodeView, candidate, *, request) -> dict:
    """One node that could take the request, in `Placement.candidates`, with its scores."""
    raw = dict(candidate.raw)
    raw["left_free"] = (view.state.gpu_milli_free - request.gpu_request_milli) / MILLI
    return {
        **view.record_base,
        "fits": True,
        "total": candidate.total,
        "parts": dict(candidate.parts),
        "raw": raw,
        "rejected": None,
        "dearer": candidate.dearer,
    }


def rejected_record(view: NodeView, code: str) -> dict:
    """A node that could not take the request, as the decision page lists it: which node, in
    which pool and region, and why not (`REJECTION_REASONS`); no scores, as there are none.
    Records kept before this had the fitting nodes' keys as well, empty; every reader takes
    both."""
    base = view.record_base
    return {
        "node": base["node"],
        "node_id": base["node_id"],
        "pool": base["pool"],
        "region": base["region"],
        "region_name": base["region_name"],
        "fits": False,
        "total": None,
        "rejected": code,
    }


# A decision keeps the best this many hosts that had room and this many that had not, and
# counts them all: over hundreds of nodes, every runner-up's scores were most of what an
# order wrote (and no one reads the two-hundredth).
KEPT_CANDIDATES = 20


def placement_record(
    decision: Decision,
    views: list[NodeView],
    *,
    request: TaskRequest,
    park: ParkWeights,
    currency: str,
    rejections: dict | None = None,
    counted: tuple[int, dict[str, int], list[tuple[NodeView, str]]] | None = None,
) -> tuple[dict, list[dict]]:
    """(Placement.weights, Placement.candidates) for a decision over `views`: the best
    KEPT_CANDIDATES that fitted (the chosen one always) and the first KEPT_CANDIDATES that did
    not, with `weights["considered"]` counting all of them ({"fitted": n, "rejected": {code:
    n}}).

    `rejections` ({node id: code}) overrides the engine's code for a node, where the portal
    knows better (a price over the task's maximum reads "region" to the engine, which only
    sees that the task may not use the node's pool). `counted` is what the database counted
    where `views` are only the nodes that fitted and were shortlisted (`shortlist`): how many
    fitted, how many were rejected for each code, and the first rejected ones, each with its
    code.
    """
    by_id = {v.state.id: v for v in views}
    rejections = rejections or {}
    fitted, refused = [], []
    for c in decision.candidates:
        if c.node_id not in by_id:
            continue
        if c.total is not None:
            fitted.append(c)
        else:
            code = rejections.get(c.node_id) if c.rejected in ZONE_CODES else None
            refused.append((c, code or c.rejected))
    fitted.sort(key=lambda c: -c.total)
    kept = fitted[:KEPT_CANDIDATES]
    chosen = decision.chosen
    if chosen is not None and chosen.node_id in by_id and chosen not in kept:
        kept.append(chosen)
    listed = [(by_id[c.node_id], code) for c, code in refused] + (counted[2] if counted else [])
    candidates = [candidate_record(by_id[c.node_id], c, request=request) for c in kept] + [
        rejected_record(view, code) for view, code in listed[:KEPT_CANDIDATES]
    ]
    weights = {
        "policy": FRAGMENTATION_POLICY,
        "scorer": "weighted",
        "weights": decision.weights.as_dict(),
        "preference": request.preference,
        "currency": currency,
        **park.as_json(),
        "considered": {
            "fitted": counted[0] if counted else len(fitted),
            "rejected": dict(counted[1] if counted else Counter(code for _c, code in refused)),
            "cheapest": _cheapest(fitted, by_id),
        },
    }
    return weights, candidates


def _cheapest(fitted: list, by_id: dict) -> dict | None:
    """The hourly price, speed, model and region of the cheapest node that had room (kept or
    not), which a decision is measured against: None when none is priced."""
    priced = [c for c in fitted if c.raw.get("price_minor", 0) > 0]
    if not priced:
        return None
    cheapest = min(priced, key=lambda c: c.raw["price_minor"])
    base = by_id[cheapest.node_id].record_base
    return {
        "price_minor": cheapest.raw["price_minor"],
        "perf_units": cheapest.raw["perf_units"],
        "model": base["model"],
        "region_name": base["region_name"],
    }
