from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from functools import cached_property

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone
from django.utils.text import get_text_list
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.catalog.models import AcceleratorModel
from apps.catalog.selectors import free_room_changed, prices_by_region
from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.extensions import ExtensionPoint
from apps.core.transactions import lock, lock_all, locked, locked_update_or_create
from apps.core.transitions import check_transition
from apps.orchestration import adapter
from apps.orchestration.backends.base import BackendError, Capability, NodeTelemetry, ReportedPool
from apps.orchestration.backends.registry import (
    driver_names,
    driver_of,
    endpoint_of,
    get_driver,
    supports,
)
from apps.orchestration.models import (
    NODE_HEALTH_TRANSITIONS,
    Accelerator,
    Allocation,
    Backend,
    Node,
    NodeHealth,
    Placement,
    Pool,
)
from apps.orchestration.rooms import NodeRoom, recount
from apps.orchestration.scheduler import MILLI, decide
from apps.orchestration.selectors import host_pools
from apps.orchestration.shortlist import shortlist
from apps.tenants.access import require_operator


@transaction.atomic
def register_node(*, pool: Pool, hostname: str, accelerators: int, vcpu: int, ram_gb: int) -> Node:
    """Create or update a node and make sure it has exactly `accelerators` devices (0..n-1).

    Devices beyond the new count are removed only while free; one still allocated makes this
    refuse, so shrinking a node can never take an accelerator from a running instance.
    """
    node, _ = locked_update_or_create(
        Node, pool=pool, hostname=hostname, defaults={"vcpu_total": vcpu, "ram_gb_total": ram_gb}
    )
    existing = set(node.accelerators.values_list("index", flat=True))
    Accelerator.objects.bulk_create(
        Accelerator(node=node, index=i, serial=f"{hostname}-{i}")
        for i in range(accelerators)
        if i not in existing
    )
    surplus = node.accelerators.filter(index__gte=accelerators)
    if surplus.filter(allocation__isnull=False).exists():
        raise ValueError(f"{hostname}: cannot remove accelerators that are allocated")
    surplus.delete()
    recount([node.pk])
    free_room_changed()
    return node


# --- Capacity: placing and holding accelerators --------------------------------------------


class NoCapacity(DomainError):
    code = "no_capacity"
    status = 409


@dataclass(frozen=True)
class Shape:
    """What one instance needs on a single node."""

    accelerator_model_id: int
    accelerators: int
    vcpu: int
    ram_gb: int


def shape_of(flavor) -> Shape:
    return Shape(
        accelerator_model_id=flavor.family.accelerator_model_id,
        accelerators=flavor.accelerator_count,
        vcpu=flavor.vcpu,
        ram_gb=flavor.ram_gb,
    )


# What a refusal names as short, in the order a flavor is sized by: cards, vCPU, RAM.
ACCELERATORS, VCPU, RAM = "accelerators", "vcpu", "ram"
SHORT_RESOURCES = (ACCELERATORS, VCPU, RAM)
# The scheduler's rejection codes (Placement.candidates[...]["rejected"]) that mean a node
# had too little of a resource.
SHORT_OF = {"gpu_count": ACCELERATORS, "gpu_share": ACCELERATORS, "cpu": VCPU, "memory": RAM}


def _node_shortfall(room: NodeRoom, shape: Shape) -> str | None:
    """The first resource the node of `room` has too little of for `shape`, as a refusal says
    it ("16 free vCPU and 2 are free"); None when it fits."""
    free = {ACCELERATORS: room.idle_cards, VCPU: room.vcpu_free, RAM: room.ram_gb_free}
    needed = {ACCELERATORS: shape.accelerators, VCPU: shape.vcpu, RAM: shape.ram_gb}
    phrases = {
        ACCELERATORS: _("%(count)d free accelerators and %(free)d are free"),
        VCPU: _("%(count)d free vCPU and %(free)d are free"),
        RAM: _("%(count)d GB of free RAM and %(free)d GB are free"),
    }
    for resource in SHORT_RESOURCES:
        if needed[resource] > 0 and free[resource] < needed[resource]:
            return phrases[resource] % {"count": needed[resource], "free": free[resource]}
    return None


# Servers that build their own host images (the host agents') start only those, as they
# report to the agents app, a floor above: a callable (pools, image code) -> the ids of the
# nodes of those pools whose servers hold images of their own, but not this one. The pools are
# `selectors.host_pools`', each with its driver: a provider skips those its servers can't be in.
NODES_WITHOUT_IMAGE = ExtensionPoint("nodes that can't start an image")
# ... and of those that can start it only once it is copied to them (a tenant's saved image,
# from another server of its region): a callable (pools, image code) -> node ids. A host
# goes there only when no node holding its image has room.
NODES_AWAITING_IMAGE = ExtensionPoint("nodes that start an image once it is copied there")


