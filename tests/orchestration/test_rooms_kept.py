"""What a node has free, kept on its row (`Node.room_*`) for placement's shortlist: written
wherever its cards or allocations change, corrected where it drifted, and never trusted
over the count under the node's lock."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.orchestration import tasks
from apps.orchestration.models import Accelerator, Node, Placement
from apps.orchestration.reservations import release
from apps.orchestration.rooms import ROOM_FIELDS, NodeRoom, correct_rooms
from apps.orchestration.services import plan_placement, region_of
from tests.factories import FlavorFactory, FlavorFamilyFactory, TaskFactory, allocate_task
from tests.orchestration.test_rooms import out_of_service, resize
from tests.orchestration.test_services_placement import add_node, put, shape

pytestmark = pytest.mark.django_db


def kept(node) -> dict:
    """What the node's row keeps of its room."""
    return Node.objects.filter(pk=node.pk).values(*ROOM_FIELDS).get()


def counted(node) -> dict:
    """What its cards and allocations say, counted under its lock."""
    with transaction.atomic():
        return dict(zip(ROOM_FIELDS, NodeRoom.lock([node.pk])[node.pk].counted, strict=True))


def test_a_new_node_keeps_its_cards_idle_and_nothing_held(grid):
    node = add_node(grid.pool, "n1", accelerators=8, vcpu=128, ram_gb=1024)

    assert kept(node) == {
        "room_cards": 8,
        "room_idle": 8,
        "room_free_milli": 8000,
        "room_vcpu_held": 0,
        "room_ram_gb_held": 0,
    }


def test_the_kept_room_follows_a_host_placed_resized_and_released(grid):
    node = add_node(grid.pool, "n1")

    allocation = put(grid, 2, vcpu=16, ram_gb=128)
    assert kept(node) == counted(node)
    assert (kept(node)["room_idle"], kept(node)["room_vcpu_held"]) == (6, 16)

    resize(grid, allocation, 5, vcpu=40, ram_gb=300)
    assert kept(node) == counted(node)
    assert (kept(node)["room_idle"], kept(node)["room_ram_gb_held"]) == (3, 300)

    with transaction.atomic():
        release(allocation.workload.instance)
    assert kept(node) == counted(node) == kept(add_node(grid.pool, "fresh"))


def test_the_kept_room_counts_shares_of_a_card(task_world):
    node = task_world.nodes["h1"]
    for milli in (300, 300):
        task = TaskFactory(organization=task_world.organization, accelerator_milli=milli)
        allocate_task(task, node=node)

    assert kept(node) == counted(node)
    assert (kept(node)["room_idle"], kept(node)["room_free_milli"]) == (7, 7400)


def test_registering_a_node_again_recounts_its_room(grid):
    node = add_node(grid.pool, "n1", accelerators=8)
    put(grid, 2)

    add_node(grid.pool, "n1", accelerators=4, vcpu=64, ram_gb=512)

    assert kept(node) == counted(node)
    assert (kept(node)["room_cards"], kept(node)["room_idle"]) == (4, 2)


def test_a_drifted_room_is_corrected_by_the_capacity_samplers_beat(grid):
    node, other = add_node(grid.pool, "n1"), add_node(grid.pool, "n2")
    out_of_service(node, 0, 1)  # behind the kept room, as no path of the portal writes
    Node.objects.filter(pk=other.pk).update(room_vcpu_held=99)

    tasks.sample_capacity()

    assert kept(node) == counted(node) and kept(node)["room_idle"] == 6
    assert kept(other) == counted(other)
    assert correct_rooms() == []  # nothing left to correct, and nothing locked


def test_a_room_kept_too_free_costs_a_retry_never_an_oversell(grid):
    """The shortlist proposes a node whose kept room says it is free while its cards are held:
    the count under its lock refuses it, keeps what it counted, and the host goes on."""
    stale = add_node(grid.pool, "n1", accelerators=2)
    add_node(grid.pool, "n2", accelerators=8)
    # n1 is the better fit; its cards taken behind its kept room.
    holder = put(grid, 2)
    assert holder.node == stale
    Node.objects.filter(pk=stale.pk).update(room_idle=2, room_free_milli=2000)

    allocation = put(grid, 2)

    assert allocation.node.hostname == "n2"
    assert Accelerator.objects.filter(node=stale, allocation__isnull=False).count() == 2
    assert kept(stale) == counted(stale)  # the lock wrote back what it counted
    placement = Placement.objects.get(workload=allocation.workload)
    assert placement.weights["considered"]["rejected"] == {"taken": 1}


def test_a_quote_that_finds_a_node_counts_no_other(grid):
    """A quote needs the best node's region only: the nodes that fitted or not are counted
    when a placement keeps them."""
    for index in range(4):
        add_node(grid.pool, f"n{index}")
    family = FlavorFamilyFactory(park=grid.park, accelerator_model=grid.model)
    flavor = FlavorFactory(family=family, accelerator_count=1, vcpu=16, ram_gb=128)
    plan = plan_placement(park=grid.park, flavor=flavor, shape=shape(grid, 1))

    with CaptureQueriesContext(connection) as quoted:
        assert region_of(plan, flavor) == grid.center
    with CaptureQueriesContext(connection) as counting:
        considered = plan.weights["considered"]

    assert len(quoted) == 0
    assert len(counting) == 1  # none rejected: none listed
    assert considered["fitted"] == 4 and considered["rejected"] == {}
