"""apps.orchestration.adapter: rows to the engine's NodeState/TaskRequest (every attribute
scoring reads), the prices it scores with, and the few queries it takes."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.catalog.models import ResourceType
from apps.orchestration import adapter
from apps.orchestration.models import Accelerator, Allocation, Node, SchedulingPolicy, TaskState
from apps.orchestration.rooms import NodeRoom
from apps.orchestration.scheduler import Weights
from apps.orchestration.services import Shape
from tests.factories import AllocationFactory, TaskFactory, allocate_task
from tests.orchestration.test_scheduling import hold_cards

pytestmark = pytest.mark.django_db


def views_of(world, *hostnames):
    """The nodes' views, as placement reads them (plain rows: node_views counts the room)."""
    rows = Node.objects.filter(hostname__in=hostnames).select_related(
        "pool__region", "pool__accelerator_model"
    )
    nodes = list(rows.order_by("pk"))
    return adapter.node_views(nodes, prices=adapter.task_prices({n.pool for n in nodes}))


def test_a_node_maps_to_the_engines_state(task_world):
    pool = task_world.pools["east-h100"]
    pool.pue, pool.carbon_g_per_kwh = Decimal("1.45"), 610
    pool.save()

    (view,) = views_of(task_world, "h1")

    state = view.state
    assert state.id == str(task_world.nodes["h1"].pk)
    assert state.region == "east" and state.latency_ms == 10.0
    assert state.gpu_model == "h100"
    assert state.gpu_free == [1000] * 8
    assert state.perf_units_per_gpu == pytest.approx(9.895)
    assert state.watts_per_unit == pytest.approx(700 / 9.895)
    assert (state.pue, state.carbon_g_per_kwh) == (pytest.approx(1.45), 610.0)
    assert state.price_per_hour_minor == 2000
    assert view.price_per_hour_minor == Decimal(2000)
    assert (state.cpu_milli_total, state.cpu_milli_free) == (128_000, 128_000)
    assert (state.memory_mib_total, state.memory_mib_free) == (1024 * 1024, 1024 * 1024)
    assert state.drained is False


def agent_readings(node, *, age=timedelta(0), **cards):
    """Telemetry as the host agent's driver writes it: {index: (utilization %, watts)}."""
    node.telemetry = {
        "updated_at": (timezone.now() - age).isoformat(),
        "accelerators": {
            index.lstrip("c"): {"util": util, "power_w": watts}
            for index, (util, watts) in cards.items()
        },
    }
    node.loaded_watts, node.loaded_watts_at = adapter.measured_power(node.telemetry)
    node.save(update_fields=["telemetry", "loaded_watts", "loaded_watts_at"])


def test_the_energy_score_uses_the_measured_power_of_loaded_cards(task_world):
    node = task_world.nodes["h1"]
    # Two loaded cards measured at 500 and 540 W (an idle one at 80 W is not "under load").
    agent_readings(node, c0=(95, 500.0), c1=(70, 540.0), c2=(3, 80.0))
    (view,) = views_of(task_world, "h1")
    assert view.state.watts_per_unit == pytest.approx(520 / 9.895)


@pytest.mark.parametrize(
    "readings, age",
    [
        ({"c0": (95, 500.0)}, timedelta(minutes=11)),  # stale: proves nothing now
        ({"c0": (10, 120.0)}, timedelta(0)),  # no card under load
        ({"c0": (95, None)}, timedelta(0)),  # the card does not report its power
    ],
)
def test_without_fresh_measured_load_the_energy_score_uses_the_tdp(task_world, readings, age):
    agent_readings(task_world.nodes["h1"], age=age, **readings)
    (view,) = views_of(task_world, "h1")
    assert view.state.watts_per_unit == pytest.approx(700 / 9.895)