@dataclass(frozen=True)
class PlacementPlan:
    """The scorer's ranking of the park's best nodes for one host (`shortlist`: the few of each
    pool that scoring every node could choose, scored as it would score them), decided from
    committed rows and without any lock, so an order can score before it takes its
    organization's lock. It only proposes: `place` allocates under each node's own lock and
    re-counts there, so a plan that went stale meanwhile costs a fallback to the next
    candidate, never an oversold node.

    What a Placement keeps of it (`record`, `weights`: how many nodes fitted or not, and why)
    is worked out when first asked: a quote that found its node never asks."""

    shape: Shape
    region: object  # the Region it was scored in; None: every region the flavor is sold in
    ranked: tuple  # the NodeViews shortlisted that fitted, best first
    scored: dict  # {node id as the engine names it: its Candidate}, for a record not kept
    request: object  # the engine's TaskRequest it was scored for
    # The prices in force in the regions scored ({region id: {kind: Price or None}}, as
    # catalog.selectors.prices_by_region): what the host is quoted at, read once.
    prices_in_force: dict
    # () -> (weights, candidates) as adapter.placement_record keeps them, and the shortlist.
    recorded: object = field(repr=False, compare=False)
    shortlisted: object = field(repr=False, compare=False)

    @cached_property
    def _kept(self) -> tuple[dict, tuple]:
        weights, record = self.recorded()
        return weights, tuple(record)

    @property
    def record(self) -> tuple:
        """The candidates a Placement keeps (see adapter.placement_record)."""
        return self._kept[1]

    @property
    def weights(self) -> dict:
        return self._kept[0]

    @property
    def complete(self) -> bool:
        """Every node that fitted is in `ranked`."""
        return self.shortlisted.complete

    @property
    def nodes_considered(self) -> int:
        """The nodes scored, whether they fitted or not."""
        considered = self.weights["considered"]
        return considered["fitted"] + sum(considered["rejected"].values())

    @property
    def best_region(self):
        return self.ranked[0].node.pool.region if self.ranked else None


def plan_placement(
    *,
    park,
    flavor,
    shape: Shape | None = None,
    region=None,
    preference: str = "balanced",
    excluding=(),
    image_code: str | None = None,
) -> PlacementPlan:
    """Score one host of `flavor` (of `shape`, by default the flavor's) over the nodes of
    `region` (or of every region the flavor is sold in), but those of `excluding` (ids) and
    those that can't start image `image_code` (`NODES_WITHOUT_IMAGE`), with the tenant's
    `preference`; nothing is locked or written."""
    shape = shape or shape_of(flavor)
    decision, views, request, recorded, prices_in_force, found = _decide_placement(
        park=park,
        flavor=flavor,
        shape=shape,
        region=region,
        preference=preference,
        excluding=excluding,
        image_code=image_code,
    )
    by_id = {view.state.id: view for view in views}
    ranked = _ranked(decision)
    return PlacementPlan(
        shape=shape,
        region=region,
        ranked=tuple(by_id[candidate.node_id] for candidate in ranked),
        scored={candidate.node_id: candidate for candidate in ranked},
        request=request,
        prices_in_force=prices_in_force,
        recorded=recorded,
        shortlisted=found,
    )


def place(
    *,
    instance,
    shape: Shape,
    region=None,
    preference: str = "balanced",
    plan: PlacementPlan | None = None,
) -> Allocation:
    """Choose a node for `instance` and allocate its accelerators there, under the node's lock.

    The park's weighted scorer chooses (`scheduler.decide`: region and latency, performance,
    energy, price and fragmentation, the park's SchedulingPolicy blended with the tenant's
    `preference`: balanced, fast, cheap or green) among the nodes of `region`, or, when the
    tenant lets the scheduler choose (`region` None), among every region the flavor is sold in.
    `plan`, when given, is that decision made earlier (`plan_placement`, before the caller took
    its locks) for the same shape, over `region` or over every region (the scoring an order was
    quoted with: only its nodes in `region` are tried then, a host being billed at its
    region's price). Should the best node have filled up by the time its lock is held, the
    next best is tried; should every node the plan shortlisted have filled up, the nodes it
    left out are scored again without them. The best candidates with their score parts, and
    why others were not chosen, are kept as a Placement. Raises NoCapacity when nothing fits.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("place() must run inside the caller's transaction")
    if plan is None:
        plan = plan_placement(
            park=instance.organization.park,
            flavor=instance.flavor,
            shape=shape,
            region=region,
            preference=preference,
            image_code=instance.image.code,
        )
    record = [dict(entry) for entry in plan.record]  # marked below; the plan stays as it was
    considered = plan.weights["considered"]
    fitted, rejected = considered["fitted"], dict(considered["rejected"])
    passed_over = set()
    while True:
        for view in plan.ranked:
            passed_over.add(view.node.pk)
            if region is not None and view.node.pool.region_id != region.pk:
                _mark_rejected(record, view.node.pk, "other_region")
                fitted -= 1
                rejected["other_region"] = rejected.get("other_region", 0) + 1
                continue

            def placement(room, view=view, plan=plan, fitted=fitted):
                """Why `room`'s node was chosen, written with the allocation."""
                if not any(entry["node_id"] == view.node.pk for entry in record):
                    # Chosen after more than the kept best had filled up: kept too.
                    scored = plan.scored[view.state.id]
                    record.append(adapter.candidate_record(view, scored, request=plan.request))
                return [
                    Placement(
                        workload_id=instance.workload_id,
                        chosen_pool=room.node.pool,
                        chosen_node=room.node,
                        weights={
                            **plan.weights,
                            "left_free": room.idle_cards,  # what it left on the node
                            "considered": {"fitted": fitted, "rejected": rejected},
                        },
                        candidates=record,
                    )
                ]

            allocated = _allocate_on(view.node, instance=instance, shape=shape, recorded=placement)
            if allocated is not None:
                return allocated[0]
            _mark_rejected(record, view.node.pk, "taken")
            fitted, rejected["taken"] = fitted - 1, rejected.get("taken", 0) + 1
        if plan.complete:
            raise _no_room(shape, region, rejected)
        # Every node the plan shortlisted filled up first: the nodes it left out are scored.
        plan = plan_placement(
            park=instance.organization.park,
            flavor=instance.flavor,
            shape=shape,
            region=region or plan.region,
            preference=preference,
            excluding=passed_over,
            image_code=instance.image.code,
        )


