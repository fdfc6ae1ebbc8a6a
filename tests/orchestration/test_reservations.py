"""The one reservation path (apps/orchestration/reservations.py): a host's reserve takes the
quota, then the funds, then room on a node, and refuses a step out of that order; a pass's
reservation takes a gang's room on all of its nodes or none; release gives back the room a host
or a task holds. What each use case refuses through it is tested with the use case (orders,
operations, the queue pass)."""

import pytest
from django.db import transaction

from apps.billing.services import InsufficientFunds
from apps.orchestration.models import Allocation, NodeHealth, Task
from apps.orchestration.reservations import release, reserve, reserve_tasks
from apps.orchestration.rooms import NodeRoom
from apps.orchestration.services import device_indices, live_allocation
from apps.quotas.services import QuotaExceeded, Usage
from tests.factories import QuotaLimitFactory, TaskFactory, WalletFactory
from tests.orchestration.test_services_placement import (
    add_node,
    free,
    held,
    new_instance,
    put,
    shape,
)

# --- reserve ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_reserve_checks_the_quota_before_the_funds(grid):
    QuotaLimitFactory(park=grid.park, organization=grid.organization, limit=1)
    WalletFactory(organization=grid.organization, balance_minor=0)

    with transaction.atomic(), pytest.raises(QuotaExceeded, match="quota for"):
        reserve(organization=grid.organization, demand=Usage(accelerators=2), funds_minor=500)
    with transaction.atomic(), pytest.raises(InsufficientFunds, match="Not enough balance"):
        reserve(organization=grid.organization, demand=Usage(accelerators=1), funds_minor=500)


@pytest.mark.django_db
def test_a_host_reservation_holds_the_first_hour_on_the_wallet_it_checked(grid):
    wallet = WalletFactory(organization=grid.organization, balance_minor=1000)
    instance = new_instance(grid)

    with transaction.atomic():
        reservation = reserve(organization=grid.organization, funds_minor=300)
        hold = reservation.hold(instance, amount_minor=300)

    wallet.refresh_from_db()
    assert (hold.workload_id, hold.amount_minor) == (instance.workload_id, 300)
    assert wallet.held_minor == 300


@pytest.mark.django_db
def test_a_host_reservation_refuses_steps_out_of_the_lock_order(grid):
    add_node(grid.pool, "n1")
    WalletFactory(organization=grid.organization, balance_minor=1000)
    instance, other = new_instance(grid), new_instance(grid)

    with transaction.atomic():
        with pytest.raises(RuntimeError, match="funds reserved first"):
            reserve(organization=grid.organization).hold(instance, amount_minor=1)
        reservation = reserve(organization=grid.organization, funds_minor=1)
        reservation.place(
            instance, shape=shape(grid, 1), region=None, preference="balanced", plan=None
        )
        with pytest.raises(RuntimeError, match="before any node"):
            reservation.hold(other, amount_minor=1)  # the wallet after a node


# --- a pass's tasks --------------------------------------------------------------------------


def task_on(grid, *, nodes: int, cards: int):
    return TaskFactory(
        organization=grid.organization,
        node_count=nodes,
        accelerator_milli=cards * 1000,
        vcpu=4,
        ram_gb=16,
    )


@pytest.mark.django_db
def test_a_gang_takes_room_on_all_of_its_nodes_or_on_none(grid):
    first = add_node(grid.pool, "g1", accelerators=4)
    second = add_node(grid.pool, "g2", accelerators=4)
    task = task_on(grid, nodes=2, cards=2)
    second.health = NodeHealth.DOWN
    second.save(update_fields=["health"])

    with transaction.atomic():
        reservation = reserve_tasks(
            park=grid.park, organizations={grid.organization}, node_ids=[first.pk, second.pk]
        )
        assert reservation.take(task, grid.model, [first.pk, second.pk]) is None
        assert reservation.rooms[first.pk].idle_cards == 4  # nothing taken on the first
        assert reservation.take(task, grid.model, [first.pk]) is not None  # it has room

    second.health = NodeHealth.HEALTHY
    second.save(update_fields=["health"])
    with transaction.atomic():
        reservation = reserve_tasks(
            park=grid.park, organizations={grid.organization}, node_ids=[first.pk, second.pk]
        )
        members = reservation.take(task, grid.model, [first.pk, second.pk])

    assert [(allocation.node, len(cards)) for allocation, cards in members] == [
        (first, 2),
        (second, 2),
    ]


@pytest.mark.django_db
def test_a_pass_reservation_refuses_a_task_over_quota_with_reserves_message(grid):
    node = add_node(grid.pool, "g1", accelerators=8)
    QuotaLimitFactory(park=grid.park, organization=grid.organization, limit=3)
    task = task_on(grid, nodes=2, cards=2)

    with transaction.atomic():
        reservation = reserve_tasks(
            park=grid.park, organizations={grid.organization}, node_ids=[node.pk]
        )
        with pytest.raises(QuotaExceeded, match="0 in use \\+ 4 asked exceeds the limit of 3"):
            reservation.take(task, grid.model, [node.pk])
        assert reservation.rooms[node.pk].idle_cards == 8


# --- release ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_release_gives_everything_back(grid):
    node = add_node(grid.pool, "n1")
    allocation = put(grid, 4, vcpu=64, ram_gb=512)
    instance = allocation.workload.instance
    assert device_indices(instance) == (0, 1, 2, 3)

    release(instance)

    allocation.refresh_from_db()
    assert allocation.released_at is not None
    assert free(node) == 8
    assert live_allocation(instance) is None
    assert device_indices(instance) == ()
    room = NodeRoom.lock([node.pk])[node.pk]
    assert (room.idle_cards, room.vcpu_free, room.ram_gb_free) == (8, 128, 1024)

    release(instance)  # nothing held: a no-op
    assert Allocation.objects.get().released_at == allocation.released_at


@pytest.mark.django_db
def test_released_cards_are_placed_again(grid):
    node = add_node(grid.pool, "n1", accelerators=4)
    first = put(grid, 4)
    release(first.workload.instance)

    second = put(grid, 4)

    assert second.node == node
    assert held(second) == [0, 1, 2, 3]
    assert Allocation.objects.filter(released_at__isnull=True).get() == second


@pytest.mark.django_db
def test_release_touches_only_that_instance(grid):
    node = add_node(grid.pool, "n1")
    keep = put(grid, 3)
    drop = put(grid, 2)

    release(drop.workload.instance)

    assert held(keep) == [0, 1, 2]
    assert free(node) == 5


@pytest.mark.django_db
def test_release_gives_back_a_gang_tasks_room_on_every_node(grid):
    nodes = [add_node(grid.pool, f"g{n}", accelerators=4) for n in (1, 2)]
    task = task_on(grid, nodes=2, cards=2)
    with transaction.atomic():
        reservation = reserve_tasks(
            park=grid.park, organizations={grid.organization}, node_ids=[n.pk for n in nodes]
        )
        members = reservation.take(task, grid.model, [n.pk for n in nodes])
        Allocation.objects.bulk_create([allocation for allocation, _cards in members])
        for allocation, cards in members:
            allocation.node.accelerators.filter(pk__in=cards).update(allocation=allocation)
    assert [free(node) for node in nodes] == [2, 2]

    assert release(Task.objects.get(pk=task.pk))

    assert [free(node) for node in nodes] == [4, 4]
    assert not Allocation.objects.filter(released_at__isnull=True).exists()
    assert not release(task)  # nothing held: a no-op
