"""apps.orchestration.rooms: what a node's room counts under its lock (exact sums, cards out of
service), and that every path taking cards takes them through it the same way: a new host, a
stopped host starting again on its node, a resize, and two of them at once on PostgreSQL."""

import threading

import pytest
from django.db import connection, transaction

from apps.orchestration.models import Accelerator, Allocation, Node, NodeHealth
from apps.orchestration.reservations import release
from apps.orchestration.rooms import NodeRoom
from apps.orchestration.selectors import schedulable_nodes
from apps.orchestration.services import (
    NoCapacity,
    allocate_again,
    live_allocation,
    resize_capacity,
)
from apps.orders.models import Instance
from tests.factories import AllocationFactory
from tests.locks import wait_for_a_blocked_lock
from tests.orchestration.test_services_placement import add_node, free, held, put, shape


def room_of(node) -> NodeRoom:
    return NodeRoom.lock([node.pk])[node.pk]


def out_of_service(node, *indices) -> None:
    Accelerator.objects.filter(node=node, index__in=indices).update(out_of_service=True)


def stopped(grid, node, accelerators, **sizes) -> Instance:
    """A host placed on `node`, then stopped: it gave its cards back and keeps its node."""
    instance = put(grid, accelerators, **sizes).workload.instance
    Instance.objects.filter(pk=instance.pk).update(node=node)
    instance.refresh_from_db()
    with transaction.atomic():
        release(instance)
    return instance


def start(grid, instance, accelerators) -> Allocation:
    with transaction.atomic():
        return allocate_again(instance, shape(grid, accelerators))


def resize(grid, allocation, accelerators, **sizes) -> None:
    with transaction.atomic():
        resize_capacity(allocation.workload.instance, shape(grid, accelerators, **sizes))


# --- what a room counts ----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_rooms_sums_are_exact(grid):
    busy = add_node(grid.pool, "busy", accelerators=8, vcpu=256, ram_gb=2048)
    idle = add_node(grid.pool, "idle", accelerators=4, vcpu=64, ram_gb=512)
    put(grid, 4, vcpu=48, ram_gb=384)  # an exact fit: fills "idle"
    busy_allocations = [
        put(grid, 4, vcpu=40, ram_gb=300),
        put(grid, 2, vcpu=24, ram_gb=200),
        put(grid, 1, vcpu=10, ram_gb=100),
    ]
    gone = put(grid, 1, vcpu=99, ram_gb=999)
    release(gone.workload.instance)
    AllocationFactory(node=busy, for_task=True, vcpu=7, ram_gb=11)  # a task: no cards

    assert {a.node for a in [*busy_allocations, gone]} == {busy}
    rooms = NodeRoom.lock([busy.pk, idle.pk])

    assert rooms[busy.pk].idle_cards == 1
    assert rooms[busy.pk].vcpu_free == 256 - (40 + 24 + 10 + 7)
    assert rooms[busy.pk].ram_gb_free == 2048 - (300 + 200 + 100 + 11)
    assert rooms[idle.pk].idle_cards == 0
    assert (rooms[idle.pk].vcpu_free, rooms[idle.pk].ram_gb_free) == (64 - 48, 512 - 384)
    assert rooms[idle.pk].node == idle


@pytest.mark.django_db
def test_the_room_of_an_untouched_of_a_full_and_of_a_cardless_node(grid):
    empty = add_node(grid.pool, "empty", accelerators=4)
    full = add_node(grid.pool, "full", accelerators=2)
    put(grid, 2)
    cpu_only = Node.objects.create(
        pool=grid.pool, hostname="cpu-only", vcpu_total=32, ram_gb_total=64
    )

    rooms = NodeRoom.lock([empty.pk, full.pk, cpu_only.pk])

    assert (rooms[empty.pk].idle_cards, rooms[empty.pk].vcpu_free) == (4, 128)
    assert rooms[empty.pk].ram_gb_free == 1024
    assert rooms[full.pk].idle_cards == 0
    assert (rooms[cpu_only.pk].idle_cards, rooms[cpu_only.pk].cards) == (0, [])


@pytest.mark.django_db
def test_a_room_reads_its_node_with_pool_and_region(grid, django_assert_num_queries):
    add_node(grid.pool, "n1")
    put(grid, 3, vcpu=30, ram_gb=300)
    (node,) = schedulable_nodes(park=grid.park, accelerator_model_id=grid.model.pk)

    room = room_of(node)

    assert (room.idle_cards, room.vcpu_free, room.ram_gb_free) == (5, 128 - 30, 1024 - 300)
    with django_assert_num_queries(0):
        assert room.node.pool.region == grid.center


@pytest.mark.django_db
def test_a_room_counts_what_it_wrote(grid):
    """After a take, a resize up and one down, the room in memory is what a fresh count reads."""
    node = add_node(grid.pool, "n1")
    instance = stopped(grid, node, 1)
    out_of_service(node, 3)
    room = room_of(node)
    allocation = Allocation(node=node, workload_id=instance.workload_id, vcpu=8, ram_gb=64)

    assert room.allocate(allocation, 2000)
    for cards, vcpu, ram_gb in ((2, 8, 64), (5, 40, 256), (1, 4, 32)):
        if cards != 2:
            assert room.resize(allocation, cards=cards, vcpu=vcpu, ram_gb=ram_gb)
        counted = room_of(node)
        assert [c.id for c in room.held_by(allocation)] == [
            c.id for c in counted.held_by(allocation)
        ]
        assert len(room.held_by(allocation)) == cards
        assert [c.free for c in room.cards] == [c.free for c in counted.cards]
        assert (room.vcpu_free, room.ram_gb_free) == (counted.vcpu_free, counted.ram_gb_free)
        assert (room.vcpu_free, room.ram_gb_free) == (128 - vcpu, 1024 - ram_gb)
    assert held(allocation) == [0]