def best_region(*, park, flavor, preference: str = "balanced"):
    """Where the scheduler would place one host of `flavor` now, for a tenant who lets it
    choose: the region of the best-scored node over every region the flavor is sold in, with
    the tenant's preference (what the order is quoted in). Raises NoCapacity."""
    return region_of(plan_placement(park=park, flavor=flavor, preference=preference), flavor)


def region_of(plan: PlacementPlan, flavor):
    """The region of a plan's best node (a plan over every region). Raises NoCapacity."""
    if plan.best_region is None:
        short = _short_resources(plan.weights["considered"]["rejected"])
        if short:
            raise NoCapacity(
                _(
                    "No region has a host with %(resources)s for %(flavor)s right now. Try a "
                    "smaller flavor or later."
                )
                % {"resources": _wanted(plan.shape, short), "flavor": flavor.code}
            )
        raise NoCapacity(
            _("No region has a free host of %(flavor)s right now. Try a smaller flavor or later.")
            % {"flavor": flavor.code}
        )
    return plan.best_region


def _ranked(decision) -> list:
    """The candidates that fitted, best first: the decision's choice, then those it could have
    made, then those where the work costs too much more (`dearer`), should all else fill up."""
    fitted = (c for c in decision.candidates if c.total is not None)
    return sorted(fitted, key=lambda c: (c.dearer, -c.total))


def _no_room(shape: Shape, region, rejected: dict[str, int]) -> NoCapacity:
    """The refusal of a host no node had room for, naming what the nodes were short of (from
    `rejected`, the count of each rejection code); the cards where no node said (none in
    service, or the last one taken meanwhile)."""
    return NoCapacity(
        _(
            "No host has %(resources)s%(where)s right now. Choose a smaller flavor, another "
            "region, or try again later."
        )
        % {
            "resources": _wanted(shape, _short_resources(rejected) or [ACCELERATORS]),
            "where": _(" in %(region)s") % {"region": region.name} if region else "",
        }
    )


def _short_resources(rejected: dict[str, int]) -> list[str]:
    """The resources nodes were rejected for lacking (each node for the first the scheduler
    found short), in SHORT_RESOURCES order."""
    short = {SHORT_OF[code] for code in rejected if code in SHORT_OF}
    return [resource for resource in SHORT_RESOURCES if resource in short]


def _wanted(shape: Shape, resources: list[str]) -> str:
    """What one host of `shape` needs of each of `resources` on a node: "16 free vCPU and
    128 GB of free RAM"."""
    phrases = []
    for resource in resources:
        if resource == ACCELERATORS:
            model = AcceleratorModel.objects.get(pk=shape.accelerator_model_id)
            phrases.append(
                _("%(count)d free %(model)s accelerators")
                % {"count": shape.accelerators, "model": model}
            )
        elif resource == VCPU:
            phrases.append(_("%(count)d free vCPU") % {"count": shape.vcpu})
        else:
            phrases.append(_("%(count)d GB of free RAM") % {"count": shape.ram_gb})
    return get_text_list(phrases, _("and"))


