"""place() with the weighted scorer: the parts and explanation it keeps, the tenant's
preference and the park's policy changing the choice, the fall-back when the best node fills up
before its lock, and hosts that never take a card shared by training tasks."""

from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import translation

from apps.orchestration import adapter, services
from apps.orchestration.models import Accelerator, Placement, SchedulingPolicy
from apps.orchestration.services import Shape, place
from tests.factories import (
    FlavorFactory,
    FlavorFamilyFactory,
    InstanceFactory,
    OrderFactory,
    PlacementFactory,
    PriceFactory,
    TaskFactory,
    allocate_task,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def hosts(task_world):
    """One H100 flavor family sold in two regions: east dear and coal-fired, west cheap and
    hydro-powered (both with an empty 8-card node), and a two-card host to order."""
    world = task_world
    family = FlavorFamilyFactory(park=world.park, accelerator_model=world.h100)
    world.flavor = FlavorFactory(family=family, accelerator_count=2, vcpu=32, ram_gb=256)
    PriceFactory(region=world.east, flavor=world.flavor, amount_minor=6000)
    PriceFactory(region=world.west, flavor=world.flavor, amount_minor=3000)
    pool = world.pools["east-h100"]
    pool.carbon_g_per_kwh, pool.pue = 900, Decimal("1.60")
    pool.save()
    world.pool("west-h100", region=world.west, model=world.h100, pue="1.10", carbon=30)
    world.node("w1", pool="west-h100")
    return world


def order_host(world, *, region=None, preference="balanced", instance=None):
    instance = instance or InstanceFactory(organization=world.organization, flavor=world.flavor)
    OrderFactory(organization=world.organization, instance=instance)
    allocation = place(
        instance=instance,
        shape=services.shape_of(world.flavor),
        region=region,
        preference=preference,
    )
    return allocation, Placement.objects.get(workload=instance.workload)


def test_every_candidate_keeps_its_parts_total_and_measures(hosts):
    allocation, placement = order_host(hosts)

    assert placement.chosen_node == allocation.node
    by_node = {c["node"]: c for c in placement.candidates}
    assert set(by_node) == {"h1", "w1"}
    for candidate in by_node.values():
        assert candidate["fits"] and candidate["rejected"] is None
        assert set(candidate["parts"]) == {
            "region",
            "performance",
            "energy",
            "price",
            "fragmentation",
        }
        assert 0 <= candidate["total"] <= 1
    assert by_node["h1"]["raw"]["price_minor"] == 6000
    assert by_node["w1"]["raw"]["price_minor"] == 3000
    assert by_node["w1"]["parts"]["price"] == 1.0 and by_node["h1"]["parts"]["price"] == 0.0
    assert by_node["w1"]["raw"]["left_free"] == 6.0
    assert placement.weights["policy"] == "best-fit"
    assert placement.weights["preference"] == "balanced"
    assert placement.weights["park_policy"] == "default"
    assert sum(placement.weights["weights"].values()) == pytest.approx(1.0)
    assert placement.weights["left_free"] == 6


def test_the_explanation_is_built_from_the_stored_parts(hosts):
    _, placement = order_host(hosts)

    assert placement.describe() == (
        "Placed on w1 in West because: lowest carbon (2 g CO₂e per compute-unit-hour), "
        "lowest price (¥30.00/h)."
    )
    with translation.override("zh-hans"):
        assert "w1" in placement.describe()  # shown in the reader's language


@pytest.mark.parametrize(("preference", "node"), [("cheap", "w1"), ("green", "w1")])
def test_cheap_and_green_agree_when_the_cheap_pool_is_clean(hosts, preference, node):
    allocation, _ = order_host(hosts, preference=preference)
    assert allocation.node.hostname == node


@pytest.mark.parametrize(("preference", "node"), [("cheap", "w1"), ("green", "h1")])
def test_the_preference_changes_the_choice(hosts, preference, node):
    east, west = hosts.pools["east-h100"], hosts.pools["west-h100"]
    east.carbon_g_per_kwh, east.pue = 20, Decimal("1.05")
    east.save()
    west.carbon_g_per_kwh = 950
    west.save()

    allocation, placement = order_host(hosts, preference=preference)

    assert allocation.node.hostname == node
    assert placement.weights["preference"] == preference


def test_the_parks_policy_can_outweigh_the_tenant(hosts):
    east = hosts.pools["east-h100"]
    east.carbon_g_per_kwh = 20
    east.save()
    SchedulingPolicy.objects.create(
        park=hosts.park,
        region_weight=0,
        performance_weight=0,
        energy_weight=10,
        price_weight=0,
        fragmentation_weight=0,
        operator_share=Decimal("1.00"),
    )

    allocation, placement = order_host(hosts, preference="cheap")

    assert allocation.node.hostname == "h1"  # the greener one, whatever the tenant prefers
    assert placement.weights["park_policy"] == "park"
    assert placement.weights["weights"]["energy"] == pytest.approx(1.0)


def test_best_fit_still_decides_between_equal_nodes(hosts):
    tight = hosts.node("w2", pool="west-h100", accelerators=3)

    allocation, placement = order_host(hosts, region=hosts.west)

    assert allocation.node == tight
    assert "fewest accelerators left free (1)" in placement.describe()


def test_a_node_that_filled_up_before_its_lock_falls_back_to_the_next(hosts, monkeypatch):
    real = services._allocate_on

    def first_one_taken(node, **kwargs):
        if node.hostname == "w1":
            return None  # what the lock-time re-check answers when it filled up meanwhile
        return real(node, **kwargs)

    monkeypatch.setattr(services, "_allocate_on", first_one_taken)

    allocation, placement = order_host(hosts)

    assert allocation.node.hostname == "h1"
    by_node = {c["node"]: c for c in placement.candidates}
    assert by_node["w1"]["rejected"] == "taken" and by_node["w1"]["fits"] is False
    assert {c["node"]: c["reason"] for c in placement.rejected_candidates()} == {
        "w1": "taken by another placement at the last moment"
    }


def test_a_decision_keeps_the_best_that_fitted_and_counts_every_host(hosts, monkeypatch):
    monkeypatch.setattr(adapter, "KEPT_CANDIDATES", 2)
    for i in range(3):
        hosts.node(f"w-more-{i}", pool="west-h100")
    for i in range(3):  # too small for a two-card host
        hosts.node(f"w-small-{i}", pool="west-h100", accelerators=1)

    allocation, placement = order_host(hosts)

    fitted = placement.feasible_candidates()
    assert len(fitted) == 2  # the best two of the five with room
    assert placement.chosen_candidate()["node"] == allocation.node.hostname
    every_total = sorted((c["total"] for c in fitted), reverse=True)
    assert fitted[0]["total"] == every_total[0]
    assert [c["rejected"] for c in placement.rejected_candidates()] == ["gpu_count"] * 2
    assert placement.weights["considered"] == {"fitted": 5, "rejected": {"gpu_count": 3}}
    assert placement.fitted_count() == 5
    with translation.override("en"):
        assert placement.rejected_counts() == [("not enough whole accelerators free", 3)]


def test_a_node_chosen_past_the_kept_best_is_kept_too(hosts, monkeypatch):
    monkeypatch.setattr(adapter, "KEPT_CANDIDATES", 1)
    real = services._allocate_on
    monkeypatch.setattr(
        services,
        "_allocate_on",
        lambda node, **kwargs: None if node.hostname == "w1" else real(node, **kwargs),
    )

    allocation, placement = order_host(hosts)

    assert allocation.node.hostname == "h1"
    by_node = {c["node"]: c for c in placement.candidates}
    assert by_node["w1"]["rejected"] == "taken"
    assert by_node["h1"]["fits"] and by_node["h1"]["parts"]  # scored, though not kept at first
    assert placement.weights["considered"] == {"fitted": 1, "rejected": {"taken": 1}}
    assert "h1" in placement.describe()


def test_a_placement_kept_before_the_counts_counts_its_list(hosts):
    _allocation, placement = order_host(hosts)
    del placement.weights["considered"]

    assert placement.fitted_count() == 2
    assert placement.rejected_counts() == []


def test_a_host_never_takes_a_card_shared_by_training_tasks(hosts):
    node = hosts.node("w-small", pool="west-h100", accelerators=3)
    share = TaskFactory(organization=hosts.organization, accelerator_milli=100)
    allocation = allocate_task(share, node=node)
    shared = allocation.shared_accelerator

    host, _ = order_host(hosts, region=hosts.west)

    # Two whole cards are free on w-small besides the shared one: best fit takes them.
    assert host.node == node
    cards = set(Accelerator.objects.filter(allocation=host).values_list("pk", flat=True))
    assert shared.pk not in cards and len(cards) == 2
    shared.refresh_from_db()
    assert shared.allocation == allocation


def test_no_host_takes_a_node_whose_only_free_room_is_shared(hosts):
    node = hosts.node("w-small", pool="west-h100", accelerators=2)
    task = TaskFactory(organization=hosts.organization, accelerator_milli=100)
    with transaction.atomic():  # the task's own transaction, before the order's
        allocate_task(task, node=node)

    host, placement = order_host(hosts, region=hosts.west)

    assert host.node.hostname == "w1"
    rejected = {c["node"]: c["rejected"] for c in placement.candidates}
    assert rejected["w-small"] == "gpu_count"


def test_a_placement_kept_before_the_scorer_still_explains_itself(hosts):
    placement = PlacementFactory(
        chosen_node=hosts.nodes["h1"],
        chosen_pool=hosts.pools["east-h100"],
        weights={"policy": "best-fit", "left_free": 4},
        candidates=[{"node": "h1", "fits": True}, {"node": "w1", "fits": True}],
    )
    assert placement.describe() == (
        "Placed on h1 in East: of the 2 hosts with room, it is left with the fewest free "
        "accelerators (4), keeping large holes for large hosts."
    )
    assert placement.reasons() == []


def test_place_without_prices_anywhere_still_places(task_world):
    instance = InstanceFactory(
        organization=task_world.organization, flavor__family__accelerator_model=task_world.h100
    )
    order = OrderFactory(organization=task_world.organization, instance=instance)
    shape = Shape(accelerator_model_id=task_world.h100.pk, accelerators=1, vcpu=1, ram_gb=1)

    allocation = place(instance=instance, shape=shape)

    assert allocation.node == task_world.nodes["h1"]
    (candidate,) = Placement.objects.get(workload__instance__orders=order).candidates
    assert candidate["raw"]["price_minor"] == 0