def test_held_and_shared_cards_and_used_cpu_are_counted(task_world):
    node = task_world.nodes["h1"]
    hold_cards(node, 2)  # a host holding cards 0 and 1
    first = TaskFactory(organization=task_world.organization, accelerator_milli=250, vcpu=4)
    second = TaskFactory(organization=task_world.organization, accelerator_milli=500, vcpu=4)
    assert allocate_task(first, node=node) is not None
    assert allocate_task(second, node=node) is not None

    other = task_world.node("h1-neighbour", pool="east-h100")  # same pool, its own room
    Allocation.objects.filter(pk=hold_cards(other, 3).pk).update(vcpu=16, ram_gb=128)

    view, neighbour = views_of(task_world, "h1", "h1-neighbour")

    assert neighbour.state.gpu_free == [1000] * 5 + [0] * 3
    assert (neighbour.node.vcpu_used, neighbour.node.ram_used) == (16, 128)

    # What each card has free, idle cards first (scoring needs how much, not which card).
    assert view.state.gpu_free == [1000, 1000, 1000, 1000, 1000, 250, 0, 0]
    assert view.state.cpu_milli_free == (128 - 4 - 4) * 1000
    assert view.state.memory_mib_free == (1024 - 32 - 32) * 1024
    # As the node's room counts them under its lock: the shared card is held, not free.
    room = NodeRoom.lock([node.pk])[node.pk]
    assert view.node.free_accelerators == room.idle_cards == 5
    assert (view.node.vcpu_used, view.node.ram_used) == (8, 64)
    assert (room.vcpu_free, room.ram_gb_free) == (128 - 8, 1024 - 64)


def test_a_card_out_of_service_has_nothing_free(task_world):
    node = task_world.nodes["h1"]
    Accelerator.objects.filter(node=node, index=7).update(out_of_service=True)
    (view,) = views_of(task_world, "h1")
    assert view.state.gpu_free == [1000] * 7 + [0]
    assert view.node.free_accelerators == 7


def test_a_drained_or_unhealthy_node_is_drained_to_the_engine(task_world):
    Node.objects.filter(pk=task_world.nodes["h1"].pk).update(health="degraded")
    (view,) = views_of(task_world, "h1")
    assert view.state.drained is True


def test_node_views_take_the_same_few_queries_for_any_number_of_nodes(task_world):
    def count(n):
        for i in range(n):
            node = task_world.node(f"extra-{n}-{i}", pool="east-h100", accelerators=4)
            allocate_task(
                TaskFactory(organization=task_world.organization, accelerator_milli=300),
                node=node,
            )
        rows = Node.objects.filter(hostname__startswith=f"extra-{n}-").select_related(
            "pool__region", "pool__accelerator_model"
        )
        nodes = list(rows)
        with CaptureQueriesContext(connection) as queries:
            adapter.node_views(nodes, prices={})
        return len(queries)

    # Cards and what allocations hold per node, the shared cards, their live shares.
    assert count(1) == count(6) == 3


# --- prices ----------------------------------------------------------------------------------


def test_the_task_price_is_the_one_card_flavor_of_the_model_in_the_region(task_world):
    pool = task_world.pools["east-h100"]
    task_world.price(task_world.east, task_world.h100, 7000, accelerators=4)  # 1750 per card
    task_world.price(task_world.east, task_world.h100, 1500, resource_type=ResourceType.CLOUD_HOST)

    # The training family's one-card price wins over a cheaper host family and a bigger size.
    assert adapter.task_prices([pool]) == {pool.pk: Decimal(2000)}


def test_without_a_one_card_flavor_the_cheapest_per_card_rate_counts(task_world):
    pool = task_world.pool("west-a10", region=task_world.west, model=task_world.a10)
    task_world.price(task_world.west, task_world.a10, 3000, accelerators=2)
    task_world.price(task_world.west, task_world.a10, 5000, accelerators=4)

    assert adapter.task_prices([pool]) == {pool.pk: Decimal(1250)}