def _decide_placement(
    *, park, flavor, shape: Shape, region, preference: str, excluding=(), image_code=None
):
    """The scorer's decision for one host of `flavor` on the park's shortlisted nodes (of
    `region`, or of every region the flavor is sold in; not those of `excluding`, nor those
    that can't start `image_code`), how it is kept (a callable: counting the nodes not
    shortlisted waits until asked), and the shortlist."""
    pools = [
        pool
        for pool in host_pools(park, accelerator_model_id=shape.accelerator_model_id, region=region)
        if pool.has_open_node
    ]
    prices_in_force = prices_by_region(region_ids={pool.region_id for pool in pools}, flavor=flavor)
    prices = adapter.flavor_prices(flavor, pools, prices_in_force)
    if region is None and any(price is not None for price in prices.values()):
        # Only where it is sold: the host is billed at its region's price.
        pools = [pool for pool in pools if prices[pool.pk] is not None]
    elif any(price is None for price in prices.values()):
        # Unpriced somewhere (the order's region is always priced): price says nothing here.
        prices = dict.fromkeys(prices)
    found = None
    if image_code is not None:
        excluding = {*excluding, *_nodes_without_image(pools, image_code)}
        if awaiting := _nodes_awaiting_image(pools, image_code):
            found = shortlist(
                pools=pools, shape=shape, excluding={*excluding, *awaiting}, now=timezone.now()
            )
    if found is None or not found.nodes:
        found = shortlist(pools=pools, shape=shape, excluding=excluding, now=timezone.now())
    views = adapter.node_views(found.nodes, prices=prices, rooms_of=found.rooms)
    model_slug = (
        pools[0].accelerator_model.slug
        if pools
        else AcceleratorModel.objects.values_list("slug", flat=True).get(
            pk=shape.accelerator_model_id
        )
    )
    request = adapter.instance_request(
        instance_id="new",  # scored before the instance exists (plan_placement)
        shape=shape,
        model_slug=model_slug,
        region=region,
        preference=preference,
    )
    weights_of_park = adapter.park_weights(park)
    decision = decide(
        request,
        [view.state for view in views],
        operator=weights_of_park.weights,
        operator_share=weights_of_park.operator_share,
        distribution=adapter.BEST_FIT,
    )

    def recorded():
        census = found.census
        return adapter.placement_record(
            decision,
            views,
            request=request,
            park=weights_of_park,
            currency=park.currency,
            counted=(
                census.fitted,
                census.rejected,
                [(adapter.NodeView(node=node, state=None), code) for node, code in census.refused],
            ),
        )

    return decision, views, request, recorded, prices_in_force, found


def _nodes_without_image(pools, image_code: str) -> set[int]:
    ids = set()
    for provider in NODES_WITHOUT_IMAGE.providers():
        ids |= provider(pools, image_code)
    return ids


def _nodes_awaiting_image(pools, image_code: str) -> set[int]:
    ids = set()
    for provider in NODES_AWAITING_IMAGE.providers():
        ids |= provider(pools, image_code)
    return ids


def _mark_rejected(record: list[dict], node_id: int, code: str) -> None:
    """A node that fitted when scored but was passed over when placing (it filled up before
    its lock: "taken"; not in the region the host was quoted in: "other_region")."""
    for entry in record:
        if entry["node_id"] == node_id:
            entry.update(fits=False, total=None, rejected=code)


def _allocate_on(
    node, *, instance, shape: Shape, recorded=None
) -> tuple[Allocation, NodeRoom] | None:
    """Allocate under the node's row lock, re-counting what is free once the lock is held: the
    allocation (written with what `recorded`, see NodeRoom.allocate, gives) and the room left
    on the node, or None when it cannot take the host now (drained or marked down since the
    candidates were read, or filled up)."""
    room = NodeRoom.lock([node.pk])[node.pk]
    allocation = Allocation(
        node=room.node, workload_id=instance.workload_id, vcpu=shape.vcpu, ram_gb=shape.ram_gb
    )
    if not room.allocate(allocation, shape.accelerators * MILLI, recorded=recorded):
        room.save_room()  # proposed on a kept room that no longer holds: kept as counted
        return None
    return allocation, room


def live_allocation(instance) -> Allocation | None:
    return (
        Allocation.objects.filter(workload_id=instance.workload_id, released_at__isnull=True)
        .select_related("node")
        .first()
    )


def allocate_again(instance, shape: Shape) -> Allocation:
    """A stopped host starting: cards, CPU and memory of `shape` again, on its own node (its
    disks are there; drained or degraded, it still takes its own host back), counted and taken
    by the node's room under its lock. A host stopped while stopping still kept its cards
    keeps the allocation it has. Raises NoCapacity when its server cannot answer or has no room
    now (what it gave back at the stop may have gone to other work meanwhile)."""
    allocation = live_allocation(instance)
    if allocation is not None:
        return allocation
    if instance.node_id is None:
        raise NoCapacity(_("%(name)s has no host to start on.") % {"name": instance.name})
    room = NodeRoom.lock([instance.node_id])[instance.node_id]
    node = room.node
    if node.health in (NodeHealth.DOWN, NodeHealth.UNKNOWN):
        raise NoCapacity(
            _(
                "The server %(node)s that holds %(name)s is not answering. Start it again once "
                "the server is back, or release it."
            )
            % {"node": node.hostname, "name": instance.name}
        )
    allocation = Allocation(
        node=node, workload_id=instance.workload_id, vcpu=shape.vcpu, ram_gb=shape.ram_gb
    )
    if not room.allocate(allocation, shape.accelerators * MILLI, new_work=False):
        raise NoCapacity(
            _(
                "%(node)s has no room to start %(name)s now: it needs %(shortfall)s (what it "
                "gave back when it stopped went to other work). Try again later, or release it "
                "and create a new host."
            )
            % {
                "node": node.hostname,
                "name": instance.name,
                "shortfall": _node_shortfall(room, shape),
            }
        )
    return allocation


