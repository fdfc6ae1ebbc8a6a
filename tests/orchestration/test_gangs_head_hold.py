"""A gang waiting at the head of the queue holds the nodes nearest to taking it, so the tasks
behind it do not keep taking the room it waits for; tasks ahead of it still may."""

import pytest

from apps.orchestration.models import TaskState
from tests.orchestration.test_gangs import gang, gang_world  # noqa: F401 (a fixture)
from tests.orchestration.test_scheduling import hold_cards, reload

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_busy(gang_world):  # noqa: F811
    """g1 and g2 keep one card free each, g3 all four: a 2 × 2 gang waits for one more node."""
    held = {name: hold_cards(gang_world.nodes[name], 3) for name in ("g1", "g2")}
    return gang_world, held


def test_a_waiting_gang_holds_its_nodes_against_tasks_behind_it(two_busy):
    world, _held = two_busy
    waiting = gang(world)
    late = world.submit(name="late", accelerator_milli=4000, vcpu=4, ram_gb=16)
    small = world.submit(name="small", accelerator_milli=1000, vcpu=4, ram_gb=16)

    result = world.schedule()

    nodes = world.nodes
    assert result.gang_held == {waiting.pk: [nodes["g3"].pk, nodes["g1"].pk]}
    assert reload(waiting).state == TaskState.QUEUED
    assert reload(late).state == TaskState.QUEUED  # g3 alone could take it: held for the gang
    assert reload(small).node == nodes["g2"]  # backfilled outside the hold
    assert world.free_cards(nodes["g3"]) == 4
    assert "Nodes g1, g3 are held for it" in reload(waiting).logs


def test_a_task_ahead_of_the_gang_still_takes_the_held_room(two_busy):
    world, _held = two_busy
    early = world.submit(name="early", accelerator_milli=4000, vcpu=4, ram_gb=16)
    waiting = gang(world)

    world.schedule()

    assert reload(early).node == world.nodes["g3"]
    assert reload(waiting).state == TaskState.QUEUED


def test_the_gang_starts_on_its_held_nodes_once_they_free(two_busy):
    world, held = two_busy
    waiting = gang(world)
    world.submit(name="late", accelerator_milli=4000, vcpu=4, ram_gb=16)
    world.schedule()
    held["g1"].accelerators.update(allocation=None)

    world.schedule()

    waiting = reload(waiting)
    assert waiting.state == TaskState.PLACED
    assert {a.node.hostname for a in waiting.workload.allocations.filter(released_at=None)} == {
        "g1",
        "g3",
    }
