"""plan_placement scores a shortlist of each pool's nodes, read in SQL (orchestration.shortlist):
in parks of varied nodes it must choose as scoring every node does, give each node it scores
the same parts and total, and count the nodes that fitted and were rejected as that does."""

import random
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from apps.catalog.selectors import prices_by_region
from apps.orchestration import adapter, services, shortlist
from apps.orchestration.backends.base import Capability
from apps.orchestration.models import Accelerator, Node, NodeHealth, Placement
from apps.orchestration.rooms import correct_rooms
from apps.orchestration.scheduler import decide
from apps.orchestration.selectors import schedulable_nodes
from apps.orchestration.services import Shape, plan_placement
from tests.factories import (
    AllocationFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    InstanceFactory,
    OrderFactory,
    PriceFactory,
    SchedulingPolicyFactory,
    TaskFactory,
    allocate_task,
)

pytestmark = pytest.mark.django_db


def full_decision(*, park, flavor, shape, region, preference):
    """Every schedulable node scored (what placement did before its shortlist): the reference."""
    nodes = list(
        schedulable_nodes(
            park=park,
            accelerator_model_id=shape.accelerator_model_id,
            region=region,
            capability=Capability.HOSTS,
        ).order_by("pk")
    )
    pools = {node.pool_id: node.pool for node in nodes}
    in_force = prices_by_region(region_ids={p.region_id for p in pools.values()}, flavor=flavor)
    prices = adapter.flavor_prices(flavor, pools.values(), in_force)
    if region is None and any(price is not None for price in prices.values()):
        nodes = [node for node in nodes if prices[node.pool_id] is not None]
    elif any(price is None for price in prices.values()):
        prices = dict.fromkeys(prices)
    views = adapter.node_views(nodes, prices=prices)
    request = adapter.instance_request(
        instance_id="new",
        shape=shape,
        model_slug=flavor.family.accelerator_model.slug,
        region=region,
        preference=preference,
    )
    weights = adapter.park_weights(park)
    return decide(
        request,
        [view.state for view in views],
        operator=weights.weights,
        operator_share=weights.operator_share,
        distribution=adapter.BEST_FIT,
    )


def varied_park(world, rng):
    """Three H100 pools (two regions, their own PUE and grid carbon), the flavor sold in
    both regions, and nodes of every kind: sizes, cards held whole or shared by tasks or out
    of service, CPU and memory taken, fresh or stale telemetry with power drawn, drained or
    down."""
    world.east.latency_ms = rng.choice([5, 10, 30])
    world.east.save()
    family = FlavorFamilyFactory(park=world.park, accelerator_model=world.h100)
    flavor = FlavorFactory(family=family, accelerator_count=2, vcpu=32, ram_gb=256)
    PriceFactory(region=world.east, flavor=flavor, amount_minor=rng.choice([3000, 6000]))
    PriceFactory(region=world.west, flavor=flavor, amount_minor=rng.choice([3000, 4000]))
    for name, region in (("e1", world.east), ("e2", world.east), ("w1", world.west)):
        world.pool(
            name,
            region=region,
            model=world.h100,
            pue=rng.choice(["1.10", "1.30", "1.60"]),
            carbon=rng.choice([0, 30, 550, 900]),
        )
    now = timezone.now()
    for i in range(rng.randint(30, 50)):
        node = world.node(
            f"n{i}",
            pool=rng.choice(["e1", "e2", "w1"]),
            accelerators=rng.choice([0, 2, 4, 8, 8, 8, 8, 8]),
            vcpu=rng.choice([16, 64, 128]),
            ram_gb=rng.choice([128, 512, 1024]),
        )
        cards = list(node.accelerators.order_by("index"))
        if cards and rng.random() < 0.5:
            held = AllocationFactory(
                node=node, vcpu=rng.choice([0, 8, 40]), ram_gb=rng.choice([0, 64, 300])
            )
            taken = [card.pk for card in cards[: rng.randint(1, len(cards))]]
            Accelerator.objects.filter(pk__in=taken).update(allocation=held)
        for _ in range(rng.choice([0, 0, 1, 2])):
            free = Accelerator.objects.filter(node=node, allocation__isnull=True).exists()
            if free:
                task = TaskFactory(
                    organization=world.organization, accelerator_milli=rng.choice([100, 300])
                )
                allocate_task(task, node=node)
        if cards and rng.random() < 0.15:
            Accelerator.objects.filter(pk=rng.choice(cards).pk).update(out_of_service=True)
        node.telemetry = telemetry(rng, now, len(cards))
        node.loaded_watts, node.loaded_watts_at = adapter.measured_power(node.telemetry)
        node.health = NodeHealth.DOWN if rng.random() < 0.05 else NodeHealth.HEALTHY
        node.is_drained = rng.random() < 0.05
        node.save()
    # Cards were held and taken out of service by hand, behind the nodes' kept rooms: counted
    # again as the capacity sampler's beat corrects them.
    correct_rooms()
    return flavor


def telemetry(rng, now, cards: int) -> dict:
    kind = rng.choice(["none", "stale", "no_time", *["fresh"] * 6])
    if kind == "none":
        return {}
    age = timedelta(minutes=rng.choice([1, 5, 9])) if kind != "stale" else timedelta(hours=1)
    readings = {
        str(index): {
            "util": rng.choice([0.0, 50.0, 90.0, 90.0]),
            **({"power_w": rng.choice([250, 410.5, 600, 690])} if rng.random() < 0.9 else {}),
        }
        for index in range(cards)
    }
    shown = {"accelerators": readings}
    if kind != "no_time":
        shown["updated_at"] = (now - age).isoformat()
    return shown