def resize_capacity(instance, shape: Shape) -> None:
    """Grow or shrink the instance's allocation in place (on its node), counted and taken by
    the node's room under its lock. A stopped host holds nothing: it takes its new shape when
    it starts (`allocate_again`)."""
    allocation = live_allocation(instance)
    if allocation is None:
        return
    room = NodeRoom.lock([allocation.node_id])[allocation.node_id]
    held = len(room.held_by(allocation))
    if not room.resize(allocation, cards=shape.accelerators, vcpu=shape.vcpu, ram_gb=shape.ram_gb):
        growth = Shape(
            accelerator_model_id=shape.accelerator_model_id,
            accelerators=shape.accelerators - held,
            vcpu=shape.vcpu - allocation.vcpu,
            ram_gb=shape.ram_gb - allocation.ram_gb,
        )
        raise NoCapacity(
            _(
                "The host %(node)s does not have room to grow this instance to %(count)d "
                "accelerators, %(vcpu)d vCPU and %(ram_gb)d GB of RAM: it needs %(shortfall)s. "
                "Release capacity, or create a new instance of the larger size."
            )
            % {
                "node": room.node.hostname,
                "count": shape.accelerators,
                "vcpu": shape.vcpu,
                "ram_gb": shape.ram_gb,
                "shortfall": _node_shortfall(room, growth),
            }
        )


def device_indices(instance) -> tuple[int, ...]:
    allocation = live_allocation(instance)
    if allocation is None:
        return ()
    return tuple(allocation.accelerators.order_by("index").values_list("index", flat=True))


# --- Backends: registration and probing ------------------------------------------------------

# An accelerator whose utilization reads below this counts as idle (see `probe_backend`).
IDLE_BELOW_PCT = 5
# Telemetry older than this proves nothing: no accelerator is called idle (or busy) on it.
TELEMETRY_FRESH_FOR = timedelta(minutes=30)


# What each capability lets a pool run, as refusals name it.
CAPABILITY_WORK = {
    Capability.HOSTS: gettext_lazy("GPU cloud hosts"),
    Capability.BATCH: gettext_lazy("training tasks"),
}


def require_capability(backend: Backend, capability: Capability) -> None:
    """Refuse work a backend's driver cannot do (before anything is reserved for it)."""
    if not supports(backend.driver, capability):
        raise DomainError(
            _("%(backend)s (%(driver)s) does not run %(work)s.")
            % {
                "backend": backend.name,
                "driver": backend.driver,
                "work": CAPABILITY_WORK[capability],
            },
            code="not_supported",
            status=422,
        )


def require_pools_for(*, park, accelerator_model_id: int, region=None, capability) -> None:
    """Refuse an order when the park's pools of this accelerator model (in `region`) exist but
    none has a driver that runs this kind of work: a Slurm pool runs tasks, not hosts."""
    pools = Pool.objects.filter(
        backend__park=park,
        backend__is_enabled=True,
        is_schedulable=True,
        accelerator_model_id=accelerator_model_id,
    )
    if region is not None:
        pools = pools.filter(region=region)
    drivers = set(pools.values_list("backend__driver", flat=True))
    if drivers and not any(supports(driver, capability) for driver in drivers):
        raise DomainError(
            _(
                "The pools for this accelerator%(where)s are run by backends that do not run "
                "%(work)s (%(drivers)s)."
            )
            % {
                "where": _(" in %(region)s") % {"region": region.name} if region else "",
                "work": CAPABILITY_WORK[capability],
                "drivers": ", ".join(sorted(drivers)),
            },
            code="not_supported",
            status=422,
        )


def _require_operator(operator, park) -> None:
    require_operator(
        operator, park, _("Only this park's operators may change its backends and nodes.")
    )


def validate_backend_config(*, driver: str, config) -> list[ReportedPool]:
    """Ask the driver what it has: a driver or a config it cannot work with is refused with
    the driver's own message, on the field it concerns."""
    if driver not in driver_names():
        raise ValidationError(
            {
                "driver": _("No backend driver is called “%(name)s”; known: %(known)s.")
                % {"name": driver, "known": ", ".join(driver_names())}
            }
        )
    if not isinstance(config, dict):
        raise ValidationError({"config": _("The configuration must be a JSON object.")})
    try:
        return get_driver(driver, config).capacity()
    except BackendError as exc:
        raise ValidationError(
            {"config": _("The driver refused this configuration: %(error)s") % {"error": exc}}
        ) from exc


def _free_endpoint(*, driver: str, config: dict) -> str:
    """The endpoint the config reaches, refused when another backend, in any park, has it:
    one cluster registered twice would count its capacity twice."""
    try:
        endpoint = endpoint_of(driver, config) or ""
    except ValueError as exc:
        raise ValidationError(
            {"config": _("The driver refused this configuration: %(error)s") % {"error": exc}}
        ) from exc
    holder = (
        Backend.objects.filter(endpoint=endpoint).select_related("park").first()
        if endpoint
        else None
    )
    if holder is not None:
        raise ValidationError(
            {
                "config": _(
                    "%(endpoint)s is already registered, as backend “%(backend)s” of park "
                    "“%(park)s”."
                )
                % {"endpoint": endpoint, "backend": holder.name, "park": holder.park.name}
            }
        )
    return endpoint