def test_an_unpriced_pool_has_no_price(task_world):
    pool = task_world.pool("west-a10", region=task_world.west, model=task_world.a10)
    assert adapter.task_prices([pool]) == {pool.pk: None}


@pytest.mark.parametrize(
    ("card_price", "milli", "hourly"),
    [(2000, 250, 500), (1001, 500, 501), (999, 333, 333), (2000, 2000, 4000), (3, 500, 2)],
)
def test_task_hourly_minor_rounds_half_up(card_price, milli, hourly):
    assert adapter.task_hourly_minor(Decimal(card_price), milli) == hourly


# --- requests --------------------------------------------------------------------------------


def test_an_instance_request(task_world):
    request = adapter.instance_request(
        instance_id=7,
        shape=Shape(accelerator_model_id=task_world.h100.pk, accelerators=4, vcpu=64, ram_gb=512),
        model_slug="h100",
        region=task_world.east,
        preference="green",
    )

    assert request.id == "instance-7"
    assert (request.num_gpu, request.gpu_milli, request.is_share) == (4, 1000, False)
    assert (request.cpu_milli, request.memory_mib) == (64_000, 512 * 1024)
    assert request.gpu_models == {"h100"} and request.regions == {"east"}
    assert request.preference == "green"


@pytest.mark.parametrize(
    ("milli", "num_gpu", "gpu_milli", "share"),
    [(250, 1, 250, True), (1000, 1, 1000, False), (3000, 3, 1000, False)],
)
def test_a_task_request(task_world, milli, num_gpu, gpu_milli, share):
    task = TaskFactory(
        organization=task_world.organization,
        image=task_world.image,
        accelerator_milli=milli,
        vcpu=6,
        ram_gb=48,
        priority=-3,
        preference="cheap",
    )
    task.allowed_regions.set([task_world.east, task_world.west])

    request = adapter.task_request(task, model_slugs={"h100", "a10"})

    assert request.id == str(task.pk)
    assert (request.num_gpu, request.gpu_milli, request.is_share) == (num_gpu, gpu_milli, share)
    assert request.gpu_request_milli == milli
    assert (request.cpu_milli, request.memory_mib) == (6000, 48 * 1024)
    assert request.regions == {"east", "west"}
    assert request.gpu_models == {"h100", "a10"}
    # The engine's class: priority -3, and within it ahead of preemptible tasks (2 × -3 + 1).
    assert (request.organization, request.priority, request.preference) == (
        task_world.organization.pk,
        -5,
        "cheap",
    )


def test_a_task_without_a_model_may_use_every_model_its_image_runs_on(task_world):
    task = TaskFactory(organization=task_world.organization, image=task_world.image)
    assert adapter.task_model_ids(task) == {task_world.h100.pk, task_world.a10.pk}
    task.accelerator_model = task_world.a10
    assert adapter.task_model_ids(task) == {task_world.a10.pk}


def test_a_task_allowed_no_pool_matches_no_node(task_world):
    task = TaskFactory(organization=task_world.organization, image=task_world.image)
    request = adapter.task_request(task, model_slugs=set(), zones=set())
    assert request.regions == {adapter.NO_ZONE} and request.gpu_models == {adapter.NO_ZONE}


def test_pool_refusals_name_the_reason(task_world):
    east = task_world.pools["east-h100"]
    unpriced = task_world.pool("west-h100", region=task_world.west, model=task_world.h100)
    a10 = task_world.pool("west-a10", region=task_world.west, model=task_world.a10, price=100)
    task = TaskFactory(
        organization=task_world.organization,
        image=task_world.image,
        accelerator_model=task_world.h100,
        max_hourly_minor=1000,
    )
    pools = [east, unpriced, a10]

    refused = adapter.task_pool_rejections(
        task, pools, adapter.task_prices(pools), model_ids={task_world.h100.pk}
    )

    assert refused == {east.pk: "max_price", unpriced.pk: "not_priced", a10.pk: "gpu_model"}
    task.allowed_regions.set([task_world.east])
    refused = adapter.task_pool_rejections(
        task, pools, adapter.task_prices(pools), model_ids={task_world.h100.pk}
    )
    assert refused[unpriced.pk] == "region"


