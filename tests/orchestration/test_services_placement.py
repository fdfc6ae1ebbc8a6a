"""Placement and held capacity: place() (best fit under balanced weights, what it skips, the
region filter, NoCapacity) and resize_capacity; giving capacity back is
tests/orchestration/test_reservations.py's. What a node's room counts under its lock, and what
every path takes from it, is tests/orchestration/test_rooms.py's."""

import pytest
from django.db import transaction

from apps.orchestration.models import Accelerator, Allocation, Node, NodeHealth, Placement
from apps.orchestration.services import (
    NoCapacity,
    Shape,
    place,
    register_node,
    resize_capacity,
)
from tests.factories import (
    AcceleratorModelFactory,
    AllocationFactory,
    BackendFactory,
    InstanceFactory,
    OrderFactory,
    PoolFactory,
    RegionFactory,
)


def add_node(pool, hostname, accelerators=8, vcpu=128, ram_gb=1024) -> Node:
    return register_node(
        pool=pool, hostname=hostname, accelerators=accelerators, vcpu=vcpu, ram_gb=ram_gb
    )


def shape(grid, accelerators, vcpu=16, ram_gb=128) -> Shape:
    return Shape(
        accelerator_model_id=grid.model.pk, accelerators=accelerators, vcpu=vcpu, ram_gb=ram_gb
    )


def new_instance(grid):
    return InstanceFactory(
        organization=grid.organization, flavor__family__accelerator_model=grid.model
    )


def put(grid, accelerators, *, vcpu=16, ram_gb=128, region=None, instance=None):
    """Place a new instance (and its create order) of `accelerators` cards."""
    instance = instance or new_instance(grid)
    OrderFactory(organization=grid.organization, instance=instance)
    with transaction.atomic():  # each placement its own transaction, as in an order
        return place(
            instance=instance,
            shape=shape(grid, accelerators, vcpu, ram_gb),
            region=region,
        )


def free(node) -> int:
    return Accelerator.objects.filter(node=node, allocation__isnull=True).count()


def held(allocation) -> list[int]:
    return list(allocation.accelerators.order_by("index").values_list("index", flat=True))


# --- best fit --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_place_chooses_the_node_left_with_the_fewest_free_accelerators(grid):
    roomy = add_node(grid.pool, "roomy")
    tight = add_node(grid.pool, "tight", accelerators=3)
    middle = add_node(grid.pool, "middle", accelerators=6)

    allocation = put(grid, 2)

    assert allocation.node == tight
    assert held(allocation) == [0, 1]
    assert (allocation.vcpu, allocation.ram_gb) == (16, 128)
    assert allocation.released_at is None
    assert (free(tight), free(middle), free(roomy)) == (1, 6, 8)
    placement = Placement.objects.get()
    assert placement.chosen_node == tight
    assert placement.chosen_pool == grid.pool
    assert placement.workload == allocation.workload
    assert {c["node"]: c["free_accelerators"] for c in placement.candidates} == {
        "roomy": 8,
        "tight": 3,
        "middle": 6,
    }
    assert all(c["fits"] for c in placement.candidates)
    assert placement.weights["policy"] == "best-fit"  # the fragmentation part's measure
    assert placement.weights["left_free"] == 1
    assert placement.weights["preference"] == "balanced"
    assert placement.describe() == (
        "Placed on tight in Center because: fewest accelerators left free (1)."
    )


@pytest.mark.django_db
def test_an_exact_fit_wins(grid):
    add_node(grid.pool, "eight")
    four = add_node(grid.pool, "four", accelerators=4)

    assert put(grid, 4).node == four
    assert put(grid, 4).node.hostname == "eight"  # "four" is full now


@pytest.mark.django_db
def test_a_node_that_is_too_small_is_recorded_but_not_chosen(grid):
    add_node(grid.pool, "small", accelerators=2)
    big = add_node(grid.pool, "big")

    assert put(grid, 4).node == big

    candidates = {c["node"]: c for c in Placement.objects.get().candidates}
    assert candidates["small"]["fits"] is False
    assert candidates["big"]["fits"] is True