@transaction.atomic(durable=True)
def register_backend(
    *, park, operator, name: str, driver: str, config: dict, region=None
) -> Backend:
    """Register a backend once its driver has answered for its capacity, unless another
    backend (in any park) reaches the same endpoint. The pools and nodes it reports are
    registered too, in `region` (the operator moves pools later)."""
    _require_operator(operator, park)
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": _("Give the backend a name.")})
    if Backend.objects.filter(park=park, name=name).exists():
        raise ValidationError(
            {"name": _("This park already has a backend called “%(name)s”.") % {"name": name}}
        )
    reported = validate_backend_config(driver=driver, config=config)
    endpoint = _free_endpoint(driver=driver, config=config)
    names = [pool.name for pool in reported]
    if len(set(names)) != len(names):
        raise ValidationError({"config": _("The driver reports two pools with the same name.")})
    slugs = {pool.accelerator_model for pool in reported}
    models = {m.slug: m for m in AcceleratorModel.objects.filter(slug__in=slugs)}
    unknown = sorted(slugs - set(models))
    if unknown:
        raise ValidationError(
            {
                "config": _("The catalog has no accelerator model %(models)s; add it first.")
                % {"models": ", ".join(unknown)}
            }
        )
    if reported and region is None:
        raise ValidationError({"region": _("Choose the region the reported pools stand in.")})
    if region is not None and region.park_id != park.pk:
        raise ValidationError({"region": _("This region is not in the park.")})
    try:
        with transaction.atomic():
            backend = Backend.objects.create(
                park=park,
                name=name,
                driver=driver,
                config=config,
                endpoint=endpoint,
                last_checked_at=timezone.now(),
            )
    except IntegrityError:
        # Registered meanwhile by a concurrent request (the constraint kept one): say by whom.
        _free_endpoint(driver=driver, config=config)
        raise
    nodes = 0
    for reported_pool in reported:
        pool = Pool.objects.create(
            backend=backend,
            region=region,
            name=reported_pool.name,
            accelerator_model=models[reported_pool.accelerator_model],
            images=_images_of(reported_pool),
        )
        for reported_node in reported_pool.nodes:
            register_node(
                pool=pool,
                hostname=reported_node.hostname,
                accelerators=reported_node.accelerators,
                vcpu=reported_node.vcpu,
                ram_gb=reported_node.ram_gb,
            )
            nodes += 1
    record_event(
        action="backend.registered",
        actor=operator,
        target=backend,
        data={"driver": driver, "pools": names, "nodes": nodes},
    )
    return backend


@transaction.atomic(durable=True)
def probe_backend(*, backend: Backend, operator=None, now=None) -> Backend:
    """Ask a backend for its capacity and telemetry and record what it said.

    The driver is told which accelerators the portal has given to work (the simulator's model
    reads a card nobody holds as idle). The nodes of its registered pools follow the capacity
    report (`register_node`); each node's telemetry becomes `Node.telemetry` =
    {"accelerators": {"<index>": {"util": pct, "idle_since": iso or null}}, "updated_at": iso,
    "simulated": bool}, where `idle_since` is kept from reading to reading while the device
    stays under IDLE_BELOW_PCT. A node the driver no longer sees is marked down. Errors are
    kept on the backend (`last_error`), not raised.
    """

    if operator is not None:
        _require_operator(operator, backend.park)
    now = now or timezone.now()
    backend = Backend.objects.select_related("park").get(pk=backend.pk)
    nodes = list(
        Node.objects.filter(pool__backend=backend)
        .annotate(devices=Count("accelerators"))
        .order_by("pk")
    )
    held = _held_devices(nodes)
    try:
        driver = driver_of(backend)
        reported = driver.capacity()
        measure = getattr(driver, "telemetry", None)
        readings = (
            measure({n.hostname: n.devices for n in nodes}, held) if callable(measure) else None
        )
    except BackendError as exc:
        _nodes_unknown(backend, nodes)
        return _backend_checked(backend, error=str(exc), now=now)
    # The backend asked with no row locked; now its pools (the images they run), then its
    # nodes, in id order as placement takes them (registering them one by one in the report's
    # order deadlocked with an order).
    _record_pool_images(backend, reported)
    lock_all(Node, [node.pk for node in nodes])
    problems = _sync_reported_nodes(backend, reported)
    if readings is not None:
        _record_telemetry(backend, nodes, readings, now)
    return _backend_checked(backend, error="; ".join(problems), now=now)


def _held_devices(nodes) -> dict[str, frozenset[int]]:
    """Hostname -> the indices of its accelerators given to work (a host's or a task's, a
    task's share of one included), as the simulator's model reads them: one query."""
    held: dict[str, set[int]] = {node.hostname: set() for node in nodes}
    names = {node.pk: node.hostname for node in nodes}
    pairs = Accelerator.objects.filter(
        node_id__in=list(names), allocation__isnull=False
    ).values_list("node_id", "index")
    for node_id, index in pairs:
        held[names[node_id]].add(index)
    return {hostname: frozenset(indices) for hostname, indices in held.items()}