# --- cards out of service are never taken ------------------------------------------------------


@pytest.mark.django_db
def test_a_new_host_passes_a_card_out_of_service_by(grid):
    node = add_node(grid.pool, "n1", accelerators=4)
    out_of_service(node, 0)

    assert held(put(grid, 2)) == [1, 2]


@pytest.mark.django_db
def test_a_start_passes_a_card_out_of_service_by(grid):
    node = add_node(grid.pool, "n1", accelerators=4)
    instance = stopped(grid, node, 2)  # it held cards 0 and 1
    out_of_service(node, 0)

    assert held(start(grid, instance, 2)) == [1, 2]


@pytest.mark.django_db
def test_a_resize_passes_a_card_out_of_service_by(grid):
    node = add_node(grid.pool, "n1")
    allocation = put(grid, 2)
    out_of_service(node, 2)

    resize(grid, allocation, 4)

    assert held(allocation) == [0, 1, 3, 4]


@pytest.mark.django_db
def test_a_start_is_refused_when_only_cards_out_of_service_are_free(grid):
    node = add_node(grid.pool, "n1", accelerators=2)
    instance = stopped(grid, node, 2)
    out_of_service(node, 1)

    with pytest.raises(NoCapacity) as excinfo:
        start(grid, instance, 2)

    assert "it needs 2 free accelerators and 1 are free" in excinfo.value.message
    assert live_allocation(instance) is None
    assert free(node) == 2  # neither card taken


@pytest.mark.django_db
def test_a_resize_is_refused_when_only_cards_out_of_service_are_free(grid):
    node = add_node(grid.pool, "n1", accelerators=4)
    allocation = put(grid, 2)
    out_of_service(node, 2, 3)

    with pytest.raises(NoCapacity) as excinfo:
        resize(grid, allocation, 3)

    assert "it needs 1 free accelerators and 0 are free" in excinfo.value.message
    assert held(allocation) == [0, 1]


# --- a host's own node: its state, and what it holds -------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "spoil",
    [{"is_drained": True}, {"health": NodeHealth.DEGRADED}],
    ids=["drained", "degraded"],
)
def test_a_host_starts_again_and_resizes_on_its_node_though_it_takes_no_new_work(grid, spoil):
    node = add_node(grid.pool, "n1")
    instance = stopped(grid, node, 2)
    neighbour = put(grid, 1)  # holds card 0
    Node.objects.filter(pk=node.pk).update(**spoil)

    allocation = start(grid, instance, 2)
    resize(grid, allocation, 3)

    assert held(allocation) == [1, 2, 3]
    assert held(neighbour) == [0]
    with pytest.raises(NoCapacity):
        put(grid, 1)  # new work goes elsewhere, and there is no elsewhere


@pytest.mark.django_db
def test_a_start_on_a_server_that_is_not_answering_is_refused(grid):
    node = add_node(grid.pool, "n1")
    instance = stopped(grid, node, 2)
    Node.objects.filter(pk=node.pk).update(health=NodeHealth.DOWN)

    with pytest.raises(NoCapacity) as excinfo:
        start(grid, instance, 2)

    assert excinfo.value.message == (
        f"The server n1 that holds {instance.name} is not answering. Start it again once the "
        "server is back, or release it."
    )
    assert free(node) == 8


@pytest.mark.django_db
def test_a_host_on_a_node_registered_smaller_since_can_still_shrink(grid):
    """Only what grows is counted: a node that holds more vCPU than it now has (registered
    with fewer) still lets a host there give some back."""
    node = add_node(grid.pool, "n1")
    allocation = put(grid, 4, vcpu=64, ram_gb=512)
    put(grid, 2, vcpu=48)
    add_node(grid.pool, "n1", accelerators=8, vcpu=100, ram_gb=1024)  # 112 vCPU held

    resize(grid, allocation, 2, vcpu=32, ram_gb=256)

    allocation.refresh_from_db()
    assert held(allocation) == [0, 1]
    assert (allocation.vcpu, allocation.ram_gb) == (32, 256)
    assert free(node) == 4


# --- two at once -----------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first", ["resize", "start"])
def test_a_start_and_a_resize_never_share_the_nodes_last_cards(grid, first):
    """Two hosts want the node's last two cards at once: one grows to them, one starts on
    them. The first holds the node's lock; the second waits for it, counts again, and is
    refused; no card is held twice and nothing else changes."""
    node = add_node(grid.pool, "n1", accelerators=4)
    starting = stopped(grid, node, 2)  # gave back cards 0 and 1
    growing = put(grid, 2)  # holds them now; cards 2 and 3 are the last
    actions = {
        "resize": lambda: resize(grid, growing, 4),
        "start": lambda: start(grid, starting, 2),
    }
    second = "start" if first == "resize" else "resize"
    holds_the_node, errors = threading.Event(), []

    def first_then_wait():
        try:
            with transaction.atomic():
                actions[first]()
                holds_the_node.set()
                wait_for_a_blocked_lock()  # the second waits on the node now
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=first_then_wait)
    thread.start()
    assert holds_the_node.wait(10)
    with pytest.raises(NoCapacity) as excinfo:
        actions[second]()
    thread.join(20)

    assert errors == []
    assert "it needs 2 free accelerators and 0 are free" in excinfo.value.message
    if first == "resize":
        assert held(growing) == [0, 1, 2, 3]
        assert live_allocation(starting) is None
    else:
        assert held(growing) == [0, 1]
        assert held(live_allocation(starting)) == [2, 3]
    assert free(node) == 0