@pytest.mark.django_db
def test_equal_fits_go_to_the_lower_latency_region_then_the_older_node(grid):
    far_region = RegionFactory(park=grid.park, code="far", latency_ms=30)
    far_pool = PoolFactory(backend=grid.backend, region=far_region, accelerator_model=grid.model)
    add_node(far_pool, "far-1")
    first = add_node(grid.pool, "near-1")
    add_node(grid.pool, "near-2")

    assert put(grid, 2).node == first


# --- what place() skips ----------------------------------------------------------------------


def _drained(grid, node):
    Node.objects.filter(pk=node.pk).update(is_drained=True)


def _degraded(grid, node):
    Node.objects.filter(pk=node.pk).update(health=NodeHealth.DEGRADED)


def _down(grid, node):
    Node.objects.filter(pk=node.pk).update(health=NodeHealth.DOWN)


def _pool_unschedulable(grid, node):
    node.pool.is_schedulable = False
    node.pool.save()


def _backend_disabled(grid, node):
    node.pool.backend.is_enabled = False
    node.pool.backend.save()


def _other_model(grid, node):
    node.pool.accelerator_model = AcceleratorModelFactory()
    node.pool.save()


def _other_park(grid, node):
    backend = BackendFactory()
    node.pool.backend = backend
    node.pool.region = RegionFactory(park=backend.park)
    node.pool.save()


def _no_vcpu(grid, node):
    Node.objects.filter(pk=node.pk).update(vcpu_total=15)


def _no_ram(grid, node):
    Node.objects.filter(pk=node.pk).update(ram_gb_total=127)


def _vcpu_used(grid, node):
    Node.objects.filter(pk=node.pk).update(vcpu_total=64)
    AllocationFactory(node=node, for_task=True, vcpu=50, ram_gb=0)  # 14 vCPU left


def _ram_used(grid, node):
    Node.objects.filter(pk=node.pk).update(ram_gb_total=512)
    AllocationFactory(node=node, for_task=True, vcpu=0, ram_gb=400)  # 112 GB left


SKIPS = {
    "drained": (_drained, False),
    "degraded": (_degraded, False),
    "down": (_down, False),
    "unschedulable pool": (_pool_unschedulable, False),
    "disabled backend": (_backend_disabled, False),
    "another model": (_other_model, False),
    "another park": (_other_park, False),
    "too few vCPU": (_no_vcpu, True),
    "too little RAM": (_no_ram, True),
    "vCPU taken": (_vcpu_used, True),
    "RAM taken": (_ram_used, True),
}


@pytest.mark.django_db
@pytest.mark.parametrize(("spoil", "is_candidate"), SKIPS.values(), ids=SKIPS.keys())
def test_place_skips_nodes_it_must_not_use(grid, spoil, is_candidate):
    spare = add_node(grid.pool, "spare")
    other_pool = PoolFactory(
        backend=BackendFactory(park=grid.park), region=grid.center, accelerator_model=grid.model
    )
    best = add_node(other_pool, "best", accelerators=2)  # the best fit, unless spoiled
    spoil(grid, Node.objects.select_related("pool__backend").get(pk=best.pk))

    allocation = put(grid, 2)

    assert allocation.node == spare
    assert free(best) == 2
    candidates = {c["node"]: c for c in Placement.objects.get().candidates}
    if is_candidate:
        assert candidates["best"]["fits"] is False
    else:
        assert "best" not in candidates


@pytest.mark.django_db
def test_an_unspoiled_best_node_is_chosen(grid):
    add_node(grid.pool, "spare")
    other_pool = PoolFactory(backend=grid.backend, region=grid.center, accelerator_model=grid.model)
    best = add_node(other_pool, "best", accelerators=2)

    assert put(grid, 2).node == best


# --- the region filter and NoCapacity --------------------------------------------------------


@pytest.mark.django_db
def test_place_in_a_region(grid):
    add_node(grid.pool, "center-1", accelerators=2)
    east = RegionFactory(park=grid.park, code="east", name="East", latency_ms=9)
    east_pool = PoolFactory(backend=grid.backend, region=east, accelerator_model=grid.model)
    east_node = add_node(east_pool, "east-1")

    allocation = put(grid, 2, region=east)

    assert allocation.node == east_node
    assert [c["node"] for c in Placement.objects.get().candidates] == ["east-1"]