def _images_of(reported_pool: ReportedPool) -> dict | None:
    return dict(reported_pool.images) if reported_pool.images is not None else None


def _record_pool_images(backend: Backend, reported: list[ReportedPool]) -> None:
    """Each registered pool runs the images its backend reports now (`Pool.images`)."""
    images = {pool.name: _images_of(pool) for pool in reported}
    changed = [
        pool
        for pool in backend.pools.order_by("pk")
        if pool.name in images and pool.images != images[pool.name]
    ]
    if not changed:
        return
    lock_all(Pool, [pool.pk for pool in changed])
    for pool in changed:
        Pool.objects.filter(pk=pool.pk).update(images=images[pool.name])


def _sync_reported_nodes(backend: Backend, reported: list[ReportedPool]) -> list[str]:
    pools = {pool.name: pool for pool in backend.pools.all()}
    problems = []
    for reported_pool in reported:
        pool = pools.get(reported_pool.name)
        if pool is None:
            problems.append(f"pool {reported_pool.name!r} is reported but not registered")
            continue
        for reported_node in reported_pool.nodes:
            try:
                register_node(
                    pool=pool,
                    hostname=reported_node.hostname,
                    accelerators=reported_node.accelerators,
                    vcpu=reported_node.vcpu,
                    ram_gb=reported_node.ram_gb,
                )
            except ValueError as exc:
                problems.append(str(exc))
    return problems


@transaction.atomic
def _record_telemetry(backend, nodes, readings: list[NodeTelemetry], now) -> None:
    # In id order, as placement locks them: one UPDATE of many rows locks them in whatever
    # order it meets them.
    lock_all(Node, [node.pk for node in nodes])
    by_host = {reading.hostname: reading for reading in readings}
    healths = {}
    for node in nodes:
        reading = by_host.get(node.hostname)
        health = node.health
        if reading is None:
            health = NodeHealth.DOWN
        else:
            node.telemetry = merged_telemetry(node.telemetry, reading, now)
            node.loaded_watts, node.loaded_watts_at = adapter.measured_power(node.telemetry)
            node.last_seen_at = now
            if not reading.healthy:
                health = NodeHealth.DOWN
            elif node.health in (NodeHealth.DOWN, NodeHealth.UNKNOWN):
                health = NodeHealth.HEALTHY
        healths[node.pk] = health
    _write_health(
        backend,
        nodes,
        healths,
        also=("telemetry", "loaded_watts", "loaded_watts_at", "last_seen_at"),
    )
    keep_card_readings([node for node in nodes if node.hostname in by_host])


# Cards whose readings changed, written per UPDATE: Django's bulk_update spells one CASE per
# field over the batch, so a batch of thousands costs quadratically.
CARD_READINGS_BATCH = 500


def keep_card_readings(nodes) -> None:
    """Keep what the idle check reads beside each node's telemetry (`adapter.card_readings`):
    `Node.telemetry_at`, and each card's `idle_since` and `utilization_pct` (a card missing
    from the telemetry reads nothing). Written wherever a node's telemetry is, under the
    nodes' locks (or while seeding them); only the cards whose readings changed are written."""
    readings = {node.pk: adapter.card_readings(node.telemetry) for node in nodes}
    if not readings:
        return
    for node in nodes:
        node.telemetry_at = readings[node.pk][0]
    Node.objects.bulk_update(nodes, ["telemetry_at"], batch_size=CARD_READINGS_BATCH)
    changed = []
    cards = Accelerator.objects.filter(node_id__in=list(readings)).only(
        "pk", "node_id", "index", "idle_since", "utilization_pct"
    )
    for card in cards:
        reading = readings[card.node_id][1].get(card.index, (None, None))
        if (card.idle_since, card.utilization_pct) != reading:
            card.idle_since, card.utilization_pct = reading
            changed.append(card)
    Accelerator.objects.bulk_update(
        changed, ["idle_since", "utilization_pct"], batch_size=CARD_READINGS_BATCH
    )


@transaction.atomic
def _nodes_unknown(backend, nodes) -> None:
    """The backend could not be asked: its nodes' health is unknown (no new placements) until
    it answers again."""
    lock_all(Node, [node.pk for node in nodes])
    _write_health(backend, nodes, dict.fromkeys((node.pk for node in nodes), NodeHealth.UNKNOWN))


def _write_health(backend, nodes, healths: dict, *, also=()) -> None:
    """Each of `nodes` (locked) moved to its health in `healths` as the table allows, audited,
    and written in one UPDATE with the `also` fields (not by transition(), which writes a row
    at a time and records its event without the park: a node has none of its own)."""
    names = dict(Node._meta.get_field("health").flatchoices)
    moved = False
    for node in nodes:
        health = healths[node.pk]
        if health == node.health:
            continue
        check_transition(NODE_HEALTH_TRANSITIONS, node.health, health, label=str(node), names=names)
        record_event(
            action="node.health_changed",
            target=node,
            park=backend.park,
            data={"from": node.health, "to": health},
        )
        node.health = health
        moved = True
    Node.objects.bulk_update(nodes, [*also, "health"])
    if moved:
        free_room_changed()