# --- weights ---------------------------------------------------------------------------------


def test_a_park_without_a_policy_weighs_every_part_the_same(task_world):
    weights = adapter.park_weights(task_world.park)
    assert weights.weights == Weights() and weights.operator_share == 0.5
    assert weights.source == "default"


def test_the_parks_policy_is_used(task_world):
    policy = SchedulingPolicy.objects.create(
        park=task_world.park, price_weight=Decimal("4"), operator_share=Decimal("0.80")
    )
    weights = adapter.park_weights(task_world.park)
    assert weights.weights == Weights(price=4)
    assert (weights.operator_share, weights.source) == (0.8, "park")
    # Each weight where the operator set it, from the next placement on.
    SchedulingPolicy.objects.filter(pk=policy.pk).update(
        region_weight=Decimal("2"),
        performance_weight=Decimal("3.5"),
        energy_weight=Decimal("0.25"),
        fragmentation_weight=Decimal("0"),
        operator_share=Decimal("0.1"),
    )
    weights = adapter.park_weights(task_world.park)
    assert weights.weights == Weights(
        region=2, performance=3.5, energy=0.25, price=4, fragmentation=0
    )
    assert weights.operator_share == 0.1


def test_a_task_allocation_on_a_card_filled_meanwhile_is_refused(task_world):
    """The engine read a free card; by the time the node's lock is held another share took
    most of it: the re-count under the lock refuses, and nothing is written."""
    task_world.pool("tiny", region=task_world.west, model=task_world.a10, price=800)
    node = task_world.node("one-card", pool="tiny", accelerators=1)
    (card,) = Accelerator.objects.filter(node=node)
    meanwhile = AllocationFactory(
        node=node, for_task=True, vcpu=0, ram_gb=0, share_milli=800, shared_accelerator=card
    )
    Accelerator.objects.filter(pk=card.pk).update(allocation=meanwhile)
    task = TaskFactory(organization=task_world.organization, accelerator_milli=300)

    assert allocate_task(task, node=node) is None
    assert not Allocation.objects.filter(workload__task=task).exists()
    assert task.state == TaskState.QUEUED


def test_a_task_of_whole_cards_never_takes_a_card_out_of_service(task_world):
    """Card 0 is idle but out of service: a two-card task takes cards 1 and 2."""
    node = task_world.nodes["h1"]
    Accelerator.objects.filter(node=node, index=0).update(out_of_service=True)
    task = TaskFactory(organization=task_world.organization, accelerator_milli=2000)

    allocation = allocate_task(task, node=node)

    assert sorted(allocation.accelerators.values_list("index", flat=True)) == [1, 2]
    assert Accelerator.objects.get(node=node, index=0).allocation is None


def test_a_node_without_cards_counts_what_its_allocations_hold(task_world):
    node = task_world.node("cpu-only", pool="east-h100", accelerators=0)
    AllocationFactory(node=node, vcpu=16, ram_gb=128)
    (view,) = views_of(task_world, "cpu-only")
    assert view.state.gpu_free == []
    assert view.state.cpu_milli_free == (node.vcpu_total - 16) * 1000
    assert (view.node.vcpu_used, view.node.ram_used) == (16, 128)


def test_within_a_priority_a_task_that_may_not_be_preempted_comes_first(task_world):
    cheap = task_world.submit(preemptible=True, priority=-1)
    full = task_world.submit(priority=-1)
    higher = task_world.submit(preemptible=True)

    def engine_priority(task):
        return adapter.task_request(task, model_slugs=()).priority

    assert engine_priority(higher) > engine_priority(full) > engine_priority(cheap)
