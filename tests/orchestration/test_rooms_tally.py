"""How many schedulable nodes have each kind of room (`RoomTally`), kept by a trigger on
PostgreSQL for placement's census: equal to counting the nodes after anything that changes
them, never a row that two transactions wait for, and folded and corrected on the capacity
sampler's beat."""

import threading

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from apps.orchestration import services, shortlist
from apps.orchestration.models import Node, NodeHealth, RoomTally
from apps.orchestration.reservations import release
from apps.orchestration.rooms import TALLY_CLASS, correct_rooms
from tests.orchestration.test_rooms import resize
from tests.orchestration.test_services_placement import add_node, new_instance, put, shape

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def tallied() -> dict:
    """{kind of room: nodes} as the tally sums it over its rows."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {TALLY_CLASS}, SUM(nodes) FROM orchestration_roomtally "
            f"GROUP BY {TALLY_CLASS} HAVING SUM(nodes) <> 0"
        )
        return {tuple(row[:-1]): row[-1] for row in cursor.fetchall()}


def recounted() -> dict:
    """{kind of room: nodes} counted from the nodes that may take new work."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {TALLY_CLASS}, COUNT(*) FROM orchestration_node "
            f"WHERE health = 'healthy' AND NOT is_drained GROUP BY {TALLY_CLASS}"
        )
        return {tuple(row[:-1]): row[-1] for row in cursor.fetchall()}


def kind(node) -> tuple:
    node.refresh_from_db()
    return (
        node.pool_id,
        node.room_cards,
        node.room_idle,
        node.vcpu_total,
        node.room_vcpu_held,
        node.ram_gb_total,
        node.room_ram_gb_held,
    )


def test_the_tally_follows_nodes_registered_placed_resized_released_and_taken_away(grid):
    big, small = add_node(grid.pool, "big"), add_node(grid.pool, "small", 4, 64, 512)
    add_node(grid.pool, "also-big")
    add_node(grid.pool, "cardless", 0, 16, 64)
    assert tallied() == recounted()
    assert tallied()[kind(big)] == 2 and tallied()[kind(small)] == 1

    allocation = put(grid, 2, vcpu=16, ram_gb=128)
    assert tallied() == recounted()
    resize(grid, allocation, 3, vcpu=40, ram_gb=300)
    assert tallied() == recounted()
    with transaction.atomic():
        release(allocation.workload.instance)
    assert tallied() == recounted()

    Node.objects.filter(pk=small.pk).update(health=NodeHealth.DOWN)
    assert kind(small) not in tallied()
    Node.objects.filter(pk=small.pk).update(health=NodeHealth.HEALTHY, is_drained=True)
    assert kind(small) not in tallied()
    Node.objects.filter(pk=small.pk).update(is_drained=False)
    assert tallied()[kind(small)] == 1

    Node.objects.filter(pk=big.pk).update(telemetry={"updated_at": "now"})  # no room changed
    assert tallied() == recounted()
    Node.objects.filter(pk=big.pk).delete()
    assert tallied() == recounted()
    assert sum(tallied().values()) == 3


def test_a_census_from_the_tally_counts_as_scanning_the_nodes(grid):
    nodes = [add_node(grid.pool, f"n{i}") for i in range(6)] + [
        add_node(grid.pool, "small", 2, 8, 32),
        add_node(grid.pool, "cardless", 0, 16, 64),
    ]
    put(grid, 8, vcpu=8, ram_gb=8)
    put(grid, 6, vcpu=120, ram_gb=8)
    wanted = shape(grid, 2, vcpu=16, ram_gb=128)
    for excluding in ((), (nodes[0].pk, nodes[3].pk, nodes[-1].pk)):
        query = shortlist._Query([grid.pool], wanted, excluding, timezone.now())
        census = query.census()
        counted = shortlist.sql.fetch_all(
            Node, shortlist._COUNTED_SQLITE.format(candidate=query.candidate), query.params
        )
        refused = shortlist.sql.fetch_all(
            Node,
            shortlist._REFUSED.format(candidate=query.candidate, columns=shortlist._COLUMNS),
            query.params,
        )
        assert census.fitted == sum(count for code, count, _ in counted if code is None)
        assert census.rejected == {code: count for code, count, _ in counted if code}
        assert census.rejected  # the full, the busy, the small and the cardless
        assert [(node.pk, code) for node, code in census.refused] == [
            (row[1], row[0]) for row in refused
        ]


def test_the_beat_folds_the_tally_and_corrects_drift(grid):
    node = add_node(grid.pool, "n1")
    add_node(grid.pool, "n2", 4, 64, 512)
    RoomTally.objects.filter(backend__gt=0).update(nodes=F("nodes") + 5)  # spoiled by hand

    correct_rooms()

    assert tallied() == recounted()
    assert not RoomTally.objects.exclude(backend=0).exists()  # folded into one row a kind
    assert not RoomTally.objects.filter(nodes=0).exists()
    assert RoomTally.objects.get(pool=grid.pool, room_idle=8).nodes == 1
    found = shortlist.shortlist(pools=[grid.pool], shape=shape(grid, 1), now=timezone.now())
    assert found.census.fitted == 2 and found.nodes[0].pk == node.pk


@pytest.mark.django_db(transaction=True)
def test_two_placements_on_nodes_of_one_kind_never_wait_for_each_other(grid):
    """Both nodes leave the same kind of room at once: each transaction adds to its own rows,
    so the second commits while the first is still open (a lock wait would time out), and the
    beat folds around the open one without waiting for it either."""
    first, second = add_node(grid.pool, "n1"), add_node(grid.pool, "n2")
    instances = [new_instance(grid), new_instance(grid)]
    placed, done, errors = threading.Event(), threading.Event(), []

    def place_and_hold():
        try:
            with transaction.atomic():
                services._allocate_on(first, instance=instances[0], shape=shape(grid, 1))
                placed.set()
                assert done.wait(20)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=place_and_hold)
    thread.start()
    assert placed.wait(10)
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            assert services._allocate_on(second, instance=instances[1], shape=shape(grid, 1))
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            correct_rooms()
        assert tallied() == recounted()  # the open placement is in neither
    finally:
        done.set()
        thread.join(20)

    assert errors == []
    assert RoomTally.objects.exclude(backend=0).exists()  # the open one's, skipped
    assert tallied() == recounted()
    assert tallied()[kind(first)] == 2  # both nodes have the same room left
    correct_rooms()
    assert not RoomTally.objects.exclude(backend=0).exists()