def merged_telemetry(previous: dict, reading: NodeTelemetry, now) -> dict:
    before = (previous or {}).get("accelerators") or {}
    devices = {}
    for device in reading.accelerators:
        key = str(device.index)
        idle = device.utilization_pct < IDLE_BELOW_PCT
        since = (before.get(key) or {}).get("idle_since") if idle else None
        entry = {
            "util": round(float(device.utilization_pct), 1),
            "idle_since": (since or now.isoformat()) if idle else None,
        }
        if device.power_w is not None:
            entry["power_w"] = device.power_w
        devices[key] = entry
    return {"accelerators": devices, "updated_at": now.isoformat(), "simulated": reading.simulated}


def _backend_checked(backend: Backend, *, error: str, now) -> Backend:
    error = error[:2000]
    if error != backend.last_error:
        record_event(
            action="backend.error" if error else "backend.recovered",
            target=backend,
            data={"error": error} if error else {},
        )
    Backend.objects.filter(pk=backend.pk).update(last_error=error, last_checked_at=now)
    backend.last_error, backend.last_checked_at = error, now
    return backend


# --- Nodes: drain and undrain ----------------------------------------------------------------


# What else happens when a node is drained: the orders app tells the owners of the hosts on it.
# Each provider is a callable (node, reason), run inside the drain's transaction.
NODE_DRAINED = ExtensionPoint("tell the tenants of a drained node")


def drain_node(*, node: Node, operator, reason: str = "") -> Node:
    """No new placements on the node; what runs there stays (and is counted in the audit)."""
    return _set_drained(node=node, operator=operator, drained=True, reason=reason)


def undrain_node(*, node: Node, operator) -> Node:
    return _set_drained(node=node, operator=operator, drained=False, reason="")


def _set_drained(*, node: Node, operator, drained: bool, reason: str) -> Node:
    """The backend's own scheduler (Slurm's) is told first, so both agree or nothing changes
    here; it is asked with no row locked (orders and probes placing on the node would wait for
    a remote call), then the node is locked and changed. Draining twice is harmless to both."""
    node = Node.objects.select_related("pool__backend__park").get(pk=node.pk)
    park = node.pool.backend.park
    _require_operator(operator, park)
    if node.is_drained == drained:
        return node
    backend = node.pool.backend
    try:
        driver = driver_of(backend)
        if drained:
            driver.drain_node(node.hostname, reason.strip())
        else:
            driver.resume_node(node.hostname)
    except BackendError as exc:
        raise DomainError(
            _("%(backend)s refused: %(error)s") % {"backend": backend.name, "error": exc},
            code="backend_error",
            status=502,
        ) from exc
    return _record_drained(node=node, operator=operator, drained=drained, reason=reason.strip())


@transaction.atomic(durable=True)
def _record_drained(*, node: Node, operator, drained: bool, reason: str) -> Node:
    node = locked(Node, node.pk, related=("pool__backend__park", "pool__region"))
    if node.is_drained == drained:  # another operator's same decision got here first
        return node
    node.is_drained = drained
    node.save(update_fields=["is_drained"])
    free_room_changed()
    running = node.allocations.filter(released_at__isnull=True).count()
    record_event(
        action="node.drained" if drained else "node.undrained",
        actor=operator,
        target=node,
        park=node.pool.backend.park,
        data={"reason": reason, "running": running} if drained else {},
    )
    if drained:
        for tell in NODE_DRAINED.providers():
            tell(node, reason)
    return node


# --- pools -----------------------------------------------------------------------------------

POOL_FIELDS = ("region", "pue", "power_price_minor_per_kwh", "carbon_g_per_kwh", "is_schedulable")


@transaction.atomic(durable=True)
def update_pool(*, pool: Pool, operator, **changes) -> Pool:
    """Change a pool's site (and so its level) and energy facts: PUE, power price, carbon."""
    park = Pool.objects.select_related("backend__park").get(pk=pool.pk).backend.park
    require_operator(operator, park, _("Only this park's operators may change its pools."))
    unknown = set(changes) - set(POOL_FIELDS)
    if unknown:
        raise ValueError(f"update_pool cannot change {sorted(unknown)}")
    region = changes.get("region")
    if region is not None and region.park_id != park.pk:
        raise ValidationError({"region": _("This region is not in the park.")})
    lock(Pool, pool.pk)
    pool = Pool.objects.select_related("region").get(pk=pool.pk)
    before = {name: getattr(pool, name) for name in changes}
    for name, value in changes.items():
        setattr(pool, name, value)
    pool.full_clean(exclude=["backend", "accelerator_model", "name"])
    pool.save(update_fields=list(changes))
    diff = {
        name: {"from": _plain(before[name]), "to": _plain(value)}
        for name, value in changes.items()
        if before[name] != value
    }
    if diff:
        record_event(action="pool.updated", actor=operator, target=pool, park=park, data=diff)
    if {"region", "is_schedulable"} & set(diff):
        free_room_changed()
    return pool


def _plain(value):
    if hasattr(value, "pk"):
        return str(value)
    return str(value) if isinstance(value, Decimal) else value