def fitted_by_node(decision) -> dict:
    return {c.node_id: c for c in decision.candidates if c.total is not None}


@pytest.mark.parametrize("seed", range(8))
def test_the_shortlist_chooses_and_scores_as_scoring_every_node(task_world, seed, monkeypatch):
    # One node per pool and free room: what the choice needs, so many alike nodes are left out.
    monkeypatch.setattr(shortlist, "PER_ROOM", 1)
    rng = random.Random(seed)
    flavor = varied_park(task_world, rng)
    if seed % 2:
        SchedulingPolicyFactory(park=task_world.park, energy_weight=4, fragmentation_weight=3)
    for accelerators in (1, 2, 4):
        shape = Shape(
            accelerator_model_id=task_world.h100.pk, accelerators=accelerators, vcpu=32, ram_gb=256
        )
        for region in (None, task_world.east):
            for preference in ("balanced", "green", "cheap"):
                reference = full_decision(
                    park=task_world.park,
                    flavor=flavor,
                    shape=shape,
                    region=region,
                    preference=preference,
                )
                plan = plan_placement(
                    park=task_world.park,
                    flavor=flavor,
                    shape=shape,
                    region=region,
                    preference=preference,
                )
                everyone = fitted_by_node(reference)
                considered = plan.weights["considered"]
                assert considered["fitted"] == len(everyone)
                assert considered["rejected"] == reference.rejected_counts()
                assert plan.complete == (len(plan.ranked) == len(everyone))
                # The decision lists the first rejected hosts, as scoring every node lists them.
                refused = [(int(c.node_id), c.rejected) for c in reference.candidates if c.rejected]
                listed = [(c["node_id"], c["rejected"]) for c in plan.record if not c["fits"]]
                assert listed == refused[: adapter.KEPT_CANDIDATES]
                if reference.node is None:
                    assert plan.ranked == ()
                    continue
                # The same choice (or one scored as high), with the same parts and total.
                best = everyone[reference.node.id].total
                chosen = plan.ranked[0].state.id
                assert everyone[chosen].total == pytest.approx(best, abs=1e-12)
                for node_id, scored in plan.scored.items():
                    assert scored.parts == pytest.approx(everyone[node_id].parts, abs=1e-12)
                    assert scored.total == pytest.approx(everyone[node_id].total, abs=1e-12)
                # Its runners-up are the best that scoring every node ranks after it.
                top = [
                    c.total for c in sorted(everyone.values(), key=lambda c: (c.dearer, -c.total))
                ]
                kept = [plan.scored[view.state.id].total for view in plan.ranked]
                shown = min(len(kept), shortlist.PER_ROOM)
                assert kept[:shown] == pytest.approx(top[:shown], abs=1e-12)
                assert considered["cheapest"] == cheapest(reference)


def cheapest(decision) -> dict | None:
    """What a decision names as the cheapest node with room (of equal prices, the best)."""
    fitted = sorted((c for c in decision.candidates if c.total is not None), key=lambda c: -c.total)
    priced = [c for c in fitted if c.raw["price_minor"] > 0]
    if not priced:
        return None
    found = min(priced, key=lambda c: c.raw["price_minor"])
    pool = (
        Node.objects.select_related("pool__region", "pool__accelerator_model")
        .get(pk=int(found.node_id))
        .pool
    )
    return {
        "price_minor": found.raw["price_minor"],
        "perf_units": found.raw["perf_units"],
        "model": pool.accelerator_model.name,
        "region_name": pool.region.name,
    }


def test_a_plan_scores_a_few_nodes_of_a_large_pool(task_world):
    shape = Shape(accelerator_model_id=task_world.h100.pk, accelerators=1, vcpu=1, ram_gb=1)
    for i in range(12):
        task_world.node(f"alike-{i}", pool="east-h100")

    plan = plan_placement(park=task_world.park, flavor=flavor_of(task_world), shape=shape)

    assert len(plan.ranked) == shortlist.PER_ROOM
    assert plan.weights["considered"]["fitted"] == 13  # h1 as well
    assert not plan.complete


def test_a_host_whose_shortlist_filled_up_goes_to_a_node_left_out(task_world, monkeypatch):
    """Every shortlisted node fills up before its lock: the others are scored and one is
    taken, counted as a decision over the whole pool."""
    for i in range(12):
        task_world.node(f"alike-{i}", pool="east-h100")
    real, tried = services._allocate_on, []

    def first_five_taken(node, **kwargs):
        tried.append(node.hostname)
        return None if len(tried) <= 5 else real(node, **kwargs)

    monkeypatch.setattr(services, "_allocate_on", first_five_taken)
    flavor = flavor_of(task_world)
    instance = InstanceFactory(organization=task_world.organization, flavor=flavor)
    OrderFactory(organization=task_world.organization, instance=instance)
    shape = Shape(accelerator_model_id=task_world.h100.pk, accelerators=1, vcpu=1, ram_gb=1)

    with transaction.atomic():
        allocation = services.place(instance=instance, shape=shape)

    assert len(set(tried)) == 6 and allocation.node.hostname == tried[-1]
    placement = Placement.objects.get(workload=instance.workload)
    assert placement.weights["considered"]["rejected"] == {"taken": 5}
    assert placement.weights["considered"]["fitted"] == 13 - 5
    assert placement.chosen_candidate()["node"] == allocation.node.hostname


def flavor_of(world):
    family = FlavorFamilyFactory(park=world.park, accelerator_model=world.h100)
    return FlavorFactory(family=family, accelerator_count=1, vcpu=1, ram_gb=1)
