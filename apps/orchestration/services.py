from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.catalog.models import AcceleratorModel
from apps.core.errors import DomainError
from apps.core.transactions import lock
from apps.orchestration.models import Accelerator, Allocation, Node, NodeHealth, Placement, Pool


@transaction.atomic
def register_node(*, pool: Pool, hostname: str, accelerators: int, vcpu: int, ram_gb: int) -> Node:
    """Create or update a node and make sure it has exactly `accelerators` devices (0..n-1).

    Devices beyond the new count are removed only while free; one still allocated makes this
    refuse, so shrinking a node can never take an accelerator from a running instance.
    """
    node, _ = Node.objects.update_or_create(
        pool=pool, hostname=hostname, defaults={"vcpu_total": vcpu, "ram_gb_total": ram_gb}
    )
    node = Node.objects.select_for_update(no_key=True).get(pk=node.pk)
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


def schedulable_nodes(*, park, accelerator_model_id: int, region=None):
    nodes = Node.objects.filter(
        pool__backend__park=park,
        pool__backend__is_enabled=True,
        pool__is_schedulable=True,
        pool__accelerator_model_id=accelerator_model_id,
        health=NodeHealth.HEALTHY,
        is_drained=False,
    )
    if region is not None:
        nodes = nodes.filter(pool__region=region)
    return nodes.select_related("pool__region", "pool__backend")


def with_free_capacity(nodes):
    """Annotate free accelerators and used CPU/memory (subqueries: joins would multiply sums)."""
    free = (
        Accelerator.objects.filter(node=OuterRef("pk"), allocation__isnull=True)
        .values("node")
        .annotate(n=Count("id"))
        .values("n")
    )
    live = Allocation.objects.filter(node=OuterRef("pk"), released_at__isnull=True).values("node")
    return nodes.annotate(
        free_accelerators=Coalesce(Subquery(free), 0),
        vcpu_used=Coalesce(Subquery(live.annotate(n=Sum("vcpu")).values("n")), 0),
        ram_used=Coalesce(Subquery(live.annotate(n=Sum("ram_gb")).values("n")), 0),
    )


def _fits(node, shape: Shape) -> bool:
    return (
        node.free_accelerators >= shape.accelerators
        and node.vcpu_total - node.vcpu_used >= shape.vcpu
        and node.ram_gb_total - node.ram_used >= shape.ram_gb
    )


def place(*, instance, shape: Shape, region=None, order=None) -> Allocation:
    """Choose a node for `instance` and allocate its accelerators there, under the node's lock.

    Candidates are ranked best-fit (the fewest accelerators left free, to keep large holes for
    large hosts) and then by the region's latency. Every candidate and why it was or was not
    chosen is kept as a Placement. Raises NoCapacity when nothing fits.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("place() must run inside the caller's transaction")
    park = instance.organization.park
    candidates = list(
        with_free_capacity(
            schedulable_nodes(
                park=park, accelerator_model_id=shape.accelerator_model_id, region=region
            )
        )
    )
    ranked = sorted(
        (n for n in candidates if _fits(n, shape)),
        key=lambda n: (n.free_accelerators - shape.accelerators, n.pool.region.latency_ms, n.pk),
    )
    record = [_candidate(n, shape) for n in candidates]
    for node in ranked:
        allocation = _allocate_on(node, instance=instance, shape=shape)
        if allocation is not None:
            Placement.objects.create(
                order=order,
                chosen_pool=node.pool,
                chosen_node=node,
                weights={
                    "policy": "best-fit",
                    "left_free": node.accelerators.filter(allocation__isnull=True).count(),
                },
                candidates=record,
            )
            return allocation
    raise NoCapacity(
        _(
            "No host has %(count)d free %(model)s accelerators%(where)s right now. Choose a "
            "smaller flavor, another region, or try again later."
        )
        % {
            "count": shape.accelerators,
            "model": AcceleratorModel.objects.get(pk=shape.accelerator_model_id),
            "where": _(" in %(region)s") % {"region": region.name} if region else "",
        }
    )


def _candidate(node, shape: Shape) -> dict:
    return {
        "node": node.hostname,
        "pool": node.pool.name,
        "region": node.pool.region.code,
        "free_accelerators": node.free_accelerators,
        "free_vcpu": node.vcpu_total - node.vcpu_used,
        "free_ram_gb": node.ram_gb_total - node.ram_used,
        "fits": _fits(node, shape),
    }


def _allocate_on(node, *, instance, shape: Shape) -> Allocation | None:
    """Allocate under the node's row lock, re-counting what is free once the lock is held."""
    lock(Node, node.pk)
    node = with_free_capacity(Node.objects.filter(pk=node.pk)).select_related("pool__region").get()
    if not _fits(node, shape):
        return None
    allocation = Allocation.objects.create(
        node=node, instance=instance, vcpu=shape.vcpu, ram_gb=shape.ram_gb
    )
    devices = list(
        Accelerator.objects.filter(node=node, allocation__isnull=True)
        .order_by("index")
        .values_list("pk", flat=True)[: shape.accelerators]
    )
    Accelerator.objects.filter(pk__in=devices).update(allocation=allocation)
    return allocation


def live_allocation(instance) -> Allocation | None:
    return instance.allocations.filter(released_at__isnull=True).select_related("node").first()


def release_capacity(instance) -> None:
    """Give the instance's accelerators, CPU and memory back to its node."""
    allocation = live_allocation(instance)
    if allocation is None:
        return
    lock(Node, allocation.node_id)
    Accelerator.objects.filter(allocation=allocation).update(allocation=None)
    allocation.released_at = timezone.now()
    allocation.save(update_fields=["released_at"])


def resize_capacity(instance, shape: Shape) -> None:
    """Grow or shrink the instance's allocation in place (on its node), under the node lock."""
    allocation = live_allocation(instance)
    lock(Node, allocation.node_id)
    node = with_free_capacity(Node.objects.filter(pk=allocation.node_id)).get()
    held = list(Accelerator.objects.filter(allocation=allocation).order_by("index"))
    extra = Shape(
        accelerator_model_id=shape.accelerator_model_id,
        accelerators=max(0, shape.accelerators - len(held)),
        vcpu=max(0, shape.vcpu - allocation.vcpu),
        ram_gb=max(0, shape.ram_gb - allocation.ram_gb),
    )
    if not _fits(node, extra):
        raise NoCapacity(
            _(
                "The host %(node)s does not have room to grow this instance to %(count)d "
                "accelerators. Release capacity, or create a new instance of the larger size."
            )
            % {"node": node.hostname, "count": shape.accelerators}
        )
    if shape.accelerators > len(held):
        devices = list(
            Accelerator.objects.filter(node=node, allocation__isnull=True)
            .order_by("index")
            .values_list("pk", flat=True)[: shape.accelerators - len(held)]
        )
        Accelerator.objects.filter(pk__in=devices).update(allocation=allocation)
    else:
        surplus = [a.pk for a in held[shape.accelerators :]]
        Accelerator.objects.filter(pk__in=surplus).update(allocation=None)
    allocation.vcpu, allocation.ram_gb = shape.vcpu, shape.ram_gb
    allocation.save(update_fields=["vcpu", "ram_gb"])


def device_indices(instance) -> tuple[int, ...]:
    allocation = live_allocation(instance)
    if allocation is None:
        return ()
    return tuple(allocation.accelerators.order_by("index").values_list("index", flat=True))
