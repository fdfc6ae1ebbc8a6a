"""A probe moves its nodes' health by NODE_HEALTH_TRANSITIONS: each move it makes is in the
table and audited with the park, and a move the table refuses writes nothing of the probe."""

import pytest

from apps.core.errors import InvalidTransition
from apps.core.models import AuditEvent
from apps.orchestration import services
from apps.orchestration.models import NODE_HEALTH_TRANSITIONS, Backend, Node, NodeHealth
from apps.orchestration.services import probe_backend

pytestmark = pytest.mark.django_db


def reported(world, *, healthy: bool):
    config = {**world.backend.config, "unhealthy": [] if healthy else ["h1"]}
    Backend.objects.filter(pk=world.backend.pk).update(config=config)


def with_health(node, health) -> Node:
    Node.objects.filter(pk=node.pk).update(health=health)
    return node


@pytest.mark.parametrize(
    ("before", "healthy", "after"),
    [
        (NodeHealth.HEALTHY, False, NodeHealth.DOWN),
        (NodeHealth.DEGRADED, False, NodeHealth.DOWN),
        (NodeHealth.DOWN, True, NodeHealth.HEALTHY),
    ],
)
def test_a_probe_moves_health_as_the_table_allows_and_audits_it(task_world, before, healthy, after):
    node = with_health(task_world.nodes["h1"], before)
    reported(task_world, healthy=healthy)

    probe_backend(backend=task_world.backend)

    assert Node.objects.get(pk=node.pk).health == after
    event = AuditEvent.objects.get(action="node.health_changed")
    assert (event.object_id, event.park_id) == (str(node.pk), task_world.park.pk)
    assert event.data == {"from": before, "to": after}


@pytest.mark.parametrize("health", [NodeHealth.HEALTHY, NodeHealth.DEGRADED])
def test_a_healthy_reading_leaves_a_node_that_is_up_as_it_is(task_world, health):
    node = with_health(task_world.nodes["h1"], health)
    reported(task_world, healthy=True)

    probe_backend(backend=task_world.backend)

    assert Node.objects.get(pk=node.pk).health == health
    assert not AuditEvent.objects.filter(action="node.health_changed").exists()


def test_a_move_the_table_refuses_is_refused_and_the_probe_writes_nothing(task_world, monkeypatch):
    never_down = {**NODE_HEALTH_TRANSITIONS, NodeHealth.HEALTHY: frozenset({NodeHealth.DEGRADED})}
    monkeypatch.setattr(services, "NODE_HEALTH_TRANSITIONS", never_down)
    node = task_world.nodes["h1"]
    reported(task_world, healthy=False)

    with pytest.raises(InvalidTransition, match="h1"):
        probe_backend(backend=task_world.backend)

    node = Node.objects.get(pk=node.pk)
    assert (node.health, node.telemetry, node.last_seen_at) == (NodeHealth.HEALTHY, {}, None)
    assert not AuditEvent.objects.filter(action="node.health_changed").exists()