@pytest.mark.django_db
def test_no_capacity_in_the_region(grid):
    add_node(grid.pool, "center-1")
    east = RegionFactory(park=grid.park, code="east", name="East")
    east_pool = PoolFactory(backend=grid.backend, region=east, accelerator_model=grid.model)
    add_node(east_pool, "east-1", accelerators=2)

    with pytest.raises(NoCapacity) as excinfo:
        put(grid, 4, region=east)

    assert excinfo.value.code == "no_capacity"
    assert excinfo.value.message == (
        "No host has 4 free NVIDIA H100 accelerators in East right now. Choose a smaller "
        "flavor, another region, or try again later."
    )
    assert not Allocation.objects.exists()
    assert not Placement.objects.exists()


@pytest.mark.django_db
def test_no_capacity_anywhere(grid):
    add_node(grid.pool, "n1", accelerators=4)
    add_node(grid.pool, "n2", accelerators=4)

    with pytest.raises(NoCapacity) as excinfo:
        put(grid, 8)  # 8 free in all, but a host's cards sit on one node

    assert excinfo.value.message.startswith("No host has 8 free NVIDIA H100 accelerators right")
    assert not Allocation.objects.exists()
    assert Accelerator.objects.filter(allocation__isnull=True).count() == 8


@pytest.mark.django_db
def test_no_nodes_at_all(grid):
    with pytest.raises(NoCapacity):
        put(grid, 1)


def test_place_must_run_inside_the_callers_transaction():
    with pytest.raises(RuntimeError, match="inside the caller's transaction"):
        place(instance=None, shape=Shape(1, 1, 1, 1))


# --- resize_capacity -------------------------------------------------------------------------


@pytest.mark.django_db
def test_resize_capacity_grows_in_place(grid):
    node = add_node(grid.pool, "n1")
    allocation = put(grid, 2, vcpu=32, ram_gb=256)
    neighbour = put(grid, 1)  # holds card 2

    resize_capacity(allocation.workload.instance, shape(grid, 4, vcpu=64, ram_gb=512))

    allocation.refresh_from_db()
    assert held(allocation) == [0, 1, 3, 4]
    assert held(neighbour) == [2]
    assert (allocation.vcpu, allocation.ram_gb) == (64, 512)
    assert free(node) == 3
    assert Allocation.objects.filter(released_at__isnull=True).count() == 2


@pytest.mark.django_db
def test_resize_capacity_shrinks_keeping_the_first_cards(grid):
    node = add_node(grid.pool, "n1")
    allocation = put(grid, 8, vcpu=128, ram_gb=1024)

    resize_capacity(allocation.workload.instance, shape(grid, 2, vcpu=32, ram_gb=256))

    allocation.refresh_from_db()
    assert held(allocation) == [0, 1]
    assert (allocation.vcpu, allocation.ram_gb) == (32, 256)
    assert free(node) == 6


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("accelerators", "vcpu", "ram_gb"),
    [(6, 32, 256), (4, 200, 256), (4, 32, 2000)],
    ids=["cards", "vcpu", "ram"],
)
def test_resize_capacity_refuses_to_grow_beyond_the_node(grid, accelerators, vcpu, ram_gb):
    node = add_node(grid.pool, "n1", accelerators=8, vcpu=128, ram_gb=1024)
    allocation = put(grid, 2, vcpu=32, ram_gb=256)
    put(grid, 3)

    with pytest.raises(NoCapacity) as excinfo:
        resize_capacity(allocation.workload.instance, shape(grid, accelerators, vcpu, ram_gb))

    assert f"The host n1 does not have room to grow this instance to {accelerators}" in (
        excinfo.value.message
    )
    allocation.refresh_from_db()
    assert held(allocation) == [0, 1]
    assert (allocation.vcpu, allocation.ram_gb) == (32, 256)
    assert free(node) == 3


@pytest.mark.django_db
def test_resize_capacity_to_the_last_free_card(grid):
    node = add_node(grid.pool, "n1")
    allocation = put(grid, 2)
    put(grid, 3)

    resize_capacity(allocation.workload.instance, shape(grid, 5))

    assert free(node) == 0
    assert len(held(allocation)) == 5
